"""The headless command line: ``lumos inspect|replay|estimate|sweep|comm|diff|validate|calibrate|synth``.

Each subcommand lives in ``lumos_core/commands/<name>.py`` and provides ``add_arguments(parser)``
and ``run(args) -> int``. Errors that Lumos raises on purpose (:class:`LumosError`) are printed as
one line on stderr with exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lumos",
        description="Lumos: replay and what-if estimation of LLM training from PyTorch profiler traces.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
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
    parser = build_parser()
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
