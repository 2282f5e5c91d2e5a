"""What the parts of the What-if workbench share: the job open, its scenarios, the one drawn over
the timeline and the last error. One plain object, written by the workbench and read by its parts
(:mod:`app.whatif.overlay_choice`, :mod:`app.whatif.run_requests`, :mod:`app.whatif.scenario_export`,
:mod:`app.whatif.session_keeping`), so no part reaches into another for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.view_model.loaded_job import LoadedJob
from app.whatif.runner import Scenario


@dataclass
class WorkbenchState:
    """The shared state of the workbench's parts (see the module docstring)."""

    loaded: LoadedJob | None = None
    is_demo: bool = False
    scenarios: dict[int, Scenario] = field(default_factory=dict)
    shown: Scenario | None = None
    baseline_us: float | None = None  # the replayed baseline's iteration time
    last_error: str = ""

    def reset(self, loaded: LoadedJob | None, demo: bool) -> None:
        """A new job: no scenario, nothing shown, no error."""
        self.loaded, self.is_demo = loaded, demo
        self.scenarios, self.shown, self.baseline_us, self.last_error = {}, None, None, ""

    def listed(self) -> list[Scenario]:
        return list(self.scenarios.values())

    def scenario_named(self, name: str) -> Scenario | None:
        return next((s for s in self.scenarios.values() if s.name == name), None)

    def unique_name(self, name: str) -> str:
        """``name``, or ``name (2)``, ``name (3)``… when a scenario is already called so."""
        names = {s.name for s in self.scenarios.values()}
        if name not in names:
            return name
        k = 2
        while f"{name} ({k})" in names:
            k += 1
        return f"{name} ({k})"
