"""Sessions: the open job and its scenarios saved as configurations (no results), and reopened by
loading the traces again and recomputing every scenario in the background, then restoring the view
(shown scenario, overlay mode, compared pair).

:class:`SessionKeeping` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`. Opening the
traces is asked of the window through :class:`JobHost`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.timeline.timeline_view import OVERLAY_MODES, TimelineView
from app.whatif.compare_view import CompareView
from app.whatif.overlay_choice import MEASURED_ONLY, OverlayChoice
from app.whatif.runner import Request, WhatIfRunner
from app.whatif.workbench_state import WorkbenchState
from lumos_core.api.scenarios import SESSION_SUFFIX, ScenarioSpec, Session, load_session, save_session
from lumos_core.errors import LumosError


class JobHost(Protocol):
    """What the workbench asks of the window that holds it: open traces (a token, or -1 when
    nothing was started) and say that something could not be opened."""

    def open_path(self, path: str | Path) -> int: ...
    def open_demo(self) -> int: ...
    def show_error(self, message: str) -> None: ...


class SessionKeeping(QObject):
    """Save and reopen sessions (see the module docstring)."""

    show_requested = Signal(object)  # the id of a scenario to show
    notice = Signal(str, int)  # text, milliseconds

    def __init__(
        self,
        host: JobHost,
        runner: WhatIfRunner,
        timeline: TimelineView,
        compare: CompareView,
        overlay: OverlayChoice,
        state: WorkbenchState,
        dialogs: QWidget,
    ) -> None:
        super().__init__()
        self.host, self.runner, self.timeline, self.compare = host, runner, timeline, compare
        self.overlay, self.state, self.dialogs = overlay, state, dialogs
        self.pending_session: Session | None = None  # to restore once its job has opened
        self.restoring: Session | None = None  # its scenarios are being recomputed

    def session(self) -> Session:
        """The open job and its scenarios, as a session (configurations only, no results)."""
        specs = [ScenarioSpec(s.name, s.kind, dict(s.changes)) for s in self.state.scenarios.values()]
        view: dict[str, Any] = {"overlay": self.timeline.shown_mode}
        if self.state.shown is not None:
            view["selected"] = self.state.shown.name
        if self.compare.a is not None and self.compare.b is not None:
            view["compare"] = [self.compare.a.name, self.compare.b.name]
            view["compare_offset_ms"] = self.compare.offset.value()
        path = (
            None
            if self.state.is_demo or self.state.loaded is None
            else str(Path(self.state.loaded.path).resolve())
        )
        return Session(path, self.state.is_demo, dict(self.runner.overrides), specs, view)

    def save_session(self, path: str | Path) -> Path:
        return save_session(self.session(), path)

    def ask_save_session(self) -> None:
        if self.state.loaded is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self.dialogs,
            "Save session",
            f"session{SESSION_SUFFIX}",
            f"Lumos sessions (*{SESSION_SUFFIX} *.json)",
        )
        if path:
            self.save_session(path)
            self.notice.emit(f"Saved the session to {path}", 10_000)

    def ask_open_session(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.dialogs,
            "Open session",
            str(Path.home()),
            f"Lumos sessions (*{SESSION_SUFFIX} *.json);;All files (*)",
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

    def take_pending(self) -> Session | None:
        """The session whose job has just opened (it is pending no more)."""
        session, self.pending_session = self.pending_session, None
        return session

    def restore_scenarios(self, session: Session) -> bool:
        """Recompute the session's scenarios (the view is restored by :meth:`settle` when the runner
        is idle); False: nothing to recompute (an empty session)."""
        self.restoring = session
        for spec in session.scenarios:
            if spec.kind == "replay":
                self.runner.enqueue(Request("replay", name=spec.name))
            else:
                self.runner.enqueue(Request("estimate", dict(spec.changes), spec.name))
        return self.runner.busy

    def settle(self) -> bool:
        """The runner is idle: give a reopened session its view back (True: one was)."""
        if self.restoring is None:
            return False
        session, self.restoring = self.restoring, None
        self.apply_view(session)
        return True

    def apply_view(self, session: Session) -> None:
        view = session.view
        pair = view.get("compare")
        if isinstance(pair, list) and len(pair) == 2:
            a, b = self.state.scenario_named(str(pair[0])), self.state.scenario_named(str(pair[1]))
            if a is not None and b is not None:
                self.compare.set_scenarios(self.state.listed())
                self.compare.offset.setValue(float(view.get("compare_offset_ms") or 0.0))
                self.compare.show_pair(a.id, b.id)
        selected = self.state.scenario_named(str(view.get("selected", "")))
        if selected is None and self.state.scenarios:
            selected = list(self.state.scenarios.values())[-1]
        mode = view.get("overlay")
        if isinstance(mode, str) and mode in OVERLAY_MODES:
            self.timeline.overlay_mode = mode
            self.overlay.mode_chosen = True
        if selected is not None:
            self.show_requested.emit(selected.id)
        if mode == MEASURED_ONLY:
            self.overlay.set_overlay_mode(MEASURED_ONLY)
