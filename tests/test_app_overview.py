"""The job overview strip above the lanes: one row per rank, coloured by what each rank's GPU is
doing (compute / communication / idle, in the families' colours), following the timeline's x range;
clicking a row scrolls the lanes to that rank. Checked on a hand-built job where one rank is late."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import close_window, open_in_window
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication
from straggler_job import COMM_US, COMPUTE_US, write_straggler_job

from app.timeline.overview import MAX_COLUMNS
from app.view_model.overview_data import (
    COMM_FAMILIES,
    COMMUNICATION,
    COMPUTE,
    IDLE,
    activity_classes,
    busy_before,
    gpu_rows,
)
from lumos_core.trace.kernel_families import Family

pytest_plugins = ["app_fixtures"]

N_RANKS, LATE, DELAY_US = 12, 5, 400.0


@pytest.fixture(scope="module")
def win(qapp, tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = write_straggler_job(tmp_path_factory.mktemp("strag"), N_RANKS, LATE, DELAY_US)
    w = open_in_window(qapp, folder)
    w.timeline.overview.rebuild()
    yield w
    close_window(w)


def test_busy_before_is_the_clipped_prefix_sum() -> None:
    s, e = np.array([1.0, 5.0]), np.array([3.0, 6.0])
    t = np.array([0.0, 2.0, 4.0, 5.5, 10.0])
    assert busy_before(s, e, t) == pytest.approx([0.0, 1.0, 2.0, 2.5, 3.0])


def test_rank_activity_sums_overlapping_rows_like_the_per_row_reference(win) -> None:  # type: ignore[no-untyped-def]
    """The index (sorted starts and ends over all streams) against summing each row's prefix sums."""
    lj = win.loaded
    rng = np.random.default_rng(0)
    for ri in (0, LATE):
        rank, table, act = lj.job.ranks[ri], lj.tables[ri], lj.activity[ri]
        edges = np.sort(rng.uniform(-0.5, 7.0, 300))
        want = np.zeros((2, len(edges) - 1))
        for r in gpu_rows(rank, table):
            a, b = table.row_slice(r)
            comm = np.isin(table.family[a:b], COMM_FAMILIES)
            for cls, m in ((0, ~comm), (1, comm)):
                want[cls] += np.diff(busy_before(table.start[a:b][m], table.end[a:b][m], edges))
        assert act.busy(edges) == pytest.approx(want, abs=1e-9)
        assert want.sum() > 0


def test_one_row_per_rank_and_the_late_rank_computes_while_the_others_communicate(win) -> None:  # type: ignore[no-untyped-def]
    strip = win.timeline.overview
    assert strip.isVisible()
    assert strip.classes.shape == (N_RANKS, min(int(strip.plot_width), MAX_COLUMNS))
    assert strip._image is not None and strip._image.height() == N_RANKS
    # exact classes on a window of the first iteration: 10 µs columns
    lj = win.loaded
    col_us = 10.0
    width = 200
    c = activity_classes(lj.job.ranks, lj.tables, 0.0, width * col_us / 1e3, width)
    t_us = (np.arange(width) + 0.5) * col_us
    on_time = np.where(t_us < 10, IDLE, np.where(t_us < 10 + COMPUTE_US, COMPUTE, COMMUNICATION))
    on_time[t_us >= 10 + COMPUTE_US + DELAY_US + COMM_US] = IDLE
    late = on_time.copy()
    late[(t_us >= 10 + COMPUTE_US) & (t_us < 10 + COMPUTE_US + DELAY_US)] = COMPUTE
    for r in range(N_RANKS):
        want = late if r == LATE else on_time
        edge = np.abs((t_us - 10) % 100) < col_us  # columns on a boundary may go either way
        assert (c[r][~edge] == want[~edge]).mean() > 0.97, r


def test_colours_are_the_families_colours(win) -> None:  # type: ignore[no-untyped-def]
    strip = win.timeline.overview
    theme = win.theme
    img = strip._image
    rgb = {
        (img.pixelColor(x, 0).red(), img.pixelColor(x, 0).green(), img.pixelColor(x, 0).blue())
        for x in range(img.width())
    }
    gemm = theme.family_color(int(Family.GEMM))
    nccl = theme.family_color(int(Family.NCCL_ALL_REDUCE))
    assert (gemm.red(), gemm.green(), gemm.blue()) in rgb
    assert (nccl.red(), nccl.green(), nccl.blue()) in rgb
    assert len(rgb) <= 3
    # and the strip on screen shows them where the image says
    shot = strip.grab().toImage()
    r = strip.image_rect()
    cls = strip.classes[LATE]
    x = int(np.flatnonzero(cls == COMPUTE)[len(np.flatnonzero(cls == COMPUTE)) // 2])
    y = int(r.top() + (LATE + 0.5) * r.height() / N_RANKS)
    px = shot.pixelColor(int(r.left() + x + 0.5), y)
    assert (px.red(), px.green(), px.blue()) == (gemm.red(), gemm.green(), gemm.blue())


def test_follows_the_x_range(win) -> None:  # type: ignore[no-untyped-def]
    view = win.timeline
    view.zoom_to(0.0, 1.0)
    QApplication.processEvents()
    view.overview.rebuild()
    assert view.overview.x_range == pytest.approx(view.x_range())
    # zoomed into the first ms: compute everywhere except the first 10 µs
    assert (view.overview.classes[:, 20:] == COMPUTE).all()
    view.reset_view()


def test_clicking_a_row_scrolls_to_that_rank(win) -> None:  # type: ignore[no-untyped-def]
    view = win.timeline
    strip = view.overview
    view.reset_view()
    QApplication.processEvents()
    target = N_RANKS - 2
    r = strip.image_rect()
    pos = QPointF(r.left() + 20, r.top() + (target + 0.5) * r.height() / N_RANKS)
    for kind in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease):
        ev = QMouseEvent(
            kind,
            pos,
            strip.mapToGlobal(pos),
            Qt.MouseButton.LeftButton,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
        )
        QApplication.sendEvent(strip, ev)
    QApplication.processEvents()
    top, _ = view.y_range()
    first, _end = view.layout_model.group_bounds[target]
    n_rows = len(view.layout_model.rows)
    # the rank's header is the top row, unless the view cannot scroll that far (then it is in view)
    at_end = view.y_range()[1] >= n_rows  # cannot scroll further down
    assert top == pytest.approx(first) or (at_end and top < first)
    assert view.ranks_in_view()[0] <= target <= view.ranks_in_view()[1]


def test_the_late_rank_is_flagged_in_the_overview_and_listed_in_the_summary(win) -> None:  # type: ignore[no-untyped-def]
    strip = win.timeline.overview
    assert set(strip.flagged) == {LATE}
    assert "late at 3 of 3 collectives" in strip.flagged[LATE]
    pane = win.summaries.stragglers
    rows = pane.table.model.rows
    assert [(r.rank, r.flagged) for r in rows] == [(LATE, "yes")]
    assert rows[0].mean_late_ns == pytest.approx(DELAY_US * 1e3, abs=1e3)
    assert "AllReduce #0" in rows[0].collectives
    assert "1 straggler of 12 ranks" in pane.note.text()
    # the reason is the first column
    assert pane.table.model.headerData(0, Qt.Orientation.Horizontal).startswith("reason")
    assert (
        pane.table.model.index(0, 0).data().startswith(("host", "compute"))
        and "late at 3 of 3" in rows[0].reason
    )
    # the red tick is drawn in the strip's margin on the late rank's row
    shot = strip.grab().toImage()
    r = strip.image_rect()
    y = int(r.top() + (LATE + 0.5) * r.height() / N_RANKS)
    px = shot.pixelColor(int(r.left()) - 3, y)
    assert (px.red(), px.green(), px.blue()) == (0xDC, 0x26, 0x26)
    # double-clicking the row scrolls the timeline to the rank
    view = win.timeline
    view.reset_view()
    pane.table.view.doubleClicked.emit(pane.table.proxy.index(0, 0))
    QApplication.processEvents()
    assert view.ranks_in_view()[0] <= LATE <= view.ranks_in_view()[1]
    first = view.layout_model.group_bounds[LATE][0]
    at_end = view.y_range()[1] >= len(view.layout_model.rows)  # cannot scroll further down
    assert view.y_range()[0] == pytest.approx(first) or (at_end and view.y_range()[0] < first)


def test_grouping_by_role_shows_one_representative_per_group(win) -> None:  # type: ignore[no-untyped-def]
    """The hand-built job is pure data parallelism (12 ranks, one all-reduce group): by TP group
    every rank is its own group; by DP replica likewise; by PP stage all ranks are one stage."""
    view = win.timeline
    assert view.grouping_bar.isVisible()
    assert view.grouping == ""  # 12 ranks: below the size that opens grouped
    view.set_grouping("pp", one_per_group=True)
    assert len(view.groups) == 1 and len(view.groups[0].members) == N_RANKS
    assert view.groups[0].representative == LATE  # the straggler stands for its group
    lm = view.layout_model
    assert lm.order == [LATE]
    assert lm.rows[0].label.startswith("PP stage 0 (12 ranks) ▸ rank 5")
    assert LATE not in lm.collapsed_ranks  # the representative is expanded
    # every member, the others collapsed to their header row
    view.set_grouping("pp", one_per_group=False)
    assert view.layout_model.order[0] == LATE and sorted(view.layout_model.order) == list(range(N_RANKS))
    assert view.layout_model.collapsed_ranks == set(range(N_RANKS)) - {LATE}
    # a click on a hidden rank in the overview shows the whole group and goes to it
    view.set_grouping("pp", one_per_group=True)
    view.jump_to_rank(2)
    assert not view.grouping_bar.one_per_group.isChecked()
    assert 2 in view.layout_model.order
    view.set_grouping("")
    assert view.layout_model.order is None and not view.layout_model.collapsed_ranks


def test_iterations_chart_aggregates_a_big_job_and_labels_the_straggler(qapp, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from app.panels.summary_panes import MAX_RANK_BARS, IterationChart, chart_rows
    from app.theme import LIGHT
    from app.view_model.loaded_job import prepare_job

    n = MAX_RANK_BARS + 8
    lj = prepare_job(
        str(write_straggler_job(tmp_path / "big", n, LATE, DELAY_US, iterations=2)), lambda f, m: None
    )
    rows, bars = chart_rows(lj)
    assert len(rows) == n and bars is not None
    groups = [b for b in bars if not b.outlier]
    assert sum(b.ranks for b in groups) == n and len(groups) <= 24
    assert [b.label for b in bars if b.outlier] == [f"rank {LATE} (straggler)"]
    chart = IterationChart(LIGHT)
    chart.set_rows(rows, bars)
    ticks = [t[1] for t in chart.getAxis("left")._tickLevels[0]]
    assert f"rank {LATE} (straggler)" in ticks
    assert len(chart.shown) == len(bars) <= 24 + 8 + 1


def test_a_job_without_gpu_streams_has_no_overview(qapp, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tracegen import TraceBuilder

    for rank in range(2):
        b = TraceBuilder(rank=rank, world=2)
        b.step(1, 0, 100)
        b.cpu("aten::mm", 1, 50)
        b.write(tmp_path / f"rank{rank}.json")
    w = open_in_window(qapp, tmp_path)
    try:
        assert len(w.loaded.job.ranks) == 2
        assert w.timeline.overview.isHidden()
    finally:
        close_window(w)


def test_a_big_strip_is_binned_on_a_worker(win, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import time

    import app.timeline.overview as overview

    monkeypatch.setattr(overview, "WORKER_CELLS", 1)  # this strip counts as big
    view, strip = win.timeline, win.timeline.overview
    view.zoom_to(0.0, 1.0)
    strip.classes = np.zeros((0, 0), np.int8)
    strip.rebuild_soon()
    assert strip.binning and strip.classes.size == 0  # not on this thread
    end = time.monotonic() + 30
    while strip.binning and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.002)
    width = min(int(strip.plot_width), MAX_COLUMNS)
    want = activity_classes(win.loaded.job.ranks, [], *strip.x_range, width, win.loaded.activity)
    assert np.array_equal(strip.classes, want) and (strip.classes[:, 20:] == COMPUTE).all()
    view.reset_view()
