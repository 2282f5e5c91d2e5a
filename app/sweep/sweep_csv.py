"""A sweep's rows saved as ``lumos sweep --out`` writes them, so the CLI can resume from the file."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtWidgets import QFileDialog, QWidget

from lumos_core.api.sweep import GridRow, ResultsFile


def ask_sweep_csv(parent: QWidget) -> str:
    """The path the user picks for the sweep's rows ('' when cancelled)."""
    path, _ = QFileDialog.getSaveFileName(parent, "Save the sweep's rows", "sweep.csv", "CSV (*.csv)")
    return path


def save_sweep_rows(path: str, knobs: list[str], rows: Iterable[GridRow]) -> None:
    with ResultsFile(path, knobs, restart=True) as out:
        for row in rows:
            out.append(row)
