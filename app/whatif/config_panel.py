"""The what-if side panel: the traced configuration and the changes to predict.

Groups of knobs (Parallelism, Model, Hardware, Memory: the knob registry's), one line per knob: what the trace says (with how it
was found: recorded, inferred, a guess, unknown, or given by the user) and the what-if value. An
empty what-if field keeps the traced value. Every edit is checked at once with
:func:`lumos_core.whatif.config.problems` and the problems are listed under the form, so an invalid
combination is explained before anything runs. Values the trace does not record (layers, heads,
sequence length, ...) can be typed into the trace column: they become baseline overrides, as
``lumos estimate --baseline-<knob>``.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.whatif.knob_group import SAME, KnobGroup, traced_value
from lumos_core.api.knobs import KNOB, Baseline, coerce_value, grouped, problems
from lumos_core.errors import LumosError

# The form's groups (Parallelism, Model, Hardware, Memory), one line (knob, label, tip) per knob: all
# from the knob registry, so a knob added there appears here.
GROUPS: list[tuple[str, list[tuple[str, str, str]]]] = [
    (title, [(k.name, k.label, k.help) for k in knobs]) for title, knobs in grouped()
]

# how a baseline value was found -> (tag, colour)
PROVENANCE = {
    "certain": ("recorded", "#1B7F3B"),
    "inferred": ("inferred", "#1F5FAD"),
    "guess": ("guess", "#A05A00"),
    "unknown": ("unknown", "#6B7280"),
    "given": ("given", "#6D28D9"),
}


class ConfigPanel(QWidget):
    """See the module docstring."""

    estimate_requested = Signal(dict, str)  # changes, scenario name ("" = automatic)
    replay_requested = Signal()
    overrides_changed = Signal(dict)
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.baseline: Baseline | None = None
        self.editors: dict[str, QLineEdit | QComboBox] = {}
        self.trace_cells: dict[str, QLineEdit | QLabel] = {}
        self.tags: dict[str, QLabel] = {}
        self.found: list[str] = []
        self._filling = False

        inner = QWidget()
        lay = QVBoxLayout(inner)
        lay.setContentsMargins(6, 6, 6, 6)
        self.intro = QLabel()
        self.intro.setWordWrap(True)
        lay.addWidget(self.intro)
        for title, knobs in GROUPS:
            group = KnobGroup(title, knobs)
            self.trace_cells.update(group.trace_cells)
            self.tags.update(group.tags)
            self.editors.update(group.editors)
            group.override_edited.connect(self._on_override_edited)
            group.edited.connect(self.validate)
            group.submitted.connect(self.request_estimate)
            lay.addWidget(group)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("scenario name (automatic)")
        self.name_edit.setClearButtonEnabled(True)
        self.name_edit.returnPressed.connect(self.request_estimate)
        self.notes_label = QLabel()
        self.notes_label.setWordWrap(True)
        self.notes_label.setStyleSheet("color: #6B7280;")
        lay.addWidget(self.notes_label)
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(inner)
        # the scenario name, problems, buttons and progress stay in view however the form scrolls
        bottom = QVBoxLayout()
        bottom.setContentsMargins(6, 4, 6, 6)
        bottom.addWidget(self.name_edit)
        self.world_label = QLabel()
        self.world_label.setWordWrap(True)
        bottom.addWidget(self.world_label)
        self.problems_label = QLabel()
        self.problems_label.setWordWrap(True)
        self.problems_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems_label.setStyleSheet("color: #B42318;")
        bottom.addWidget(self.problems_label)
        buttons = QHBoxLayout()
        self.estimate_button = QPushButton("Estimate")
        self.estimate_button.setDefault(True)
        self.estimate_button.setToolTip("Predict this configuration in the background (Ctrl+E)")
        self.estimate_button.clicked.connect(self.request_estimate)
        self.replay_button = QPushButton("Replay baseline")
        self.replay_button.setToolTip("Replay the traced configuration and compare with what was measured")
        self.replay_button.clicked.connect(self.replay_requested)
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Clear every what-if change")
        self.reset_button.clicked.connect(self.reset)
        buttons.addWidget(self.estimate_button)
        buttons.addWidget(self.replay_button)
        buttons.addWidget(self.reset_button)
        bottom.addLayout(buttons)
        # more actions (e.g. the Sweep dialog's button), each on its own line under the buttons: in
        # their row they would widen the dock, and with it shrink the timeline
        self._extra_actions = QVBoxLayout()
        bottom.addLayout(self._extra_actions)
        run_row = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_requested)
        run_row.addWidget(self.progress, 1)
        run_row.addWidget(self.cancel_button)
        bottom.addLayout(run_row)
        self.run_label = QLabel()
        self.run_label.setWordWrap(True)
        bottom.addWidget(self.run_label)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setStyleSheet("color: #B42318;")
        bottom.addWidget(self.error_label)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll, 1)
        outer.addLayout(bottom)
        # no explicit minimum width: it would override the layout's own minimum (the labels' text),
        # and a narrow dock would then clip "Data parallel (DP)" instead of scrolling sideways
        self.set_running(False)
        self.set_baseline(None)

    def add_action(self, button: QPushButton) -> None:
        """Offer another action on its own line under Estimate / Replay / Reset."""
        row = QHBoxLayout()
        row.addWidget(button)
        row.addStretch(1)
        self._extra_actions.addLayout(row)

    # ---- baseline
    def set_baseline(self, baseline: Baseline | None, error: str = "") -> None:
        """Show what the trace says (keeps the what-if fields: they still apply)."""
        self.baseline = baseline
        self._filling = True
        try:
            for knob, cell in self.trace_cells.items():
                value, conf, how = traced_value(self.baseline, knob)
                text = "" if value is None else KNOB[knob].text(value)
                if isinstance(cell, QLineEdit):
                    cell.setText(text)
                    cell.setPlaceholderText("unknown")
                    cell.setEnabled(baseline is not None)
                else:
                    cell.setText(text or "?")
                tag_text, color = PROVENANCE.get(conf, (conf, "#6B7280"))
                self.tags[knob].setText(f"<small style='color:{color}'>{html.escape(tag_text)}</small>")
                tip = html.escape(how) if how else ""
                if isinstance(cell, QLineEdit) and conf in ("unknown", "guess"):
                    tip += "<br>Type the value the trace was recorded with to unlock changing it."
                self.tags[knob].setToolTip(tip)
                cell.setToolTip(tip)
                editor = self.editors[knob]
                if isinstance(editor, QLineEdit):
                    editor.setPlaceholderText(text or "unknown")
                else:
                    editor.setItemText(0, f"{SAME}: {text}" if text else SAME)
        finally:
            self._filling = False
        if baseline is None:
            self.intro.setText(error or "Open a job to predict what-if configurations.")
            self.notes_label.setText("")
        else:
            self.intro.setText(
                "Start from the configuration inferred from the trace; leave a field empty to keep "
                "it. Hover a tag to see how a value was found."
            )
            self.notes_label.setText("<br>".join(html.escape(n) for n in baseline.notes))
        self.validate()

    def overrides(self) -> dict[str, Any]:
        """Baseline values the user typed into the trace column (differing from the inference)."""
        out: dict[str, Any] = {}
        b = self.baseline
        for knob, cell in self.trace_cells.items():
            if not isinstance(cell, QLineEdit) or not cell.text().strip():
                continue
            value = coerce_value(knob, cell.text())
            f = b.fields.get(knob) if b is not None else None
            if f is None or f.confidence == "given" or value != f.value:
                out[knob] = value
        return out

    def _on_override_edited(self) -> None:
        if not self._filling and self.baseline is not None:
            self.overrides_changed.emit(self.overrides())

    # ---- what-if values
    def changes(self) -> dict[str, Any]:
        """The what-if values that differ from the baseline (raises LumosError on a bad value)."""
        out: dict[str, Any] = {}
        base = self.baseline.config if self.baseline is not None else None
        for knob, editor in self.editors.items():
            if isinstance(editor, QComboBox):
                value = editor.currentData()
            else:
                text = editor.text().strip()
                value = coerce_value(knob, text) if text else None
            if value is None:
                continue
            if base is not None and getattr(base, knob) == value:
                continue
            out[knob] = value
        return out

    def set_changes(self, changes: dict[str, Any]) -> None:
        """Fill the what-if fields (e.g. from a scenario picked in the list)."""
        self._filling = True
        try:
            for knob, editor in self.editors.items():
                value = changes.get(knob)
                if isinstance(editor, QComboBox):
                    i = editor.findData(value) if value is not None else 0
                    editor.setCurrentIndex(max(i, 0))
                else:
                    editor.setText("" if value is None else KNOB[knob].text(value))
        finally:
            self._filling = False
        self.validate()

    def reset(self) -> None:
        self.set_changes({})
        self.name_edit.clear()

    def scenario_name(self) -> str:
        return self.name_edit.text().strip()

    def validate(self) -> list[str]:
        """Problems of the current values (shown under the form); enables Estimate when none."""
        found: list[str] = []
        label = ""
        world = ""
        if self.baseline is None:
            found = []
        else:
            base = self.baseline.config
            try:
                changes = self.changes()
                config = base.with_changes(**changes)
                found = problems(config, self.baseline)
                label = config.label(base)
                world = (
                    f"{base.world_size} GPU{'s' * (base.world_size != 1)} traced → "
                    f"{config.world_size} GPU{'s' * (config.world_size != 1)} "
                    f"(DP {config.dp} × TP {config.tp} × PP {config.pp}"
                    + (f" × CP {config.cp})" if config.cp > 1 else ")")
                )
                if not changes:
                    world += " — change a value to estimate a what-if"
            except LumosError as exc:
                found = [str(exc)]
        self.found = found
        self.world_label.setText(html.escape(world))
        self.name_edit.setPlaceholderText(f"scenario name (automatic: {label})" if label else "scenario name")
        self.problems_label.setText("<br>".join(f"⚠ {html.escape(p, quote=False)}" for p in found))
        self.problems_label.setVisible(bool(found))
        self._update_buttons()
        return found

    def _update_buttons(self) -> None:
        ok = self.baseline is not None and not self.found
        try:
            has_changes = bool(self.changes()) if ok else False
        except LumosError:
            has_changes = False
        self.estimate_button.setEnabled(ok and has_changes)
        self.replay_button.setEnabled(self.baseline is not None)
        self.reset_button.setEnabled(self.baseline is not None)

    def request_estimate(self) -> None:
        if self.validate() or self.baseline is None:
            return
        changes = self.changes()
        if changes:
            self.estimate_requested.emit(changes, self.scenario_name())

    def show_waiting(self, text: str) -> None:
        """Say what the form waits for (the job being read) instead of "Open a job…"."""
        if self.baseline is None and text:
            self.intro.setText(html.escape(text))

    # ---- run feedback
    def set_running(self, running: bool, message: str = "") -> None:
        self.progress.setVisible(running)
        self.cancel_button.setVisible(running)
        if running:
            self.progress.setValue(0)
            self.error_label.setText("")
        self.run_label.setText(html.escape(message))

    def set_progress(self, fraction: float, message: str) -> None:
        self.progress.setValue(int(1000 * min(max(fraction, 0.0), 1.0)))
        self.run_label.setText(html.escape(message))

    def show_error(self, message: str) -> None:
        self.error_label.setText(html.escape(message, quote=False))
