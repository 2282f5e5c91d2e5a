"""How big the parse cache gets per GB of traces (the figure README's "The cache" section quotes).

For each trace folder: its trace files' bytes on disk (as stored, usually gzip) and uncompressed,
then the bytes on disk of the cache entries ``lumos inspect`` leaves in an empty cache folder.
Real folders from ``../shared/traces`` (skipped when absent) and, with ``--synth``, a SYNTHETIC
32-rank job from ``lumos synth`` (its size is only a check of scale, like the issue's example).

    python bench/bench_cache_size.py [--synth]
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lumos_core.trace.cache_evict import scan  # noqa: E402
from lumos_core.trace.loader import discover_trace_files  # noqa: E402

SHARED = REPO.parent / "shared" / "traces"


def _uncompressed(f: Path) -> int:
    if f.name.endswith(".gz"):
        with gzip.open(f, "rb") as g:
            return sum(len(b) for b in iter(lambda: g.read(1 << 20), b""))
    return f.stat().st_size


def measure(folder: Path) -> tuple[int, int, int]:
    """(trace bytes as stored, uncompressed, cache bytes on disk)."""
    files = discover_trace_files(folder)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "lumos_core", "inspect", str(folder), "-q", "--json", "--cache-dir", tmp],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip().splitlines()[-1])
        cached = sum(u.nbytes for u in scan(Path(tmp)))
    return sum(f.stat().st_size for f in files), sum(_uncompressed(f) for f in files), cached


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synth", action="store_true", help="also a synthetic 32-rank job (lumos synth)")
    args = ap.parse_args()
    folders = (
        sorted(p for p in SHARED.iterdir() if p.is_dir() and p.name != "LICENSES") if SHARED.is_dir() else []
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.synth:
            job = Path(tmp) / "synth-32"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "lumos_core",
                    "synth",
                    str(job),
                    "--tp",
                    "8",
                    "--pp",
                    "4",
                    "--dp",
                    "1",
                    "--quiet",
                ],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
            folders.append(job)
        print(
            f"{'folder':<28} {'traces':>10} {'uncompr.':>10} {'cache':>10} {'cache/traces':>13} {'cache/uncompr.':>15}"
        )
        for folder in folders:
            try:
                stored, raw, cached = measure(folder)
            except Exception as exc:  # a folder the loader refuses (edge cases): say so, go on
                print(f"{folder.name:<28} not loadable: {exc}")
                continue
            rows.append((stored, raw, cached))
            print(
                f"{folder.name:<28} {stored / 1e6:9.1f}M {raw / 1e6:9.1f}M {cached / 1e6:9.1f}M "
                f"{cached / stored:12.1f}x {cached / raw:14.2f}x"
            )
    if rows:
        stored, raw, cached = (sum(r[i] for r in rows) for i in range(3))
        print(
            f"{'all':<28} {stored / 1e6:9.1f}M {raw / 1e6:9.1f}M {cached / 1e6:9.1f}M "
            f"{cached / stored:12.1f}x {cached / raw:14.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
