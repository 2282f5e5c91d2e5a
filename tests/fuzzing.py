"""Fuzzing helpers for tests/test_fuzz_loader.py and bench/fuzz_loader.py.

Seeds are small windows cut from the real traces in ``../shared/traces`` (plus hand-made ones from
:mod:`tracegen`, so the suite also runs without them). Mutations work on the parsed event lists
(what the converter sees: deleted fields, wrong types, reordering, duplicated or missing launches,
collectives on only some ranks, event-wait cycles) and on the trace *text* and its container (what
the streaming parser sees: truncation, non-UTF-8 bytes, NaN literals, broken gzip).

:func:`check_path` is the oracle: loading either succeeds (and then the graph builds or says
``GraphError``, and a replay finishes) or fails with a :class:`LumosError` whose one-line message
names the file - never another exception, a "Lumos bug" message, or more than ``LIMIT_S`` seconds.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import math
import os
import random
import resource
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from conftest import HAVE_SHARED, shared
from tracegen import TraceBuilder, nccl_args

from lumos_core.errors import GraphError, LumosError
from lumos_core.graph.build import build_graph
from lumos_core.replay.run import replay
from lumos_core.replay.simulate import simulate
from lumos_core.trace.loader import load_job

# Wall-clock bound of one input (load + graph + replay of a few thousand events takes well under 1 s).
LIMIT_S = float(os.environ.get("LUMOS_FUZZ_LIMIT_S", "20"))
# Address space one input may add (the seeds are a few hundred kB of JSON; the loader needs MBs).
LIMIT_BYTES = int(float(os.environ.get("LUMOS_FUZZ_LIMIT_GB", "3")) * 2**30)
SEED_EVENTS = 700  # timed events per seed window


class Hang(Exception):
    """An input took longer than LIMIT_S: a hang, never an acceptable outcome."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM; Linux/macOS)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"input not handled within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextmanager
def memory_limit(extra_bytes: int) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``extra_bytes`` (RLIMIT_AS), so an
    input that makes the loader allocate without bound raises MemoryError instead of meeting the
    OOM killer. The previous limit is restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as fh:
            vm = int(fh.read().split()[0]) * resource.getpagesize()
    except OSError:  # not Linux: no cap
        yield
        return
    cap = vm + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ------------------------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Seed:
    """One rank's trace: its top-level keys and its events (never mutated in place)."""

    name: str
    meta: dict[str, Any]
    events: list[Any]

    def doc(self) -> dict[str, Any]:
        return {**copy.deepcopy(self.meta), "traceEvents": copy.deepcopy(self.events)}


# (folder, glob) of real files; multi-rank groups are cut on one common time window.
_REAL_SINGLE = [
    ("h100-nanogpt-8rank", "*rank1-*"),
    ("dlrm-v100-8rank", "worker0_*"),
    ("a100-ddp-2rank", "rank0*"),
    ("hta-critical-path", "event_sync_multi_stream*"),
    ("hta-critical-path", "simple_add*"),
    ("hta-critical-path", "alexnet*"),
    ("h100-hf-inference", "gaunernst*"),
    ("edge-cases", "backward_thread_plain.json"),
    ("edge-cases", "large_integer.json.gz"),
    ("edge-cases", "legacy_pytorch18*"),
    ("edge-cases", "no_rank*"),
    ("edge-cases", "rocm_*"),
    ("edge-cases", "triton_*"),
    ("edge-cases", "sampled_no_flows_rank-0*"),
]
_REAL_GROUPS = {
    "nanogpt3": ("h100-nanogpt-8rank", ["*rank0-*", "*rank1-*", "*rank2-*"]),
    "dlrm3": ("dlrm-v100-8rank", ["worker0_*", "worker1_*", "worker2_*"]),
}


def _read_doc(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # NaN literals, integers beyond 64 bits
        return json.loads(data)


def _split(doc: Any) -> tuple[dict[str, Any], list[Any]]:
    if isinstance(doc, list):
        return {}, doc
    return {k: v for k, v in doc.items() if k != "traceEvents"}, doc["traceEvents"]


def _timed(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and e.get("ph") in ("X", "s", "f", "t", "i", "I")
        and isinstance(e.get("ts"), (int, float))
    )


def _window(events: list[Any], t0: float, t1: float) -> list[Any]:
    """Events whose ts lies in [t0, t1] plus every metadata ('M') event, in file order."""
    return [
        e
        for e in events
        if (_timed(e) and t0 <= e["ts"] <= t1) or (isinstance(e, dict) and e.get("ph") == "M")
    ]


def _busy_window(events: list[Any], n: int) -> tuple[float, float]:
    """A time window holding about ``n`` timed events, in the middle of the recording."""
    ts = sorted(e["ts"] for e in events if _timed(e))
    if len(ts) <= n:
        return (ts[0], ts[-1]) if ts else (0.0, 0.0)
    a = (len(ts) - n) // 2
    return ts[a], ts[a + n - 1]


@functools.lru_cache(maxsize=1)
def real_seeds() -> tuple[Seed, ...]:
    if not HAVE_SHARED:
        return ()
    out = []
    for folder, pattern in _REAL_SINGLE:
        matches = sorted(shared(folder).glob(pattern))
        if not matches:
            continue
        meta, events = _split(_read_doc(matches[0]))
        t0, t1 = _busy_window(events, SEED_EVENTS)
        out.append(Seed(f"{folder}/{matches[0].name}", meta, _window(events, t0, t1)))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def real_groups() -> dict[str, tuple[Seed, ...]]:
    """Multi-rank seeds: the same time window of several ranks (their collectives match)."""
    if not HAVE_SHARED:
        return {}
    out = {}
    for key, (folder, patterns) in _REAL_GROUPS.items():
        docs = [(p, _split(_read_doc(sorted(shared(folder).glob(p))[0]))) for p in patterns]
        t0, t1 = _busy_window(docs[0][1][1], SEED_EVENTS)
        out[key] = tuple(Seed(f"{key}/{p}", meta, _window(ev, t0, t1)) for p, (meta, ev) in docs)
    return out


def _synthetic_rank(rank: int, world: int, with_collective: bool = True) -> Seed:
    """A small hand-made rank: a step, kernels on two streams, an event wait, an all-reduce."""
    b = TraceBuilder(rank=rank, world=world)
    b.step(1, 1000, 400)
    b.cpu("aten::mm", 1010, 20)
    b.launch("gemm_a", 1012, 5, 1030, 40, stream=7)
    b.launch("gemm_b", 1040, 5, 1071, 30, stream=7)
    rec = b.runtime("cudaEventRecord", 1050, 2)
    wait = b.runtime("cudaStreamWaitEvent", 1053, 2)
    b.sync_event(
        "Stream Wait Event",
        1053,
        stream=13,
        corr=wait,
        wait_on_stream=7,
        wait_on_cuda_event_record_corr_id=rec,
    )
    if with_collective:
        b.launch(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            1060,
            5,
            1102,
            50,
            stream=13,
            kargs=nccl_args("allreduce", seq=0, size=world),
        )
    b.launch("gemm_c", 1070, 5, 1160, 20, stream=7)
    sync = b.runtime("cudaStreamSynchronize", 1080, 110)
    b.sync_event("Stream Sync", 1185, stream=7, corr=sync)
    return Seed(f"synthetic/rank{rank}", {k: v for k, v in b.doc().items() if k != "traceEvents"}, b.events)


def synthetic_seeds() -> tuple[Seed, ...]:
    return (_synthetic_rank(0, 1, with_collective=False),)


def synthetic_group() -> tuple[Seed, ...]:
    return tuple(_synthetic_rank(r, 2) for r in range(2))


def all_seeds() -> tuple[Seed, ...]:
    return real_seeds() + synthetic_seeds()


def all_groups() -> dict[str, tuple[Seed, ...]]:
    return {**real_groups(), "synthetic2": synthetic_group()}


# ---------------------------------------------------------------------------- event-list mutations

# Values a field should never hold, and a few it may (numbers as strings are accepted by design).
HOSTILE_VALUES: list[Any] = [
    "12.5",
    "abc",
    "",
    "-7",
    "1e400",
    "NaN",
    "\u00b2",  # a digit to str.isdigit(), not to int()
    "9" * 5000,  # beyond int()'s default digit limit
    "\ud800",  # a lone surrogate (the stdlib JSON fallback lets it through)
    "stream 99999999999999999999999",
    -5,
    -1e300,
    0,
    1e-9,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    2**63 - 1,
    2**63,
    2**64 + 1,
    -(2**70),
    10**30,
    10**400,  # beyond float range: float() of it overflows
    1e300,
    True,
    None,
    [],
    {},
    [1, 2],
    {"a": 1},
    [[[[[[[[[[1]]]]]]]]]],
    functools.reduce(lambda v, _: [v], range(300), 1),  # deeper than orjson writes (254)
]
EVENT_KEYS = ["ts", "dur", "ph", "cat", "name", "args", "pid", "tid", "id", "bp"]
ARG_KEYS = [
    "correlation",
    "External id",
    "device",
    "stream",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Group size",
    "Process Group Name",
    "Process Group Ranks",
    "Seq",
    "cuda_sync_kind",
    "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
]
META_KEYS = ["distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion", "traceName"]
PHASES = ["X", "x", "B", "E", "i", "s", "f", "M", "C", "", None, 1]


def _pick(events: list[Any], i: int) -> Any:
    return events[i % len(events)] if events else None


def _is_cat(e: Any, *cats: str) -> bool:
    return isinstance(e, dict) and e.get("cat") in cats


def apply_event_plan(doc: dict[str, Any], plan: list[tuple[Any, ...]]) -> dict[str, Any] | list[Any]:
    """Apply mutations (op, *params) to a trace document; returns the new document.

    Integer parameters index events modulo the list's length, so any plan applies to any seed.
    """
    events: list[Any] = doc["traceEvents"]
    for op, *p in plan:
        if op == "set":  # (index, key, value): a field of the wrong type or value
            e = _pick(events, p[0])
            if isinstance(e, dict):
                e[p[1]] = copy.deepcopy(p[2])
        elif op == "set_arg":
            e = _pick(events, p[0])
            if isinstance(e, dict):
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"][p[1]] = copy.deepcopy(p[2])
        elif op == "set_arg_where":  # (name substring, index, key, value): e.g. NCCL kernels' args
            hits = [e for e in events if isinstance(e, dict) and p[0] in str(e.get("name", "")).lower()]
            e = _pick(hits, p[1])
            if isinstance(e, dict):
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"][p[2]] = copy.deepcopy(p[3])
        elif op == "set_all":  # (key, value) on every event: e.g. every 'dur' absurd
            for e in events:
                if isinstance(e, dict):
                    e[p[0]] = copy.deepcopy(p[1])
        elif op == "shift_all":  # (delta_us): the whole rank on another time base
            for e in events:
                if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and math.isfinite(e["ts"]):
                    e["ts"] = e["ts"] + p[0]
        elif op == "del":
            e = _pick(events, p[0])
            if isinstance(e, dict):
                e.pop(p[1], None)
        elif op == "del_arg":
            e = _pick(events, p[0])
            if isinstance(e, dict) and isinstance(e.get("args"), dict):
                e["args"].pop(p[1], None)
        elif op == "del_key_everywhere":  # e.g. every 'dur', every 'correlation'
            for e in events:
                if isinstance(e, dict):
                    e.pop(p[0], None)
                    if isinstance(e.get("args"), dict):
                        e["args"].pop(p[0], None)
        elif op == "shuffle":
            random.Random(p[0]).shuffle(events)
        elif op == "reverse":
            events.reverse()
        elif op == "dup":  # (start, count): the same events twice (same correlation ids)
            a = p[0] % max(len(events), 1)
            events.extend(copy.deepcopy(events[a : a + p[1]]))
        elif op == "same_corr":  # every runtime call / activity gets one correlation id
            for e in events:
                if isinstance(e, dict) and isinstance(e.get("args"), dict) and "correlation" in e["args"]:
                    e["args"]["correlation"] = p[0]
        elif op == "drop_cat":  # kernels without launches, launches without kernels, no collectives
            cats = set(p[0])
            events[:] = [e for e in events if not _is_cat(e, *cats)]
        elif op == "drop_name":
            events[:] = [
                e for e in events if not (isinstance(e, dict) and p[0] in str(e.get("name", "")).lower())
            ]
        elif op == "drop_some":  # (seed, fraction)
            rng = random.Random(p[0])
            events[:] = [e for e in events if rng.random() >= p[1]]
        elif op == "shift":  # (index, count, delta_us): a block of events moved in time
            a = p[0] % max(len(events), 1)
            for e in events[a : a + p[1]]:
                if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and math.isfinite(e["ts"]):
                    e["ts"] = e["ts"] + p[2]
        elif op == "insert":  # (index, junk): a non-event item
            events.insert(p[0] % (len(events) + 1), copy.deepcopy(p[1]))
        elif op == "ph":
            e = _pick(events, p[0])
            if isinstance(e, dict):
                e["ph"] = p[1]
        elif op == "meta":  # (key, value)
            doc[p[0]] = copy.deepcopy(p[1])
        elif op == "meta_info":  # (key, value) inside distributedInfo
            info = doc.get("distributedInfo")
            if not isinstance(info, dict):
                info = doc["distributedInfo"] = {}
            info[p[0]] = copy.deepcopy(p[1])
        elif op == "wait_cycle":  # cuda_sync waits pairing streams A<->B around the same launches
            events.extend(wait_cycle_events(events, p[0]))
        elif op == "as_list":  # the Chrome "array format": the document is the event list
            return events
        else:
            raise ValueError(f"unknown mutation {op!r}")
    return doc


def wait_cycle_events(events: list[Any], salt: int) -> list[dict[str, Any]]:
    """cudaStreamWaitEvent pairs that make stream A wait for B and B for A, records after waits.

    Two kernels on different streams are picked; just before the first of their launches, stream A
    starts waiting for an event recorded on B and B for one recorded on A, and both records come
    after both launches. Paired exactly (``cuda_sync`` events name the record), the edges go
    kernel_B -> kernel_A and kernel_A -> kernel_B: a cycle.
    """
    kernels = [
        e
        for e in events
        if _is_cat(e, "kernel")
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("args"), dict)
        and isinstance(e["args"].get("stream"), int)
    ]
    by_stream: dict[int, list[dict[str, Any]]] = {}
    for e in kernels:
        by_stream.setdefault(e["args"]["stream"], []).append(e)
    if len(by_stream) < 2:
        return []
    streams = sorted(by_stream)
    a = streams[salt % len(streams)]
    b = streams[(salt + 1) % len(streams)]
    ka = by_stream[a][salt % len(by_stream[a])]
    kb = by_stream[b][salt % len(by_stream[b])]
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if _is_cat(e, "cuda_runtime", "cuda_driver")
        and isinstance(e.get("args"), dict)
        and isinstance(e["args"].get("correlation"), int)
    }
    launch_ts = []
    for k in (ka, kb):
        corr = k["args"].get("correlation")
        call = calls.get(corr) if isinstance(corr, int) else None
        ts = call.get("ts") if call is not None else None
        launch_ts.append(float(ts) if isinstance(ts, (int, float)) and math.isfinite(ts) else float(k["ts"]))
    t_wait, t_rec = min(launch_ts) - 0.5, max(launch_ts) + 0.5
    cpu = next((e for e in events if _is_cat(e, "cuda_runtime") and "pid" in e and "tid" in e), {})
    pid, tid = cpu.get("pid", 1), cpu.get("tid", 1)
    dev = ka["args"].get("device", 0)
    base = 9_000_000 + 10 * (salt % 1000)
    out: list[dict[str, Any]] = []
    for k, (waiting, recorded) in enumerate(((a, b), (b, a))):
        wait_corr, rec_corr = base + 2 * k, base + 2 * k + 1
        out.append(_call("cudaStreamWaitEvent", pid, tid, t_wait + 0.1 * k, wait_corr))
        out.append(_call("cudaEventRecord", pid, tid, t_rec + 0.1 * k, rec_corr))
        out.append(
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": dev, "tid": waiting,
             "ts": t_wait + 0.1 * k, "dur": 0, "args": {"cuda_sync_kind": "Stream Wait Event",
             "device": dev, "stream": waiting, "correlation": wait_corr, "wait_on_stream": recorded,
             "wait_on_cuda_event_record_corr_id": base + 2 * (1 - k) + 1}}
        )  # fmt: skip
    return out


def _call(name: str, pid: Any, tid: Any, ts: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 0.05,
            "args": {"correlation": corr}}  # fmt: skip


# ------------------------------------------------------------------------------ text mutations


def serialize(doc: Any, style: int = 0) -> bytes:
    """The document as JSON text; NaN/Infinity are written as bare literals, as some writers do."""
    if style == 1:
        return json.dumps(doc, indent=1).encode()
    if style == 2:  # traceEvents last, no spaces
        if isinstance(doc, dict):
            doc = {
                **{k: v for k, v in doc.items() if k != "traceEvents"},
                "traceEvents": doc.get("traceEvents"),
            }
        return json.dumps(doc, separators=(",", ":")).encode()
    if style == 3 and isinstance(doc, dict):  # traceEvents first
        doc = {"traceEvents": doc.get("traceEvents"), **{k: v for k, v in doc.items() if k != "traceEvents"}}
    return json.dumps(doc).encode()


_NUMBER_LITERALS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"123456789012345678901234567890",
    b"-0",
    b"1E2",
]


def apply_text_plan(data: bytes, plan: list[tuple[Any, ...]]) -> bytes:
    """Byte-level mutations of the trace text; offsets are taken modulo the text length."""
    for op, *p in plan:
        n = max(len(data), 1)
        if op == "truncate":
            data = data[: p[0] % n]
        elif op == "insert":
            i = p[0] % n
            data = data[:i] + p[1] + data[i:]
        elif op == "overwrite":
            i = p[0] % n
            data = data[:i] + p[1] + data[i + len(p[1]) :]
        elif op == "delete":
            i = p[0] % n
            data = data[:i] + data[i + p[1] :]
        elif op == "duplicate":
            i = p[0] % n
            data = data[:i] + data[i : i + p[1]] + data[i:]
        elif op == "number":  # the k-th number after offset -> a literal orjson rejects
            i = p[0] % n
            j = _next_number(data, i)
            if j is not None:
                a, b = j
                data = data[:a] + p[1] + data[b:]
        elif op == "prefix":
            data = p[0] + data
        elif op == "suffix":
            data = data + p[0]
        else:
            raise ValueError(f"unknown text mutation {op!r}")
    return data


def _next_number(data: bytes, start: int) -> tuple[int, int] | None:
    """Span of the first JSON number value (after ': ') at or after ``start``."""
    i = data.find(b": ", start)
    while i >= 0:
        a = i + 2
        b = a
        while b < len(data) and data[b : b + 1] in b"-+.0123456789eE":
            b += 1
        if b > a:
            return a, b
        i = data.find(b": ", a)
    return None


def containerize(data: bytes, how: str) -> tuple[bytes, str]:
    """(file bytes, suffix) for a container variant of the text."""
    if how == "json":
        return data, ".json"
    gz = gzip.compress(data, compresslevel=1, mtime=0)
    if how == "gz":
        return gz, ".json.gz"
    if how == "gz_truncated":
        return gz[: max(len(gz) * 2 // 3, 11)], ".json.gz"
    if how == "gz_corrupt":  # a flipped byte in the deflate stream (CRC or inflate error)
        i = len(gz) // 2
        return gz[:i] + bytes([gz[i] ^ 0x55]) + gz[i + 1 :], ".json.gz"
    if how == "gz_bad_crc":
        return gz[:-8] + bytes(4) + gz[-4:], ".json.gz"
    if how == "gz_not_gzip":  # named .gz, plain text inside
        return data, ".json.gz"
    if how == "gz_magic_only":  # gzip magic, then garbage: "a gzip that is not gzip"
        return b"\x1f\x8b" + data[:200], ".json.gz"
    if how == "gz_twice":
        return gzip.compress(gz, mtime=0), ".json.gz"
    if how == "gz_trailing":  # valid member followed by junk
        return gz + b"\x00garbage", ".json.gz"
    if how == "gz_as_json":  # gzip data in a file named .json
        return gz, ".json"
    raise ValueError(how)


CONTAINERS = [
    "json",
    "gz",
    "gz_truncated",
    "gz_corrupt",
    "gz_bad_crc",
    "gz_not_gzip",
    "gz_magic_only",
    "gz_twice",
    "gz_trailing",
    "gz_as_json",
]


# ------------------------------------------------------------------------------------------ oracle


@dataclass
class Outcome:
    status: str  # "error" | "loaded" | "no graph" | "replayed"
    message: str = ""


STATS: dict[str, int] = {}


def count(key: str) -> None:
    STATS[key] = STATS.get(key, 0) + 1


def check_path(path: Path, file_names: list[str] | None = None, *, replay_too: bool = True) -> Outcome:
    """Load ``path`` (file or folder) and check everything the robustness contract promises."""
    names = file_names if file_names is not None else ([path.name] if path.is_file() else [])
    with time_limit(LIMIT_S), memory_limit(LIMIT_BYTES):
        try:
            job = load_job(path, use_cache=False, workers=1)
        except LumosError as exc:
            msg = str(exc)
            assert "Lumos bug" not in msg, msg
            assert "out of memory" not in msg, f"a small input exhausted memory: {msg}"
            assert "\n" not in msg, f"error message spans lines: {msg!r}"
            assert any(n in msg for n in names) or str(path) in msg, f"message names no file: {msg!r}"
            count("error")
            return Outcome("error", msg)
        for s in job.skipped:
            assert "Lumos bug" not in s.reason, s.reason
            assert "out of memory" not in s.reason, s.reason
            assert "\n" not in s.reason, s.reason
        check_job(job)
        try:
            graph = build_graph(job)
        except GraphError as exc:
            msg = str(exc)
            assert any(n in msg for n in names) or str(path) in msg, f"graph error names no file: {msg!r}"
            count("no graph")
            return Outcome("no graph", str(exc))
        check_graph(graph)
        if not replay_too:
            count("loaded")
            return Outcome("loaded")
        try:
            result = replay(job, graph=graph)
        except GraphError as exc:
            msg = str(exc)
            assert any(n in msg for n in names) or str(path) in msg, f"replay error names no file: {msg!r}"
            count("no replay")
            return Outcome("no graph", str(exc))
        assert np.all(result.end >= result.start)
        count("replayed")
        return Outcome("replayed")


def check_job(job: Any) -> None:
    """Structural invariants of a loaded job (what the app and the graph rely on)."""
    assert job.ranks
    assert len({t.rank for t in job.ranks}) == len(job.ranks)
    for t in job.ranks:
        n = len(t)
        assert n > 0
        for col in (
            "kind",
            "cat",
            "name",
            "lane",
            "dur",
            "correlation",
            "external_id",
            "depth",
            "parent",
            "launch",
        ):
            assert len(getattr(t, col)) == n, col
        assert (t.dur >= 0).all()
        assert t.start.min() >= 0, "events before the job's time zero"
        assert int(t.start.max()) + int(t.dur.max()) < 2**62, "times near int64 overflow"
        assert (np.diff(t.lane) >= 0).all(), "events not grouped by lane"
        assert t.lane_begin[0] == 0 and t.lane_begin[-1] == n
        assert ((t.launch >= -1) & (t.launch < n)).all()
        assert ((t.parent >= -1) & (t.parent < n)).all()
        assert ((t.name >= 0) & (t.name < len(t.strings))).all()
        assert (t.args_start + t.args_len <= len(t.args_data)).all()
        for i in range(min(n, 3)):
            t.args_of(i)
        for it in t.iterations:
            assert it.cpu_start <= it.cpu_end


def check_graph(graph: Any) -> None:
    n = graph.n_nodes
    assert sorted(graph.order.tolist()) == list(range(n)), "order is not a permutation of the nodes"
    pos = np.empty(n, np.int64)
    pos[graph.order] = np.arange(n)
    assert (pos[graph.sp_src] < pos[graph.sp_dst]).all(), "order breaks a start dependency"
    assert (pos[graph.ep_src] < pos[graph.ep_dst]).all(), "order breaks an end dependency"
    start, end = simulate(graph)
    assert (end >= start).all()


# ------------------------------------------------------------------------------------- writing


def write_rank(folder: Path, stem: str, data: bytes, suffix: str) -> Path:
    path = folder / f"{stem}{suffix}"
    path.write_bytes(data)
    return path


def fresh_dir(root: Path, tag: str) -> Path:
    """A new, empty folder under ``root`` (hypothesis reuses a test's tmp_path across examples);
    the previous example's folder with this tag is removed, so long runs do not fill the disk."""
    for old in root.glob(f"{tag}-*"):
        shutil.rmtree(old, ignore_errors=True)
    d = root / f"{tag}-{time.perf_counter_ns()}"
    d.mkdir(parents=True)
    return d


# -------------------------------------------------------------------------------------- strategies

from hypothesis import strategies as st  # noqa: E402  (kept with the strategies it builds)

_index = st.integers(0, 10**6)
hostile = st.one_of(
    st.sampled_from(HOSTILE_VALUES),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
_cats = st.sampled_from(
    [["kernel"], ["cuda_runtime", "cuda_driver"], ["cpu_op"], ["gpu_memcpy", "gpu_memset"], ["cuda_sync"],
     ["user_annotation"], ["ac2g"], ["python_function"]]
)  # fmt: skip
_names = st.sampled_from(
    ["nccl", "profilerstep", "launch", "sync", "record", "wait", "record_param_comms", "memcpy"]
)
event_op = st.one_of(
    st.tuples(st.just("set"), _index, st.sampled_from(EVENT_KEYS), hostile),
    st.tuples(st.just("set_arg"), _index, st.sampled_from(ARG_KEYS), hostile),
    st.tuples(st.just("set_arg_where"), _names, _index, st.sampled_from([*ARG_KEYS, "Dst Rank", "Src Rank"]), hostile),
    st.tuples(st.just("set_all"), st.sampled_from(["ts", "dur", "pid", "tid", "cat", "args"]), hostile),
    st.tuples(st.just("del"), _index, st.sampled_from(EVENT_KEYS)),
    st.tuples(st.just("del_arg"), _index, st.sampled_from(ARG_KEYS)),
    st.tuples(st.just("del_key_everywhere"), st.sampled_from(EVENT_KEYS + ARG_KEYS)),
    st.tuples(st.just("shuffle"), _index),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("dup"), _index, st.integers(1, 300)),
    st.tuples(st.just("same_corr"), st.sampled_from([0, 1, -1, "7", 2**63, 2**31])),
    st.tuples(st.just("drop_cat"), _cats),
    st.tuples(st.just("drop_name"), _names),
    st.tuples(st.just("drop_some"), _index, st.floats(0, 1)),
    st.tuples(st.just("shift"), _index, st.integers(1, 300), st.sampled_from([-1e6, 1e6, 1e13, -1e13, 0.5, 3.6e9])),
    st.tuples(st.just("shift_all"), st.sampled_from([1e17, -1e17, 1e15, 3.6e9, -2e9, 0.001])),
    st.tuples(st.just("insert"), _index, hostile),
    st.tuples(st.just("ph"), _index, st.sampled_from(PHASES)),
    st.tuples(st.just("meta"), st.sampled_from(META_KEYS), hostile),
    st.tuples(st.just("meta_info"), st.sampled_from(["rank", "world_size", "backend"]), hostile),
    st.tuples(st.just("wait_cycle"), _index),
)  # fmt: skip
event_plan = st.lists(event_op, min_size=1, max_size=4)
_junk = st.sampled_from(
    [b"\xff\xfe", b"\x00", b"\xc3", b"\xed\xa0\x80", b"}", b"]", b",", b"{", b'"', b"\\", b"}, {", b"\x1f\x8b",
     b"\xef\xbb\xbf", b"NaN", b"\\ud800"]
) | st.binary(min_size=1, max_size=8)  # fmt: skip
_offset = st.integers(0, 10**9)
text_op = st.one_of(
    st.tuples(st.just("truncate"), _offset),
    st.tuples(st.just("insert"), _offset, _junk),
    st.tuples(st.just("overwrite"), _offset, _junk),
    st.tuples(st.just("delete"), _offset, st.integers(1, 5000)),
    st.tuples(st.just("duplicate"), _offset, st.integers(1, 5000)),
    st.tuples(st.just("number"), _offset, st.sampled_from(_NUMBER_LITERALS)),
    st.tuples(st.just("prefix"), st.sampled_from([b"\xef\xbb\xbf", b"   \n", b"\xff", b"[", b"x"])),
    st.tuples(st.just("suffix"), st.sampled_from([b"garbage", b"\n\n", b"}", b"]", b"\x00"])),
)
text_plan = st.lists(text_op, min_size=1, max_size=3)
styles = st.integers(0, 3)
containers = st.sampled_from(CONTAINERS)


def seed_names() -> list[str]:
    return [s.name for s in all_seeds()]


def seed_by_name(name: str) -> Seed:
    """The seed called ``name``; the synthetic one when the real traces are absent."""
    for s in all_seeds():
        if s.name == name:
            return s
    return synthetic_seeds()[0]


def group_by_name(name: str) -> tuple[Seed, ...]:
    return all_groups().get(name) or synthetic_group()
