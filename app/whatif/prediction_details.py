"""Details of a task when a scenario is shown: its predicted times, the measured ones, and why.

A predicted rank has the same events as the traced rank it comes from, so everything the details
panel knows about the measured task (name, arguments, launch call, collective) still applies.
:func:`describe_predicted` (a predicted task was clicked) puts the prediction first: predicted
start and duration, the measured ones, and the engine's reasons
(:func:`lumos_core.whatif.scenario.explain_task`: which model re-timed it and from what, what it waited
for). :func:`describe_with_prediction` (a measured task was clicked) adds the same as a section.
"""

from __future__ import annotations

from app.panels.details_panel import EventDetails, describe_event
from app.timeline.span_item import format_duration_ms
from app.view_model.loaded_job import LoadedJob
from app.whatif.runner import Scenario
from lumos_core.api.scenarios import explain_task


def prediction_rows(
    loaded: LoadedJob, scenario: Scenario, rank_index: int, event: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(predicted vs measured times, why) of one task; empty when the scenario has no counterpart."""
    if not scenario.overlay.present[rank_index]:
        return [("Scenario", f"{scenario.name}: this rank is not in the predicted job")], []
    measured = loaded.job.ranks[rank_index]
    p = scenario.overlay.ranks[rank_index]
    ps, pd = int(p.start[event]), int(p.dur[event])
    ms, md = int(measured.start[event]), int(measured.dur[event])
    stands = scenario.summary.stands_for(p.rank)
    rank_text = f"{p.rank}" + (
        f" (stands for ranks {', '.join(map(str, stands))})" if stands != [p.rank] else ""
    )
    rows = [
        ("Scenario", scenario.name),
        ("Predicted rank", rank_text),
        ("Predicted start", f"{ps / 1e6:.6f} ms"),
        ("Predicted duration", format_duration_ms(pd / 1e6)),
        ("Measured start", f"{ms / 1e6:.6f} ms (traced rank {measured.rank})"),
        ("Measured duration", format_duration_ms(md / 1e6)),
    ]
    if md:
        rows.append(("Duration change", f"{100.0 * (pd - md) / md:+.1f} %"))
    rows.append(("Start shift", format_duration_ms((ps - ms) / 1e6)))
    return rows, explain_task(scenario.result, p.rank, event, measured)


def describe_predicted(loaded: LoadedJob, scenario: Scenario, rank_index: int, event: int) -> EventDetails:
    d = describe_event(loaded, rank_index, event)
    rows, why = prediction_rows(loaded, scenario, rank_index, event)
    # prediction and its why first; then what the trace says about the task (labelled measured)
    measured_facts = [(k, v) for k, v in d.fields if k not in ("Start", "End", "Duration")]
    d.fields = rows
    d.sections.insert(0, ("Measured task", measured_facts))
    d.sections.insert(0, ("Why", why))
    d.title = f"[predicted] {d.title}"
    return d


def describe_with_prediction(
    loaded: LoadedJob, scenario: Scenario, rank_index: int, event: int
) -> EventDetails:
    d = describe_event(loaded, rank_index, event)
    rows, why = prediction_rows(loaded, scenario, rank_index, event)
    d.sections.insert(0, (f"Predicted ({scenario.name})", rows + [(f"why: {k.lower()}", v) for k, v in why]))
    return d


def describe_rebuilt(scenario: Scenario, index: int, event: int) -> EventDetails:
    """A task of a predicted rank the estimator built anew (no measured counterpart of its own)."""
    from app.view_model.overlay_data import stands_for_text
    from lumos_core.api.views import Family

    p = scenario.overlay.ranks[index]
    fam = Family(int(scenario.overlay.families[index][event]))
    s, dur = int(p.start[event]), int(p.dur[event])
    fields = [
        ("Scenario", scenario.name),
        ("Kind", f"{fam.label} ({p.strings[int(p.cat[event])]})" if int(p.cat[event]) >= 0 else fam.label),
        ("Predicted rank", stands_for_text(p.rank, scenario.summary.stands_for(p.rank))),
        ("Stream" if p.lanes[int(p.lane[event])].is_gpu else "Thread", p.lanes[int(p.lane[event])].label),
        ("Predicted start", f"{s / 1e6:.6f} ms"),
        ("Predicted end", f"{(s + dur) / 1e6:.6f} ms"),
        ("Predicted duration", format_duration_ms(dur / 1e6)),
    ]
    d = EventDetails(f"[predicted] {p.name_of(event)}", fields, args=p.args_of(event))
    d.sections.append(("Why", explain_task(scenario.result, p.rank, event)))
    launch = int(p.launch[event]) if event < len(p.launch) else -1
    if launch >= 0:
        d.sections.append(("Launched by", [("Launch call", p.name_of(launch))]))
    return d
