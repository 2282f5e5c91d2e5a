"""Files Lumos ships beside its code (the app icon), found the same way from a source checkout, an
editable install and a PyInstaller bundle.

PyInstaller unpacks data files under ``sys._MEIPASS`` (``<app>/_internal`` in a one-folder build);
``packaging/lumos.spec`` puts them in ``resources/`` there, mirroring the repository layout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QSize
from PySide6.QtGui import QIcon

ICON_GLOB = "lumos-*.png"  # icons/lumos-<size>.png, rendered from icons/lumos.svg


def resources_dir() -> Path:
    bundle = getattr(sys, "_MEIPASS", None)  # set by PyInstaller's bootloader, absent otherwise
    if bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource_path(name: str) -> Path:
    """``resources/<name>``; it may not exist (a wheel install ships no resources/)."""
    return resources_dir() / name


def icon_files() -> list[tuple[int, Path]]:
    """(size in px, PNG) for every rendered app icon, smallest first."""
    found = []
    for path in resource_path("icons").glob(ICON_GLOB):
        size = path.stem.rsplit("-", 1)[-1]
        if size.isdigit():
            found.append((int(size), path))
    return sorted(found)


def app_icon() -> QIcon:
    """The Lumos icon at every rendered size, so each platform picks a crisp one (an empty icon if
    the resources are missing: the app still runs)."""
    icon = QIcon()
    for size, path in icon_files():
        icon.addFile(str(path), QSize(size, size))
    return icon
