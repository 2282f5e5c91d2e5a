"""Match collective instances across ranks.

Every NCCL communicator runs its collectives in the same order on all of its ranks, so the k-th
collective of a process group on one rank is the k-th on the others. Two complications in real
traces: (1) PyTorch only records a sequence number (``Seq``) in newer versions, and (2) each rank's
profiling window starts and ends at slightly different moments, so one rank may hold a few
collectives more than another at either end. We therefore match by (process group, Seq) when every
row has a Seq, and otherwise align each rank's sequence to a reference rank by the shift that best
agrees on (kind, message size) and keeps end times consistent (a constant clock offset).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.trace.model import CollectiveKind, Job, RankTrace

_P2P = (int(CollectiveKind.SEND), int(CollectiveKind.RECV), int(CollectiveKind.SEND_RECV))
# Sends from one rank to another are received in the order they were sent (NCCL matches point-to-
# point operations per peer and direction), but a rank's Seq counts its sends and receives
# together, and the two ends of a pipeline interleave them differently (stage 0 sends activations
# twice before it receives a gradient; stage 1 alternates). So one direction of one pair is its own
# group, matched in issue order, never by Seq.
_DIRECTED = "|p2p:"
_FULL_SEARCH = 512  # sequences up to this length try every shift; longer ones a window around 0


@dataclass
class CollectiveMatch:
    """Instances of collectives across a job.

    ``instance[rank]`` has one entry per row of that rank's ``collectives`` table: the instance id,
    or -1 when the row could not be matched. ``members[k]`` is how many ranks hold instance k and
    ``expected[k]`` how many should (the group size when recorded, else the ranks that use the group).
    """

    instance: dict[int, np.ndarray]
    kind: np.ndarray  # int8 per instance
    members: np.ndarray  # int32 per instance
    expected: np.ndarray  # int32 per instance
    group: list[str]  # group key per instance
    method: str
    notes: list[str] = field(default_factory=list)

    @property
    def n_instances(self) -> int:
        return len(self.kind)

    @property
    def complete(self) -> np.ndarray:
        """Instances whose every expected participant is in the trace."""
        return self.members >= self.expected

    def summary(self) -> dict[str, int]:
        unmatched = sum(int(np.count_nonzero(v < 0)) for v in self.instance.values())
        return {
            "instances": self.n_instances,
            "complete": int(np.count_nonzero(self.complete)),
            "partial": int(np.count_nonzero(~self.complete)),
            "unmatched_rows": unmatched,
        }


def group_key(rank: RankTrace, row: int) -> str:
    c = rank.collectives
    pg = int(c.pg[row])
    key = rank.strings[pg] if pg >= 0 else "?"
    kind, peer = int(c.kind[row]), int(c.peer[row])
    if kind in _P2P and peer >= 0:
        if kind == CollectiveKind.SEND:
            key += f"{_DIRECTED}{rank.rank}->{peer}"
        elif kind == CollectiveKind.RECV:
            key += f"{_DIRECTED}{peer}->{rank.rank}"
        else:
            a, b = sorted((rank.rank, peer))
            key += f"|p2p:{a}-{b}"
    return key


def _signature(rank: RankTrace, rows: np.ndarray) -> np.ndarray:
    """(kind, size) packed in one int per row; send and recv count as the same kind."""
    c = rank.collectives
    kind = c.kind[rows].astype(np.int64)
    kind = np.where(np.isin(kind, _P2P), int(CollectiveKind.SEND_RECV), kind)
    size = c.size_bytes[rows]
    return kind * (1 << 48) + np.where(size >= 0, size % (1 << 47), (1 << 47) - 1)


def group_rows(t: RankTrace) -> dict[str, np.ndarray]:
    """The rank's collective rows in issue order, split by group key (:func:`group_key`); groups in
    the order of their first row. The key is computed once per distinct (group, kind, peer)."""
    c = t.collectives
    if len(c) == 0:
        return {}
    order = np.argsort(t.start[c.event], kind="stable")
    kind = c.kind[order].astype(np.int64)
    peer = c.peer[order].astype(np.int64)
    p2p = np.isin(kind, _P2P) & (peer >= 0)  # only these rows' keys depend on kind and peer
    pg = c.pg[order].astype(np.int64)
    kind, peer = np.where(p2p, kind, -1), np.where(p2p, peer, -1)
    if len(pg) and int(pg.max()) < 1 << 22 and int(pg.min()) >= -1 and int(peer.min()) >= -1:
        # one int per (group, kind, peer): kind is an int8, peer an int32
        combos = ((pg + 1) << 40) | ((kind + 1) << 32) | (peer + 1)
        _, first, inverse = np.unique(combos, return_index=True, return_inverse=True)
    else:
        combos = np.stack([pg, kind, peer], axis=1)
        _, first, inverse = np.unique(combos, axis=0, return_index=True, return_inverse=True)
    key_id: dict[str, int] = {}
    combo_key = np.asarray([key_id.setdefault(group_key(t, int(order[i])), len(key_id)) for i in first])
    row_key = combo_key[inverse.reshape(-1)]
    keys = list(key_id)
    ids, first_row = np.unique(row_key, return_index=True)
    return {keys[g]: order[row_key == g] for g in ids[np.argsort(first_row)].tolist()}


def match_collectives(job: Job) -> CollectiveMatch:
    """Assign instance ids to every collective row of every rank (see module docstring)."""
    rows_by_group: dict[str, dict[int, np.ndarray]] = {}
    for t in job.ranks:
        for key, sel in group_rows(t).items():
            rows_by_group.setdefault(key, {})[t.rank] = sel

    instance = {t.rank: np.full(len(t.collectives), -1, np.int64) for t in job.ranks}
    kinds: list[int] = []
    members: list[int] = []
    expected: list[int] = []
    groups: list[str] = []
    notes: list[str] = []
    uses_seq = all(
        bool((job.rank(r).collectives.seq[rows] >= 0).all())
        for key, per_rank in rows_by_group.items()
        if "->" not in key
        for r, rows in per_rank.items()
    ) and bool(rows_by_group)
    by_rank = {t.rank: t for t in job.ranks}

    for key, per_rank in rows_by_group.items():
        if uses_seq and "->" not in key:
            coords = {r: by_rank[r].collectives.seq[rows] for r, rows in per_rank.items()}
        else:
            coords = _align_by_order(by_rank, per_rank)
        all_coords = np.unique(np.concatenate(list(coords.values())))
        base = len(kinds)
        for r, rows in per_rank.items():
            instance[r][rows] = base + np.searchsorted(all_coords, coords[r])
        n = len(all_coords)
        count = np.zeros(n, np.int32)
        kind_of = np.zeros(n, np.int8)
        size_of = np.full(n, -1, np.int32)
        for r, rows in per_rank.items():
            idx = instance[r][rows] - base
            np.add.at(count, idx, 1)
            c = by_rank[r].collectives
            kind_of[idx] = c.kind[rows]
            size_of[idx] = np.maximum(size_of[idx], c.group_size[rows])
        users = len(per_rank)
        # unknown size: the ranks that use the group, except that an unnamed group (matched as one,
        # the whole job) of a job whose distributedInfo says more ranks than the folder holds is not
        # known to be complete (one sampled rank of 128 would otherwise look like 1-rank groups)
        unknown = max(users, job.world_size) if key.startswith("?") else users
        exp = np.where(
            size_of > 0, np.minimum(size_of, max(users, 1) if key.startswith("?") else size_of), unknown
        )
        if "|p2p:" in key:
            exp = np.minimum(exp, 2)
        kinds.extend(kind_of.tolist())
        members.extend(count.tolist())
        expected.extend(exp.tolist())
        groups.extend([key] * n)
        if key.startswith("?"):
            notes.append(
                "some collectives carry no process-group name; they were matched as one group in issue order"
            )
    method = "process group + sequence number" if uses_seq else "issue order within each process group"
    return CollectiveMatch(
        instance=instance,
        kind=np.asarray(kinds, np.int8),
        members=np.asarray(members, np.int32),
        expected=np.asarray(expected, np.int32),
        group=groups,
        method=method,
        notes=sorted(set(notes)),
    )


def _align_by_order(by_rank: dict[int, RankTrace], per_rank: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Coordinates in a common index space: each rank's k-th row maps to k + shift."""
    ref = max(per_rank, key=lambda r: (len(per_rank[r]), -r))
    ref_rows = per_rank[ref]
    ref_t = by_rank[ref]
    ref_sig = _signature(ref_t, ref_rows)
    ref_end = (ref_t.start + ref_t.dur)[ref_t.collectives.event[ref_rows]].astype(np.float64)
    coords = {ref: np.arange(len(ref_rows), dtype=np.int64)}
    for r, rows in per_rank.items():
        if r == ref:
            continue
        t = by_rank[r]
        coords[r] = np.arange(len(rows), dtype=np.int64) + best_shift(
            ref_sig,
            ref_end,
            _signature(t, rows),
            (t.start + t.dur)[t.collectives.event[rows]].astype(np.float64),
        )
    return coords


def best_shift(ref_sig: np.ndarray, ref_end: np.ndarray, sig: np.ndarray, end: np.ndarray) -> int:
    """Shift s that pairs row k with ref[k + s] so that the most pairs agree on (kind, size) AND on
    timing: with the right shift, ref_end - end is the same clock offset for every pair (within the
    few µs of NCCL exit skew); a wrong shift pairs unrelated collectives whose differences scatter.
    All candidate shifts are scored at once on a (shifts x rows) matrix."""
    n_ref, n = len(ref_sig), len(sig)
    if n_ref + n <= 2 * _FULL_SEARCH:
        shifts = np.arange(-(n - 1), n_ref)
    else:
        lo = min(0, n_ref - n) - 64
        hi = max(0, n_ref - n) + 64
        shifts = np.arange(lo, hi + 1)
    gaps = np.diff(ref_end)
    typical_gap = float(np.median(gaps)) if len(gaps) else 1e12
    tol = max(2_000.0, min(100_000.0, 0.25 * typical_gap))  # ns
    if n == n_ref:
        # The usual case, both ends hold the same collectives: when every pair at shift 0 agrees,
        # with a wide margin on timing (so the median's rounding cannot matter), no other shift can
        # score as many good pairs (it pairs fewer rows), so the search below would pick 0.
        diff = ref_end - end
        if np.array_equal(ref_sig, sig) and bool(np.all(np.abs(diff - np.median(diff)) < 0.5 * tol)):
            return 0
    return shift_search(ref_sig, ref_end, sig, end, shifts, tol)


def shift_search(
    ref_sig: np.ndarray, ref_end: np.ndarray, sig: np.ndarray, end: np.ndarray, shifts: np.ndarray, tol: float
) -> int:
    """:func:`best_shift`'s scoring of every candidate shift (timing agreement within ``tol`` ns)."""
    n_ref, n = len(ref_sig), len(sig)
    best_good, best_spread, best_s = -1, 0.0, 0
    for chunk in np.array_split(shifts, max(1, len(shifts) * n // 2_000_000 + 1)):
        idx = np.arange(n)[None, :] + chunk[:, None]  # ref index of row k under shift s
        valid = (idx >= 0) & (idx < n_ref)
        safe = np.clip(idx, 0, n_ref - 1)
        diff = np.where(valid, ref_end[safe] - end[None, :], np.nan)
        med = np.nanmedian(np.where(valid.any(axis=1, keepdims=True), diff, 0.0), axis=1)
        dev = np.abs(diff - med[:, None])
        same = valid & (ref_sig[safe] == sig[None, :])
        good = np.count_nonzero(same & (dev < tol), axis=1)
        dev_masked = np.where(valid, dev, np.nan)
        spread = np.nanmedian(np.where(valid.any(axis=1, keepdims=True), dev_masked, 0.0), axis=1)
        # Best: most good pairs, then smallest spread, then the smallest |shift|.
        order = np.lexsort((np.abs(chunk), spread, -good))
        j = int(order[0])
        cand = (int(good[j]), -float(spread[j]), -abs(int(chunk[j])))
        if best_good < 0 or cand > (best_good, -best_spread, -abs(best_s)):
            best_good, best_spread, best_s = int(good[j]), float(spread[j]), int(chunk[j])
    return best_s
