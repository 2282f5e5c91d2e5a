"""All the re-timing rules for one configuration change, in the order they compose."""

from __future__ import annotations

from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.rules import RULES


def plan_retiming(ctx: RetimeContext) -> RetimePlan:
    """Duration ratios for every node of ``ctx.graph`` (see :mod:`lumos_core.whatif.retime`): every
    rule of :data:`~lumos_core.whatif.retime.rules.RULES` in turn; their notes go to ``ctx.notes``."""
    plan = RetimePlan.identity(ctx.graph.n_nodes)
    for rule in RULES.values():
        rule(ctx, plan)
    return plan
