"""One group of the What-if panel's form (Parallelism, Model, ...): a line per knob with
what the trace says, how that was found, and the what-if value; and where a traced value comes
from (:func:`traced_value`)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QDoubleValidator, QIntValidator
from PySide6.QtWidgets import QComboBox, QGridLayout, QGroupBox, QLabel, QLineEdit

from lumos_core.perf.hardware import get_gpu, known_gpu_names
from lumos_core.perf.schedules import SCHEDULES
from lumos_core.whatif.config import RECOMPUTE_MODES, Baseline
from lumos_core.whatif.knobs import INT_KNOBS, OVERRIDABLE

SAME = "(as traced)"
# Knobs chosen from a list: the what-if editor is a combo box of these values.
CHOICES: dict[str, list[Any]] = {
    "schedule": list(SCHEDULES),
    "gpu": known_gpu_names(),
    "recompute": list(RECOMPUTE_MODES),
    "zero": [0, 1, 2, 3],
}


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
            if knob in OVERRIDABLE:
                cell: QLineEdit | QLabel = QLineEdit()
                cell.setValidator(QIntValidator(1, 10**9, cell))
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
                    editor.addItem(str(v), v)
                editor.currentIndexChanged.connect(self.edited)
            else:
                editor = QLineEdit()
                if knob in INT_KNOBS:
                    editor.setValidator(QIntValidator(1, 10**9, editor))
                else:
                    v = QDoubleValidator(0.001, 1e6, 3, editor)
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


def traced_value(b: Baseline | None, knob: str) -> tuple[Any, str, str]:
    """What the trace says of ``knob``: (value, confidence, how it was found)."""
    if b is None:
        return None, "unknown", ""
    if knob in ("nvlink_gbps", "network_gbps"):
        gpu = get_gpu(b.config.gpu)
        bw = gpu.nvlink_bandwidth if knob == "nvlink_gbps" else gpu.network_bandwidth
        return bw / 1e9, "inferred", f"{gpu.name} profile default"
    if knob == "schedule":
        return b.config.schedule, "guess", "assumed: the trace does not name its pipeline schedule"
    if knob in ("recompute", "zero"):
        return getattr(b.config, knob), "guess", "assumed: the trace does not record it"
    if knob == "cpu_scale":
        return 1.0, "certain", "the host time as traced"
    f = b.fields.get(knob)
    value = getattr(b.config, knob)
    if f is None:
        return value, "guess", "default"
    return value, f.confidence, f.how
