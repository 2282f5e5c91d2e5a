"""The fuzz suite (tests/test_fuzz_loader.py) with a large, random budget instead of CI's fixed one.

    .venv/bin/python bench/fuzz_loader.py [EXAMPLES_PER_TEST]   (default 2000)

Runs pytest with ``LUMOS_FUZZ_EXAMPLES`` set (random inputs, not the derandomized CI set) and prints
how many inputs were tried and how they ended (loaded and replayed, GraphError, LumosError). A
failure prints hypothesis' minimal failing input; add it to the test as an ``@example`` once fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO


def main() -> int:
    per_test = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        env = {
            **os.environ,
            "LUMOS_FUZZ_EXAMPLES": str(per_test),
            "LUMOS_FUZZ_STATS": str(stats),
            "LUMOS_CACHE_DIR": str(Path(tmp) / "cache"),
        }
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-o",
                "timeout=0",  # the suite bounds each input itself; the run as a whole may be long
                "-o",
                "faulthandler_timeout=0",
                "--hypothesis-show-statistics",
                "tests/test_fuzz_loader.py",
            ],
            cwd=REPO,
            env=env,
        )
        seconds = time.perf_counter() - t0
        counts = json.loads(stats.read_text()) if stats.exists() else {}
    total = sum(counts.values())
    print(f"\n{total:,} inputs checked in {seconds:.0f} s ({per_test} examples per test): ", end="")
    print(", ".join(f"{v:,} {k}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
