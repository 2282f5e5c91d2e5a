"""``lumos replay --json``'s stragglers: the p a rank's reason quotes (the repeated-delay test's)
is in the JSON as ``p_late`` beside ``p_value`` (the smaller of both tests'), and the definition
says which is which: nanoGPT's rank 2 read 'p 0.33' in its reason beside p_value 0.00395."""

from __future__ import annotations

from lumos_core.replay.stragglers import DEFINITION, RankLateness


def test_reason_p_and_p_value_are_both_reported() -> None:
    r = RankLateness(
        rank=2,
        rank_index=2,
        n_collectives=76,
        n_late=3,
        mean_late_ns=1.6e6,
        max_late_ns=3_300_000,
        iteration_late_ns=0,
        p_value=0.00395,
        p_late=0.33,
    )
    d = r.as_dict()
    assert d["p_value"] == 0.00395 and d["p_late"] == 0.33
    assert "p_value" in DEFINITION and "p_late" in DEFINITION
