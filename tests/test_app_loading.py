"""Opening jobs in the real window: bad files among good ones, cancel, stale loads, the demo, recent
folders, drag-and-drop, and the worker-thread adapter itself."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from app_helpers import color_pixels, make_window
from conftest import needs_shared, shared
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app import settings
from app.jobs import BackgroundTask
from app.theme import FAMILY_HEX
from app.timeline.hit import Hit
from app.view_model.overlay_data import measured_marks
from lumos_core.errors import Cancelled, TraceError
from lumos_core.trace.kernel_families import Family

LOAD_TIMEOUT_MS = 90_000

pytest_plugins = ["app_fixtures"]  # window, isolated QSettings


def dlrm_files() -> list[Path]:
    return sorted(shared("dlrm-v100-8rank").glob("worker*.json.gz"))


# ---------------------------------------------------------------- BackgroundTask


def test_task_reports_progress_and_result(qtbot) -> None:
    def work(progress, on_file):  # type: ignore[no-untyped-def]
        progress(0.5, "half way")
        on_file("a.json", "loaded", "")
        return 42

    task = BackgroundTask(work, token=7)
    seen: list[tuple] = []
    task.progressed.connect(lambda *a: seen.append(a))
    task.file_status.connect(lambda *a: seen.append(a))
    try:
        with qtbot.waitSignal(task.succeeded, timeout=10_000) as blocker:
            task.start()
        assert blocker.args == [7, 42]
        qtbot.waitUntil(lambda: not task.is_running())
    finally:
        assert task.wait(10_000)
    assert (7, 0.5, "half way") in seen and (7, "a.json", "loaded", "") in seen


def test_task_turns_errors_into_messages(qtbot) -> None:
    def bad(progress, on_file):  # type: ignore[no-untyped-def]
        raise TraceError("not JSON", "x.json")

    task = BackgroundTask(bad, token=1)
    try:
        with qtbot.waitSignal(task.failed, timeout=10_000) as blocker:
            task.start()
        assert blocker.args == [1, "x.json: not JSON"]
    finally:
        assert task.wait(10_000)


def test_task_cancel_stops_at_the_next_progress_report(qtbot) -> None:
    started = threading.Event()

    def slow(progress, on_file):  # type: ignore[no-untyped-def]
        started.set()
        for k in range(10_000):
            progress(k / 10_000, "working")
            time.sleep(0.001)
        return "finished"

    task = BackgroundTask(slow, token=3)
    try:
        with (
            qtbot.assertNotEmitted(task.succeeded),
            qtbot.waitSignal(task.cancelled, timeout=10_000) as blocker,
        ):
            task.start()
            assert started.wait(10)
            task.cancel()
        assert blocker.args == [3]
    finally:
        assert task.wait(10_000)
    assert not task.is_running()


# ---------------------------------------------------------------- window loads


@needs_shared
def test_a_bad_file_is_reported_while_good_ranks_open(window, qtbot, tmp_path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for f in dlrm_files()[:3]:
        (folder / f.name).symlink_to(f)  # read in place, never copied
    (folder / "worker3_broken.json").write_text('{"traceEvents": [ {"ph": "X", ')
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.open_path(folder)
    job = blocker.args[0].job
    assert [t.rank for t in job.ranks] == [0, 1, 2]
    assert [Path(s.file).name for s in job.skipped] == ["worker3_broken.json"]
    assert window.banner.isVisible()
    text = window.banner.text.text()
    assert "worker3_broken.json" in text and "other 3 rank(s) are shown" in text
    assert job.skipped[0].reason.split()[0].lower() in text.lower()
    files = window.summaries.files.model.rows
    failed = [f for f in files if f.state == "failed"]
    assert [Path(f.file).name for f in failed] == ["worker3_broken.json"]
    assert failed[0].detail == job.skipped[0].reason
    assert sum(f.state in ("loaded", "cached") for f in files) == 3
    window.banner.details_button.click()
    assert window.summaries.currentWidget() is window.summaries.files_tab
    # the 5 missing ranks of the 8-rank job are a warning, reachable from the status bar
    assert window.warnings_button.isVisible() and "warning" in window.warnings_button.text()


def test_a_config_json_beside_the_traces_is_no_failure_banner(window, qtbot) -> None:
    # the project's own CPU runs keep their config.json beside the trace: not a lost rank
    folder = Path(__file__).parent / "data" / "cpu-gpt" / "base"
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.open_path(folder)
    job = blocker.args[0].job
    assert [Path(s.file).name for s in job.skipped] == ["config.json"] and job.skipped[0].not_a_trace
    assert not window.banner.isVisible()
    # a CPU-only job has nothing but its threads to show: they start expanded, not as one summary row
    from app.timeline.lane_layout import RowKind

    kinds = [r.kind for r in window.timeline.layout_model.rows]
    assert RowKind.CPU in kinds and RowKind.CPU_GROUP not in kinds


def test_a_folder_without_traces_fails_with_a_message(window, qtbot, tmp_path) -> None:
    with qtbot.waitSignal(window.load_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.open_path(tmp_path)
    assert "no trace files" in blocker.args[0]
    assert window.banner.isVisible() and "no trace files" in window.banner.text.text()
    assert window.loaded is None
    qtbot.waitUntil(lambda: not window.is_loading)
    assert not window.progress.isVisible()


@needs_shared
def test_cancel_stops_the_load_and_leaves_the_window_usable(window, qtbot, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "cold-cache"))  # force real parsing
    with (
        qtbot.assertNotEmitted(window.job_loaded),
        qtbot.waitSignal(window.load_cancelled, timeout=LOAD_TIMEOUT_MS),
    ):
        window.open_path(shared("h100-nanogpt-8rank"))
        assert window.cancel_button.isVisible()
        qtbot.waitUntil(lambda: window.progress.value() >= 0 and window.is_loading, timeout=5000)
        window.cancel_button.click()
    qtbot.waitUntil(lambda: not window.is_loading, timeout=LOAD_TIMEOUT_MS)
    assert window.loaded is None
    assert window.status_label.text() == "Loading cancelled."
    assert not window.cancel_button.isVisible()


@needs_shared
def test_a_newer_load_wins_over_a_stale_one(window, qtbot, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "cold-cache"))
    loaded: list = []
    window.job_loaded.connect(loaded.append)
    slow = window.open_path(shared("h100-nanogpt-8rank"))
    fast = window.open_path(dlrm_files()[0])
    assert fast == slow + 1
    qtbot.waitUntil(lambda: not window.is_loading and bool(loaded), timeout=LOAD_TIMEOUT_MS)
    qtbot.wait(50)
    assert len(loaded) == 1
    assert loaded[0].path == str(dlrm_files()[0])
    assert window.loaded is loaded[0] and len(window.loaded.job.ranks) == 1


def test_the_demo_opens_as_a_synthetic_job(window, qtbot) -> None:
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.open_demo()
    lj = blocker.args[0]
    assert lj.job.is_synthetic
    assert len(lj.job.ranks) == 8
    assert window.windowTitle() == "Lumos — Lumos demo job (8 ranks) [synthetic]"
    assert [t.rank for t in lj.job.ranks] == list(range(8))
    assert len(window.timeline.iteration_names) >= 2
    img = window.grab().toImage()
    assert color_pixels(img, FAMILY_HEX[Family.GEMM]) > 1000
    assert color_pixels(img, FAMILY_HEX[Family.NCCL_ALL_REDUCE]) > 100  # tensor-parallel all-reduces


def test_lanes_are_shown_before_the_summaries_which_follow_on_a_worker(window, qtbot, monkeypatch) -> None:
    import app.job_opening as job_opening

    events: list[tuple[str, object]] = []
    real = job_opening.summarise_job

    def summarise(loaded, progress):  # type: ignore[no-untyped-def]
        events.append(("summarise", threading.current_thread() is threading.main_thread()))
        return real(loaded, progress)

    monkeypatch.setattr(job_opening, "summarise_job", summarise)
    window.first_painted.connect(lambda _s: events.append(("painted", window.loaded.summarised)))
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.open_demo()
    lj = blocker.args[0]
    # the lanes were painted with the summaries still to come; those ran after, off the GUI thread
    assert events == [("painted", False), ("summarise", False)]
    assert lj.summarised and lj.collectives and lj.kernels and lj.operators
    assert window.summaries.loaded is lj and window.workbench.loaded is lj
    assert window.summaries.iterations.model.rowCount() == len(lj.iterations) > 0
    # the marks drawn before the iteration table existed are the table's
    marks = measured_marks(lj)
    assert sum(map(len, marks)) > 0 and marks == measured_marks(dataclasses.replace(lj, windows=None))
    qtbot.waitUntil(lambda: not window.is_loading, timeout=LOAD_TIMEOUT_MS)
    assert not window.progress.isVisible()


def test_a_newer_load_drops_the_stale_summaries_and_cancel_keeps_the_lanes(
    window, qtbot, monkeypatch
) -> None:
    import app.job_opening as job_opening

    real = job_opening.summarise_job
    slow_first = threading.Event()

    def summarise(loaded, progress):  # type: ignore[no-untyped-def]
        if not slow_first.is_set():  # the first job's summaries take a while (cancel ends them)
            slow_first.set()
            for k in range(20_000):
                progress(k / 20_000, "summarising slowly")
                time.sleep(0.001)
        return real(loaded, progress)

    monkeypatch.setattr(job_opening, "summarise_job", summarise)
    loaded: list = []
    window.job_loaded.connect(loaded.append)
    with qtbot.waitSignal(window.first_painted, timeout=LOAD_TIMEOUT_MS):
        window.open_demo()
    first = window.loaded
    qtbot.waitUntil(slow_first.is_set, timeout=LOAD_TIMEOUT_MS)
    assert window.is_loading and not first.summarised
    # selecting a task before the summaries are in still describes it
    event = int(first.tables[0].event[0])
    window.timeline.select(Hit(0, event))
    assert first.job.ranks[0].name_of(event) in window.details.toPlainText()
    window.open_demo()  # a newer job while the first one's summaries run
    qtbot.waitUntil(lambda: bool(loaded) and not window.is_loading, timeout=LOAD_TIMEOUT_MS)
    qtbot.wait(50)
    assert len(loaded) == 1 and loaded[0] is window.loaded and loaded[0] is not first
    assert not first.summarised  # its summaries were never handed over

    # cancelling while the summaries run leaves the lanes shown and the window usable
    slow_first.clear()
    with qtbot.waitSignal(window.load_cancelled, timeout=LOAD_TIMEOUT_MS):
        window.open_demo()
        qtbot.waitUntil(slow_first.is_set, timeout=LOAD_TIMEOUT_MS)
        window.cancel_button.click()
    qtbot.waitUntil(lambda: not window.is_loading, timeout=LOAD_TIMEOUT_MS)
    assert window.loaded is not None and not window.loaded.summarised
    assert window.timeline.loaded is window.loaded and len(loaded) == 1
    assert not window.cancel_button.isVisible()


@needs_shared
def test_recent_folders_are_remembered_across_windows(window, qtbot, qapp) -> None:
    folder = shared("dlrm-v100-8rank")
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS):
        window.open_path(folder)
    assert settings.recent_paths()[0] == str(folder.resolve())
    other = make_window()
    try:
        texts = [a.text() for a in other.recent_menu.actions()]
        assert texts[0] == str(folder.resolve())
        assert other.welcome.recent.item(0).text() == str(folder.resolve())
        assert other.pages.currentWidget() is other.welcome
    finally:
        other.shutdown()
        other.close()
        other.deleteLater()


@needs_shared
def test_dropping_files_opens_them_together(window, qtbot) -> None:
    files = dlrm_files()[:2]
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(f)) for f in files])
    ev = QDropEvent(
        QPointF(QPoint(200, 200)),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    with qtbot.waitSignal(window.job_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.dropEvent(ev)
    job = blocker.args[0].job
    assert [t.rank for t in job.ranks] == [0, 1]
    # a whole folder's files dropped together open that folder itself
    all_files = sorted(shared("dlrm-v100-8rank").glob("*.json.gz"))
    assert window.path_for_drop(all_files) == shared("dlrm-v100-8rank")
    assert window.path_for_drop([files[0]]) == files[0]


def test_cancelled_errors_raised_by_callbacks_are_the_core_kind() -> None:
    # the adapter relies on the core's contract: progress callbacks cancel by raising Cancelled
    task = BackgroundTask(lambda p, f: None)
    task.cancel()
    with pytest.raises(Cancelled):
        task._report(0.1, "x")
    task.wait(1000)
