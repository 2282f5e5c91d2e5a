"""Kineto event dicts -> the columns of a :class:`~lumos_core.trace.model.RankTrace`.

:class:`EventColumns` takes the events batch by batch in one pass (the dicts can be dropped after
each batch: the streaming reader never holds a whole file's tree); :func:`build_rank` sorts the
columns by lane and time, turns times into integer ns and derives what the rank implies.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any

import numpy as np
import orjson

from lumos_core.errors import TraceError
from lumos_core.trace.cuda_sync_args import extract_cuda_syncs
from lumos_core.trace.kineto_schema import CATEGORY_KIND, FLOW_CATEGORY, FLOW_OTHER, GPU_LANE_KINDS
from lumos_core.trace.memory import MEMORY_EVENT_NAME, MemoryColumns
from lumos_core.trace.model import Collectives, Kind, Lane, RankTrace
from lumos_core.trace.rank_analysis import analyse_rank

# Profiler window spans ("Trace" category) describe the recording, not work; they are not events.
_SKIPPED_CATEGORIES = frozenset({"Trace"})
# ASCII digits, at most 18: int() of the match always works and fits int64 (hostile tids exist).
_STREAM_NAME = re.compile(r"stream\s*(-?\d{1,18})(?!\d)", re.IGNORECASE | re.ASCII)
_MAX_SPAN_US = 1e12  # ~11.6 days: a longer span means corrupt timestamps, not a real recording
_I64 = 2**63
_MAX_TS_US = 2.0**64  # no clock counts µs beyond uint64: larger ts/dur values are corrupt


def _as_int(v: Any) -> int:
    """An integer id from an arg (int, integral float or numeric string), -1 when absent/invalid."""
    t = type(v)
    if t is int:
        return v if -_I64 <= v < _I64 else -1  # type: ignore[no-any-return]
    if t is float and math.isfinite(v) and v == int(v) and abs(v) < 2**63:
        return int(v)
    if t is str and _is_int_text(v):
        return int(v)
    return -1


def _is_int_text(s: str) -> bool:
    """A decimal integer that int() parses and int64 holds ("²" is a digit to isdigit(), not to int)."""
    d = s[1:] if s[:1] == "-" else s
    return 0 < len(d) <= 18 and d.isascii() and d.isdigit()


def _as_number(v: Any) -> float | int | None:
    """A finite number from a ts/dur field, or None. Strings holding numbers are accepted."""
    t = type(v)
    if t is int or t is float:
        return v if (t is int or math.isfinite(v)) else None  # type: ignore[no-any-return]
    if t is str:
        try:
            f = float(v)
        except ValueError:
            return None
        if not math.isfinite(f):
            return None
        return int(v) if v.strip().lstrip("-").isdigit() else f
    return None


def _dump_args(args: Any) -> bytes:
    try:
        return orjson.dumps(args)
    except TypeError:
        pass
    # Integers beyond 64 bits, lone surrogates (the stdlib JSON fallback lets both in) or nesting
    # deeper than orjson writes: store what RankTrace.args_of (orjson.loads) can read back - big
    # integers as floats, NaN as null, surrogates replaced - or a note when even that fails.
    try:
        text = json.dumps(args, default=str, ensure_ascii=False).encode("utf-8", "replace")
        return orjson.dumps(json.loads(text, parse_int=_int_or_float))
    except (TypeError, ValueError, RecursionError):
        return orjson.dumps({"lumos": "arguments not readable (nested too deeply)"})


def _int_or_float(s: str) -> int | float:
    return int(s) if len(s) <= 18 else float(s)


class _Interner:
    __slots__ = ("ids", "strings")

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []

    def __call__(self, s: Any) -> int:
        if type(s) is not str:
            s = "" if s is None else str(s)
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i


def _gpu_lane_key(pid: Any, tid: Any, args: Any) -> tuple[bool, Any, Any]:
    """GPU events' lane: (True, device, stream); args win over pid/tid ("stream 7" in legacy traces)."""
    device = stream = None
    if type(args) is dict:
        device = args.get("device")
        stream = args.get("stream")
    if type(device) is not int:
        device = pid if type(pid) is int else 0
    if type(stream) is not int:
        if type(tid) is int:
            stream = tid
        else:
            m = _STREAM_NAME.search(str(tid))
            stream = int(m.group(1)) if m else str(tid)
    return (True, device, stream)


def _numeric_id(v: Any) -> int:
    """pid/tid as an int64: ints stay, numeric strings convert, anything else (other strings, ints
    beyond int64) gets a stable hash."""
    if type(v) is int and -_I64 <= v < _I64:
        return v  # type: ignore[no-any-return]
    s = str(v)
    if _is_int_text(s):
        return int(s)
    # surrogatepass: the stdlib JSON fallback lets lone surrogates ("\ud800") into strings
    return -(zlib.crc32(s.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF) - 1  # negative: never a real OS id


class EventColumns:
    """Column lists being filled from event dicts, batch by batch."""

    def __init__(self) -> None:
        self.intern = _Interner()
        self.warnings: list[str] = []
        self.c_kind: list[int] = []
        self.c_cat: list[int] = []
        self.c_name: list[int] = []
        self.c_lane: list[int] = []
        self.c_ts: list[Any] = []
        self.c_dur: list[Any] = []
        self.c_corr: list[int] = []
        self.c_ext: list[int] = []
        self.c_args: list[int] = []  # start of the event's args in args_buf
        self.c_args_len: list[int] = []
        self.args_buf = bytearray()
        self.lane_ids: dict[tuple[bool, Any, Any], int] = {}
        self.f_kind: list[int] = []
        self.f_id: list[int] = []
        self.f_phase: list[int] = []
        self.f_ts: list[Any] = []
        self.f_lane: list[tuple[bool, Any, Any]] = []
        self.i_name: list[int] = []
        self.i_ts: list[Any] = []
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.memory = MemoryColumns()
        self.bad_time = self.neg_dur = self.other_phase = self.malformed = 0

    def add(self, events: list[Any]) -> None:
        """Convert a batch of event dicts (one pass; the dicts can be dropped afterwards).

        This loop runs once per event of every trace (tens of millions at 512 ranks), so it is
        written for CPython's speed: everything it uses is a local variable, a category's kind is
        looked up once per distinct category, names are interned through the dict directly, and
        the common field types (int/float times, int ids) are checked inline before the general
        converters run. Checks and the order of interning are the same as the general path's,
        so the columns do not depend on which path an event took."""
        intern = self.intern
        ids = intern.ids  # interned ids of strings seen so far (intern() adds new ones)
        c_kind = self.c_kind
        c_cat = self.c_cat
        c_name = self.c_name
        c_lane = self.c_lane
        c_ts = self.c_ts
        c_dur = self.c_dur
        c_corr = self.c_corr
        c_ext = self.c_ext
        c_args = self.c_args
        c_args_len = self.c_args_len
        args_buf = self.args_buf
        lane_ids = self.lane_ids
        f_kind = self.f_kind
        f_id = self.f_id
        f_phase = self.f_phase
        f_ts = self.f_ts
        f_lane = self.f_lane
        i_name = self.i_name
        i_ts = self.i_ts
        thread_names = self.thread_names
        bad_time, neg_dur, other_phase, malformed = (
            self.bad_time,
            self.neg_dur,
            self.other_phase,
            self.malformed,
        )
        kind_of = {cat: int(k) for cat, k in CATEGORY_KIND.items()}
        gpu_kinds = {int(k) for k in GPU_LANE_KINDS}
        other = int(Kind.OTHER)
        cat_kinds: dict[str, tuple[int, bool]] = {}  # category -> (kind, runs on a GPU stream)
        skipped = _SKIPPED_CATEGORIES
        flow_category = FLOW_CATEGORY
        flow_other = FLOW_OTHER
        dumps = orjson.dumps
        isfinite = math.isfinite
        as_number = _as_number
        as_int = _as_int
        lo_i64, hi_i64 = -_I64, _I64
        lo_ts, hi_ts = -_MAX_TS_US, _MAX_TS_US
        for e in events:
            if type(e) is not dict:
                continue
            try:
                ph = e.get("ph")
                if ph == "X":
                    cat = e.get("cat")
                    if cat in skipped:
                        continue
                    ts = e.get("ts")
                    dur = e.get("dur", 0)
                    t = type(ts)
                    if t is not float and t is not int:
                        ts = as_number(ts)
                        if ts is None:
                            bad_time += 1
                            continue
                    # NaN, infinite, or beyond any µs clock (float() of such ints overflows later)
                    if not lo_ts < ts < hi_ts:
                        bad_time += 1
                        continue
                    t = type(dur)
                    if t is not float and t is not int:
                        dur = as_number(dur)
                        if dur is None:
                            bad_time += 1
                            continue
                    if not dur >= 0:  # negative or NaN
                        neg_dur += 1
                        dur = 0
                    elif not dur < hi_ts:  # infinite or absurd: not a duration
                        bad_time += 1
                        continue
                    if type(cat) is str:
                        known = cat_kinds.get(cat)
                        if known is None:
                            kind = kind_of.get(cat, other)
                            known = cat_kinds[cat] = (kind, kind in gpu_kinds)
                        kind, on_gpu = known
                    else:
                        kind, on_gpu = other, other in gpu_kinds
                    args = e.get("args")
                    if on_gpu:
                        key = _gpu_lane_key(e.get("pid"), e.get("tid"), args)
                    else:
                        key = (False, e.get("pid"), e.get("tid"))
                    lane = lane_ids.get(key)
                    if lane is None:
                        lane = lane_ids[key] = len(lane_ids)
                    if type(args) is dict:
                        corr = args.get("correlation", -1)
                        ext = args.get("External id", -1)
                        if ext == -1:
                            ext = args.get("external id", -1)
                        # Ids beyond int64 (corrupt or hostile files) must not reach the int64
                        # columns as raw ints: _as_int turns them into -1 (no id).
                        c_corr.append(corr if type(corr) is int and lo_i64 <= corr < hi_i64 else as_int(corr))
                        c_ext.append(ext if type(ext) is int and lo_i64 <= ext < hi_i64 else as_int(ext))
                        if args:
                            try:
                                blob = dumps(args)
                            except TypeError:  # what orjson cannot write: _dump_args's fallbacks
                                blob = _dump_args(args)
                        else:
                            blob = b""
                    else:
                        c_corr.append(-1)
                        c_ext.append(-1)
                        blob = b"" if args is None else _dump_args({"args": args})
                    # One growing buffer: many small bytes objects would cost far more memory.
                    c_args.append(len(args_buf))
                    c_args_len.append(len(blob))
                    args_buf += blob
                    c_kind.append(kind)
                    i = ids.get(cat) if type(cat) is str else None
                    c_cat.append(intern(cat) if i is None else i)
                    name = e.get("name")
                    i = ids.get(name) if type(name) is str else None
                    c_name.append(intern(name) if i is None else i)
                    c_lane.append(lane)
                    c_ts.append(ts)
                    c_dur.append(dur)
                elif ph == "s" or ph == "f" or ph == "t":
                    ts = e.get("ts")
                    t = type(ts)
                    if t is not int and (t is not float or not isfinite(ts)):
                        ts = as_number(ts)
                    fid = e.get("id")
                    if type(fid) is not int or not lo_i64 <= fid < hi_i64:
                        fid = as_int(fid)
                    if ts is None or fid < 0:
                        continue
                    key = (False, e.get("pid"), e.get("tid"))
                    hash(key)
                    cat = e.get("cat")
                    f_kind.append(flow_category.get(cat, flow_other) if type(cat) is str else flow_other)
                    f_id.append(fid)
                    f_phase.append(0 if ph == "s" else 1)
                    f_ts.append(ts)
                    f_lane.append(key)
                elif ph == "M":
                    margs = e.get("args")
                    if e.get("name") == "thread_name" and type(margs) is dict:
                        key2 = (e.get("pid"), e.get("tid"))
                        name = str(margs.get("name", "")).strip()
                        # A thread can be named twice ("python", then "pt_autograd_0"): keep the telling one.
                        if name and (not thread_names.get(key2) or "autograd" in name):
                            thread_names[key2] = name
                elif ph == "i" or ph == "I":
                    ts = as_number(e.get("ts"))
                    if ts is None:
                        pass
                    elif e.get("name") == MEMORY_EVENT_NAME:
                        self.memory.add(ts, e)  # columns of their own, not instant markers
                    else:
                        i_name.append(intern(e.get("name")))
                        i_ts.append(ts)
                elif ph is not None:
                    other_phase += 1
            except (TypeError, ValueError, AttributeError, OverflowError):
                # Unhashable pid/tid, odd field types: skip the event, keep the file.
                malformed += 1
                n = len(c_ts)
                for col in (c_kind, c_cat, c_name, c_lane, c_ts, c_dur, c_corr, c_ext, c_args, c_args_len):
                    del col[n:]
        self.bad_time, self.neg_dur, self.other_phase, self.malformed = (
            bad_time,
            neg_dur,
            other_phase,
            malformed,
        )


def build_rank(cols: EventColumns, meta: dict[str, Any], path: str) -> RankTrace:
    """Sort the collected columns by lane and time, then derive what the rank implies."""
    intern, warnings = cols.intern, cols.warnings
    c_kind = cols.c_kind
    c_cat = cols.c_cat
    c_name = cols.c_name
    c_lane = cols.c_lane
    c_ts = cols.c_ts
    c_dur = cols.c_dur
    c_corr = cols.c_corr
    c_ext = cols.c_ext
    c_args = cols.c_args
    c_args_len = cols.c_args_len
    lane_ids = cols.lane_ids
    f_kind = cols.f_kind
    f_id = cols.f_id
    f_phase = cols.f_phase
    f_ts = cols.f_ts
    f_lane = cols.f_lane
    i_name = cols.i_name
    i_ts = cols.i_ts
    thread_names = cols.thread_names
    bad_time, neg_dur, other_phase, malformed = (
        cols.bad_time,
        cols.neg_dur,
        cols.other_phase,
        cols.malformed,
    )
    if malformed:
        warnings.append(f"skipped {malformed} malformed events (fields of the wrong type)")

    if not c_ts:
        raise TraceError("trace has no timed events (no complete 'X' events)", path)
    if bad_time:
        warnings.append(f"skipped {bad_time} events with a missing or non-numeric ts/dur")
    if neg_dur:
        warnings.append(f"{neg_dur} events had a negative or invalid duration; set to 0")
    if other_phase:
        warnings.append(f"ignored {other_phase} events of phases other than X/s/f/i/M")

    # ---- times: integer ns from the rank's first timestamp (keeps ns precision of float µs) ----
    # Each pass over the Python ts/dur lists chases pointers to floats scattered among the freed
    # event dicts: convert them once and reuse the arrays (they hold the same values float() gives).
    ts_f, ts_types = _as_floats(c_ts)
    dur_f, dur_types = _as_floats(c_dur)
    keep = _plausible_times(ts_f, dur_f)
    if keep is not None:
        warnings.append(
            f"skipped {len(c_ts) - len(keep)} events whose ts/dur lie years away from the rest "
            "(corrupt values)"
        )
        if not keep:  # every event lasts ~forever: nothing plausible is left to show
            raise TraceError("no event has a plausible duration (all last longer than 5 days)", path)
        c_kind, c_cat, c_name, c_lane, c_ts, c_dur, c_corr, c_ext, c_args, c_args_len = (
            [col[i] for i in keep]
            for col in (c_kind, c_cat, c_name, c_lane, c_ts, c_dur, c_corr, c_ext, c_args, c_args_len)
        )
        ts_f, ts_types = _as_floats(c_ts)
        dur_f, dur_types = _as_floats(c_dur)
    # All floats: the array holds them exactly; otherwise the exact minimum of the Python numbers.
    base_us = math.floor(ts_f.min() if ts_types == {float} else min(c_ts))
    ts_ns = _to_ns(c_ts, base_us, ts_f, ts_types)
    dur_ns = _to_ns(c_dur, 0, dur_f, dur_types)
    f_keep = [i for i, t in enumerate(f_ts) if abs(t - base_us) < _MAX_SPAN_US]
    if len(f_keep) < len(f_ts):
        f_kind, f_id, f_phase, f_ts, f_lane = (
            [col[i] for i in f_keep] for col in (f_kind, f_id, f_phase, f_ts, f_lane)
        )
    i_keep = [i for i, t in enumerate(i_ts) if abs(t - base_us) < _MAX_SPAN_US]
    if len(i_keep) < len(i_ts):
        i_name, i_ts = [i_name[i] for i in i_keep], [i_ts[i] for i in i_keep]
    base_ns_meta = meta.get("baseTimeNanoseconds")
    if type(base_ns_meta) is int and not 0 <= base_ns_meta < 2**62:
        # Beyond the year 2116: corrupt. Adding it would overflow the int64 time shifts.
        warnings.append(f"ignored an implausible baseTimeNanoseconds ({base_ns_meta})")
        base_ns_meta = 0
    raw_shift = base_us * 1000 + (base_ns_meta if type(base_ns_meta) is int and base_ns_meta > 0 else 0)

    kind_a = np.asarray(c_kind, np.int8)
    lane_a = np.asarray(c_lane, np.int32)
    order = np.lexsort((-dur_ns, ts_ns, lane_a))
    n_lanes = len(lane_ids)

    lanes = _make_lanes(lane_ids, thread_names)
    args_start = np.asarray(c_args, np.int64)[order]
    args_len = np.asarray(c_args_len, np.int32)[order]
    args_data = np.frombuffer(bytes(cols.args_buf), np.uint8)
    cols.args_buf = bytearray()
    lane_sorted = lane_a[order]
    lane_begin = np.searchsorted(lane_sorted, np.arange(n_lanes + 1)).astype(np.int64)

    n = len(order)
    rank = RankTrace(
        rank=-1,
        file=path,
        rank_source="",
        strings=intern.strings,
        lanes=lanes,
        kind=kind_a[order],
        cat=np.asarray(c_cat, np.int32)[order],
        name=np.asarray(c_name, np.int32)[order],
        lane=lane_sorted,
        start=ts_ns[order],
        dur=dur_ns[order],
        correlation=np.asarray(c_corr, np.int64)[order],
        external_id=np.asarray(c_ext, np.int64)[order],
        depth=np.zeros(n, np.int16),
        parent=np.full(n, -1, np.int32),
        launch=np.full(n, -1, np.int32),
        args_start=args_start,
        args_len=args_len,
        args_data=args_data,
        lane_begin=lane_begin,
        collectives=Collectives.empty(),
        flow_kind=np.asarray(f_kind, np.int8),
        flow_id=np.asarray(f_id, np.int64),
        flow_phase=np.asarray(f_phase, np.int8),
        flow_ts=_to_ns(f_ts, base_us),
        flow_event=np.full(len(f_ts), -1, np.int32),
        instant_name=np.asarray(i_name, np.int32),
        instant_ts=_to_ns(i_ts, base_us),
        iterations=[],
        metadata=_clean_metadata(meta),
        raw_shift_ns=raw_shift,
        warnings=warnings,
    )
    # A rank's flows come from a handful of threads: look each (thread, phase) up once.
    flow_lanes: dict[tuple[tuple[bool, Any, Any], int], tuple[int, int]] = {}
    for k, p in zip(f_lane, f_phase):
        if (k, p) not in flow_lanes:
            flow_lanes[k, p] = _flow_lane(k, p, lane_ids)
    analyse_rank(rank, flow_lanes=[flow_lanes[k, p] for k, p in zip(f_lane, f_phase)])
    rank.memory = cols.memory.build(
        base_us, lane_ids, rank.start, rank.dur, rank.lane, rank.lane_begin, rank.parent,
        _MAX_SPAN_US, warnings,
    )  # fmt: skip
    rank.cuda_syncs = extract_cuda_syncs(rank)
    return rank


def _flow_lane(
    key: tuple[bool, Any, Any], phase: int, lane_ids: dict[tuple[bool, Any, Any], int]
) -> tuple[int, int]:
    """Candidate lanes of a flow endpoint: its CPU thread and the GPU stream with the same ids.

    Flow events carry only pid/tid; a finishing ac2g endpoint usually sits on a stream."""
    _, pid, tid = key
    cpu = lane_ids.get((False, pid, tid), -1)
    stream = tid
    if type(stream) is not int:
        m = _STREAM_NAME.search(str(tid))
        stream = int(m.group(1)) if m else tid
    gpu = lane_ids.get((True, pid, stream), -1)
    return (gpu, cpu) if phase == 1 else (cpu, gpu)


def _as_floats(values: list[Any]) -> tuple[np.ndarray, set[type]]:
    """``values`` (ints and floats) as float64 (numpy converts an int as ``float()`` does) and the
    set of their types, in two C-level passes."""
    return np.asarray(values, np.float64), set(map(type, values))


def _plausible_times(ts_f: np.ndarray, dur_f: np.ndarray) -> list[int] | None:
    """Indices of events whose times are plausible, or None when all are (the common case).

    One corrupt timestamp must not make every other event unusable, so events lying more than
    about 11 days from the median start, or lasting longer than that, are dropped.
    """
    # The lower median is a real event's time, so that event at least is kept (the mean of two
    # far-apart timestamps would reject both).
    med = float(np.partition(ts_f, (len(ts_f) - 1) // 2)[(len(ts_f) - 1) // 2])
    ok = (np.abs(ts_f - med) < _MAX_SPAN_US / 2) & (dur_f < _MAX_SPAN_US / 2)
    if ok.all():
        return None
    return np.flatnonzero(ok).tolist()  # type: ignore[no-any-return]


def _to_ns(
    values: list[Any], base_us: int, floats: np.ndarray | None = None, types: set[type] | None = None
) -> np.ndarray:
    """µs values (ints or floats) minus ``base_us`` -> int64 ns, exact for ints, rounded for floats.

    ``floats``/``types``: the values as float64 and their types, when the caller has them."""
    if not values:
        return np.zeros(0, np.int64)
    all_int = types == {int} if types is not None else all(type(v) is int for v in values)
    if all_int:
        return (np.asarray([v - base_us for v in values], dtype=np.int64)) * 1000
    arr = (floats if floats is not None else np.asarray(values, dtype=np.float64)) - float(base_us)
    return np.rint(arr * 1000.0).astype(np.int64)


def _make_lanes(
    lane_ids: dict[tuple[bool, Any, Any], int], thread_names: dict[tuple[Any, Any], str]
) -> list[Lane]:
    lanes: list[Lane] = [None] * len(lane_ids)  # type: ignore[list-item]
    for (is_gpu, a, b), idx in lane_ids.items():
        if is_gpu:
            stream = _numeric_id(b)
            device = _numeric_id(a)
            lanes[idx] = Lane(
                index=idx,
                is_gpu=True,
                pid=device,
                tid=stream,
                name=f"stream {stream}",
                device=device,
                stream=stream,
            )
        else:
            lanes[idx] = Lane(
                index=idx,
                is_gpu=False,
                pid=_numeric_id(a),
                tid=_numeric_id(b),
                name=thread_names.get((a, b), ""),
            )
    return lanes


_KEEP_META = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "traceName",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "record_shapes",
    "with_stack",
    "with_modules",
    "with_flops",
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "trace_id",
)


def _clean_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys worth keeping (small); lumos_* keys from our own synthetic traces too."""
    out = {k: meta[k] for k in _KEEP_META if k in meta}
    out.update({k: v for k, v in meta.items() if k.startswith("lumos_")})
    return out
