"""Helpers for the app tests (tests/test_app_*.py): windows that are always shut down, synthetic
mouse input, pixel checks. The fixtures live in ``app_fixtures`` (loaded with ``pytest_plugins``).

A window that loaded a folder is shared by a test module (loading is the slow part); every
window's background tasks are cancelled and waited for in teardown, so no QThread outlives a test.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage, QMouseEvent, QWheelEvent
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.timeline.timeline_view import TimelineView


def make_window() -> MainWindow:
    w = MainWindow(restore_layout=False, theme="light")
    w.resize(1600, 1000)
    w.show()
    return w


def close_window(w: MainWindow) -> None:
    w.shutdown()
    assert not w.is_loading
    w.close()
    w.deleteLater()
    QApplication.processEvents()


def wait_loaded(w: MainWindow, timeout_s: float = 90.0) -> None:
    """Process events until the window's current load and the what-if runs it started (the
    baseline replay) finished (module fixtures have no qtbot)."""
    end = time.monotonic() + timeout_s
    while (w.is_loading or w.workbench.runner.busy) and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    QApplication.processEvents()
    assert not w.is_loading, "load did not finish in time"
    assert not w.workbench.runner.busy, "the what-if runs did not finish in time"


def open_in_window(qapp, path: str | Path) -> MainWindow:  # type: ignore[no-untyped-def]
    w = make_window()
    w.open_path(path)
    wait_loaded(w)
    assert w.loaded is not None, w.last_error
    w.timeline.canvas.grab()  # one paint, so frames and first-paint timings exist
    return w


# ---------------------------------------------------------------- input helpers


def to_viewport(view: TimelineView, x_ms: float, row: float) -> QPoint:
    scene = view.view_box.mapViewToScene(QPointF(x_ms, row))
    return view.canvas.mapFromScene(scene)


def send_mouse(
    widget,
    kind: QEvent.Type,
    pos: QPoint,
    button=Qt.MouseButton.LeftButton,
    buttons=None,
    mods=Qt.KeyboardModifier.NoModifier,
):  # type: ignore[no-untyped-def]
    if buttons is None:
        buttons = Qt.MouseButton.NoButton if kind == QEvent.Type.MouseButtonRelease else button
    if kind == QEvent.Type.MouseMove:
        _pace_move()
    ev = QMouseEvent(kind, QPointF(pos), QPointF(widget.mapToGlobal(pos)), button, buttons, mods)
    QApplication.sendEvent(widget, ev)


_last_move = [0.0]  # perf_counter of the last synthetic mouse move


def _pace_move() -> None:
    """Wait until pyqtgraph takes the next mouse move: its scenes drop moves that come sooner than
    1/``mouseRateLimit`` after the last one they took (100 a second by default), and a drag whose
    every move was dropped ends as a click. A real mouse is paced by its hardware; synthetic moves
    sent back to back were not, so whether a drag registered depended on how long the work before
    it happened to take."""
    rate = pg.getConfigOption("mouseRateLimit")
    if rate and rate > 0:
        wait = _last_move[0] + 1.0 / rate + 0.002 - time.perf_counter()  # pyqtgraph counts whole ms
        if wait > 0:
            time.sleep(wait)
    _last_move[0] = time.perf_counter()


def drag(
    view: TimelineView, a: QPoint, b: QPoint, mods=Qt.KeyboardModifier.NoModifier, steps: int = 6
) -> None:  # type: ignore[no-untyped-def]
    vp = view.canvas.viewport()
    send_mouse(vp, QEvent.Type.MouseButtonPress, a, mods=mods)
    for k in range(1, steps + 1):
        p = QPoint(a.x() + (b.x() - a.x()) * k // steps, a.y() + (b.y() - a.y()) * k // steps)
        send_mouse(
            vp,
            QEvent.Type.MouseMove,
            p,
            button=Qt.MouseButton.NoButton,
            buttons=Qt.MouseButton.LeftButton,
            mods=mods,
        )
    send_mouse(vp, QEvent.Type.MouseButtonRelease, b, mods=mods)
    QApplication.processEvents()


def click(view: TimelineView, pos: QPoint) -> None:
    vp = view.canvas.viewport()
    send_mouse(vp, QEvent.Type.MouseButtonPress, pos)
    send_mouse(vp, QEvent.Type.MouseButtonRelease, pos)
    QApplication.processEvents()


def hover(view: TimelineView, pos: QPoint) -> None:
    send_mouse(
        view.canvas.viewport(),
        QEvent.Type.MouseMove,
        pos,
        button=Qt.MouseButton.NoButton,
        buttons=Qt.MouseButton.NoButton,
    )
    QApplication.processEvents()


def wheel(view: TimelineView, pos: QPoint, clicks: float, mods=Qt.KeyboardModifier.NoModifier) -> None:  # type: ignore[no-untyped-def]
    vp = view.canvas.viewport()
    ev = QWheelEvent(
        QPointF(pos),
        QPointF(vp.mapToGlobal(pos)),
        QPoint(0, 0),
        QPoint(0, int(120 * clicks)),
        Qt.MouseButton.NoButton,
        mods,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(vp, ev)
    QApplication.processEvents()


def color_pixels(image: QImage, color: str | QColor, tolerance: int = 12) -> int:
    """How many pixels of ``image`` are within ``tolerance`` of ``color`` (per channel)."""
    img = image.convertToFormat(QImage.Format.Format_RGB32)
    w, h = img.width(), img.height()
    arr = np.frombuffer(img.constBits(), np.uint8, img.bytesPerLine() * h).reshape(h, img.bytesPerLine())
    px = arr[:, : w * 4].reshape(h, w, 4)
    c = QColor(color)
    bgr = np.array([c.blue(), c.green(), c.red()], np.int16)
    diff = np.abs(px[:, :, :3].astype(np.int16) - bgr).max(axis=2)
    return int((diff <= tolerance).sum())
