"""What-ifs that rebuild the job (pipeline stages) on the synthetic demo job (TP2 x PP2 x DP2): the
estimator returns new ranks with their own events and lanes, shown on their own with the measured
ranks kept below for reference. No shared traces needed."""

from __future__ import annotations

import math

import numpy as np
from app_helpers import close_window, make_window, wait_loaded
from PySide6.QtWidgets import QApplication, QSplitter

from app.timeline.lane_layout import RowKind
from app.timeline.timeline_view import PREDICTED, Hit
from app.whatif.scenarios import COLUMNS
from lumos_core.trace.model import Kind

pytest_plugins = ["app_fixtures"]  # isolated QSettings


def test_pipeline_change_shows_the_rebuilt_ranks_with_the_measured_for_reference(demo, qtbot) -> None:
    wb = demo.workbench
    base = wb.scenario_named("baseline replay")
    assert base is not None and base.summary.replay_error_pct < 1.0
    with qtbot.waitSignal(wb.scenario_added, timeout=120_000) as got:
        wb.request_estimate({"pp": 4})
    s = got.args[0]
    wait_loaded(demo)
    assert s.name == "PP 4" and s.summary.world_size == 16 and s.overlay.separate
    tl = demo.timeline
    assert tl.shown_mode == "separate" and wb.mode_combo.currentData() == "separate"
    n = tl.n_measured
    headers = [r for r in tl.layout_model.rows if r.kind == RowKind.RANK]
    predicted = [r for r in headers if r.rank_index >= n]
    reference = [r for r in headers if r.rank_index < n]
    assert len(predicted) == len(s.overlay.ranks) == len(s.summary.represents)
    assert headers[: len(predicted)] == predicted  # the predicted job first
    assert all(r.label.endswith("· predicted") for r in predicted)
    assert [r.label for r in reference] == [f"measured rank {i} · for reference" for i in range(8)]
    assert tl.layout_model.collapsed_ranks == set(range(n))
    # every predicted iteration has the measured job's mean to compare with
    rows = s.summary.iterations
    assert rows and all(r.traced_rank == -1 and not math.isnan(r.measured_ms) for r in rows)
    # a rebuilt task says why it lasts what it lasts
    p = s.overlay.ranks[0]
    ev = int(np.flatnonzero(p.kind == Kind.KERNEL)[30])
    hit = Hit(n, ev, PREDICTED)
    tl.select(hit, reveal=True)
    d = demo.details.details
    assert d.title.startswith("[predicted]") and d.section("Why")
    assert d.value("Predicted rank").startswith(f"rank {p.rank}")
    assert tl.describe(hit).startswith("predicted: ")
    # compare: the rebuilt ranks alone
    wb.compare_pair(wb.scenario_named("baseline replay").id, s.id)
    b_view = wb.compare.pane_b.timeline
    assert b_view.shown_mode == "separate"
    assert all(r.rank_index >= n for r in b_view.layout_model.rows)
    assert {r.section for r in wb.compare.rows} >= {"iteration", "breakdown", "collective"}
    demo.workspace.setCurrentWidget(demo.timeline_page)


def test_data_parallel_replicas_are_labelled_with_the_ranks_they_stand_for(demo, qtbot) -> None:
    wb = demo.workbench
    with qtbot.waitSignal(wb.scenario_added, timeout=60_000) as got:
        wb.request_estimate({"dp": 4})
    wait_loaded(demo)
    s = got.args[0]
    assert not s.overlay.separate and s.summary.world_size == 16
    stands = s.summary.represents[0]  # the engine's numbering of the new job's replicas
    assert len(stands) == 2 and stands[0] == 0
    text = f"rank 0 (= ranks {stands[0]}, {stands[1]})"
    wb.set_overlay_mode("predicted")
    headers = [r.label for r in demo.timeline.layout_model.rows if r.kind == RowKind.RANK]
    assert headers[0] == f"{text} · predicted"
    wb.set_overlay_mode("ghost")
    headers = [r.label for r in demo.timeline.layout_model.rows if r.kind == RowKind.RANK]
    assert headers[0] == text
    wb.set_overlay_mode("measured")
    assert demo.timeline.prediction is None
    QApplication.processEvents()


def test_details_follow_the_scenario_shown_not_the_previous_one(demo, qtbot) -> None:
    wb = demo.workbench
    base = wb.scenario_named("baseline replay")
    assert base is not None
    wb.show_scenario(base.id)
    wb.set_overlay_mode("ghost")
    r0 = demo.loaded.job.ranks[0]
    demo.timeline.select(Hit(0, int(np.flatnonzero(r0.kind == Kind.KERNEL)[5])), reveal=True)
    titles = lambda: [t for t, _ in demo.details.details.sections]  # noqa: E731
    assert "Predicted (baseline replay)" in titles()
    with qtbot.waitSignal(wb.scenario_added, timeout=60_000) as got:
        wb.request_estimate({"dp": 8})
    wait_loaded(demo)
    s = got.args[0]
    assert wb.shown is s and not s.overlay.separate
    assert "Predicted (baseline replay)" not in titles()  # the new scenario's, not the old one's
    assert f"Predicted ({s.name})" in titles()
    wb.show_scenario(None)
    assert not any(t.startswith("Predicted (") for t in titles())


def test_prediction_tab_legend_never_covers_the_bars_in_a_small_window(demo) -> None:
    wb = demo.workbench
    s = wb.scenario_named("baseline replay")
    assert s is not None
    demo.resize(1200, 760)
    demo.reveal(wb.prediction)
    wb.show_scenario(s.id)
    pane = wb.prediction
    pane.show_summary(s.summary)
    split = pane.findChild(QSplitter)
    split.setSizes([120, 400, 400])  # the user drags the tables up
    for _ in range(5):
        QApplication.processEvents()
    bars = pane.bars.geometry()
    legend = pane.legend.geometry()
    headline = pane.headline.geometry()
    assert pane.legend.isVisible() and pane.bars.isVisible()
    assert bars.height() >= pane.bars.minimumHeight()
    assert not legend.intersects(bars), (legend, bars)
    assert not headline.intersects(bars), (headline, bars)
    demo.resize(1600, 1000)


def test_replay_error_is_labelled_in_sample_and_scenario_names_stay_readable(demo) -> None:
    wb = demo.workbench
    base = wb.scenario_named("baseline replay")
    assert base is not None
    wb.show_scenario(base.id)
    wb.prediction.show_summary(base.summary)
    assert "Replay error (in-sample)" in wb.prediction.headline.text()
    assert "SYNTHETIC job" in demo.status_label.text()  # the demo is written by lumos synth
    tree = wb.scenario_list.tree
    rows = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    row = next(r for r in rows if r.text(0) == "baseline replay")
    assert row.text(COLUMNS.index("vs baseline")).endswith("in-sample")
    # the name column is wide enough for every name, whatever the dock's width
    QApplication.processEvents()
    fm = tree.fontMetrics()
    assert tree.columnWidth(0) >= max(fm.horizontalAdvance(r.text(0)) for r in rows)


def test_a_click_right_after_opening_supersedes_the_baseline_replay_which_comes_back(qtbot) -> None:
    w = make_window()
    try:
        with qtbot.waitSignal(w.job_loaded, timeout=60_000):
            w.open_demo()
        wb = w.workbench
        assert wb.runner.running is not None and wb.runner.running.auto  # the replay has started
        assert wb.request_estimate({"dp": 4})
        assert [r.auto for r in wb.runner.queued] == [True]  # superseded, queued again
        wait_loaded(w)
        assert [s.name for s in wb.scenarios.values()] == ["DP 4", "baseline replay"]
        assert wb.shown is not None and wb.shown.name == "DP 4"  # the replay did not take the view
        qtbot.waitUntil(lambda: wb.runner.live_threads == 0, timeout=10_000)
    finally:
        close_window(w)
