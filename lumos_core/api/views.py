"""Read-only views of a loaded job: what a timeline, a summary pane or a notebook cell shows.

Each takes the loaded traces (``job.data``, a ``TracedJob``), one rank of them (a ``RankTrace``) or
the execution graph, and changes nothing.

* Kernel families: :func:`event_families` (per event of a rank, a :class:`Family`: GEMM, attention,
  communication, ...; :data:`N_FAMILIES` of them).
* Iterations: :func:`iteration_windows` (a rank's ProfilerStep windows, :class:`Window`),
  :func:`steady_windows` (without the first, warm-up one); :class:`Breakdown` splits a window into
  exposed compute, overlapped, exposed communication and other time.
* Tables (one dataclass per row, :func:`write_csv` writes any of them): :func:`iteration_table`
  (:class:`IterationStat`), :func:`rank_breakdown_table` (:class:`RankBreakdownStat`),
  :func:`top_kernels` (:class:`KernelStat`), :func:`collectives_table` (:class:`CollectiveStat`),
  :func:`clock_table` (:class:`ClockStat`), :func:`operator_table` (:class:`OperatorStat`: CPU
  operators by host self time); :func:`group_bars` / :func:`consecutive_groups` fold many ranks'
  breakdowns into a few chart bars (:class:`ChartBar`).
* Memory: :func:`rank_memory` (per device of a rank, a :class:`DeviceMemory` summary of its
  allocator records; :data:`NO_MEMORY_HINT` says how to record them), :func:`format_bytes`.
* GPU idle time by cause: :func:`idle_attribution` of a graph (:class:`IdleReport` of
  :class:`IdleRow`, each cause in :data:`CAUSE_INFO`, the longest gaps as :class:`Delay`).
* Ranks: :func:`find_stragglers` (:class:`StragglerReport`), :func:`rank_groups` (ranks grouped by
  parallelism role of a baseline, :class:`RankGroup`; :func:`default_role` picks the role),
  :func:`rank_from_file_name`, :func:`graph_launch_number` (per event, the CUDA-graph launch that
  released it); :data:`DEVICE_CUDA` is the device type of a GPU's memory records.
* Two measured jobs: :func:`diff_jobs` (a :class:`JobDiff`, what ``lumos diff`` prints) and
  :func:`search_text` (the part of a diff row's canonical name that a search of raw names finds).
"""

from lumos_core.compare.canonical import search_text
from lumos_core.compare.diff import JobDiff, diff_jobs
from lumos_core.replay.breakdown import Breakdown, Window, iteration_windows, steady_windows
from lumos_core.replay.breakdown_groups import ChartBar, consecutive_groups, group_bars
from lumos_core.replay.idle import CAUSE_INFO, Delay, IdleReport, IdleRow, idle_attribution
from lumos_core.replay.stragglers import StragglerReport, find_stragglers
from lumos_core.replay.summaries import (
    ClockStat,
    CollectiveStat,
    IterationStat,
    KernelStat,
    RankBreakdownStat,
    clock_table,
    collectives_table,
    iteration_table,
    rank_breakdown_table,
    top_kernels,
    write_csv,
)
from lumos_core.trace.graph_launches import graph_launch_number
from lumos_core.trace.kernel_families import N_FAMILIES, Family, event_families
from lumos_core.trace.loader import rank_from_file_name
from lumos_core.trace.memory import DEVICE_CUDA
from lumos_core.trace.memory_summary import NO_MEMORY_HINT, DeviceMemory, format_bytes, rank_memory
from lumos_core.trace.operator_stats import OperatorStat, operator_table
from lumos_core.whatif.rank_groups import RankGroup, default_role, rank_groups

__all__ = [
    "CAUSE_INFO",
    "DEVICE_CUDA",
    "NO_MEMORY_HINT",
    "N_FAMILIES",
    "Breakdown",
    "ChartBar",
    "ClockStat",
    "CollectiveStat",
    "Delay",
    "DeviceMemory",
    "Family",
    "IdleReport",
    "IdleRow",
    "IterationStat",
    "JobDiff",
    "KernelStat",
    "OperatorStat",
    "RankBreakdownStat",
    "RankGroup",
    "StragglerReport",
    "Window",
    "clock_table",
    "collectives_table",
    "consecutive_groups",
    "default_role",
    "diff_jobs",
    "event_families",
    "find_stragglers",
    "format_bytes",
    "graph_launch_number",
    "group_bars",
    "idle_attribution",
    "iteration_table",
    "iteration_windows",
    "operator_table",
    "rank_breakdown_table",
    "rank_from_file_name",
    "rank_groups",
    "rank_memory",
    "search_text",
    "steady_windows",
    "top_kernels",
    "write_csv",
]
