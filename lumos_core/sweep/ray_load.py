"""Parse a trace folder's rank files on a Ray cluster (``lumos inspect|replay|estimate --engine ray``).

Parsing is per rank and embarrassingly parallel; the graph and the simulation then run on this
machine from the parsed columns. Each Ray task parses one file and writes its columns into the cache
folder (``--cache-dir``: on a cluster, storage every machine sees), and this machine then opens
them memory-mapped, as it opens its own cache. When a worker cannot write there (a folder only this
machine has), it sends the columns back through Ray instead. The cluster connection is the one
``lumos sweep --engine ray`` uses (:class:`~lumos_core.sweep.engines.RayEngine`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lumos_core.sweep.engines import RayEngine
from lumos_core.trace import cache
from lumos_core.trace.loader import parse_one_file
from lumos_core.trace.model import RankTrace


def _parse_on_worker(path: str, root: str | None, use_cache: bool) -> RankTrace | str | None:
    """A Ray task: None once the columns are in the cache, else the RankTrace or why it failed."""
    folder = Path(root) if root else None
    outcome = parse_one_file(path, use_cache=False)
    if isinstance(outcome, str) or not use_cache:  # --no-cache: the columns come back through Ray
        return outcome
    cache.save(outcome, Path(path), folder)
    if cache.load(Path(path), folder) is not None:
        return None
    return outcome


class RayParser:
    """``load_job(..., parser=RayParser(...))``: yields (file, RankTrace | reason) as Ray finishes."""

    def __init__(self, address: str | None = None, jobs: int | None = None, root: Path | None = None) -> None:
        self.engine = RayEngine(address=address, jobs=jobs)
        self.root = root
        self.workers = 0

    def __call__(self, files: list[Path], use_cache: bool) -> Iterator[tuple[Path, RankTrace | str]]:
        if not files:
            return
        ray = self.engine.connect()
        self.workers = self.engine.workers
        task = ray.remote(num_cpus=1, max_retries=1)(_parse_on_worker)
        root = str(self.root) if self.root else str(cache.cache_dir())
        pending: dict[Any, Path] = {}
        waiting = sorted(files, key=lambda f: -f.stat().st_size)[::-1]  # largest first (pop from the end)
        limit = max(1, self.workers) * 2
        try:
            while waiting or pending:
                while waiting and len(pending) < limit:
                    f = waiting.pop()
                    pending[task.remote(str(f), root, use_cache)] = f
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    f = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        yield f, f"the Ray worker failed on this file ({type(exc).__name__})"
                        continue
                    if outcome is None:
                        outcome = (
                            cache.load(f, Path(root)) or "the worker's cached columns are not readable here"
                        )
                    yield f, outcome
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        self.engine.close()
