"""Summary ▸ Idle on a real job: idle causes per rank/stream/iteration, and the largest unexplained
delays, which select the task that started late when double-clicked."""

from __future__ import annotations

import pytest
from app_helpers import close_window, open_in_window
from conftest import needs_shared, shared
from PySide6.QtWidgets import QApplication

from app.timeline.timeline_view import Hit
from lumos_core.replay.idle import CAUSES

pytestmark = needs_shared

pytest_plugins = ["app_fixtures"]


@pytest.fixture(scope="module")
def win(qapp):  # type: ignore[no-untyped-def]
    w = open_in_window(qapp, shared("a100-ddp-2rank"))
    yield w
    close_window(w)


def test_idle_tab_lists_causes_and_selects_an_offender(win) -> None:
    pane = win.summaries.idle
    report = win.loaded.idle
    assert report is not None, win.loaded.idle_error
    rows = pane.causes.model.rows
    assert len(rows) == len(report.rows) == 2 * 3  # two GPU streams, three steps
    for row, r in zip(
        sorted(rows, key=lambda x: (x.stream, x.iteration)),
        sorted(report.rows, key=lambda x: (x.stream, x.iteration)),
    ):
        assert row.idle_ns == r.idle_ns == sum(r.causes[c] for c in CAUSES)
    delays = pane.delays.model.rows
    assert delays and delays[0].length_ns == max(d.length for d in report.delays)
    assert "Unexplained delays" in pane.note.text()
    # double-click the largest delay: its late task is selected on the timeline
    pane.delays.proxy.sort(3)
    top = pane.delays.proxy.index(0, 0)
    pane.delays.view.doubleClicked.emit(top)
    QApplication.processEvents()
    chosen = pane.delays.model.rows[pane.delays.proxy.mapToSource(top).row()]
    assert win.timeline.selected == Hit(chosen.rank_index, chosen.event)
    assert "idle_causes" in win.summaries.tables()
