"""A table pane: a sortable table of dataclass rows, a CSV export button and optional controls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.panels.table_model import Column, RowsModel, sorting_proxy
from lumos_core.api.views import write_csv


class TablePane(QWidget):
    """A table with a CSV export button and an optional header row of controls."""

    def __init__(
        self, name: str, columns: list[Column], row_type: type, controls: list[QWidget] | None = None
    ) -> None:
        super().__init__()
        self.name = name
        self.row_type = row_type
        self.wrap_rows = False
        self._fit_pending = False
        self.model = RowsModel(columns)
        self.proxy = sorting_proxy(self.model)
        self.view = QTableView()
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.horizontalHeader().setStretchLastSection(True)
        # fitting columns reads this many rows, not 1000: tables of a big job fill in a fraction of the time
        self.view.horizontalHeader().setResizeContentsPrecision(200)
        self.view.setWordWrap(False)
        self.view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.export_button = QPushButton("Export CSV…")
        self.export_button.clicked.connect(self._ask_export)
        top = QHBoxLayout()
        for c in controls or []:
            top.addWidget(c)
        top.addStretch(1)
        top.addWidget(self.export_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.view, 1)

    def set_rows(
        self,
        rows: list[Any],
        sort_column: int | None = None,
        order: Qt.SortOrder = Qt.SortOrder.DescendingOrder,
    ) -> None:
        if sort_column is None:
            # unsorted before the reset, or the proxy sorts every row by the last column first (with
            # a Python call per comparison: seconds for the tens of thousands of collectives of a
            # 256-rank job, on the GUI thread)
            self.proxy.sort(-1)
        self.model.set_rows(rows)
        if sort_column is not None:
            self.view.sortByColumn(sort_column, order)
        # fitting the columns reads rows through Python: a pane out of sight (another tab) fits
        # them when it is first shown, so a new job's dozen tables do not all fit at once
        self._fit_pending = True
        if self.isVisible():
            self.fit_columns()

    def fit_columns(self) -> None:
        self._fit_pending = False
        self.view.resizeColumnsToContents()
        for c, col in enumerate(self.model.columns):
            if self.view.columnWidth(c) > col.max_px:
                self.view.setColumnWidth(c, col.max_px)
        if self.wrap_rows:  # a few rows of sentences: each shown whole, on as many lines as it needs
            self.view.setWordWrap(True)
            self.view.resizeRowsToContents()

    def showEvent(self, ev: QShowEvent) -> None:
        super().showEvent(ev)
        if self._fit_pending:
            self.fit_columns()

    def export_csv(self, path: str | Path) -> None:
        write_csv(self.model.rows, path, self.row_type)

    def _ask_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export {self.name} as CSV", f"{self.name}.csv", "CSV (*.csv)"
        )
        if path:
            self.export_csv(path)


def note_above_tables(owner: QWidget, note: QLabel, *panes: QWidget) -> QSplitter:
    """Lay ``owner`` out as a note across the top and the panes below it, split vertically."""
    split = QSplitter(Qt.Orientation.Vertical)
    for pane in panes:
        split.addWidget(pane)
    lay = QVBoxLayout(owner)
    lay.setContentsMargins(4, 4, 4, 4)
    lay.addWidget(note)
    lay.addWidget(split, 1)
    return split


def write_tables(tables: dict[str, tuple[list[Any], type]], folder: str | Path) -> list[Path]:
    """Each table (name -> rows, row type) as ``<folder>/<name>.csv``; the paths written."""
    out = []
    for name, (rows, row_type) in tables.items():
        path = Path(folder) / f"{name}.csv"
        write_csv(rows, path, row_type)
        out.append(path)
    return out
