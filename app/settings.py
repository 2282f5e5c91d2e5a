"""Persistent user settings (recent folders, window layout, theme) in an INI file via QSettings.

An INI file rather than the platform registry so that tests can redirect it with
``QSettings.setPath`` and users can read what Lumos remembers.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

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
