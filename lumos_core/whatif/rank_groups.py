"""Ranks grouped by their parallel role: pipeline stage, data-parallel replica or tensor-parallel group.

A job of hundreds of ranks reads better as a handful of groups: the ranks of one pipeline stage run
the same layers, the ranks of one data-parallel replica form one copy of the model, the ranks of one
tensor-parallel group split each layer. Groups come from the process groups of the inferred
baseline (:attr:`lumos_core.whatif.config.Baseline.groups`, role -> member lists), joined:

* a **PP stage** is the ranks connected by TP and DP groups (everything but the pipeline axis);
* a **DP replica** is the ranks connected by TP and PP groups;
* a **TP group** is one TP process group.

When a role with more than one rank per group (tp/dp/pp > 1) has no recorded groups, the ranks are
placed on Megatron-LM's default grid instead (tensor fastest, then data, then pipeline:
``rank = (stage * dp + replica) * tp + tp_index``), and the group says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumos_core.whatif.config import Baseline

GROUPINGS = {
    "pp": ("PP stage", ("tp", "dp")),
    "dp": ("DP replica", ("tp", "pp")),
    "tp": ("TP group", ("tp",)),
}


@dataclass
class RankGroup:
    label: str  # "PP stage 0"
    members: list[int]  # indices into job.ranks, in rank order
    representative: int  # index into job.ranks: the member shown expanded
    how: str  # "process groups" or "Megatron rank order (tp, dp, pp)"


def _find(parent: dict[int, int], r: int) -> int:
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


def grid_key(rank: int, by: str, tp: int, dp: int) -> int | tuple[int, int]:
    """The group of ``rank`` on Megatron's default grid."""
    stage, replica = rank // (tp * dp), (rank // tp) % dp
    return {"pp": stage, "dp": replica}.get(by, (stage, replica))


def rank_groups(
    baseline: Baseline | None, ranks: list[int], by: str, prefer: set[int] | None = None
) -> list[RankGroup]:
    """Groups of ``ranks`` (global rank numbers, job order) by role ``by`` ("pp", "dp" or "tp"),
    ordered by their lowest rank. The representative of a group is its first rank in ``prefer``
    (e.g. the stragglers) if any, else its lowest rank. One group of everything without a baseline."""
    label, joins = GROUPINGS[by]
    index = {r: i for i, r in enumerate(ranks)}
    prefer = prefer or set()
    keys: dict[int, object] = {}
    how = "process groups"
    if baseline is None:
        keys = dict.fromkeys(ranks, 0)
        how = "no inferred layout: every rank"
    else:
        cfg = baseline.config
        sizes = {"tp": cfg.tp, "dp": cfg.dp, "pp": cfg.pp}
        missing = [role for role in joins if sizes.get(role, 1) > 1 and not baseline.groups.get(role)]
        if missing and cfg.tp * cfg.dp * cfg.pp == len(ranks):
            keys = {r: grid_key(r, by, cfg.tp, cfg.dp) for r in ranks}
            how = "Megatron rank order (tp, dp, pp)"
        else:
            parent = {r: r for r in ranks}
            for role in joins:
                for members in baseline.groups.get(role, []):
                    inside = [m for m in members if m in parent]
                    for m in inside[1:]:
                        a, b = _find(parent, inside[0]), _find(parent, m)
                        if a != b:
                            parent[max(a, b)] = min(a, b)
            keys = {r: _find(parent, r) for r in ranks}
    by_key: dict[object, list[int]] = {}
    for r in sorted(ranks):
        by_key.setdefault(keys[r], []).append(index[r])
    groups = []
    for k, members in enumerate(sorted(by_key.values(), key=lambda m: ranks[m[0]])):
        rep = next((i for i in members if ranks[i] in prefer), members[0])
        groups.append(RankGroup(f"{label} {k}", members, rep, how))
    return groups


def default_role(baseline: Baseline | None) -> str:
    """The grouping a big job reads best in: pipeline stages, else TP groups, else DP replicas
    ("" when the layout is a single rank per role)."""
    if baseline is None:
        return ""
    cfg = baseline.config
    return "pp" if cfg.pp > 1 else "tp" if cfg.tp > 1 else "dp" if cfg.dp > 1 else ""
