"""What-if > Predict This Job from...: with a measured job open, pick another run; the prediction
from it is drawn over the open job with the error table, and kept as a scenario. Real CPU pair:
4 layers (the other run) -> 8 layers (the open job)."""

from __future__ import annotations

import time

import pytest
from app_helpers import close_window, open_in_window
from conftest import REPO, add_artifact, artifact_dir
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from lumos_core.compare.validate import validate_jobs
from lumos_core.trace.loader import load_job

pytest_plugins = ["app_fixtures"]  # isolated QSettings

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"


def wait_idle(w, timeout_s: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    r = w.workbench.runner
    end = time.monotonic() + timeout_s
    while (r.busy or r.live_threads) and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    QApplication.processEvents()
    assert not r.busy and not r.live_threads, "the prediction did not finish"


@pytest.fixture(scope="module")
def win(qapp):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, CPU_GPT / "layers8")
    yield w
    close_window(w)


def test_predict_this_job_from_another_run_is_lumos_validate(win) -> None:
    wb = win.workbench
    before = set(wb.scenarios)
    assert wb.request_predict_from(CPU_GPT / "base")
    wait_idle(win)
    new = [s for k, s in wb.scenarios.items() if k not in before]
    assert len(new) == 1, win.last_error
    s = new[0]
    v = validate_jobs(load_job(CPU_GPT / "base"), load_job(CPU_GPT / "layers8"))
    assert s.summary.iteration_us == pytest.approx(v.predicted_us, rel=1e-9)  # the CLI's numbers
    assert s.summary.measured.iteration_us == pytest.approx(v.measured_us, rel=1e-9)  # the open job's
    assert "predicted from" in s.name
    assert any("error" in n and "null model" in n for n in s.summary.notes)  # the error table
    assert any(n.strip().startswith("GEMM") for n in s.summary.notes)
    assert wb.shown is s  # drawn over the measured job
    assert s.kind == "estimate"  # kept like any other scenario: listed, compared, exported
    # The headline is the prediction against this job's measured time, a hold-out error (the
    # prediction never saw this job), not the change from the other job's replay.
    headline = wb.prediction.headline.text()
    assert f"{v.error_pct:+.1f} %" in headline and "hold-out" in headline, headline
    assert "vs the replayed baseline" not in headline and "1 GPUs" not in headline
    assert [b[0] for b in wb.prediction.bars.rows] == ["measured", "source job", "predicted"]
    assert any("hold-out error" in n for n in s.summary.notes)
    assert "hold-out" in wb.overlay_note.text()


def test_screenshot_of_the_prediction_over_the_measured_job(win) -> None:
    view = win.timeline
    view.set_all_ranks_collapsed(False)
    view.set_all_cpu_expanded(True)
    view.zoom_to_iteration(1)
    QApplication.processEvents()
    out = artifact_dir("predict-from") / "predicted-from-base-over-layers8.png"
    assert win.grab().save(str(out))
    add_artifact(f"prediction from another run over the measured job: {out}")


def test_a_bad_pair_is_explained_not_raised(win, tmp_path) -> None:
    wb = win.workbench
    before = set(wb.scenarios)
    errors: list[str] = []
    wb.runner.failed.connect(lambda _req, msg: errors.append(msg))
    assert wb.request_predict_from(tmp_path)  # an empty folder: nothing to predict from
    wait_idle(win)
    assert set(wb.scenarios) == before
    assert errors and "Traceback" not in errors[0]


def wait_compare(w, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    mc = w.workbench.measured_compare
    end = time.monotonic() + timeout_s
    while mc.busy and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    for _ in range(5):
        QApplication.processEvents()


def test_compare_with_a_measured_job_draws_it_under_and_lists_the_deltas(win) -> None:
    """File > Compare with Measured Job...: B (4 layers) under the open A (8 layers), iterations
    aligned, an adjustable offset, a Diff pane whose rows search the timeline."""
    mc = win.workbench.measured_compare
    assert mc.compare_with(CPU_GPT / "base")
    wait_compare(win)
    assert mc.diff is not None and mc.diff.differing_knobs == {"layers": [8, 4]}
    view = win.timeline
    labels = [view.layout_model.rank_labels[i] for i in view.layout_model.order]
    assert labels[0].startswith("A rank 0") and labels[1].startswith("B rank 0")  # B under A
    a0 = min(t.iterations[0].cpu_start for t in win.loaded.job.ranks)
    b0 = min(t.iterations[0].cpu_start for t in mc.job_b.ranks)
    assert b0 == a0  # first steady iterations start together
    mc.offset.setValue(5.0)  # ms
    QApplication.processEvents()
    assert min(t.iterations[0].cpu_start for t in mc.job_b.ranks) == a0 + 5_000_000
    tree = mc.pane.tree
    assert tree.topLevelItemCount() >= 4 and mc.dock.isVisible()
    flags = Qt.MatchFlag.MatchStartsWith | Qt.MatchFlag.MatchRecursive
    item = next(i for i in tree.findItems("aten::mm", flags) if i.data(0, Qt.ItemDataRole.UserRole))
    tree.setCurrentItem(item)
    QApplication.processEvents()
    assert view.match_count > 0  # the selected kernel's tasks are highlighted in A
    n_a = len(win.loaded.job.ranks)
    masks_b = view.match_masks[n_a:]
    assert masks_b and masks_b[0] is not None and masks_b[0].any()  # and in B
    out = artifact_dir("compare-measured") / "base-under-layers8.png"
    assert win.grab().save(str(out))
    add_artifact(f"another measured job under the open one: {out}")


def test_hardware_profile_is_used_by_the_apps_estimates(win, tmp_path) -> None:
    from lumos_core.compare.calibrate import fit
    from lumos_core.whatif.estimate import estimate

    path = tmp_path / "cpu.json"
    fit([load_job(CPU_GPT / n) for n in ("base", "seq256")]).profile.save(path)
    wb = win.workbench
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert not wb.set_hardware_profile(bad)  # reported, not raised
    assert wb.runner.profile is None
    assert wb.set_hardware_profile(path)
    assert "cpu.json" in wb.profile_button.text()
    before = set(wb.scenarios)
    assert wb.request_estimate({"ffn": 2048})
    wait_idle(win)
    s = next(x for k, x in wb.scenarios.items() if k not in before)
    assert s.profile == str(path)
    expected = estimate(win.loaded.job, {"ffn": 2048}, profile=wb.runner.profile)
    assert s.summary.iteration_us == pytest.approx(expected.predicted.iteration_us, rel=1e-9)
    assert any("profile's rate" in r.model for r in s.summary.retimed)
    wb.set_hardware_profile(None)
