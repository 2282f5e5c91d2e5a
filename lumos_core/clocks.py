"""Clock alignment across ranks, anchored on collectives.

Ranks on different hosts have different clocks (and even on one host the profiler's time base may
differ per process). A collective ends at nearly the same moment on all of its ranks, so matched
collective instances are anchors: we solve for one offset per rank that makes every instance end
at a common time, by alternating two robust steps (instance end = median over its ranks; rank
offset = median over its instances) with the reference rank held at 0. Ranks linked only through
other ranks (e.g. a TP group that does not contain rank 0) are aligned transitively.

The offsets are applied only when they are larger than what NCCL's own exit skew explains (a few
µs), so traces of one host, whose clocks agree already, keep their recorded times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .collectives import CollectiveMatch
from .trace import CollectiveKind, Job

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


def estimate_offsets(job: Job, match: CollectiveMatch, iterations: int = 12) -> ClockAlignment:
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
    off = np.zeros(len(rank_ids))
    for _ in range(iterations):
        inst_end = _group_median(e_obs + off[r_idx], k_idx, len(inst_ids))
        new = _group_median(inst_end[k_idx] - e_obs, r_idx, len(rank_ids))
        if reference in rank_ids:
            new -= new[np.searchsorted(rank_ids, reference)]
        if np.allclose(new, off, atol=1.0):
            off = new
            break
        off = new
    inst_end = _group_median(e_obs + off[r_idx], k_idx, len(inst_ids))
    dev = np.abs(e_obs + off[r_idx] - inst_end[k_idx])
    res = _group_median(dev, r_idx, len(rank_ids))
    for j, r in enumerate(rank_ids.tolist()):
        offsets[r] = int(round(off[j]))
        residual[r] = int(round(res[j]))
        anchors[r] = int(np.count_nonzero(r_idx == j))
    lonely = [r for r in ranks if anchors[r] == 0]
    if lonely and len(ranks) > 1:
        notes.append(f"ranks {lonely} share no collective with the others: their clocks are left as recorded")
    applied = any(abs(v) > max(_MIN_APPLY_NS, 3 * residual[r]) for r, v in offsets.items())
    if not applied:
        notes.append("offsets are within NCCL's exit skew: clocks already agree and were left as recorded")
    return ClockAlignment(offsets, residual, anchors, reference, applied, notes)


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
