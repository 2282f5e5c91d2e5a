"""Pipeline schedules: the paper's Figure 4 orders and Megatron's p2p pairing."""

from __future__ import annotations

import pytest

from lumos_core.errors import ConfigError
from lumos_core.perf.schedules import format_schedule, pipeline_steps, schedule, warmup_count


def test_paper_figure4_stage0_pp4_m8():
    order = schedule("1f1b", 0, 4, 8)
    assert format_schedule(order) == "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8"


def test_paper_figure4_stage0_pp2_m4():
    assert format_schedule(schedule("1f1b", 0, 2, 4)) == "F1 F2 B1 F3 B2 F4 B3 B4"


def test_last_stage_alternates_and_middle_stage_warmup():
    assert format_schedule(schedule("1f1b", 3, 4, 4)) == "F1 B1 F2 B2 F3 B3 F4 B4"
    assert format_schedule(schedule("1f1b", 1, 4, 6)) == "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 B5 B6"
    assert [warmup_count("1f1b", s, 4, 8) for s in range(4)] == [3, 2, 1, 0]


def test_warmup_is_clamped_by_microbatches():
    # 8 stages but only 2 microbatches: stage 0 runs both forwards before any backward.
    assert format_schedule(schedule("1f1b", 0, 8, 2)) == "F1 F2 B1 B2"
    assert warmup_count("1f1b", 0, 8, 2) == 2


def test_gpipe():
    assert format_schedule(schedule("gpipe", 1, 4, 3)) == "F1 F2 F3 B1 B2 B3"
    assert format_schedule(schedule("1f1b", 0, 1, 3)) == "F1 B1 F2 B2 F3 B3"


def test_each_microbatch_once_forward_before_backward():
    for kind in ("1f1b", "gpipe"):
        for p in (1, 2, 3, 4, 8):
            for m in (1, 2, 5, 8):
                for s in range(p):
                    order = schedule(kind, s, p, m)
                    assert sorted(mb for ph, mb in order if ph == "F") == list(range(m))
                    assert sorted(mb for ph, mb in order if ph == "B") == list(range(m))
                    assert all(order.index(("F", mb)) < order.index(("B", mb)) for mb in range(m))


def _groups_with(steps, peer):
    return [
        tuple((t.op, t.payload, t.microbatch) for t in s.transfers if t.peer == peer)
        for s in steps
        if s.phase == "P2P" and any(t.peer == peer for t in s.transfers)
    ]


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 2), (3, 5), (8, 8), (8, 3)])
def test_p2p_groups_of_adjacent_stages_match_in_order(kind, p, m):
    """The k-th group stage s issues with s+1 is the mirror of the k-th group s+1 issues with s."""
    mirror = {"send": "recv", "recv": "send"}
    for s in range(p - 1):
        down = _groups_with(pipeline_steps(kind, s, p, m), "next")
        up = _groups_with(pipeline_steps(kind, s + 1, p, m), "prev")
        # 1F1B: w sends, m - w send+recv pairs, w receives; GPipe: m sends then m receives.
        expected = m + warmup_count(kind, s, p, m) if kind == "1f1b" else 2 * m
        assert len(down) == len(up) == expected
        assert [tuple((mirror[o], pl, mb) for o, pl, mb in g) for g in down] == up
        sends = [t for g in down for t in g if t[0] == "send"]
        assert [t[2] for t in sends] == list(range(m))  # every activation sent once, in order


def test_1f1b_group_counts_and_orders():
    steps = pipeline_steps("1f1b", 0, 2, 4)
    text = []
    for st in steps:
        if st.phase == "P2P":
            text.append("+".join(f"{t.op}-{t.payload}{t.microbatch + 1}" for t in st.transfers))
        else:
            text.append(f"{st.phase}{st.microbatch + 1}")
    assert text == [
        "F1",
        "send-act1",
        "F2",
        "send-act2+recv-grad1",
        "B1",
        "F3",
        "send-act3+recv-grad2",
        "B2",
        "F4",
        "send-act4+recv-grad3",
        "B3",
        "recv-grad4",
        "B4",
    ]
    last = [
        f"{s.phase}{s.microbatch + 1}"
        if s.phase != "P2P"
        else "+".join(f"{t.op}-{t.payload}{t.microbatch + 1}" for t in s.transfers)
        for s in pipeline_steps("1f1b", 1, 2, 4)
    ]
    assert last == [
        "recv-act1",
        "F1",
        "B1",
        "recv-act2+send-grad1",
        "F2",
        "B2",
        "recv-act3+send-grad2",
        "F3",
        "B3",
        "recv-act4+send-grad3",
        "F4",
        "B4",
        "send-grad4",
    ]


def test_bad_arguments_raise_config_error():
    with pytest.raises(ConfigError, match="unknown pipeline schedule"):
        schedule("zb", 0, 2, 4)
    with pytest.raises(ConfigError, match="outside"):
        schedule("1f1b", 2, 2, 4)
    with pytest.raises(ConfigError, match="microbatches"):
        schedule("1f1b", 0, 2, 0)
