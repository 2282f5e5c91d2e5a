"""Summary ▸ Idle on a real job: idle causes per rank/stream/iteration (a column for every cause the
engine reports), and the largest unexplained delays, which select the task that started late when
double-clicked."""

from __future__ import annotations

import csv
import shutil

import pytest
from app_helpers import close_window, open_in_window
from conftest import needs_shared, shared, shared_file
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.timeline.timeline_view import Hit
from lumos_core.graph.build import build_graph
from lumos_core.replay.idle import CAUSE_INFO, CAUSES, idle_attribution
from lumos_core.trace.loader import load_job

pytestmark = needs_shared

pytest_plugins = ["app_fixtures"]


@pytest.fixture(scope="module")
def win(qapp):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, shared("a100-ddp-2rank"))
    yield w
    close_window(w)


def test_idle_tab_lists_causes_and_selects_an_offender(win) -> None:
    pane = win.summaries.idle
    report = win.loaded.idle
    assert report is not None, win.loaded.idle_error
    rows = pane.causes.model.rows
    assert len(rows) == len(report.rows) == 2 * 3  # two GPU streams, three steps
    for row, r in zip(
        sorted(rows, key=lambda x: (x.stream, x.iteration)),
        sorted(report.rows, key=lambda x: (x.stream, x.iteration)),
    ):
        assert row.idle_ns == r.idle_ns == sum(r.causes[c] for c in CAUSES)
    delays = pane.delays.model.rows
    assert delays and delays[0].length_ns == max(d.length for d in report.delays)
    assert "Unexplained delays" in pane.note.text()
    # double-click the largest delay: its late task is selected on the timeline
    pane.delays.proxy.sort(3)
    top = pane.delays.proxy.index(0, 0)
    pane.delays.view.doubleClicked.emit(top)
    QApplication.processEvents()
    chosen = pane.delays.model.rows[pane.delays.proxy.mapToSource(top).row()]
    assert win.timeline.selected == Hit(chosen.rank_index, chosen.event)
    assert "idle_causes" in win.summaries.tables()


def test_unexplained_delays_are_hatched_on_their_lane_with_a_tooltip(win) -> None:
    view = win.timeline
    stalls = view.stall_item.stalls
    assert stalls, "the A100 job has unexplained delays of a few µs"
    s = max(stalls, key=lambda x: x.end_ms - x.start_ms)
    row = view.stall_item.row_of(s)
    assert row >= 0 and view.layout_model.rows[row].lane == s.lane
    mid = (s.start_ms + s.end_ms) / 2
    assert view.stall_item.stall_at(mid, row + 0.5) is s
    text = view.describe_stall(mid, row + 0.5)
    assert text.startswith("unexplained delay:") and s.task[:40] in text
    assert view.describe_stall(mid, row + 3.5) == "" or view.stall_item.stall_at(mid, row + 3.5) is not None
    # drawn: zoomed onto the delay, its hatch colour is on screen
    view.zoom_to(s.start_ms - 0.05, s.end_ms + 0.05)
    view.ensure_row_visible(row)
    img = view.canvas.grab().toImage()
    from app_helpers import color_pixels

    from app.timeline.stall_item import HATCH

    assert color_pixels(img, HATCH) > 0


def test_keep_stalls_toggle_reruns_the_replay_and_says_so(win) -> None:
    from app_helpers import wait_loaded

    wb = win.workbench
    wait_loaded(win)
    before = [s for s in wb.scenarios.values() if s.kind == "replay"]
    assert before and any("stalls not kept" in n for n in before[-1].summary.notes)
    win.stalls_action.trigger()  # checks it
    assert wb.runner.keep_stalls and wb.runner.cache.keep_stalls
    wait_loaded(win)
    after = [s for s in wb.scenarios.values() if s.kind == "replay"]
    assert any("stalls kept" in n for n in after[-1].summary.notes), after[-1].summary.notes
    # back off: the next runs replay without them
    win.stalls_action.trigger()  # unchecks it
    wait_loaded(win)
    assert not wb.runner.cache.keep_stalls


def _nanogpt(tmp_path):  # type: ignore[no-untyped-def]
    return shared("h100-nanogpt-8rank")


def _nanogpt_rank6_alone(tmp_path):  # type: ignore[no-untyped-def]
    """Rank 6 of the 8-rank nanoGPT job alone in a folder: its collectives wait for absent peers."""
    src = shared_file("h100-nanogpt-8rank", "*rank6*")
    folder = tmp_path / "one-rank"
    folder.mkdir()
    shutil.copy(src, folder / src.name)
    return folder


@pytest.mark.parametrize(
    ("make_folder", "nonzero"),
    [
        (_nanogpt, ("queued", "before_window")),  # ranks 3-6 run tens of ms behind their CPU
        (_nanogpt_rank6_alone, ("peer_not_loaded",)),
    ],
    ids=["nanogpt-8rank", "nanogpt-rank6-alone"],
)
def test_every_cause_of_the_engine_has_a_column_with_its_values(qapp, tmp_path, make_folder, nonzero) -> None:
    folder = make_folder(tmp_path)
    # the engine on its own (not the window's copy of its report): what the pane must show
    report = idle_attribution(build_graph(load_job(folder, workers=1)))
    engine = {(r.rank, r.stream, r.iteration): r for r in report.rows}
    assert all(sum(r.causes[c] for r in report.rows) > 0 for c in nonzero), "the job no longer has them"
    w = open_in_window(qapp, folder)
    try:
        table = w.summaries.idle.causes
        model = table.model
        heads = [
            " ".join(str(model.headerData(i, Qt.Orientation.Horizontal)).split())
            for i in range(len(model.columns))
        ]
        tips = [
            model.headerData(i, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
            for i in range(len(model.columns))
        ]
        idle_col = heads.index("idle (ms)")
        # one column per cause, in the engine's order, headed by its label, its tip on hover
        col_of = {c.name: heads.index(f"{c.label} (ms)") for c in CAUSE_INFO}
        assert sorted(col_of.values()) == [col_of[c] for c in CAUSES]
        assert len(model.columns) == idle_col + 1 + len(CAUSES)
        assert all(tips[col_of[c.name]] == c.tip for c in CAUSE_INFO)
        assert {
            "GPU behind host (queued) (ms)",
            "before trace window (ms)",
            "peer rank not loaded (ms)",
        } <= set(heads)
        assert len(model.rows) == len(engine)
        for i, row in enumerate(model.rows):
            r = engine[(row.rank, row.stream, row.iteration)]
            idle = model.columns[idle_col].value(row)
            parts = {c: model.columns[col_of[c]].value(row) for c in CAUSES}
            assert idle == r.idle_ns and parts == r.causes, (row, r)
            assert sum(parts.values()) == idle  # the columns add up to the idle total shown
            for c in CAUSES:
                assert model.cell_text(i, col_of[c]) == f"{r.causes[c] / 1e6:,.3f}"
        for c in nonzero:
            assert sum(model.columns[col_of[c]].value(row) for row in model.rows) > 0, c
        # the CSV export has a column per cause too
        table.export_csv(tmp_path / "idle.csv")
        with (tmp_path / "idle.csv").open() as fh:
            got = list(csv.DictReader(fh))
        assert {f"{c}_ns" for c in CAUSES} <= set(got[0])
        assert sum(int(x[f"{nonzero[0]}_ns"]) for x in got) == sum(r.causes[nonzero[0]] for r in report.rows)
    finally:
        close_window(w)
