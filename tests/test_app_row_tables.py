"""Row tables built when their lanes are shown: at open only the ranks of the first picture have
tables; scrolling to other ranks builds theirs on a worker (the rows are drawn empty meanwhile), a
new job drops what an old one's worker still delivers; what is derived without the tables (lane
layout, time extent, overview index, search matches, the predicted overlay's deviations) equals
what the built tables give."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_helpers import close_window, open_in_window
from PySide6.QtWidgets import QApplication
from straggler_job import write_straggler_job

import app.view_model.row_tables as row_tables
from app.timeline.row_table_loader import RowTableLoader
from app.view_model.lane_data import build_row_table
from app.view_model.loaded_job import AUTO_GROUP_RANKS, FIRST_SHOWN_RANKS, first_shown
from app.view_model.overlay_data import TaskDeviations, task_deviation
from app.view_model.overview_data import RankActivity
from app.view_model.row_tables import KEEP_DRAWN_S, RowTables, row_shape, tables_end_ms
from lumos_core.trace.kernel_families import event_families
from lumos_core.trace.loader import load_job

pytest_plugins = ["app_fixtures"]

N_RANKS = AUTO_GROUP_RANKS + 8  # a job that opens grouped
LATE = 5


@pytest.fixture(scope="module")
def folder(tmp_path_factory):  # type: ignore[no-untyped-def]
    return write_straggler_job(tmp_path_factory.mktemp("wide"), N_RANKS, LATE, 400.0, iterations=2)


@pytest.fixture(scope="module")
def win(qapp, folder):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, folder)
    yield w
    close_window(w)


def wait_lanes(view) -> None:  # type: ignore[no-untyped-def]
    """Paint until no row in view waits for its table (the worker builds what the paint asks)."""
    assert view.wait_drawn(30.0)
    assert view.item.last_missing == 0


def test_shapes_extent_and_activity_equal_the_built_tables(folder) -> None:  # type: ignore[no-untyped-def]
    job = load_job(str(folder))
    for rank in job.ranks[:6]:
        fam = event_families(rank)
        table = build_row_table(rank, fam)
        shape = row_shape(rank)
        assert shape.keys == table.keys and shape.depths == table.depths and shape.n == len(table)
        assert shape.end_ms == float(table.end.max())
        lazy, eager = RankActivity.of_rank(rank, fam), RankActivity(rank, table)
        for a, b in zip(lazy.classes, eager.classes):
            for x, y in zip(a, b):
                assert np.array_equal(x, y)  # bit for bit: same sorted values, same prefix sums
    fams = [event_families(r) for r in job.ranks]
    tables = RowTables(job.ranks, fams)
    assert tables.n_built == 0 and tables.ready(3) is None
    eager = [build_row_table(r, f) for r, f in zip(job.ranks, fams)]
    assert tables_end_ms(tables) == tables_end_ms(eager) and tables.n_built == 0
    assert tables.n_events == sum(len(t) for t in eager) and tables.n_built == 0
    t3 = tables[3]  # built on demand, then kept
    assert tables.ready(3) is t3 and tables.n_built == 1
    assert tables[np.int64(3)] is t3 and tables[-len(tables) + 3] is t3
    assert np.array_equal(t3.event, eager[3].event) and np.array_equal(t3.start, eager[3].start)
    absent = RowTables(job.ranks, fams, present=[i != 2 for i in range(len(job.ranks))])
    assert len(absent[2]) == 0 and absent.shape(2).keys == [] and len(absent[1]) == len(eager[1])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_table_cache_stays_within_its_budget_and_keeps_what_was_drawn(folder) -> None:  # type: ignore[no-untyped-def]
    job = load_job(str(folder))
    fams = [event_families(r) for r in job.ranks]
    eager = [build_row_table(r, f) for r, f in zip(job.ranks, fams)]
    size = max(t.nbytes for t in eager)
    clock = FakeClock()
    tables = RowTables(job.ranks, fams, budget_bytes=3 * size, clock=clock)
    kept = lambda: {i for i in range(len(tables)) if not tables.missing([i])}  # noqa: E731  (no use)
    # scrolling through every rank, one screen a while after the other: at most the budget is kept,
    # and what is kept is what was used last
    for i in range(len(tables)):
        tables.build(i)
        clock.now += 10 * KEEP_DRAWN_S
        assert tables.nbytes <= 3 * size
    assert tables.n_dropped >= len(tables) - 3 and tables.n_built <= 3
    assert kept() == set(range(len(tables) - tables.n_built, len(tables)))
    # a table in use is kept over an older one: the painter's ready() counts as a use
    a, b = sorted(kept())[:2]
    assert tables.ready(a) is not None
    clock.now += 10 * KEEP_DRAWN_S
    tables.build(0)
    assert a in kept() and b not in kept()
    # a dropped table comes back identical
    again = tables[b]
    for col in ("start", "end", "event", "family", "begin"):
        assert np.array_equal(getattr(again, col), getattr(eager[b], col))
    assert again.keys == eager[b].keys and again.depths == eager[b].depths
    # tables drawn in the last KEEP_DRAWN_S seconds are never dropped, whatever the budget (what is in
    # view would otherwise be dropped by the build of the next screen, and asked for again)
    tight = RowTables(job.ranks, fams, budget_bytes=1, clock=clock)
    for i in range(6):
        tight.build(i)
        clock.now += KEEP_DRAWN_S / 10
    assert tight.n_built == 6 and tight.n_dropped == 0
    clock.now += 2 * KEEP_DRAWN_S
    tight.build(6)
    assert tight.n_built == 1 and tight.n_dropped == 6


def test_only_the_first_picture_is_built_at_open(win, folder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import app.view_model.loaded_job as loading

    lj = win.loaded
    assert len(lj.job.ranks) == N_RANKS and win.timeline.grouping  # opened grouped
    assert all(lj.tables.ready(i) is not None for i in win.timeline.layout_model.order)
    # the loading worker builds the tables of the ranks the first picture shows, and only those
    got = loading.prepare_lanes(str(folder), lambda f, m: None)
    shown = first_shown(got.job, got.baseline, got.stragglers)
    assert {i for i in range(N_RANKS) if got.tables.ready(i) is not None} == set(shown)
    # without an inferred layout the job opens in rank order: the first screenfuls only
    monkeypatch.setattr(loading, "infer_job_baseline", lambda job, overrides=None: (None, "no layout"))
    got = loading.prepare_lanes(str(folder), lambda f, m: None)
    assert got.tables.n_built == FIRST_SHOWN_RANKS < N_RANKS
    assert got.tables.ready(N_RANKS - 1) is None and got.n_events == lj.n_events


def test_scrolling_builds_the_lanes_in_view_on_a_worker(win) -> None:  # type: ignore[no-untyped-def]
    view, lj = win.timeline, win.loaded
    view.set_grouping("")  # every rank, in rank order
    view.set_prediction(None)
    view.scroll_to_row(0)
    wait_lanes(view)
    n_rows = len(view.layout_model.rows)
    last = N_RANKS - 1
    first, _ = view.layout_model.group_bounds[last]
    # the last rank's table may exist only if an earlier paint asked for it ahead: drop the cache
    lj.tables.drop(last)
    view.scroll_to_row(float(min(first, n_rows - view.visible_rows())))
    view.canvas.grab()
    assert view.item.last_missing > 0  # drawn empty, not built on the GUI thread
    assert lj.tables.ready(last) is None
    wait_lanes(view)
    assert lj.tables.ready(last) is not None
    assert view.row_loader.n_batches > 0


def test_a_new_job_drops_what_the_old_jobs_worker_delivers(qapp, folder) -> None:  # type: ignore[no-untyped-def]
    job = load_job(str(folder))
    tables = RowTables(job.ranks, [event_families(r) for r in job.ranks])
    loader = RowTableLoader()
    got: list[int] = []
    loader.built.connect(lambda: got.append(1))
    try:
        loader.request([tables], [(0, i) for i in range(6)])
        loader.forget()  # before its news arrives: the batch is cancelled or its news ignored
        end = time.monotonic() + 30
        while loader.busy and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.002)
        QApplication.processEvents()
        assert got == [] and loader.n_batches == 0
        loader.request([tables], [(0, i) for i in range(3)])  # the next request is served
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            QApplication.processEvents()
            time.sleep(0.002)
        assert got and all(tables.ready(i) is not None for i in range(3))
    finally:
        loader.shutdown()


def test_search_without_tables_equals_the_search_over_built_tables(win) -> None:  # type: ignore[no-untyped-def]
    view, lj = win.timeline, win.loaded
    n = view.set_search("sgemm")
    assert n > 0
    # reference: the matches as the built tables give them (table order, then by start and rank)
    ranks_l, events_l, starts_l = [], [], []
    for ri, t in enumerate(lj.job.ranks):
        table = build_row_table(t, lj.families[ri])
        hit = np.array(["sgemm" in s.lower() for s in t.strings])
        mask = hit[t.name[table.event]]
        ev = table.event[mask].astype(np.int64)
        ranks_l.append(np.full(len(ev), ri))
        events_l.append(ev)
        starts_l.append(t.start[ev])
        if lj.tables.ready(ri) is not None:
            assert np.array_equal(view.match_masks[ri], mask)
        else:
            assert view.match_masks[ri] is None  # filled when the table is built
    ranks, events = np.concatenate(ranks_l), np.concatenate(events_l)
    order = np.lexsort((ranks, np.concatenate(starts_l)))
    assert np.array_equal(view.matches[0], ranks[order]) and np.array_equal(view.matches[1], events[order])
    view.set_search("")


def test_predicted_deviations_equal_the_built_tables(win) -> None:  # type: ignore[no-untyped-def]
    lj = win.loaded
    pred = win.workbench.shown.overlay if win.workbench.shown is not None else None
    if pred is None or not isinstance(pred.deviation, TaskDeviations):
        pytest.skip("the baseline replay gave no aligned overlay")
    devs = []
    for i, p in enumerate(pred.ranks):
        if not pred.present[i]:
            continue
        ref = task_deviation(build_row_table(p, lj.families[i]), lj.job.ranks[i])
        assert np.array_equal(pred.deviation[i], ref)
        devs.append(ref)
    every = np.concatenate(devs)
    assert pred.match_within() == (float(np.quantile(every, 0.99)), float(every.max()))


def test_lanes_whose_tables_were_dropped_are_drawn_again_the_same(win, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    view, lj = win.timeline, win.loaded
    view.set_grouping("")  # every rank, in rank order
    view.set_prediction(None)
    # a budget of a few tables, and what was drawn kept only briefly: scrolling through the job drops
    # the tables of the first screen
    monkeypatch.setattr(row_tables, "KEEP_DRAWN_S", 0.05)
    monkeypatch.setattr(lj.tables, "budget_bytes", 4 * max(lj.tables[i].nbytes for i in range(4)))
    for i in range(len(lj.tables)):
        lj.tables.drop(i)
    view.scroll_to_row(0)
    wait_lanes(view)
    before = view.canvas.grab().toImage()
    n_rows, screen = len(view.layout_model.rows), max(int(view.visible_rows()), 1)
    for top in range(0, n_rows, screen):
        view.scroll_to_row(float(min(top, n_rows - view.visible_rows())))
        wait_lanes(view)
        time.sleep(0.06)
    assert lj.tables.n_dropped > 0 and lj.tables.ready(0) is None
    view.scroll_to_row(0)
    view.canvas.grab()
    assert view.item.last_missing > 0  # drawn empty while the worker builds them again
    wait_lanes(view)
    assert view.canvas.grab().toImage() == before
