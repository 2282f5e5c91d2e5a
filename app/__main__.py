"""``lumos`` entry point: engine subcommands run headless; anything else opens the desktop app.

``lumos inspect|replay|estimate|synth|sweep ...`` go to :mod:`lumos_core.cli` without importing Qt,
so the command line works on machines without a display (or without PySide6 at all); ``lumos
doctor`` (or ``--doctor``) reports the installation, also where Qt cannot start.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    from lumos_core import COMMANDS, split_global_options

    command = split_global_options(args)[0][:1]  # after `--cache-max SIZE`, if given first
    if command and command[0] in COMMANDS:
        from lumos_core import main as cli_main

        return cli_main(args)
    # the doctor needs no Qt to run (it reports a broken one), so it never reaches the launcher
    if args and args[0] in ("doctor", "--doctor"):
        from app.doctor import run_doctor

        return run_doctor()
    if args == ["--platform-probe"]:
        from app.doctor import run_probe

        return run_probe()
    from app.launch import run_app

    return run_app(args)


if __name__ == "__main__":
    sys.exit(main())
