"""``lumos synth OUT``: write a synthetic Megatron-style job (one Kineto trace per rank)."""

from __future__ import annotations

import argparse
import sys

import orjson

from lumos_core.commands.common import terminal_progress
from lumos_core.perf.hardware import known_gpu_names
from lumos_core.synth import PRESETS, SynthConfig, model_from_args, synthesize
from lumos_core.whatif.schedules import SCHEDULES

DESCRIPTION = """Generate SYNTHETIC PyTorch-profiler traces of a Megatron-LM GPT training job:
one Kineto trace per rank (gzip JSON) with CPU threads, kernel launches, compute and NCCL
streams, tensor-parallel collectives per layer, pipeline send/recv in the chosen schedule,
data-parallel reduce-scatter/all-gather overlapping the backward pass, CUDA events and syncs.

Durations come from the same analytical hardware models the estimator uses (roofline kernels,
NCCL-model collectives), simulated causally across ranks. The output is therefore NOT evidence
of Lumos's accuracy -- accuracy is measured only on real traces. Every file is marked
"lumos_synthetic": true and says "synthetic" in its traceName.

Presets are the GPT-3 sizes of the Lumos paper (Table 1). Ranks are laid out in Megatron order
(tensor-parallel fastest, then data-parallel, then pipeline), 8 GPUs per node. Large jobs are
written rank by rank in bounded memory."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="output folder (created; must be empty unless --force)")
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
    )
    return SynthConfig(
        model=model,
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        microbatches=args.microbatches,
        micro_batch=args.micro_batch,
        schedule=args.schedule,
        gpu=args.gpu,
        iterations=args.iterations,
        seed=args.seed,
        bucket_params=args.bucket_params,
        slow_ranks=tuple(args.slow_rank),
    )


def run(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    result = synthesize(
        cfg,
        args.out,
        progress=terminal_progress(not args.quiet and not args.json),
        overwrite=args.force,
        compresslevel=args.compress_level,
        workers=args.workers,
    )
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
        "seconds": round(result.seconds, 3),
        "iteration_ms": [round(x, 3) for x in result.iteration_ms],
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
        f"  TP{cfg.tp} x PP{cfg.pp} x DP{cfg.dp} = {cfg.world_size} {cfg.gpu} GPUs on {nodes} node(s); "
        f"{cfg.schedule}, {cfg.microbatches} microbatches of {cfg.micro_batch}, {cfg.iterations} iterations, "
        f"seed {cfg.seed}" + "".join(f"; rank {r} slowed x{f:g}" for r, f in cfg.slow_ranks)
    )
    print(
        f"  {result.n_events:,} events ({result.n_tasks:,} tasks, {result.n_gpu:,} GPU activities), "
        f"{result.n_instances:,} collective instances"
    )
    print(f"  {result.bytes_on_disk / 1e6:,.1f} MB on disk in {result.seconds:.1f} s")
    print(
        "  iteration time (longest rank, ProfilerStep on GPU): "
        + ", ".join(f"{x:.2f} ms" for x in result.iteration_ms)
    )
    return 0
