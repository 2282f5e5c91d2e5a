"""A read-only Qt table model over a list of dataclass rows, with typed sorting."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
MUTED_ROW = "#9CA3AF"

Index = QModelIndex | QPersistentModelIndex


# How a column reads a time: ns as ms or µs, or ms that may be missing (NaN reads as blank).
def ns_as_ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def ns_as_us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def ms_or_blank(v: float) -> str:
    return "" if math.isnan(v) else f"{v:,.3f}"


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Any], Any]  # raw value (sorting, CSV)
    text: Callable[[Any], str] = str  # how it reads in the table
    tooltip: str = ""
    numeric: bool = False
    color: Callable[[Any], QColor | None] | None = None  # swatch in the cell
    max_px: int = 260  # widest the column is fitted to (sentences, such as a reason, get more)


class RowsModel(QAbstractTableModel):
    def __init__(self, columns: list[Column], rows: Sequence[Any] = ()) -> None:
        super().__init__()
        self.columns = columns
        self.rows: list[Any] = list(rows)
        # rows for which this is true are drawn greyed out (e.g. configurations that do not fit)
        self.muted: Callable[[Any], bool] | None = None

    def set_rows(self, rows: Sequence[Any]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        col = self.columns[index.column()]
        row = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.text(col.value(row))
        if role == SORT_ROLE:
            v = col.value(row)
            if isinstance(v, float) and math.isnan(v):
                return -math.inf
            return v
        if role == Qt.ItemDataRole.ToolTipRole:
            return col.text(col.value(row))
        if role == Qt.ItemDataRole.TextAlignmentRole and col.numeric:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.DecorationRole and col.color is not None:
            return col.color(row)
        if role == Qt.ItemDataRole.ForegroundRole and self.muted is not None and self.muted(row):
            return QColor(MUTED_ROW)
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return self.columns[section].header
            if role == Qt.ItemDataRole.ToolTipRole and self.columns[section].tooltip:
                return self.columns[section].tooltip
        return None

    def cell_text(self, row: int, column: int) -> str:
        col = self.columns[column]
        return str(col.text(col.value(self.rows[row])))


def sorting_proxy(model: RowsModel) -> QSortFilterProxyModel:
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(model)
    proxy.setSortRole(SORT_ROLE)
    return proxy
