"""Throughput first (issue 28): tokens/s per GPU and MFU beside iteration time, in the estimate's
result, --json and text; work-changing what-ifs ranked by rate; the CPU-paced lead; the loader's
files/bytes progress and the terminal progress bar (silent when not a terminal).

SYNTHETIC jobs (lumos synth): they check the bookkeeping (tokens, FLOPs, ranking), never accuracy."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest

from lumos_core.commands.common import terminal_progress
from lumos_core.commands.estimate import format_estimate
from lumos_core.perf.flops import iteration_flops
from lumos_core.synth.generate import synthesize
from lumos_core.synth.models import ModelSpec, SynthConfig
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.throughput import GPU_BOUND_CPU_SCALE, rank_key, throughput_of, tokens_per_iteration

MODEL = ModelSpec("small", layers=4, hidden=512, ffn=2048, heads=8, seq=256, vocab=4096)
CFG = SynthConfig(model=MODEL, tp=1, pp=1, dp=2, microbatches=4, micro_batch=2, iterations=3, seed=5)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("synth") / "job"
    synthesize(CFG, out)
    return load_job(out)


def test_tokens_flops_and_mfu_of_the_traced_configuration(job) -> None:  # type: ignore[no-untyped-def]
    b = infer_baseline(job)
    c = b.config
    assert (c.dp, c.microbatches, c.micro_batch, c.seq) == (2, 4, 2, 256)
    t = throughput_of(c, 10_000.0, vocab=MODEL.vocab)
    assert t.unit == "tokens" and t.per_iteration == tokens_per_iteration(c) == 2 * 4 * 2 * 256
    # the model FLOPs are the synth generator's own formula for this model (Narayanan Eq. 3, no recompute)
    assert t.model_flops == pytest.approx(iteration_flops(MODEL, 2 * 4 * 2), rel=1e-9)
    assert t.tokens_per_s_per_gpu == pytest.approx(4096 / 0.01 / 2)
    assert t.mfu == pytest.approx(t.model_flops / 0.01 / (2 * t.peak_flops_per_gpu))
    assert re.fullmatch(r"[\d,]+ tokens/s/GPU, MFU \d+\.\d %", t.text())


def test_unknown_sizes_fall_back_to_samples_then_microbatches(job) -> None:  # type: ignore[no-untyped-def]
    c = infer_baseline(job).config
    no_seq = c.with_changes()
    object.__setattr__(no_seq, "seq", None)
    t = throughput_of(no_seq, 10_000.0)
    assert t.unit == "samples" and t.per_iteration == 16 and math.isnan(t.mfu) and "seq" in t.mfu_unknown
    object.__setattr__(no_seq, "micro_batch", None)
    assert throughput_of(no_seq, 10_000.0).unit == "microbatches"


def test_a_microbatch_what_if_is_ranked_by_throughput_and_says_so(job) -> None:  # type: ignore[no-untyped-def]
    b = infer_baseline(job)
    r = estimate(job, {"microbatches": 8}, baseline=b)
    assert r.work_changed and r.throughput is not None and r.baseline_throughput is not None
    assert r.throughput.per_iteration == 2 * r.baseline_throughput.per_iteration
    # twice the work: the iteration grows, the rate per GPU is what compares
    it_change = 100 * (r.predicted.iteration_us / r.replayed.iteration_us - 1)
    assert it_change > 30
    expected = 100 * (2 * r.replayed.iteration_us / r.predicted.iteration_us - 1)
    assert r.throughput_change_pct == pytest.approx(expected, rel=1e-6)
    d = json.loads(json.dumps(r.as_dict()))
    assert {"baseline", "predicted", "notes", "memory"} <= set(d)  # existing keys kept
    tp = d["throughput"]
    assert tp["rank_by"] == "throughput" and tp["work_changed"] is True
    assert tp["predicted"]["tokens_per_s_per_gpu"] > 0 and 0 < tp["predicted"]["mfu"] < 1
    assert tp["change_pct"] == pytest.approx(expected, abs=1e-3)
    text = format_estimate(r, None)
    assert re.search(r"throughput  baseline [\d,]+ tokens/s/GPU, MFU [\d.]+ %", text)
    assert "compare throughput, not iteration time" in text
    # a GPU what-if that does the same work ranks by time
    same = estimate(job, {"gpu": "A100"}, baseline=b)
    assert not same.work_changed and same.as_dict()["throughput"]["rank_by"] == "iteration time"
    assert rank_key(r.throughput) != rank_key(same.throughput)


def test_a_cpu_paced_estimate_leads_its_text_with_it(job) -> None:  # type: ignore[no-untyped-def]
    r = estimate(job, {"dp": 4}, baseline=infer_baseline(job))
    r.cpu_paced = 0.28  # the share the host-pacing replay measured (set here to a known value)
    lines = format_estimate(r, None).splitlines()
    assert lines[0].startswith("CPU-PACED by 28 %") and f"--cpu-scale {GPU_BOUND_CPU_SCALE}" in lines[1]
    assert r.as_dict()["cpu_paced"] == {"share_pct": 28.0, "suggested_cpu_scale": GPU_BOUND_CPU_SCALE}
    r.cpu_paced = None
    assert not format_estimate(r, None).startswith("CPU-PACED") and r.as_dict()["cpu_paced"] is None


def test_the_loader_reports_files_and_bytes_by_size(tmp_path: Path) -> None:
    out = tmp_path / "job"
    synthesize(SynthConfig(model=MODEL, tp=1, pp=1, dp=4, microbatches=2, iterations=2, seed=1), out)
    total = sum(f.stat().st_size for f in out.iterdir())
    seen: list[tuple[float, str]] = []
    load_job(out, progress=lambda f, m: seen.append((f, m)), use_cache=False)
    parsing = [(f, m) for f, m in seen if m.startswith("parsing")]
    assert len(parsing) == 4
    assert [int(re.match(r"parsing (\d+) of 4 files", m).group(1)) for _, m in parsing] == [1, 2, 3, 4]
    assert parsing[-1][1].startswith(f"parsing 4 of 4 files, {total / 1e6:.1f} of {total / 1e6:.1f} MB")
    fractions = [f for f, _ in parsing]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(0.9)


class _Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def fileno(self) -> int:
        raise OSError("not a real terminal")


def test_terminal_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal whatever the one running the tests
    quiet = _Tty(False)
    terminal_progress(stream=quiet)(0.5, "parsing 1 of 2 files")
    assert quiet.getvalue() == ""
    tty = _Tty(True)
    report = terminal_progress(stream=tty)
    report(0.5, "parsing 1 of 2 files, 0.1 of 0.2 MB")
    report(1.0, "loaded 2 rank(s)")
    text = tty.getvalue()
    assert "parsing 1 of 2 files, 0.1 of 0.2 MB" in text and "50.0%" in text and text.endswith("\n")


def test_a_smaller_model_ranks_by_model_flops_not_tokens() -> None:
    from lumos_core.whatif.throughput import Throughput

    big = Throughput(10_000.0, 2, "tokens", 4096.0, 2e13, 989e12)  # 204,800 tokens/s/GPU
    small = Throughput(3_000.0, 2, "tokens", 4096.0, 2e12, 989e12)  # more tokens/s, less useful work
    assert small.per_s_per_gpu > big.per_s_per_gpu
    assert small.flops_per_s_per_gpu < big.flops_per_s_per_gpu
    assert sorted([small, big], key=rank_key) == [big, small]
