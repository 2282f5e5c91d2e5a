"""The app under abuse: folders opened while others load, the window closed during a load and during
what-if runs, 50 scenarios, rapid zooming over a predicted layer, hostile names. Nothing may crash
(pytest-qt fails a test on any exception raised in a Qt callback), no background thread or parsing
process may outlive the window, and no stale result may be drawn over a newer one.

Most tests use tiny synthetic jobs (fast); the cold-load tests use the real 8-rank H100 job.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from app_helpers import close_window, make_window, to_viewport, wait_loaded, wheel
from conftest import needs_shared, shared
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QApplication
from tracegen import TraceBuilder

from app.jobs import BackgroundTask
from app.main_window import MainWindow
from app.timeline.timeline_view import MEASURED, Hit
from lumos_core.synth import ModelSpec, SynthConfig, synthesize

pytest_plugins = ["app_fixtures"]  # isolated QSettings

TINY = ModelSpec("tiny", layers=2, hidden=128, ffn=512, heads=2, seq=64, vocab=512)
LOAD_TIMEOUT_MS = 90_000


@pytest.fixture(scope="module")
def tiny_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small synthetic jobs that open and estimate in milliseconds."""
    root = tmp_path_factory.mktemp("tiny-jobs")
    out = {}
    for name, dp, iters in (("dp2", 2, 2), ("dp4", 4, 3), ("dp1", 1, 2)):
        out[name] = root / name
        synthesize(
            SynthConfig(model=TINY, tp=1, pp=1, dp=dp, microbatches=1, iterations=iters, seed=1), out[name]
        )
    return out


# ---------------------------------------------------------------- leak accounting


class Leaks:
    """Every BackgroundTask (QThread) the app starts, Python threads and child processes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tasks: list[BackgroundTask] = []
        self.threads_before = {t.ident for t in threading.enumerate()}
        original = BackgroundTask.start

        def start(task: BackgroundTask) -> None:
            self.tasks.append(task)
            original(task)

        monkeypatch.setattr(BackgroundTask, "start", start)

    def assert_none_left(self, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            QApplication.processEvents()
            if not self._left():
                return
            time.sleep(0.02)
        assert not self._left(), self._left()

    def _left(self) -> list[str]:
        left = [f"task {t.token} still running" for t in self.tasks if _running(t)]
        left += [
            f"thread {t.name}"
            for t in threading.enumerate()
            if t.ident not in self.threads_before and t.is_alive() and not t.daemon
        ]
        left += [f"child process {p.pid} {' '.join(p.cmdline())[:100]}" for p in _children()]
        return left


def _running(task: BackgroundTask) -> bool:
    try:
        return task.is_running()
    except RuntimeError:  # the C++ QThread is gone: it finished and was deleted
        return False


# multiprocessing's forkserver and resource tracker live as long as the app, by design: one each.
# The parsing workers are their children: those must be gone.
_SINGLETONS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def _children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not any(
                s in " ".join(p.cmdline()) for s in _SINGLETONS
            ):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture
def leaks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Leaks]:
    yield Leaks(monkeypatch)


@pytest.fixture
def cold_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cold-cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(root))  # real parsing, with worker processes
    return root


def settle(w: MainWindow, timeout_s: float = 90.0) -> None:
    """Until the load, every what-if run and every superseded thread are done."""
    wait_loaded(w, timeout_s)
    end = time.monotonic() + timeout_s
    while w.workbench.runner.live_threads and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    QApplication.processEvents()


def record_loaded(w: MainWindow) -> list:
    seen: list = []
    w.job_loaded.connect(seen.append)
    return seen


# ---------------------------------------------------------------- opening while loading


@needs_shared
def test_opening_folders_in_quick_succession_shows_only_the_last(qtbot, leaks, cold_cache, tiny_jobs) -> None:
    w = make_window()
    qtbot.addWidget(w)
    loaded = record_loaded(w)
    failed: list[str] = []
    w.load_failed.connect(failed.append)
    try:
        # a slow cold load (8 ranks in worker processes), interrupted while it parses
        w.open_path(shared("h100-nanogpt-8rank"))
        qtbot.waitUntil(lambda: w.progress.value() > 0, timeout=LOAD_TIMEOUT_MS)
        # then a burst: the demo, a bad path, two tiny jobs - only the last may ever be shown
        w.open_demo()
        w.open_path(tiny_jobs["dp1"] / "missing")
        w.open_path(tiny_jobs["dp4"])
        last = w.open_path(tiny_jobs["dp2"])
        assert w.is_loading
        settle(w)
        assert w.opening.token == last
        assert [lj.path for lj in loaded] == [str(tiny_jobs["dp2"])], "a stale load was shown"
        assert failed == [], "a stale failure was reported"
        assert w.loaded is loaded[0] and len(w.loaded.job.ranks) == 2
        assert w.windowTitle().startswith("Lumos — dp2")
        assert not w.banner.isVisible()
        # the what-if runner works on the job that is shown, nothing else
        assert w.workbench.runner.loaded is w.loaded
        assert {s.summary.world_size for s in w.workbench.scenarios.values()} <= {2}
        # every cycle: open, interrupt, open again - nothing accumulates
        for _ in range(3):
            w.open_path(shared("h100-nanogpt-8rank"))
            QApplication.processEvents()
            w.open_path(tiny_jobs["dp4"])
            settle(w)
            assert w.loaded is not None and w.loaded.path == str(tiny_jobs["dp4"])
    finally:
        close_window(w)
    leaks.assert_none_left()


def test_reopening_the_same_folder_many_times(qtbot, leaks, tiny_jobs) -> None:
    w = make_window()
    qtbot.addWidget(w)
    loaded = record_loaded(w)
    try:
        for _ in range(12):
            w.open_path(tiny_jobs["dp2"])
            QApplication.processEvents()
        settle(w)
        # a load that finished between two clicks was the newest then and may be shown; the
        # window ends with the last one, and exactly one baseline replay of it
        assert loaded and w.loaded is loaded[-1] and len(loaded) <= 12
        assert [s.name for s in w.workbench.scenarios.values()] == ["baseline replay"]
    finally:
        close_window(w)
    leaks.assert_none_left()


# ---------------------------------------------------------------- closing during work


@needs_shared
def test_closing_the_window_while_it_loads(qtbot, leaks, cold_cache) -> None:
    w = make_window()
    w.open_path(shared("h100-nanogpt-8rank"))
    qtbot.waitUntil(lambda: w.progress.value() > 0, timeout=LOAD_TIMEOUT_MS)
    t0 = time.monotonic()
    w.close()  # closeEvent: cancel and wait
    assert not w.is_loading
    assert time.monotonic() - t0 < 30, "closing waited for the whole load"
    w.deleteLater()
    QApplication.processEvents()
    leaks.assert_none_left()


@pytest.mark.parametrize("moment", ["baseline replay", "estimate", "queued estimates", "export"])
def test_closing_the_window_during_a_what_if_run(qtbot, leaks, tiny_jobs, tmp_path, moment) -> None:
    w = make_window()
    with qtbot.waitSignal(w.job_loaded, timeout=LOAD_TIMEOUT_MS):
        w.open_demo() if moment == "baseline replay" else w.open_path(tiny_jobs["dp4"])
    wb = w.workbench
    if moment == "baseline replay":
        assert wb.runner.running is not None  # the demo's replay takes a while: close in the middle
    else:
        settle(w)
        if moment == "estimate":
            assert wb.request_estimate({"dp": 8})
        elif moment == "queued estimates":
            for k in range(1, 9):
                assert wb.enqueue_estimate({"microbatches": k}, name=f"mb{k}")
        else:
            wb.export_timeline(wb.scenario_named("baseline replay").id, tmp_path / "export")
    w.close()
    assert not wb.runner.busy and wb.runner.live_threads == 0
    w.deleteLater()
    QApplication.processEvents()
    leaks.assert_none_left()


# ---------------------------------------------------------------- many scenarios


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
def test_fifty_scenarios(qtbot, leaks, tiny_jobs) -> None:
    w = make_window()
    qtbot.addWidget(w)
    try:
        with qtbot.waitSignal(w.job_loaded, timeout=LOAD_TIMEOUT_MS):
            w.open_path(tiny_jobs["dp2"])
        settle(w)
        wb = w.workbench
        combos = list(itertools.product([1, 2, 4, 8, 16], [1, 2, 3, 4, 6], [2, 4]))[:50]
        for dp, mb, layers in combos:
            assert wb.enqueue_estimate(
                {"dp": dp, "microbatches": mb, "layers": layers}, name=f"dp{dp} mb{mb} L{layers}"
            )
        settle(w, timeout_s=180)
        assert wb.last_error == "", wb.last_error
        assert len(wb.scenarios) == 51  # and the baseline replay
        assert len(wb.scenario_list.ids()) == 51
        # each was drawn as it arrived; now jump between them in every overlay mode, painting
        modes = ["ghost", "paired", "predicted", "measured"]
        for k, sid in enumerate(list(wb.scenarios)[::5]):
            wb.show_scenario(sid)
            wb.set_overlay_mode(modes[k % len(modes)])
            w.timeline.canvas.grab()
            QApplication.processEvents()
        ids = list(wb.scenarios)
        wb.compare_pair(ids[3], ids[40])
        QApplication.processEvents()
        w.workspace.setCurrentWidget(w.timeline_page)
        # remove half of them, including the one on screen
        wb.show_scenario(ids[10])
        for sid in ids[1::2]:
            wb.remove_scenario(sid)
        QApplication.processEvents()
        assert len(wb.scenarios) == 26 and len(wb.scenario_list.ids()) == 26
        assert wb.shown is None or wb.shown.id in wb.scenarios
        w.timeline.canvas.grab()
        # fifty more requests, each superseding the last: one result, the last one
        for k in range(50):
            wb.request_estimate({"dp": 1 + k % 4, "microbatches": 1 + k % 7}, name=f"burst {k}")
        settle(w)
        burst = [s.name for s in wb.scenarios.values() if s.name.startswith("burst")]
        assert burst == ["burst 49"]
        assert wb.shown is not None and wb.shown.name == "burst 49"
    finally:
        close_window(w)
    leaks.assert_none_left()


def test_a_what_if_result_of_the_previous_job_is_never_drawn(qtbot, leaks, tiny_jobs) -> None:
    w = make_window()
    qtbot.addWidget(w)
    added: list = []
    try:
        with qtbot.waitSignal(w.job_loaded, timeout=LOAD_TIMEOUT_MS):
            w.open_demo()
        settle(w)
        w.workbench.scenario_added.connect(lambda s: added.append((s, w.loaded)))
        w.workbench.request_estimate({"dp": 4})  # runs on the demo job...
        w.open_path(tiny_jobs["dp1"])  # ...while another job opens
        settle(w)
        assert w.loaded.path == str(tiny_jobs["dp1"])
        for s, shown_job in added:
            assert shown_job is w.loaded, f"{s.name} arrived while another job was shown"
            assert s.summary.world_size != 16, "the demo's DP 4 estimate reached the new job"
        assert [s.name for s in w.workbench.scenarios.values()] == ["baseline replay"]
        pred = w.timeline.prediction
        assert pred is None or len(pred.ranks) == len(w.loaded.job.ranks)
    finally:
        close_window(w)
    leaks.assert_none_left()


# ---------------------------------------------------------------- rapid zooming


def test_rapid_zooming_panning_and_resizing_over_a_predicted_layer(qtbot, tiny_jobs) -> None:
    w = make_window()
    qtbot.addWidget(w)
    try:
        with qtbot.waitSignal(w.job_loaded, timeout=LOAD_TIMEOUT_MS):
            w.open_path(tiny_jobs["dp4"])
        settle(w)
        wb = w.workbench
        with qtbot.waitSignal(wb.scenario_added, timeout=60_000):
            wb.request_estimate({"dp": 8})
        settle(w)
        tl = w.timeline
        rng = random.Random(7)
        lo, hi = tl.full_range()
        vp = tl.canvas.viewport()
        modes = ["ghost", "paired", "predicted", "measured", "ghost"]
        keys = [Qt.Key.Key_W, Qt.Key.Key_S, Qt.Key.Key_A, Qt.Key.Key_D, Qt.Key.Key_0]
        for k in range(250):
            op = rng.randrange(7)
            if op == 0:
                pos = vp.rect().center()
                pos.setX(rng.randrange(max(vp.width(), 1)))
                wheel(tl, pos, rng.choice([-6, -2, -1, -0.25, 0.25, 1, 2, 6, 40]))
            elif op == 1:
                a = rng.uniform(lo - hi, 2 * hi)
                tl.zoom_to(a, a + rng.choice([1e-12, 1e-6, 1e-3, hi, 1e6]))
            elif op == 2:
                tl.zoom(rng.choice([1e-9, 0.5, 2.0, 1e9]), rng.uniform(lo, hi))
            elif op == 3:
                tl.pan(rng.uniform(-3, 3))
            elif op == 4:
                tl.handle_key(
                    QKeyEvent(QEvent.Type.KeyPress, rng.choice(keys), Qt.KeyboardModifier.NoModifier)
                )
            elif op == 5:
                wb.set_overlay_mode(modes[k % len(modes)])
            else:
                tl.scroll_rows(rng.uniform(-50, 50))
            if k % 40 == 0:
                w.resize(*rng.choice([(120, 90), (1600, 1000), (3000, 200), (400, 2000)]))
            if k % 10 == 0:
                tl.canvas.grab()
            QApplication.processEvents()
            x0, x1 = tl.x_range()
            assert np.isfinite([x0, x1]).all() and x1 > x0
        w.resize(1600, 1000)
        tl.reset_view()
        img = tl.canvas.grab().toImage()
        assert img.width() > 0 and not img.isNull()
        # picking at every corner after the storm still works (or finds nothing)
        for row, x in itertools.product((0, 3, 10_000), (lo, (lo + hi) / 2, hi, -1.0)):
            tl.pick(x, row)
        hit = tl.pick(*_middle(tl))
        if hit is not None:
            tl.select(hit, reveal=True)
    finally:
        close_window(w)


def _middle(tl) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(x ms, row): the middle of the visible time range, in the first rows."""
    x0, x1 = tl.x_range()
    return (x0 + x1) / 2, 2.5


# ---------------------------------------------------------------- hostile names


def test_names_that_are_not_valid_unicode_are_shown_and_searched(qtbot, tmp_path) -> None:
    """Non-UTF-8 bytes (replaced) and lone surrogates (from \\ud800 escapes) in names and args
    reach the labels, tooltips, details and search without an exception."""
    b = TraceBuilder(rank=0, world=1)
    b.step(1, 1000, 300)
    b.cpu("aten::op_\ud800", 1010, 20, args={"shape": "\udfff"})
    b.launch("kernel_\ud83d", 1015, 3, 1040, 30, stream=7)
    b.launch("gemm", 1020, 3, 1080, 30, stream=7)
    raw = json.dumps(b.doc()).encode()  # \ud800 escapes: orjson refuses them, the fallback keeps them
    raw = raw.replace(b'"gemm"', b'"gemm_\xff\xfe"')  # bytes that are not UTF-8
    path = tmp_path / "rank0.json"
    path.write_bytes(raw)
    w = make_window()
    qtbot.addWidget(w)
    try:
        with qtbot.waitSignal(w.job_loaded, timeout=LOAD_TIMEOUT_MS):
            w.open_path(path)
        settle(w)
        t = w.loaded.job.ranks[0]
        assert any("not UTF-8" in x for x in w.loaded.job.warnings)
        names = [t.name_of(i) for i in range(len(t))]
        for i in range(len(t)):
            hit = Hit(0, i, MEASURED)
            w.timeline.select(hit, reveal=True)
            w.timeline.describe(hit)
            QApplication.processEvents()
        for needle in ("op_", "kernel_", "gemm_\ufffd", "\ud800"):
            w.search_box.setText(needle)
            w.run_search()
        assert any(n.startswith("gemm_") for n in names)
        w.timeline.canvas.grab()
        pos = to_viewport(w.timeline, *_middle(w.timeline))
        wheel(w.timeline, pos, 1)
    finally:
        close_window(w)


def test_loads_on_a_qthread_never_fork(qapp) -> None:  # type: ignore[no-untyped-def]
    """Forking while the GUI thread runs can deadlock the child; threading does not list QThreads,
    so the loader must see that it is not on the main thread and use forkserver."""
    from PySide6.QtCore import QThread

    from lumos_core.trace import loader

    seen: list[bool] = []

    class Probe(QThread):
        def run(self) -> None:
            seen.append(loader._single_threaded())

    probe = Probe()
    probe.start()
    assert probe.wait(10_000)
    assert seen == [False]
