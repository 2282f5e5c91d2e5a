"""Entry script of the frozen app: ``multiprocessing.freeze_support()``, then ``app.__main__.main``.

The loader parses large trace folders in worker processes started with ``forkserver`` (from the GUI)
or ``spawn``; in a PyInstaller build those workers re-run this executable with multiprocessing's
own arguments, and ``freeze_support()`` must see them before Lumos parses the command line. It is a
no-op when not frozen, so ``python packaging/lumos_main.py`` behaves exactly like ``lumos``.
"""

from __future__ import annotations

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()

    from app.__main__ import main

    sys.exit(main())
