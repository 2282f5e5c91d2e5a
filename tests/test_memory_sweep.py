"""Sweeps and memory: out-of-memory points stay in the table, marked, and off the Pareto front."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from lumos_core.sweep.point import OK, OUT_OF_MEMORY, GridRow
from lumos_core.sweep.results import ResultsFile, format_table, pareto_front


def _row(gpus: int, ms: float, peak: int, cap: int = 80 << 30) -> GridRow:
    status = OK if peak <= cap else OUT_OF_MEMORY
    note = "" if status == OK else "out of memory: predicted peak ..."
    return GridRow(
        {"tp": gpus},
        gpus,
        status,
        iteration_us=ms * 1000,
        note=note,
        peak_memory_bytes=peak,
        capacity_bytes=cap,
    )


def test_pareto_front_never_holds_a_point_that_does_not_fit() -> None:
    rows = [_row(1, 50.0, 900 << 30), _row(2, 80.0, 60 << 30), _row(4, 45.0, 30 << 30)]
    assert pareto_front(rows) == [1, 2]  # the 1-GPU row is fastest per GPU but does not fit
    assert rows[0].estimated and not rows[0].ok and rows[0].fits is False


def test_results_file_keeps_out_of_memory_rows_and_their_numbers(tmp_path: Path) -> None:
    rows = [_row(1, 50.0, 900 << 30), _row(2, 80.0, 60 << 30)]
    path = tmp_path / "r.csv"
    with ResultsFile(path, ["tp"]) as f:
        for r in rows:
            f.append(r)
    with ResultsFile(path, ["tp"]) as again:
        back = again.done
    assert back["tp=1"].status == OUT_OF_MEMORY and back["tp=1"].peak_memory_bytes == 900 << 30
    assert back["tp=1"].iteration_us == 50_000.0 and back["tp=2"].same_numbers(rows[1])
    table = format_table(rows, ["tp"])
    assert "out of memory" in table and "900.0" in table


def test_sweep_cli_marks_gpt3_175b_on_one_gpu_out_of_memory(tmp_path: Path) -> None:
    job = tmp_path / "job"
    run = [sys.executable, "-m", "lumos_core"]
    synth = subprocess.run(
        [*run, "synth", str(job), "--model", "gpt3-175b", "--tp", "2", "--pp", "1", "--dp", "1", "--iterations", "1", "-q"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert synth.returncode == 0, synth.stderr
    out = tmp_path / "r.csv"
    r = subprocess.run(
        [*run, "sweep", str(job), "--grid", "tp=2,8 gpu=H100", "--fixed", "recompute=full", "--jobs", "1", "--out", str(out), "-q"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "out of memory" in r.stdout
    with ResultsFile(out, ["tp", "gpu", "recompute"]) as f:
        rows = list(f.done.values())
    assert {row.status for row in rows} == {OUT_OF_MEMORY}  # 175 B on 2 or 8 GPUs never fits
    assert all(
        not math.isnan(row.iteration_us) and row.peak_memory_bytes > row.capacity_bytes for row in rows
    )
