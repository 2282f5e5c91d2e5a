"""The app's what-if options: ``--estimate KNOB=VALUE[,KNOB=VALUE]`` (repeatable), ``--replay``,
``--session FILE`` and ``--overlay MODE``.

They queue runs once the job is open, exactly as the What-if panel would (the knob names are those
of ``lumos estimate``, from the knob registry: dp, tp, pp, microbatches, schedule, ...). With ``--screenshot`` the window is saved once every
queued run has finished and the last one is drawn over the measured timeline.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Protocol

from lumos_core.api.knobs import KNOB, parse_changes
from lumos_core.errors import LumosError

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.whatif.workbench import WhatIfWorkbench


class CliWindow(Protocol):
    """What :func:`install` needs of the main window (the window imports this package: naming
    it here would make the two import each other)."""

    @property
    def workbench(self) -> WhatIfWorkbench: ...

    @property
    def job_loaded(self) -> SignalInstance: ...  # emits the LoadedJob once a job is open


OVERLAYS = ("differences", "ghost", "paired", "predicted", "measured")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("what-if (runs in the background once the job is open)")
    g.add_argument(
        "--estimate",
        action="append",
        default=[],
        metavar="KNOB=VALUE[,KNOB=VALUE]",
        help=f"estimate a configuration and draw it over the measured timeline (repeatable; knobs: {', '.join(KNOB)})",
    )
    g.add_argument(
        "--replay",
        action="store_true",
        help="show the baseline replay over the measured timeline (it always runs when a job opens)",
    )
    g.add_argument(
        "--predict-from",
        metavar="OTHER",
        help="predict the open job from the traces of another run and draw it over the measured one "
        "(as What-if > Predict This Job from...; the numbers of lumos validate OTHER PATH)",
    )
    g.add_argument(
        "--profile",
        metavar="PROFILE.json",
        help="estimate with a hardware profile fitted by lumos calibrate (What-if panel: Hardware profile)",
    )
    g.add_argument(
        "--session", metavar="FILE", help="reopen a saved session (traces, baseline values, scenarios)"
    )
    g.add_argument(
        "--overlay",
        choices=OVERLAYS,
        help="how the prediction is drawn: outlines where it differs visibly (a replay's default), ghost "
        "outlines of every task, paired rows (a what-if's default), predicted ranks only, or measured only",
    )


def parse_estimates(ns: argparse.Namespace) -> list[dict[str, Any]]:
    """Every ``--estimate`` as a dict of changes; raises LumosError naming a bad knob or value."""
    return [parse_changes(text) for text in ns.estimate]


def wants_what_if(ns: argparse.Namespace) -> bool:
    return bool(ns.estimate or ns.replay or ns.session or ns.predict_from)


def install(window: CliWindow, ns: argparse.Namespace, estimates: list[dict[str, Any]]) -> None:
    """Queue ``estimates`` once the job is open; when everything has run, show the last result."""
    wb = window.workbench
    state = {"loaded": False}

    def on_loaded(_lj: object) -> None:
        state["loaded"] = True
        if ns.profile:
            wb.set_hardware_profile(ns.profile)
        for changes in estimates:
            wb.enqueue_estimate(changes)
        if ns.predict_from:
            wb.enqueue_predict_from(ns.predict_from)

    def on_idle() -> None:
        if not state["loaded"] and not ns.session:
            return
        wanted = None
        if estimates or ns.predict_from:
            wanted = next((s for s in reversed(list(wb.scenarios.values())) if s.kind == "estimate"), None)
        elif ns.replay:
            wanted = next((s for s in wb.scenarios.values() if s.kind == "replay"), None)
        if wanted is not None:
            wb.show_scenario(wanted.id)
        if ns.overlay:
            wb.set_overlay_mode(ns.overlay)

    window.job_loaded.connect(on_loaded)
    wb.idle.connect(on_idle)


def check(ns: argparse.Namespace) -> str:
    """Why these options cannot be combined (empty when they can)."""
    if ns.session and (ns.path or ns.demo):
        return "--session opens its own traces: give it without PATH or --demo"
    if ns.predict_from and not ns.path:
        return "--predict-from needs the job to predict: give its PATH"
    try:
        parse_estimates(ns)
    except LumosError as exc:
        return f"--estimate: {exc}"
    return ""
