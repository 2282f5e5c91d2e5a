"""``lumos synth OUT``: write a synthetic Megatron-style job (one Kineto trace per rank)."""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from lumos_core.commands.common import terminal_progress
from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import known_gpu_names
from lumos_core.perf.schedules import SCHEDULES
from lumos_core.synth import PRESETS, SynthConfig, model_from_args, synthesize
from lumos_core.synth.models import ATTENTION, RECOMPUTE
from lumos_core.synth.predict import predict

DESCRIPTION = """Generate SYNTHETIC PyTorch-profiler traces of a Megatron-LM GPT training job:
one Kineto trace per rank (gzip JSON) with CPU threads, kernel launches, compute and NCCL
streams, tensor-parallel collectives per layer, pipeline send/recv in the chosen schedule,
data-parallel reduce-scatter/all-gather overlapping the backward pass, CUDA events and syncs.

Durations come from the same analytical hardware models the estimator uses (roofline kernels,
NCCL-model collectives), simulated causally across ranks. The output is therefore NOT evidence
of Lumos's accuracy -- accuracy is measured only on real traces. Every file is marked
"lumos_synthetic": true and says "synthetic" in its traceName.

Presets are the GPT-3 sizes of the Lumos paper (Table 1) and Llama 3 8B/70B/405B.
--predict-only writes nothing and prints the trace-free prediction of the same cost models
(iteration time, tokens/s per GPU, MFU, memory per stage), e.g.
  lumos synth --predict-only --model llama3-70b --gpu H100 --tp 8 --pp 4 --vp 5 --dp 32 \\
      --sp --global-batch 1024 --recompute selective

Ranks are laid out in Megatron order (tensor-parallel fastest, then context-parallel, data-parallel,
pipeline),
8 GPUs per node. Large jobs are written rank by rank in bounded memory."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out",
        nargs="?",
        help="output folder (created; must be empty unless --force); not needed with --predict-only",
    )
    m = p.add_argument_group("model")
    m.add_argument(
        "--model",
        default="gpt3-15b",
        choices=[*PRESETS, "custom"],
        help="preset (Lumos paper, Table 1) or custom (default: gpt3-15b)",
    )
    m.add_argument("--layers", type=int, help="transformer layers (overrides the preset)")
    m.add_argument("--hidden", type=int, help="hidden size d_model")
    m.add_argument("--ffn", type=int, help="feed-forward size (custom default: 4 x hidden)")
    m.add_argument("--heads", type=int, help="attention heads")
    m.add_argument("--seq", type=int, help="sequence length")
    m.add_argument("--vocab", type=int, help="vocabulary size (default 51200)")
    m.add_argument("--kv-channels", type=int, help="attention head dimension (default hidden / heads)")
    m.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention; default: heads)")
    m.add_argument(
        "--attention",
        default="flash",
        choices=ATTENTION,
        help="flash (fused) or unfused (Megatron's QK^T, softmax, PV kernels of 2021-22) (default flash)",
    )
    par = p.add_argument_group("parallelism and batch")
    par.add_argument("--tp", type=int, default=2, help="tensor-parallel size (default 2)")
    par.add_argument("--pp", type=int, default=2, help="pipeline-parallel stages (default 2)")
    par.add_argument("--dp", type=int, default=2, help="data-parallel size (default 2)")
    par.add_argument(
        "--microbatches",
        type=int,
        default=0,
        help="microbatches per iteration (default: 2 x pipeline stages)",
    )
    par.add_argument("--micro-batch", type=int, default=1, help="sequences per microbatch (default 1)")
    par.add_argument("--schedule", default="1f1b", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")
    par.add_argument(
        "--vp", type=int, default=1, help="virtual stages (model chunks) per rank: interleaved 1F1B"
    )
    par.add_argument(
        "--sp", action="store_true", help="sequence parallelism (TP reduce-scatter + all-gather)"
    )
    par.add_argument(
        "--cp",
        type=int,
        default=1,
        help="context-parallel size: the sequence split over CP GPUs, K/V passed around the CP "
        "ring (Megatron-Core's default p2p ring attention); gradients reduced over DP x CP",
    )
    par.add_argument(
        "--recompute",
        default="none",
        choices=RECOMPUTE,
        help="activation recomputation: none, selective (attention core) or full (default none)",
    )
    par.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="sequences per iteration (sets --microbatches to GB / (micro-batch x dp))",
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--gpu", default="H100", help=f"GPU profile: {', '.join(known_gpu_names())} (default H100)"
    )
    run.add_argument("--iterations", type=int, default=2, help="profiled steps per rank (default 2)")
    run.add_argument("--seed", type=int, default=0, help="seed of the jitter (same seed, same bytes)")
    run.add_argument(
        "--slow-rank",
        action="append",
        default=[],
        type=_slow_rank,
        metavar="R:FACTOR",
        help="rank R's kernels run FACTOR x longer (e.g. 3:1.05), a known straggler to test detection "
        "with; repeat for several",
    )
    run.add_argument(
        "--bucket-params",
        type=int,
        default=40_000_000,
        help="gradient bucket size in parameters (Megatron default 40M)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--force", action="store_true", help="replace the traces of a non-empty OUT folder")
    out.add_argument(
        "--compress-level",
        type=int,
        default=1,
        choices=range(1, 10),
        metavar="1-9",
        help="gzip level (default 1: fast; 6 is ~15%% smaller and 3x slower)",
    )
    out.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes writing ranks in parallel (default: 1 below 32 ranks, else up to 8)",
    )
    out.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    out.add_argument(
        "--predict-only",
        action="store_true",
        help="write no traces: print the predicted iteration time, tokens/s per GPU, MFU and memory "
        "per stage (seconds, even for thousands of GPUs)",
    )
    out.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")


def _slow_rank(text: str) -> tuple[int, float]:
    try:
        r, f = text.split(":")
        return int(r), float(f)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected R:FACTOR (e.g. 3:1.05), got {text!r}") from None


def _config_from_args(args: argparse.Namespace) -> SynthConfig:
    model = model_from_args(
        args.model,
        layers=args.layers,
        hidden=args.hidden,
        ffn=args.ffn,
        heads=args.heads,
        seq=args.seq,
        vocab=args.vocab,
        kv_channels=args.kv_channels,
        kv_heads=args.kv_heads,
    )
    microbatches = args.microbatches
    if args.global_batch:
        per = args.micro_batch * args.dp
        if args.global_batch % per:
            raise ConfigError(
                f"--global-batch {args.global_batch} is not a multiple of micro-batch x dp = {per}"
            )
        microbatches = args.global_batch // per
    return SynthConfig(
        model=model,
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        microbatches=microbatches,
        micro_batch=args.micro_batch,
        schedule=args.schedule,
        gpu=args.gpu,
        iterations=args.iterations,
        seed=args.seed,
        bucket_params=args.bucket_params,
        recompute=args.recompute,
        sp=args.sp,
        vp=args.vp,
        cp=args.cp,
        attention=args.attention,
        slow_ranks=tuple(args.slow_rank),
    )


def _run_predict(cfg: SynthConfig, as_json: bool) -> int:
    pred = predict(cfg)
    d = pred.as_dict()
    if as_json:
        sys.stdout.write(orjson.dumps(d, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    m = cfg.model
    print("trace-free prediction (lumos cost models and fitted priors; no traces written)")
    print(
        f"  {m.name} ({m.params / 1e9:.1f} B parameters) on {cfg.world_size} {cfg.gpu}: TP{cfg.tp} PP{cfg.pp}"
        f"{f' x VP{cfg.vp}' if cfg.vp > 1 else ''} DP{cfg.dp}{f' CP{cfg.cp}' if cfg.cp > 1 else ''}"
        f"{' SP' if cfg.sp else ''}, global batch {cfg.global_batch} ({cfg.microbatches} microbatches of "
        f"{cfg.micro_batch}), recompute {cfg.recompute}"
    )
    print(f"  iteration time     {pred.iteration_s:.3f} s")
    print(f"  tokens/s per GPU   {pred.tokens_per_s_per_gpu:,.0f}")
    print(
        f"  MFU                {100 * pred.mfu:.1f} %  (HFU {100 * pred.hfu:.1f} %, "
        f"{pred.model_tflops_per_gpu:.0f} model TFLOP/s per GPU)"
    )
    for mem in pred.memory:
        md = mem.as_dict()
        print(
            f"  memory stage {mem.stage:<3}   {md['total_gib']:.1f} GiB (weights {md['weights_gib']:.1f}, grads "
            f"{md['gradients_gib']:.1f}, optimizer {md['optimizer_gib']:.1f}, activations {md['activations_gib']:.1f})"
        )
    if d["memory_warning"]:
        print(f"  warning: does not fit in memory: {d['memory_warning']}")
    return 0


def run(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    if args.predict_only:
        return _run_predict(cfg, args.json)
    if not args.out:
        raise ConfigError("lumos synth needs an output folder OUT (or --predict-only)")
    t0 = time.perf_counter()  # the time the summary reports, measured around the generator
    result = synthesize(
        cfg,
        args.out,
        progress=terminal_progress(not args.quiet and not args.json),
        overwrite=args.force,
        compresslevel=args.compress_level,
        workers=args.workers,
    )
    seconds = time.perf_counter() - t0
    m = cfg.model
    summary = {
        "synthetic": True,
        "path": str(result.path),
        "ranks": result.world_size,
        "config": cfg.to_json(),
        "parameters": m.params,
        "events": result.n_events,
        "tasks": result.n_tasks,
        "gpu_activities": result.n_gpu,
        "collective_instances": result.n_instances,
        "bytes_on_disk": result.bytes_on_disk,
        "seconds": round(seconds, 3),
        "iteration_ms": [round(x, 3) for x in result.iteration_ms],
        "prediction": predict(cfg).as_dict(),
    }
    if args.json:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    nodes = -(-cfg.world_size // 8)
    print(
        f"wrote {result.world_size} SYNTHETIC rank traces to {result.path} (not evidence of Lumos's accuracy)"
    )
    print(
        f"  model {m.name}: {m.layers} layers, hidden {m.hidden}, ffn {m.ffn}, {m.heads} heads, seq {m.seq} "
        f"({m.params / 1e9:.1f} B parameters)"
    )
    print(
        f"  TP{cfg.tp} x PP{cfg.pp} x DP{cfg.dp}{f' x CP{cfg.cp}' if cfg.cp > 1 else ''} = {cfg.world_size} {cfg.gpu} GPUs on {nodes} node(s); "
        f"{cfg.schedule if cfg.vp == 1 else f'interleaved 1f1b with {cfg.vp} chunks per stage'}, "
        f"{cfg.microbatches} microbatches of {cfg.micro_batch}, {cfg.iterations} iterations, "
        f"seed {cfg.seed}" + "".join(f"; rank {r} slowed x{f:g}" for r, f in cfg.slow_ranks)
    )
    print(
        f"  {result.n_events:,} events ({result.n_tasks:,} tasks, {result.n_gpu:,} GPU activities), "
        f"{result.n_instances:,} collective instances"
    )
    print(f"  {result.bytes_on_disk / 1e6:,.1f} MB on disk in {seconds:.1f} s")
    print(
        "  iteration time (longest rank, ProfilerStep on GPU): "
        + ", ".join(f"{x:.2f} ms" for x in result.iteration_ms)
    )
    return 0
