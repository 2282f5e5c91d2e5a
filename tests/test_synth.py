"""``lumos synth``: structure, causality and cross-rank consistency of synthetic traces.

An independent checker reads the raw JSON back and verifies the rules the generator promises
(and a dependency-driven replay relies on): every GPU activity starts exactly at
max(launch end + launch latency, previous activity on its stream, the CUDA event its stream
waits for); CPU ranges nest; every collective instance ends at the same true time on all of its
ranks once the recorded clock offsets are removed. Then the real loader must load the folders
with all ranks and every collective matched.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest

from lumos_core.cli import main as cli_main
from lumos_core.errors import ConfigError
from lumos_core.perf import costs
from lumos_core.perf.hardware import get_gpu
from lumos_core.synth import PRESETS, ModelSpec, SynthConfig, model_from_args, rank_file_name, synthesize
from lumos_core.synth.groups import Layout
from lumos_core.synth.kineto_writer import BASE_TIME_NS
from lumos_core.synth.timeline import LAUNCH_LATENCY_NS
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import CollectiveKind, LaneRole

TINY = ModelSpec("tiny", layers=4, hidden=256, ffn=1024, heads=4, seq=128, vocab=1024)
TINY_CFG = SynthConfig(model=TINY, tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=3)


def read(path: Path) -> dict:
    with gzip.open(path) as fh:
        return orjson.loads(fh.read())


def ns(us: float) -> int:
    return round(us * 1000)


@pytest.fixture(scope="module")
def tiny_job(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("synth") / "tiny"
    result = synthesize(TINY_CFG, out)
    return out, result, [read(f) for f in result.files]


# ------------------------------------------------------------------------------------------ checker


def check_rank_causality(d: dict) -> Counter:
    """Assert the timing rules on one rank's raw events; returns counts of what was checked."""
    x = [e for e in d["traceEvents"] if e["ph"] == "X"]
    seen: Counter = Counter()
    # CPU ranges on one thread nest properly (no partial overlaps).
    threads: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in x:
        if e["cat"] in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            threads[e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for spans in threads.values():
        stack: list[int] = []
        for s, t in sorted(spans, key=lambda p: (p[0], -p[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or t <= stack[-1], "CPU ranges overlap without nesting"
            stack.append(t)
            seen["cpu"] += 1
    runtime = {
        e["args"]["correlation"]: (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"])
        for e in x
        if e["cat"] in ("cuda_runtime", "cuda_driver")
    }
    gpu = {e["args"]["correlation"]: e for e in x if e["cat"] in ("kernel", "gpu_memcpy")}
    waits = {
        e["args"]["correlation"]: e["args"]
        for e in x
        if e["cat"] == "cuda_sync" and e["name"] == "Stream Wait Event"
    }
    recorded_on = {a["wait_on_cuda_event_record_corr_id"]: a["wait_on_stream"] for a in waits.values()}
    # Replay the CUDA stream semantics in CPU issue order. A stream's position is the end of its
    # last activity *or* of an event it was told to wait for: an event recorded after a wait
    # completes only once the waited-for work has (real CUDA semantics, which PyTorch relies on).
    position: dict[int, int] = defaultdict(int)
    last_end: dict[int, int] = defaultdict(int)
    event_time: dict[int, int] = {}
    for corr, (_, t1, name) in sorted(runtime.items(), key=lambda kv: kv[1][0]):
        if corr in gpu:
            e = gpu[corr]
            stream, start, end = e["tid"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            assert start >= t1 and start >= position[stream]
            # Tight: nothing else delays an activity -- exactly what a replay reproduces.
            assert start == max(t1 + LAUNCH_LATENCY_NS, position[stream])
            assert end > start
            position[stream] = last_end[stream] = end
            seen["gpu"] += 1
        elif corr in recorded_on:
            stream = recorded_on[corr]
            event_time[corr] = position[stream]
            seen["transitive"] += position[stream] > last_end[stream]  # carries an earlier wait
        elif corr in waits:
            a = waits[corr]
            position[a["stream"]] = max(
                position[a["stream"]], event_time[a["wait_on_cuda_event_record_corr_id"]]
            )
            seen["waits"] += 1
        elif name == "cudaStreamSynchronize":
            sync = next(e for e in x if e["cat"] == "cuda_sync" and e["args"]["correlation"] == corr)
            assert t1 >= position[sync["args"]["stream"]]  # the CPU returns only once the stream drained
            seen["syncs"] += 1
    # ac2g flows pair every launch with its activity.
    flows = Counter((e["ph"], e["id"]) for e in d["traceEvents"] if e.get("cat") == "ac2g")
    assert all(flows[("s", i)] == 1 and flows[("f", i)] == 1 for _, i in flows)
    assert len(flows) == 2 * len(gpu)
    return seen


def collective_instances(ranks: list[dict]) -> dict[tuple, list[tuple[int, int, int, str]]]:
    """(pg, Seq) or (pg, src, dst, Seq) -> [(rank, true start, true end, collective name)]."""
    inst: dict[tuple, list] = defaultdict(list)
    for d in ranks:
        rank = d["distributedInfo"]["rank"]
        shift = BASE_TIME_NS - d["baseTimeNanoseconds"] + d["lumos_clock_offset_ns"]
        for e in d["traceEvents"]:
            if e.get("cat") != "kernel" or "Collective name" not in e["args"]:
                continue
            a = e["args"]
            if "Src Rank" in a:  # Seq counts each direction of a pair on its own, as NCCL pairs them
                key = (a["Process Group Name"], a["Src Rank"], a["Dst Rank"], a["Seq"])
            else:
                key = (a["Process Group Name"], a["Seq"])
            t0 = ns(e["ts"]) - shift
            inst[key].append((rank, t0, t0 + ns(e["dur"]), a["Collective name"]))
    return inst


# ------------------------------------------------------------------------------------------ config


def test_presets_are_the_papers_table1():
    shapes = {
        k: (m.layers, m.hidden, m.ffn, m.heads, m.seq, m.head_dim)
        for k, m in PRESETS.items()
        if k.startswith("gpt3")
    }
    assert shapes == {
        "gpt3-15b": (48, 6144, 12288, 48, 2048, 128),
        "gpt3-44b": (48, 12288, 24576, 48, 2048, 128),
        "gpt3-117b": (96, 12288, 24576, 96, 2048, 128),
        "gpt3-175b": (96, 12288, 49152, 96, 2048, 128),
    }
    # 96 layers x (4 h^2 + 2 h f) + 2 x 51200 x 12288 embeddings: 175.2 B parameters
    assert PRESETS["gpt3-175b"].params == pytest.approx(175.2e9, rel=0.005)
    # 44B: 48 heads x 128 = 6144-wide attention in a 12288-wide model (--kv-channels 128)
    assert PRESETS["gpt3-44b"].attn_dim == 6144
    assert PRESETS["gpt3-44b"].params == pytest.approx(44.7e9, rel=0.005)
    assert PRESETS["gpt3-15b"].params == pytest.approx(15.1e9, rel=0.005)
    assert PRESETS["gpt3-117b"].params == pytest.approx(117.2e9, rel=0.005)


def test_llama3_presets_have_the_published_parameter_counts():
    # Meta's model cards: 8.03 B, 70.6 B, 405.9 B (GQA with 8 KV heads, SwiGLU, untied embeddings)
    assert PRESETS["llama3-8b"].params == pytest.approx(8.03e9, rel=0.005)
    assert PRESETS["llama3-70b"].params == pytest.approx(70.6e9, rel=0.005)
    assert PRESETS["llama3-405b"].params == pytest.approx(405.9e9, rel=0.005)
    m = PRESETS["llama3-70b"]
    assert (m.kv_dim, m.qkv_dim, m.ffn_in_dim) == (1024, 8192 + 2048, 2 * 28672)


def test_config_defaults_and_validation():
    cfg = SynthConfig()
    assert (cfg.model.name, cfg.tp, cfg.pp, cfg.dp, cfg.microbatches, cfg.world_size) == (
        "gpt3-15b",
        2,
        2,
        2,
        4,
        8,
    )
    assert SynthConfig.from_json(orjson.loads(orjson.dumps(cfg.to_json()))) == cfg
    with pytest.raises(ConfigError, match="48 layers cannot be split evenly into 5 pipeline stages"):
        SynthConfig(pp=5)
    with pytest.raises(ConfigError, match="heads 48 is not divisible by tensor parallelism 5"):
        SynthConfig(tp=5)
    with pytest.raises(ConfigError, match="unknown GPU"):
        SynthConfig(gpu="TPUv5")
    with pytest.raises(ConfigError, match="unknown pipeline schedule"):
        SynthConfig(schedule="zero-bubble")
    with pytest.raises(ConfigError, match="--model custom needs --layers, --hidden"):
        model_from_args("custom", heads=8, seq=128)
    assert model_from_args("gpt3-15b", layers=64).layers == 64  # Table 2's V1 variant
    assert model_from_args("custom", layers=2, hidden=64, heads=4, seq=32).ffn == 256


def test_layout_follows_megatron_order():
    cfg = SynthConfig(model=TINY, tp=2, pp=2, dp=4)
    lay = Layout(cfg)
    assert cfg.coords(5) == (0, 2, 1) and cfg.rank_of(1, 3, 1) == 15
    assert lay.tp_group(5).ranks == (4, 5)
    assert lay.dp_group(5).ranks == (1, 3, 5, 7)
    assert lay.pp_group(5).ranks == (5, 13)
    assert (lay.peer(5, "prev"), lay.peer(5, "next"), lay.peer(13, "next")) == (-1, 13, -1)
    names = [(g.name, g.desc) for g in lay.groups_of(5)]
    # default "0", DP groups 1-4, TP groups 5-8, PP groups 9-16... named by creation order:
    # DP 1 + stage * tp + t, TP 1 + 4 + stage * dp + d, PP 1 + 4 + 4 + d * tp + t
    assert names == [
        ("0", "default_pg"),
        ("2", "DATA_PARALLEL_GROUP"),
        ("7", "TENSOR_MODEL_PARALLEL_GROUP"),
        ("18", "PIPELINE_MODEL_PARALLEL_GROUP"),
    ]
    assert lay.n_groups == 21


# ------------------------------------------------------------------------------------------ files


def test_files_are_marked_synthetic_and_complete(tiny_job):
    _, result, ranks = tiny_job
    assert [f.name for f in result.files] == [f"rank{r}.pt.trace.json.gz" for r in range(8)]
    assert rank_file_name(7, 512) == "rank007.pt.trace.json.gz"
    for r, d in enumerate(ranks):
        assert d["lumos_synthetic"] is True
        assert "synthetic" in d["traceName"]
        assert d["lumos_synth_config"] == TINY_CFG.to_json()
        info = d["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"], info["pg_count"]) == (r, 8, "nccl", 4)
        assert [g["pg_desc"] for g in info["pg_config"]] == [
            "default_pg",
            "DATA_PARALLEL_GROUP",
            "TENSOR_MODEL_PARALLEL_GROUP",
            "PIPELINE_MODEL_PARALLEL_GROUP",
        ]
        assert all(r in g["ranks"] for g in info["pg_config"])
        props = d["deviceProperties"]
        assert len(props) == 8 and props[0]["name"] == "NVIDIA H100 80GB HBM3" and props[0]["numSms"] == 132
        meta = {(e["name"], e["args"].get("name")) for e in d["traceEvents"] if e["ph"] == "M"}
        assert ("thread_name", "stream 7 ") in meta
        assert any(n == "thread_name" and "pt_autograd_" in (v or "") for n, v in meta)
    offsets = [d["lumos_clock_offset_ns"] for d in ranks]
    assert result.clock_offsets_ns == offsets
    # one node: its ranks share the host clock and its error (within +-500 µs)
    assert len(set(offsets)) == 1 and 0 < abs(offsets[0]) <= 500_000


def test_events_have_kineto_shapes(tiny_job):
    _, _, ranks = tiny_job
    ev = ranks[0]["traceEvents"]
    cats = Counter(e.get("cat") for e in ev if e["ph"] == "X")
    for cat in (
        "cpu_op",
        "user_annotation",
        "cuda_runtime",
        "cuda_driver",
        "kernel",
        "gpu_memcpy",
        "cuda_sync",
        "gpu_user_annotation",
    ):
        assert cats[cat] > 0, cat
    mm = next(e for e in ev if e.get("name") == "aten::mm")
    assert mm["cat"] == "cpu_op" and len(mm["args"]["Input Dims"]) == 2
    (_, k1), (k2, _) = mm["args"]["Input Dims"]
    assert k1 == k2
    names = {e["name"] for e in ev if e["ph"] == "X"}
    assert {
        "cudaLaunchKernel",
        "cuLaunchKernelEx",
        "cudaEventRecord",
        "cudaStreamWaitEvent",
        "cudaStreamSynchronize",
        "record_param_comms",
        "nccl:all_reduce",
        "nccl:send",
        "nccl:recv",
        "ProfilerStep#1",
        "ProfilerStep#2",
    } <= names
    assert any(n.startswith("ncclDevKernel_AllReduce_Sum_bf16_RING_") for n in names)
    assert any(n.startswith("ncclDevKernel_SendRecv(") for n in names)
    assert any(n.startswith("ncclDevKernel_ReduceScatter_Sum_bf16_") for n in names)
    assert any(n.startswith("ncclDevKernel_AllGather_") for n in names)
    send = next(e for e in ev if e.get("cat") == "kernel" and e["args"].get("Collective name") == "send")
    assert (send["args"]["Src Rank"], send["args"]["Dst Rank"]) == (0, 4)  # stage 0 -> stage 1
    assert send["args"]["In msg nelems"] == 128 * 256 and send["args"]["dtype"] == "BFloat16"
    rs = next(
        e
        for e in ev
        if e.get("cat") == "kernel" and e["args"].get("Collective name") == "_reduce_scatter_base"
    )
    assert rs["args"]["In msg nelems"] == 2 * rs["args"]["Out msg nelems"]  # DP 2
    assert rs["args"]["Process Group Description"] == "DATA_PARALLEL_GROUP"


# ------------------------------------------------------------------------------------------ causality


def test_every_rank_is_causally_tight(tiny_job):
    _, _, ranks = tiny_job
    total: Counter = Counter()
    for d in ranks:
        total += check_rank_causality(d)
    assert total["gpu"] == sum(
        1 for d in ranks for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")
    )
    assert total["waits"] > 0 and total["syncs"] == 8 * 2  # one optimizer sync per rank and step


def test_gpu_bound_pipeline_events_carry_earlier_waits(tmp_path):
    """When the GPU is the bottleneck, an event recorded on the compute stream right after it waited
    for a send (``req.wait()``) completes only when the send does, so the next NCCL kernel on
    another stream starts after the send -- the checker must (and does) follow such chains."""
    # Middle stages issue send_forward then recv_forward back to back during the warm-up.
    cfg = SynthConfig(
        model=ModelSpec("wide", 4, 4096, 16384, 32, 2048, vocab=8192),
        tp=1,
        pp=4,
        dp=1,
        microbatches=4,
        iterations=1,
    )
    result = synthesize(cfg, tmp_path / "pp")
    seen = Counter()
    for f in result.files:
        seen += check_rank_causality(read(f))
    assert seen["transitive"] > 0 and seen["gpu"] == result.n_gpu


def test_collectives_end_together_on_all_ranks(tiny_job):
    _, result, ranks = tiny_job
    inst = collective_instances(ranks)
    assert len(inst) == result.n_instances
    sizes = Counter()
    for key, members in inst.items():
        ends = {e for _, _, e, _ in members}
        assert len(ends) == 1, f"instance {key} ends at different true times: {members}"
        names = sorted(n for *_, n in members)
        if len(key) == 4:
            assert names == ["recv", "send"]
        else:
            assert len(members) == 2  # TP 2 and DP 2 groups
        # the last rank to arrive shows the collective's own duration; earlier ranks waited for it
        last_start = max(s for _, s, _, _ in members)
        assert all(s <= last_start for _, s, _, _ in members)
        sizes[names[0]] += 1
    # per iteration: stage 0 has 9 TP all-reduces per microbatch (embedding + 2 per layer forward,
    # 2 per layer backward), stage 1 has 12 (2+2 per layer, 3 in the loss, 1 in the output layer);
    # 4 microbatches, 2 TP groups per stage, 2 iterations.
    assert sizes["allreduce"] == (9 + 12) * 4 * 2 * 2
    # one gradient bucket per DP group: one reduce-scatter and one all-gather per step
    assert sizes["_reduce_scatter_base"] == sizes["_allgather_base"] == 4 * 2
    # activations and gradients of 4 microbatches over 4 stage-0/stage-1 pairs
    assert sizes["recv"] == 4 * 2 * 4 * 2


def test_pipeline_schedule_and_layers_are_recoverable(tiny_job):
    _, _, ranks = tiny_job

    def order(d, tid_index):
        steps = sorted(
            (e["ts"], e["name"])
            for e in d["traceEvents"]
            if e.get("cat") == "user_annotation" and re.match(r"(forward|backward)_step#", e["name"])
        )
        return " ".join(("F" if n.startswith("f") else "B") + str(int(n.split("#")[1]) + 1) for _, n in steps)

    # 1F1B as in the paper: stage 0 of 2 with 4 microbatches, then the last stage; both iterations
    assert order(ranks[0], 0) == "F1 F2 B1 F3 B2 F4 B3 B4 " * 1 + "F1 F2 B1 F3 B2 F4 B3 B4"
    assert order(ranks[4], 0) == "F1 B1 F2 B2 F3 B3 F4 B4 F1 B1 F2 B2 F3 B3 F4 B4"
    for d, layers in ((ranks[0], {0, 1}), (ranks[5], {2, 3})):
        fwd = Counter(
            e["name"]
            for e in d["traceEvents"]
            if e.get("cat") == "user_annotation" and re.fullmatch(r"decoder\.layers\.\d+", e["name"])
        )
        bwd = Counter(
            e["name"]
            for e in d["traceEvents"]
            if e.get("cat") == "user_annotation"
            and re.fullmatch(r"decoder\.layers\.\d+\.backward", e["name"])
        )
        assert fwd == {f"decoder.layers.{i}": 8 for i in layers}  # 4 microbatches x 2 iterations
        assert bwd == {f"decoder.layers.{i}.backward": 8 for i in layers}


def test_tp_collectives_per_layer_and_backward_on_autograd_thread(tiny_job):
    _, _, ranks = tiny_job
    d = ranks[1]
    x = [e for e in d["traceEvents"] if e["ph"] == "X"]
    main, autograd = 20_001, 20_001 + 181
    layer_ranges = [
        (e["ts"], e["ts"] + e["dur"], e["tid"])
        for e in x
        if e.get("cat") == "user_annotation" and re.fullmatch(r"decoder\.layers\.\d+(\.backward)?", e["name"])
    ]
    comms = [
        (e["ts"], e["tid"])
        for e in x
        if e["name"] == "record_param_comms"
        and e["args"]["Process Group Description"] == "TENSOR_MODEL_PARALLEL_GROUP"
    ]
    for a, b, tid in layer_ranges:
        inside = [t for t, ctid in comms if ctid == tid and a <= t <= b]
        assert len(inside) == 2  # forward: after attention and MLP; backward: QKV and FC1 input grads
    assert {tid for *_, tid in layer_ranges} == {main, autograd}


def test_dp_reduce_scatter_overlaps_backward(tmp_path):
    """Gradient buckets are reduce-scattered while the backward of earlier layers still computes."""
    cfg = SynthConfig(
        model=ModelSpec("wide", 4, 4096, 16384, 32, 2048, vocab=8192),
        tp=1,
        pp=1,
        dp=4,
        microbatches=1,
        iterations=1,
    )
    d = read(synthesize(cfg, tmp_path / "dp").files[0])
    k = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    rs = [
        (ns(e["ts"]), ns(e["ts"] + e["dur"]))
        for e in k
        if e["args"].get("Collective name") == "_reduce_scatter_base"
    ]
    compute = [(ns(e["ts"]), ns(e["ts"] + e["dur"])) for e in k if e["tid"] == 7]
    # Buckets of >= 40M parameters in backward order: output layer (8192 x 4096 = 33.5M) + layer 3
    # (4*4096^2 + 2*4096*16384 = 201M), layer 2, layer 1, layer 0, embedding (42M): 5 reduce-scatters.
    assert len(rs) == 5
    # The buckets of layers 3, 2, 1 (~0.9 ms each) hide behind the next layer's backward (~2.7 ms);
    # layer 0's and the embedding's come after the last GEMMs and stay exposed.
    for a, b in rs[:3]:
        covered = sum(max(0, min(b, d1) - max(a, c)) for c, d1 in compute)
        assert covered > 0.9 * (b - a)


def test_gemm_durations_follow_the_roofline(tmp_path):
    cfg = SynthConfig(
        model=ModelSpec("wide", 2, 4096, 16384, 32, 2048, vocab=4096),
        tp=1,
        pp=1,
        dp=1,
        microbatches=1,
        iterations=1,
    )
    d = read(synthesize(cfg, tmp_path / "g").files[0])
    x = [e for e in d["traceEvents"] if e["ph"] == "X"]
    by_ext = {e["args"]["External id"]: e for e in x if e["cat"] == "kernel"}
    gpu = get_gpu("H100")
    checked = 0
    for e in x:
        if e["name"] == "aten::mm":
            (m, k), (_, n) = e["args"]["Input Dims"]
            kernel = by_ext[e["args"]["External id"]]
            expected = costs.gemm_time(m, n, k, gpu) * 1e6
            # +-3% kernel jitter and +-1% per-GPU speed
            assert kernel["dur"] == pytest.approx(expected, rel=0.045)
            checked += 1
    assert checked == 2 * (4 + 8) + 1 + 2  # per layer 4 forward + 8 backward GEMMs; output layer fwd + bwd


def test_other_gpus_change_kernels_and_precision(tmp_path):
    cfg = SynthConfig(model=TINY, tp=2, pp=1, dp=1, microbatches=1, iterations=1, gpu="V100")
    d = read(synthesize(cfg, tmp_path / "v100").files[0])
    assert d["deviceProperties"][0]["name"] == "Tesla V100-SXM2-16GB"
    kernels = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    assert any(e["name"].startswith("volta_h884gemm") for e in kernels)
    assert not any(
        "BFloat16" in e["name"] or "bfloat16" in e["name"] for e in kernels
    )  # Volta trains in FP16
    nccl = [e for e in kernels if "Collective name" in e["args"]]
    assert nccl and all(e["args"]["dtype"] in ("Half", "Float") for e in nccl)
    assert any(e["name"].startswith("ncclDevKernel_AllReduce_Sum_f16_RING_") for e in nccl)
    a100 = read(
        synthesize(
            SynthConfig(model=TINY, tp=1, pp=1, dp=1, microbatches=1, iterations=1, gpu="A100"),
            tmp_path / "a100",
        ).files[0]
    )
    assert a100["deviceProperties"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert any(e.get("name", "").startswith("ampere_bf16_s16816gemm") for e in a100["traceEvents"])


def test_same_seed_same_bytes_other_seed_other_times(tmp_path):
    cfg = SynthConfig(model=TINY, tp=1, pp=2, dp=1, microbatches=2, iterations=1, seed=11)
    a = synthesize(cfg, tmp_path / "a")
    b = synthesize(cfg, tmp_path / "b")
    c = synthesize(
        SynthConfig(model=TINY, tp=1, pp=2, dp=1, microbatches=2, iterations=1, seed=12), tmp_path / "c"
    )
    d = synthesize(cfg, tmp_path / "d", workers=2)  # ranks written by two processes: same bytes
    for fa, fb, fc, fd in zip(a.files, b.files, c.files, d.files, strict=True):
        assert fa.read_bytes() == fb.read_bytes() == fd.read_bytes()
        assert fa.read_bytes() != fc.read_bytes()
    assert d.n_events == a.n_events and d.iteration_ms == a.iteration_ms


def test_output_folder_must_be_empty_unless_forced(tmp_path):
    cfg = SynthConfig(model=TINY, tp=1, pp=1, dp=1, microbatches=1, iterations=1)
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not empty"):
        synthesize(cfg, out)
    result = synthesize(cfg, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [result.files[0].name]


# ------------------------------------------------------------------------------------------ loader


def test_loader_loads_all_ranks_and_matches_every_collective(tiny_job):
    out, result, _ = tiny_job
    job = load_job(out, use_cache=False)
    assert job.is_synthetic and len(job.ranks) == 8 and job.world_size == 8 and not job.skipped
    summary = job.collective_match.summary()
    assert summary["instances"] == result.n_instances and summary["partial"] == 0
    for t in job.ranks:
        roles = Counter(ln.role for ln in t.lanes)
        assert roles[LaneRole.CPU_MAIN] == 1 and roles[LaneRole.CPU_AUTOGRAD] == 1
        assert roles[LaneRole.COMPUTE] == 1 and roles[LaneRole.COMMUNICATION] == 3
        assert [it.step for it in t.iterations] == [1, 2]
        kinds = Counter(CollectiveKind(k) for k in t.collectives.kind)
        assert kinds[CollectiveKind.REDUCE_SCATTER] == kinds[CollectiveKind.ALL_GATHER] == 2
        assert kinds[CollectiveKind.SEND] == kinds[CollectiveKind.RECV] == 8


def test_two_nodes_have_different_clocks_and_collectives_reveal_them(tmp_path):
    cfg = SynthConfig(model=TINY, tp=2, pp=1, dp=8, microbatches=2, iterations=2, seed=5)
    result = synthesize(cfg, tmp_path / "two-nodes")
    offsets = result.clock_offsets_ns
    assert offsets[:8] == [offsets[0]] * 8 and offsets[8:] == [offsets[8]] * 8
    assert abs(offsets[0] - offsets[8]) > 100_000  # this seed puts the hosts > 100 µs apart
    ranks = [read(f) for f in result.files]
    # Raw (recorded) end times of a DP collective differ by exactly the offset difference.
    inst = collective_instances(ranks)
    ag = next(m for k, m in inst.items() if any(n == "_allgather_base" for *_, n in m))
    assert len({e for _, _, e, _ in ag}) == 1  # true ends agree ...
    raw = {r: e + offsets[r] for r, _, e, _ in ag}
    assert raw[8] - raw[0] == offsets[8] - offsets[0]  # ... recorded ends differ by the clock error


def test_loader_recovers_the_true_clock_offsets(tmp_path):
    cfg = SynthConfig(model=TINY, tp=2, pp=1, dp=8, microbatches=2, iterations=2, seed=5)
    result = synthesize(cfg, tmp_path / "two-nodes")
    job = load_job(tmp_path / "two-nodes", use_cache=False)
    corrected = [result.clock_offsets_ns[t.rank] + t.clock_offset_ns for t in job.ranks]
    assert max(corrected) - min(corrected) <= 2_000  # within 2 µs of one common clock


@pytest.mark.parametrize("shape", ["tiny-cpu-bound", "gpu-bound-pp4", "two-nodes"])
def test_replay_reproduces_synthetic_jobs_within_one_percent(shape, tiny_job, tmp_path):
    from lumos_core.replay.run import replay

    if shape == "tiny-cpu-bound":
        out = tiny_job[0]
    else:
        cfg = {
            "gpu-bound-pp4": SynthConfig(
                model=ModelSpec("wide", 4, 4096, 16384, 32, 2048, vocab=8192),
                tp=1,
                pp=4,
                dp=1,
                microbatches=4,
                iterations=2,
            ),
            "two-nodes": SynthConfig(model=TINY, tp=2, pp=1, dp=8, microbatches=2, iterations=2, seed=5),
        }[shape]
        out = tmp_path / shape
        synthesize(cfg, out)
    result = replay(load_job(out, use_cache=False))
    errors = [it.error_pct for r in result.ranks for it in r.iterations]
    assert len(errors) == 2 * len(result.ranks)
    assert max(abs(e) for e in errors) <= 1.0


def test_cli_synth_writes_and_reports(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = cli_main(
        [
            "synth",
            str(out),
            "--model",
            "custom",
            "--layers",
            "2",
            "--hidden",
            "128",
            "--heads",
            "2",
            "--seq",
            "64",
            "--vocab",
            "512",
            "--tp",
            "1",
            "--pp",
            "2",
            "--dp",
            "2",
            "--iterations",
            "1",
            "--quiet",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0
    assert "wrote 4 SYNTHETIC rank traces" in text and "not evidence of Lumos's accuracy" in text
    assert sorted(p.name for p in out.iterdir()) == [f"rank{r}.pt.trace.json.gz" for r in range(4)]
    rc = cli_main(["synth", str(out), "--pp", "5", "--quiet"])
    assert rc == 2
    assert "48 layers cannot be split evenly" in capsys.readouterr().err
    # replay and estimate of a synthetic job say that their figures are no evidence of accuracy
    assert cli_main(["replay", str(out), "-q", "--no-holdout"]) == 0
    assert "SYNTHETIC job" in capsys.readouterr().out
    assert cli_main(["estimate", str(out), "-q", "--dp", "4"]) == 0
    assert "never its accuracy" in capsys.readouterr().out
    assert cli_main(["estimate", str(out), "-q", "--dp", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["synthetic"] is True


# ------------------------------------------------------------------------------------------ demo


def test_demo_is_generated_once_into_the_cache_and_repaired(tmp_path):
    from lumos_core.synth.demo import DEMO_CONFIG, demo_job_path

    assert (DEMO_CONFIG.tp, DEMO_CONFIG.pp, DEMO_CONFIG.dp, DEMO_CONFIG.world_size) == (2, 2, 2, 8)
    root = tmp_path / "cache"
    path = demo_job_path(root=root)
    assert path.parent == root and path.name.startswith("demo-")
    files = sorted(p.name for p in path.iterdir())
    assert files == [".lumos-synth-complete"] + [f"rank{r}.pt.trace.json.gz" for r in range(8)]
    size = sum(p.stat().st_size for p in path.iterdir())
    assert size < 5_000_000
    assert [p.name for p in root.iterdir()] == [path.name]  # no temporary folder left behind
    stamp = (path / "rank0.pt.trace.json.gz").stat().st_mtime_ns
    assert demo_job_path(root=root) == path
    assert (path / "rank0.pt.trace.json.gz").stat().st_mtime_ns == stamp  # cached, not regenerated
    (path / "rank5.pt.trace.json.gz").unlink()  # a damaged cache is regenerated
    assert demo_job_path(root=root) == path
    assert (path / "rank5.pt.trace.json.gz").is_file()
    job = load_job(path, use_cache=False)
    assert job.is_synthetic and len(job.ranks) == 8 and job.collective_match.summary()["partial"] == 0


def test_demo_uses_the_lumos_cache_dir(monkeypatch, tmp_path):
    from lumos_core.synth import demo

    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "c"))
    small = SynthConfig(model=TINY, tp=1, pp=1, dp=2, microbatches=1, iterations=1)
    path = demo.demo_job_path(cfg=small)
    assert path.parent == tmp_path / "c"


def test_pipeline_stages_on_two_hosts_are_aligned_through_send_recv(tmp_path):
    """TP 4 x DP 2 x PP 2 puts each stage on its own 8-GPU host with its own clock offset; no
    collective spans both stages, so only the send/recv pairs can align them. Without that the
    replay was 2.4 % off (every stage-to-stage transfer looked ~600 µs late)."""
    from lumos_core.replay.run import replay

    model = ModelSpec("t", layers=4, hidden=1024, ffn=4096, heads=8, seq=1024, vocab=32000)
    result = synthesize(
        SynthConfig(model=model, tp=4, pp=2, dp=2, microbatches=4, iterations=2, seed=5), tmp_path / "j"
    )
    offsets = result.clock_offsets_ns
    assert offsets[0] != offsets[8]  # the generator gave the two hosts different clocks
    job = load_job(tmp_path / "j", use_cache=False)
    assert job.alignment["applied"]
    assert any("send/receive pairs" in n for n in job.alignment["notes"])
    # the correction between the hosts undoes the offset the generator applied (up to NCCL skew)
    got = job.rank(8).clock_offset_ns - job.rank(0).clock_offset_ns
    assert abs(got + (offsets[8] - offsets[0])) < 20_000, (got, offsets[0], offsets[8])
    assert replay(job, critical_paths=False).mean_abs_error_pct < 1.0


def test_a_chain_of_pipeline_stages_over_hosts_is_aligned_onto_one_clock(tmp_path):
    """TP 2 x DP 2 x PP 4: stages 0-1 on one host, 2-3 on another. Stage 2 is placed from stage 1
    (another host: shifted), stage 3 from stage 2 (same host): stage 3 must move with stage 2."""
    cfg = SynthConfig(model=TINY, tp=2, pp=4, dp=2, microbatches=4, iterations=2, seed=5)
    result = synthesize(cfg, tmp_path / "pp4")
    assert result.clock_offsets_ns[0] != result.clock_offsets_ns[8]  # two host clocks
    job = load_job(tmp_path / "pp4", use_cache=False)
    corrected = [result.clock_offsets_ns[t.rank] + t.clock_offset_ns for t in job.ranks]
    assert max(corrected) - min(corrected) <= 2_000  # within 2 µs of one common clock


@pytest.mark.parametrize("compiled", [True, False])
def test_graph_explains_every_gpu_delay_of_a_pipeline_job(tmp_path, monkeypatch, compiled):
    """Every delay in a synthetic job has a cause the generator wrote, so the execution graph must
    explain every GPU task's start -- including an event recorded on the compute stream right after
    it waited for a p2p kernel (the recorded event completes only when that kernel does)."""
    from lumos_core import jit
    from lumos_core.graph.build import build_graph

    if compiled and not jit.ENABLED:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(jit, "ENABLED", compiled)
    cfg = SynthConfig(
        model=ModelSpec("wide", 4, 4096, 16384, 32, 2048, vocab=8192),
        tp=2,
        pp=4,
        dp=1,
        microbatches=4,
        iterations=2,
    )
    synthesize(cfg, tmp_path / "pp")
    graph = build_graph(load_job(tmp_path / "pp"))
    assert graph.unexplained_ns == 0


def test_help_example_of_predict_only_is_one_runnable_command() -> None:
    """The --predict-only example in `lumos synth --help` (continued with a backslash) parses as
    it stands, and the prose after it is not glued onto it."""
    import argparse
    import shlex

    from lumos_core.commands import synth as synth_cmd

    lines = synth_cmd.DESCRIPTION.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("lumos synth --predict-only"))
    command = lines[i]
    while command.endswith("\\"):
        i += 1
        command = command[:-1] + " " + lines[i]
    p = argparse.ArgumentParser(exit_on_error=False)
    synth_cmd.add_arguments(p)
    args = p.parse_args(shlex.split(command)[2:])
    assert args.predict_only and args.recompute == "selective" and args.out is None
    assert not lines[i + 1].strip(), "the example must end its paragraph"
