"""The Diff pane of File ▸ Compare with Measured Job: what changed between the open job (A) and
another measured job (B), as ``lumos diff`` says it, answer first.

One tree, in the order a reader asks: the **top changes** (the largest, those beyond the noise first),
the **breakdown** (iteration, exposed compute, overlapped, exposed communication, other), the
**families** with their kernels collapsed under each, the **collectives** by kind, **per rank** (or
pipeline stage) with its breakdown, and the CPU operators. The numeric columns have a fixed width
(the name column takes the rest and elides in the middle, the full name in its tooltip), so names
and numbers fit together at any width. Changes smaller than the runs' own iteration spread are
greyed and the spread is printed in the title. A filter box keeps the rows whose name contains its
text (and the groups holding them).

The rows come from :func:`diff_nodes` (plain data, tested without Qt) built from
:meth:`lumos_core.compare.diff.JobDiff.as_dict`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetrics
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from lumos_core.api.views import search_text

COLUMNS = ["what", "A ms", "B ms", "B−A ms", "Δ %"]
NUMERIC = (1, 2, 3, 4)
TOP_CHANGES = 8
NOISE_GREY = QColor(150, 150, 150)
BREAKDOWN_TIP = "ms per rank and per steady iteration (mean over ranks and iterations), as lumos diff"
NAME_MIN_PX = 220  # the name column never gets less; a narrower pane scrolls sideways instead
# The pane's own minimum width is small, so that showing it never pushes the window past a laptop
# screen (with the What-if panel and the timeline beside it, asking for the name and four number
# columns grew a 1,280-px window to 1,477); the dock is widened when it first appears
# (MeasuredCompare), and narrower than its columns, the tree scrolls sideways.
MIN_PX = 260


class NameFirstTree(QTreeWidget):
    """Fixed number columns; the name column takes the rest of the width but never less than
    NAME_MIN_PX (a header's Stretch section would shrink it to nothing in a narrow dock)."""

    def resizeEvent(self, event: Any) -> None:  # Qt calls it by this name
        super().resizeEvent(event)
        self.fit_name_column()

    def fit_name_column(self) -> None:
        header = self.header()
        fixed = sum(header.sectionSize(c) for c in range(1, self.columnCount()))
        header.resizeSection(0, max(NAME_MIN_PX, self.viewport().width() - fixed))
FILTER_ROLE = Qt.ItemDataRole.UserRole + 1
_STATUS = {"appeared": "new in B", "vanished": "gone in B"}


@dataclass
class DiffNode:
    """One row: a group header (no numbers) or a compared quantity (µs per rank per iteration)."""

    label: str
    a_us: float | None = None
    b_us: float | None = None
    delta_us: float | None = None
    pct: float | None = None
    note: str = ""  # "new in B", "gone in B", "noise"
    within_noise: bool = False
    search: str = ""  # what selecting the row searches the timeline for
    tooltip: str = ""
    children: list[DiffNode] = field(default_factory=list)
    expanded: bool = False


def _row(label: str, r: dict[str, Any], *, search: str = "", tooltip: str = "") -> DiffNode:
    a, b = r.get("a_us", r.get("a_iteration_us")), r.get("b_us", r.get("b_iteration_us"))
    pct = r.get("delta_pct")
    if pct is None and a:
        pct = 100.0 * (b / a - 1.0)
    noise = bool(r.get("within_noise"))
    note = _STATUS.get(r.get("status", ""), "noise" if noise else "")
    return DiffNode(label, a, b, r["delta_us"], pct, note, noise, search, tooltip or label)


def _kernel(r: dict[str, Any]) -> DiffNode:
    name = r["kernel"].split(" [[", 1)[0]
    return _row(r["kernel"], r, search=search_text(name), tooltip=f"{r['kernel']}\nfamily: {r['family']}")


def diff_nodes(d: dict[str, Any]) -> list[DiffNode]:
    """The tree of a diff (see the module docstring), from ``JobDiff.as_dict()``."""
    kernels = [_kernel(r) for r in d["kernels"]]
    fams = []
    for r in d["families"]:
        node = _row(r["family"], r)
        node.children = [k for k, r2 in zip(kernels, d["kernels"]) if r2["family"] == r["family"]]
        node.label = f"{r['family']} ({len(node.children)} kernels)" if node.children else r["family"]
        node.tooltip = r["family"]
        fams.append(node)
    colls = [_row(r["kind"], r) for r in d["collective_kinds"]]
    top_pool = (
        [(f"family · {n.tooltip}", n) for n in fams]
        + [(f"collective · {n.label}", n) for n in colls]
        + [(f"{'kernel' if d.get('gpu', True) else 'op'} · {n.label}", n) for n in kernels]
    )
    top_pool.sort(key=lambda x: (x[1].within_noise, -abs(x[1].delta_us or 0.0)))
    top = []
    for label, n in top_pool[:TOP_CHANGES]:
        if n.delta_us:
            top.append(
                DiffNode(
                    label,
                    n.a_us,
                    n.b_us,
                    n.delta_us,
                    n.pct,
                    n.note,
                    n.within_noise,
                    n.search,
                    n.tooltip if n.tooltip != n.label else label,
                )
            )
    a, b = d["a"], d["b"]
    it = {
        "a_us": a["iteration_us"],
        "b_us": b["iteration_us"],
        "delta_us": d["iteration_delta_us"],
        "delta_pct": d["iteration_delta_pct"],
        "within_noise": d["iteration_within_noise"],
    }
    breakdown = [_row("iteration", it)]
    for k, dk in d["breakdown_delta_us"].items():
        part = {
            "a_us": a["breakdown"][k],
            "b_us": b["breakdown"][k],
            "delta_us": dk,
            "within_noise": d["breakdown_within_noise"][k],
        }
        breakdown.append(_row("  " + k[:-3].replace("_", " "), part))
    ranks = []
    for r in d["ranks"]:
        node = _row(r["group"], r)
        for k in d["breakdown_delta_us"]:
            part = {"a_us": r[f"a_{k}"], "b_us": r[f"b_{k}"], "delta_us": r[f"b_{k}"] - r[f"a_{k}"]}
            node.children.append(_row(k[:-3].replace("_", " "), part))
        ranks.append(node)
    ops = [_row(r["name"], r, search=search_text(r["name"])) for r in d["cpu_ops"]]
    groups = [
        DiffNode("Top changes" + ("" if top else ": none"), children=top, expanded=True),
        DiffNode("Breakdown", children=breakdown, expanded=True, tooltip=BREAKDOWN_TIP),
        DiffNode(
            f"Families ({len(fams)})", children=fams, expanded=True, tooltip="kernels under each family"
        ),
        DiffNode(f"Collectives ({len(colls)} kinds)", children=colls, expanded=True),
        DiffNode(f"Per rank ({len(ranks)})", children=ranks),
        DiffNode(f"CPU operators ({len(ops)})", children=ops),
    ]
    return [g for g in groups if g.children or g.label.startswith("Top")]


def title_text(d: dict[str, Any]) -> str:
    """The pane's headline: iteration times, change, noise and the knobs that differ."""
    a, b = d["a"]["iteration_us"] / 1000, d["b"]["iteration_us"] / 1000
    spread = d["noise"]["spread_us"]
    noise = (
        f"noise ±{spread / 1000:.3f} ms (the runs' own iteration spread); greyed rows change less"
        if spread is not None
        else "noise unknown (fewer than two steady iterations)"
    )
    verdict = " — within noise" if d["iteration_within_noise"] else ""
    knobs = html.escape(
        ", ".join(f"{k} {x}→{y}" for k, (x, y) in sorted(d["differing_knobs"].items())) or "none"
    )
    return (
        f"<b>A {a:.2f} ms → B {b:.2f} ms per iteration ({d['iteration_delta_pct']:+.1f} %{verdict})</b><br>"
        f"{noise}. Knobs that differ: {knobs}. Kernels: {d['appeared']} new in B, {d['vanished']} gone."
    )


class DiffPane(QWidget):
    """Title, filter and tree of a diff (see the module docstring)."""

    name_selected = Signal(str)  # a kernel or operator name to search the timeline for

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(PLACEHOLDER)
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter rows: a kernel, operator or family name…")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.apply_filter)
        self.tree = NameFirstTree()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setUniformRowHeights(True)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.setAlternatingRowColors(True)
        self.tree.setMinimumWidth(MIN_PX)
        header = self.tree.header()
        header.setMinimumSectionSize(40)
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        fm = QFontMetrics(self.tree.font())
        widths = {1: "00000.000", 2: "00000.000", 3: "-0000.000", 4: "-00000.0"}
        for col, sample in widths.items():
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(col, fm.horizontalAdvance(sample) + 16)
        self.tree.fit_name_column()
        self.tree.itemSelectionChanged.connect(self._on_select)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.title)
        lay.addWidget(self.filter)
        lay.addWidget(self.tree, 1)
        self.nodes: list[DiffNode] = []

    def clear(self, text: str = "") -> None:
        self.nodes = []
        self.tree.clear()
        self.title.setText(html.escape(text, quote=False) if text else PLACEHOLDER)  # the title is rich text

    def set_diff(self, d: dict[str, Any]) -> None:
        """Show ``JobDiff.as_dict()``."""
        self.title.setText(title_text(d))
        self.nodes = diff_nodes(d)
        self.tree.clear()
        for node in self.nodes:
            self.tree.addTopLevelItem(self._item(node))
        for i, node in enumerate(self.nodes):
            self.tree.topLevelItem(i).setExpanded(node.expanded)
        self.apply_filter(self.filter.text())

    def _item(self, node: DiffNode) -> QTreeWidgetItem:
        def ms(v: float | None) -> str:
            return "" if v is None else f"{v / 1000:.3f}"

        pct = "" if node.pct is None or node.a_us is None else f"{node.pct:+.1f}"
        label = f"{node.label} [{node.note}]" if node.note and node.note != "noise" else node.label
        item = QTreeWidgetItem([label, ms(node.a_us), ms(node.b_us), ms(node.delta_us), pct])
        item.setToolTip(0, node.tooltip or node.label)
        item.setData(0, Qt.ItemDataRole.UserRole, node.search)
        item.setData(0, FILTER_ROLE, (node.tooltip or node.label).lower())
        for c in NUMERIC:
            item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if node.a_us is None:
            font = item.font(0)
            font.setBold(True)
            item.setFont(0, font)
        if node.within_noise:
            grey = QBrush(NOISE_GREY)
            for c in range(len(COLUMNS)):
                item.setForeground(c, grey)
                item.setToolTip(
                    c,
                    f"{node.tooltip or node.label}\nwithin noise: smaller than the runs' own iteration spread",
                )
        for child in node.children:
            item.addChild(self._item(child))
        return item

    def apply_filter(self, text: str) -> None:
        """Hide the rows whose name does not contain ``text`` (groups stay while a row inside matches)."""
        needle = text.strip().lower()

        def visit(item: QTreeWidgetItem) -> bool:
            hit_child = False
            for i in range(item.childCount()):
                hit_child |= visit(item.child(i))
            hit = not needle or needle in (item.data(0, FILTER_ROLE) or "") or hit_child
            item.setHidden(not hit)
            if needle and hit_child:
                item.setExpanded(True)
            return hit

        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            visit(top)
            top.setHidden(False if not needle else top.isHidden())

    def _on_select(self) -> None:
        items = self.tree.selectedItems()
        name = items[0].data(0, Qt.ItemDataRole.UserRole) if items else ""
        if name:
            self.name_selected.emit(name)


PLACEHOLDER = (
    "File ▸ Compare with Measured Job…, or drop another job's folder on the window with Shift held "
    "(or on this pane), to see what changed."
)
