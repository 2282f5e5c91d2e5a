"""The runs the workbench asks its runner for: the baseline replay, estimates (an estimate computed
before with the same baseline and profile is shown again, not recomputed), one-knob sweeps, a
prediction of the open job from another measured run (What-if > Predict This Job from...), and the
hardware profile (``lumos calibrate``) they use.

:class:`RunRequests` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`: it owns the
hardware-profile button of the What-if panel; ``show_requested`` asks for a scenario computed before
to be shown again and ``notice`` for a passing message in the status bar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QPushButton, QWidget

from app.whatif.config_panel import ConfigPanel
from app.whatif.runner import BASELINE_NAME, Request, Scenario, WhatIfRunner
from app.whatif.workbench_state import WorkbenchState
from lumos_core.api.knobs import HardwareProfile
from lumos_core.errors import LumosError


class RunRequests(QObject):
    """Ask the runner for runs (see the module docstring)."""

    show_requested = Signal(object)  # the id of a scenario computed before
    notice = Signal(str, int)  # text, milliseconds

    def __init__(
        self, runner: WhatIfRunner, panel: ConfigPanel, state: WorkbenchState, dialogs: QWidget
    ) -> None:
        super().__init__()
        self.runner, self.panel, self.state, self.dialogs = runner, panel, state, dialogs
        self.profile_button = QPushButton(self.profile_text())
        self.profile_button.setToolTip(
            "Estimate with a hardware profile fitted on your cluster's runs (lumos calibrate): GEMM "
            "rates per shape class and collective parameters"
        )
        self.profile_button.clicked.connect(self.ask_hardware_profile)
        panel.add_action(self.profile_button)

    def request_replay(self) -> bool:
        return self.runner.request(Request("replay", name=BASELINE_NAME))

    def request_estimate(self, changes: dict[str, Any], name: str | None = None) -> bool:
        """Estimate ``changes`` (superseding any run). The same changes estimated before with the
        same baseline are shown again instead of recomputed."""
        existing = self._find(changes)
        if existing is not None and not name:
            self.show_requested.emit(existing.id)
            self.notice.emit(f"{existing.name}: already computed (shown).", 5000)
            return True
        return self.runner.request(Request("estimate", dict(changes), name or None))

    def enqueue_estimate(self, changes: dict[str, Any], name: str | None = None) -> bool:
        return self.runner.enqueue(Request("estimate", dict(changes), name or None))

    def request_sweep(self, knob: str, values: list[Any]) -> bool:
        return self.runner.request(Request("sweep", {}, knob=knob, values=list(values)))

    def _find(self, changes: dict[str, Any]) -> Scenario | None:
        for s in self.state.scenarios.values():
            if (
                s.kind == "estimate"
                and s.changes == changes
                and s.overrides == self.runner.overrides
                and s.profile == self.runner.profile_path
            ):
                return s
        return None

    def request_predict_from(self, source: str | Path) -> bool:
        """Predict the open job from another measured job (What-if > Predict This Job from...)."""
        return self.runner.request(Request("predict_from", {}, None, source=str(source)))

    def enqueue_predict_from(self, source: str | Path) -> bool:
        return self.runner.enqueue(Request("predict_from", {}, None, source=str(source)))

    def ask_predict_from(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self.dialogs, "Predict This Job from the Traces of Another Run"
        )
        if folder:
            self.request_predict_from(folder)

    def set_hardware_profile(self, path: str | Path | None) -> bool:
        """Use the hardware profile at ``path`` (lumos calibrate) for estimates and sweeps from now
        on; None: the built-in models. A bad file is reported and the current profile kept."""
        if path is None:
            self.runner.profile, self.runner.profile_path = None, ""
        else:
            try:
                profile = HardwareProfile.load(path)
            except LumosError as exc:
                self.panel.show_error(str(exc))
                return False
            self.runner.profile, self.runner.profile_path = profile, str(path)
        self.panel.show_error("")
        self.profile_button.setText(self.profile_text())
        self.notice.emit(f"Hardware profile: {self.profile_text()}", 5000)
        return True

    def profile_text(self) -> str:
        p = self.runner.profile
        if p is None:
            return "Hardware profile: built-in models…"
        return f"Hardware profile: {Path(self.runner.profile_path).name} ({p.device})…"

    def ask_hardware_profile(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.dialogs, "Hardware Profile (lumos calibrate)", "", "Hardware profile (*.json)"
        )
        if path:
            self.set_hardware_profile(path)
