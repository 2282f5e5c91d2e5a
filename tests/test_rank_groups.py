"""Ranks grouped by parallel role from the inferred baseline's process groups, and Megatron's default
grid when groups are missing."""

from __future__ import annotations

from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.rank_groups import rank_groups

TP, DP, PP = 2, 2, 2
RANKS = list(range(TP * DP * PP))


def _megatron_groups() -> dict[str, list[list[int]]]:
    grid = [[[(s * DP + d) * TP + t for t in range(TP)] for d in range(DP)] for s in range(PP)]
    tp = [grid[s][d] for s in range(PP) for d in range(DP)]
    dp = [[grid[s][d][t] for d in range(DP)] for s in range(PP) for t in range(TP)]
    pp = [[grid[s][d][t] for s in range(PP)] for d in range(DP) for t in range(TP)]
    return {"tp": tp, "dp": dp, "pp": pp}


def _baseline(groups: dict[str, list[list[int]]]) -> Baseline:
    return Baseline(config=JobConfig(tp=TP, dp=DP, pp=PP), groups=groups)


def _members(groups):  # type: ignore[no-untyped-def]
    return [g.members for g in groups]


def test_groups_from_process_groups() -> None:
    b = _baseline(_megatron_groups())
    assert _members(rank_groups(b, RANKS, "pp")) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert _members(rank_groups(b, RANKS, "dp")) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert _members(rank_groups(b, RANKS, "tp")) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    g = rank_groups(b, RANKS, "pp", prefer={6})
    assert [x.representative for x in g] == [0, 6]
    assert [x.label for x in g] == ["PP stage 0", "PP stage 1"]
    assert g[0].how == "process groups"


def test_missing_groups_fall_back_to_megatron_order_and_indices_follow_the_job_order() -> None:
    groups = _megatron_groups()
    del groups["dp"]
    b = _baseline(groups)
    g = rank_groups(b, RANKS, "pp")
    assert _members(g) == [[0, 1, 2, 3], [4, 5, 6, 7]] and "Megatron" in g[0].how
    # job order differs from rank order: members are indices into the job's ranks
    shuffled = [7, 6, 5, 4, 3, 2, 1, 0]
    g = rank_groups(_baseline(_megatron_groups()), shuffled, "tp")
    assert [[shuffled[i] for i in m] for m in _members(g)] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_without_a_baseline_everything_is_one_group() -> None:
    g = rank_groups(None, RANKS, "dp")
    assert _members(g) == [RANKS] and g[0].representative == 0
