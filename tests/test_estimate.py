"""What-if estimation: identity, monotonicity, the paper's shape of results, the graph rewrite checked
against jobs synthesised directly in the target configuration, and real CPU ground-truth pairs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, needs_shared, shared, shared_file

from lumos_core.errors import ConfigError
from lumos_core.graph.build import build_graph
from lumos_core.replay.breakdown import iteration_windows
from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import JobConfig, problems, unchecked
from lumos_core.whatif.estimate import estimate, outcome_of

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"


# ------------------------------------------------------------------------------------------ nanogpt


@pytest.fixture(scope="module")
def nanogpt():
    job = load_job(shared("h100-nanogpt-8rank"))
    return job, build_graph(job)


@needs_shared
def test_identity_equals_the_replay(nanogpt) -> None:
    job, graph = nanogpt
    r = estimate(job, {}, graph=graph)
    assert r.retimed == []
    assert r.predicted.iteration_us == pytest.approx(r.replayed.iteration_us, rel=0.005)
    assert r.replayed.iteration_us == pytest.approx(r.measured.iteration_us, rel=0.02)
    assert r.world_size == 8 and sorted(r.represents) == list(range(8))


@needs_shared
def test_baseline_of_nanogpt(nanogpt) -> None:
    job, _ = nanogpt
    b = infer_baseline(job)
    assert (b.config.dp, b.config.tp, b.config.pp) == (8, 1, 1)
    assert b.config.hidden == 768 and b.config.ffn == 3072  # from the recorded GEMM shapes
    assert b.config.gpu == "H100" and b.fields["gpu"].confidence == "certain"
    assert b.fields["tp"].confidence == "guess"


@needs_shared
def test_more_data_parallelism_never_shrinks_gradient_communication(nanogpt) -> None:
    job, graph = nanogpt
    times, comm = [], []
    for dp in (8, 16, 32, 64):
        r = estimate(job, {"dp": dp}, graph=graph)
        times.append(r.predicted.iteration_us)
        bd = r.predicted.breakdown
        comm.append(bd.exposed_comm_ns + bd.overlapped_ns)
        assert r.world_size == dp
    assert times == sorted(times)
    assert comm == sorted(comm)
    # The paper's Figure 7a: DP 8 -> 16 -> 32 grows slowly (a few percent per doubling here).
    assert times[1] / times[0] < 1.10 and times[2] / times[0] < 1.20
    r16 = estimate(job, {"dp": 16}, graph=graph)
    assert r16.represents[0] == [0, 8]  # each traced rank stands for two ranks of the new job
    kinds = {x.what for x in r16.retimed}
    assert kinds == {"DP ReduceScatter", "DP AllGather"}
    assert all("inter-node" in x.model for x in r16.retimed)  # 16 GPUs span two 8-GPU nodes


@needs_shared
def test_bigger_model_and_hardware_changes(nanogpt) -> None:
    job, graph = nanogpt
    base = estimate(job, {}, graph=graph).predicted.iteration_us
    bigger = estimate(job, {"hidden": 1024, "ffn": 4096}, graph=graph)
    assert bigger.predicted.iteration_us > base
    assert any(x.what == "GEMM" and "16384x768x3072" in x.detail for x in bigger.retimed)
    faster = estimate(job, {"gpu": "B200"}, graph=graph)
    assert (
        faster.predicted.breakdown.exposed_compute_ns
        < estimate(job, {}, graph=graph).predicted.breakdown.exposed_compute_ns
    )
    why = faster.explain(0, int(np.flatnonzero(faster.why[0] >= 0)[0]))
    assert "H100 -> B200" in why and "measured" in why


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
@needs_shared
def test_cli_estimate_json_and_export(tmp_path: Path) -> None:
    out = tmp_path / "dp16"
    cmd = [
        sys.executable,
        "-m",
        "lumos_core",
        "estimate",
        "--dp",
        "16",
        "--json",
        "--out",
        str(out),
        str(shared("h100-nanogpt-8rank")),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert set(d) >= {"baseline", "predicted", "retimed", "seconds"}
    assert set(d["baseline"]) >= {"config", "iteration_us", "breakdown"}
    assert set(d["predicted"]) >= {"config", "iteration_us", "breakdown", "ranks"}
    assert d["predicted"]["ranks"] == 16 and d["predicted"]["config"]["dp"] == 16
    assert {r["what"] for r in d["retimed"]} == {"DP ReduceScatter", "DP AllGather"}
    files = sorted(out.glob("*.json.gz"))
    assert len(files) == 16
    job = load_job(out, use_cache=False)
    assert [t.rank for t in job.ranks] == list(range(16)) and job.world_size == 16
    assert job.ranks[0].metadata["lumos_predicted"] is True
    assert job.ranks[8].count(4) == job.ranks[0].count(4)  # rank 8 is a copy of simulated rank 0
    api = estimate(load_job(shared("h100-nanogpt-8rank")), {"dp": 16})
    assert d["predicted"]["iteration_us"] == pytest.approx(api.predicted.iteration_us, rel=1e-6)


@needs_shared
def test_cli_show_baseline_json_has_the_fitted_models() -> None:
    cmd = [sys.executable, "-m", "lumos_core", "estimate", "--show-baseline", "--json", "-q"]
    p = subprocess.run(
        [*cmd, str(shared("h100-nanogpt-8rank"))], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["config"]["dp"] == 8
    assert set(d["fitted_models"]) >= {"kernel_curves", "collectives", "overlap_slowdown", "lines"}
    assert isinstance(d["fitted_models"]["kernel_curves"]["gemm"]["peak"], float)


@needs_shared
def test_all_to_all_is_not_a_data_parallel_collective() -> None:
    """DLRM's embedding all-to-all (SendRecv kernels under c10d::alltoall_base_) is re-timed as an
    all-to-all over its group (every rank here), with its own (activation) volume per rank, never
    as a DP gradient collective; fewer ranks exchange (n-1)/n of a rank's data: less, not more."""
    job = load_job(shared("dlrm-v100-8rank"))
    r = estimate(job, {"dp": 2})
    what = {x.what for x in r.retimed}
    assert "all-rank AllToAll" in what and "DP AllReduce" in what, what
    assert not any("SendRecv" in w or w == "DP AllToAll" for w in what)
    a2a = next(x for x in r.retimed if x.what == "all-rank AllToAll")
    assert "group 8 -> 2" in a2a.detail and "message" not in a2a.detail  # same bytes per rank
    # Ranks 0 and 1 alone are simulated; their traced iterations are longer than the job's mean
    # (12.5-19.9 ms per rank), so the change against the whole job is mostly that: said in a note.
    kept = [t for t in job.ranks if t.rank in (0, 1)]
    own = outcome_of(r.baseline.config, kept).iteration_us
    assert abs(own / r.replayed.iteration_us - 1) > 0.02
    note = next(n for n in r.notes if n.startswith("the simulated ranks [0, 1]"))
    change = 100 * (r.predicted.iteration_us / r.replayed.iteration_us - 1)
    assert f"{change:+.1f} %" not in note.split("prediction is")[1]


def test_invalid_configurations_are_explained() -> None:
    assert problems(JobConfig(layers=10, pp=4, microbatches=8)) == [
        "10 layers do not divide into 4 pipeline stages evenly (try 8 or 12 layers)"
    ]
    assert problems(JobConfig(pp=4, microbatches=2)) == []  # 1F1B with fewer microbatches than stages
    assert any("unknown GPU" in p for p in problems(JobConfig(gpu="TPU9")))
    assert any("heads" in p for p in problems(JobConfig(heads=6, tp=4)))
    with pytest.raises(ConfigError):
        JobConfig().with_changes(bogus=1)


def test_tp_with_unknown_heads_is_checked_on_the_hidden_size_and_says_what_it_could_not_check() -> None:
    """TP must divide the attention heads. With the heads unknown, a hidden size TP does not divide
    is still refused (hidden = heads x head size); otherwise the estimate runs and says the heads
    check could not be made."""
    assert problems(JobConfig(hidden=768, tp=5)) == ["hidden size 768 does not split over TP 5"]
    assert problems(JobConfig(hidden=768, tp=3)) == []
    assert problems(JobConfig(hidden=768, heads=12, tp=3)) == []
    note = unchecked(JobConfig(hidden=768, tp=3))
    assert len(note) == 1 and "heads could not be checked" in note[0] and "--baseline-heads" in note[0]
    assert unchecked(JobConfig(hidden=768, heads=12, tp=3)) == []
    assert unchecked(JobConfig(hidden=768, tp=1)) == []


@needs_shared
def test_layers_of_a_compiled_model_come_from_its_repeated_kernel_pattern(nanogpt) -> None:
    from lumos_core.whatif.segments import Phase, segment_rank

    job, graph = nanogpt
    b = infer_baseline(job)
    assert b.config.layers == 11 and b.fields["layers"].confidence == "inferred"
    seg = segment_rank(job.rank(0))
    assert seg.source == "repeated kernel pattern" and seg.layers == list(range(11))
    t = job.rank(0)
    # Every layer's forward launches the same MLP GEMM once (the repeated block's anchor).
    mlp = t.strings.index("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    for layer in range(11):
        sel = (seg.phase == Phase.F) & (seg.layer == layer) & (t.kind == 4)
        assert np.count_nonzero(sel & (t.name == mlp)) == 1, layer
    # 11 layers cannot split over 2 stages: explained, with the nearest numbers that can.
    with pytest.raises(ConfigError, match="try 10 or 12 layers"):
        estimate(job, {"pp": 2, "microbatches": 4}, graph=graph)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "lumos_core",
            "estimate",
            "--pp",
            "2",
            "--microbatches",
            "4",
            str(shared("h100-nanogpt-8rank")),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and "10 or 12 layers" in p.stderr
    r = estimate(job, {"pp": 2, "layers": 12, "microbatches": 4, "dp": 4}, graph=graph)
    assert sorted(r.represents) == [0, 4] and r.world_size == 8
    assert r.predicted.iteration_us > 0


# ------------------------------------------------------------------------------ synthetic consistency

MODEL = ModelSpec("test", layers=8, hidden=2048, ffn=8192, heads=16, seq=2048, vocab=32000)
BASE = {"tp": 2, "pp": 2, "dp": 2, "microbatches": 4}
TARGETS = {
    "pp4": ({"pp": 4}, {"tp": 2, "pp": 4, "dp": 2, "microbatches": 4}),
    "pp1": ({"pp": 1}, {"tp": 2, "pp": 1, "dp": 2, "microbatches": 4}),
    "mb8": ({"microbatches": 8}, {"tp": 2, "pp": 2, "dp": 2, "microbatches": 8}),
    "dp4": ({"dp": 4}, {"tp": 2, "pp": 2, "dp": 4, "microbatches": 4}),
    "layers16": ({"layers": 16}, {"tp": 2, "pp": 2, "dp": 2, "microbatches": 4, "layers": 16}),
}


def _synth(out: Path, **kw) -> Path:
    layers = kw.pop("layers", MODEL.layers)
    model = ModelSpec(
        "test",
        layers=layers,
        hidden=MODEL.hidden,
        ffn=MODEL.ffn,
        heads=MODEL.heads,
        seq=MODEL.seq,
        vocab=MODEL.vocab,
    )
    synthesize(SynthConfig(model=model, iterations=3, seed=11, **kw), out)
    return out


@pytest.fixture(scope="module")
def synth_base(tmp_path_factory):
    out = _synth(tmp_path_factory.mktemp("synth") / "base", **BASE)
    return load_job(out, use_cache=False)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_rewrite_matches_the_job_synthesised_in_that_configuration(
    name: str, synth_base, tmp_path: Path
) -> None:
    """A check of the graph-rewrite logic (not of accuracy: both sides come from our generator)."""
    changes, target = TARGETS[name]
    truth = load_job(_synth(tmp_path / name, **target), use_cache=False)
    want = estimate(truth, {}).measured.iteration_us
    got = estimate(synth_base, changes)
    assert got.world_size == truth.world_size
    assert got.predicted.iteration_us == pytest.approx(want, rel=0.05), (
        name,
        got.predicted.iteration_us,
        want,
    )


@pytest.mark.parametrize("tp", [1, 4])
def test_tensor_parallel_change_matches_the_synthesised_job(tp: int, synth_base, tmp_path: Path) -> None:
    """TP 2 -> 1 or 4 re-times GEMMs, attention and elementwise work and the TP all-reduces; CPU
    launch costs that TP does not change keep the error larger than for DP/PP (we hold 10%)."""
    target = {**BASE, "tp": tp}
    truth = load_job(_synth(tmp_path / f"tp{tp}", **target), use_cache=False)
    want = estimate(truth, {}).measured.iteration_us
    got = estimate(synth_base, {"tp": tp})
    assert got.world_size == truth.world_size
    assert got.predicted.iteration_us == pytest.approx(want, rel=0.10), (tp, got.predicted.iteration_us, want)


@needs_shared
def test_tensor_parallelism_added_to_a_trace_without_it(nanogpt) -> None:
    """nanogpt has no TP: TP 2 halves its layer GEMMs and adds 4 all-reduces per layer."""
    job, graph = nanogpt
    r = estimate(job, {"tp": 2}, graph=graph)
    rules = {x.what: x for x in r.retimed}
    assert "TP all-reduce" in rules
    per_rank_iter = rules["TP all-reduce"].count / len(job.ranks) / len(job.ranks[0].iterations)
    assert 4 * 10 <= per_rank_iter <= 4 * 14  # 4 per layer, ~11-12 layers
    gemm = [x for x in r.retimed if x.what == "GEMM" and "768x2304" in x.detail]
    assert gemm and "/ TP" in gemm[0].model
    busy = r.predicted.breakdown.exposed_compute_ns + r.predicted.breakdown.overlapped_ns
    busy0 = r.replayed.breakdown.exposed_compute_ns + r.replayed.breakdown.overlapped_ns
    assert busy < 0.95 * busy0


def test_pipeline_rewrite_builds_the_schedule(synth_base) -> None:
    r = estimate(synth_base, {"pp": 4, "microbatches": 8})
    assert sorted(r.represents) == [0, 4, 8, 12] and r.world_size == 16
    assert any("pipeline rebuilt: 4 stage(s) x 2 layers, 8 microbatches" in n for n in r.notes)
    stage0 = next(t for t in r.timeline if t.rank == 0)
    names = [stage0.strings[i] for i in stage0.name[stage0.kind == 1]]  # user annotations
    assert names.count("decoder.layers.0") == 8 * 3  # 8 microbatches x 3 iterations
    assert "decoder.layers.2" not in names  # layer 2 now lives on stage 1
    sends = [i for i in range(len(stage0)) if stage0.name_of(i).startswith("ncclDevKernel_SendRecv")]
    assert len(sends) == 2 * 8 * 3  # send activations + receive gradients, per microbatch
    assert [it.name for it in stage0.iterations][:2] == ["ProfilerStep#1", "ProfilerStep#2"]


def test_exported_pipeline_rebuild_links_every_launch_to_its_own_kernel(synth_base, tmp_path) -> None:
    """Rebuilt schedules copy template events many times: the export must renumber their correlation
    ids (not keep the template's args), or a reloaded prediction links launches to the wrong kernels
    and its graph has cycles."""
    from lumos_core.trace.model import Kind
    from lumos_core.whatif.export import write_job

    r = estimate(synth_base, {"pp": 4, "microbatches": 8})
    out = tmp_path / "pp4"
    write_job(r.timeline, r.represents, out, r.world_size)
    job = load_job(out, use_cache=False)
    t = next(x for x in job.ranks if x.rank == 0)
    kernels = t.correlation[t.kind == Kind.KERNEL]
    assert len(kernels) > 0 and len(np.unique(kernels)) == len(kernels)
    linked = np.count_nonzero(t.launch[t.kind == Kind.KERNEL] >= 0)
    assert linked == len(kernels)
    build_graph(job)  # no cycle


def test_gpipe_schedule_is_slower_than_1f1b_only_by_memory_not_time(synth_base) -> None:
    a = estimate(synth_base, {"pp": 4, "microbatches": 8, "schedule": "1f1b"}).predicted.iteration_us
    b = estimate(synth_base, {"pp": 4, "microbatches": 8, "schedule": "gpipe"}).predicted.iteration_us
    assert b == pytest.approx(a, rel=0.10)  # same bubble in theory; GPipe keeps more activations


def test_pipeline_bubble_grows_with_stages(synth_base) -> None:
    """Figure 7b's shape: more stages with the same microbatches add bubble time. A stage waiting for
    its neighbour sits in a posted NCCL receive, so the bubble shows as exposed communication (as
    in the synthesised PP=4 job itself), or as idle time where nothing was posted."""
    t4 = estimate(synth_base, {"pp": 4}).predicted
    t2 = estimate(synth_base, {}).predicted
    waiting = lambda b: b.other_ns + b.exposed_comm_ns  # noqa: E731
    assert waiting(t4.breakdown) >= waiting(t2.breakdown)
    per_gpu_work_4 = t4.breakdown.exposed_compute_ns + t4.breakdown.overlapped_ns
    per_gpu_work_2 = t2.breakdown.exposed_compute_ns + t2.breakdown.overlapped_ns
    assert per_gpu_work_4 < per_gpu_work_2  # each stage holds half the layers


# ------------------------------------------------------------------------------ CPU ground truth


def steady_ms(job) -> float:
    """Median step time over the steps within 15% of the fastest: the VM these were recorded on
    has slow phases (see tests/data/cpu-gpt/README.md) that inflate some steps."""
    lengths = np.asarray([w.length for t in job.ranks for w in iteration_windows(t)[:-1]]) / 1e6
    return float(np.median(lengths[lengths <= 1.15 * lengths.min()]))


CPU_CASES = {
    "layers8": ({"layers": 8}, 0.08),
    "mb2": ({"microbatches": 2}, 0.08),
    "mb4": ({"microbatches": 4}, 0.08),
    "hidden512": ({"hidden": 512, "ffn": 2048}, 0.08),
    "ffn2048": ({"ffn": 2048}, 0.12),
    "seq256": ({"seq": 256}, 0.08),
    "microbatch8": ({"micro_batch": 8}, 0.08),
    "dp2": ({"dp": 2}, 0.25),  # gloo on a 2-core VM: contention the model does not capture
}


@pytest.fixture(scope="module")
def cpu_base():
    return load_job(CPU_GPT / "base", use_cache=False)


@pytest.fixture(scope="module")
def cpu_case(cpu_base):  # type: ignore[no-untyped-def]
    """(predicted, measured) steady ms of a one-knob case, each worked out once for the module: the
    per-case tests and the mean-error test score the same estimates against the same recordings."""
    base_ms = steady_ms(cpu_base)
    done: dict[str, tuple[float, float]] = {}

    def case(name: str) -> tuple[float, float]:
        if name not in done:
            r = estimate(cpu_base, CPU_CASES[name][0])
            # Predictions are relative to the replayed baseline; put them on the baseline's steady time.
            pred = r.predicted.iteration_us / r.replayed.iteration_us * base_ms
            done[name] = pred, steady_ms(load_job(CPU_GPT / name, use_cache=False))
        return done[name]

    return case


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_cpu_ground_truth_pairs(name: str, cpu_case) -> None:  # type: ignore[no-untyped-def]
    tol = CPU_CASES[name][1]
    pred, truth = cpu_case(name)
    assert pred == pytest.approx(truth, rel=tol), (name, pred, truth)


NON_DP_TARGET = 0.05  # the target: mean |error| over the non-DP knobs


def test_cpu_ground_truth_mean_error_over_non_dp_knobs(cpu_base, cpu_case) -> None:  # type: ignore[no-untyped-def]
    """Mean |error| of the non-DP one-knob estimates within the issue's 5 % target, widened by the
    recordings' own noise floor (base vs base_repeat, the same command recorded twice)."""
    base_ms = steady_ms(cpu_base)
    noise = abs(steady_ms(load_job(CPU_GPT / "base_repeat", use_cache=False)) / base_ms - 1)
    errors = []
    for name, (changes, _) in sorted(CPU_CASES.items()):
        if "dp" in changes:
            continue
        pred, truth = cpu_case(name)
        errors.append(abs(pred / truth - 1))
    mean = sum(errors) / len(errors)
    assert mean <= NON_DP_TARGET + noise, (mean, noise, errors)


@pytest.mark.parametrize("where", ["sub", ".", "sub/../deeper"])
def test_cli_estimate_refuses_an_out_inside_the_traces(tmp_path: Path, where: str) -> None:
    """Trace folders are read-only: --out inside (or equal to) the input folder is refused, exit 2,
    with nothing written (the check comes before loading)."""
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(CPU_GPT / "base", traces)
    before = sorted(p.relative_to(traces) for p in traces.rglob("*"))
    out = traces / where
    cmd = [sys.executable, "-m", "lumos_core", "estimate", str(traces), "--dp", "4", "--out", str(out), "-q"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "read-only" in p.stderr and "Traceback" not in p.stderr
    assert sorted(p.relative_to(traces) for p in traces.rglob("*")) == before


def test_api_export_refuses_the_trace_folder(tmp_path: Path) -> None:
    from lumos_core.api.results import EstimateReport
    from lumos_core.errors import LumosError

    traces = tmp_path / "traces"
    traces.mkdir()
    report = EstimateReport(None, synthetic=False, stalls_kept=False, source=str(traces))  # type: ignore[arg-type]
    for out in (traces, traces / "sub"):
        with pytest.raises(LumosError, match="read-only"):
            report.export(out)
    assert list(traces.iterdir()) == []


@needs_shared
def test_recompute_full_on_nanogpt_is_retimed_and_says_the_traced_mode_is_a_guess(nanogpt) -> None:
    job, graph = nanogpt
    r = estimate(job, {"recompute": "full"}, graph=graph)
    assert any(x.what == "layer backward with recomputation" for x in r.retimed)
    assert r.predicted.iteration_us > r.replayed.iteration_us  # a forward more per layer costs time
    note = next(n for n in r.notes if n.startswith("recompute=full"))
    assert "the traced mode is a guess" in note and "--baseline-recompute" in note


def test_recompute_without_layers_says_why_it_retimes_nothing() -> None:
    """No layer structure: the rule re-times nothing and must say so by name (not a silent +0.0 %)."""
    from types import SimpleNamespace

    from lumos_core.whatif.retime.layer_rules import retime_recompute

    notes: list[str] = []
    ctx = SimpleNamespace(
        base=SimpleNamespace(recompute="none"),
        config=SimpleNamespace(recompute="full"),
        has_gpu=True,
        notes=notes,
        labels=lambda: notes.append("layer-level rules skipped: no layers") or None,
    )
    retime_recompute(ctx, plan=None)  # type: ignore[arg-type]
    assert any(n.startswith("recompute=full: not re-timed") and "layers were not found" in n for n in notes)


@needs_shared
def test_identity_with_one_rank_of_eight_loaded() -> None:
    """One rank of the 8-rank job: its DP groups still ran on one node, so an estimate with no knob
    changed re-times nothing (it used to re-time every collective '8 -> 8' as if the traced group
    had spanned 8 nodes, and the breakdown moved under a +0.0 % headline)."""
    job = load_job(shared_file("h100-nanogpt-8rank", "*-rank3-*"))
    assert len(job.ranks) == 1 and job.world_size == 8
    r = estimate(job, {})
    assert r.retimed == []
    assert r.predicted.iteration_us == pytest.approx(r.replayed.iteration_us, rel=1e-9)
    assert r.predicted.breakdown.as_us() == pytest.approx(r.replayed.breakdown.as_us(), rel=1e-9)
