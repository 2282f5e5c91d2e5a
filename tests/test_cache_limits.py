"""The parse cache never fills the disk (issue 30): a size cap with least-recently-used eviction that
holds with two processes writing at once, pruning of deleted traces' entries, a free-space floor
below which a job is not cached (with one warning, and the command still answering), and an entry
that another process maps is never deleted."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest
from conftest import REPO
from tracegen import TraceBuilder

from lumos_core import cli
from lumos_core.errors import LumosError
from lumos_core.trace import cache, cache_evict
from lumos_core.trace.cache_config import GB, CacheConfig, free_floor, parse_size
from lumos_core.trace.loader import load_job

Usage = namedtuple("Usage", "total used free")


def make_job(folder: Path, ranks: int = 2, launches: int = 1500, seed: int = 0) -> Path:
    """A small job of ``ranks`` rank files (a few hundred kB of cached columns per rank)."""
    folder.mkdir(parents=True)
    for r in range(ranks):
        b = TraceBuilder(rank=r, world=ranks)
        b.step(1, 1000, 20 * launches + 100)
        for k in range(launches):
            b.launch(f"gemm_{(k + seed) % 7}", 1010 + 20 * k, 3, 1020 + 20 * k, 6, stream=7)
        b.write(folder / f"rank{r}.json")
    return folder


def entries_of(job: Path, root: Path) -> set[Path]:
    """The cache files (entry and its .src) of every rank file of ``job``."""
    out = set()
    for f in sorted(job.glob("*.json")):
        e = cache.entry_path(f, root)
        out |= {e, cache.source_path(e)}
    return out


def cache_bytes(root: Path) -> int:
    return sum(u.nbytes for u in cache_evict.scan(root))


def cached(job: Path, root: Path) -> bool:
    return all(cache.entry_exists(f, root) for f in job.glob("*.json"))


def _writer(root: Path, cap: int, jobs: list[Path]) -> subprocess.Popen[str]:
    """A real process that opens ``jobs`` one after the other with ``lumos inspect``."""
    code = (
        "import sys\n"
        "from lumos_core import cli\n"
        "root, cap, *jobs = sys.argv[1:]\n"
        "for job in jobs:\n"
        "    assert cli.main(['inspect', job, '-q', '--json', '--cache-dir', root, '--cache-max', cap]) == 0\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(root), str(cap), *map(str, jobs)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_jobs_three_times_the_cap_leave_the_cache_under_it_with_two_writers(tmp_path: Path) -> None:
    jobs = [make_job(tmp_path / f"job{i}", seed=i) for i in range(8)]
    # one job's entries, measured in a cache of its own: the cap holds 2.5 jobs, the jobs total 3.2x it
    probe = tmp_path / "probe-cache"
    load_job(jobs[0], cache_config=CacheConfig(probe))
    per_job = cache_bytes(probe)
    assert per_job > 100_000
    cap = int(2.5 * per_job)
    root = tmp_path / "cache"
    writers = [_writer(root, cap, jobs[0:8:2]), _writer(root, cap, jobs[1:8:2])]  # at the same time
    for w in writers:
        _, err = w.communicate(timeout=240)
        assert w.returncode == 0, err
    assert 8 * per_job >= 3 * cap
    total = cache_bytes(root)
    assert 0 < total <= cap, f"{total} bytes cached, cap {cap}"
    assert sum(cached(j, root) for j in jobs) <= 2
    # the job used last (here: one evicted long ago) is in the cache afterwards, still within the cap
    oldest = jobs[0]
    assert not cached(oldest, root)
    assert (
        cli.main(["inspect", str(oldest), "-q", "--json", "--cache-dir", str(root), "--cache-max", str(cap)])
        == 0
    )
    assert cached(oldest, root)
    assert cache_bytes(root) <= cap


def test_prune_removes_exactly_the_entries_of_a_deleted_trace_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cache"
    config = CacheConfig(root, 10 * GB)
    jobs = [make_job(tmp_path / name, launches=200, seed=k) for k, name in enumerate("abc")]
    for j in jobs:
        load_job(j, cache_config=config)
    gc.collect()
    files = {j.name: entries_of(j, root) for j in jobs}
    assert all(p.is_file() for s in files.values() for p in s)
    shutil.rmtree(jobs[1])
    assert cli.main(["cache", "prune", "--cache-dir", str(root)]) == 0
    assert "dropped 2 entries of deleted or changed traces" in capsys.readouterr().out
    assert set(root.glob("*/*")) == files["a"] | files["c"]
    # a trace file rewritten in place: its old entry goes at the next pass, the other rank's stays
    changed = jobs[2] / "rank1.json"
    changed.write_text(changed.read_text() + " ")
    assert cli.main(["cache", "prune", "--cache-dir", str(root)]) == 0
    assert set(root.glob("*/*")) == files["a"] | entries_of(jobs[2], root) - {
        cache.entry_path(changed, root),
        cache.source_path(cache.entry_path(changed, root)),
    }


def test_low_free_space_skips_caching_says_why_once_and_the_command_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job(tmp_path / "job", ranks=2, launches=200)
    root = tmp_path / "cache"
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(100 * GB, 99.6 * GB, int(0.4 * GB)))
    assert cli.main(["inspect", str(job), "-q", "--cache-dir", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "rank" in out  # the report
    assert err.count("not cached: 0.4 GB free on ") == 1, err
    assert not list(root.glob("ranks/*.rank"))
    # the app gets the same one line with the job (its status bar shows it)
    loaded = load_job(job, cache_config=CacheConfig(root))
    assert [w for w in loaded.warnings if w.startswith("not cached: 0.4 GB free on ")]
    # with room enough, the same command caches and says nothing about it
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(100 * GB, 50 * GB, 50 * GB))
    assert cli.main(["inspect", str(job), "-q", "--cache-dir", str(root)]) == 0
    assert "not cached" not in capsys.readouterr().err
    assert cached(job, root)


def test_an_entry_another_process_maps_is_never_deleted(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", ranks=1, launches=200)
    root = tmp_path / "cache"
    load_job(job, cache_config=CacheConfig(root))
    entry = cache.entry_path(job / "rank0.json", root)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from lumos_core.trace.cache_config import CacheConfig\n"
            "from lumos_core.trace.loader import load_job\n"
            "job = load_job(sys.argv[1], cache_config=CacheConfig(Path(sys.argv[2])))\n"
            "print('mapped', flush=True)\n"
            "sys.stdin.read()\n",
            str(job),
            str(root),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "mapped"
        report = cache_evict.enforce(CacheConfig(root, 0))
        assert entry.is_file() and report.in_use == 1 and not report.evicted
        assert cli.main(["cache", "clear", "--cache-dir", str(root)]) == 0
        assert entry.is_file()
    finally:
        holder.communicate("", timeout=60)
    assert cache_evict.enforce(CacheConfig(root, 0)).evicted
    assert not entry.exists()


def test_sizes_default_cap_and_free_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_size("20G") == 20 * GB and parse_size("500M") == 500_000_000
    assert parse_size("2GiB") == 2 << 30 and parse_size("1.5 GB") == 1_500_000_000 and parse_size("0") == 0
    assert parse_size("10%", volume_total=300 * GB) == 30 * GB
    with pytest.raises(LumosError, match="cannot read '20X' as a size"):
        parse_size("20X")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(100 * GB, 0, 60 * GB))
    monkeypatch.delenv("LUMOS_CACHE_MAX", raising=False)
    assert CacheConfig.resolve(tmp_path).cap() == 10 * GB  # 10 % of the volume
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(4000 * GB, 0, 60 * GB))
    assert CacheConfig.resolve(tmp_path).cap() == 20 * GB  # at most 20 GB
    assert free_floor(4000 * GB) == GB and free_floor(10 * GB) == GB // 2  # 1 GB, or 5 % of a small one
    monkeypatch.setenv("LUMOS_CACHE_MAX", "3G")
    assert CacheConfig.resolve(tmp_path).cap() == 3 * GB
    assert CacheConfig.resolve(tmp_path, "1G").cap() == GB  # the command line wins
    assert CacheConfig.resolve(tmp_path, setting="5G").cap() == 3 * GB  # the environment beats the app's


def test_a_crashed_writes_leftovers_go_and_one_in_progress_stays(tmp_path: Path) -> None:
    ranks = tmp_path / "cache" / "ranks"
    ranks.mkdir(parents=True)
    old, fresh = ranks / "old.tmp", ranks / "fresh.tmp"
    old.write_bytes(b"x" * 5000)
    fresh.write_bytes(b"x" * 5000)
    hour_ago = time.time() - 2 * cache_evict.STRAY_AGE_S
    os.utime(old, (hour_ago, hour_ago))
    cache_evict.enforce(CacheConfig(tmp_path / "cache", 0))
    assert not old.exists() and fresh.exists()


def test_reading_a_job_makes_it_the_most_recently_used(tmp_path: Path) -> None:
    a, b, c = (make_job(tmp_path / name, launches=300, seed=k) for k, name in enumerate("abc"))
    probe = tmp_path / "probe-cache"
    load_job(a, cache_config=CacheConfig(probe))
    config = CacheConfig(tmp_path / "cache", int(2.5 * cache_bytes(probe)))  # two jobs fit
    for job in (a, b, a, c):  # a is read from the cache after b was written
        load_job(job, cache_config=config)
        gc.collect()  # the job's mappings (and their locks) go
    assert cached(a, config.root) and cached(c, config.root) and not cached(b, config.root)


def test_cache_max_before_the_command_applies_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.split_global_options(["--cache-max", "5G", "inspect", "x"]) == (
        ["inspect", "x"],
        {"cache_max": "5G"},
    )
    assert cli.split_global_options(["--cache-max=1M", "cache", "info"]) == (
        ["cache", "info"],
        {"cache_max": "1M"},
    )
    root = tmp_path / "cache"
    assert cli.main(["--cache-max", "1.5G", "cache", "info", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "1.5 GB (--cache-max 1.5G)" in out and str(root) in out
    assert cli.main(["cache", "info", "--cache-dir", str(root), "--cache-max", "10Q"]) == 2
    assert "cannot read '10Q' as a size" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a command that does not use it says so rather than ignore it
        cli.main(["--cache-max", "5G", "comm", "allreduce", "--bytes", "1MiB", "--ranks", "8"])
    assert "--cache-max is not an option of lumos comm" in capsys.readouterr().err


def test_the_doctor_shows_the_cache_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.doctor import report_lines

    monkeypatch.setenv("LUMOS_CACHE_MAX", "7G")
    lines, _ = report_lines(with_probe=False)
    line = next(x for x in lines if x.startswith("cache "))
    assert os.environ["LUMOS_CACHE_DIR"] in line and "cap 7.0 GB (LUMOS_CACHE_MAX 7G)" in line


def test_a_job_bigger_than_the_cap_says_it_was_not_kept(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job", ranks=2, launches=300)
    loaded = load_job(job, cache_config=CacheConfig(tmp_path / "cache", 1000))
    notes = [w for w in loaded.warnings if w.startswith("not cached: ")]
    assert (
        len(notes) == 1 and "2 of 2 rank file(s) evicted at once" in notes[0] and "cap of 1.0 kB;" in notes[0]
    )
    assert not cached(job, tmp_path / "cache")


def test_the_demo_and_the_compiled_kernels_count_and_the_kernels_go_last(tmp_path: Path) -> None:
    from lumos_core.synth.demo import demo_job_path

    root = tmp_path / "cache"
    demo = demo_job_path(root=root)  # generated into the cache folder, as the app does
    kernels = root / "numba" / "lumos_core" / "replay"
    kernels.mkdir(parents=True)
    (kernels / "kernels.simulate-12.py312.nbi").write_bytes(b"k" * 200_000)
    job = make_job(tmp_path / "job", ranks=1, launches=300)
    load_job(job, cache_config=CacheConfig(root, 10 * GB))
    gc.collect()
    units = {u.kind: u for u in cache_evict.scan(root)}
    assert units["demo"].path == demo and units["demo"].nbytes > 500_000
    assert units["kernels"].nbytes >= 200_000
    # older than the demo and the entry, yet the kernels stay while evicting the others suffices
    old = time.time() - 3600
    os.utime(kernels / "kernels.simulate-12.py312.nbi", (old, old))
    cap = units["kernels"].nbytes + 10_000
    report = cache_evict.enforce(CacheConfig(root, cap))
    assert {u.kind for u in report.evicted} == {"demo", "entry"}
    assert (root / "numba").is_dir() and not demo.exists() and cache_bytes(root) <= cap
    assert cache_evict.enforce(CacheConfig(root, 0)).evicted[0].kind == "kernels"
    assert cache_bytes(root) == 0
