"""The app's side of the cache limits (issue 30): a job that could not be cached says so in the
status bar, and the cache's cap is one of the app's settings."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from app import settings
from lumos_core.errors import LumosError
from lumos_core.trace.cache_config import GB

pytest_plugins = ["app_fixtures"]  # window, isolated QSettings

Usage = namedtuple("Usage", "total used free")


def _job(folder: Path) -> Path:
    folder.mkdir()
    for r in range(2):
        b = TraceBuilder(rank=r, world=2)
        b.step(1, 1000, 4000)
        for k in range(100):
            b.launch(f"gemm_{k % 3}", 1010 + 30 * k, 3, 1020 + 30 * k, 6, stream=7)
        b.write(folder / f"rank{r}.json")
    return folder


def test_the_status_bar_says_when_a_job_was_not_cached(
    window, qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path / "job")
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(100 * GB, 99.6 * GB, int(0.4 * GB)))
    with qtbot.waitSignal(window.job_loaded, timeout=90_000):
        window.open_path(job)
    assert window.warnings_button.isVisible()
    assert "not cached: 0.4 GB free on " in window.warnings_button.text()
    assert not list((tmp_path / "cache").glob("ranks/*.rank"))


def test_the_cache_cap_is_an_app_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LUMOS_CACHE_MAX", raising=False)
    try:
        settings.set_cache_max_setting("5G")
        assert settings.cache_max_setting() == "5G"
        assert settings.cache_config().cap() == 5 * GB
        with pytest.raises(LumosError):
            settings.set_cache_max_setting("five gigs")
        assert settings.cache_max_setting() == "5G"  # an unreadable size is not saved
        monkeypatch.setenv("LUMOS_CACHE_MAX", "2G")  # the user's environment wins
        assert settings.cache_config().cap() == 2 * GB
    finally:
        settings.set_cache_max_setting("")


def test_the_file_menu_sets_the_cache_cap(window, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cache_dialog import ask_cache_max, cache_summary

    monkeypatch.delenv("LUMOS_CACHE_MAX", raising=False)
    assert any("Cache Size" in a.text() for a in window.menuBar().actions()[0].menu().actions())
    shown: list[str] = []

    def answer(text: str) -> object:
        return lambda parent, title, label, *rest: (shown.append(label), (text, True))[1]

    try:
        assert ask_cache_max(window, answer("3G"))
        assert settings.cache_config().cap() == 3 * GB
        assert "cap 3.0 GB" in cache_summary()
        assert "holds" in shown[0]
    finally:
        settings.set_cache_max_setting("")
