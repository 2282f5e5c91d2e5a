"""What the sweep views and dialog need of the what-if workbench's objects, as small structural
types: app/whatif builds the sweep widgets and hands them its runner, panel and outcomes, so naming
those classes here would make the two packages import each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance
    from PySide6.QtWidgets import QPushButton

    from app.view_model.loaded_job import LoadedJob
    from lumos_core.api.knobs import Baseline
    from lumos_core.api.sweep import GridRow, SweepReport
    from lumos_core.graph.model import ExecutionGraph
    from lumos_core.progress import Progress


class AxisSweep(Protocol):
    """A finished one-knob sweep (the what-if runner's ``SweepOutcome``)."""

    @property
    def knob(self) -> str: ...

    @property
    def report(self) -> SweepReport: ...

    @property
    def seconds(self) -> float: ...

    @property
    def rows(self) -> list[GridRow]: ...


class GraphSource(Protocol):
    """The job's execution graph, built on first use (the what-if runner's ``GraphCache``)."""

    def get(self, progress: Progress) -> ExecutionGraph: ...


class SweepEngine(Protocol):
    """The open job, its baseline and graph (the what-if runner)."""

    @property
    def loaded(self) -> LoadedJob | None: ...

    @property
    def baseline(self) -> Baseline | None: ...

    @property
    def cache(self) -> GraphSource | None: ...

    @property
    def baseline_changed(self) -> SignalInstance: ...


class HeldChanges(Protocol):
    """The What-if panel: the changes a grid holds, and a place for the dialog's button."""

    def changes(self) -> dict[str, Any]: ...

    def add_action(self, button: QPushButton) -> None: ...
