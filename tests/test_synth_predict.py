"""Trace-free prediction (lumos synth --predict-only): agreement with synthetic traces, the knobs
end to end through the CLI, recomputation's cost, and the interleaved schedule."""

from __future__ import annotations

import gzip
import subprocess
import sys

import orjson
import pytest
from conftest import REPO

from lumos_core.perf.schedules import interleaved_order, interleaved_steps, schedule
from lumos_core.synth import SynthConfig, model_from_args, synthesize
from lumos_core.synth.predict import predict
from lumos_core.trace.loader import load_job
from lumos_core.whatif.estimate import estimate

# Synthetic traces jitter each kernel +-3 % and each collective +-5 % (uniform, averaging out over
# thousands), the CPU runs ahead across phases, which the per-phase prediction ignores, and the
# replay's iteration window differs from the ProfilerStep span by ~3 %: 6 %.
SYNTH_TOLERANCE = 0.06


def _cli(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "synth", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout)


def _predict_cli(*args: str) -> dict:
    return _cli("--predict-only", "--json", *args)


@pytest.mark.parametrize(
    "kw",
    [
        {"model": model_from_args("gpt3-15b", layers=8), "tp": 2, "pp": 2, "dp": 2, "microbatches": 4},
        {
            "model": model_from_args("llama3-8b", layers=4, seq=2048),
            "tp": 2,
            "pp": 2,
            "dp": 1,
            "microbatches": 4,
            "sp": True,
            "recompute": "full",
        },
    ],
)
def test_prediction_equals_synth_and_replay(tmp_path, kw):
    cfg = SynthConfig(iterations=3, gpu="H100", **kw)
    synthesize(cfg, tmp_path / "job")
    replayed = estimate(load_job(tmp_path / "job", use_cache=False), {}).replayed.iteration_us * 1e-6
    assert predict(cfg).iteration_s == pytest.approx(replayed, rel=SYNTH_TOLERANCE)


def test_recompute_costs_time_on_a_gpu_bound_gpt3_15b_and_saves_memory():
    base = {
        "model": model_from_args("gpt3-15b"),
        "tp": 4,
        "pp": 2,
        "dp": 1,
        "microbatches": 8,
        "micro_batch": 2,
        "gpu": "H100",
    }
    runs = {r: predict(SynthConfig(recompute=r, **base)) for r in ("none", "selective", "full")}
    assert runs["none"].breakdown["host_share_forward"] < 0.5  # GPU-bound
    t = {r: p.iteration_s for r, p in runs.items()}
    # Full recomputation adds one forward of every layer (~1/3 of the compute): the issue's +20-45 %.
    assert 1.20 <= t["full"] / t["none"] <= 1.45
    assert t["none"] < t["selective"] < t["full"]
    act = {r: p.memory[0].activations for r, p in runs.items()}
    assert act["full"] < act["selective"] <= act["none"]


def test_each_knob_end_to_end_through_the_cli():
    common = (
        "--model",
        "gpt3-15b",
        "--gpu",
        "H100",
        "--tp",
        "4",
        "--pp",
        "4",
        "--dp",
        "2",
        "--global-batch",
        "16",
    )
    base = _predict_cli(*common)
    assert base["trace_free_prediction"] and base["gpus"] == 32 and base["config"]["microbatches"] == 8
    assert 0.05 < base["mfu"] < 0.9 and base["tokens_per_s_per_gpu"] > 0
    full = _predict_cli(*common, "--recompute", "full")
    assert full["iteration_s"] > 1.15 * base["iteration_s"]
    assert full["memory_per_stage"][0]["activations_gib"] < base["memory_per_stage"][0]["activations_gib"]
    assert full["hfu"] > full["mfu"]
    vp = _predict_cli(*common, "--vp", "3")  # interleaving shrinks the bubble (p-1)/(vp m)
    assert vp["iteration_s"] < base["iteration_s"]
    sp = _predict_cli(*common, "--sp")  # activations divided by TP
    assert sp["memory_per_stage"][0]["activations_gib"] < 0.5 * base["memory_per_stage"][0]["activations_gib"]
    cp = _predict_cli(*common, "--cp", "2")
    assert cp["gpus"] == 64
    assert cp["memory_per_stage"][0]["activations_gib"] < base["memory_per_stage"][0]["activations_gib"]
    llama = _predict_cli(
        "--model",
        "llama3-70b",
        "--gpu",
        "H100",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vp",
        "5",
        "--dp",
        "32",
        "--sp",
        "--global-batch",
        "1024",
    )
    assert llama["gpus"] == 1024 and 0.2 < llama["mfu"] < 0.7
    mha = _predict_cli(
        "--model",
        "llama3-8b",
        "--gpu",
        "H100",
        "--tp",
        "2",
        "--pp",
        "1",
        "--dp",
        "1",
        "--global-batch",
        "2",
        "--kv-heads",
        "32",
    )
    gqa = _predict_cli(
        "--model", "llama3-8b", "--gpu", "H100", "--tp", "2", "--pp", "1", "--dp", "1", "--global-batch", "2"
    )
    assert gqa["iteration_s"] < mha["iteration_s"]  # fewer K/V heads: a narrower QKV GEMM


def test_synth_traces_with_recompute_and_sp_via_the_cli(tmp_path):
    d = _cli(
        str(tmp_path / "j"),
        "--model",
        "custom",
        "--layers",
        "4",
        "--hidden",
        "512",
        "--heads",
        "8",
        "--seq",
        "256",
        "--tp",
        "2",
        "--pp",
        "2",
        "--dp",
        "1",
        "--recompute",
        "selective",
        "--sp",
        "--json",
        "--quiet",
    )
    assert d["ranks"] == 4 and d["prediction"]["iteration_s"] > 0
    job = load_job(tmp_path / "j", use_cache=False)
    names = {str(n) for r in job.ranks for n in r.names.strings} if hasattr(job.ranks[0], "names") else set()
    assert not names or any("core_attention" in n for n in names)


def _transfers(steps: list, op: str, peer: str) -> list[int]:
    return [
        t.microbatch for s in steps if s.phase == "P2P" for t in s.transfers if (t.op, t.peer) == (op, peer)
    ]


@pytest.mark.parametrize(("p", "v"), [(2, 2), (3, 2), (4, 2), (4, 3), (5, 4)])
def test_interleaved_steps_pair_every_transfer_around_the_ring(p: int, v: int) -> None:
    """Every activation a stage sends on is received by the next stage of the ring (the last
    stage feeds stage 0's next chunk), every gradient sent back by the previous one, in the same
    order and for the same microbatches, each before the step that needs it; the compute order is
    interleaved_order's."""
    for m in (p, 2 * p, 3 * p):
        steps = {s: interleaved_steps(s, p, v, m) for s in range(p)}
        for s in range(p):
            compute = [(x.phase, x.microbatch, x.chunk) for x in steps[s] if x.phase != "P2P"]
            assert compute == interleaved_order(s, p, v, m)
            nxt = steps[(s + 1) % p]
            assert _transfers(steps[s], "send", "next") == _transfers(nxt, "recv", "prev"), (m, s)
            assert _transfers(nxt, "send", "prev") == _transfers(steps[s], "recv", "next"), (m, s)
        # each piece but the last sends m activations on; each but the first m gradients back
        assert sum(len(_transfers(x, "send", "next")) for x in steps.values()) == (p * v - 1) * m
        for s in range(p):  # a step's input has arrived before it runs
            got = {"F": 0, "B": 0}
            need = {"F": 0, "B": 0}
            for x in steps[s]:
                if x.phase == "P2P":
                    got["F"] += sum((t.op, t.peer) == ("recv", "prev") for t in x.transfers)
                    got["B"] += sum((t.op, t.peer) == ("recv", "next") for t in x.transfers)
                elif (x.phase, s, x.chunk) not in (("F", 0, 0), ("B", p - 1, v - 1)):
                    need[x.phase] += 1
                    assert got[x.phase] >= need[x.phase], (m, s, x)


def test_interleaved_traces_replay_to_their_prediction_with_a_smaller_bubble(tmp_path) -> None:
    """lumos synth --vp 2 writes interleaved 1F1B: stage 0 runs model pieces 0 and P (layers 0 and
    4 here), the job replays to its own trace-free prediction within SYNTH_TOLERANCE, and the
    pipeline bubble shrinks: the iteration is shorter than with one chunk by at least half of
    what the prediction says it gains (the same cost models; jitter and CPU run-ahead aside)."""
    base = {"model": model_from_args("gpt3-15b", layers=8), "tp": 1, "pp": 4, "dp": 1, "microbatches": 8}
    replayed, predicted = {}, {}
    for vp in (1, 2):
        cfg = SynthConfig(iterations=3, gpu="H100", vp=vp, **base)
        synthesize(cfg, tmp_path / f"vp{vp}")
        replayed[vp] = (
            estimate(load_job(tmp_path / f"vp{vp}", use_cache=False), {}).replayed.iteration_us * 1e-6
        )
        predicted[vp] = predict(cfg).iteration_s
    assert predicted[2] == pytest.approx(replayed[2], rel=SYNTH_TOLERANCE)
    with gzip.open(tmp_path / "vp2" / "rank0.pt.trace.json.gz") as fh:
        names = {e.get("name") for e in orjson.loads(fh.read())["traceEvents"]}
    assert {"decoder.layers.0", "decoder.layers.4"} <= names and "decoder.layers.1" not in names
    gain, predicted_gain = replayed[1] - replayed[2], predicted[1] - predicted[2]
    assert predicted_gain > 0.05 * predicted[1]  # (p - 1) / (v m): 3/8 of the work -> 3/16
    assert gain >= 0.5 * predicted_gain, (replayed, predicted)


def test_interleaved_order_is_1f1b_with_one_chunk_and_complete_with_more():
    for s in range(4):
        one = [(p, mb) for p, mb, _ in interleaved_order(s, 4, 1, 8)]
        assert one == schedule("1f1b", s, 4, 8)
        two = interleaved_order(s, 4, 2, 8)
        assert sorted(two) == sorted((p, mb, c) for p in "FB" for mb in range(8) for c in range(2))


def test_interleaving_bubble_matches_theory():
    # Host-free, comm-free enough: one layer per chunk on a big GEMM-bound model, DP 1.
    m = model_from_args("custom", layers=8, hidden=8192, heads=64, seq=2048)
    t = {}
    for vp in (1, 2, 4):
        cfg = SynthConfig(model=m, tp=1, pp=2, dp=1, microbatches=4, vp=vp, gpu="H100")
        t[vp] = predict(cfg).breakdown["pipeline"]
    # (m + (p - 1) / vp) microbatch times: 5, 4.5, 4.25 -> ratios 0.9 and 0.85 (embedding and
    # LM head make the chunks a little uneven)
    assert t[2] / t[1] == pytest.approx(0.9, abs=0.03)
    assert t[4] / t[1] == pytest.approx(0.85, abs=0.03)


@pytest.mark.parametrize(
    ("layers", "pp", "vp", "hint"),
    [
        (126, 16, 1, "use --layers 128 (or 112)"),
        (30, 4, 1, "use --layers 28 (or 32)"),
        (5, 8, 1, "use --layers 8"),
    ],
)
def test_layers_that_do_not_split_name_the_nearest_that_do(layers: int, pp: int, vp: int, hint: str) -> None:
    """Llama 3 405B's 126 layers over 16 stages: the error says which layer counts would split."""
    from lumos_core.errors import ConfigError

    model = model_from_args("llama3-405b", layers=layers)
    with pytest.raises(ConfigError) as err:
        SynthConfig(model=model, tp=8, pp=pp, vp=vp, microbatches=pp).validate()
    assert f"{layers} layers cannot be split evenly into {pp} pipeline stages: {hint}" in str(err.value)


def test_memory_warning_names_the_worst_stage_its_need_and_the_capacity() -> None:
    cfg = SynthConfig(
        model=model_from_args("llama3-405b", layers=128), tp=8, pp=16, microbatches=32, gpu="H100"
    )
    pred = predict(cfg)
    worst = max(pred.memory, key=lambda m: m.total)
    cap_gib = pred.as_dict()["gpu_memory_gib"]
    assert worst.total / 2**30 > cap_gib  # the case under test: it does not fit
    warning = pred.memory_warning()
    assert warning is not None and warning.startswith(
        f"stage {worst.stage} needs {worst.total / 2**30:.1f} GiB, the H100 has {cap_gib:.1f} GiB"
    )
    small = predict(
        SynthConfig(model=model_from_args("llama3-8b", layers=4, seq=2048), tp=2, pp=2, microbatches=4)
    )
    assert small.memory_warning() is None and small.as_dict()["fits_in_memory"]
