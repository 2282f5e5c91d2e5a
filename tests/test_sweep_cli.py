"""``lumos sweep``: rows equal ``lumos estimate --json`` on the real 8-rank H100 job, PP rows skipped
with their reason, Ctrl-C keeps the finished rows and a re-run resumes, a missing Ray is explained."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest
from conftest import REPO, needs_shared, shared

from lumos_core.synth.demo import demo_job_path


def lumos(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lumos_core", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env or dict(os.environ),
        timeout=timeout,
    )


@needs_shared
def test_sweep_rows_equal_lumos_estimate_and_pp_rows_are_skipped(tmp_path) -> None:
    nanogpt = str(shared("h100-nanogpt-8rank"))
    out = tmp_path / "results.csv"
    run = lumos(
        "sweep",
        nanogpt,
        "--grid",
        "dp=8,16 pp=1,2",
        "--gpu",
        "A100",
        "--jobs",
        "2",
        "--out",
        str(out),
        "--json",
        "-q",
    )
    assert run.returncode == 0, run.stderr
    doc = orjson.loads(run.stdout)
    assert doc["configurations"] == 4 and doc["estimated"] == 2 and doc["engine"] == "local"
    rows = {r["config"]: r for r in doc["rows"]}
    assert list(rows) == [
        "dp=8,pp=1,gpu=A100",
        "dp=8,pp=2,gpu=A100",
        "dp=16,pp=1,gpu=A100",
        "dp=16,pp=2,gpu=A100",
    ]
    est = lumos("estimate", nanogpt, "--dp", "16", "--gpu", "A100", "--json", "-q")
    assert est.returncode == 0, est.stderr
    pred = orjson.loads(est.stdout)["predicted"]
    row = rows["dp=16,pp=1,gpu=A100"]
    assert row["status"] == "ok" and row["world_size"] == pred["ranks"] == 16
    assert row["iteration_ms"] * 1000 == pytest.approx(pred["iteration_us"], abs=5e-4)
    for part in ("exposed_compute", "overlapped", "exposed_comm", "other"):
        assert row[f"{part}_ms"] * 1000 == pytest.approx(pred["breakdown"][f"{part}_us"], abs=1e-9)
    assert row["change_pct"] == pytest.approx(pred["change_pct"], abs=5e-4)
    # nanogpt records no micro-batch size or sequence length: tokens/s is empty, and the note says why
    assert row["tokens_per_s_per_gpu"] is None and "micro-batch" in row["note"]
    for key in ("dp=8,pp=2,gpu=A100", "dp=16,pp=2,gpu=A100"):
        assert rows[key]["status"] == "skipped" and rows[key]["iteration_ms"] is None
        assert "pipeline" in rows[key]["note"]
    with out.open() as fh:
        written = list(csv.DictReader(fh))
    assert sorted(r["config"] for r in written) == sorted(rows)
    assert {r["config"]: float(r["iteration_ms"] or "nan") for r in written}["dp=16,pp=1,gpu=A100"] == row[
        "iteration_ms"
    ]


def _group_processes(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
def test_ctrl_c_keeps_finished_rows_and_a_rerun_resumes(tmp_path) -> None:
    demo = demo_job_path(root=tmp_path / "demo")
    out = tmp_path / "results.csv"
    args = [
        sys.executable,
        "-m",
        "lumos_core",
        "sweep",
        str(demo),
        "--grid",
        "dp=2,4,8,16 microbatches=4,8,16",
    ]
    args += ["--jobs", "2", "--out", str(out), "-q"]
    # a terminal's Ctrl-C signals the whole process group: the sweep and its workers. The sweep gets
    # Ctrl-C's default action whatever this suite was started with (a shell's background job
    # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt).
    proc = subprocess.Popen(
        args,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and proc.poll() is None:
            if out.exists() and len(out.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    kept = len(out.read_text().splitlines()) - 1
    assert 2 <= kept < 12
    assert f"interrupted; {kept} row(s) kept in {out}" in stderr and "Traceback" not in stderr
    assert not _group_processes(proc.pid), "sweep workers outlived the interrupted sweep"
    again = lumos(
        "sweep",
        str(demo),
        "--grid",
        "dp=2,4,8,16 microbatches=4,8,16",
        "--jobs",
        "2",
        "--out",
        str(out),
        "--json",
    )
    assert again.returncode == 0, again.stderr
    doc = orjson.loads(again.stdout)
    assert doc["resumed"] == kept and doc["estimated"] == 12 - kept
    assert f"resuming {out} ({kept} row(s) already there)" in again.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 13 and len(set(lines)) == 13
    # tokens/s per GPU on the synthetic job: micro-batch 1 x seq 2048 x microbatches x DP per second per GPU
    r = doc["rows"][-1]
    assert r["config"] == "dp=16,microbatches=16" and r["world_size"] == 16 * 2 * 2
    assert r["tokens_per_s_per_gpu"] == pytest.approx(2048 * 16 * 16 / (r["iteration_ms"] / 1000) / 64)


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path) -> None:
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'ray':\n"
        "            raise ImportError('blocked for this test')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    run = lumos("sweep", str(tmp_path), "--grid", "dp=2,4", "--engine", "ray", env=env, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        'lumos sweep: error: the Ray engine needs Ray: pip install "lumos[ray]" (or pip install "ray>=2.9")'
    ]


def test_bad_grid_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = lumos("sweep", str(tmp_path), "--grid", "dp=8 warp=2", timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("lumos sweep: error: grid: unknown knob 'warp'")


@needs_shared
def test_a_cpu_paced_trace_says_why_every_row_takes_the_same_time() -> None:
    # nanoGPT is CPU-paced: a faster GPU leaves the iteration unchanged, and the sweep says why
    run = lumos("sweep", str(shared("h100-nanogpt-8rank")), "--grid", "gpu=H100,H200", "--jobs", "1", "-q")
    assert run.returncode == 0, run.stderr
    assert "note: CPU-paced by" in run.stdout and "--cpu-scale" in run.stdout


def test_an_interrupted_pool_leaves_no_manager_thread_racing_interpreter_exit() -> None:
    """After an interrupted sweep stops its pool, the executor's manager thread has finished and
    closed its wake-up pipe: left running, Python's exit hook for process pools woke it through
    the pipe as it closed and printed 'Bad file descriptor' after Ctrl-C (seen under load)."""
    import concurrent.futures as cf
    import time as _time

    from lumos_core.sweep.engines import _stop_pool

    pool = cf.ProcessPoolExecutor(max_workers=2)
    futures = [pool.submit(_time.sleep, 30) for _ in range(4)]
    while not any(f.running() for f in futures):
        _time.sleep(0.01)
    manager, wakeup = pool._executor_manager_thread, pool._executor_manager_thread_wakeup
    _stop_pool(pool, wait=False)
    assert manager is not None and not manager.is_alive()
    assert wakeup._closed
