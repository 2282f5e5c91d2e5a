"""Arguments and helpers shared by the subcommands that load a trace folder, and their knob options:
generated from the knob registry (:mod:`lumos_core.whatif.knob_registry`), one option per knob
(``--dp N``, ``--gpu GPU``, ``--sp/--no-sp`` for a yes/no knob) and ``--baseline-<knob> N`` for the
traced values a trace may not record. ``lumos estimate``, ``sweep`` and ``validate`` take their knobs
from here, so a knob added to the registry is an option of each."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lumos_core.errors import LumosError
from lumos_core.progress import Progress, no_progress

if TYPE_CHECKING:
    from lumos_core.whatif.knob_registry import Knob


def add_load_arguments(p: argparse.ArgumentParser, engine: bool = True) -> None:
    """PATH and the loading options; ``engine``: also --engine/--address (where files are parsed),
    for commands that do not use those names for something else."""
    p.add_argument("path", help="folder of per-rank trace files (*.json, *.json.gz) or one trace file")
    p.add_argument("--strict", action="store_true", help="fail on the first bad file instead of skipping it")
    p.add_argument("--no-cache", action="store_true", help="parse every file again (ignore the cache)")
    p.add_argument(
        "--workers", type=int, default=None, help="parallel parsing processes (default: CPU count)"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")
    if engine:
        p.add_argument(
            "--engine",
            dest="parse_engine",
            choices=("local", "ray"),
            default="local",
            help="where rank files are parsed: this machine's processes (default) or a Ray cluster",
        )
        p.add_argument(
            "--address",
            dest="parse_address",
            metavar="ADDR",
            default=None,
            help="Ray cluster address for --engine ray (default: $RAY_ADDRESS, else a local Ray instance)",
        )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder of parsed columns (default: $LUMOS_CACHE_DIR, else the user cache); with --engine "
        "ray on a cluster, storage every machine can reach",
    )
    add_cache_max_argument(p)


def add_cache_max_argument(p: argparse.ArgumentParser) -> None:
    from lumos_core.trace.cache_config import SIZE_HELP

    p.add_argument(
        "--cache-max",
        metavar="SIZE",
        default=None,
        help=f"cap of the cache folder, least recently used entries evicted ({SIZE_HELP}; default: "
        "$LUMOS_CACHE_MAX, else 10%% of the cache volume, at most 20 GB)",
    )


def cache_config_from_args(args: argparse.Namespace) -> Any:
    """The cache's folder and cap from --cache-dir/--cache-max (else the environment, else defaults)."""
    from lumos_core.trace.cache_config import CacheConfig

    return CacheConfig.resolve(getattr(args, "cache_dir", None), getattr(args, "cache_max", None))


def terminal_progress(enabled: bool = True, stream: Any = None) -> Progress:
    """A progress bar on stderr when it is a terminal (what it is doing, e.g. "parsing 12 of 256
    files, 1.2 of 9.8 GB", and an ETA); silent otherwise, so piped or redirected output stays clean."""
    out = stream or sys.stderr
    if not enabled or not out.isatty():
        return no_progress
    started = [time.monotonic()]
    last = [""]
    previous = [0.0]

    def report(fraction: float, message: str) -> None:
        width = 24
        fraction = min(max(fraction, 0.0), 1.0)
        if fraction < previous[0]:  # a new stage (load, then build, then estimate): a new ETA
            started[0] = time.monotonic()
        previous[0] = fraction
        filled = int(width * fraction)
        elapsed = time.monotonic() - started[0]
        eta = f" ~{elapsed / fraction - elapsed:.0f}s left" if 0.02 < fraction < 1 and elapsed > 1 else ""
        try:
            columns = os.get_terminal_size(out.fileno()).columns
        except (OSError, ValueError, AttributeError):
            columns = shutil.get_terminal_size((100, 20)).columns
        room = max(columns - width - 24, 20)
        line = f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%{eta} {message[:room]}"
        # pad over what the previous line left on screen
        out.write(line + " " * max(len(last[0]) - len(line), 0))
        last[0] = line
        if fraction >= 1.0:
            out.write("\n")
            last[0] = ""
        out.flush()

    return report


def load_from_args(args: argparse.Namespace, load_job: Callable[..., Any]) -> Any:
    engine = getattr(args, "parse_engine", "local")
    address = getattr(args, "parse_address", None)
    if address and engine != "ray":
        raise LumosError("--address is for --engine ray (the local engine parses on this machine)")
    config = cache_config_from_args(args)
    parser = None
    if engine == "ray":
        from lumos_core.sweep.ray_load import RayParser

        parser = RayParser(address=address, jobs=args.workers, root=config.root)
    try:
        job = load_job(
            args.path,
            progress=terminal_progress(not args.quiet),
            strict=args.strict,
            use_cache=not args.no_cache,
            workers=args.workers,
            parser=parser,
            cache_config=config,
        )
    finally:
        if parser is not None:
            parser.close()
    if getattr(args, "command", None) != "inspect":  # inspect prints every warning itself
        report_load_problems(job)
    else:  # but a skipped cache is news for stderr, as in every command
        report_load_problems(job, only_cache=True)
    return job


def report_load_problems(job: Any, out: Any = None, only_cache: bool = False) -> None:
    """Tell the user on stderr which rank files were skipped and which ranks are missing: the
    command goes on with the good ranks, but its figures are not the whole job's. Also whether the
    job's columns could not be cached (``not cached: 0.4 GB free on ...``): the command still
    answers, the next one parses again."""
    out = out if out is not None else sys.stderr
    for w in getattr(job, "warnings", ()):
        if w.startswith("not cached: "):
            print(f"lumos: warning: {w}", file=out)
    if only_cache:
        return
    for s in getattr(job, "skipped", ()):
        if s.not_a_trace:  # e.g. a run's config.json beside its traces
            print(f"lumos: note: ignored {s.file} ({s.reason})", file=out)
        else:
            print(f"lumos: warning: skipped {s.file}: {s.reason}", file=out)
    for w in getattr(job, "warnings", ()):
        if w.startswith("the job has ") and " were loaded (missing: " in w:
            print(f"lumos: warning: {job.path}: {w}", file=out)


class StageTimer:
    """Wall and CPU seconds of a command's stages, from its first stage (started when the timer is
    made) to its report: what ``--timings`` prints. The interpreter's start-up and imports come
    before the first stage and the process exit after the last; the CPU seconds spent before the
    first stage and the clock times of both ends let a caller who started the process (e.g.
    ``bench/bench_scale.py``) split its whole run into start-up, pipeline and exit."""

    def __init__(self) -> None:
        self.first_stage_at = time.time()
        self.cpu_before = time.process_time()
        self._wall = self._start_wall = time.perf_counter()
        self._cpu = self.cpu_before
        self.stages: dict[str, dict[str, float]] = {}

    def lap(self, name: str) -> None:
        """End stage ``name`` (it began where the previous one ended)."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.stages[name] = {"wall_s": round(wall - self._wall, 4), "cpu_s": round(cpu - self._cpu, 4)}
        self._wall, self._cpu = wall, cpu

    def as_dict(self) -> dict[str, Any]:
        return {
            "stages": self.stages,
            "pipeline": {
                "wall_s": round(self._wall - self._start_wall, 4),
                "cpu_s": round(self._cpu - self.cpu_before, 4),
            },
            "process_cpu_s_before_first_stage": round(self.cpu_before, 4),
            "first_stage_unix_time": self.first_stage_at,
            "last_stage_end_unix_time": self.first_stage_at + (self._wall - self._start_wall),
        }

    def summary(self) -> str:
        """One line: each stage's wall seconds, then the pipeline's wall and CPU seconds."""
        parts = ", ".join(f"{name} {t['wall_s']:.2f}" for name, t in self.stages.items())
        total = self.as_dict()["pipeline"]
        return (
            f"timings (wall s): {parts}; pipeline {total['wall_s']:.2f} s wall, {total['cpu_s']:.2f} s CPU "
            f"(start-up before it: {self.cpu_before:.2f} CPU s)"
        )


def add_timings_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timings",
        action="store_true",
        help="also print each stage's wall and CPU seconds (load, graph, replay, ...; in --json: "
        "a 'timings' object)",
    )


def add_profile_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="PROFILE.json",
        help="hardware profile fitted on your cluster's runs (lumos calibrate)",
    )


def profile_from_args(args: argparse.Namespace) -> Any:
    """The hardware profile named by --profile, or None."""
    from lumos_core.perf.profile import HardwareProfile

    return HardwareProfile.load(args.profile) if getattr(args, "profile", None) else None


SYNTHETIC_NOTE = (
    "SYNTHETIC job (written by lumos synth from Lumos's own cost models): these figures check the "
    "engine's logic and scale, never its accuracy"
)


# ---- knob options (from the knob registry)

_TYPES: dict[type, Callable[[str], Any]] = {int: int, float: float, str: str}


def add_knob_arguments(
    group: Any,  # an ArgumentParser or one of its argument groups
    knobs: Iterable[Knob] | None = None,
    *,
    flag: str = "--{flag}",
    dest: str = "{name}",
    help: str = "{help}",
) -> None:
    """An option per knob: typed, with its static choices, default None (not given: keep the
    baseline). ``flag``/``dest``/``help``: templates over the knob's fields ({flag}: "micro-batch",
    {name}: "micro_batch", {label}, {help}). ``knobs``: every knob of the registry by default."""
    for k in _every_knob() if knobs is None else knobs:
        option = flag.format(flag=k.flag[2:])
        text = help.format(name=k.name, label=k.label, help=knob_help(k)) or None
        if k.type is bool:  # --sp / --no-sp
            kind: dict[str, Any] = {"action": argparse.BooleanOptionalAction}
        else:
            kind = {"type": _TYPES[k.type], "choices": k.choices, "metavar": None if k.choices else k.metavar}
        group.add_argument(option, default=None, dest=dest.format(name=k.name), help=text, **kind)


def knob_help(k: Knob) -> str:
    """The option's help: the app's label, what it means and its unit."""
    text = f"{k.label}: {k.help}" if k.help else k.label
    return f"{text} ({k.unit})" if k.unit and k.unit != "x" and k.unit not in text else text


def knob_values(
    args: argparse.Namespace, knobs: Iterable[Knob] | None = None, dest: str = "{name}"
) -> dict[str, Any]:
    """The knobs given on the command line (not given: left out)."""
    out = {}
    for k in _every_knob() if knobs is None else knobs:
        v = getattr(args, dest.format(name=k.name))
        if v is not None:
            out[k.name] = v
    return out


def _every_knob() -> tuple[Knob, ...]:
    # imported when called: commands that take no knob load no part of the what-if engine
    from lumos_core.whatif.knob_registry import REGISTRY

    return REGISTRY


def overridable() -> list[Knob]:
    return [k for k in _every_knob() if k.overridable]


def add_baseline_arguments(p: argparse.ArgumentParser) -> None:
    """``--baseline-<knob> N``: a traced value the trace does not record (model shape, microbatches)."""
    b = p.add_argument_group("baseline values the trace does not record")
    add_knob_arguments(b, overridable(), flag="--baseline-{flag}", dest="baseline_{name}", help="")


def baseline_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--baseline-<knob>`` values given."""
    return knob_values(args, overridable(), "baseline_{name}")
