"""The knob fields of the Sweep dialog: one line per knob of the What-if panel, with the traced
value beside it and suggested values as the placeholder."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QLineEdit

from lumos_core.api.knobs import INT_KNOBS, Baseline, grouped
from lumos_core.api.sweep import default_values

# the What-if panel's knobs in its order, from the registry both are built from (not from the panel)
KNOBS = [(k.name, k.label) for _, knobs in grouped() for k in knobs]


class KnobGridForm(QGroupBox):
    """See the module docstring. ``edited`` on every keystroke, ``submitted`` on Enter."""

    edited = Signal()
    submitted = Signal()

    def __init__(self) -> None:
        super().__init__("Knobs to sweep (empty: as in the What-if panel)")
        form = QGridLayout(self)
        form.setVerticalSpacing(2)
        self.editors: dict[str, QLineEdit] = {}
        self.traced: dict[str, QLabel] = {}
        for row, (knob, label) in enumerate(KNOBS):
            form.addWidget(QLabel(label), row // 2, (row % 2) * 3)
            traced = QLabel()
            traced.setStyleSheet("color: #6B7280;")
            form.addWidget(traced, row // 2, (row % 2) * 3 + 1)
            edit = QLineEdit()
            edit.setClearButtonEnabled(True)
            edit.returnPressed.connect(self.submitted)
            edit.textChanged.connect(self.edited)
            form.addWidget(edit, row // 2, (row % 2) * 3 + 2)
            self.editors[knob] = edit
            self.traced[knob] = traced

    def set_texts(self, values: dict[str, str]) -> None:
        """Fill the knob fields (``{"dp": "8, 16"}``); the others are cleared."""
        for knob, edit in self.editors.items():
            edit.setText(values.get(knob, ""))

    def swept(self) -> dict[str, str]:
        """The knobs given values, with their text."""
        return {k: e.text().strip() for k, e in self.editors.items() if e.text().strip()}

    def show_baseline(self, baseline: Baseline | None) -> None:
        """The traced value beside each knob and suggestions from it; DP filled in if nothing is."""
        for knob, label in self.traced.items():
            v = getattr(baseline.config, knob) if baseline is not None else None
            label.setText(
                "traced: ?" if v is None else f"traced: {v:g}" if isinstance(v, float) else f"traced: {v}"
            )
            suggestions: list[Any] = []
            if knob == "gpu":
                suggestions = default_values(knob, v)
            elif knob in INT_KNOBS and v:
                suggestions = default_values(knob, v, limit=int(v) * 8)
            self.editors[knob].setPlaceholderText(", ".join(str(x) for x in suggestions[:6]))
        if baseline is not None and not self.swept():
            dp = baseline.config.dp
            self.editors["dp"].setText(", ".join(str(x) for x in default_values("dp", dp, dp * 8)))
