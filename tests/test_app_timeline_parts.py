"""The timeline's parts stand on their own: each is built from what it works on and the shared
Qt-free state, and tells the others what happened through signals (no reference to the view)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO

from app.theme import LIGHT
from app.timeline.search import TimelineSearch
from app.timeline.state import Forward, TimelineState
from app.view_model.loaded_job import prepare_loaded
from lumos_core import load_job

DATA = REPO / "tests" / "data" / "cpu-gpt" / "base"


class _Part:
    def __init__(self) -> None:
        self.mode = "a"

    def twice(self, x: int) -> int:
        return 2 * x


class _Host:
    mode = Forward("part")
    twice = Forward("part")

    def __init__(self) -> None:
        self.part = _Part()


def test_forward_reads_and_writes_the_owning_part() -> None:
    host = _Host()
    assert host.twice(3) == 6 and host.mode == "a"
    host.mode = "b"  # e.g. the What-if session restoring the timeline's overlay mode
    assert host.part.mode == "b" and "mode" not in vars(host)


class _SpanItem:
    """What the search needs of the span item: somewhere to put the highlight masks."""

    def __init__(self) -> None:
        self.masks: list[np.ndarray | None] | None = None

    def set_match_masks(self, masks: list[np.ndarray | None]) -> None:
        self.masks = masks


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    return prepare_loaded(str(DATA), load_job(str(DATA)), lambda _f, _m: None)


def test_the_search_part_works_without_a_view_and_says_where_to_go(qapp, loaded) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QObject

    owner = QObject()
    state = TimelineState(LIGHT, loaded=loaded)
    item = _SpanItem()
    search = TimelineSearch(state, item, owner)  # type: ignore[arg-type]
    stepped = []
    search.stepped.connect(stepped.append)
    rank = loaded.job.ranks[0]
    name = rank.name_of(int(np.argmax(rank.dur)))  # the longest task's name: drawn, so matched
    n = search.set_search(name[:12])
    assert n > 0 and search.match_count == n and item.masks is not None
    first = search.step_match(1)
    assert stepped == [first] and first is not None
    assert name[:12].lower() in loaded.job.ranks[first.rank_index].name_of(first.event).lower()
    last = search.step_match(-1)  # back from the first match: wraps to the last
    assert stepped == [first, last] and search.match_index == n - 1
    search.set_search("")
    assert search.match_count == 0 and search.step_match(1) is None and len(stepped) == 2
