"""The per-rank iteration breakdown of a big job, aggregated for a chart that stays readable.

Hundreds of bars, one per rank, read as noise. :func:`group_bars` gives one bar per group of ranks
(a pipeline stage, a replica, or consecutive ranks): the mean of its members' per-iteration
breakdown, with the spread (min and max of the members' mean iteration) for a whisker; then the
*outliers* as bars of their own, labelled by rank: ranks whose exposed compute per iteration is
furthest from their group's median, beyond ``max(OUTLIER_MADS × MAD, OUTLIER_REL × median)`` (the
median absolute deviation keeps one slow rank from hiding itself), plus any ranks the caller names
(the stragglers). Exposed compute, not iteration time: in synchronous training every rank's
iteration is as long as the slowest one's, and a slow rank shows as more compute and less waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lumos_core.replay.summaries import RankBreakdownStat

OUTLIER_MADS = 3.0
OUTLIER_REL = 0.02
MAX_OUTLIERS = 8


@dataclass
class ChartBar:
    label: str
    ranks: int  # members (1 for an outlier rank)
    exposed_compute_ns: float  # per iteration, mean over members
    overlapped_ns: float
    exposed_comm_ns: float
    other_ns: float
    low_ns: float  # smallest mean iteration of a member
    high_ns: float  # largest
    outlier: bool = False


def _per_iteration(rows: Sequence[RankBreakdownStat]) -> np.ndarray:
    """(n, 4) exposed compute, overlapped, exposed comm, other per iteration."""
    a = np.asarray(
        [[r.exposed_compute_ns, r.overlapped_ns, r.exposed_comm_ns, r.other_ns] for r in rows], float
    )
    n = np.asarray([max(r.iterations, 1) for r in rows], float)
    return a.reshape(-1, 4) / n[:, None]


def consecutive_groups(ranks: Sequence[int], n_groups: int) -> list[tuple[str, list[int]]]:
    """Ranks in rank order cut into ``n_groups`` runs of about equal size ("ranks 0-31")."""
    rs = sorted(ranks)
    out = []
    for chunk in np.array_split(np.asarray(rs), max(1, min(n_groups, len(rs)))):
        if len(chunk):
            out.append((f"ranks {chunk[0]}-{chunk[-1]}", [int(x) for x in chunk]))
    return out


def group_bars(
    rows: Sequence[RankBreakdownStat],
    groups: Sequence[tuple[str, Sequence[int]]],
    flagged: set[int] | None = None,
    max_outliers: int = MAX_OUTLIERS,
) -> list[ChartBar]:
    """One bar per group (ranks without a row are skipped), then the outlier ranks (see the module
    docstring), most deviating first."""
    by_rank = {r.rank: i for i, r in enumerate(rows)}
    per = _per_iteration(rows)
    total = per.sum(axis=1)
    dev = np.zeros(len(rows))
    bars = []
    for label, members in groups:
        idx = np.asarray([by_rank[m] for m in members if m in by_rank], int)
        if len(idx) == 0:
            continue
        mean = per[idx].mean(axis=0)
        bars.append(
            ChartBar(label, len(idx), *mean.tolist(), float(total[idx].min()), float(total[idx].max()))
        )
        comp = per[idx, 0]
        med = float(np.median(comp))
        mad = float(np.median(np.abs(comp - med)))
        limit = max(OUTLIER_MADS * mad, OUTLIER_REL * abs(med))
        dev[idx] = np.where(np.abs(comp - med) > limit, np.abs(comp - med), 0.0)
    outliers = [int(i) for i in np.argsort(-dev, kind="stable") if dev[i] > 0][:max_outliers]
    for rk in sorted(flagged or ()):
        i = by_rank.get(rk)
        if i is not None and i not in outliers:
            outliers.append(i)
    for i in outliers:
        r = rows[i]
        why = "straggler" if r.rank in (flagged or ()) else "outlier"
        bars.append(
            ChartBar(f"rank {r.rank} ({why})", 1, *per[i].tolist(), float(total[i]), float(total[i]), True)
        )
    return bars
