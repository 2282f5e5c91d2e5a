"""``lumos replay --iteration N`` for a step the trace lacks names the steps it has."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracegen import TraceBuilder

from lumos_core.api import Job
from lumos_core.errors import LumosError
from lumos_core.trace.loader import load_job


def _job(folder: Path, steps: bool) -> Path:
    b = TraceBuilder(rank=0, world=1)
    for k in range(3):
        t0 = 1000.0 * k
        if steps:
            b.step(9 + k, t0, 990)
        b.launch("ampere_sgemm_128x64_tn", t0 + 2, 3, kts=t0 + 10, kdur=300)
    folder.mkdir(parents=True)
    b.write(folder / "rank0.json")
    return folder


def test_missing_iteration_lists_the_steps_there_are(tmp_path: Path) -> None:
    job = Job(load_job(_job(tmp_path / "a", True), use_cache=False))
    assert job.replay(iteration=10, holdout=False).result.ranks[0].iterations[0].name == "ProfilerStep#10"
    with pytest.raises(
        LumosError,
        match=r"ProfilerStep#99 in the trace \(it has ProfilerStep#9, ProfilerStep#10, ProfilerStep#11\)",
    ):
        job.replay(iteration=99, holdout=False)
    nosteps = Job(load_job(_job(tmp_path / "b", False), use_cache=False))
    with pytest.raises(LumosError, match="no ProfilerStep#N steps"):
        nosteps.replay(iteration=1, holdout=False)


def test_a_graph_without_dependencies_says_none(tmp_path: Path) -> None:
    from lumos_core.commands.replay import format_replay

    b = TraceBuilder(rank=0, world=1)
    b.events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 5,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        }
    )
    (tmp_path / "a").mkdir()
    b.write(tmp_path / "a" / "rank0.json")
    text = format_replay(Job(load_job(tmp_path / "a", use_cache=False)).replay(holdout=False))
    assert "dependencies: none" in text
