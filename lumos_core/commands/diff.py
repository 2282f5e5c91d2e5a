"""``lumos diff A B``: what changed between two measured jobs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from lumos_core.api import Job
from lumos_core.commands.common import (
    add_cache_max_argument,
    cache_config_from_args,
    report_load_problems,
    terminal_progress,
)
from lumos_core.compare.diff import BREAKDOWN_KEYS, JobDiff
from lumos_core.trace.loader import load_job

DESCRIPTION = """Compare two measured jobs (trace folders or files), of any configuration: iteration
time and its breakdown per rank (or pipeline stage) and overall; kernels by family and by name and
recorded shape (appeared / vanished ones listed); collectives by kind, group size and message size
(time, bus bandwidth); CPU operators; the configuration inferred from each job and which knobs differ.

Figures are per rank and per steady-state iteration, so jobs with different rank counts or numbers
of recorded steps compare directly. Deltas are B - A. Kernel and operator names are matched after
torch.compile's region numbers, graph hashes and Triton kernel indices are replaced by '#' (a
recompiled job renumbers them). The noise is the runs' own iteration spread (standard deviation of
the steady iterations, pooled); a change smaller than it is marked '~' (within noise).

Examples:
  lumos diff runs/dp8 runs/dp16
  lumos diff before/ after/ --json > diff.json"""


def add_pair_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="the first job: folder of per-rank traces or one trace file")
    p.add_argument("b", metavar="B", help="the second job")
    p.add_argument("--strict", action="store_true", help="fail on the first bad file instead of skipping it")
    p.add_argument("--no-cache", action="store_true", help="parse every file again (ignore the cache)")
    p.add_argument(
        "--workers", type=int, default=None, help="parallel parsing processes (default: CPU count)"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder of parsed columns (default: $LUMOS_CACHE_DIR, else the user cache)",
    )
    add_cache_max_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_pair_arguments(p)
    p.add_argument(
        "--limit", type=int, default=15, metavar="N", help="kernel and operator rows to show (default 15)"
    )


def load_pair(args: argparse.Namespace) -> tuple[Any, Any]:
    kw = {
        "strict": args.strict,
        "use_cache": not args.no_cache,
        "workers": args.workers,
        "cache_config": cache_config_from_args(args),  # as every command that loads traces
    }
    a = load_job(args.a, progress=terminal_progress(not args.quiet), **kw)
    b = load_job(args.b, progress=terminal_progress(not args.quiet), **kw)
    report_load_problems(a)
    report_load_problems(b)
    return a, b


def dump_json(d: dict[str, Any]) -> None:
    sys.stdout.write(
        orjson.dumps(
            d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
        ).decode()
        + "\n"
    )


def run(args: argparse.Namespace) -> int:
    a, b = load_pair(args)
    d = Job(a).diff(Job(b))
    if args.json:
        dump_json(d.to_dict())
    else:
        print(format_diff(d.result, args.limit))
    return 0


def _ms(us: float) -> str:
    return f"{us / 1000:10.3f}"


def _pct(x: float | None) -> str:
    return f"{x:+8.1f}%" if x is not None else "      new"


def format_diff(d: JobDiff, limit: int = 15) -> str:
    j = d.as_dict()
    a, b = j["a"], j["b"]
    lines = [
        f"A  {a['path']}: {a['ranks']} rank(s) on {a['config']['device']}, {a['iterations']} steady iteration(s)",
        f"B  {b['path']}: {b['ranks']} rank(s) on {b['config']['device']}, {b['iterations']} steady iteration(s)",
        "",
    ]
    if j["differing_knobs"]:
        lines.append("configuration (inferred) that differs:")
        for k, (x, y) in sorted(j["differing_knobs"].items()):
            lines.append(f"  {k:<14} {x!s:>10} -> {y!s:<10}")
    else:
        lines.append("configuration (inferred): no knob differs")
    lines += [
        "",
        f"{'':<26}{'A ms':>10} {'B ms':>10} {'B-A ms':>10} {'':>9}",
        f"{'iteration':<26}{_ms(a['iteration_us'])} {_ms(b['iteration_us'])} "
        f"{_ms(b['iteration_us'] - a['iteration_us'])} {_pct(j['iteration_delta_pct'])}"
        + _noise_tag(j["iteration_within_noise"]),
        "  " + noise_text(j["noise"]),
    ]
    for k in BREAKDOWN_KEYS:
        x, y = a["breakdown"][k], b["breakdown"][k]
        lines.append(
            f"  {k[:-3].replace('_', ' '):<24}{_ms(x)} {_ms(y)} {_ms(y - x)}"
            + _noise_tag(j["breakdown_within_noise"][k], 10)
        )
    it = j["iterations"]
    if it:
        lines.append("  aligned iterations (B-A ms): " + " ".join(f"{r['delta_us'] / 1000:+.2f}" for r in it))
    if len(j["ranks"]) > 1:
        lines += ["", "per rank / stage (iteration ms):"]
        for r in j["ranks"]:
            lines.append(
                f"  {r['group']:<24}{_ms(r['a_iteration_us'])} {_ms(r['b_iteration_us'])} {_ms(r['delta_us'])}"
                + _noise_tag(r["within_noise"], 10)
            )
    what = "GPU activity" if d.a.summary.gpu else "CPU operators (self time)"
    lines += ["", f"families, {what}, per rank per iteration:"]
    for r in j["families"]:
        lines.append(
            f"  {r['family']:<24}{_ms(r['a_us'])} {_ms(r['b_us'])} {_ms(r['delta_us'])} {_pct(r['delta_pct'])}"
            + _noise_tag(r["within_noise"])
        )
    if j["collective_kinds"]:
        lines += ["", "collectives by kind:"]
        for r in j["collective_kinds"]:
            lines.append(
                f"  {r['kind']:<24}{_ms(r['a_us'])} {_ms(r['b_us'])} {_ms(r['delta_us'])} {_pct(r['delta_pct'])}"
                + _noise_tag(r["within_noise"])
            )
        lines.append(
            f"  {'kind / group / size':<27} {'A n/it':>8} {'B n/it':>8} {'A GB/s':>8} {'B GB/s':>8}  "
            "(count per rank per iteration; bus bandwidth)"
        )
        for r in j["collectives"][:limit]:
            bw = lambda x: f"{x:8.1f}" if x is not None else "       -"  # noqa: E731
            lines.append(
                f"  {r['kind']:<13} {_group(r['group_size']):>3} {_size(r['size_bytes']):>9} "
                f"{r['a_count']:8.1f} {r['b_count']:8.1f} {bw(r['a_bus_bw_gbps'])} {bw(r['b_bus_bw_gbps'])}"
            )
    lines += [
        "",
        f"kernels by name and shape: {j['kernels_total']} ({j['appeared']} appeared in B, "
        f"{j['vanished']} vanished), largest changes (ms per iteration):",
    ]
    for r in j["kernels"][:limit]:
        tag = {"both": "", "appeared": " [appeared]", "vanished": " [vanished]"}[r["status"]]
        mark = "~" if r["within_noise"] else " "
        lines.append(
            f"  {_ms(r['a_us'])} {_ms(r['b_us'])} {_ms(r['delta_us'])} {mark} {_short(r['kernel'])}{tag}"
        )
    lines += ["", "CPU operators (inclusive time, ms per iteration):"]
    for r in j["cpu_ops"][:limit]:
        lines.append(
            f"  {_ms(r['a_us'])} {_ms(r['b_us'])} {_ms(r['delta_us'])} {'~' if r['within_noise'] else ' '} "
            f"x{r['a_count']:g} -> x{r['b_count']:g}  {_short(r['name'])}"
        )
    lines += [f"note: {n}" for n in j["notes"]]
    lines.append(f"definition: {j['definition']}")
    return "\n".join(lines)


def _noise_tag(within: bool, pad: int = 0) -> str:
    return " " * pad + "  ~ within noise" if within else ""


def noise_text(noise: dict[str, Any]) -> str:
    """ "noise: ±0.41 ms (the runs' own iteration spread: A σ 0.38 ms over 4 iterations, 41.0-41.9
    ms; B ...); smaller changes are marked ~" or why there is no estimate."""

    def side(name: str, s: dict[str, Any]) -> str:
        if s["std_us"] is None:
            return f"{name} has {s['iterations']} steady iteration(s), no spread"
        return (
            f"{name} σ {s['std_us'] / 1000:.3f} ms over {s['iterations']} iterations, "
            f"{s['min_us'] / 1000:.3f}-{s['max_us'] / 1000:.3f} ms"
        )

    sides = f"{side('A', noise['a'])}; {side('B', noise['b'])}"
    if noise["spread_us"] is None:
        return f"noise: unknown ({sides}): no change can be called noise"
    return (
        f"noise: ±{noise['spread_us'] / 1000:.3f} ms, the runs' own iteration spread ({sides}); "
        "smaller changes are marked ~"
    )


def _short(s: str, n: int = 90) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _group(n: int) -> str:
    """A collective's group size, '?' where the trace does not record it (stored as -1)."""
    return str(n) if n > 0 else "?"


def _size(n: int) -> str:
    if n < 0:
        return "?"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.1f}{unit}"
    return f"{n}B"
