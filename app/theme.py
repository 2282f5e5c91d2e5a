"""Colours of the app: one palette per theme, family colours shared by both.

Family colours are mid-saturation hues that stay readable on white and on near-black; NCCL
collective kinds get clearly different hues (red, orange, magenta, brown, gold, ...) because telling
an AllGather from a ReduceScatter at a glance is the point of colouring them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from lumos_core.api.views import N_FAMILIES, Family

FAMILY_HEX: dict[Family, str] = {
    Family.GEMM: "#4E79A7",
    Family.ATTENTION: "#8A5CB8",
    Family.ELEMENTWISE: "#59A14F",
    Family.REDUCTION: "#2F9E9E",
    Family.KERNEL_OTHER: "#9A9A9A",
    Family.NCCL_ALL_REDUCE: "#E15759",
    Family.NCCL_ALL_GATHER: "#F28E2B",
    Family.NCCL_REDUCE_SCATTER: "#D6447E",
    Family.NCCL_ALL_TO_ALL: "#8C6D31",
    Family.NCCL_BROADCAST: "#E3B51F",
    Family.NCCL_REDUCE: "#FF9D9A",
    Family.NCCL_P2P: "#7A1F3D",
    Family.NCCL_OTHER: "#C98C8C",
    Family.MEMCPY: "#17BECF",
    Family.MEMSET: "#7FA7C9",
    Family.CPU_OP: "#8E9AAF",
    Family.CPU_RUNTIME: "#C9A66B",
    Family.CPU_ANNOTATION: "#B4A2DC",
    Family.CPU_PYTHON: "#A4B494",
    Family.OTHER: "#BDBDBD",
}
assert len(FAMILY_HEX) == N_FAMILIES


@dataclass(frozen=True)
class Theme:
    name: str
    background: str
    foreground: str
    muted: str  # secondary text
    header_band: str  # background of rank header rows
    group_band: str  # alternate background of every other rank group
    label_background: str
    grid: str
    iteration_line: str
    selection: str
    search_highlight: str
    measure_fill: str  # translucent, #AARRGGBB
    arrow: str
    window: str  # chrome around the timeline: menus, toolbar, docks, buttons
    highlight: str  # selected rows and menu items in Qt widgets
    link: str
    families: list[QColor] = field(default_factory=list, compare=False)

    def family_color(self, family: int) -> QColor:
        return self.families[family]

    def text_on(self, family: int) -> QColor:
        """Black or white, whichever reads better on the family colour."""
        c = self.families[family]
        luminance = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue()
        return QColor("#111111") if luminance > 140 else QColor("#FFFFFF")


def _families() -> list[QColor]:
    return [QColor(FAMILY_HEX[Family(i)]) for i in range(N_FAMILIES)]


LIGHT = Theme(
    name="light",
    background="#FFFFFF",
    foreground="#1F2328",
    muted="#6B7280",
    header_band="#EEF1F5",
    group_band="#FAFBFC",
    label_background="#F7F8FA",
    grid="#E5E7EB",
    iteration_line="#4B5563",
    selection="#111827",
    search_highlight="#FF8C00",
    measure_fill="#332F80ED",
    arrow="#D62728",
    window="#EEF1F5",
    highlight="#3A6EA5",
    link="#1F6FEB",
    families=_families(),
)

DARK = Theme(
    name="dark",
    background="#1E1F22",
    foreground="#DFE1E5",
    muted="#9AA0A6",
    header_band="#2B2D31",
    group_band="#232428",
    label_background="#25262A",
    grid="#3A3C41",
    iteration_line="#A0A7B0",
    selection="#FFFFFF",
    search_highlight="#FFD54F",
    measure_fill="#3364B5F6",
    arrow="#FF6B6B",
    window="#2B2D31",
    highlight="#3D5A80",
    link="#64B5F6",
    families=_families(),
)

THEMES = {t.name: t for t in (LIGHT, DARK)}


def system_theme_name() -> str:
    """``"dark"`` or ``"light"``, as the desktop asks (``QStyleHints.colorScheme``, Qt 6.5+).

    Platforms that do not say (offscreen, older desktops) report ``Unknown``: Lumos is light there.
    """
    if QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark:
        return "dark"
    return "light"


def resolve_theme(preference: str | None) -> Theme:
    """The theme for a preference: ``light``, ``dark``, or ``system``/None (follow the desktop)."""
    if preference in THEMES:
        return THEMES[preference]
    return THEMES[system_theme_name()]


def build_palette(theme: Theme) -> QPalette:
    """A QPalette made only of the theme's colours, so widgets and the timeline always agree."""
    window, text, muted = QColor(theme.window), QColor(theme.foreground), QColor(theme.muted)
    p = QPalette(window, window)  # derives Light/Mid/Dark/Shadow (Fusion's bevels) from the window colour
    role = QPalette.ColorRole
    p.setColor(role.WindowText, text)
    p.setColor(role.Base, QColor(theme.background))
    p.setColor(role.AlternateBase, QColor(theme.label_background))
    p.setColor(role.ToolTipBase, window)
    p.setColor(role.ToolTipText, text)
    p.setColor(role.Text, text)
    p.setColor(role.PlaceholderText, muted)
    p.setColor(role.ButtonText, text)
    p.setColor(role.BrightText, QColor(theme.arrow))
    p.setColor(role.Highlight, QColor(theme.highlight))
    p.setColor(role.HighlightedText, QColor("#FFFFFF"))
    p.setColor(role.Link, QColor(theme.link))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.Text, role.ButtonText, role.WindowText):
        p.setColor(disabled, r, muted)
    return p


def apply_palette(app: object, theme: Theme) -> None:
    """Give every Qt widget (tables, text, menus) colours that match the timeline's theme."""
    if not isinstance(app, QApplication):
        return
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")  # the one style that follows a custom palette on every platform
    app.setPalette(build_palette(theme))
