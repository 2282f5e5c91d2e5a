"""Sessions: the open job and its scenarios saved as configurations (no results), and reopened by
loading the traces again and recomputing every scenario in the background, then restoring the view
(shown scenario, overlay mode, compared pair).

:class:`SessionKeeping` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`. Opening the
traces is asked of the window through :class:`JobHost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtWidgets import QFileDialog, QWidget

from app.loaded_job import LoadedJob
from app.timeline.timeline_view import OVERLAY_MODES, TimelineView
from app.whatif.compare_view import CompareView
from app.whatif.overlay_choice import MEASURED_ONLY
from app.whatif.runner import Request, Scenario, WhatIfRunner
from lumos_core.errors import LumosError
from lumos_core.whatif.session import SUFFIX, ScenarioSpec, Session, load_session, save_session


class JobHost(Protocol):
    """What the workbench asks of the window that holds it: open traces (a token, or -1 when
    nothing was started) and say that something could not be opened."""

    def open_path(self, path: str | Path) -> int: ...
    def open_demo(self) -> int: ...
    def show_error(self, message: str) -> None: ...


class SessionKeeping:
    """Save and reopen sessions (see the module docstring)."""

    host: JobHost
    runner: WhatIfRunner
    timeline: TimelineView
    compare: CompareView
    loaded: LoadedJob | None
    is_demo: bool
    scenarios: dict[int, Scenario]
    shown: Scenario | None
    mode_chosen: bool

    pending_session: Session | None = None  # to restore once its job has opened
    restoring: Session | None = None  # its scenarios are being recomputed

    if TYPE_CHECKING:  # provided by the workbench and its overlay part

        def dialog_parent(self) -> QWidget | None: ...
        def notify(self, text: str, timeout_ms: int = 5000) -> None: ...
        def scenario_named(self, name: str) -> Scenario | None: ...
        def show_scenario(self, scenario_id: int | None) -> None: ...
        def set_overlay_mode(self, mode: str) -> None: ...
        def settle(self) -> None: ...

    def session(self) -> Session:
        """The open job and its scenarios, as a session (configurations only, no results)."""
        specs = [ScenarioSpec(s.name, s.kind, dict(s.changes)) for s in self.scenarios.values()]
        view: dict[str, Any] = {"overlay": self.timeline.shown_mode}
        if self.shown is not None:
            view["selected"] = self.shown.name
        if self.compare.a is not None and self.compare.b is not None:
            view["compare"] = [self.compare.a.name, self.compare.b.name]
            view["compare_offset_ms"] = self.compare.offset.value()
        path = None if self.is_demo or self.loaded is None else str(Path(self.loaded.path).resolve())
        return Session(path, self.is_demo, dict(self.runner.overrides), specs, view)

    def save_session(self, path: str | Path) -> Path:
        return save_session(self.session(), path)

    def ask_save_session(self) -> None:
        if self.loaded is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self.dialog_parent(), "Save session", f"session{SUFFIX}", f"Lumos sessions (*{SUFFIX} *.json)"
        )
        if path:
            self.save_session(path)
            self.notify(f"Saved the session to {path}", 10_000)

    def ask_open_session(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.dialog_parent(),
            "Open session",
            str(Path.home()),
            f"Lumos sessions (*{SUFFIX} *.json);;All files (*)",
        )
        if path:
            self.open_session(path)

    def open_session(self, path: str | Path) -> bool:
        """Open the session's traces, then recompute its scenarios in the background."""
        try:
            session = load_session(path)
        except LumosError as exc:
            self.host.show_error(str(exc))
            return False
        self.pending_session = session
        token = self.host.open_demo() if session.demo else self.host.open_path(session.trace_path or "")
        if token < 0:
            self.pending_session = None
            return False
        return True

    def restore_scenarios(self, session: Session) -> None:
        """Recompute the session's scenarios (the view is restored when the runner is idle)."""
        self.restoring = session
        for spec in session.scenarios:
            if spec.kind == "replay":
                self.runner.enqueue(Request("replay", name=spec.name))
            else:
                self.runner.enqueue(Request("estimate", dict(spec.changes), spec.name))
        if not self.runner.busy:  # an empty session
            self.settle()

    def apply_view(self, session: Session) -> None:
        view = session.view
        pair = view.get("compare")
        if isinstance(pair, list) and len(pair) == 2:
            a, b = self.scenario_named(str(pair[0])), self.scenario_named(str(pair[1]))
            if a is not None and b is not None:
                self.compare.set_scenarios(list(self.scenarios.values()))
                self.compare.offset.setValue(float(view.get("compare_offset_ms") or 0.0))
                self.compare.show_pair(a.id, b.id)
        selected = self.scenario_named(str(view.get("selected", "")))
        if selected is None and self.scenarios:
            selected = list(self.scenarios.values())[-1]
        mode = view.get("overlay")
        if isinstance(mode, str) and mode in OVERLAY_MODES:
            self.timeline.overlay_mode = mode
            self.mode_chosen = True
        if selected is not None:
            self.show_scenario(selected.id)
        if mode == MEASURED_ONLY:
            self.set_overlay_mode(MEASURED_ONLY)
