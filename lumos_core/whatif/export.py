"""Write timelines (predicted or measured) as Kineto trace JSON, one file per rank.

The files are written the way Kineto writes them (:mod:`lumos_core.trace.kineto_text`: key order,
spacing, event layout), so HTA, Perfetto and TraceLens read them like a measured job, and
``lumos inspect``/``replay`` and the app open them. ``distributedInfo`` describes the *new* job:
its rank, world size, backend and process groups (``pg_count``/``pg_config``, numbered as PyTorch
and Megatron do, :mod:`lumos_core.trace.process_groups`); collectives' ``Process Group`` args name
the rank's group of the new job. They are marked as predictions (``"lumos_predicted": true`` and in
``traceName``). Other event arguments are copied as the JSON bytes the loader kept.

Ranks that are copies of one simulated rank (data-parallel replicas) share their event text when
their collectives' groups allow it: it is compressed once and every copy's file is a small gzip
member with its own header followed by that shared member (a gzip file may hold several members;
every reader concatenates them).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from lumos_core.errors import ConfigError, LumosError
from lumos_core.perf.hardware import get_gpu
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.kineto_text import event_bytes, header_bytes, metadata_event_bytes, trailer_bytes
from lumos_core.trace.model import Kind, RankTrace
from lumos_core.trace.process_groups import GroupLayout
from lumos_core.whatif.config import JobConfig

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


def event_text(t: RankTrace, patched_args: dict[int, bytes] | None = None) -> bytes:
    """The ``traceEvents`` entries of a rank (without brackets), times in µs from the job origin.
    ``patched_args``: event -> replacement args (JSON bytes)."""
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
    patched = patched_args or {}
    lane_pid = [ln.pid if not ln.is_gpu else ln.device for ln in t.lanes]
    lane_tid = [ln.tid if not ln.is_gpu else ln.stream for ln in t.lanes]
    parts: list[bytes] = []
    for i in range(len(starts)):
        ln = lanes[i]
        cat = cat_json[cats[i]] if cats[i] >= 0 else orjson.dumps(_CATEGORY[Kind(kinds[i])])
        a = a_start[i]
        args = patched.get(i) or data[a : a + a_len[i]] or b"{}"
        if corrs[i] >= 0:  # a rewritten timeline renumbers launches: the column, not the old args, is right
            args = _with_correlation(args, corrs[i])
        parts.append(
            event_bytes(
                cat, name_json[names[i]], lane_pid[ln], lane_tid[ln], starts[i] / 1000, durs[i] / 1000, args
            )
        )
    for ln in t.lanes:
        name = ln.name or (f"stream {ln.stream}" if ln.is_gpu else f"thread {ln.tid}")
        parts.append(
            metadata_event_bytes("thread_name", lane_pid[ln.index], lane_tid[ln.index], {"name": name})
        )
    return b",\n".join(parts)


def collective_arg_events(t: RankTrace) -> list[int]:
    """Events whose args describe a collective's process group (kernels, record_param_comms)."""
    data = t.args_data.tobytes()
    out = []
    for i, (a, n) in enumerate(zip(t.args_start.tolist(), t.args_len.tolist())):
        if n and data.find(b'"Process Group Name"', a, a + n) >= 0:
            out.append(i)
    return out


def _patch_groups(
    t: RankTrace, events: list[int], rank: int, layout: GroupLayout, role_of: Callable[[str], str]
) -> dict[int, bytes]:
    """New args of the collective events of ``t`` as rank ``rank`` of the new job sees them."""
    out: dict[int, bytes] = {}
    for e in events:
        args = t.args_of(e)
        role = role_of(str(args.get("Process Group Name")))
        if not role:
            continue
        g = layout.group_of_role(rank, role)
        args["Process Group Name"] = g.name
        args["Process Group Description"] = g.desc
        args["Process Group Ranks"] = g.ranks_text
        args["Group size"] = g.size
        out[e] = orjson.dumps(args)
    return out


_CORRELATION = re.compile(rb'"correlation":\s*-?\d+')


def _with_correlation(args: bytes, corr: int) -> bytes:
    """``args`` (a JSON object) with its correlation id set to ``corr``."""
    field = b'"correlation":%d' % corr
    out, n = _CORRELATION.subn(field, args, count=1)
    if n:
        return out
    return b"{%s}" % field if args.strip() == b"{}" else b"{%s,%s" % (field, args.lstrip()[1:])


def _backend(t: RankTrace) -> str:
    info = t.metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("backend"), str):
        return info["backend"]
    # A job recorded without GPUs (no deviceProperties) ran gloo, even where a rewrite added a
    # communication stream to show its new collectives.
    return "nccl" if t.metadata.get("deviceProperties") else "gloo"


def _device_properties(t: RankTrace, gpu: str | None) -> list[Any]:
    """The source's deviceProperties, renamed to ``gpu`` when the prediction is for another GPU."""
    props = [dict(p) for p in (t.metadata.get("deviceProperties") or []) if isinstance(p, dict)]
    if not gpu or not props:
        return props
    try:
        profile = get_gpu(gpu)
    except ConfigError:
        return props
    if get_gpu_name(props[0].get("name")) == profile.name:
        return props
    for p in props:
        p["name"] = profile.device_name
        p["totalGlobalMem"] = profile.memory_bytes
        p["computeMajor"], p["computeMinor"] = profile.compute_capability
        p["numSms"] = profile.sm_count
    return props


def get_gpu_name(device: Any) -> str | None:
    try:
        return get_gpu(str(device)).name
    except ConfigError:
        return None


def _header(
    t: RankTrace, rank: int, world: int, layout: GroupLayout, gpu: str | None, extra: dict[str, Any]
) -> dict[str, Any]:
    source = t.metadata
    backend = _backend(t)
    groups = [g.config() for g in layout.groups_of(rank)]
    for g in groups:
        g["backend_config"] = "cuda:nccl" if backend == "nccl" else f"cpu:{backend}"
    info: dict[str, Any] = {
        "backend": backend,
        "rank": rank,
        "world_size": world,
        "pg_count": len(groups),
        "pg_config": groups,
    }
    src_info = source.get("distributedInfo")
    if isinstance(src_info, dict) and "nccl_version" in src_info:
        info["nccl_version"] = src_info["nccl_version"]
    meta: dict[str, Any] = {
        "schemaVersion": source.get("schemaVersion", 1),
        "deviceProperties": _device_properties(t, gpu),
        "distributedInfo": info,
        "record_shapes": source.get("record_shapes", 1),
        "trace_id": f"LUMOS{world:08X}{rank:08X}",
        "displayTimeUnit": "ms",
        "lumos_predicted": True,
    }
    meta.update(extra)
    return meta


def refuse_inside_traces(out: str | Path, traces: str | Path | None) -> None:
    """Raise when ``out`` is the traced job's folder or inside it: trace folders are read-only for
    Lumos (a prediction written there would also be loaded as ranks of the traced job next time).
    ``traces`` is the folder (or one trace file, whose folder counts) that was loaded."""
    if traces is None:
        return
    src = Path(traces).resolve()
    if src.is_file():
        src = src.parent
    dst = Path(out).resolve()  # resolves symlinks and "..", so no spelling slips past
    if dst == src or src in dst.parents:
        raise LumosError(
            f"--out {out} is inside the input trace folder {traces}: trace folders are read-only for "
            "Lumos; choose a folder outside it"
        )


def write_job(
    ranks: Sequence[RankTrace],
    represents: dict[int, list[int]],
    out: str | Path,
    world: int,
    *,
    config: JobConfig | None = None,
    roles: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    progress: Progress = no_progress,
    overwrite: bool = False,
) -> list[Path]:
    """Write one ``.pt.trace.json.gz`` per rank of the new job into ``out`` (created; atomic).

    ``ranks`` are the simulated ranks (their ``rank`` is a rank of the new job); ``represents`` maps
    each to every rank of the new job it stands for. ``config`` is the new job's configuration (its
    process groups; without it, from ``extra["lumos_estimate_config"]``, else one data-parallel
    group of every rank). ``roles`` maps the traced process-group names to "tp"/"dp"/"pp"/"world"
    (:func:`lumos_core.whatif.baseline.group_roles`) so collectives name their new groups; without
    it, a configuration without TP and PP puts every collective on its data-parallel group and
    other jobs keep the recorded group args. Rebuilt schedules (pipeline, microbatch, layer
    changes) name each collective's group after the simulated ranks in it (so a reloaded
    prediction joins the right kernels); those names are kept.
    """
    extra = dict(extra or {})
    if config is None and isinstance(extra.get("lumos_estimate_config"), dict):
        config = JobConfig.from_dict(extra["lumos_estimate_config"])
    if config is not None and config.world_size == world:
        layout = GroupLayout(config.tp, config.dp, config.pp, cp=config.cp)
    else:
        layout = GroupLayout(1, world, 1)
    role_of: Callable[[str], str] | None = None
    if roles is not None:
        role_of = lambda name: roles.get(name, "")  # noqa: E731
    elif config is not None and config.tp == config.pp == 1 and config.world_size == world:
        role_of = lambda _name: "dp"  # noqa: E731  every group is the data-parallel one
    gpu = config.gpu if config is not None else None
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise LumosError(f"{out} is not empty: choose an empty folder (or remove it)")
        shutil.rmtree(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as exc:  # name the folder asked for, not the temporary one beside it
        raise LumosError(f"{out}: cannot write the predicted traces there ({exc.strerror or exc})") from exc
    written: list[Path] = []
    total = sum(len(represents.get(t.rank, [t.rank])) for t in ranks)
    done = 0
    trailer = trailer_bytes({"traceName": "lumos prediction (not measured)"})
    try:
        for t in ranks:
            coll = collective_arg_events(t) if role_of else []
            bodies: dict[tuple[int, ...], bytes] = {}
            for r in represents.get(t.rank, [t.rank]):
                # Copies whose collectives sit in the same groups share one compressed body.
                key = tuple(layout.group_of_role(r, x).index for x in ("tp", "dp", "pp")) if coll else ()
                body_gz = bodies.get(key)
                if body_gz is None:
                    patch = _patch_groups(t, coll, r, layout, role_of) if role_of and coll else None
                    body_gz = gzip.compress(event_text(t, patch) + trailer, compresslevel=1, mtime=0)
                    bodies[key] = body_gz
                head = header_bytes(_header(t, r, world, layout, gpu, extra))
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


__all__ = [
    "default_out_name",
    "event_text",
    "first_events",
    "rank_file_name",
    "refuse_inside_traces",
    "write_job",
]
