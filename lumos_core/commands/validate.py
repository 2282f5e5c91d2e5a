"""``lumos validate A B``: predict measured job B from job A, and compare."""

from __future__ import annotations

import argparse

from lumos_core.api import Job
from lumos_core.commands.common import (
    SYNTHETIC_NOTE,
    add_knob_arguments,
    add_profile_argument,
    knob_values,
    profile_from_args,
    terminal_progress,
)
from lumos_core.commands.diff import add_pair_arguments, dump_json, load_pair
from lumos_core.compare.validate import Validation
from lumos_core.whatif.knob_registry import REGISTRY

# the knobs that describe a job's structure: inferred from each trace, given where it cannot tell
SHAPE = [k for k in REGISTRY if k.shape]

DESCRIPTION = """Check a prediction against a real run: the configurations of A and B are inferred
from their traces, the knobs that differ become the what-if, and B is estimated from A exactly as
`lumos estimate A --<knob> <B's value>` would. Prints predicted vs measured B: iteration time, the
breakdown, and the time per kernel family and collective kind (which model was wrong, by how much),
beside the null model "B takes as long as A". Knobs Lumos cannot model are named.

Values a trace does not record can be given: --baseline-<knob> N for A, --<knob> N for B.

Examples:
  lumos validate runs/dp8 runs/dp16
  lumos validate runs/layers4 runs/layers8 --json"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_arguments(p)
    g = p.add_argument_group("values the traces do not record")
    add_knob_arguments(g, SHAPE, flag="--baseline-{flag}", dest="a_{name}", help="A's {name}")
    add_knob_arguments(g, SHAPE, dest="b_{name}", help="B's {name}")
    add_profile_argument(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="predict even when the jobs look like different code or only unmodelled knobs differ",
    )


def run(args: argparse.Namespace) -> int:
    job_a, job_b = load_pair(args)
    a = Job(job_a, baseline=knob_values(args, SHAPE, "a_{name}"), profile=profile_from_args(args))
    b = Job(job_b, baseline=knob_values(args, SHAPE, "b_{name}"))
    v = a.validate(b, force=args.force, progress=terminal_progress(not args.quiet))
    if args.json:
        dump_json(v.to_dict())
    else:
        print(format_validation(v.result))
        print(v.sample)
        if v.synthetic:  # a "hold-out" error between two jobs of our own cost models is no accuracy
            print(SYNTHETIC_NOTE)
    return 0


def _ms(us: float) -> str:
    return f"{us / 1000:10.3f}"


def _pct(x: float | None) -> str:
    return f"{x:+8.1f}%" if x is not None else "        -"


def _throughput_lines(d: dict) -> list[str]:  # type: ignore[type-arg]
    """Rate per GPU and MFU, predicted and measured (B does the predicted configuration's work, so
    its measured rate is that work over its measured time)."""
    t = ((d.get("estimate") or {}).get("throughput") or {}).get("predicted")
    if not t or t.get("per_s_per_gpu") is None or not d["measured_us"]:
        return []
    scale = d["predicted_us"] / d["measured_us"]
    rate, unit = t["per_s_per_gpu"], t["unit"]
    lines = [
        f"{unit + '/s per GPU':<26}{rate:10,.0f} {rate * scale:10,.0f} {rate - rate * scale:10,.0f} "
        f"{_pct(100 * (1 / scale - 1))}"
    ]
    if t.get("mfu") is not None:
        m = 100 * t["mfu"]
        lines.append(f"{'MFU (%)':<26}{m:10.1f} {m * scale:10.1f} {m - m * scale:10.1f}")
    return lines


def format_validation(v: Validation) -> str:
    d = v.as_dict()
    what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(d["differing_knobs"].items())) or "none"
    lines = [
        f"A  {d['a']}",
        f"B  {d['b']}",
        f"knobs that differ: {what}",
        f"what-if estimated from A: {', '.join(f'{k}={x}' for k, x in sorted(d['modelled_knobs'].items())) or 'nothing (A replayed)'}",
    ]
    if d["unmodelled_knobs"]:
        lines.append(
            "not modelled (the prediction keeps A's): "
            + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in d["unmodelled_knobs"].items())
        )
    lines += [
        "",
        f"{'':<26}{'predicted':>10} {'measured':>10} {'error':>10} {'':>9}",
        f"{'iteration (ms)':<26}{_ms(d['predicted_us'])} {_ms(d['measured_us'])} "
        f"{_ms(d['predicted_us'] - d['measured_us'])} {_pct(d['error_pct'])}",
        f"{'  null model (B = A)':<26}{_ms(d['null_us'])} {_ms(d['measured_us'])} "
        f"{_ms(d['null_us'] - d['measured_us'])} {_pct(d['null_error_pct'])}",
        *_throughput_lines(d),
        "breakdown (ms per iteration):",
    ]
    for k, c in d["components"].items():
        lines.append(
            f"  {k.replace('_', ' '):<24}{_ms(c['predicted_us'])} {_ms(c['measured_us'])} "
            f"{_ms(c['error_us'])} {_pct(c['error_pct'])}"
        )
    what = "GPU activity" if v.pair.a.summary.gpu else "CPU operators"
    lines.append(f"families ({what}, ms per rank per iteration):")
    for r in d["families"]:
        lines.append(
            f"  {r['family']:<24}{_ms(r['predicted_us'])} {_ms(r['measured_us'])} "
            f"{_ms(r['error_us'])} {_pct(r['error_pct'])}"
        )
    if d["collectives"]:
        lines.append("collectives by kind (ms per rank per iteration):")
        for r in d["collectives"]:
            lines.append(
                f"  {r['kind']:<24}{_ms(r['predicted_us'])} {_ms(r['measured_us'])} "
                f"{_ms(r['error_us'])} {_pct(r['error_pct'])}"
            )
    lines += [f"note: {n}" for n in d["notes"] + d["estimate"]["notes"]]
    lines.append(
        "error = predicted / measured - 1; iteration and breakdown as lumos estimate defines them "
        "(steady-state iterations, mean over ranks)"
    )
    return "\n".join(lines)
