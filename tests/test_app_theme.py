"""Light and dark palettes built from app/theme.py, following the desktop's colour scheme, --theme."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage, QPalette
from PySide6.QtWidgets import QApplication, QMenu

from app import settings, theme
from app.theme import DARK, LIGHT, THEMES, build_palette, resolve_theme
from app.theme_follow import THEME_KEY, SystemThemeFollower, request_color_scheme, saved_preference

pytest_plugins = ["app_fixtures"]  # window, isolated QSettings


@pytest.mark.parametrize("t", [LIGHT, DARK], ids=["light", "dark"])
def test_palette_is_made_of_the_theme_colours(t: theme.Theme) -> None:
    p = build_palette(t)
    role = QPalette.ColorRole
    assert p.color(role.Window) == QColor(t.window)
    assert p.color(role.Base) == QColor(t.background)
    assert p.color(role.AlternateBase) == QColor(t.label_background)
    assert p.color(role.Text) == QColor(t.foreground) == p.color(role.WindowText)
    assert p.color(role.Highlight) == QColor(t.highlight)
    assert p.color(QPalette.ColorGroup.Disabled, role.Text) == QColor(t.muted)
    # Fusion's bevels: lighter and darker than the window in both themes
    assert (
        p.color(role.Light).lightness() >= p.color(role.Window).lightness() > p.color(role.Dark).lightness()
    )


def test_resolve_theme_follows_the_desktop_for_system(qapp, monkeypatch) -> None:
    assert theme.system_theme_name() in THEMES
    assert resolve_theme("light") is LIGHT and resolve_theme("dark") is DARK
    monkeypatch.setattr(theme, "system_theme_name", lambda: "dark")
    assert resolve_theme("system") is DARK and resolve_theme(None) is DARK
    monkeypatch.setattr(theme, "system_theme_name", lambda: "light")
    assert resolve_theme("system") is LIGHT


def test_follower_rethemes_on_scheme_change_until_the_user_picks(window, monkeypatch) -> None:
    settings.settings().remove(THEME_KEY)
    assert saved_preference() == "system"
    follower = SystemThemeFollower(window, follow=True)
    view_actions = next(o for o in window.dark_action.associatedObjects() if isinstance(o, QMenu)).actions()
    assert view_actions[view_actions.index(window.dark_action) + 1] is follower.action

    desktop = {"scheme": "dark"}
    monkeypatch.setattr(theme, "system_theme_name", lambda: desktop["scheme"])
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert window.theme is DARK and window.dark_action.isChecked()
    assert QApplication.palette().color(QPalette.ColorRole.Window) == QColor(DARK.window)

    window.dark_action.trigger()  # the user picks light in the View menu: no longer following
    assert window.theme is LIGHT and not follower.following
    assert saved_preference() == "light"
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert window.theme is LIGHT

    follower.action.trigger()  # View ▸ Follow System Theme again
    assert follower.following and saved_preference() == "system"
    assert window.theme is DARK

    desktop["scheme"] = "light"
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert window.theme is LIGHT and not window.dark_action.isChecked()
    request_color_scheme("system")


def screenshot(tmp_path: Path, *args: str) -> QImage:
    png = tmp_path / f"theme{len(list(tmp_path.glob('*.png')))}.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    out = subprocess.run(
        [sys.executable, "-m", "app", "--screenshot", str(png), "--size", "800x500", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return QImage(str(png))


def test_theme_flag_colours_the_whole_window(qapp, tmp_path) -> None:
    """The menu bar (Qt widgets) takes the theme's window colour: chrome and timeline agree."""
    for flag, expected in (("dark", DARK), ("light", LIGHT), ("system", LIGHT)):  # offscreen: no scheme
        image = screenshot(tmp_path, "--theme", flag)
        assert image.pixelColor(image.width() - 20, 8) == QColor(expected.window), flag
