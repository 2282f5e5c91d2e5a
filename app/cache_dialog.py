"""The app's side of the parse cache's limits (see README, "The cache"): File ▸ Cache Size Limit…
sets the cap (an app setting), and the status bar's warnings button names a job that was not
cached (``not cached: 0.4 GB free on ...``, from the loader)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QInputDialog, QLineEdit, QMessageBox, QWidget

from app import settings
from lumos_core.api.loading import format_size
from lumos_core.errors import LumosError

Ask = Callable[..., tuple[str, bool]]


def cache_summary() -> str:
    """Where the cache is, how big it is now and its cap (what the dialog shows)."""
    from lumos_core.api.loading import cache_info

    d = cache_info(settings.cache_config())
    return f"{d['location']}\nholds {format_size(d['bytes'])} in {d['entries']} entries; cap {d['cap']}"


def ask_cache_max(parent: QWidget | None, ask: Ask = QInputDialog.getText) -> bool:
    """Ask for the cap (empty: the default) and save it; True if a new value was saved. The next
    job loaded evicts down to it."""
    text, ok = ask(
        parent,
        "Cache Size Limit",
        f"{cache_summary()}\n\nLimit (e.g. 5G, 500M, 10%; empty: 10 % of the volume, at most 20 GB;\n"
        "LUMOS_CACHE_MAX, if set, wins):",
        QLineEdit.EchoMode.Normal,
        settings.cache_max_setting(),
    )
    if not ok:
        return False
    try:
        settings.set_cache_max_setting(text)
    except LumosError as exc:
        QMessageBox.warning(parent, "Cache Size Limit", str(exc))
        return False
    return True


def warnings_label(warnings: list[str]) -> str:
    """The status bar's warnings button: how many, and the skipped cache's reason in short."""
    label = f"⚠ {len(warnings)} warning{'s' * (len(warnings) != 1)}"
    note = next((w.split(" (")[0] for w in warnings if w.startswith("not cached: ")), "")
    return f"{label} — {note}" if note else label
