"""Bad input gets a clear, one-line error naming the file; a bad file among good ones is skipped."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, needs_shared, shared, shared_file

from lumos_core.errors import FolderError, TraceError
from lumos_core.trace.loader import load_job


def tiny_trace(rank: int | None = None, world: int | None = 2, ts0: float = 1000.0) -> dict:
    doc: dict = {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts0,
                "dur": 10.5,
                "args": {"External id": 1},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts0 + 1,
                "dur": 3,
                "args": {"External id": 1, "correlation": 7},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm",
                "pid": 0,
                "tid": 7,
                "ts": ts0 + 5,
                "dur": 20,
                "args": {"device": 0, "stream": 7, "correlation": 7, "External id": 1},
            },
            {},
        ],
    }
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": world}
    return doc


def write(path: Path, doc: object, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lumos_core", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "LUMOS_CACHE_DIR": os.environ["LUMOS_CACHE_DIR"]},
    )


def test_tiny_trace_loads_and_trailing_empty_event_is_ignored(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "rank0.json", tiny_trace(0)), use_cache=False)
    t = job.ranks[0]
    assert len(t) == 3
    k = t.name.tolist().index(t.strings.index("gemm"))
    assert t.name_of(int(t.launch[k])) == "cudaLaunchKernel"
    assert t.dur[t.name.tolist().index(t.strings.index("aten::mm"))] == 10_500


@pytest.mark.parametrize(
    "case, message",
    [
        ("truncated_json", "not valid JSON"),
        ("truncated_gzip", "gzip data is truncated or corrupt"),
        ("not_json", "not valid JSON"),
        ("json_not_trace", "no 'traceEvents' list"),
        ("empty_file", "file is empty"),
        ("no_events", "no timed events"),
        ("fake_gzip", "not valid JSON"),
    ],
)
def test_single_bad_file_is_a_one_line_error_naming_the_file(tmp_path: Path, case: str, message: str) -> None:
    good = json.dumps(tiny_trace(0)).encode()
    path = tmp_path / f"{case}.json"
    if case == "truncated_json":
        path.write_bytes(good[: len(good) // 2])
    elif case == "truncated_gzip":
        path = tmp_path / f"{case}.json.gz"
        path.write_bytes(gzip.compress(good)[:40])
    elif case == "not_json":
        path.write_bytes(b"\x00\xff garbage, not json \xfe")
    elif case == "json_not_trace":
        path.write_text(json.dumps({"model": "gpt", "layers": 4}))
    elif case == "empty_file":
        path.write_bytes(b"")
    elif case == "no_events":
        path.write_text(json.dumps({"traceEvents": []}))
    elif case == "fake_gzip":
        path = tmp_path / f"{case}.json.gz"
        path.write_bytes(b"this is not gzip at all")
    with pytest.raises(FolderError) as err:
        load_job(path, use_cache=False)
    text = str(err.value)
    assert path.name in text and message in text
    assert "\n" not in text
    out = run_cli("inspect", str(path))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert path.name in out.stderr and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_truncated_file_says_it_looks_truncated(tmp_path: Path) -> None:
    good = json.dumps(tiny_trace(0)).encode()
    path = tmp_path / "rank0.json"
    path.write_bytes(good[:-7])
    with pytest.raises(FolderError, match="truncated"):
        load_job(path, use_cache=False)


def test_strict_mode_raises_on_the_bad_file(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", tiny_trace(0))
    (tmp_path / "rank1.json").write_text("{ not json")
    with pytest.raises(TraceError, match=r"rank1\.json"):
        load_job(tmp_path, use_cache=False, strict=True)
    out = run_cli("inspect", "--strict", str(tmp_path))
    assert out.returncode == 2 and "rank1.json" in out.stderr


def test_bad_file_among_good_ones_is_skipped_and_reported(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", tiny_trace(0))
    write(tmp_path / "rank1.json.gz", tiny_trace(1), gz=True)
    (tmp_path / "rank2.json").write_bytes(json.dumps(tiny_trace(2)).encode()[:50])
    (tmp_path / "notes.txt").write_text("not a trace file, not even looked at")
    job = load_job(tmp_path, use_cache=False)
    assert [t.rank for t in job.ranks] == [0, 1]
    assert [Path(s.file).name for s in job.skipped] == ["rank2.json"]
    assert any("skipped rank2.json" in w for w in job.warnings)
    out = run_cli("inspect", "--json", str(tmp_path))
    assert out.returncode == 0
    report = json.loads(out.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["skipped"][0]["file"].endswith("rank2.json")


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(FolderError, match="no trace files"):
        load_job(tmp_path)
    out = run_cli("inspect", str(tmp_path))
    assert out.returncode == 2 and "no trace files" in out.stderr


def test_missing_path() -> None:
    out = run_cli("inspect", "/nonexistent/folder/for/lumos")
    assert out.returncode == 2 and "no such file or folder" in out.stderr


def test_duplicate_ranks_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.json", tiny_trace(0))
    write(tmp_path / "b.json", tiny_trace(0))
    with pytest.raises(FolderError, match=r"duplicate rank 0: both a\.json and b\.json"):
        load_job(tmp_path, use_cache=False)


def test_mixed_jobs_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", tiny_trace(0, world=2))
    write(tmp_path / "rank1.json", tiny_trace(1, world=16))
    with pytest.raises(FolderError, match="mixes traces of different jobs"):
        load_job(tmp_path, use_cache=False)


def test_rank_beyond_world_size_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "x.json", tiny_trace(5, world=2))
    with pytest.raises(FolderError, match="world size is 2"):
        load_job(tmp_path, use_cache=False)


def test_ranks_from_file_names_then_order(tmp_path: Path) -> None:
    write(tmp_path / "trace_worker3.json", tiny_trace(None))
    write(tmp_path / "job-rank-1.json", tiny_trace(None))
    write(tmp_path / "zzz.json", tiny_trace(None))
    job = load_job(tmp_path, use_cache=False)
    got = {Path(t.file).name: (t.rank, t.rank_source) for t in job.ranks}
    assert got == {
        "trace_worker3.json": (3, "file name"),
        "job-rank-1.json": (1, "file name"),
        "zzz.json": (0, "file order"),
    }
    assert "file name" in job.rank_rule and "file order" in job.rank_rule


def test_odd_field_types_load_with_warnings(tmp_path: Path) -> None:
    doc = tiny_trace(0)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "kernel", "name": "str_ts", "pid": 0, "tid": 7, "ts": "1030.5", "dur": "2"},
        {"ph": "X", "cat": "kernel", "name": "neg", "pid": 0, "tid": 7, "ts": 1040, "dur": -5},
        {"ph": "X", "cat": "kernel", "name": "no_ts", "pid": 0, "tid": 7, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "listtid", "pid": 1, "tid": [1, 2], "ts": 1050, "dur": 1},
        {"ph": "X", "cat": ["weird"], "name": None, "pid": 1, "tid": 1, "ts": 1060, "dur": 1},
        "not an event",
        None,
    ]
    job = load_job(write(tmp_path / "rank0.json", doc), use_cache=False)
    t = job.ranks[0]
    names = {t.name_of(i) for i in range(len(t))}
    assert {"str_ts", "neg", "gemm"} <= names
    assert "no_ts" not in names and "listtid" not in names
    assert t.dur[t.name.tolist().index(t.strings.index("neg"))] == 0
    text = " ".join(t.warnings)
    assert "negative" in text and "missing or non-numeric" in text and "malformed" in text


def test_nan_and_huge_values(tmp_path: Path) -> None:
    events = [json.dumps(e) for e in tiny_trace(0)["traceEvents"][:3]] + [
        '{"ph": "X", "cat": "kernel", "name": "nan", "pid": 0, "tid": 7, "ts": NaN, "dur": 1}',
        '{"ph": "X", "cat": "kernel", "name": "far", "pid": 0, "tid": 7, "ts": 1e19, "dur": 1}',
        '{"ph": "X", "cat": "kernel", "name": "big", "pid": 0, "tid": 7, "ts": 1010, "dur": 1,'
        ' "args": {"id": 123456789012345678901234567890}}',
    ]
    (tmp_path / "rank0.json").write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    t = load_job(tmp_path / "rank0.json", use_cache=False).ranks[0]
    names = {t.name_of(i) for i in range(len(t))}
    assert "big" in names and "nan" not in names and "far" not in names
    assert t.span[1] - t.span[0] < 10**9
    assert any("years away" in w for w in t.warnings)
    big = t.name.tolist().index(t.strings.index("big"))
    assert float(t.args_of(big)["id"]) == pytest.approx(1.2345678901234568e29)  # shown, not lost


@needs_shared
def test_input_folder_is_never_written(tmp_path: Path) -> None:
    src = shared("dlrm-v100-8rank")
    folder = tmp_path / "ro"
    shutil.copytree(src, folder)
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}
    for p in folder.iterdir():
        p.chmod(0o444)
    folder.chmod(0o555)
    try:
        load_job(folder)  # with the cache on: it must go to the cache dir, not here
        load_job(folder)
        out = run_cli("inspect", str(folder))
        assert out.returncode == 0, out.stderr
    finally:
        folder.chmod(0o755)
    after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}
    assert after == before


@needs_shared
def test_cli_inspect_json_schema() -> None:
    out = run_cli("inspect", "--json", str(shared("h100-nanogpt-8rank")))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) >= {"ranks", "warnings"}
    r0 = report["ranks"][0]
    for key in (
        "rank",
        "file",
        "device",
        "world_size",
        "events",
        "kernels",
        "memcpy",
        "memset",
        "cpu_ops",
        "runtime_calls",
        "collectives",
        "streams",
        "threads",
        "iterations",
        "clock_offset_us",
    ):
        assert key in r0, key
    assert r0["kernels"] == 2917 and r0["collectives"] == 76 and r0["world_size"] == 8
    assert {s["role"] for s in r0["streams"]} == {"compute", "communication"}
    assert sum(s["events"] for s in r0["streams"]) == r0["kernels"] + r0["memcpy"] + r0["memset"]
    assert [it["name"] for it in r0["iterations"]] == [f"ProfilerStep#{n}" for n in range(10, 14)]
    it = r0["iterations"][0]
    assert 0 <= it["start_us"] < it["end_us"]


@needs_shared
def test_cli_inspect_text_on_a_file_with_spaces_in_its_name() -> None:
    path = shared_file("h100-nanogpt-8rank", "*rank3*")
    assert " " in path.name
    out = run_cli("inspect", str(path))
    assert out.returncode == 0, out.stderr
    assert "ProfilerStep#12" in out.stdout and "rank 3" in out.stdout


def test_commands_other_than_inspect_warn_on_stderr_about_a_skipped_rank(tmp_path: Path) -> None:
    # replay, estimate and diff go on with the good ranks; their figures are then not the whole
    # job's, so the skipped file and the missing rank must be said (inspect lists them itself).
    write(tmp_path / "rank0.json", tiny_trace(0, world=3))
    write(tmp_path / "rank1.json", tiny_trace(1, world=3))
    (tmp_path / "rank2.json").write_bytes(json.dumps(tiny_trace(2, world=3)).encode()[:50])
    for args in (("replay", "--json", "--no-holdout", str(tmp_path)), ("diff", str(tmp_path), str(tmp_path))):
        out = run_cli(*args)
        assert out.returncode == 0, out.stderr
        assert "skipped" in out.stderr and "rank2.json" in out.stderr, (args, out.stderr)
        assert "missing: 2" in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr
    assert json.loads(run_cli("replay", "--json", "--no-holdout", str(tmp_path)).stdout)


def test_an_unwritable_output_is_a_one_line_error(tmp_path: Path, monkeypatch, capsys) -> None:
    # estimate --out where nothing can be written: the folder asked for is named, no traceback
    src = tmp_path / "job"
    src.mkdir()
    write(src / "rank0.json", tiny_trace(0, world=1))
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the output's parent folder should be")
    base = str(REPO / "tests" / "data" / "cpu-gpt" / "base")
    out = run_cli("estimate", base, "-q", "--dp", "2", "--out", str(blocker / "pred"))
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert str(blocker / "pred") in out.stderr and "cannot write" in out.stderr
    # any other I/O error a command meets: exit 1 with the path and the reason
    from lumos_core import cli
    from lumos_core.commands import inspect as inspect_command

    def denied(args):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", "/some/where")

    monkeypatch.setattr(inspect_command, "run", denied)
    assert cli.main(["inspect", str(src)]) == 1
    assert "lumos inspect: error: /some/where: Permission denied" in capsys.readouterr().err


def test_cli_inspect_says_its_step_spans_are_not_replays_iteration_times() -> None:
    # inspect prints each ProfilerStep's CPU span; replay times start-to-start: say so, or the two
    # commands seem to contradict each other on the last step
    out = run_cli("inspect", str(REPO / "tests" / "data" / "cpu-gpt" / "base"))
    assert out.returncode == 0, out.stderr
    assert "CPU annotations' own spans" in out.stdout and "start to the next" in out.stdout


def test_a_skipped_file_names_its_rank_where_it_can(tmp_path: Path) -> None:
    """A truncated rank file still holds its distributedInfo header: the warning says whose it was;
    a file with nothing readable falls back on the rank in its name."""
    from tracegen import TraceBuilder

    from lumos_core.trace.loader import load_job

    good = TraceBuilder(rank=0, world=4)
    good.launch("k", 1, 2, kts=5, kdur=3)
    good.write(tmp_path / "a.json")
    body = (
        b'{"distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 4}, "traceEvents": ['
        + b"{}," * 5000
    )
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(body)[:-40])  # cut: no end-of-stream marker
    (tmp_path / "worker3.json").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    job = load_job(tmp_path, use_cache=False, workers=1)
    reasons = {Path(s.file).name: s.reason for s in job.skipped}
    assert "(rank 2, from its distributedInfo)" in reasons["b.json.gz"]
    assert "(rank 3, from its file name)" in reasons["worker3.json"]
    assert [r.rank for r in job.ranks] == [0]  # the good rank is kept
