"""``lumos replay`` (text) names the stragglers that ``--json`` flags, with their reason: a user who
reads the text output must not miss a flagged rank (SYNTHETIC job with a rank slowed 5 %: it checks
the wiring, not the detection's accuracy)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from lumos_core.cli import main


def _synth(folder: Path, slow: tuple) -> Path:
    from lumos_core.synth import SynthConfig, model_from_args, synthesize

    model = model_from_args(
        "custom", layers=4, hidden=4096, ffn=None, heads=32, seq=2048, vocab=None, kv_channels=None
    )
    synthesize(SynthConfig(model=model, tp=2, pp=2, dp=2, iterations=4, seed=0, slow_ranks=slow), folder)
    return folder


def test_text_replay_lists_the_flagged_ranks_as_json_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "cache"))
    job = _synth(tmp_path / "slow", ((6, 1.05),))
    assert main(["replay", str(job), "--no-holdout", "--json", "-q"]) == 0
    flagged = orjson.loads(capsys.readouterr().out)["stragglers"]["flagged"]
    assert flagged == [6]
    assert main(["replay", str(job), "--no-holdout", "-q"]) == 0
    text = capsys.readouterr().out
    assert "stragglers: 1 rank(s)" in text and "  rank 6: compute" in text

    plain = _synth(tmp_path / "plain", ())
    assert main(["replay", str(plain), "--no-holdout", "-q"]) == 0
    assert "stragglers: none" in capsys.readouterr().out


def test_idle_help_names_every_cause(capsys: pytest.CaptureFixture[str]) -> None:
    from lumos_core.replay.idle import CAUSE_INFO

    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    words = {"before_window": "before the trace window", "peer_not_loaded": "peer not loaded"}
    for c in CAUSE_INFO:
        assert words.get(c.name, c.name) in help_text, c.name
