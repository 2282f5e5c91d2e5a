"""The small widgets around the timeline in the main window: the family legend, the banner for
load errors and the welcome page shown before a job is open."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.theme import Theme
from lumos_core.api.views import Family

KEYS_HELP = (
    "Wheel: zoom at the cursor · Shift+wheel: scroll rows · drag: pan · Shift+drag: measure · "
    "W/S zoom · A/D pan · F zoom to selection · 0 reset · [ ] iterations · N/P search matches · Esc clear"
)


class LegendBar(QLabel):
    """Colour chips of the families present in the job."""

    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        self.families: list[int] = []
        self.setWordWrap(True)
        self.setContentsMargins(8, 2, 8, 2)

    def set_families(self, families: list[int]) -> None:
        self.families = families
        self._render()

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self._render()

    def _render(self) -> None:
        # unbreakable chips (no-break spaces, a word joiner after "/"): lines wrap only between chips
        chips = [
            f"<span style='color:{self.theme.family_color(f).name()}; font-size:14px'>■</span>&nbsp;"
            + html.escape(Family(f).label).replace(" ", "&nbsp;").replace("/", "/\u2060")
            for f in self.families
        ]
        self.setText("&nbsp;&nbsp; ".join(chips))  # the plain space is where lines may wrap


class Banner(QFrame):
    """A dismissible strip above the timeline for load errors and skipped files."""

    def __init__(self) -> None:
        super().__init__()
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Show files")
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 4, 6, 4)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.details_button)
        lay.addWidget(close)
        self.hide()

    def show_message(self, message: str, error: bool) -> None:
        bg, fg = ("#FDECEA", "#8A1C1C") if error else ("#FFF6DB", "#6B4E00")
        self.setStyleSheet(
            f"Banner {{ background: {bg}; border-bottom: 1px solid {fg}; }} QLabel {{ color: {fg}; }}"
        )
        self.text.setText(message)
        self.show()


class WelcomePage(QWidget):
    """What the window shows before a job is open."""

    open_folder_requested = Signal()
    demo_requested = Signal()
    recent_chosen = Signal(str)  # a path of the recent list

    def __init__(self) -> None:
        super().__init__()
        title = QLabel("<h1>Lumos</h1>")
        sub = QLabel(
            "Open a folder of per-rank PyTorch profiler (Kineto) traces to see every rank's timeline, "
            "iteration breakdowns, top kernels and collectives.<br>"
            "Drop a folder or trace files anywhere in this window, or try the demo job."
        )
        sub.setWordWrap(True)
        open_button = QPushButton("Open Folder…")
        open_button.clicked.connect(self.open_folder_requested)
        demo_button = QPushButton("Open Demo Job")
        demo_button.clicked.connect(self.demo_requested)
        self.recent = QListWidget()
        self.recent.itemActivated.connect(lambda item: self.recent_chosen.emit(item.text()))
        buttons = QHBoxLayout()
        buttons.addWidget(open_button)
        buttons.addWidget(demo_button)
        buttons.addStretch(1)
        inner = QVBoxLayout()
        inner.addWidget(title)
        inner.addWidget(sub)
        inner.addLayout(buttons)
        inner.addWidget(QLabel("Recent:"))
        inner.addWidget(self.recent)
        box = QWidget()
        box.setLayout(inner)
        box.setMaximumWidth(720)
        outer = QHBoxLayout(self)
        outer.addStretch(1)
        outer.addWidget(box, 4)
        outer.addStretch(1)

    def set_recent(self, paths: list[str]) -> None:
        self.recent.clear()
        self.recent.addItems(paths)
