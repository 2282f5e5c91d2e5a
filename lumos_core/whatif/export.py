"""Write timelines (predicted or measured) as Kineto/Chrome trace JSON, one file per rank.

The files open in ``lumos inspect``/``replay``, the app and Perfetto. They are marked as
predictions (``"lumos_predicted": true`` and in ``traceName``). Each event's arguments are copied
as the JSON bytes already kept by the loader, so nothing is decoded. Ranks that are copies of one
simulated rank (data-parallel replicas) share their event text: it is compressed once and every
copy's file is a small gzip member with its own header followed by that shared member (a gzip file
may hold several members; every reader concatenates them).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from lumos_core.errors import LumosError
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.model import Kind, RankTrace

_CATEGORY = {
    Kind.CPU_OP: "cpu_op",
    Kind.USER_ANNOTATION: "user_annotation",
    Kind.PYTHON_FUNCTION: "python_function",
    Kind.RUNTIME: "cuda_runtime",
    Kind.KERNEL: "kernel",
    Kind.MEMCPY: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset",
    Kind.GPU_ANNOTATION: "gpu_user_annotation",
    Kind.CUDA_SYNC: "cuda_sync",
    Kind.OTHER: "overhead",
}


def rank_file_name(rank: int, world: int) -> str:
    return f"rank{rank:0{max(3, len(str(world - 1)))}d}.pt.trace.json.gz"


def event_text(t: RankTrace) -> bytes:
    """The ``traceEvents`` entries of a rank (without brackets), times in µs from the job origin."""
    cat_json = [orjson.dumps(t.strings[c]) for c in range(len(t.strings))]
    name_json = cat_json  # same table
    kinds = t.kind.tolist()
    cats = t.cat.tolist()
    names = t.name.tolist()
    lanes = t.lane.tolist()
    starts = t.start.tolist()
    durs = t.dur.tolist()
    a_start = t.args_start.tolist()
    a_len = t.args_len.tolist()
    corrs = t.correlation.tolist()
    data = t.args_data.tobytes()
    lane_pid = [ln.pid if not ln.is_gpu else ln.device for ln in t.lanes]
    lane_tid = [ln.tid if not ln.is_gpu else ln.stream for ln in t.lanes]
    parts: list[bytes] = []
    for i in range(len(starts)):
        ln = lanes[i]
        cat = cat_json[cats[i]] if cats[i] >= 0 else orjson.dumps(_CATEGORY[Kind(kinds[i])])
        a = a_start[i]
        args = data[a : a + a_len[i]] or b"{}"
        if corrs[i] >= 0:  # a rewritten timeline renumbers launches: the column, not the old args, is right
            args = _with_correlation(args, corrs[i])
        parts.append(
            b'{"ph":"X","cat":%s,"name":%s,"pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f,"args":%s}'
            % (cat, name_json[names[i]], lane_pid[ln], lane_tid[ln], starts[i] / 1000, durs[i] / 1000, args)
        )
    for ln in t.lanes:
        meta = {
            "name": "thread_name",
            "ph": "M",
            "pid": lane_pid[ln.index],
            "tid": lane_tid[ln.index],
            "args": {"name": ln.name or (f"stream {ln.stream}" if ln.is_gpu else f"thread {ln.tid}")},
        }
        parts.append(orjson.dumps(meta))
    return b",\n".join(parts)


_CORRELATION = re.compile(rb'"correlation":\s*-?\d+')


def _with_correlation(args: bytes, corr: int) -> bytes:
    """``args`` (a JSON object) with its correlation id set to ``corr``."""
    field = b'"correlation":%d' % corr
    out, n = _CORRELATION.subn(field, args, count=1)
    if n:
        return out
    return b"{%s}" % field if args.strip() == b"{}" else b"{%s,%s" % (field, args.lstrip()[1:])


def _header(t: RankTrace, rank: int, world: int, extra: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v for k, v in t.metadata.items() if k in ("schemaVersion", "deviceProperties", "record_shapes")
    }
    info = (
        dict(t.metadata.get("distributedInfo") or {})
        if isinstance(t.metadata.get("distributedInfo"), dict)
        else {}
    )
    info.update({"rank": rank, "world_size": world})
    info.pop("pg_config", None)
    info.pop("pg_count", None)
    meta["distributedInfo"] = info
    meta["traceName"] = f"lumos prediction, rank {rank} of {world}"
    meta["lumos_predicted"] = True
    meta.update(extra)
    return meta


def write_job(
    ranks: Sequence[RankTrace],
    represents: dict[int, list[int]],
    out: str | Path,
    world: int,
    *,
    extra: dict[str, Any] | None = None,
    progress: Progress = no_progress,
    overwrite: bool = False,
) -> list[Path]:
    """Write one ``.pt.trace.json.gz`` per rank of the new job into ``out`` (created; atomic).

    ``ranks`` are the simulated ranks (their ``rank`` is a rank of the new job); ``represents`` maps
    each to every rank of the new job it stands for.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise LumosError(f"{out} is not empty: choose an empty folder (or remove it)")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    written: list[Path] = []
    total = sum(len(represents.get(t.rank, [t.rank])) for t in ranks)
    done = 0
    try:
        for t in ranks:
            body = b'"traceEvents": [\n' + event_text(t) + b"\n]}\n"
            body_gz = gzip.compress(body, compresslevel=1, mtime=0)
            for r in represents.get(t.rank, [t.rank]):
                header = orjson.dumps(_header(t, r, world, extra or {}))
                head = header[:-1] + b", "  # reopen the object: the events member continues it
                path = tmp / rank_file_name(r, world)
                with open(path, "wb") as fh:
                    fh.write(gzip.compress(head, compresslevel=1, mtime=0))
                    fh.write(body_gz)
                written.append(out / path.name)
                done += 1
                if done % 16 == 0 or done == total:
                    progress(done / total, f"wrote {done} of {total} rank files")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return written


def default_out_name(base: Path, label: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label).strip("-") or "prediction"
    return base / f"predicted-{safe}"


def first_events(path: str | Path, n: int = 3) -> list[dict[str, Any]]:
    """The first events of a written file (for tests and quick looks)."""
    with gzip.open(path) as fh:
        doc = orjson.loads(fh.read())
    return list(doc["traceEvents"][:n])


__all__ = ["default_out_name", "event_text", "first_events", "rank_file_name", "write_job"]
