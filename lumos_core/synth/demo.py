"""The app's offline demo: a small synthetic job generated once into the user cache directory.

``lumos --demo`` opens :func:`demo_job_path`: an 8-rank TP2 x PP2 x DP2 GPT job (1.9 B parameters:
8 layers, hidden 4096, sequence 2048; 4 microbatches, 2 iterations of ~55 ms; ~1.5 MB, generated in
~0.2 s) that loads in well under a second. The model is big enough for the GPU to be the bottleneck,
so the timeline shows what Megatron's does: pipeline bubbles, two TP all-reduces per layer and
direction, and gradient reduce-scatters overlapping the last backward. It is generated on first use -- third-
party traces are never shipped -- into ``<cache>/demo-<hash>/`` (``LUMOS_CACHE_DIR`` or the
platform's user cache directory, never the install folder). Generation writes a temporary sibling
folder and renames it into place, so a crash or a concurrent start never leaves a half-written
demo; a folder without its completion marker or with missing ranks is regenerated. The hash covers
the generator version and the demo configuration, so a new Lumos version brings a fresh demo.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import orjson

from lumos_core.progress import Progress, no_progress
from lumos_core.synth import GENERATOR_VERSION, ModelSpec, SynthConfig, rank_file_name, synthesize
from lumos_core.trace import cache

__all__ = ["DEMO_CONFIG", "demo_job_path"]

DEMO_CONFIG = SynthConfig(
    model=ModelSpec("gpt-demo-1.9b", layers=8, hidden=4096, ffn=16384, heads=32, seq=2048, vocab=32000),
    tp=2,
    pp=2,
    dp=2,
    microbatches=4,
    micro_batch=1,
    schedule="1f1b",
    gpu="H100",
    iterations=2,
    seed=2025,
)
_MARKER = ".lumos-synth-complete"


def _folder_name(cfg: SynthConfig) -> str:
    ident = orjson.dumps(
        {"generator": GENERATOR_VERSION, "config": cfg.to_json()}, option=orjson.OPT_SORT_KEYS
    )
    return "demo-" + hashlib.sha256(ident).hexdigest()[:12]


def _is_complete(folder: Path, cfg: SynthConfig) -> bool:
    if not (folder / _MARKER).is_file():
        return False
    return all((folder / rank_file_name(r, cfg.world_size)).is_file() for r in range(cfg.world_size))


def demo_job_path(
    progress: Progress = no_progress, root: Path | None = None, cfg: SynthConfig = DEMO_CONFIG
) -> Path:
    """The demo trace folder, generated on first use (see the module doc)."""
    base = Path(root) if root is not None else cache.cache_dir()
    final = base / _folder_name(cfg)
    if _is_complete(final, cfg):
        with contextlib.suppress(OSError):  # used now: the cache's eviction keeps it longest
            os.utime(final / _MARKER)
        progress(1.0, "demo ready")
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=base))
    try:
        synthesize(cfg, tmp, progress, overwrite=True)
        (tmp / _MARKER).write_text(f"lumos synth generator {GENERATOR_VERSION}\n")
        if final.exists():  # incomplete leftovers of a crashed run, or a concurrent run finished first
            if _is_complete(final, cfg):
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if not _is_complete(final, cfg):  # lost a race to a writer that is not done: surface it
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
