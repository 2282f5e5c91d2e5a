"""The Diff pane (File ▸ Compare with Measured Job, or a folder dropped with Shift held) on real CPU
runs: answer first (top changes, breakdown, families with their kernels collapsed under them,
collectives, per rank, CPU operators), fixed numeric columns beside an eliding name column with the
full name in its tooltip, changes within the runs' own spread greyed, a filter."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from app_helpers import close_window, make_window, wait_loaded
from conftest import REPO
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QHeaderView

from app.panels.diff_pane import NOISE_GREY, DiffPane, diff_nodes
from lumos_core.compare.diff import diff_jobs
from lumos_core.trace.loader import load_job

pytest_plugins = ["app_fixtures"]  # isolated QSettings

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"
GROUPS = ["Top changes", "Breakdown", "Families", "Per rank", "CPU operators"]  # a CPU job: no collectives


@pytest.fixture(scope="module")
def pair() -> dict:
    """Two real runs: the base CPU GPT and the same with hidden 512 (the GEMMs grow)."""
    return diff_jobs(load_job(CPU_GPT / "base"), load_job(CPU_GPT / "hidden512")).as_dict()


def _labels(nodes) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.label.split(" (")[0].split(":")[0] for n in nodes]


def test_the_tree_puts_the_answer_first(pair) -> None:
    nodes = diff_nodes(pair)
    assert _labels(nodes) == GROUPS
    top = nodes[0].children
    assert top and all(n.delta_us is not None for n in top)
    # beyond the noise first, largest first within each
    keys = [(n.within_noise, -abs(n.delta_us)) for n in top]
    assert keys == sorted(keys)
    assert top[0].label.startswith("family · GEMM")  # the GEMMs grew most
    breakdown = nodes[1].children
    assert breakdown[0].label == "iteration" and breakdown[0].delta_us == pytest.approx(
        pair["iteration_delta_us"]
    )
    families = nodes[2].children
    assert sum(len(f.children) for f in families) == len(pair["kernels"])  # every kernel under its family
    assert all(not f.expanded for f in families)  # collapsed


def test_pane_columns_are_fixed_and_the_name_elides(qtbot, pair) -> None:
    pane = DiffPane()
    qtbot.addWidget(pane)
    pane.resize(720, 600)
    pane.show()
    pane.set_diff(pair)
    QApplication.processEvents()
    tree, header = pane.tree, pane.tree.header()
    widths = [header.sectionSize(c) for c in range(1, 5)]
    assert all(header.sectionResizeMode(c) == QHeaderView.ResizeMode.Fixed for c in range(1, 5))
    # names and numbers fit together: no horizontal scrolling, the name column takes the rest
    assert header.sectionSize(0) >= 220 and sum(widths) + header.sectionSize(0) <= tree.viewport().width() + 2
    assert header.sectionSize(0) >= tree.viewport().width() - sum(widths) - 2
    pane.resize(1400, 600)
    QApplication.processEvents()
    assert [header.sectionSize(c) for c in range(1, 5)] == widths  # only the name column grows
    assert header.sectionSize(0) >= tree.viewport().width() - sum(widths) - 2
    # a narrow dock: the pane asks for little width (the window never grows past a laptop screen
    # to show it), and the name column keeps its minimum: the tree scrolls sideways instead
    assert pane.minimumSizeHint().width() <= 300
    pane.resize(300, 600)
    QApplication.processEvents()
    assert header.sectionSize(0) >= 220 and [header.sectionSize(c) for c in range(1, 5)] == widths
    assert tree.horizontalScrollBar().maximum() > 0
    assert tree.textElideMode() == Qt.TextElideMode.ElideMiddle
    flags = Qt.MatchFlag.MatchStartsWith | Qt.MatchFlag.MatchRecursive
    item = next(i for i in tree.findItems("aten::mm", flags) if i.parent() is not None and "[[" in i.text(0))
    assert item.toolTip(0).startswith(item.text(0).split(" [new")[0])  # the whole name in the tooltip
    assert [
        tree.topLevelItem(i).text(0).split(" (")[0].split(":")[0] for i in range(tree.topLevelItemCount())
    ] == GROUPS


def test_changes_within_the_spread_are_greyed_and_the_spread_printed(qtbot) -> None:
    """Two runs of one configuration: the repeat's first steps were slower (+20 ms per iteration,
    beyond the runs' ±15 ms spread), while most parts moved by less than the spread."""
    d = diff_jobs(load_job(CPU_GPT / "base"), load_job(CPU_GPT / "base_repeat")).as_dict()
    pane = DiffPane()
    qtbot.addWidget(pane)
    pane.set_diff(d)
    spread = d["noise"]["spread_us"] / 1000
    assert f"noise ±{spread:.3f} ms" in pane.title.text()
    nodes = diff_nodes(d)
    seen = set()
    for g, group in enumerate(nodes[1:4], start=1):
        item = pane.tree.topLevelItem(g)
        for k, node in enumerate(group.children):
            grey = item.child(k).foreground(3).color() == NOISE_GREY
            assert grey == node.within_noise == (abs(node.delta_us) < spread * 1000), node.label
            seen.add(grey)
    assert seen == {True, False}  # both kinds are there
    assert not d["iteration_within_noise"] and "within noise" not in pane.title.text()


def test_the_filter_keeps_matching_rows_and_their_groups(qtbot, pair) -> None:
    pane = DiffPane()
    qtbot.addWidget(pane)
    pane.set_diff(pair)
    pane.filter.setText("softmax")
    shown = []

    def walk(item) -> None:  # type: ignore[no-untyped-def]
        for i in range(item.childCount()):
            c = item.child(i)
            if not c.isHidden():
                if c.childCount() == 0:
                    shown.append(c.toolTip(0).lower())
                walk(c)

    walk(pane.tree.invisibleRootItem())
    assert shown and all("softmax" in s for s in shown)
    pane.filter.setText("")
    assert all(not pane.tree.topLevelItem(i).isHidden() for i in range(pane.tree.topLevelItemCount()))


def _drop(w, folder: Path, shift: bool) -> None:  # type: ignore[no-untyped-def]
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(folder))])
    mods = Qt.KeyboardModifier.ShiftModifier if shift else Qt.KeyboardModifier.NoModifier
    ev = QDropEvent(QPointF(400, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, mods)
    w.dropEvent(ev)


def test_a_folder_dropped_with_shift_is_compared_with_the_open_job(qtbot) -> None:
    w = make_window()
    try:
        w.open_path(CPU_GPT / "base")
        wait_loaded(w)
        mc = w.workbench.measured_compare
        _drop(w, CPU_GPT / "layers8", shift=True)
        end = time.monotonic() + 60
        while (mc.busy or mc.diff is None) and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.005)
        assert mc.diff is not None and mc.diff.differing_knobs == {"layers": [4, 8]}
        assert (
            w.loaded is not None and Path(w.loaded.job.path).name == "base"
        )  # still open: compared, not opened
        assert mc.dock.isVisible() and mc.pane.tree.topLevelItemCount() >= 4
        _drop(w, CPU_GPT / "layers8", shift=False)  # a plain drop opens it
        wait_loaded(w)
        assert Path(w.loaded.job.path).name == "layers8"
    finally:
        close_window(w)
