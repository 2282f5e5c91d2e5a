"""One group of the What-if panel's form (Parallelism, Model, ...): a line per knob with
what the trace says, how that was found, and the what-if value. The lines, editors and validators
come from the knob registry (:mod:`lumos_core.whatif.knob_registry`), as does :func:`traced_value`."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QDoubleValidator, QIntValidator
from PySide6.QtWidgets import QComboBox, QGridLayout, QGroupBox, QLabel, QLineEdit

from lumos_core.api.knobs import KNOB, REGISTRY, traced_value

__all__ = ["CHOICES", "SAME", "KnobGroup", "traced_value"]

SAME = "(as traced)"
# Knobs chosen from a list (choices, GPUs, yes/no): the what-if editor is a combo box of these values.
CHOICES: dict[str, list[Any]] = {k.name: k.values() for k in REGISTRY if k.values()}


class KnobGroup(QGroupBox):
    """The lines of ``knobs`` ((knob, label, tip) each). ``edited`` on any what-if change,
    ``submitted`` on Enter in a what-if field, ``override_edited`` when a traced value was typed."""

    edited = Signal()
    submitted = Signal()
    override_edited = Signal()

    def __init__(self, title: str, knobs: list[tuple[str, str, str]]) -> None:
        super().__init__(title)
        self.trace_cells: dict[str, QLineEdit | QLabel] = {}
        self.tags: dict[str, QLabel] = {}
        self.editors: dict[str, QLineEdit | QComboBox] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(3)
        head_trace = QLabel("<small>in the trace</small>")
        head_what = QLabel("<small>what if</small>")
        grid.addWidget(head_trace, 0, 1, 1, 2)
        grid.addWidget(head_what, 0, 3)
        for row, (knob, label, tip) in enumerate(knobs, start=1):
            name = QLabel(label)
            name.setToolTip(tip)
            grid.addWidget(name, row, 0)
            spec = KNOB[knob]
            if spec.overridable:
                cell: QLineEdit | QLabel = QLineEdit()
                cell.setValidator(QIntValidator(int(spec.minimum or 0), 10**9, cell))
                cell.setMaximumWidth(70)
                cell.editingFinished.connect(self.override_edited)
            else:
                cell = QLabel()
            tag = QLabel()
            self.trace_cells[knob] = cell
            self.tags[knob] = tag
            grid.addWidget(cell, row, 1)
            grid.addWidget(tag, row, 2)
            editor: QLineEdit | QComboBox
            if knob in CHOICES:
                editor = QComboBox()
                editor.addItem(SAME, None)
                for v in CHOICES[knob]:
                    editor.addItem(spec.text(v), v)
                editor.currentIndexChanged.connect(self.edited)
            else:
                editor = QLineEdit()
                if spec.type is int:
                    editor.setValidator(QIntValidator(int(spec.minimum or 0), 10**9, editor))
                else:
                    low = 0.001 if spec.minimum is None or spec.exclusive_minimum else spec.minimum
                    v = QDoubleValidator(low, spec.maximum or 1e6, 3, editor)
                    v.setNotation(QDoubleValidator.Notation.StandardNotation)
                    editor.setValidator(v)
                editor.setClearButtonEnabled(True)
                editor.textChanged.connect(self.edited)
                editor.returnPressed.connect(self.submitted)
            editor.setToolTip(tip)
            editor.setMinimumWidth(90)
            self.editors[knob] = editor
            grid.addWidget(editor, row, 3)
        grid.setColumnStretch(3, 1)
