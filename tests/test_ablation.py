"""Ablation over the real traces: every dependency kind that matters in a trace must earn its place.

A kind *matters* in a trace when, in the in-sample replay, it is the binding dependency (it sets a
task's start, or a blocking call's end) of at least 0.5 % of the tasks of the held-out iterations;
kinds below that cannot move a median or a mean. Removing such a kind (``build_graph(without=...)``)
must make the hold-out GPU task start error at least 2x worse (median or 95th percentile) or the
hold-out iteration error at least 2x worse. The factor is the issue's rule, not a fit.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.replay.evaluate import evaluate_holdout
from lumos_core.replay.simulate import simulate
from lumos_core.replay.twins import iterations_of, steady_iterations
from lumos_core.trace.loader import load_job

pytestmark = needs_shared

MATTERS = 0.005  # share of held-out tasks a kind must bind
ABLATABLE = [
    EdgeKind.LAUNCH,
    EdgeKind.SYNC,
    EdgeKind.STREAM,
    EdgeKind.EVENT_WAIT,
    EdgeKind.COLLECTIVE,
    EdgeKind.CPU_CROSS,
    EdgeKind.LAUNCH_QUEUE,
]


def binding_share(graph) -> dict[EdgeKind, float]:
    """Share of the steady iterations' tasks whose start (or blocking end) each kind sets."""
    its = iterations_of(graph)
    steady, _ = steady_iterations(graph, its)
    start, end = simulate(graph)
    held = np.isin(its.region, steady)
    n = max(1, int(np.count_nonzero(held & (graph.node_type <= NodeType.GPU))))
    d = graph.sp_dst
    ref = np.where(graph.sp_from_end, end[graph.sp_src], start[graph.sp_src]) + graph.sp_lag
    sp_bind = (ref == start[d]) & (start[d] > graph.anchor[d]) & held[d]
    e = graph.ep_dst
    eref = np.where(graph.ep_from_end, end[graph.ep_src], start[graph.ep_src]) + graph.ep_lag
    ep_bind = (eref == end[e]) & (eref > start[e] + graph.dur[e]) & held[e]
    counts = np.bincount(graph.sp_kind[sp_bind], minlength=len(EdgeKind)) + np.bincount(
        graph.ep_kind[ep_bind], minlength=len(EdgeKind)
    )
    return {k: counts[k] / n for k in EdgeKind}


# What each trace is known to exercise (traces/README.md): a rule that silently stops producing its
# edges drops out of the binding set, which must fail too.
EXPECTED = {
    "h100-nanogpt-8rank": {EdgeKind.LAUNCH, EdgeKind.STREAM, EdgeKind.EVENT_WAIT, EdgeKind.COLLECTIVE},
    "a100-ddp-2rank": {EdgeKind.LAUNCH, EdgeKind.STREAM},
}


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_every_dependency_kind_that_matters_earns_its_place(folder) -> None:
    job = load_job(shared(folder), workers=1)
    full_graph = build_graph(job)
    share = binding_share(full_graph)
    kinds = [k for k in ABLATABLE if share[k] >= MATTERS]
    assert EXPECTED[folder] <= set(kinds), {k.name: share[k] for k in EXPECTED[folder]}
    full = evaluate_holdout(full_graph, null_models=False).lumos
    f_gpu = full.gpu_start_error_us()
    f_it = full.mean_abs_error_pct
    weak = []
    for kind in kinds:
        ablated = evaluate_holdout(build_graph(job, without=frozenset({kind})), null_models=False).lumos
        a_gpu = ablated.gpu_start_error_us()
        worse = (
            a_gpu["median"] >= 2 * f_gpu["median"]
            or a_gpu["p95"] >= 2 * f_gpu["p95"]
            or ablated.mean_abs_error_pct >= 2 * f_it
        )
        if not worse:
            weak.append(
                (kind.name, f"share {share[kind]:.3%}", f_gpu, a_gpu, f_it, ablated.mean_abs_error_pct)
            )
    assert not weak, weak


def test_build_graph_without_a_kind_has_none_of_it() -> None:
    job = load_job(shared("a100-ddp-2rank"), workers=1)
    g = build_graph(job, without=frozenset({EdgeKind.STREAM, EdgeKind.LAUNCH}))
    counts = g.edge_counts()
    assert counts["stream"] == 0 and counts["launch"] == 0
    assert counts["cpu_thread"] > 0
    assert any("without launch, stream" in n for n in g.notes)
