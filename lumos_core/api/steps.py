"""Steps the CLI and the API share around the engine: the hold-out policy of a replay, keeping one
iteration, and whether a validation is hold-out or in-sample."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lumos_core.errors import ConfigError
from lumos_core.replay.run import ReplayResult

if TYPE_CHECKING:  # the hold-out is imported when asked for
    from lumos_core.replay.evaluate import HoldoutReport

HOLDOUT_DEFAULT_LIMIT = 1_000_000  # tasks: above this the hold-out is opt-in


def holdout_of(result: ReplayResult, wanted: bool | None, cpu_work: str = "measured") -> HoldoutReport:
    """The hold-out replay and null models of ``result``: ``wanted`` True, False or None (on up
    to :data:`HOLDOUT_DEFAULT_LIMIT` tasks)."""
    from lumos_core.replay.evaluate import evaluate_holdout, unavailable

    if wanted is False:
        return unavailable("not computed (--no-holdout)")
    if wanted is None and result.graph.n_tasks > HOLDOUT_DEFAULT_LIMIT:
        return unavailable(
            f"not computed by default above {HOLDOUT_DEFAULT_LIMIT:,} tasks "
            f"({result.graph.n_tasks:,} here): add --holdout"
        )
    return evaluate_holdout(result.graph, cpu_work=cpu_work)


def keep_iteration(result: ReplayResult, n: int) -> None:
    """Keep only ProfilerStep#``n`` in ``result`` (raises ConfigError when no rank has it)."""
    name = f"ProfilerStep#{n}"
    found = False
    have = sorted({it.name for r in result.ranks for it in r.iterations}, key=_step_order)
    for r in result.ranks:
        r.iterations = [it for it in r.iterations if it.name == name]
        r.critical_paths = {k: v for k, v in r.critical_paths.items() if k == name}
        found |= bool(r.iterations)
    if not found:
        have = [h for h in have if h.startswith("ProfilerStep#")]
        if not have:
            raise ConfigError(f"no iteration {name}: the trace has no ProfilerStep#N steps (one window)")
        listed = ", ".join(have[:12]) + (f" ... ({len(have)} in all)" if len(have) > 12 else "")
        raise ConfigError(f"no iteration {name} in the trace (it has {listed})")


def _step_order(name: str) -> tuple[int, str]:
    """ProfilerStep#9 before #10 (numeric), other names (a whole-trace window) after."""
    tail = name.rsplit("#", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 62, name)


def sample_label(profile: Any, b_path: str | Path) -> str:
    """Whether a validation's errors are hold-out (nothing was fitted on B) or in-sample (the
    hardware profile was calibrated on B among its runs)."""
    b = Path(b_path).resolve()
    if profile is not None and any(Path(r).resolve() == b for r in profile.runs):
        return "in-sample: the --profile was fitted on B among its runs"
    return "hold-out: nothing was fitted on B; its measured times only score the prediction"
