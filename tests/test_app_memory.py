"""The app's memory lane, Memory tab and Operators tab, on the project's own recorded traces."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from app_helpers import color_pixels
from conftest import REPO

from app.panels.summary_panes import SummaryPanes
from app.timeline.lane_layout import MEMORY_ROWS, RowKind
from app.timeline.memory_lane import ALLOCATED, PEAK, step_points
from app.timeline.timeline_view import TimelineView
from app.view_model.loaded_job import prepare_job
from lumos_core.trace.memory_summary import NO_MEMORY_HINT

MEM = REPO / "tests" / "data" / "cpu-gpt-memory" / "base"
PLAIN = REPO / "tests" / "data" / "cpu-gpt" / "base"


@pytest.fixture(scope="module")
def loaded():
    return prepare_job(str(MEM), lambda f, m: None)


def test_memory_lane_is_drawn_under_the_rank_with_its_peak(qtbot, loaded) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(1200, 400)
    view.set_job(loaded)
    view.show()
    qtbot.waitExposed(view)
    rows = [r for r in view.layout_model.rows if r.kind == RowKind.MEMORY]
    assert [r.depth for r in rows] == list(range(MEMORY_ROWS))
    curve = view.memory_item.curves[0]
    raw = [
        e
        for e in json.loads(gzip.decompress((MEM / "rank0.pt.trace.json.gz").read_bytes()))["traceEvents"]
        if e.get("name") == "[memory]"
    ]
    assert curve.peak_bytes == max(e["args"]["Total Allocated"] for e in raw)
    img = view.grab().toImage()
    assert color_pixels(img, ALLOCATED, tolerance=40) > 200
    assert color_pixels(img, PEAK, tolerance=40) > 10


def test_a_trace_without_records_gets_no_lane_and_says_how(qtbot) -> None:
    plain = prepare_job(str(PLAIN), lambda f, m: None)
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_job(plain)
    assert not any(r.kind == RowKind.MEMORY for r in view.layout_model.rows)
    panes = SummaryPanes()
    qtbot.addWidget(panes)
    panes.set_job(plain)
    assert not panes.memory.note.isHidden() and panes.memory.note.text() == NO_MEMORY_HINT
    assert panes.memory.peaks.model.rows == []


def test_memory_and_operator_tabs(qtbot, loaded) -> None:
    panes = SummaryPanes()
    qtbot.addWidget(panes)
    panes.set_job(loaded)
    assert panes.memory.note.isHidden()
    peaks = panes.memory.peaks.model.rows
    whole = next(r for r in peaks if r.iteration == "whole trace")
    assert whole.peak_allocated_bytes == loaded.memory[0][0].peak_allocated
    assert [r.iteration for r in peaks[1:]] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert panes.memory.operators.model.rows[0].bytes > 0
    ops = {r.name: r for r in panes.operators.model.rows}
    raw = json.loads(gzip.decompress((MEM / "rank0.pt.trace.json.gz").read_bytes()))["traceEvents"]
    mm = [e for e in raw if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"]
    assert ops["aten::mm"].calls == len(mm)
    assert ops["aten::mm"].host_total_ns == pytest.approx(sum(e["dur"] for e in mm) * 1000, rel=1e-6)
    assert all(r.host_self_ns <= r.host_total_ns for r in ops.values())


def test_downsampled_curve_keeps_the_peak() -> None:
    ms = np.linspace(0, 100, 100_000)
    v = np.sin(ms) + (ms == ms[54321]) * 10
    x, y = step_points(ms, v, 0, 100, px=0.5)
    assert len(x) < 2000 and y.max() == v.max()


def _grid_rows():
    from lumos_core.sweep.point import OK, OUT_OF_MEMORY, GridRow

    return [
        GridRow(
            {"tp": 1},
            1,
            OUT_OF_MEMORY,
            iteration_us=50_000.0,
            note="out of memory: predicted peak 900.0 GiB per GPU > H100 79.2 GiB",
            peak_memory_bytes=900 << 30,
            capacity_bytes=85_028_372_480,
        ),
        GridRow(
            {"tp": 2}, 2, OK, iteration_us=80_000.0, peak_memory_bytes=60 << 30, capacity_bytes=85_028_372_480
        ),
        GridRow(
            {"tp": 4}, 4, OK, iteration_us=45_000.0, peak_memory_bytes=30 << 30, capacity_bytes=85_028_372_480
        ),
    ]


def test_sweep_table_greys_out_what_does_not_fit_and_says_why(qtbot) -> None:
    from PySide6.QtCore import Qt

    from app.panels.table_model import MUTED_ROW
    from app.sweep.grid_views import grid_table
    from app.sweep.pareto_chart import ParetoChart

    pane = grid_table()
    qtbot.addWidget(pane)
    pane.model.set_rows(_grid_rows())
    problem = [c.header for c in pane.model.columns].index("problem")
    assert pane.model.data(pane.model.index(0, problem)).startswith("out of memory")
    assert pane.model.data(pane.model.index(0, 0), Qt.ItemDataRole.ForegroundRole).name() == MUTED_ROW.lower()
    assert pane.model.data(pane.model.index(1, 0), Qt.ItemDataRole.ForegroundRole) is None
    chart = ParetoChart()
    qtbot.addWidget(chart)
    chart.set_rows(_grid_rows())
    assert chart.front == [1, 2]
    dots = chart.items[0]
    assert [p.symbol() for p in dots.points()] == ["x", "o", "o"]


def test_what_if_headline_shows_memory_red_when_it_does_not_fit() -> None:
    from types import SimpleNamespace

    from app.whatif.prediction_pane import OUT_OF_MEMORY_COLOR, memory_html

    mem = {"peak_bytes": 900 << 30, "capacity_bytes": 80 << 30, "fits": False, "gpu": "H100", "peak_stage": 0}
    text = memory_html(SimpleNamespace(estimate_json={"memory": mem}))
    assert OUT_OF_MEMORY_COLOR in text and "does not fit" in text and "900.0 GiB" in text
    ok = memory_html(SimpleNamespace(estimate_json={"memory": {**mem, "peak_bytes": 40 << 30, "fits": True}}))
    assert OUT_OF_MEMORY_COLOR not in ok and "fits" in ok


def test_scenario_list_shows_memory_beside_time_red_when_it_does_not_fit(qtbot) -> None:
    from types import SimpleNamespace

    from app.whatif.scenarios import COLUMNS, OUT_OF_MEMORY_COLOR, ScenarioList
    from lumos_core.whatif.throughput import Throughput

    lst = ScenarioList()
    qtbot.addWidget(lst)
    mem = {"peak_bytes": 900 << 30, "capacity_bytes": 80 << 30, "fits": False, "gpu": "H100", "peak_stage": 0}
    summary = SimpleNamespace(
        world_size=1, iteration_us=5000.0, replayed=SimpleNamespace(iteration_us=4000.0), kind="estimate",
        changes={"tp": 1}, estimate_json={"memory": mem}, replay_error_pct=0.0, work_changed=False,
        cpu_paced=None, throughput=Throughput(5000.0, 1, "tokens", 4096.0, 1e13, 989e12),
    )  # fmt: skip
    lst.add(SimpleNamespace(id=1, name="TP 1", seconds=0.1, summary=summary), 4000.0)
    item = lst.tree.topLevelItem(0)
    col = COLUMNS.index("memory (GiB)")
    assert item.text(col).startswith("900.0") and col == COLUMNS.index("iteration (ms)") + 2  # beside the time and its change
    assert item.foreground(col).color().name() == OUT_OF_MEMORY_COLOR.lower()


def test_scenario_list_gpus_are_the_jobs_not_the_loaded_ranks(qtbot) -> None:
    """A baseline replay of a folder holding 1 of a 2-rank job's files simulates 1 rank; its rate
    per GPU is over the job's 2 GPUs, and the GPUs column must say 2 (it said 1)."""
    from types import SimpleNamespace

    from app.whatif.scenarios import COLUMNS, ScenarioList
    from lumos_core.whatif.throughput import Throughput

    lst = ScenarioList()
    qtbot.addWidget(lst)
    summary = SimpleNamespace(
        world_size=1, iteration_us=5000.0, replayed=SimpleNamespace(iteration_us=5000.0), kind="replay",
        changes={}, estimate_json={}, replay_error_pct=0.0, work_changed=False,
        cpu_paced=None, throughput=Throughput(5000.0, 2, "microbatches", 2.0, float("nan"), 312e12, "no model"),
    )  # fmt: skip
    lst.add(SimpleNamespace(id=1, name="baseline replay", seconds=0.1, summary=summary), 5000.0)
    assert lst.tree.topLevelItem(0).text(COLUMNS.index("GPUs")) == "2"
