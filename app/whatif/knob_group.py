"""One group of the What-if panel's form (Parallelism, Model, ...): a line per knob with
what the trace says, how that was found, and the what-if value. The lines, editors and validators
come from the knob registry (:mod:`lumos_core.whatif.knob_registry`), as does :func:`traced_value`."""

from __future__ import annotations

from typing import Any

import re

from PySide6.QtCore import QRegularExpression, Signal
from PySide6.QtGui import QDoubleValidator, QIntValidator, QRegularExpressionValidator
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
                cell: QLineEdit | QLabel = trace_cell(spec)
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


def trace_cell(spec: Any) -> QLineEdit:
    """The editable "in the trace" value of an overridable knob: whole numbers for a count, the
    knob's words for a yes/no or choice knob (SP, MLP, recompute; a number validator there refused
    "true" and "swiglu"), wide enough to show its longest word ("false" was clipped to "alse")."""
    cell = QLineEdit()
    words = [spec.text(v) for v in CHOICES.get(spec.name, [])]
    if spec.type is int or not words:
        cell.setValidator(QIntValidator(int(spec.minimum or 0), 10**9, cell))
        cell.setMaximumWidth(70)
        return cell
    pattern = "|".join(re.escape(w) for w in words)
    rx = QRegularExpression(f"^({pattern})$", QRegularExpression.PatternOption.CaseInsensitiveOption)
    cell.setValidator(QRegularExpressionValidator(rx, cell))
    fm = cell.fontMetrics()
    width = max(fm.horizontalAdvance(w) for w in words) + 2 * fm.horizontalAdvance("M")
    cell.setMinimumWidth(width)
    cell.setMaximumWidth(max(70, width))
    return cell

