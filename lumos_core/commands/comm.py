"""``lumos comm KIND --bytes N --ranks R``: how long one collective takes on a given cluster."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace

import orjson

from lumos_core.errors import ConfigError
from lumos_core.perf.collective_kinds import as_collective_kind
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.nccl.params import ALGORITHMS, PROTOCOLS
from lumos_core.trace.model import CollectiveKind

DESCRIPTION = """Predict the time of one NCCL collective, with the algorithm (ring, tree, NVLS,
NVLS-tree, PAT, p2p) and protocol (LL, LL128, Simple) NCCL's tuner would pick for it, and its
algorithm and bus bandwidth (NCCL-tests conventions: --bytes is the all-reduce buffer, the
all-gather output, the reduce-scatter input, the per-rank all-to-all buffer).

Ranks are packed --gpus-per-node to a node unless --nodes says otherwise (a data-parallel group of
a job with tensor parallelism 8 has one GPU per node: --nodes equal to --ranks).

examples:
  lumos comm allreduce --bytes 1GiB --ranks 8
  lumos comm allreduce --bytes 256MiB --ranks 512 --gpu H100 --json
  lumos comm allgather --bytes 64MiB --ranks 64 --nodes 64 --network-gbps 25
  lumos comm allreduce --bytes 1GiB --ranks 128 --gpu A100 --network-gbps 25 --algo ring"""

_KINDS = "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv, barrier"
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "tb": 1e12,
}


def parse_bytes(text: str) -> float:
    """``1048576``, ``1MiB``, ``64MB``, ``1.5GiB`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1048576, 1MiB, 64MB, 2GiB)")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", help=f"collective: {_KINDS}")
    p.add_argument("--bytes", type=parse_bytes, required=True, help="message size (e.g. 1048576, 1MiB, 2GiB)")
    p.add_argument("--ranks", type=int, required=True, help="GPUs in the group")
    p.add_argument("--nodes", type=int, default=None, help="nodes the group spans (default: packed)")
    p.add_argument(
        "--gpus-per-node", type=int, default=None, help="GPUs (and NICs) per node (default: the GPU's)"
    )
    p.add_argument("--gpu", default="H100", help="GPU profile (default H100)")
    p.add_argument("--nvlink-gbps", type=float, default=None, help="NVLink GB/s per GPU per direction")
    p.add_argument("--network-gbps", type=float, default=None, help="network GB/s per NIC (400 Gb/s = 50)")
    p.add_argument(
        "--algo",
        default=None,
        help="restrict the algorithms, as NCCL_ALGO does (comma list of ring, tree, nvls, nvls_tree, pat, p2p)",
    )
    p.add_argument(
        "--proto", default=None, help="restrict the protocols, as NCCL_PROTO does (LL, LL128, Simple)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    kind = as_collective_kind(args.kind)
    if kind == CollectiveKind.UNKNOWN:
        raise ConfigError(f"unknown collective {args.kind!r}: use one of {_KINDS}")
    if args.ranks < 1:
        raise ConfigError("--ranks must be at least 1")
    if args.bytes < 0:
        raise ConfigError("--bytes must not be negative")
    if args.nodes is not None and not 1 <= args.nodes <= args.ranks:
        raise ConfigError("--nodes must be between 1 and --ranks")
    for name in ("gpus_per_node", "nvlink_gbps", "network_gbps"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    model = NcclModel.for_gpu(
        args.gpu,
        gpus_per_node=args.gpus_per_node,
        nvlink_gbps=args.nvlink_gbps,
        network_gbps=args.network_gbps,
    )
    algos = _names(args.algo, ALGORITHMS, "--algo")
    protos = _names(args.proto, PROTOCOLS, "--proto")
    if algos or protos:
        model = replace(model, algorithms=algos, protocols=protos)
    pred = model.predict(kind, args.bytes, args.ranks, nodes=args.nodes)
    note = _fallback_note(pred, algos, protos) if args.ranks > 1 else None
    if args.json:
        out = {
            **pred.as_dict(),
            **({"note": note} if note else {}),
            "kind": kind.label,
            "bytes": args.bytes,
            "ranks": pred.shape.ranks,
            "nodes": pred.shape.nodes,
            "gpus_per_node_used": pred.shape.per_node,
            "gpu": model.params.gpu,
        }
        sys.stdout.write(orjson.dumps(out).decode() + "\n")
        return 0
    s = pred.shape
    print(
        f"{kind.label} of {_human(args.bytes)} over {s.ranks} GPUs ({s.nodes} node(s), {s.per_node} per node), {model.params.gpu}"
    )
    print(f"  predicted time   {pred.seconds * 1e6:12.1f} µs")
    if s.ranks == 1:  # nothing crosses a link: a bandwidth would be bytes over a launch time
        print("  algorithm        none: one rank, nothing moves between GPUs (the time is a launch)")
    else:
        print(f"  algorithm        {pred.algorithm} / {pred.protocol}")
        print(f"  algorithm bw     {pred.algbw / 1e9:12.1f} GB/s")
        print(f"  bus bandwidth    {pred.busbw / 1e9:12.1f} GB/s")
    if note:
        print(f"  note             {note}")
    if s.ranks > 1:
        print("  candidates (latency + transfer = time, µs):")
        for c in sorted(model.candidates(kind, args.bytes, s), key=lambda c: c.time):
            print(
                f"    {c.algorithm + '/' + c.protocol:<18} {c.latency * 1e6:9.1f} + {c.transfer * 1e6:11.1f} = {c.time * 1e6:11.1f}"
            )
    for line in model.describe()[:1]:
        print("  " + line)
    return 0


def _fallback_note(pred, algos: tuple[str, ...] | None, protos: tuple[str, ...] | None) -> str | None:
    """Say when ``--algo``/``--proto`` could not be honoured: the model then falls back to every
    choice, as NCCL does when the forced algorithm cannot run the collective, and a user who asked
    for NVLS on an A100 must not read the ring it fell back to as the NVLS figure."""
    missed = []
    if algos and pred.algorithm not in algos:
        missed.append(f"--algo {','.join(algos)}")
    if protos and pred.protocol not in protos:
        missed.append(f"--proto {','.join(protos)}")
    if not missed:
        return None
    return f"{' and '.join(missed)} cannot run this collective on this cluster; fell back to NCCL's own choice"


def _names(text: str | None, known: tuple[str, ...], flag: str) -> tuple[str, ...] | None:
    if not text:
        return None
    lower = {k.lower(): k for k in known}
    out = []
    for name in text.replace(" ", "").split(","):
        if name.lower() not in lower:
            raise ConfigError(f"{flag}: unknown {name!r} (use {', '.join(known)})")
        out.append(lower[name.lower()])
    return tuple(out)


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"
