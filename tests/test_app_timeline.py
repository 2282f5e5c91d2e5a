"""The real window on the real 8-rank H100 job: lanes, navigation, selection, details, search,
summary panes, screenshot and exports — checked against values read from the trace."""

from __future__ import annotations

import csv
import math
import time

import numpy as np
import pytest
from app_helpers import (
    click,
    close_window,
    color_pixels,
    drag,
    hover,
    open_in_window,
    send_mouse,
    to_viewport,
    wheel,
)
from conftest import needs_shared, shared
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QImage, QKeyEvent
from PySide6.QtWidgets import QApplication

from app.panels.summary_panes import BREAKDOWN
from app.theme import FAMILY_HEX
from app.timeline.lane_layout import RowKind
from app.timeline.timeline_view import Hit
from lumos_core.replay.summaries import collectives_table
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import Kind

pytestmark = needs_shared

pytest_plugins = ["app_fixtures"]  # window, isolated QSettings


@pytest.fixture(scope="module")
def win(qapp):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, shared("h100-nanogpt-8rank"))
    yield w
    close_window(w)


@pytest.fixture
def view(win):  # type: ignore[no-untyped-def]
    v = win.timeline
    v.clear_marks()
    v.set_search("")
    if v.layout_model.collapsed_ranks or v.layout_model.expanded_cpu:
        v.layout_model.collapsed_ranks.clear()
        v.layout_model.expanded_cpu.clear()
        v.layout_model.rebuild()
        v.relayout()
    v.reset_view()
    return v


def reduce_scatter_77mb(win) -> Hit:  # type: ignore[no-untyped-def]
    """Rank 0's first 77 MB ReduceScatter kernel (a collective with full metadata)."""
    r0 = win.loaded.job.rank(0)
    row = int(np.flatnonzero(r0.collectives.size_bytes == 77266944)[0])
    return Hit(0, int(r0.collectives.event[row]))


def key(view, k: Qt.Key, text: str = "") -> None:  # type: ignore[no-untyped-def]
    ev = QKeyEvent(QEvent.Type.KeyPress, k, Qt.KeyboardModifier.NoModifier, text)
    QApplication.sendEvent(view.canvas, ev)
    QApplication.processEvents()


# ---------------------------------------------------------------- lanes and layout


def test_every_rank_has_its_streams_and_a_collapsed_cpu_row(win, view) -> None:
    assert win.windowTitle() == "Lumos — h100-nanogpt-8rank (8 ranks)"
    rows = view.layout_model.rows
    headers = [r for r in rows if r.kind == RowKind.RANK]
    assert [r.label for r in headers] == [f"rank {i} · NVIDIA H100 80GB HBM3" for i in range(8)]
    r0 = [r.label for r in rows if r.rank_index == 0]
    assert r0 == [
        "rank 0 · NVIDIA H100 80GB HBM3",
        "rank 0 ▸ stream 7 (compute)",
        "↳ overlapping",
        "rank 0 ▸ stream 23 (communication)",
        "rank 0 ▸ CPU: 4 threads",
    ]
    assert len(rows) == 40
    # CPU threads are collapsed by default: only their top level is drawn, in one row
    cpu = [r for r in rows if r.kind == RowKind.CPU_GROUP]
    assert len(cpu) == 8 and all(len(r.sources) == 4 and all(d == 0 for _, d in r.sources) for r in cpu)


def test_row_tables_hold_every_kernel_of_rank0(win) -> None:
    r0 = win.loaded.job.rank(0)
    table = win.loaded.tables[0]
    kinds = r0.kind[table.event]
    assert int((kinds == Kind.KERNEL).sum()) == 2917
    comm_lane = next(ln.index for ln in r0.lanes if ln.is_gpu and ln.stream == 23)
    a, b = table.row_slice(table.row_of[(comm_lane, 0)])
    fam = table.family[a:b]
    assert b - a == 76  # the 76 NCCL kernels, nothing else, on the communication stream
    assert (
        int((fam == Family.NCCL_REDUCE_SCATTER).sum()) == 38
        and int((fam == Family.NCCL_ALL_GATHER).sum()) == 38
    )


def test_overlapping_kernels_get_a_sub_row_and_stay_visible(win, view) -> None:
    r0 = win.loaded.job.rank(0)
    table = win.loaded.tables[0]
    compute = next(ln.index for ln in r0.lanes if ln.is_gpu and ln.stream == 7)
    sub = np.flatnonzero(
        (r0.lane == compute) & (r0.depth == 1) & np.isin(r0.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    )
    assert len(sub) == 39  # 39 kernels overlap another one on the compute stream
    ti = table.row_of[(compute, 1)]
    x0, x1 = view.x_range()
    px = (x1 - x0) / view.view_box.width()
    spans = table.spans(ti, x0, x1, px)
    # full view: merged spans, yet every overlapping kernel lies inside one of them
    s, e = r0.start[sub] / 1e6, (r0.start[sub] + r0.dur[sub]) / 1e6
    k = np.searchsorted(spans.start, s, side="right") - 1
    assert (k >= 0).all() and (spans.end[k] >= e - 1e-9).all()
    assert len(spans) <= view.view_box.width() + 1


# ---------------------------------------------------------------- navigation


def test_reset_shows_the_whole_job_with_iterations_in_the_combo(win, view) -> None:
    x0, x1 = view.x_range()
    end = win.loaded.job.span[1] / 1e6
    assert x0 <= 0 and x1 >= end and x1 - x0 < end * 1.05
    assert view.iteration_names == [f"ProfilerStep#{i}" for i in range(10, 14)]
    assert [win.iteration_combo.itemText(i) for i in range(1, 5)] == view.iteration_names


def test_zoom_to_iteration_covers_it_on_every_rank(win, view) -> None:
    view.zoom_to_iteration(0)
    x0, x1 = view.x_range()
    starts = [t.iterations[0].cpu_start / 1e6 for t in win.loaded.job.ranks]
    # ranks enter the profiled window at different times: rank 6's ProfilerStep#10 starts first
    assert starts[0] == pytest.approx(30.669229) and starts[6] == pytest.approx(0.116579) == min(starts)
    assert x0 <= min(starts) and min(starts) - x0 < 1.0
    ends = [
        it.start_ns / 1e6 + it.dur_ns / 1e6
        for it in win.loaded.iterations
        if it.iteration == "ProfilerStep#10"
    ]
    assert x1 >= max(ends)
    key(view, Qt.Key.Key_BracketRight, "]")
    x0b, _ = view.x_range()
    assert x0b > x0 + 20  # on to ProfilerStep#11


def test_wasd_zoom_and_pan(view) -> None:
    view.zoom_to(100, 110)
    key(view, Qt.Key.Key_W, "w")
    x0, x1 = view.x_range()
    assert x1 - x0 == pytest.approx(8.0)
    key(view, Qt.Key.Key_D, "d")
    y0, y1 = view.x_range()
    assert y0 - x0 == pytest.approx(8.0 * 0.15) and y1 - y0 == pytest.approx(8.0)
    key(view, Qt.Key.Key_S, "s")
    key(view, Qt.Key.Key_A, "a")
    z0, z1 = view.x_range()
    assert z1 - z0 == pytest.approx(10.0)
    key(view, Qt.Key.Key_0, "0")
    assert view.x_range()[1] - view.x_range()[0] > 200


def test_wheel_zooms_at_the_cursor_and_shift_wheel_scrolls_rows(view) -> None:
    view.set_all_cpu_expanded(True)  # more rows than fit, so there is something to scroll
    view.zoom_to(50, 150)
    pos = to_viewport(view, 120.0, 3.5)
    wheel(view, pos, 1)
    x0, x1 = view.x_range()
    assert x1 - x0 == pytest.approx(80.0, rel=1e-6)
    # the time under the cursor did not move
    assert view.view_box.mapSceneToView(view.canvas.mapToScene(pos)).x() == pytest.approx(120.0, abs=0.2)
    top0, _ = view.y_range()
    wheel(view, pos, -2, Qt.KeyboardModifier.ShiftModifier)
    assert view.y_range()[0] == pytest.approx(top0 + 6)
    assert view.x_range() == pytest.approx((x0, x1))
    view.set_all_cpu_expanded(False)


def test_drag_pans_and_shift_drag_measures_then_f_zooms_to_it(win, view) -> None:
    view.zoom_to(100, 120)
    a = to_viewport(view, 110.0, 5.5)
    b = to_viewport(view, 105.0, 5.5)
    drag(view, a, b)
    x0, x1 = view.x_range()
    assert x0 == pytest.approx(105.0, abs=0.05) and x1 - x0 == pytest.approx(20.0)
    m0, m1 = to_viewport(view, 108.0, 2.5), to_viewport(view, 112.0, 2.5)
    drag(view, m0, m1, Qt.KeyboardModifier.ShiftModifier)
    assert view.overlay.measure == pytest.approx((108.0, 112.0), abs=0.05)
    assert view.x_range() == pytest.approx((x0, x1))  # measuring does not pan
    assert "Measured 4.0" in win.status_label.text()
    key(view, Qt.Key.Key_F, "f")
    f0, f1 = view.x_range()
    assert f0 == pytest.approx(108.0 - 0.08, abs=0.06) and f1 == pytest.approx(112.0 + 0.08, abs=0.06)
    key(view, Qt.Key.Key_Escape)
    assert view.overlay.measure is None


def test_a_drag_right_after_a_mouse_move_is_still_a_drag(win, view) -> None:
    """pyqtgraph takes at most ``mouseRateLimit`` mouse moves a second and drops the others. Moves
    sent back to back by the test helpers were all dropped when the last move pyqtgraph had taken
    was less than 1/rate (10 ms) before: the drag ended as a click. The drag test above passed or
    failed depending on how long the repaint between its two drags took (fast in some processes,
    slow in others); the helpers now pace their moves the way a real mouse does."""
    view.zoom_to(100, 120)
    a, b = to_viewport(view, 110.0, 5.5), to_viewport(view, 105.0, 5.5)
    vp = view.canvas.viewport()
    time.sleep(0.05)  # pyqtgraph takes the next move
    send_mouse(vp, QEvent.Type.MouseMove, a, button=Qt.MouseButton.NoButton, buttons=Qt.MouseButton.NoButton)
    drag(view, a, b)  # at once, as a user who moves the pointer onto a task and drags it
    assert view.x_range()[0] == pytest.approx(105.0, abs=0.05)


# ---------------------------------------------------------------- hover, selection, details


def test_hover_shows_name_duration_and_stream(win, view) -> None:
    hit = reduce_scatter_77mb(win)
    s, e = view.event_span_ms(hit)
    view.zoom_to(s - 1, e + 1)
    texts: list[str] = []
    view.hovered.connect(texts.append)
    try:
        hover(view, to_viewport(view, (s + e) / 2, view.row_of_event(hit) + 0.5))
    finally:
        view.hovered.disconnect(texts.append)
    assert texts
    assert texts[-1].startswith("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")
    assert "2.984 ms" in texts[-1] and "stream 23 (communication)" in texts[-1] and "rank 0" in texts[-1]


def test_click_selects_the_kernel_fills_details_and_draws_the_launch_arrow(win, view) -> None:
    hit = reduce_scatter_77mb(win)
    s, e = view.event_span_ms(hit)
    assert (s, e) == pytest.approx((106.898098, 109.882334))
    view.zoom_to(s - 0.5, e + 0.5)
    row = view.row_of_event(hit)
    assert view.layout_model.rows[row].label == "rank 0 ▸ stream 23 (communication)"
    click(view, to_viewport(view, (s + e) / 2, row + 0.5))
    assert view.selected == hit
    d = win.details.details
    assert d is not None
    assert d.title == "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    assert d.value("Rank").startswith("0 — ") and "rank0" in d.value("Rank")
    assert d.value("Stream") == "stream 23 (communication)"
    assert d.value("Start") == "106.898098 ms" and d.value("Duration") == "2.984 ms"
    assert d.value("Size") == "73.69 MiB (77,266,944 B)"
    assert d.value("Collective") == "ReduceScatter" and d.value("Group size") == "8"
    assert d.value("Instance").endswith("on 8 of 8 ranks")
    assert d.value("Launch call") == "cuLaunchKernelEx"
    assert d.value("Thread") == "thread 155 (pt_autograd_0) (autograd thread)"
    assert d.args["In msg nelems"] == 77266944 // 2 and d.args["dtype"] == "BFloat16"
    chain = [v for _, v in d.section("Called from")]
    assert chain[0].startswith("nccl:_reduce_scatter_base")
    # the per-rank collective rows list all 8 ranks
    assert sum(1 for k, _ in d.section("Collective") if k.startswith("rank ")) == 8
    text = win.details.toPlainText()
    assert "cuLaunchKernelEx" in text and "73.69 MiB" in text
    # arrow from the launch call (rank 0's collapsed CPU row) to the kernel
    a, b = view.overlay.arrow
    assert (a.x(), b.x()) == pytest.approx((100.924873, 106.898098))
    cpu_row = next(
        i for i, r in enumerate(view.layout_model.rows) if r.kind == RowKind.CPU_GROUP and r.rank_index == 0
    )
    assert (a.y(), b.y()) == (cpu_row + 0.5, row + 0.5)
    # clicking where nothing is drawn (the rank header row) clears the selection
    click(view, to_viewport(view, e + 0.3, 0.5))
    assert view.selected is None and win.details.details is None


def test_details_of_a_cpu_op_show_its_shapes_and_gpu_work(win) -> None:
    from app.panels.details_panel import describe_event

    r0 = win.loaded.job.rank(0)
    mm = next(
        i
        for i in np.flatnonzero(r0.kind == Kind.CPU_OP)
        if r0.name_of(int(i)) == "aten::mm" and r0.args_of(int(i)).get("Input Dims")
    )
    d = describe_event(win.loaded, 0, int(mm))
    assert d.value("Kind") == "CPU op (cpu_op)"
    assert d.value("Thread").startswith("thread ")
    dims = d.args["Input Dims"]
    assert dims[0][1] == dims[1][0]  # (m, k) @ (k, n): shapes as recorded
    assert int(d.value("GPU tasks launched")) >= 1


# ---------------------------------------------------------------- search


def test_search_highlights_matches_across_ranks_and_steps_through_them(win, view) -> None:
    win.search_box.setText("ncclDevKernel_allgather")  # case-insensitive
    n = win.run_search()
    expected = sum(
        int(
            np.isin(
                t.name, [i for i, s in enumerate(t.strings) if "nccldevkernel_allgather" in s.lower()]
            ).sum()
        )
        for t in win.loaded.job.ranks
    )
    assert n == expected == 320
    assert win.match_label.text() == "320 matches"
    win.step_search(1)
    first = view.selected
    assert first is not None
    assert view.loaded.job.ranks[first.rank_index].rank == 7  # the earliest AllGather is rank 7's, at 2.74 ms
    assert view.event_span_ms(first)[0] == pytest.approx(2.735949)
    assert win.match_label.text() == "1 / 320"
    s, e = view.event_span_ms(first)
    x0, x1 = view.x_range()
    assert x0 <= s and e <= x1
    top, bottom = view.y_range()
    assert top <= view.row_of_event(first) < bottom
    view.canvas.grab()
    assert len(view.item._frame.highlights) > 0
    win.step_search(1)
    assert view.event_span_ms(view.selected)[0] >= s
    win.step_search(-1)
    assert view.selected == first
    win.search_box.setText("")
    assert win.run_search() == 0


# ---------------------------------------------------------------- collapsing


def test_clicking_a_rank_header_collapses_it_and_cpu_rows_expand(win, view) -> None:
    lm = view.layout_model
    view.canvas.grab()
    header_scene = view.view_box.mapViewToScene(QPointF(0, 0.5))
    x_label = view.label_axis.sceneBoundingRect().center().x()
    pos = view.canvas.mapFromScene(QPointF(x_label, header_scene.y()))
    click(view, pos)
    assert 0 in lm.collapsed_ranks
    assert len(lm.rows) == 36
    assert lm.rows[0].kind == RowKind.RANK and len(lm.rows[0].sources) == 3  # streams overlaid in the header
    assert lm.rows[1].label == "rank 1 · NVIDIA H100 80GB HBM3"
    view.toggle_row(0)
    assert not lm.collapsed_ranks and len(lm.rows) == 40
    cpu_row = next(i for i, r in enumerate(lm.rows) if r.kind == RowKind.CPU_GROUP and r.rank_index == 1)
    view.toggle_row(cpu_row)
    labels = [r.label for r in lm.rows if r.rank_index == 1 and r.kind == RowKind.CPU and r.depth == 0]
    assert labels[0] == "rank 1 ▸ thread 76 (python) (main thread)"
    r1 = win.loaded.job.rank(1)
    main = next(ln for ln in r1.lanes if ln.tid == 76)
    depth_rows = [r for r in lm.rows if r.rank_index == 1 and r.lane == main.index]
    assert len(depth_rows) == int(r1.depth[r1.lane_slice(main.index)].max()) + 1
    view.toggle_row(cpu_row)  # the first thread row (now at that index) collapses the group again
    assert len(lm.rows) == 40


# ---------------------------------------------------------------- summary panes


def test_iteration_pane_and_chart_show_the_breakdown(win) -> None:
    pane = win.summaries.iterations
    assert pane.model.rowCount() == 32
    r0 = [r for r in pane.model.rows if r.rank == 0]
    assert [r.iteration for r in r0] == [f"ProfilerStep#{i}" for i in range(10, 14)]
    assert r0[0].dur_ns == 44560644
    assert pane.model.cell_text(0, 3) == "44.561"
    bars = win.summaries.chart.bars
    assert len(bars) == len(BREAKDOWN) == 4
    widths = bars[0].opts["width"]
    assert len(widths) == 8
    assert widths[0] == pytest.approx(sum(r.exposed_compute_ns for r in r0) / 4 / 1e6)


def test_top_kernels_pane_per_job_and_per_rank(win) -> None:
    pane = win.summaries.kernels
    first = pane.proxy.index(0, 0).data()
    assert first.startswith("ncclDevKernel_AllGather")
    assert pane.proxy.index(0, 3).data() == "320"
    win.summaries.kernel_scope.setCurrentIndex(1)  # rank 0
    assert pane.proxy.index(0, 3).data() == "38"
    assert pane.proxy.index(0, 1).data() == "25.104"
    win.summaries.kernel_scope.setCurrentIndex(0)


def test_collectives_pane_lists_every_instance_with_bus_bandwidth(win) -> None:
    pane = win.summaries.collectives
    assert pane.model.rowCount() == 84
    ref = collectives_table(win.loaded.job)
    big = next(r for r in ref if r.size_bytes == 77266944 and r.kind == "ReduceScatter")
    k = pane.model.rows.index(big)
    assert pane.model.cell_text(k, 1) == "ReduceScatter"
    assert pane.model.cell_text(k, 2) == "73.7 MiB"
    assert pane.model.cell_text(k, 3) == f"{big.bus_bw_gbps:,.1f}"
    assert 150 < big.bus_bw_gbps < 450
    # instances cut off by the profiling window (size "?") are listed last and say so
    assert pane.model.cell_text(0, 2) != "?"
    last = pane.model.rowCount() - 1
    assert pane.model.cell_text(last, 2) == "?" and pane.model.cell_text(last, 11) == "cut off"


def test_clock_pane_shows_offsets(win) -> None:
    pane = win.summaries.clocks
    assert [r.rank for r in pane.model.rows] == list(range(8))
    assert pane.model.cell_text(0, 5) == "yes"
    assert "not applied" in win.summaries.clock_note.text()
    assert "agree" in win.summaries.clock_note.text()


# ---------------------------------------------------------------- screenshot and exports


def test_screenshot_contains_coloured_lanes_and_labels(win, view) -> None:
    img = win.grab().toImage()
    assert img.width() == 1600 and img.height() == 1000
    # GEMMs, fused elementwise kernels and both NCCL kinds are all visible at full view
    assert color_pixels(img, FAMILY_HEX[Family.GEMM]) > 3000
    assert color_pixels(img, FAMILY_HEX[Family.ELEMENTWISE]) > 3000
    assert color_pixels(img, FAMILY_HEX[Family.NCCL_REDUCE_SCATTER]) > 300
    assert color_pixels(img, FAMILY_HEX[Family.NCCL_ALL_GATHER]) > 300
    # the label column has dark text on its light background
    labels = view.canvas.grab(view.canvas.rect().adjusted(0, 30, -view.canvas.width() + 250, 0)).toImage()
    assert color_pixels(labels, "#1F2328", tolerance=60) > 500
    assert view.item.last_paint_s < 0.25
    assert win.timings["first_paint_s"] < 10


def test_export_view_png_svg_and_summaries_csv(win, view, tmp_path) -> None:
    png = win.export_view(tmp_path / "view.png")
    img = QImage(str(png))
    assert img.width() > 800 and color_pixels(img, FAMILY_HEX[Family.GEMM]) > 1000
    svg = win.export_view(tmp_path / "view.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    assert svg.count("rect") + svg.count("path") > 100
    written = win.summaries.export_all(tmp_path)
    assert {p.name for p in written} == {
        "iterations.csv",
        "rank_breakdown.csv",
        "top_kernels.csv",
        "collectives.csv",
        "clocks.csv",
        "memory_peaks.csv",
        "allocating_operators.csv",
        "operators.csv",
        "idle_causes.csv",
        "unexplained_delays.csv",
    }
    with (tmp_path / "collectives.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 84
    with (tmp_path / "iterations.csv").open() as fh:
        its = list(csv.DictReader(fh))
    assert its[0]["iteration"] == "ProfilerStep#10" and int(its[0]["dur_ns"]) == 44560644
    assert not math.isnan(float(rows[-1]["dur_max_ns"]))


def test_a_second_layer_draws_into_the_same_rows(win, view) -> None:
    """Part 2 overlays a predicted timeline: any RankTrace-like source with the same lanes can be a
    layer with its own style, without touching the layout or the picking of the measured layer."""
    import dataclasses

    from app.timeline.span_item import Layer, LayerStyle
    from app.view_model.lane_data import build_row_table

    lj = win.loaded
    ghost_ranks = [
        dataclasses.replace(t, start=t.start + 2_000_000) for t in lj.job.ranks
    ]  # "predicted": 2 ms later
    ghost_tables = [build_row_table(t, f) for t, f in zip(ghost_ranks, lj.families)]
    measured = view.item.layers[0]
    ghost = Layer(
        "predicted", ghost_ranks, ghost_tables, LayerStyle(y0=0.55, height=0.4, opacity=0.45, labels=False)
    )
    view.item.set_data([measured, ghost], view.layout_model, view.item.iterations)
    try:
        view.zoom_to(100, 110)
        view.canvas.grab()
        frame = view.item._frame
        assert set(frame.layer_of_chunk) == {0, 1}
        n0 = sum(len(a) for (_, a), li in zip(frame.rects, frame.layer_of_chunk) if li == 0)
        n1 = sum(len(a) for (_, a), li in zip(frame.rects, frame.layer_of_chunk) if li == 1)
        assert n0 > 100 and n1 > 100  # both layers drawn in the same rows
        hit = reduce_scatter_77mb(win)
        s, e = view.event_span_ms(hit)
        assert view.pick((s + e) / 2, view.row_of_event(hit) + 0.5) == hit  # picking stays on measured
    finally:
        view.item.set_data([measured], view.layout_model, view.item.iterations)
