"""The Sweep dialog in the real window on the real 8-rank H100 job: a grid over the What-if panel's
knobs run in the background by the local process pool and by Ray (identical rows, equal to the
core's task run here), skipped rows with their reason, the time-vs-knob and Pareto views, a point
made into a scenario, cancel (workers stopped), a bad grid explained, the rows saved as a
resumable results file."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from app_helpers import close_window, open_in_window
from conftest import needs_shared, shared
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QApplication

from lumos_core.sweep.point import estimate_point
from lumos_core.sweep.results import ResultsFile

pytestmark = needs_shared

pytest_plugins = ["app_fixtures"]  # isolated QSettings

NANOGPT = shared("h100-nanogpt-8rank")
GRID = {"dp": "8, 16", "pp": "1, 2", "gpu": "H100, A100"}  # 8 configurations, PP 2 skipped


@pytest.fixture(scope="module")
def win(qapp):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, NANOGPT)
    yield w
    close_window(w)
    assert not multiprocessing.active_children()


@pytest.fixture(scope="module")
def local_run(win):  # type: ignore[no-untyped-def]
    """The grid swept by the local engine (2 worker processes): its rows, report and status line
    as the dialog showed them. (Kept here: the Ray test, which the suite runs first, sweeps the same
    grid again in the same dialog.)"""
    d = win.workbench.grid_sweep
    run_sweep(d, GRID, "local")
    return dict(d.rows), d.report, d.status.text()


@pytest.fixture(scope="module")
def local_rows(local_run):  # type: ignore[no-untyped-def]
    return local_run[0]


def run_sweep(d, grid: dict[str, str], engine: str, timeout_s: float = 180) -> None:  # type: ignore[no-untyped-def]
    d.open_dialog()
    d.set_grid_text(grid)
    d.engine_combo.setCurrentIndex(d.engine_combo.findData(engine))
    d.workers.setValue(2)
    assert d.run(), d.status.text()
    wait_done(d, timeout_s)
    assert not d.last_error, d.last_error


def wait_done(d, timeout_s: float) -> float:  # type: ignore[no-untyped-def]
    """Process events until the sweep's thread has been joined; the longest event-loop gap (s)."""
    end = time.monotonic() + timeout_s
    last, gap = time.monotonic(), 0.0
    while d.running and time.monotonic() < end:
        QApplication.processEvents()
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        time.sleep(0.005)
    QApplication.processEvents()
    assert not d.running, "the sweep did not finish in time"
    return gap


def test_the_what_if_panel_and_the_run_menu_open_the_dialog(win) -> None:
    d = win.workbench.grid_sweep
    assert d.panel_button.parent() is not None and d.panel_button.text() == "Sweep these knobs…"
    d.panel_button.click()
    assert d.isVisible()
    assert d.open_action in win.menuBar().actions()[-1].menu().actions() or any(
        d.open_action in a.menu().actions() for a in win.menuBar().actions() if a.menu()
    )
    # the traced configuration beside each knob; DP suggested from it
    assert d.traced["dp"].text() == "traced: 8" and d.traced["gpu"].text() == "traced: H100"
    assert d.editors["dp"].text().startswith("8, 16")


def test_local_engine_rows_equal_the_core_task_and_fill_both_views(win, local_run) -> None:
    d = win.workbench.grid_sweep
    local_rows, report, status = local_run
    loaded, baseline, graph = (
        win.workbench.runner.loaded,
        win.workbench.runner.baseline,
        win.workbench.runner.cache.graph,
    )
    assert len(local_rows) == 8 and report is not None and report.engine == "local"
    assert "8 configurations" in status and "4 estimated, 4 skipped" in status
    # the views below show the dialog's last sweep of this grid (the Ray test's, if it ran first:
    # the same rows, as it checks)
    assert {k: r.status for k, r in d.rows.items()} == {k: r.status for k, r in local_rows.items()}
    for key, row in local_rows.items():
        here = estimate_point(loaded.job, graph, baseline, row.changes)
        assert row.same_numbers(here), key
    skipped = [r for r in local_rows.values() if not r.ok]
    assert sorted(r.key for r in skipped) == sorted(
        f"dp={dp},pp=2,gpu={g}" for dp in (8, 16) for g in ("H100", "A100")
    )
    assert all("pipeline" in r.note for r in skipped)
    assert d.table.model.rowCount() == 8
    # time vs knob: x = dp, one slice per (pp, gpu); the chart holds bars, line and labels
    d.view_combo.setCurrentIndex(d.view_combo.findData("knob"))
    d.x_combo.setCurrentIndex(d.x_combo.findData("dp"))
    assert [d.slice_combo.itemText(i) for i in range(d.slice_combo.count())] == [
        "pp=1,gpu=H100",
        "pp=1,gpu=A100",
        "pp=2,gpu=H100",
        "pp=2,gpu=A100",
    ]
    d.slice_combo.setCurrentIndex(1)
    assert [r.key for r in d.slice_rows()] == ["dp=8,pp=1,gpu=A100", "dp=16,pp=1,gpu=A100"]
    assert len(d.knob_chart.items) >= 5
    d.slice_combo.setCurrentIndex(2)  # nothing of PP 2 can be estimated: said, not drawn
    assert "can be estimated" in d.chart_note.text() and d.knob_chart.items == []
    d.slice_combo.setCurrentIndex(0)
    # a click on the second bar picks that configuration
    vb = d.knob_chart.plotItem.vb
    d.grab()
    scene_pos = vb.mapViewToScene(QPointF(1.0, 1.0))

    class Click:
        def scenePos(self) -> QPointF:
            return scene_pos

    d._on_knob_chart_clicked(Click())
    assert d.selected == "dp=16,pp=1,gpu=H100" and d.scenario_button.isEnabled()
    # Pareto: every estimated configuration; the front holds the fastest for each GPU count
    d.view_combo.setCurrentIndex(d.view_combo.findData("pareto"))
    assert d.charts.currentWidget() is d.pareto
    ok = [r for r in d.shown if r.ok]
    front = [d.shown[i] for i in d.pareto.front]
    assert front and front[0].world_size == 8
    assert front[0].iteration_us == min(r.iteration_us for r in ok if r.world_size == 8)
    assert all(b.iteration_us < a.iteration_us for a, b in zip(front, front[1:]))
    assert "Pareto front" in d.chart_note.text()


def test_a_point_becomes_a_scenario_with_the_same_numbers(win, local_rows, qtbot) -> None:
    d = win.workbench.grid_sweep
    row = local_rows["dp=16,pp=1,gpu=A100"]
    d.select(row.key)
    selected = d.table.view.selectionModel().selectedRows()
    assert [d.shown[d.table.proxy.mapToSource(i).row()].key for i in selected] == [row.key]
    with qtbot.waitSignal(win.workbench.runner.scenario_ready, timeout=60_000) as blocker:
        assert d.make_scenario()
    s = blocker.args[0]
    assert s.changes == {"dp": 16, "gpu": "A100"} and s.summary.iteration_us == row.iteration_us
    end = time.monotonic() + 30
    while win.workbench.runner.busy and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    d.select("dp=16,pp=2,gpu=A100")  # a skipped configuration cannot be a scenario
    assert not d.scenario_button.isEnabled() and not d.make_scenario()
    assert "skipped" in d.picked.text()


def test_the_ray_engine_gives_identical_rows_and_stops_with_the_dialog(win, local_rows) -> None:
    ray = pytest.importorskip("ray")
    d = win.workbench.grid_sweep
    run_sweep(d, GRID, "ray", timeout_s=240)
    assert d.report is not None and d.report.engine == "ray" and d.report.workers == 2
    assert set(d.rows) == set(local_rows)
    for key, row in d.rows.items():
        assert row.same_numbers(local_rows[key]), key
    assert ray.is_initialized()
    d.shutdown()  # the window does this when it closes
    assert not ray.is_initialized()


def test_cancel_stops_the_sweep_and_its_worker_processes(win) -> None:
    d = win.workbench.grid_sweep
    d.open_dialog()
    d.set_grid_text({"dp": "8, 16, 32", "microbatches": "4, 8, 16"})  # rebuilt graphs: seconds each
    d.engine_combo.setCurrentIndex(d.engine_combo.findData("local"))
    d.workers.setValue(2)
    assert d.run()
    end = time.monotonic() + 60
    while not multiprocessing.active_children() and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)
    assert d.cancel_button.isEnabled()
    t0 = time.monotonic()
    d.cancel_button.click()
    gap = wait_done(d, 30)
    assert time.monotonic() - t0 < 10, "cancel waited for the estimates still running"
    assert gap < 2.0
    assert d.status.text().startswith("Cancelled:") and len(d.rows) < 9
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]
    assert d.run_button.isEnabled() and not d.cancel_button.isEnabled()


def test_a_bad_grid_is_explained_and_nothing_runs(win) -> None:
    d = win.workbench.grid_sweep
    d.set_grid_text({"dp": "8, 16.5"})
    assert "dp must be a whole number" in d.grid_label.text()
    assert not d.run() and "whole number" in d.last_error and not d.running
    d.set_grid_text({})
    assert not d.run() and "at least one knob" in d.last_error


def test_the_rows_save_as_a_results_file_the_cli_resumes(win, local_rows, tmp_path) -> None:
    d = win.workbench.grid_sweep
    d.set_grid_text(GRID)
    d.grid = d.current_grid()
    d.rows, d.keys = dict(local_rows), [r.key for r in local_rows.values()]
    d.refresh_views()
    out = tmp_path / "sweep.csv"
    d.save_csv(str(out))
    with ResultsFile(out, d.grid.columns) as back:
        assert set(back.done) == set(local_rows)
        for key, row in back.done.items():
            assert row.status == local_rows[key].status and row.breakdown == local_rows[key].breakdown
    header = "config,dp,pp,gpu,world_size,status,iteration_ms,exposed_compute_ms,overlapped_ms,"
    header += "exposed_comm_ms,other_ms,change_pct,tokens_per_s_per_gpu,mfu,peak_memory_bytes,capacity_bytes,note"
    assert out.read_text().splitlines()[0] == header
