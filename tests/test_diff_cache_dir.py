"""``lumos diff`` and ``lumos validate`` take --cache-dir and --cache-max like every other command
that loads traces (they used the default cache whatever the user passed to the others)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracegen import TraceBuilder

from lumos_core.cli import main


def _job(folder: Path) -> Path:
    b = TraceBuilder(rank=0, world=1)
    for k in range(3):
        t0 = 1000.0 * k
        b.step(k + 1, t0, 990)
        b.launch("ampere_sgemm_128x64_tn", t0 + 2, 3, kts=t0 + 10, kdur=300)
    folder.mkdir(parents=True)
    b.write(folder / "rank0.json")
    return folder


def test_diff_writes_its_cache_where_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env_dir, own_dir = tmp_path / "env-cache", tmp_path / "own-cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(env_dir))
    a, b = _job(tmp_path / "a"), _job(tmp_path / "b")
    assert main(["--cache-max", "1G", "diff", str(a), str(b), "--cache-dir", str(own_dir), "-q"]) == 0
    assert "iteration" in capsys.readouterr().out
    assert any((own_dir / "ranks").iterdir()) and not env_dir.exists()


def test_top_level_help_names_the_global_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--cache-max SIZE may also come before the command" in capsys.readouterr().out
