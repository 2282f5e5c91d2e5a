"""Status-bar labels shorten long text with "…" (whole text in the tooltip) instead of being cut."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.elided_label import ElidedLabel

LONG = "8 rank(s), 35,824 events, loaded in 0.61 s · SYNTHETIC job (lumos synth): its times are Lumos's own models"


def test_a_narrow_label_elides_and_keeps_the_whole_text(qtbot) -> None:
    label = ElidedLabel(LONG)
    qtbot.addWidget(label)
    label.resize(200, 20)
    label.show()
    shown = QLabel.text(label)
    assert shown.endswith("…") and len(shown) < len(LONG)
    assert label.fontMetrics().horizontalAdvance(shown) <= 200
    assert label.text() == LONG and label.toolTip() == LONG
    assert label.minimumSizeHint().width() < 100  # it never forces the window wider


def test_a_wide_label_shows_everything_without_a_tooltip(qtbot) -> None:
    label = ElidedLabel("short")
    qtbot.addWidget(label)
    label.resize(400, 20)
    label.show()
    assert QLabel.text(label) == "short" and label.toolTip() == ""
    label.setText(LONG)
    label.resize(label.sizeHint())
    assert QLabel.text(label) == LONG
