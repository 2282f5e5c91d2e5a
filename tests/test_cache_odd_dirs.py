"""The cache folder set to somewhere nothing can be cached: a file, or a virtual file system of
0 bytes (/proc). The messages say so instead of '0 B free (Lumos keeps 0 B free)' or 'not
created yet'."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos_core.api.loading import cache_info
from lumos_core.commands import cache as cache_cmd
from lumos_core.trace import cache_config
from lumos_core.trace.cache_config import CacheConfig, free_space_problem


def test_a_zero_byte_volume_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_config, "volume_usage", lambda p: (0, 0))
    why = free_space_problem(tmp_path / "c", 1000)
    assert why is not None and "0 bytes, not a disk" in why and "keeps 0 B free" not in why
    monkeypatch.setattr(cache_config, "volume_usage", lambda p: (100 * 10**9, 50 * 10**9))
    assert free_space_problem(tmp_path / "c", 1000) is None  # an ordinary disk: no complaint


def test_info_says_when_the_cache_path_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("")
    lines = cache_cmd.info_lines(cache_info(CacheConfig.resolve(f)))
    assert "a file, not a folder" in lines[0] and "not created yet" not in lines[0]
    lines = cache_cmd.info_lines(cache_info(CacheConfig.resolve(tmp_path / "new")))
    assert "not created yet" in lines[0]
