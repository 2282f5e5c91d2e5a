"""Fuzzing the loader, the graph builder and the replay with hostile inputs (hypothesis).

Inputs are windows of the real traces (and hand-made ranks), mutated as event lists (wrong types,
deleted fields, reordering, duplicated ids, missing launches or kernels, collectives on some ranks
only, event-wait cycles) and as text and containers (truncation, non-UTF-8 bytes, NaN literals,
broken gzip). Every input must load (with warnings) or fail with a LumosError naming the file, in
bounded time and memory; what loads must build a graph (or say GraphError) and replay.

CI runs a fixed, derandomized budget (a few hundred inputs, ~15 s). More:
``LUMOS_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz_loader.py`` or ``python bench/fuzz_loader.py``.
Regression inputs of the bugs the fuzzing found are kept as ``@example``s.
"""

from __future__ import annotations

import functools
import math
import os
import re
from pathlib import Path
from unittest import mock

import fuzzing as F
import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

from lumos_core.errors import GraphError, TraceError
from lumos_core.graph.build import build_graph
from lumos_core.trace import kineto_reader
from lumos_core.trace.json_stream import EventStream, NotStreamable
from lumos_core.trace.kineto_reader import convert_document, parse_trace_file
from lumos_core.trace.loader import load_job

# Examples per test: CI default, or LUMOS_FUZZ_EXAMPLES for a long run (then random, not derandomized).
_LONG = int(os.environ.get("LUMOS_FUZZ_EXAMPLES", "0"))


# Seeds are read from the real traces when the first example is drawn, not when pytest collects.
SEEDS = st.deferred(lambda: st.sampled_from(F.seed_names()))
GROUPS = st.deferred(lambda: st.sampled_from(sorted(F.all_groups())))


def budget(ci_examples: int) -> settings:
    return settings(
        max_examples=_LONG or ci_examples,
        derandomize=not _LONG,  # CI: the same inputs on every run
        deadline=None,  # wall time is bounded per input by fuzzing.time_limit instead (CI machines vary)
        database=None,  # nothing written into the repository
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # no "explain" phase: re-running a failing multi-rank input hundreds of times takes minutes
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        print_blob=True,
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module", autouse=True)
def _report_stats() -> None:
    yield
    out = os.environ.get("LUMOS_FUZZ_STATS")
    if out:
        Path(out).write_bytes(orjson.dumps(F.STATS))


def _write_one(work: Path, seed: F.Seed, plan: list, as_list: bool, style: int, container: str) -> Path:
    doc = F.apply_event_plan(seed.doc(), plan + ([("as_list",)] if as_list else []))
    data, suffix = F.containerize(F.serialize(doc, style), container)
    return F.write_rank(F.fresh_dir(work, "ev"), "trace", data, suffix)


# ------------------------------------------------------------------------------ event-list mutations


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
@budget(120)
@given(
    seed=SEEDS,
    plan=F.event_plan,
    as_list=st.booleans(),
    style=F.styles,
    container=st.sampled_from(["json", "gz"]),
)
# Regressions (each crashed the loader or the graph before its fix):
@example(seed="synthetic/rank0", plan=[("same_corr", 2**63)], as_list=False, style=0, container="json")
@example(
    seed="synthetic/rank0", plan=[("meta_info", "rank", 2**63 - 1)], as_list=False, style=0, container="json"
)
@example(
    seed="synthetic/rank0",
    plan=[("meta_info", "world_size", 2**63 - 1)],
    as_list=False,
    style=0,
    container="json",
)
@example(seed="synthetic/rank0", plan=[("set_all", "dur", 1e12)], as_list=False, style=0, container="json")
@example(
    seed="synthetic/rank0", plan=[("set", 3, "tid", "9" * 5000)], as_list=False, style=0, container="json"
)
@example(
    seed="synthetic/rank0",
    plan=[("set", 3, "tid", "stream 99999999999999999999999")],
    as_list=False,
    style=0,
    container="json",
)
@example(
    seed="synthetic/rank0", plan=[("set_arg", 3, "device", "\ud800")], as_list=False, style=0, container="gz"
)
@example(
    seed="synthetic/rank0",
    plan=[("set_arg", 3, "dtype", F.HOSTILE_VALUES[-1])],
    as_list=False,
    style=0,
    container="json",
)
@example(
    seed="synthetic/rank0",
    plan=[("set", 0, "name", "ProfilerStep#\u00b2")],
    as_list=False,
    style=0,
    container="json",
)
@example(
    seed="synthetic/rank0",
    plan=[("meta", "baseTimeNanoseconds", 2**63)],
    as_list=False,
    style=0,
    container="json",
)
@example(seed="synthetic/rank0", plan=[("wait_cycle", 0)], as_list=False, style=0, container="json")
def test_mutated_events_load_or_fail_cleanly(work, seed, plan, as_list, style, container) -> None:
    path = _write_one(work, F.seed_by_name(seed), plan, as_list, style, container)
    F.check_path(path)


@budget(30)
@given(
    group=GROUPS,
    plans=st.lists(st.one_of(st.just([]), F.event_plan), min_size=3, max_size=3),
    drop_collectives=st.lists(st.booleans(), min_size=3, max_size=3),
    whole_folder=st.booleans(),
)
@example(  # a huge epoch offset on one rank overflowed the int64 shift onto the common time base
    group="synthetic2", plans=[[], [("meta", "baseTimeNanoseconds", 2**63)], []],
    drop_collectives=[False, False, False], whole_folder=True,
)  # fmt: skip
@example(  # one rank on a time base 3000 years away: refused as another job, not an overflow
    group="synthetic2", plans=[[], [("shift_all", 1e17)], []], drop_collectives=[False, False, False],
    whole_folder=True,
)  # fmt: skip
@example(  # Group size / peer ranks beyond int32 overflowed the collective columns
    group="synthetic2", plans=[[("set_arg_where", "nccl", 0, "Group size", 2**40)], [], []],
    drop_collectives=[False, True, False], whole_folder=True,
)  # fmt: skip
@example(  # infinite timestamps reached the median arithmetic (NaN, a RuntimeWarning)
    group="synthetic2", plans=[[("set_all", "ts", -math.inf)], [("set_all", "ts", math.inf)], []],
    drop_collectives=[False, False, False], whole_folder=True,
)  # fmt: skip
@example(  # a rank at ts 1e308 µs: the "years apart" message overflowed float()
    group="synthetic2", plans=[[], [], [("set", 0, "ts", "12.5"), ("set_all", "ts", 1e308)]],
    drop_collectives=[False, False, False], whole_folder=True,
)  # fmt: skip
@example(  # integer timestamps and durations beyond float range
    group="synthetic2", plans=[[("set", 2, "ts", 10**400)], [("set", 2, "dur", 10**400)], []],
    drop_collectives=[False, False, False], whole_folder=True,
)  # fmt: skip
def test_multi_rank_folders_with_partial_collectives(
    work, group, plans, drop_collectives, whole_folder
) -> None:
    """Collectives on only some ranks, ranks mutated differently, one rank per file."""
    folder = F.fresh_dir(work, "grp")
    seeds = F.group_by_name(group)
    for r, (seed, plan, drop) in enumerate(zip(seeds, plans, drop_collectives)):
        doc = F.apply_event_plan(seed.doc(), plan + ([("drop_name", "nccl")] if drop else []))
        data, suffix = F.containerize(F.serialize(doc), "gz" if r % 2 else "json")
        F.write_rank(folder, f"rank{r}", data, suffix)
    names = sorted(p.name for p in folder.iterdir())
    F.check_path(folder if whole_folder else folder / names[0], names)


# ------------------------------------------------------------------------ text and container mutations


@budget(100)
@given(
    seed=SEEDS,
    plan=F.text_plan,
    style=F.styles,
    container=F.containers,
)
@example(  # a junk gzip trailer (ISIZE) made a 200-byte file "need" GiBs instead of being corrupt
    seed="synthetic/rank0", plan=[("suffix", b"")], style=0, container="gz_trailing"
)
@example(  # bytes that are not UTF-8 inside a name: loads, with a warning
    seed="synthetic/rank0", plan=[("insert", 40, b"\xff\xfe")], style=0, container="json"
)
def test_mutated_text_loads_or_fails_cleanly(work, seed, plan, style, container) -> None:
    text = F.serialize(F.seed_by_name(seed).doc(), style)
    data, suffix = F.containerize(F.apply_text_plan(text, plan), container)
    path = F.write_rank(F.fresh_dir(work, "txt"), "trace", data, suffix)
    outcome = F.check_path(path)
    if container == "gz_trailing":
        assert "memory" not in outcome.message


@budget(40)
@given(
    seed=SEEDS,
    plan=st.lists(F.event_op, max_size=3),
    style=F.styles,
    block=st.sampled_from([256, 1024, 4096]),
    junk=st.sampled_from(["", "}, {", "]", '"}, {"', "\\", "}]"]),
)
def test_streaming_parser_agrees_with_whole_document(work, seed, plan, style, block, junk) -> None:
    """The batch parser must produce exactly what parsing the whole document produces (small blocks
    put cuts everywhere, also inside strings that look like event boundaries)."""
    doc = F.apply_event_plan(F.seed_by_name(seed).doc(), plan)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    if events and isinstance(events[0], dict):
        events[0]["name"] = f"x{junk}y"  # boundary-like text inside a string
    text = F.serialize(doc, style)
    path = F.write_rank(F.fresh_dir(work, "diff"), "trace", text, ".json")
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return  # NaN literals etc.: the streaming path hands these to the whole-document path anyway
    with path.open("rb") as fh:
        stream = EventStream(fh, block=block)
        try:
            streamed_events = [e for chunk in stream.chunks() for e in chunk]
        except NotStreamable:
            streamed_events = None  # an event longer than 64 blocks: the whole-document path takes it
    if streamed_events is not None:
        assert streamed_events == (parsed if isinstance(parsed, list) else parsed["traceEvents"])
    try:
        whole = convert_document(parsed, str(path))
    except TraceError as exc:
        with pytest.raises(TraceError, match=re.escape(exc.reason)):
            parse_with_block(path, block)
        return
    streamed = parse_with_block(path, block)
    for col in (
        "kind",
        "cat",
        "name",
        "lane",
        "start",
        "dur",
        "correlation",
        "launch",
        "parent",
        "args_data",
    ):
        assert np.array_equal(getattr(whole, col), getattr(streamed, col)), col
    assert whole.strings == streamed.strings and whole.metadata == streamed.metadata
    F.count("stream == whole document")


def parse_with_block(path: Path, block: int):  # type: ignore[no-untyped-def]
    with mock.patch.object(kineto_reader, "EventStream", functools.partial(EventStream, block=block)):
        return parse_trace_file(path)


# ----------------------------------------------------------------------------------- plain regressions


def test_event_wait_cycle_is_an_error_or_broken_never_a_hang(tmp_path: Path) -> None:
    """Streams 7 and 8 each wait for an event the other records later (exact cuda_sync pairing):
    naive edges form the cycle k7 -> k8 -> k7. The graph must say GraphError naming the file, or
    be acyclic; never hang."""
    b = TraceBuilder(rank=0, world=1)
    b.launch("k7_first", 100, 1, 110, 10, stream=7)
    b.launch("k8_first", 101, 1, 111, 10, stream=8)
    b.events.extend(F.wait_cycle_events(b.events, 0))  # waits at 99.5, records at 101.5
    b.launch("k7_next", 104, 1, 130, 10, stream=7)
    b.launch("k8_next", 105, 1, 131, 10, stream=8)
    path = b.write(tmp_path / "rank0.json")
    job = load_job(path, use_cache=False)
    with F.time_limit(20):
        try:
            graph = build_graph(job)
        except GraphError as exc:
            assert "cycle" in str(exc) and "rank0.json" in str(exc), str(exc)
        else:
            F.check_graph(graph)  # broken: records issued after a wait are not what it waited for


def test_a_cycle_the_graph_cannot_break_names_the_file_and_tasks(tmp_path: Path) -> None:
    """A kernel whose correlation id points at a cudaStreamSynchronize (duplicated ids): the call
    'launches' the kernel and waits for it. GraphError naming the file and tasks, not node ids."""
    b = TraceBuilder(rank=0, world=1)
    b.cpu("aten::add", 90, 5)
    b.launch("gemm", 96, 2, 99, 5, stream=7)
    corr = b.runtime("cudaStreamSynchronize", 100, 50)
    b.events.append(
        {"ph": "X", "cat": "kernel", "name": "late_kernel", "pid": 0, "tid": 7, "ts": 120, "dur": 10,
         "args": {"device": 0, "stream": 7, "correlation": corr}}
    )  # fmt: skip
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    with F.time_limit(20), pytest.raises(GraphError) as err:
        build_graph(job)
    msg = str(err.value)
    assert msg.startswith("rank0.json: the execution graph has a cycle")
    assert "'late_kernel' (rank 0)" in msg or "'cudaStreamSynchronize' (rank 0)" in msg


def test_stray_files_in_a_folder_are_ignored(tmp_path: Path) -> None:
    seed = F.synthetic_seeds()[0]
    (tmp_path / "rank0.json").write_bytes(orjson.dumps(seed.doc()))
    (tmp_path / ".rank1.json").write_text("hidden: ignored")
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "rank2.json").mkdir()  # a folder named like a trace
    (tmp_path / "rank3.json.gz").symlink_to(tmp_path / "missing.json.gz")  # dangling link
    os.mkfifo(tmp_path / "rank4.json")  # opening a FIFO would block forever
    (tmp_path / "rank5.json").symlink_to("/dev/zero")  # an endless file
    with F.time_limit(20):
        job = load_job(tmp_path, use_cache=False)
    assert [t.rank for t in job.ranks] == [0]
