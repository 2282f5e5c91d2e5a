"""Clock alignment across ranks, anchored on collectives.

Ranks on different hosts have different clocks (and even on one host the profiler's time base may
differ per process). A collective ends at nearly the same moment on all of its ranks, so matched
collective instances are anchors: we solve for one offset per rank that makes every instance end
at a common time: robust per-pair differences, solved by weighted least squares with the
reference rank held at 0. Ranks linked only through other ranks (e.g. a TP group that does not
contain rank 0, or two nodes linked by a few data-parallel collectives) are aligned transitively.

The offsets are applied only when they are larger than what NCCL's own exit skew explains (a few
µs), so traces of one host, whose clocks agree already, keep their recorded times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.trace.collectives import CollectiveMatch
from lumos_core.trace.model import CollectiveKind, Job

_MIN_APPLY_NS = 20_000  # below this an offset is indistinguishable from NCCL exit skew


@dataclass
class ClockAlignment:
    """Per-rank offsets (ns, added to the rank's times), residuals and how many anchors backed them."""

    offsets_ns: dict[int, int]
    residual_ns: dict[int, int]
    anchors: dict[int, int]
    reference: int
    applied: bool
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "method": "collective end times",
            "reference_rank": self.reference,
            "applied": self.applied,
            "offsets_us": {r: v / 1000 for r, v in self.offsets_ns.items()},
            "residual_us": {r: v / 1000 for r, v in self.residual_ns.items()},
            "anchors": dict(self.anchors),
            "notes": list(self.notes),
        }


def estimate_offsets(job: Job, match: CollectiveMatch) -> ClockAlignment:
    """Solve for per-rank clock offsets from matched collective end times (see module docstring)."""
    p2p = np.isin(match.kind, [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
    usable = (match.members >= 2) & ~p2p
    ranks = [t.rank for t in job.ranks]
    reference = min(ranks) if ranks else 0
    obs_rank: list[np.ndarray] = []
    obs_inst: list[np.ndarray] = []
    obs_end: list[np.ndarray] = []
    for t in job.ranks:
        inst = match.instance.get(t.rank)
        if inst is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ok[ok] = usable[inst[ok]]
        if not ok.any():
            continue
        ev = t.collectives.event[ok]
        obs_rank.append(np.full(int(ok.sum()), t.rank, np.int64))
        obs_inst.append(inst[ok])
        obs_end.append((t.start[ev] + t.dur[ev]).astype(np.float64))
    offsets = dict.fromkeys(ranks, 0)
    residual = dict.fromkeys(ranks, 0)
    anchors = dict.fromkeys(ranks, 0)
    notes: list[str] = []
    if not obs_rank:
        if len(ranks) > 1:
            notes.append("no collective shared between ranks: clocks left as recorded")
        return ClockAlignment(offsets, residual, anchors, reference, False, notes)
    r_obs = np.concatenate(obs_rank)
    i_obs = np.concatenate(obs_inst)
    e_obs = np.concatenate(obs_end)
    rank_ids = np.asarray(sorted(set(r_obs.tolist())))
    r_idx = np.searchsorted(rank_ids, r_obs)
    inst_ids, k_idx = np.unique(i_obs, return_inverse=True)
    off, roots = _solve_offsets(r_idx, k_idx, e_obs, len(rank_ids), len(inst_ids))
    if reference in rank_ids:
        off -= off[np.searchsorted(rank_ids, reference)]
    inst_end = _group_median(e_obs + off[r_idx], k_idx, len(inst_ids))
    dev = np.abs(e_obs + off[r_idx] - inst_end[k_idx])
    res = _group_median(dev, r_idx, len(rank_ids))
    component = {r: r for r in ranks}  # rank -> lowest rank of the ranks its collectives link it to
    for j, r in enumerate(rank_ids.tolist()):
        offsets[r] = int(round(off[j]))
        residual[r] = int(round(res[j]))
        anchors[r] = int(np.count_nonzero(r_idx == j))
        component[r] = int(rank_ids[roots[j]])
    linked = _link_components_by_p2p(job, match, offsets, component, reference)
    if linked:
        notes.append(
            f"{linked} group(s) of ranks that share no collective (pipeline stages) aligned on their "
            "send/receive pairs"
        )
    lonely = [r for r in ranks if anchors[r] == 0 and component[r] == r and r != reference]
    if lonely and len(ranks) > 1:
        notes.append(f"ranks {lonely} share no collective with the others: their clocks are left as recorded")
    applied = any(abs(v) > max(_MIN_APPLY_NS, 3 * residual[r]) for r, v in offsets.items())
    if not applied:
        notes.append("offsets are within NCCL's exit skew: clocks already agree and were left as recorded")
    return ClockAlignment(offsets, residual, anchors, reference, applied, notes)


def _solve_offsets(
    r_idx: np.ndarray, k_idx: np.ndarray, ends: np.ndarray, n_ranks: int, n_inst: int
) -> np.ndarray:
    """Offsets o (one per rank) with ends[i] + o[rank] equal across each instance, least squares.

    Each instance links its participants to its lowest rank (the hub); a pair of ranks gets the
    median of their end differences over every instance they share (robust to the odd late exit),
    weighted by how many they share. Solving the weighted normal equations lets a few cross-node
    data-parallel collectives carry the offset between nodes even when the many intra-node
    (tensor-parallel) collectives say nothing about it. Each connected group of ranks is pinned at
    its lowest rank.
    """
    order = np.lexsort((r_idx, k_idx))
    k_s, r_s, e_s = k_idx[order], r_idx[order], ends[order]
    first = np.ones(len(k_s), bool)
    first[1:] = k_s[1:] != k_s[:-1]
    hub_pos = np.maximum.accumulate(np.where(first, np.arange(len(k_s)), 0))
    hub_r, hub_e = r_s[hub_pos], e_s[hub_pos]
    link = ~first
    a, b, d = r_s[link], hub_r[link], hub_e[link] - e_s[link]  # o[a] - o[b] ~ d
    if len(a) == 0:
        return np.zeros(n_ranks), np.arange(n_ranks)
    pair = a.astype(np.int64) * n_ranks + b
    porder = np.lexsort((d, pair))
    pair_s, d_s = pair[porder], d[porder]
    starts = np.flatnonzero(np.r_[True, pair_s[1:] != pair_s[:-1]])
    counts = np.diff(np.r_[starts, len(pair_s)])
    mid = starts + (counts - 1) // 2
    med = np.where(counts % 2 == 1, d_s[mid], 0.5 * (d_s[mid] + d_s[np.minimum(mid + 1, len(d_s) - 1)]))
    pa, pb = pair_s[starts] // n_ranks, pair_s[starts] % n_ranks
    w = counts.astype(np.float64)
    lap = np.zeros((n_ranks, n_ranks))
    rhs = np.zeros(n_ranks)
    np.add.at(lap, (pa, pa), w)
    np.add.at(lap, (pb, pb), w)
    np.add.at(lap, (pa, pb), -w)
    np.add.at(lap, (pb, pa), -w)
    np.add.at(rhs, pa, w * med)
    np.add.at(rhs, pb, -w * med)
    # Pin the lowest rank of every connected component (the system is singular without it).
    parent = list(range(n_ranks))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(pa.tolist(), pb.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    for root in {find(x) for x in range(n_ranks)}:
        lap[root, :] = 0.0
        lap[root, root] = 1.0
        rhs[root] = 0.0
    return np.linalg.solve(lap, rhs), np.asarray([find(x) for x in range(n_ranks)])


def _link_components_by_p2p(
    job: Job, match: CollectiveMatch, offsets: dict[int, int], component: dict[int, int], reference: int
) -> int:
    """Shift whole groups of ranks that no collective links (pipeline stages on other hosts) so that
    their send/receive pairs end together. Point-to-point ends are weaker anchors than collective
    ends (a small send can finish into the receiver's buffer early), so they only place groups the
    collectives left unplaced, by the median over every pair between two groups. Returns how many
    groups moved."""
    p2p = np.isin(match.kind, [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
    ends: dict[int, list[tuple[int, float]]] = {}
    for t in job.ranks:
        inst = match.instance.get(t.rank)
        if inst is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ok[ok] = p2p[inst[ok]] & (match.members[inst[ok]] == 2)
        if not ok.any():
            continue
        ev = t.collectives.event[ok]
        for k, e in zip(inst[ok].tolist(), (t.start[ev] + t.dur[ev]).tolist()):
            ends.setdefault(k, []).append((t.rank, float(e) + offsets[t.rank]))
    diffs: dict[tuple[int, int], list[float]] = {}
    for pair in ends.values():
        if len(pair) != 2:
            continue
        (ra, ea), (rb, eb) = pair
        ca, cb = component[ra], component[rb]
        if ca != cb:  # group cb's clock runs (eb - ea) ahead of group ca's
            diffs.setdefault((ca, cb), []).append(eb - ea)
            diffs.setdefault((cb, ca), []).append(ea - eb)
    if not diffs:
        return 0
    placed = {component.get(reference, reference)}
    # the shift each placed group got: the differences were measured before any group moved, so a
    # group placed from a moved one moves with it (stage 3 follows stage 2 when stage 2 is on
    # another host)
    shifted = dict.fromkeys(placed, 0.0)
    moved = 0
    frontier = list(placed)
    while frontier:
        c = frontier.pop()
        for (a, b), d in sorted(diffs.items()):
            if a != c or b in placed:
                continue
            shift = shifted[a] - float(np.median(d))
            shifted[b] = shift
            for r, root in component.items():
                if root == b:
                    offsets[r] = int(round(offsets[r] + shift))
            placed.add(b)
            frontier.append(b)
            moved += 1
    return moved


def _group_median(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of ``values`` per group id in [0, n_groups)."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    bounds = np.searchsorted(g, np.arange(n_groups + 1))
    a, b = bounds[:-1], bounds[1:]
    if len(v) == 0:
        return np.zeros(n_groups)
    m = np.minimum((a + b - 1) // 2, len(v) - 1)
    lo, hi = v[m], v[np.minimum(m + 1, len(v) - 1)]
    out = np.where((b - a) % 2 == 1, lo, 0.5 * (lo + hi))
    return np.where(b > a, out, 0.0)
