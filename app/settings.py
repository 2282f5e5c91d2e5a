"""Persistent user settings (recent folders, window layout, theme, the cache's cap) in an INI file
via QSettings.

An INI file rather than the platform registry so that tests can redirect it with
``QSettings.setPath`` and users can read what Lumos remembers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings

if TYPE_CHECKING:
    from lumos_core.api.loading import CacheConfig

MAX_RECENT = 10


def settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "Lumos", "Lumos")


def recent_paths() -> list[str]:
    value = settings().value("recent/paths", [])
    if isinstance(value, str):  # QSettings returns a bare string for a one-element list
        value = [value]
    return [str(v) for v in value or []]


def remember_path(path: str | Path) -> list[str]:
    """Put ``path`` first in the recent list (no duplicates) and return the new list."""
    p = str(Path(path).resolve())
    paths = [p] + [q for q in recent_paths() if q != p]
    paths = paths[:MAX_RECENT]
    s = settings()
    s.setValue("recent/paths", paths)
    s.sync()
    return paths


def forget_path(path: str) -> None:
    s = settings()
    s.setValue("recent/paths", [q for q in recent_paths() if q != path])
    s.sync()


CACHE_MAX_KEY = "cache/max"  # the parse cache's cap, as typed ("20G", "500M", "10%"); "" = default


def cache_max_setting() -> str:
    return str(settings().value(CACHE_MAX_KEY, "") or "").strip()


def set_cache_max_setting(text: str) -> None:
    """Save the cache cap; LumosError (saving nothing) if ``text`` is not a size."""
    from lumos_core.api.loading import parse_size

    text = text.strip()
    if text:
        parse_size(text, volume_total=1, what="cache size")  # any volume: only the syntax matters
    s = settings()
    s.setValue(CACHE_MAX_KEY, text)
    s.sync()


def cache_config() -> CacheConfig:
    """The cache the app loads with: $LUMOS_CACHE_DIR/$LUMOS_CACHE_MAX (user overrides), else the
    saved cap, else the defaults. A setting that cannot be read falls back to the default cap."""
    from lumos_core.api.loading import CacheConfig, default_root
    from lumos_core.errors import LumosError

    try:
        return CacheConfig.resolve(setting=cache_max_setting())
    except LumosError:
        try:
            return CacheConfig.resolve()
        except LumosError:  # an unreadable LUMOS_CACHE_MAX: the app still opens jobs
            return CacheConfig(default_root())
