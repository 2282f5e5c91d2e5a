"""The details panel: everything known about the selected task.

:func:`describe_event` gathers the facts (plain data, testable without a window); the panel renders
them as HTML. For a GPU activity that includes the runtime call that launched it and the CPU ops
around that call; for a collective its size, group and how long it took on every rank; for a
runtime call the kernels it launched; for a CPU op the GPU work launched inside it.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QTextBrowser, QWidget

from app.theme import LIGHT, Theme
from app.timeline.span_item import format_duration_ms
from app.view_model.loaded_job import LoadedJob
from lumos_core.api.views import Family, graph_launch_number
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, CollectiveKind, Kind

_ACTIVITY = np.asarray([int(k) for k in GPU_ACTIVITY_KINDS], np.int8)
_MAX_ARG_CHARS = 400


@dataclass
class EventDetails:
    title: str
    fields: list[tuple[str, str]]
    sections: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    args: dict[str, object] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        for k, v in self.fields:
            if k == key:
                return v
        for _, rows in self.sections:
            for k, v in rows:
                if k == key:
                    return v
        return None

    def section(self, title: str) -> list[tuple[str, str]]:
        for t, rows in self.sections:
            if t == title:
                return rows
        return []


def _ms(ns: int | float) -> str:
    return f"{float(ns) / 1e6:.6f} ms"


def _dur(ns: int | float) -> str:
    return format_duration_ms(float(ns) / 1e6)


def _size(n: int) -> str:
    if n < 0:
        return "unknown"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.2f} {unit} ({n:,} B)"
    return f"{n} B"


def describe_event(loaded: LoadedJob, rank_index: int, event: int) -> EventDetails:
    job = loaded.job
    t = job.ranks[rank_index]
    kind = Kind(int(t.kind[event]))
    lane = t.lanes[int(t.lane[event])]
    fam = Family(int(loaded.families[rank_index][event]))
    start, dur = int(t.start[event]), int(t.dur[event])
    fields_ = [
        ("Kind", f"{fam.label} ({t.strings[int(t.cat[event])]})"),
        ("Rank", f"{t.rank} — {Path(t.file).name}"),
        ("Stream" if lane.is_gpu else "Thread", lane.label),
        ("Start", _ms(start)),
        ("End", _ms(start + dur)),
        ("Duration", _dur(dur)),
    ]
    if lane.is_gpu and int(t.depth[event]) > 0:
        fields_.append(("Sub-row", f"{int(t.depth[event])} (overlaps another task on this stream)"))
    if int(t.correlation[event]) >= 0:
        fields_.append(("Correlation id", str(int(t.correlation[event]))))
    if int(t.external_id[event]) >= 0:
        fields_.append(("External id", str(int(t.external_id[event]))))
    details = EventDetails(t.name_of(event), fields_, args=t.args_of(event))

    coll_rows = np.flatnonzero(t.collectives.event == event)
    if len(coll_rows):
        details.sections.append(("Collective", _collective_section(loaded, rank_index, int(coll_rows[0]))))
    if kind in GPU_ACTIVITY_KINDS:
        launch = int(t.launch[event])
        if launch >= 0:
            rows = _launch_section(loaded, rank_index, launch)
            number = int(graph_launch_number(t)[event])
            if number > 0:
                released = int(np.count_nonzero(t.launch == launch))
                rows.insert(0, ("CUDA graph", f"launched by graph launch #{number} ({released} GPU tasks)"))
            details.sections.append(("Launched by", rows))
        else:
            details.sections.append(("Launched by", [("Launch call", "not recorded in the trace")]))
    elif kind == Kind.RUNTIME:
        launched = np.flatnonzero(t.launch == event)
        if len(launched):
            rows = [("Launched", f"{len(launched)} GPU task(s)")]
            for k in launched[:5]:
                rows.append(
                    (t.lanes[int(t.lane[k])].label, f"{t.name_of(int(k))[:160]} ({_dur(int(t.dur[k]))})")
                )
            details.sections.append(("GPU work", rows))
    elif not lane.is_gpu:
        rows = _gpu_work_inside(loaded, rank_index, event)
        if rows:
            details.sections.append(("GPU work", rows))
    chain = _parents(loaded, rank_index, event)
    if chain:
        details.sections.append(("Called from", chain))
    return details


def _collective_section(loaded: LoadedJob, rank_index: int, row: int) -> list[tuple[str, str]]:
    job = loaded.job
    t = job.ranks[rank_index]
    c = t.collectives
    rows = [
        ("Collective", CollectiveKind(int(c.kind[row])).label),
        ("Size", _size(int(c.size_bytes[row]))),
    ]
    if int(c.group_size[row]) > 0:
        rows.append(("Group size", str(int(c.group_size[row]))))
    if int(c.pg[row]) >= 0:
        rows.append(("Process group", t.strings[int(c.pg[row])]))
    if int(c.seq[row]) >= 0:
        rows.append(("Sequence number", str(int(c.seq[row]))))
    match = job.collective_match
    if match is None:
        return rows
    inst = int(match.instance.get(t.rank, np.zeros(0))[row]) if t.rank in match.instance else -1
    if inst < 0:
        rows.append(("Instance", "not matched across ranks"))
        return rows
    stat = next((s for s in loaded.collectives if s.instance == inst), None)
    rows.append(("Instance", f"#{inst} on {int(match.members[inst])} of {int(match.expected[inst])} ranks"))
    if stat is not None:
        rows.append(("Skew (start spread)", _dur(stat.skew_ns)))
        rows.append(
            (
                "Duration across ranks",
                f"min {_dur(stat.dur_min_ns)} · median {_dur(stat.dur_median_ns)} · max {_dur(stat.dur_max_ns)}",
            )
        )
        if not np.isnan(stat.bus_bw_gbps):
            rows.append(("Bus bandwidth", f"{stat.bus_bw_gbps:.1f} GB/s (fastest rank)"))
    for other in job.ranks:
        ids = match.instance.get(other.rank)
        if ids is None:
            continue
        hit = np.flatnonzero(ids == inst)
        if len(hit):
            ev = int(other.collectives.event[hit[0]])
            rows.append(
                (
                    f"rank {other.rank}",
                    f"starts {_ms(int(other.start[ev]))}, takes {_dur(int(other.dur[ev]))}",
                )
            )
    return rows


def _launch_section(loaded: LoadedJob, rank_index: int, launch: int) -> list[tuple[str, str]]:
    t = loaded.job.ranks[rank_index]
    lane = t.lanes[int(t.lane[launch])]
    return [
        ("Launch call", t.name_of(launch)),
        ("Thread", lane.label),
        ("Called at", _ms(int(t.start[launch]))),
        ("Call duration", _dur(int(t.dur[launch]))),
        ("Launch to start", _dur(_queue_delay(loaded, rank_index, launch))),
    ]


def _queue_delay(loaded: LoadedJob, rank_index: int, launch: int) -> int:
    """Time from the launch call to the start of the first GPU task it launched."""
    t = loaded.job.ranks[rank_index]
    launched = np.flatnonzero(t.launch == launch)
    if len(launched) == 0:
        return 0
    return int(t.start[launched].min()) - int(t.start[launch])


def _parents(loaded: LoadedJob, rank_index: int, event: int) -> list[tuple[str, str]]:
    """The CPU call stack above an event (or above its launch call for GPU work), innermost first."""
    t = loaded.job.ranks[rank_index]
    p = int(t.launch[event]) if int(t.kind[event]) in {int(k) for k in GPU_ACTIVITY_KINDS} else event
    if p < 0:
        return []
    rows: list[tuple[str, str]] = []
    p = int(t.parent[p])
    while p >= 0 and len(rows) < 8:
        rows.append((f"level {int(t.depth[p])}", f"{t.name_of(p)[:160]} ({_dur(int(t.dur[p]))})"))
        p = int(t.parent[p])
    return rows


def _gpu_work_inside(loaded: LoadedJob, rank_index: int, event: int) -> list[tuple[str, str]]:
    """GPU tasks launched from inside a CPU event (calls on the same thread within its time)."""
    t = loaded.job.ranks[rank_index]
    act = np.flatnonzero(np.isin(t.kind, _ACTIVITY) & (t.launch >= 0))
    if len(act) == 0:
        return []
    calls = t.launch[act]
    s, e = int(t.start[event]), int(t.start[event] + t.dur[event])
    inside = (t.lane[calls] == t.lane[event]) & (t.start[calls] >= s) & (t.start[calls] <= e)
    tasks = act[inside]
    if len(tasks) == 0:
        return []
    busy = int(t.dur[tasks].sum())
    first, last = int(t.start[tasks].min()), int((t.start[tasks] + t.dur[tasks]).max())
    return [
        ("GPU tasks launched", str(len(tasks))),
        ("GPU time (sum)", _dur(busy)),
        ("GPU span", f"{_ms(first)} → {_ms(last)}"),
    ]


def render_html(d: EventDetails, theme: Theme) -> str:
    def table(rows: list[tuple[str, str]]) -> str:
        cells = "".join(
            f"<tr><td class='k'>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows
        )
        return f"<table cellspacing='0' cellpadding='2'>{cells}</table>"

    parts = [
        "<style>"
        f"body {{ color: {theme.foreground}; }} "
        f"td.k {{ color: {theme.muted}; padding-right: 12px; white-space: nowrap; vertical-align: top; }} "
        f"h3 {{ margin: 8px 0 2px 0; color: {theme.foreground}; }} "
        "pre { margin: 0; }"
        "</style>",
        f"<p><b>{html.escape(d.title)}</b></p>",
        table(d.fields),
    ]
    for title, rows in d.sections:
        parts.append(f"<h3>{html.escape(title)}</h3>")
        parts.append(table(rows))
    if d.args:
        parts.append("<h3>Arguments</h3>")
        rows = []
        for k, v in d.args.items():
            text = v if isinstance(v, str) else json.dumps(v, default=str)
            if len(text) > _MAX_ARG_CHARS:
                text = text[: _MAX_ARG_CHARS - 1] + "…"
            rows.append((str(k), text))
        parts.append(table(rows))
    return "".join(parts)


class DetailsPanel(QTextBrowser):
    """Shows :func:`describe_event` of the selected task."""

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.details: EventDetails | None = None
        self.setOpenLinks(False)
        self.show_nothing()

    def show_nothing(self) -> None:
        self.details = None
        self.setHtml(
            f"<p style='color:{self.theme.muted}'>Click a task to see its details. "
            "Hover shows name and duration; Shift+drag measures a span.</p>"
        )

    def show_event(self, loaded: LoadedJob, rank_index: int, event: int) -> EventDetails:
        return self.show_details(describe_event(loaded, rank_index, event))

    def show_details(self, details: EventDetails) -> EventDetails:
        """Show facts gathered elsewhere (e.g. a predicted task's, with its why)."""
        self.details = details
        self.setHtml(render_html(details, self.theme))
        return details

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        if self.details is not None:
            self.setHtml(render_html(self.details, theme))
        else:
            self.show_nothing()
