"""What the parts of the timeline share: the job shown, its row layout, the prediction drawn over
it and the theme. One plain object, written by the view and the predicted-layer part, read by every
part; no Qt, so a part can be tested without a widget.

:class:`Forward` gives the view its public face: each public name of a part is one line in
:class:`~app.timeline.timeline_view.TimelineView` saying which part owns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.theme import Theme
from app.timeline.lane_layout import LaneLayout
from app.view_model.loaded_job import LoadedJob
from app.view_model.overlay_data import PredictedOverlay


@dataclass
class TimelineState:
    """The shared state of the timeline's parts (see the module docstring)."""

    theme: Theme
    loaded: LoadedJob | None = None
    layout_model: LaneLayout | None = None
    prediction: PredictedOverlay | None = None
    overlay_mode: str = "ghost"

    @property
    def n_measured(self) -> int:
        return len(self.loaded.job.ranks) if self.loaded is not None else 0

    @property
    def shown_mode(self) -> str:
        """What is drawn now: "measured" without a prediction, "separate" for predicted ranks
        that are not the traced ones (they get their own rows), else the overlay mode."""
        if self.prediction is None:
            return "measured"
        return "separate" if self.prediction.separate else self.overlay_mode


class Forward:
    """``zoom_to = Forward("nav")`` in a class: ``obj.zoom_to`` is ``obj.nav.zoom_to`` (read and
    written), so callers keep one object to talk to while the work lives in small parts."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: object, value: object) -> None:
        setattr(getattr(obj, self.part), self.name, value)
