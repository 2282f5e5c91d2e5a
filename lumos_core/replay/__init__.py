"""Stage 3, replay: simulate an execution graph and report what it predicts.

``simulate`` is the one topological pass; ``run.replay`` builds the graph, replays it and compares with
the measured iterations (``breakdown``, ``intervals``); ``summaries`` are the tables the app and CSV
exports show.
"""

from lumos_core.replay.run import (
    CriticalPath,
    IterationResult,
    RankResult,
    ReplayResult,
    check_replayable,
    critical_path,
    parse_scale,
    predicted_rank,
    replay,
    scaled_durations,
)

__all__ = [
    "CriticalPath",
    "IterationResult",
    "RankResult",
    "ReplayResult",
    "check_replayable",
    "critical_path",
    "parse_scale",
    "predicted_rank",
    "replay",
    "scaled_durations",
]
