"""The headless command line: ``lumos inspect|replay|estimate|sweep|comm|diff|validate|calibrate|synth|cache``.

Each subcommand lives in ``lumos_core/commands/<name>.py`` and provides ``add_arguments(parser)``
and ``run(args) -> int``. Errors that Lumos raises on purpose (:class:`LumosError`) are printed as
one line on stderr with exit code 2; anything else is a bug and keeps its traceback.

A command line runs one subcommand, so :func:`main` imports only that command's module (the others
pull in the what-if, sweep, comparison and synthesis stages); ``lumos --help`` lists every command
from :data:`COMMANDS` without importing any.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import sys
from collections.abc import Collection, Sequence

from lumos_core.errors import Cancelled, LumosError

# name -> one-line help; the module lumos_core.commands.<name> implements it.
COMMANDS: dict[str, str] = {
    "inspect": "summarise a trace folder: ranks, streams, iterations, clock offsets",
    "replay": "replay the execution graph and compare with the measured iterations",
    "estimate": "predict a configuration that was never run (DP/TP/PP, microbatches, model size, GPU)",
    "sweep": "estimate every configuration of a grid of knobs (local process pool or Ray), resumable CSV",
    "comm": "predict one NCCL collective's time, algorithm and protocol on a given cluster",
    "diff": "compare two measured jobs: iteration, breakdown, kernels, collectives, knobs that differ",
    "validate": "predict measured job B from job A (the knobs that differ) and report the errors",
    "calibrate": "fit a hardware profile (GEMM rates, collectives, overheads) on your own runs",
    "synth": "generate a SYNTHETIC Megatron-style trace folder (demos, tests, scale benchmarks)",
    "cache": "the parse cache: where it is and how big (info), drop deleted traces' entries (prune), clear",
}
# Options every command takes before its name (``lumos --cache-max 5G replay ...``) -> attribute.
GLOBAL_OPTIONS = {"--cache-max": "cache_max"}


def split_global_options(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The leading global options (attribute -> value) and the rest of the command line."""
    rest, found = list(argv), {}
    while rest and rest[0].split("=", 1)[0] in GLOBAL_OPTIONS:
        word = rest.pop(0)
        name, eq, value = word.partition("=")
        if not eq:
            if not rest:
                break
            value = rest.pop(0)
        found[GLOBAL_OPTIONS[name]] = value
    return rest, found


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; ``commands``: only those get their options (and their module
    imported), the others are listed by name and help text alone."""
    parser = argparse.ArgumentParser(
        prog="lumos",
        description="Lumos: replay and what-if estimation of LLM training from PyTorch profiler traces.",
        epilog="--cache-max SIZE may also come before the command (lumos --cache-max 5G replay ...), "
        "for the commands that take it. Run `lumos COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        if commands is not None and name not in commands:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"lumos_core.commands.{name}")
        p = sub.add_parser(
            name,
            help=help_text,
            description=getattr(module, "DESCRIPTION", help_text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv, global_options = split_global_options(sys.argv[1:] if argv is None else argv)
    _skip_collector_at_exit()
    # The command's own module and what it imports (numba among them) are imported with the cyclic
    # garbage collector paused and then frozen: they live as long as the process, and each full
    # collection during the command would otherwise walk those ~10**5 objects again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(argv[:1])  # the command is the first word (the only other is -h)
        gc.freeze()
    finally:
        if collecting:
            gc.enable()
    try:
        return _run(parser, argv, global_options)
    finally:
        gc.unfreeze()  # for callers that go on (tests, an embedding program)


def _run(parser: argparse.ArgumentParser, argv: list[str], global_options: dict[str, str]) -> int:
    args = parser.parse_args(argv)
    for name, value in global_options.items():  # the command's own option wins
        if not hasattr(args, name):  # never ignored silently
            parser.error(f"--{name.replace('_', '-')} is not an option of lumos {args.command}")
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except Cancelled:
        print("lumos: cancelled", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("lumos: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stderr.close()
        return 0
    except LumosError as exc:
        print(f"lumos {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # a path the user gave cannot be written or read (no such folder, permission, disk
        # full): say which, without a traceback
        where = exc.filename if exc.filename is not None else ""
        reason = exc.strerror or str(exc)
        print(f"lumos {args.command}: error: {where}{': ' if where else ''}{reason}", file=sys.stderr)
        return 1


_exit_hook = False


def _skip_collector_at_exit() -> None:
    """At interpreter exit, freeze what is left before CPython's final collections: they would walk
    every object of numpy, numba and the command's results once more (about 0.2 CPU s of a 1.4 s
    command) only to free memory the operating system takes back anyway. Exit handlers still run."""
    global _exit_hook
    if not _exit_hook:
        atexit.register(gc.freeze)
        _exit_hook = True


if __name__ == "__main__":
    sys.exit(main())
