"""Rendering benchmark of the desktop app (offscreen): first paint, repaint frame times, memory.

    .venv/bin/python bench/bench_render.py                 # everything (about a minute on 2 cores)
    .venv/bin/python bench/bench_render.py --sizes 1e6     # skip the 10 M-task case

Measures
  * time to first paint after opening h100-nanogpt-8rank (cold cache: parse; warm: from cache) and the
    demo job, through the real MainWindow;
  * frame time of full-view and zoomed repaints at 1 M and 10 M tasks. Inputs are built in memory by
    tiling the real nanogpt ranks (nothing is written to disk), two ways: "ranks" repeats the 8 ranks
    into many (wide jobs: 512+ ranks), "time" repeats each rank's events along time (long traces: rows
    with a million events, where the level-of-detail pyramid matters);
  * memory per task: the app's own drawing structures (exact nbytes) and the process RSS growth for
    the whole tiled job (engine columns included).

Targets (issue): first paint <= 2 s for the demo; repaint <= 50 ms at 1 M and <= 200 ms at 10 M
tasks; <= 200 bytes per task. Frames are timed in wall and in GUI-thread CPU time (the latter is
what a repaint costs when the machine is shared: wall time also counts waiting for a core). A frame is a full ``QWidget.grab()`` of the timeline (axes, labels,
spans); "cold" frames recompute the spans of the new view, "warm" ones redraw a cached frame.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from lumos_core.trace.collectives import CollectiveMatch  # noqa: E402
from lumos_core.trace.kernel_families import event_families  # noqa: E402
from lumos_core.trace.loader import load_job  # noqa: E402
from lumos_core.trace.model import Collectives, Iteration, Job, RankTrace  # noqa: E402

NANOGPT = REPO.parent / "shared" / "traces" / "h100-nanogpt-8rank"
TARGETS = {"first_paint_demo_s": 2.0, "repaint_1M_ms": 50.0, "repaint_10M_ms": 200.0, "bytes_per_task": 200.0}


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- tiled inputs


def tile_in_time(rank: RankTrace, copies: int, period_ns: int) -> RankTrace:
    """The rank's events repeated ``copies`` times, each copy ``period_ns`` later (lanes kept)."""
    n = len(rank)
    idx_parts, shift_parts, begin = [], [], [0]
    for lane in range(len(rank.lanes)):
        a, b = int(rank.lane_begin[lane]), int(rank.lane_begin[lane + 1])
        idx_parts.append(np.tile(np.arange(a, b), copies))
        shift_parts.append(np.repeat(np.arange(copies, dtype=np.int64) * period_ns, b - a))
        begin.append(begin[-1] + (b - a) * copies)
    idx = np.concatenate(idx_parts)
    shift = np.concatenate(shift_parts)
    m = len(idx)
    minus = np.full(m, -1, np.int32)
    iterations = [
        Iteration(
            it.name if k == 0 else f"{it.name}+{k}",
            it.step,
            it.cpu_start + k * period_ns,
            it.cpu_end + k * period_ns,
        )
        for k in range(copies)
        for it in rank.iterations
    ]
    return (
        dataclasses.replace(
            rank,
            kind=rank.kind[idx],
            cat=rank.cat[idx],
            name=rank.name[idx],
            lane=rank.lane[idx],
            start=rank.start[idx] + shift,
            dur=rank.dur[idx],
            correlation=np.full(m, -1, np.int64),
            external_id=np.full(m, -1, np.int64),
            depth=rank.depth[idx],
            parent=minus,
            launch=minus.copy(),
            args_start=np.zeros(m, np.int64),
            args_len=np.zeros(m, np.int32),
            args_data=np.zeros(0, np.uint8),
            lane_begin=np.asarray(begin, np.int64),
            collectives=Collectives.empty(),
            iterations=iterations,
            warnings=[],
        )
        if n
        else rank
    )


def copy_rank(rank: RankTrace, number: int) -> RankTrace:
    """An independent copy (own arrays, so memory is counted as for a real rank) with a new rank."""
    arrays = {
        f.name: getattr(rank, f.name).copy()
        for f in dataclasses.fields(rank)
        if isinstance(getattr(rank, f.name), np.ndarray)
    }
    return dataclasses.replace(rank, rank=number, collectives=Collectives.empty(), **arrays)


def tiled_job(base: Job, target_tasks: int, how: str) -> Job:
    per_rank = sum(len(t) for t in base.ranks) / len(base.ranks)
    if how == "ranks":
        n_ranks = max(1, round(target_tasks / per_rank))
        ranks = [copy_rank(base.ranks[k % len(base.ranks)], k) for k in range(n_ranks)]
    else:
        copies = max(1, round(target_tasks / (per_rank * len(base.ranks))))
        period = base.span[1] + 1_000_000
        ranks = [tile_in_time(t, copies, period) for t in base.ranks]
    match = CollectiveMatch(
        {}, np.zeros(0, np.int8), np.zeros(0, np.int32), np.zeros(0, np.int32), [], "none"
    )
    return Job(path=f"tiled-{how}", ranks=ranks, rank_rule="tiled", origin_ns=0, collective_match=match)


def view_data(job: Job):  # type: ignore[no-untyped-def]
    """What the window draws, without the summaries (the benchmark is about drawing)."""
    from app.view_model.loaded_job import LoadedJob
    from app.view_model.row_tables import RowTables

    families = [event_families(t) for t in job.ranks]
    tables = RowTables(job.ranks, families)
    for i in range(len(tables)):  # every table built here: the frames measure drawing, not building
        tables.build(i)
    return LoadedJob(job.path, job, families, tables, [], [], [], [], 0.0)


# ---------------------------------------------------------------- measurements


def first_paint(path: str | None, cache_dir: str) -> dict[str, float]:
    """Seconds from the open request to the first painted timeline, through the real window."""
    from app.main_window import MainWindow

    os.environ["LUMOS_CACHE_DIR"] = cache_dir
    app = QApplication.instance()
    w = MainWindow(restore_layout=False, theme="light")
    w.resize(1600, 1000)
    w.show()
    app.processEvents()
    done: dict[str, float] = {}
    w.first_painted.connect(lambda s: done.setdefault("first_paint_s", s))
    w.load_failed.connect(lambda m: done.setdefault("failed", 1.0))
    w.open_demo() if path is None else w.open_path(path)
    end = time.monotonic() + 300
    while "first_paint_s" not in done and "failed" not in done and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.001)
    out = {
        "first_paint_s": done.get("first_paint_s", float("nan")),
        "load_s": w.timings.get("load_s", float("nan")),
    }
    w.shutdown()
    w.close()
    w.deleteLater()
    app.processEvents()
    return out


CPU_MS: list[float] = []  # GUI-thread CPU ms of every cold frame of the current case


def frame_ms(view, repeats: int = 5) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(cold, warm) median frame times in ms for the current view. The GUI thread's CPU time of
    each cold frame goes into CPU_MS: on a machine shared with other work the wall time also
    counts waiting for a core, the CPU time does not."""
    cold, warm = [], []
    for _ in range(repeats):
        view.item.invalidate()
        t = time.perf_counter()
        c = time.thread_time()
        view.grab()
        cold.append((time.perf_counter() - t) * 1000)
        CPU_MS.append((time.thread_time() - c) * 1000)
        t = time.perf_counter()
        view.grab()
        warm.append((time.perf_counter() - t) * 1000)
    return statistics.median(cold), statistics.median(warm)


def render_case(base: Job, tasks: int, how: str) -> dict[str, float]:
    from app.timeline.timeline_view import TimelineView

    gc.collect()
    rss0 = rss_bytes()
    t = time.perf_counter()
    job = tiled_job(base, tasks, how)
    lj = view_data(job)
    build_s = time.perf_counter() - t
    n = lj.n_events
    view = TimelineView()
    view.resize(1600, 900)
    view.show()
    t = time.perf_counter()
    view.set_job(lj)
    QApplication.processEvents()
    view.grab()
    first_ms = (time.perf_counter() - t) * 1000  # layout + the LOD pyramid levels this view needs
    CPU_MS.clear()
    full_cold, full_warm = frame_ms(view)
    full_cpu = statistics.median(CPU_MS)
    CPU_MS.clear()
    spans_full = view.item.last_span_count
    lo, hi = view.full_range()
    zoom_cold, zoom_warm = [], []
    rng = np.random.default_rng(0)
    for width in (0.01 * (hi - lo), 0.05):  # 1 % of the job, and 50 µs
        for _ in range(3):
            x0 = float(rng.uniform(lo, hi - width))
            view.zoom_to(x0, x0 + width)
            c, w = frame_ms(view, 1)
            zoom_cold.append(c)
            zoom_warm.append(w)
    zoom_cpu = list(CPU_MS)
    # scroll to the middle of a wide job (rows in view change, spans must be rebuilt)
    view.reset_view()
    view.scroll_to_row(len(view.layout_model.rows) / 2)
    scroll_cold, _ = frame_ms(view, 3)
    app_bytes = sum(tb.nbytes for tb in lj.tables) + sum(f.nbytes for f in lj.families)
    rss = rss_bytes() - rss0
    result = {
        "tasks": n,
        "ranks": len(job.ranks),
        "rows": len(view.layout_model.rows),
        "build_s": build_s,
        "first_frame_ms": first_ms,
        "full_cold_ms": full_cold,
        "full_warm_ms": full_warm,
        "spans_full": spans_full,
        "zoom_cold_ms": statistics.median(zoom_cold),
        "zoom_max_ms": max(zoom_cold),
        "zoom_warm_ms": statistics.median(zoom_warm),
        "full_cpu_ms": full_cpu,
        "zoom_cpu_ms": statistics.median(zoom_cpu),
        "zoom_cpu_max_ms": max(zoom_cpu),
        "scroll_cold_ms": scroll_cold,
        "app_bytes_per_task": app_bytes / n,
        "rss_bytes_per_task": rss / n,
    }
    view.set_job(None)
    view.close()
    view.deleteLater()
    del lj, job
    QApplication.processEvents()
    gc.collect()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,1e7", help="task counts to tile to (comma separated)")
    ap.add_argument("--how", default="ranks,time", help="tiling: ranks, time or both")
    ap.add_argument("--skip-first-paint", action="store_true")
    args = ap.parse_args()
    app = QApplication.instance() or QApplication(["bench"])
    if not NANOGPT.is_dir():
        print(f"needs the real traces in {NANOGPT}", file=sys.stderr)
        return 2
    rows: list[tuple[str, str, str]] = []
    if not args.skip_first_paint:
        with tempfile.TemporaryDirectory(prefix="lumos-bench-cache-") as cache:
            cold = first_paint(str(NANOGPT), cache)
            warm = first_paint(str(NANOGPT), cache)
            demo_cold = first_paint(None, cache)
            demo_warm = first_paint(None, cache)
        rows += [
            (
                "first paint, nanogpt 8 ranks, cold cache",
                f"{cold['first_paint_s']:.2f} s",
                f"(load {cold['load_s']:.2f} s)",
            ),
            (
                "first paint, nanogpt 8 ranks, warm cache",
                f"{warm['first_paint_s']:.2f} s",
                f"(load {warm['load_s']:.2f} s)",
            ),
            (
                "first paint, demo (generate + load)",
                f"{demo_cold['first_paint_s']:.2f} s",
                f"target {TARGETS['first_paint_demo_s']} s: {demo_cold['first_paint_s'] / TARGETS['first_paint_demo_s']:.2f}x",
            ),
            (
                "first paint, demo (already generated)",
                f"{demo_warm['first_paint_s']:.2f} s",
                f"target {TARGETS['first_paint_demo_s']} s: {demo_warm['first_paint_s'] / TARGETS['first_paint_demo_s']:.2f}x",
            ),
        ]
    os.environ.setdefault("LUMOS_CACHE_DIR", tempfile.mkdtemp(prefix="lumos-bench-cache-"))
    base = load_job(NANOGPT)
    for size in (float(s) for s in args.sizes.split(",")):
        target = TARGETS["repaint_1M_ms"] if size <= 1e6 else TARGETS["repaint_10M_ms"]
        for how in args.how.split(","):
            r = render_case(base, int(size), how)
            label = f"{r['tasks'] / 1e6:.1f} M tasks, tiled by {how} ({r['ranks']} ranks, {r['rows']} rows)"
            rows.append((label, "", f"built in {r['build_s']:.1f} s"))
            rows.append(("  first frame (builds LOD as needed)", f"{r['first_frame_ms']:.1f} ms", ""))
            rows.append(
                (
                    "  full view repaint, new view / cached",
                    f"{r['full_cold_ms']:.1f} / {r['full_warm_ms']:.1f} ms",
                    f"target {target:.0f} ms: {r['full_cold_ms'] / target:.2f}x ({r['spans_full']:,} spans drawn)",
                )
            )
            rows.append(
                (
                    "  zoomed repaint (1 % and 50 µs), median / worst",
                    f"{r['zoom_cold_ms']:.1f} / {r['zoom_max_ms']:.1f} ms",
                    f"target {target:.0f} ms: {r['zoom_max_ms'] / target:.2f}x",
                )
            )
            rows.append(
                (
                    "  GUI-thread CPU of a repaint: full / zoomed median / worst",
                    f"{r['full_cpu_ms']:.1f} / {r['zoom_cpu_ms']:.1f} / {r['zoom_cpu_max_ms']:.1f} ms",
                    f"target {target:.0f} ms: {r['zoom_cpu_max_ms'] / target:.2f}x (wall minus waiting for a core)",
                )
            )
            rows.append(("  scroll to other rows, repaint", f"{r['scroll_cold_ms']:.1f} ms", ""))
            rows.append(
                (
                    "  memory per task: app structures / process RSS growth",
                    f"{r['app_bytes_per_task']:.0f} / {r['rss_bytes_per_task']:.0f} B",
                    f"target {TARGETS['bytes_per_task']:.0f} B: {r['rss_bytes_per_task'] / TARGETS['bytes_per_task']:.2f}x",
                )
            )
    width = max(len(a) for a, _, _ in rows) + 2
    print(f"Lumos render benchmark (offscreen, {os.cpu_count()} CPUs, 1600x900 timeline)")
    for a, b, c in rows:
        print(f"{a:<{width}}{b:>22}   {c}")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
