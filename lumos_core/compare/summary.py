"""What one job did per steady-state iteration: the tables that ``lumos diff`` and ``lumos validate``
put side by side.

Every figure is *per rank and per steady-state iteration* (the mean over the ranks and iterations
summarised), so jobs with different numbers of ranks or recorded steps compare directly. Steady
state is what :mod:`lumos_core.whatif.estimate` predicts: the iterations between consecutive
``ProfilerStep`` starts (the last, partial one left out when there are several). Events count in the
iteration their start falls in.

Work is summarised where it runs: GPU activities (kernels, memcpy, memset) on GPU jobs; CPU
operators by their *self* time (duration minus nested operators) on CPU-only jobs, so nested
operators are not counted twice and the families still add up to the work done.

Kernels and operators are keyed by :func:`~lumos_core.compare.canonical.canonical_name`, so a
recompiled job's renumbered ``torch.compile`` regions and Triton kernels meet their old selves.
:meth:`JobSummary.spread` is the job's own iteration-to-iteration spread: the noise a difference
between two jobs must exceed to mean something.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.compare.canonical import canonical_name
from lumos_core.perf.collective_kinds import bus_factor
from lumos_core.replay.breakdown import activity, breakdown, steady_windows
from lumos_core.trace.kernel_families import Family, event_families
from lumos_core.trace.model import CPU_WORK_KINDS, GPU_ACTIVITY_KINDS, CollectiveKind, Kind, RankTrace
from lumos_core.whatif.retime.families import cpu_op_families

BREAKDOWN_KEYS = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")  # as replay/estimate
SUMMARY_DEFINITION = (
    "per rank and per steady-state iteration (mean over ranks and over the iterations between "
    "consecutive ProfilerStep starts, the last partial one left out); GPU jobs: GPU activities; "
    "CPU-only jobs: CPU operators by self time"
)
_GPU_KINDS = np.asarray(GPU_ACTIVITY_KINDS, np.int8)


@dataclass
class Stat:
    """Count and time of one row (kernel, family, operator), per rank per iteration."""

    count: float = 0.0
    total_us: float = 0.0

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass
class CollStat:
    """One collective kind / group size / message size, per rank per iteration."""

    count: float = 0.0
    total_us: float = 0.0
    bytes_moved: float = 0.0  # size x NCCL-tests bus factor, summed (for the bus bandwidth)

    @property
    def bus_bw_gbps(self) -> float:
        # nan (shown as '-') when the message size or group size was not recorded: no bytes counted
        # is not a bandwidth of 0 GB/s
        if self.total_us <= 0 or self.bytes_moved <= 0:
            return float("nan")
        return self.bytes_moved / (self.total_us * 1000)


@dataclass
class Spread:
    """A job's own iteration spread (µs); ``std_us`` is None with fewer than two steady iterations."""

    std_us: float | None
    n_iterations: int
    min_us: float
    max_us: float

    def as_dict(self) -> dict[str, Any]:
        std = round(self.std_us, 3) if self.std_us is not None else None
        return {
            "std_us": std,
            "iterations": self.n_iterations,
            "min_us": round(self.min_us, 3),
            "max_us": round(self.max_us, 3),
        }


@dataclass
class RankSummary:
    rank: int
    iterations: list[tuple[str, float]]  # (name, µs) of each steady-state iteration
    breakdown: dict[str, float]  # BREAKDOWN_KEYS -> mean µs per iteration

    @property
    def iteration_us(self) -> float:
        return float(np.mean([d for _, d in self.iterations])) if self.iterations else 0.0


@dataclass
class JobSummary:
    """The steady-state tables of one job (measured, or predicted by ``estimate``)."""

    label: str
    gpu: bool  # GPU activities summarised (else CPU operators)
    device: str
    ranks: dict[int, RankSummary]
    families: dict[str, Stat] = field(default_factory=dict)
    kernels: dict[str, Stat] = field(default_factory=dict)  # "name [shape]" -> stat
    kernel_family: dict[str, str] = field(default_factory=dict)
    names: dict[str, Stat] = field(default_factory=dict)  # kernels by name alone (shapes pooled)
    collectives: dict[tuple[str, int, int], CollStat] = field(default_factory=dict)
    cpu_ops: dict[str, Stat] = field(default_factory=dict)

    @property
    def iteration_us(self) -> float:
        v = [r.iteration_us for r in self.ranks.values() if r.iterations]
        return float(np.mean(v)) if v else 0.0

    @property
    def iterations(self) -> list[float]:
        """Aligned steady-state iterations: the k-th of every rank, averaged over ranks."""
        n = min((len(r.iterations) for r in self.ranks.values() if r.iterations), default=0)
        return [
            float(np.mean([r.iterations[k][1] for r in self.ranks.values() if r.iterations]))
            for k in range(n)
        ]

    @property
    def breakdown(self) -> dict[str, float]:
        rs = [r for r in self.ranks.values() if r.iterations]
        return {k: float(np.mean([r.breakdown[k] for r in rs])) if rs else 0.0 for k in BREAKDOWN_KEYS}

    def spread(self) -> Spread:
        """How much the steady iterations vary: the standard deviation of each rank's iteration
        times around that rank's own mean, pooled over ranks (so a pipeline stage that is always
        longer is not noise), and the shortest and longest aligned iteration."""
        dev, dof = 0.0, 0
        for r in self.ranks.values():
            d = np.asarray([x for _, x in r.iterations], float)
            if len(d) >= 2:
                dev += float(((d - d.mean()) ** 2).sum())
                dof += len(d) - 1
        its = self.iterations
        return Spread(
            std_us=float(np.sqrt(dev / dof)) if dof else None,
            n_iterations=len(its),
            min_us=min(its) if its else 0.0,
            max_us=max(its) if its else 0.0,
        )

    def collectives_by_kind(self) -> dict[str, CollStat]:
        out: dict[str, CollStat] = {}
        for (kind, _n, _size), c in self.collectives.items():
            a = out.setdefault(kind, CollStat())
            a.count += c.count
            a.total_us += c.total_us
            a.bytes_moved += c.bytes_moved
        return out


def is_gpu_job(ranks: Sequence[RankTrace]) -> bool:
    return any(np.isin(t.kind, _GPU_KINDS).any() for t in ranks)


def summarize(
    ranks: Sequence[RankTrace], label: str = "", *, gpu: bool | None = None, shapes: bool = True
) -> JobSummary:
    """Tables of ``ranks`` (a loaded job's, or a prediction's timeline)."""
    gpu = is_gpu_job(ranks) if gpu is None else gpu
    device = ranks[0].device_name if ranks else "?"
    out = JobSummary(label=label, gpu=gpu, device=device, ranks={})
    weight = 0
    for t in ranks:
        win = [(w.name, w.start, w.end) for w in steady_windows(t)]
        if not win:
            continue
        weight += len(win)
        s, e, c = activity(t)
        parts = np.zeros(4)
        for _, lo, hi in win:
            b = breakdown(s, e, c, lo, hi)
            parts += (b.exposed_compute_ns, b.overlapped_ns, b.exposed_comm_ns, b.other_ns)
        parts /= 1000 * len(win)
        out.ranks[t.rank] = RankSummary(
            t.rank,
            [(n, (hi - lo) / 1000) for n, lo, hi in win],
            dict(zip(BREAKDOWN_KEYS, parts.tolist())),
        )
        lo, hi = win[0][1], win[-1][2]
        inside = (t.start >= lo) & (t.start < hi)
        _add_work(out, t, inside, gpu, shapes)
        _add_collectives(out, t, inside)
        _add_cpu_ops(out, t, inside)
    # per rank per iteration: divide the sums by the rank-iterations summarised
    if weight:
        per = float(weight)
        for table in (out.families, out.kernels, out.names, out.cpu_ops):
            for st in table.values():
                st.count /= per
                st.total_us /= per
        for cs in out.collectives.values():
            cs.count /= per
            cs.total_us /= per
            cs.bytes_moved /= per
    return out


def _self_time(t: RankTrace, idx: np.ndarray) -> np.ndarray:
    """Duration minus the durations of the CPU work directly nested in each event (ns)."""
    child = np.zeros(len(t), np.int64)
    work = np.isin(t.kind, CPU_WORK_KINDS)
    nested = np.flatnonzero(work & (t.parent >= 0))
    np.add.at(child, t.parent[nested], t.dur[nested])
    return np.maximum(t.dur[idx] - child[idx], 0)


def _shape_of(t: RankTrace, op: int, cache: dict[int, str]) -> str:
    if op < 0:
        return ""
    got = cache.get(op)
    if got is None:
        dims = t.args_of(op).get("Input Dims") if t.kind[op] == Kind.CPU_OP else None
        got = str(dims).replace(" ", "") if dims else ""
        cache[op] = got
    return got


def _launching_op(t: RankTrace, e: int) -> int:
    launch = int(t.launch[e])
    op = int(t.parent[launch]) if launch >= 0 else -1
    while op >= 0 and t.kind[op] == Kind.RUNTIME:
        op = int(t.parent[op])
    return op


def _add_work(out: JobSummary, t: RankTrace, inside: np.ndarray, gpu: bool, shapes: bool) -> None:
    if gpu:
        idx = np.flatnonzero(np.isin(t.kind, _GPU_KINDS) & inside)
        fam = event_families(t)[idx]
        dur = t.dur[idx]
    else:
        idx = np.flatnonzero((t.kind == Kind.CPU_OP) & inside)
        fam = cpu_op_families(t.strings)[t.name[idx]]
        dur = _self_time(t, idx)
    labels = [f.label for f in Family]
    if gpu:
        for f, d in zip(fam.tolist(), dur.tolist()):
            a = out.families.setdefault(labels[int(f)], Stat())
            a.count += 1
            a.total_us += d / 1000
    else:
        _add_cpu_families(out, t, inside, labels)
    cache: dict[int, str] = {}
    for e, f, d in zip(idx.tolist(), fam.tolist(), dur.tolist()):
        flabel = labels[int(f)]
        name = canonical_name(t.strings[int(t.name[e])])  # torch.compile's renumbering is no change
        n = out.names.setdefault(name, Stat())
        n.count += 1
        n.total_us += d / 1000
        if shapes:
            shape = _shape_of(t, _launching_op(t, e) if gpu else e, cache)
            key = f"{name} {shape}" if shape else name
        else:
            key = name
        k = out.kernels.setdefault(key, Stat())
        k.count += 1
        k.total_us += d / 1000
        out.kernel_family.setdefault(key, flabel)


def _add_cpu_families(out: JobSummary, t: RankTrace, inside: np.ndarray, labels: list[str]) -> None:
    """CPU-only jobs: an operator of a compute family (GEMM, attention, elementwise) counts with its
    inclusive time when no enclosing operator is of a compute family; the rest of the outermost CPU
    work is "CPU op". Inclusive times of outermost operators stay meaningful on predicted timelines,
    where nested operators are placed around re-timed tasks and self times are not."""
    fam = np.full(len(t), int(Family.CPU_OP), np.int16)
    ops = np.flatnonzero(t.kind == Kind.CPU_OP)
    fam[ops] = cpu_op_families(t.strings)[t.name[ops]]
    compute = np.isin(fam, [Family.GEMM, Family.ATTENTION, Family.ELEMENTWISE]) & (t.kind == Kind.CPU_OP)
    work = np.isin(t.kind, CPU_WORK_KINDS)
    parent, depth = nesting(t)
    covered = np.zeros(len(t), bool)  # inside a compute operator
    outer = np.zeros(len(t), bool)  # not inside any CPU work
    has = parent >= 0
    outer[~has] = True
    for d in range(1, int(depth.max(initial=0)) + 1):
        sel = np.flatnonzero((depth == d) & has)
        p = parent[sel]
        covered[sel] = covered[p] | compute[p]
        outer[sel] = outer[p] & ~work[p]
    counted = compute & ~covered & inside
    for f in np.unique(fam[counted]).tolist():
        sel = counted & (fam == f)
        a = out.families.setdefault(labels[int(f)], Stat())
        a.count += int(np.count_nonzero(sel))
        a.total_us += float(t.dur[sel].sum()) / 1000
    top = work & outer & inside
    rest = float(t.dur[top].sum() - t.dur[counted].sum()) / 1000
    a = out.families.setdefault(Family.CPU_OP.label, Stat())
    a.count += int(np.count_nonzero(top & ~compute))
    a.total_us += max(rest, 0.0)


def nesting(t: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(parent, depth) of every CPU event from its times (the enclosing event on its lane). Computed
    rather than read from ``t.parent`` because rebuilt (predicted) timelines may not keep it."""
    parent = np.full(len(t), -1, np.int64)
    depth = np.zeros(len(t), np.int64)
    for lane in t.lanes:
        if lane.is_gpu:
            continue
        sl = t.lane_slice(lane.index)
        idx = np.arange(sl.start, sl.stop)
        order = np.lexsort((-t.dur[idx], t.start[idx]))
        idx = idx[order]
        ends = (t.start[idx] + t.dur[idx]).tolist()
        stack: list[tuple[int, int]] = []  # (event, end)
        par = [-1] * len(idx)
        dep = [0] * len(idx)
        for i, e0 in enumerate(ends):
            while stack and stack[-1][1] < e0:  # the top ended before this one does: not its parent
                stack.pop()
            if stack:
                par[i] = stack[-1][0]
                dep[i] = len(stack)
            stack.append((int(idx[i]), e0))
        parent[idx] = par
        depth[idx] = dep
    return parent, depth


def _add_collectives(out: JobSummary, t: RankTrace, inside: np.ndarray) -> None:
    c = t.collectives
    if len(c) == 0:
        return
    ok = inside[c.event]
    sizes = c.size_bytes
    for row in np.flatnonzero(ok).tolist():
        kind = CollectiveKind(int(c.kind[row]))
        n = int(c.group_size[row])
        size = int(sizes[row])
        dur = int(t.dur[int(c.event[row])])
        a = out.collectives.setdefault((kind.label, n, size), CollStat())
        a.count += 1
        a.total_us += dur / 1000
        if size > 0 and n > 0:
            a.bytes_moved += size * bus_factor(kind, n)


def _add_cpu_ops(out: JobSummary, t: RankTrace, inside: np.ndarray) -> None:
    idx = np.flatnonzero((t.kind == Kind.CPU_OP) & inside)
    if len(idx) == 0:
        return
    names = t.name[idx]
    uniq, inv = np.unique(names, return_inverse=True)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=t.dur[idx], minlength=len(uniq))
    for k, u in enumerate(uniq.tolist()):
        a = out.cpu_ops.setdefault(canonical_name(t.strings[u]), Stat())
        a.count += int(count[k])
        a.total_us += float(total[k]) / 1000


def family_rows(a: JobSummary, b: JobSummary) -> list[dict[str, Any]]:
    """Per family: A and B time and count per rank-iteration, and the delta (B - A)."""
    rows = []
    for f in sorted(set(a.families) | set(b.families)):
        rows.append({"family": f, **_delta_columns(a.families.get(f, Stat()), b.families.get(f, Stat()))})
    rows.sort(key=lambda r: -max(r["a_us"], r["b_us"]))
    return rows


def collective_kind_rows(a: JobSummary, b: JobSummary) -> list[dict[str, Any]]:
    ka, kb = a.collectives_by_kind(), b.collectives_by_kind()
    rows = []
    for k in sorted(set(ka) | set(kb)):
        rows.append({"kind": k, **_delta_columns(ka.get(k, CollStat()), kb.get(k, CollStat()))})
    return rows


def _delta_columns(sa: Stat | CollStat, sb: Stat | CollStat) -> dict[str, float | None]:
    """A and B time per rank-iteration, the delta (B - A, also in %), and A and B counts."""
    return {
        "a_us": round(sa.total_us, 3),
        "b_us": round(sb.total_us, 3),
        "delta_us": round(sb.total_us - sa.total_us, 3),
        "delta_pct": pct_change(sb.total_us, sa.total_us),
        "a_count": round(sa.count, 3),
        "b_count": round(sb.count, 3),
    }


def pct_change(b: float, a: float) -> float | None:
    """How much larger ``b`` is than ``a``, in % (3 decimals); None when ``a`` is 0."""
    return round(100.0 * (b / a - 1.0), 3) if a else None
