"""Light or dark as the desktop says, unless the user picked one.

The preference is the setting ``view/theme``: ``light``, ``dark`` or ``system`` (the default).
``lumos --theme light|dark|system`` overrides it for one run without saving it. The window's own
View ▸ Dark Theme toggle saves an explicit light/dark; View ▸ Follow System Theme, added here, goes
back to following the desktop, live (``QStyleHints.colorSchemeChanged``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QMenu

from app import settings
from app.theme import THEMES, Theme, resolve_theme

if TYPE_CHECKING:
    from app.main_window import MainWindow

THEME_KEY = "view/theme"
PREFERENCES = ("light", "dark", "system")


def saved_preference() -> str:
    value = str(settings.settings().value(THEME_KEY, "system"))
    return value if value in PREFERENCES else "system"


def request_color_scheme(preference: str) -> None:
    """Tell Qt (6.8+) which scheme the app shows, so native parts such as title bars and file
    dialogs match it; ``system`` hands the choice back to the desktop."""
    hints = QGuiApplication.styleHints()
    if not hasattr(hints, "setColorScheme"):
        return
    scheme = {"light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}.get(
        preference, Qt.ColorScheme.Unknown
    )
    hints.setColorScheme(scheme)


def startup_theme(preference: str) -> Theme:
    request_color_scheme(preference)
    return resolve_theme(preference)


class SystemThemeFollower(QObject):
    """Re-themes ``window`` when the desktop switches between light and dark, while following."""

    def __init__(self, window: MainWindow, follow: bool) -> None:
        super().__init__(window)
        self.window = window
        self.action = QAction("Follow System Theme", window)
        self.action.setCheckable(True)
        self.action.setChecked(follow)
        self.action.triggered.connect(self._on_follow_triggered)
        dark_action: QAction | None = getattr(window, "dark_action", None)
        if dark_action is not None:
            # MainWindow saves the explicit choice itself; we only stop following.
            dark_action.triggered.connect(self._on_explicit_choice)
            _insert_after(dark_action, self.action)
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_scheme_changed)

    @property
    def following(self) -> bool:
        return self.action.isChecked()

    def _on_scheme_changed(self, _scheme: Qt.ColorScheme) -> None:
        if self.following:
            self.show_theme(resolve_theme("system"))

    def _on_follow_triggered(self, checked: bool) -> None:
        preference = "system" if checked else self.window.theme.name
        settings.settings().setValue(THEME_KEY, preference)
        request_color_scheme(preference)
        if checked:
            self.show_theme(resolve_theme("system"))

    def _on_explicit_choice(self) -> None:
        self.action.setChecked(False)
        request_color_scheme(self.window.theme.name)

    def show_theme(self, theme: Theme) -> None:
        if theme is not self.window.theme:
            self.window.apply_theme(theme)  # MainWindow's one place that re-themes every pane
        dark_action: QAction | None = getattr(self.window, "dark_action", None)
        if dark_action is not None:
            dark_action.setChecked(theme is THEMES["dark"])


def _insert_after(anchor: QAction, action: QAction) -> None:
    menus = [o for o in anchor.associatedObjects() if isinstance(o, QMenu)]
    if not menus:
        return
    menu = menus[0]
    actions = menu.actions()
    position = actions.index(anchor) + 1
    if position < len(actions):
        menu.insertAction(actions[position], action)
    else:
        menu.addAction(action)
