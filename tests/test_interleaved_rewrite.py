"""Rebuilding a pipeline traced with interleaved 1F1B (Megatron's virtual stages, vp > 1), on
SYNTHETIC jobs (``lumos synth --vp 2``): both sides come from our own cost models, so these check the
rewrite's logic (every model chunk's layers found on the rank that ran them, in the right order,
with the embedding, head and gradient synchronisation once), never accuracy.

Tolerance: 5 %, the one tests/test_estimate.py holds 1F1B pipeline rewrites to against the job
synthesised in the target configuration. The null model ("the target takes what the trace took")
is 4-47 % off on these pairs, so a rewrite that loses or doubles a chunk's layers fails.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import orjson
import pytest

from lumos_core.compare.validate import validate_jobs
from lumos_core.errors import ConfigError
from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.loader import load_job
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.segments import Phase, segment_rank
from lumos_core.whatif.source_layout import SourceLayout, global_layers

MODEL = dict(hidden=2048, ffn=8192, heads=16, seq=2048, vocab=32000)
BASE = {"tp": 2, "pp": 2, "dp": 2, "microbatches": 4}
TOL = 0.05


def _job(out: Path, layers: int = 8, **kw):  # type: ignore[no-untyped-def]
    cfg = SynthConfig(model=ModelSpec("test", layers=layers, **MODEL), iterations=3, seed=11, **{**BASE, **kw})
    synthesize(cfg, out)
    return load_job(out, use_cache=False)


@pytest.fixture(scope="module")
def vp2_dir(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("vp2") / "job"
    _job(out, vp=2)
    return out


@pytest.fixture(scope="module")
def vp2(vp2_dir: Path):  # type: ignore[no-untyped-def]
    return load_job(vp2_dir, use_cache=False)


@pytest.fixture(scope="module")
def synth_jobs(tmp_path_factory):  # type: ignore[no-untyped-def]
    """``synth_jobs(**kw)``: (folder, loaded job) of ``_job(**kw)``, synthesised once for the module
    (the plain job and its pp 4 target are used by several tests; a job is only read)."""
    done: dict[tuple, tuple[Path, object]] = {}

    def get(**kw):  # type: ignore[no-untyped-def]
        key = tuple(sorted(kw.items()))
        if key not in done:
            out = tmp_path_factory.mktemp("synth") / "job"
            done[key] = out, _job(out, **kw)
        return done[key]

    return get


@pytest.fixture(scope="module")
def vp1(synth_jobs):  # type: ignore[no-untyped-def]
    return synth_jobs()[1]


_LAYER = re.compile(r"^decoder\.layers\.(\d+)(\.backward)?$")


# The vp=2 job (8 layers, 2 stages x 2 chunks of 2) with its layers numbered from 0 in each model
# chunk (Megatron-core's module lists) or in each stage, as real traces may name them.
PER_CHUNK = {"chunk": lambda g: g % 2, "stage": lambda g: (g // 4) * 2 + g % 2}


def _renumbered(src: Path, out: Path, local) -> Path:  # type: ignore[no-untyped-def]
    """``src`` with layer g renamed ``decoder.layers.<local(g)>``."""
    out.mkdir()
    for f in sorted(src.glob("*.json.gz")):
        d = orjson.loads(gzip.decompress(f.read_bytes()))
        for e in d["traceEvents"]:
            m = _LAYER.match(e.get("name", ""))
            if m:
                e["name"] = f"decoder.layers.{local(int(m.group(1)))}{m.group(2) or ''}"
        (out / f.name).write_bytes(gzip.compress(orjson.dumps(d), 1))
    return out


def test_chunk_layout_puts_each_layer_on_the_stage_that_ran_it() -> None:
    # 8 layers, 2 stages x 2 chunks: stage 0 runs layers 0-1 and 4-5, stage 1 layers 2-3 and 6-7
    assert [SourceLayout.of(8, 2, 2).stage_of(i) for i in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [SourceLayout.of(8, 2, 1).stage_of(i) for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ConfigError, match="2 stages x 3 virtual stages"):
        SourceLayout.of(8, 2, 3)


def test_the_baseline_reads_its_virtual_stages(vp2) -> None:  # type: ignore[no-untyped-def]
    r = estimate(vp2, {})
    assert r.baseline.config.vp == 2
    # nothing changes: the replay, exactly
    assert r.predicted.iteration_us == r.replayed.iteration_us


@pytest.mark.parametrize(
    "target",
    [
        {},
        {"pp": 4},
        {"pp": 1},
        {"vp": 2, "microbatches": 8},
        {"vp": 2, "layers": 16},
        {"vp": 2, "pp": 4},
        {"vp": 2, "pp": 4, "layers": 16},
    ],
    ids=["vp1", "pp4", "pp1", "vp2-mb8", "vp2-layers16", "vp2-pp4", "vp2-pp4-layers16"],
)
def test_an_interleaved_trace_predicts_the_job_synthesised_in_the_target(
    vp2, target: dict, synth_jobs
) -> None:  # type: ignore[no-untyped-def]
    truth = synth_jobs(**target)[1]
    v = validate_jobs(vp2, truth)
    assert v.changes and not v.unmodelled, (v.changes, v.unmodelled)
    assert v.predicted_us == pytest.approx(v.measured_us, rel=TOL), (target, v.error_pct, v.null_error_pct)
    assert abs(v.error_pct) < abs(v.null_error_pct)


def test_a_plain_trace_predicts_the_interleaved_job(vp1, vp2) -> None:  # type: ignore[no-untyped-def]
    v = validate_jobs(vp1, vp2)
    assert v.changes == {"vp": 2}
    assert v.predicted_us == pytest.approx(v.measured_us, rel=TOL), (v.error_pct, v.null_error_pct)
    assert any("vp=2 (rewrite): interleaved 1F1B rebuilt in Megatron-LM's order" in n for n in v.result.notes)
    # the pipeline note names the interleaved schedule too (it said plain "1f1b" beside the vp note)
    rebuilt = [n for n in v.result.notes if n.startswith("pipeline rebuilt")]
    assert rebuilt and all("interleaved 1f1b over 2 virtual stages" in n for n in rebuilt), rebuilt


def test_the_rebuilt_interleaved_stage_runs_its_chunks_in_megatrons_order(vp1) -> None:  # type: ignore[no-untyped-def]
    """Stage 0 of 2 with 2 chunks of 2 layers (8 layers): chunk 0 = layers 0-1, chunk 1 = 4-5, in
    interleaved_order: F(mb0,c0) F(mb1,c0) F(mb0,c1) F(mb1,c1) ... (warm-up of (P-1)*2 + (V-1)*P)."""
    from lumos_core.graph.build import build_graph
    from lumos_core.whatif.baseline import infer_baseline
    from lumos_core.whatif.rewrite import build_rewritten

    b = infer_baseline(vp1)
    rw = build_rewritten(vp1, build_graph(vp1), b, b.config.with_changes(vp=2), [])
    forwards = [key[2] for nr, it, key in rw.instance_info if nr == 0 and it == 0 and key[1] == Phase.F]
    assert forwards[:8] == [0, 1, 0, 1, 4, 5, 4, 5]
    assert sorted(set(forwards)) == [0, 1, 4, 5] and len(forwards) == 2 * 2 * 4


def test_virtual_stages_are_read_from_layer_annotations_without_synth_metadata(vp2, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A real trace has no lumos_synth_config: stage 0 of 2 running layers 0-1 and 4-5 is 2 chunks,
    and its forward_step annotations (one per chunk and microbatch) count 2 x 4."""
    import lumos_core.whatif.baseline as baseline

    monkeypatch.setattr(baseline, "_synth_config", lambda job: None)
    b = baseline.infer_baseline(vp2)
    assert (b.config.vp, b.config.microbatches, b.config.layers) == (2, 4, 8)
    assert b.fields["vp"].confidence == "inferred"


def test_a_layer_missing_from_its_stage_is_an_error_not_a_faster_pipeline(vp2) -> None:  # type: ignore[no-untyped-def]
    """Read as not interleaved, stage 0 would have to run layers 0-3: layer 2 is on stage 1."""
    from lumos_core.whatif.baseline import infer_baseline

    b = infer_baseline(vp2, overrides={"vp": 1})
    with pytest.raises(ConfigError, match=r"rank 0: layer 2's forward .*--baseline-vp"):
        estimate(vp2, {"pp": 4}, baseline=b)


@pytest.mark.parametrize("per", ["chunk", "stage"])
def test_layers_numbered_per_chunk_or_per_stage_get_their_global_numbers(
    vp2_dir: Path, vp1, per: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    job = load_job(_renumbered(vp2_dir, tmp_path / per, PER_CHUNK[per]), use_cache=False)
    stage1 = next(t for t in job.ranks if t.rank == 4)  # tp 2 x dp 2: rank 4 is stage 1
    seg = global_layers(segment_rank(stage1), 1, SourceLayout.of(8, 2, 2), 4)
    fwd = seg.phase == Phase.F
    assert sorted({int(x) for x in seg.layer[fwd].tolist() if x >= 0}) == [2, 3, 6, 7]
    # every layer's forward once per microbatch (per chunk: the schedule's k-th step of its chunk)
    for layer in (2, 3, 6, 7):
        assert sorted({int(m) for m in seg.mb[fwd & (seg.layer == layer)].tolist()}) == [0, 1, 2, 3]
    v = validate_jobs(job, vp1)
    assert v.changes == {"vp": 1}
    assert v.predicted_us == pytest.approx(v.measured_us, rel=TOL), (v.error_pct, v.null_error_pct)


def test_a_plain_pipeline_numbered_per_stage_is_rebuilt_whole(synth_jobs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """1F1B, 2 stages of 4 layers each named 0-3: stage 1's layers are 4-7 (before, the rebuild
    looked for 4-7 there, found nothing and predicted pp 4 36.7 % too fast)."""
    src = synth_jobs()[0]
    job = load_job(_renumbered(src, tmp_path / "per-stage", lambda g: g % 4), use_cache=False)
    v = validate_jobs(job, synth_jobs(pp=4)[1])
    assert v.changes == {"pp": 4}
    assert v.predicted_us == pytest.approx(v.measured_us, rel=TOL), (v.error_pct, v.null_error_pct)


def test_dp_added_to_a_tp_pp_trace_at_dp_1_says_gradient_sync_is_missing(tmp_path: Path) -> None:
    """A TP x PP job traced at DP 1 has collectives but none on a data-parallel group: DP 2 copies
    ranks and adds no gradient synchronisation. The prediction then must say so, not pass the
    replayed time off as the DP 2 job's (it printed "+0.0 %" with nothing re-timed, no note)."""
    job = _job(tmp_path / "dp1", dp=1)
    r = estimate(job, {"dp": 2})
    assert any("no data-parallel gradient collective" in n for n in r.notes), r.notes
    assert not any("gradient collective" in n for n in estimate(job, {"microbatches": 8}).notes)
