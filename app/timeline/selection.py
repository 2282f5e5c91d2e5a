"""Pointing at tasks: picking the task under the pointer (in either layer), hover text, the
selection with its launch arrow, and the measured span.

:class:`TimelineSelection` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`:
it reads the shared state, moves the view through the navigation part and tells the view what
happened through its signals. A hit
names a rank index and an event of the measured rank or of the predicted rank drawn in its rows
(:attr:`~app.timeline.hit.Hit.layer`); :meth:`layer_rank` gives the events it indexes.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, QPointF, Qt, Signal
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip

from app.timeline.canvas import TimelineCanvas, TimelineViewBox
from app.timeline.hit import MEASURED, PREDICTED, Hit
from app.timeline.navigation import TimelineNavigation
from app.timeline.span_item import Marker, OverlayItem, format_duration_ms
from app.timeline.stall_item import StallItem
from app.timeline.state import TimelineState
from app.view_model.lane_data import RowTable
from lumos_core.api.views import Family
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Kind, RankTrace


class TimelineSelection(QObject):
    """Picking, hover, selection and the measured span (see the module docstring)."""

    selection_changed = Signal(object)  # Hit or None
    hovered = Signal(str)
    measured = Signal(float, float)

    def __init__(
        self,
        state: TimelineState,
        nav: TimelineNavigation,
        view_box: TimelineViewBox,
        canvas: TimelineCanvas,
        overlay: OverlayItem,
        stall_item: StallItem,
    ) -> None:
        super().__init__(canvas)
        self.state = state
        self.nav = nav
        self.view_box = view_box
        self.canvas = canvas
        self.overlay = overlay
        self.stall_item = stall_item
        self.selected: Hit | None = None
        self.hover_hit: Hit | None = None
        # hover, click and Shift+drag on the canvas
        self.view_box.sigMeasure.connect(self._on_measure)
        scene = self.canvas.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    def reset(self) -> None:
        """A new job: nothing selected, hovered or measured."""
        self.selected = None
        self.hover_hit = None
        self.overlay.selection = None
        self.overlay.arrow = None
        self.overlay.measure = None

    def forget_predicted(self) -> None:
        """The predicted layer is replaced: a predicted task selected or hovered is gone."""
        if self.selected is not None and self.selected.layer == PREDICTED:
            self.selected = None
            self.selection_changed.emit(None)
        self.hover_hit = None

    @property
    def n_measured(self) -> int:
        return self.state.n_measured

    # ------------------------------------------------------------------ layers of a hit
    def predicted_index(self, hit: Hit) -> int:
        """Index of a predicted hit's rank in the prediction's lists."""
        pred = self.state.prediction
        return hit.rank_index - self.n_measured if pred is not None and pred.separate else hit.rank_index

    def layer_rank(self, hit: Hit) -> RankTrace:
        """The RankTrace a hit's event belongs to (measured, or predicted)."""
        assert self.state.loaded is not None
        if hit.layer == PREDICTED and self.state.prediction is not None:
            return self.state.prediction.ranks[self.predicted_index(hit)]
        return self.state.loaded.job.ranks[hit.rank_index]

    def _families(self, hit: Hit) -> np.ndarray:
        assert self.state.loaded is not None
        if hit.layer == PREDICTED and self.state.prediction is not None:
            return self.state.prediction.families[self.predicted_index(hit)]
        return self.state.loaded.families[hit.rank_index]

    def _layer_table(self, layer: int, rank_index: int) -> RowTable | None:
        pred = self.state.prediction
        n = self.n_measured
        if layer == PREDICTED:
            if pred is None:
                return None
            k = rank_index - n if pred.separate else rank_index
            if not 0 <= k < len(pred.tables) or not pred.present[k]:
                return None
            return pred.tables[k]
        assert self.state.loaded is not None
        return self.state.loaded.tables[rank_index] if rank_index < n else None

    def _layers_at(self, row_layer: int | None) -> list[int]:
        """Layers to pick from in a row, the preferred first: in a ghost overlay the measured task
        wins where both are under the cursor (its details then include the prediction), so the
        ghost is picked where it differs from what was measured."""
        if row_layer is not None:
            return [row_layer]
        if self.state.prediction is not None and (
            self.state.prediction.separate or self.state.overlay_mode in ("ghost", "differences")
        ):
            return [MEASURED, PREDICTED]
        return [MEASURED]

    # ------------------------------------------------------------------ picking and selection
    def pick(self, x: float, y: float, tolerance_px: float = 3.0) -> Hit | None:
        """The task drawn at data point (x ms, y rows), if any."""
        lm, loaded = self.state.layout_model, self.state.loaded
        if lm is None or loaded is None:
            return None
        row = lm.row_at(y)
        if row is None or not row.sources:
            return None
        x0, x1 = self.nav.x_range()
        tol = tolerance_px * (x1 - x0) / max(self.view_box.width(), 1.0)
        best: tuple[float, int, int] | None = None  # distance, event, layer
        for layer in self._layers_at(row.layer):
            table = self._layer_table(layer, row.rank_index)
            if table is None:
                continue
            for src in row.sources:
                ti = table.row_of.get(src)
                if ti is None:
                    continue
                j = table.find(ti, x, tol)
                if j >= 0:
                    s, e = table.start[j], table.end[j]
                    d = 0.0 if s <= x <= e else min(abs(x - s), abs(x - e))
                    if best is None or d < best[0]:
                        best = (d, int(table.event[j]), layer)
        if best is None:
            return None
        return Hit(row.rank_index, best[1], best[2])

    def event_span_ms(self, hit: Hit) -> tuple[float, float]:
        t = self.layer_rank(hit)
        s = float(t.start[hit.event]) / 1e6
        return s, s + float(t.dur[hit.event]) / 1e6

    def row_of_event(self, hit: Hit) -> int:
        assert self.state.layout_model is not None
        t = self.layer_rank(hit)
        return self.state.layout_model.row_showing(
            hit.rank_index, int(t.lane[hit.event]), int(t.depth[hit.event]), hit.layer
        )

    def select(self, hit: Hit | None, reveal: bool = False) -> None:
        self.selected = hit
        if hit is not None and reveal:
            s, e = self.event_span_ms(hit)
            x0, x1 = self.nav.x_range()
            if e - s > (x1 - x0) * 0.9:
                self.nav.zoom_to(s, e, pad=0.1)
            elif s < x0 or e > x1:
                w = x1 - x0
                self.nav.zoom_to((s + e) / 2 - w / 2, (s + e) / 2 + w / 2)
            self.nav.ensure_row_visible(self.row_of_event(hit))
        self.refresh_overlay()
        self.selection_changed.emit(hit)

    def launch_of(self, hit: Hit) -> int:
        """The runtime call that launched a GPU activity (-1 if none or not a GPU activity)."""
        t = self.layer_rank(hit)
        if int(t.kind[hit.event]) in {int(k) for k in GPU_ACTIVITY_KINDS}:
            return int(t.launch[hit.event])
        return -1

    def refresh_overlay(self) -> None:
        """Redraw the selection box and its launch arrow (after the rows or the layers moved)."""
        hit = self.selected
        self.overlay.selection = None
        self.overlay.arrow = None
        if hit is not None and self.state.loaded is not None and self.state.layout_model is not None:
            s, e = self.event_span_ms(hit)
            row = self.row_of_event(hit)
            self.overlay.selection = Marker(s, e, row)
            t = self.layer_rank(hit)
            launch = self.launch_of(hit)
            if launch >= 0:
                src = Hit(hit.rank_index, launch, hit.layer)
                ls, _ = self.event_span_ms(src)
                self.overlay.arrow = (QPointF(ls, self.row_of_event(src) + 0.5), QPointF(s, row + 0.5))
            elif int(t.kind[hit.event]) == Kind.RUNTIME:
                launched = np.flatnonzero(t.launch == hit.event)
                if len(launched):
                    dst = Hit(hit.rank_index, int(launched[0]), hit.layer)
                    ds, _ = self.event_span_ms(dst)
                    self.overlay.arrow = (QPointF(s, row + 0.5), QPointF(ds, self.row_of_event(dst) + 0.5))
        self.overlay.update()

    def describe_stall(self, x_ms: float, y: float) -> str:
        """Tooltip of the unexplained delay hatched under the pointer ("" if none)."""
        x0, x1 = self.nav.x_range()
        px = (x1 - x0) / max(self.canvas.width(), 1)
        stall = self.stall_item.stall_at(x_ms, y, slack_ms=2 * px)
        return stall.describe() if stall is not None else ""

    def describe(self, hit: Hit) -> str:
        """One-line hover text: name, duration, lane, rank."""
        assert self.state.loaded is not None
        t = self.layer_rank(hit)
        name = t.name_of(hit.event)
        if len(name) > 120:
            name = name[:117] + "…"
        dur = format_duration_ms(float(t.dur[hit.event]) / 1e6)
        lane = t.lanes[int(t.lane[hit.event])].label
        fam = Family(int(self._families(hit)[hit.event])).label
        start = float(t.start[hit.event]) / 1e6
        if hit.layer == PREDICTED and self.state.prediction is not None and self.state.prediction.separate:
            return f"predicted: {name}\n{dur} · {fam} · rank {t.rank} · {lane}\nstarts at {start:.6f} ms"
        if hit.layer == PREDICTED:
            m = self.state.loaded.job.ranks[hit.rank_index]
            was = format_duration_ms(float(m.dur[hit.event]) / 1e6)
            return (
                f"predicted: {name}\n{dur} (measured {was}) · {fam} · rank {t.rank} · {lane}\n"
                f"starts at {start:.6f} ms (measured {float(m.start[hit.event]) / 1e6:.6f} ms)"
            )
        return f"{name}\n{dur} · {fam} · rank {t.rank} · {lane}\nstarts at {start:.6f} ms"

    def zoom_to_selection(self) -> None:
        """Zoom to the measured span, else to the selected task."""
        if self.overlay.measure is not None:
            a, b = self.overlay.measure
            self.nav.zoom_to(a, b, pad=0.02)
        elif self.selected is not None:
            s, e = self.event_span_ms(self.selected)
            self.nav.zoom_to(s, max(e, s + 1e-3), pad=0.15)

    def clear_marks(self) -> None:
        self.overlay.measure = None
        self.select(None)

    # ------------------------------------------------------------------ pointer
    def _on_measure(self, a: float, b: float, finished: bool) -> None:
        self.overlay.measure = (min(a, b), max(a, b))
        self.overlay.update()
        self.measured.emit(min(a, b), max(a, b))

    def _on_mouse_moved(self, pos: QPointF) -> None:
        if self.state.loaded is None or not self.view_box.sceneBoundingRect().contains(pos):
            return
        p = self.view_box.mapSceneToView(pos)
        hit = self.pick(p.x(), p.y())
        if hit == self.hover_hit:
            return
        self.hover_hit = hit
        text = self.describe(hit) if hit is not None else self.describe_stall(p.x(), p.y())
        self.hovered.emit(text.replace("\n", "  ·  "))
        if text:
            QToolTip.showText(QCursor.pos(), text, self.canvas)
        else:
            QToolTip.hideText()

    def _on_mouse_clicked(self, ev) -> None:  # type: ignore[no-untyped-def]
        if ev.button() != Qt.MouseButton.LeftButton or self.state.loaded is None:
            return
        pos = ev.scenePos()
        if not self.view_box.sceneBoundingRect().contains(pos):
            return
        p = self.view_box.mapSceneToView(pos)
        hit = self.pick(p.x(), p.y())
        self.select(hit)
        if hit is not None and ev.double():
            self.zoom_to_selection()
