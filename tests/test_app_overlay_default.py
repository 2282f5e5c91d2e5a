"""The default view stays readable: after the automatic baseline replay the measured timeline keeps
its family colours, the predicted layer is outlined only where it differs visibly, and outlines never
paint over thin tasks. Checked on the demo job (it replays at 0 %) by a colour census of lanes."""

from __future__ import annotations

import numpy as np
from app_helpers import color_pixels, to_viewport, wait_loaded
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app.theme import FAMILY_HEX
from app.timeline.frame import outline_lines
from app.timeline.prediction_layers import GHOST_COLOR
from app.view_model.lane_data import build_row_table
from app.view_model.overlay_data import format_small_ms, task_deviation
from lumos_core.trace.kernel_families import Family

pytest_plugins = ["app_fixtures"]  # isolated QSettings


def lane_image(w, label: str) -> QImage:  # type: ignore[no-untyped-def]
    """The drawn data area of the row labelled ``label`` (one lane), as the canvas paints it."""
    tl = w.timeline
    rows = [k for k, r in enumerate(tl.layout_model.rows) if r.label == label]
    assert rows, [r.label for r in tl.layout_model.rows][:12]
    r = rows[0]
    tl.scroll_to_row(max(0, r - 2))
    QApplication.processEvents()
    x0, x1 = tl.x_range()
    a = to_viewport(tl, x0, r)
    b = to_viewport(tl, x1, r + 1)
    img = tl.canvas.grab().toImage()
    dpr = img.devicePixelRatio()
    rect = QRect(
        round(a.x() * dpr), round(a.y() * dpr), round((b.x() - a.x()) * dpr), round((b.y() - a.y()) * dpr)
    )
    return img.copy(rect)


def census(img: QImage) -> dict[Family, int]:
    return {f: color_pixels(img, FAMILY_HEX[f], tolerance=6) for f in Family}


LANES = [
    "rank 0 ▸ stream 20 (communication)",
    "rank 0 ▸ stream 7 (compute)",
    "rank 4 ▸ stream 28 (communication)",
]


def test_after_the_baseline_replay_the_measured_lanes_keep_their_colours(demo) -> None:
    wb, tl = demo.workbench, demo.timeline
    assert wb.shown is not None and wb.shown.summary.kind == "replay"
    assert tl.shown_mode == "differences"
    # the status bar says how well the replay matches; the demo's replay is exact
    assert "matches the measured timeline within 0 ns" in wb.last_notice
    assert wb.shown.overlay.match_within() == (0.0, 0.0)
    tl.zoom_to_iteration(1)
    for lane in LANES:
        wb.set_overlay_mode("measured")
        off = census(lane_image(demo, lane))
        wb.set_overlay_mode("differences")
        on = census(lane_image(demo, lane))
        ghost = GHOST_COLOR["light"]
        assert sum(off.values()) > 300, (lane, off)
        # nothing differs, so nothing is drawn over the measured lane
        assert on == off, lane
        assert color_pixels(lane_image(demo, lane), ghost, tolerance=6) == 0
        # every task outlined (the user's explicit choice): the family colours are still all there
        wb.set_overlay_mode("ghost")
        outlined = census(lane_image(demo, lane))
        for family, n in off.items():
            assert outlined[family] >= 0.9 * n, (lane, family, outlined[family], n)
        assert color_pixels(lane_image(demo, lane), ghost, tolerance=6) > 50
    wb.set_overlay_mode("differences")
    wb.mode_chosen = False  # back to the defaults for the next test


def test_differences_outline_only_what_moved(demo, qtbot) -> None:
    wb, tl = demo.workbench, demo.timeline
    with qtbot.waitSignal(wb.scenario_added, timeout=60_000) as got:
        wb.request_estimate({"dp": 16})
    wait_loaded(demo)
    s = got.args[0]
    assert not s.overlay.separate
    wb.set_overlay_mode("differences")
    tl.zoom_to_iteration(1)
    lane = "rank 0 ▸ stream 24 (communication)"  # the gradient collectives: they cross nodes at DP 16
    moved = color_pixels(lane_image(demo, lane), GHOST_COLOR["light"], tolerance=6)
    assert moved > 100
    # the measured collectives under the outlines keep their colours
    on = census(lane_image(demo, lane))
    wb.set_overlay_mode("measured")
    off = census(lane_image(demo, lane))
    for family, n in off.items():
        assert on[family] >= 0.9 * n, (family, on[family], n)
    wb.set_overlay_mode("differences")
    wb.mode_chosen = False


def test_task_deviation_is_per_task_start_or_end(demo) -> None:
    rank = demo.loaded.job.ranks[0]
    table = build_row_table(rank, demo.loaded.families[0])
    assert not task_deviation(table, rank).any()
    shifted = table.start.copy()
    table.start = shifted + 0.002  # 2 µs later
    dev = task_deviation(table, rank)
    assert dev is not None and np.allclose(dev, 0.002)


def test_outlines_of_thin_spans_have_no_sides() -> None:
    rects = np.array([[10.0, 0.0, 2.0, 18.0], [20.0, 0.0, 30.0, 18.0]])
    lines = outline_lines(rects)
    vertical = lines[lines[:, 0] == lines[:, 2]]
    assert len(lines) == 6 and set(vertical[:, 0]) == {20.0, 50.0}


def test_small_durations_are_readable() -> None:
    assert format_small_ms(0.0) == "0 ns"
    assert format_small_ms(0.00038) == "380 ns"
    assert format_small_ms(0.0068) == "6.8 µs"
    assert format_small_ms(1.25) == "1.25 ms"
