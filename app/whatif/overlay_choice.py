"""How the shown scenario is drawn over the measured timeline: the overlay-mode box of the toolbar
and the line under the legend that says what is drawn.

:class:`OverlayChoice` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`; it works on
the timeline and reads the shown scenario from the workbench's shared
:class:`~app.whatif.workbench_state.WorkbenchState`.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QComboBox, QLabel

from app.timeline.prediction_layers import VISIBLE_DIFF_PX
from app.timeline.timeline_view import OVERLAY_MODES, TimelineView
from app.whatif.headline import cpu_paced_text, rate_text
from app.whatif.runner import Scenario
from app.whatif.workbench_state import WorkbenchState

MEASURED_ONLY = "measured"


class OverlayChoice(QObject):
    """The overlay-mode box and the overlay note (see the module docstring)."""

    def __init__(self, timeline: TimelineView, state: WorkbenchState) -> None:
        super().__init__()
        self.timeline = timeline
        self.state = state
        self.mode_chosen = False  # the user picked a mode: it is kept for every scenario shown
        self.mode_combo = QComboBox()
        self.mode_combo.addItem("Overlay: off (measured only)", MEASURED_ONLY)
        for key, text in OVERLAY_MODES.items():
            self.mode_combo.addItem(f"Overlay: {text}", key)
        # shown (not chosen) when the estimator rebuilt the ranks: they cannot share rows
        self.mode_combo.addItem("Overlay: predicted ranks on their own (rebuilt job)", "separate")
        self.mode_combo.setToolTip("How the selected scenario's predicted timeline is drawn")
        self.mode_combo.activated.connect(self._on_mode_chosen)
        self.overlay_note = QLabel()  # under the legend (the main window places it)
        self.overlay_note.setContentsMargins(8, 2, 8, 3)
        self.overlay_note.setWordWrap(True)
        self.overlay_note.hide()

    def mode_for(self, s: Scenario) -> str:
        """The mode to draw ``s`` in: the user's choice, else what reads best for its kind."""
        if self.mode_chosen:
            return self.timeline.overlay_mode
        # a replay of the traced ranks: the measured timeline in its colours, outlined only where
        # the replay differs visibly; a what-if (where everything moves) as rows of its own
        return "differences" if s.kind == "replay" else "paired"

    def _on_mode_chosen(self, _index: int) -> None:
        mode = self.mode_combo.currentData()
        if mode == "separate":
            if self.state.shown is not None and self.state.shown.overlay.separate:
                self.timeline.set_prediction(self.state.shown.overlay)
            self.sync_mode_combo()
            return
        self.mode_chosen = True
        if mode == MEASURED_ONLY:
            self.timeline.set_prediction(None)
        elif self.state.shown is not None:
            self.timeline.set_prediction(self.state.shown.overlay, mode)
        else:
            self.timeline.overlay_mode = mode
        self.update_shown_label()

    def set_overlay_mode(self, mode: str) -> None:
        i = self.mode_combo.findData(mode)
        if i >= 0:
            self.mode_combo.setCurrentIndex(i)
            self._on_mode_chosen(i)

    def sync_mode_combo(self) -> None:
        """Show in the box what the timeline draws."""
        i = self.mode_combo.findData(self.timeline.shown_mode)
        self.mode_combo.setCurrentIndex(max(i, 0))

    def update_shown_label(self) -> None:
        """The line under the legend: which scenario is drawn, how, and its headline number."""
        s = self.state.shown
        mode = self.timeline.shown_mode
        if s is None or mode == "measured":
            self.overlay_note.setText("")
            self.overlay_note.hide()
            return
        sm = s.summary
        if sm.kind == "replay":
            tail = f"replay error {sm.replay_error_pct:.2f} %"
        elif sm.predicted_from:
            tail = f"{sm.error_pct:+.1f} % vs measured, hold-out"
        else:
            tail = f"{sm.change_pct:+.1f} % vs the replayed baseline"
        how = {
            "differences": "filled: measured · <b>outlined: predicted, where it differs by "
            f"{VISIBLE_DIFF_PX:g} px or more at this zoom</b>",
            "ghost": "filled: measured · <b>outlined: predicted</b>",
            "paired": "each measured row is followed by its <b>↳ predicted</b> row",
            "predicted": "predicted ranks only",
            "separate": "the predicted job's ranks (rebuilt by the estimator), then the measured ranks for reference",
        }[mode]
        paced = cpu_paced_text(sm)
        warn = f"<b style='color:#B45309'>⚠ {html.escape(paced.split(':')[0])}</b> — " if paced else ""
        self.overlay_note.setText(
            f"Overlay: <b>{html.escape(s.name)}</b> — {warn}{sm.iteration_us / 1000:.2f} ms per iteration "
            f"({tail}), <b>{html.escape(rate_text(sm))}</b> — {how}"
        )
        self.overlay_note.show()
