"""The app in a real window system: run by tests/test_app_xcb_smoke.py under Xvfb with Qt's xcb
platform (``python tests/xcb_smoke_driver.py OUT_DIR``), never collected by pytest itself.

Input goes through the X server (``xdotool``: XTEST key presses and pointer clicks on the real
window), and the checkpoints are photographed from the X screen itself (``import -window root``),
not from ``widget.grab()``. Each step's outcome goes to ``OUT_DIR/result.json`` for the test to
judge; this script only fails on its own when something it needs to proceed never happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPoint, QPointF
from PySide6.QtWidgets import QAbstractButton, QApplication, QLabel, QWidget

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.main_window import MainWindow  # noqa: E402

FOLDER = REPO / "tests" / "data" / "cpu-gpt" / "dp2"
WINDOW_SIZE = (1200, 760)  # logical pixels; Xvfb's screen holds it at a scale factor of 2


def spin(until, timeout_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        QApplication.processEvents()
        if until():
            return True
        time.sleep(0.01)
    QApplication.processEvents()
    return bool(until())


def settle(seconds: float = 0.3) -> None:
    spin(lambda: False, seconds)


def os_threads() -> list[str]:
    """Names of this process's OS threads (QThreads are named after their class or object)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            pass
    return sorted(names)


class Driver:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.display = os.environ["DISPLAY"]
        self.result: dict[str, Any] = {"steps": {}, "screenshots": {}}
        self.app = QApplication.instance() or QApplication(["lumos-xcb-smoke"])
        self.result["platform"] = self.app.platformName()
        self.result["threads_at_start"] = os_threads()
        self.window = MainWindow(restore_layout=False, theme="light")
        self.window.resize(*WINDOW_SIZE)

    # ------------------------------------------------------------------ the real X server
    def xdotool(self, *args: str) -> None:
        subprocess.run(["xdotool", *args], check=True, timeout=20, env=os.environ)

    def screenshot(self, name: str) -> Path:
        """The whole X screen, as the X server has it."""
        QApplication.processEvents()
        self.app.sync() if hasattr(self.app, "sync") else None
        path = self.out / f"{name}.png"
        if shutil.which("import"):
            cmd = ["import", "-display", self.display, "-window", "root", str(path)]
            subprocess.run(cmd, check=True, timeout=60)
        else:  # xwd + convert
            xwd = self.out / f"{name}.xwd"
            subprocess.run(
                ["xwd", "-root", "-silent", "-display", self.display, "-out", str(xwd)], check=True
            )
            subprocess.run(["convert", f"xwd:{xwd}", str(path)], check=True, timeout=60)
            xwd.unlink()
        self.result["screenshots"][name] = str(path)
        return path

    def native(self, widget: QWidget, pos: QPoint) -> tuple[int, int]:
        """Where ``pos`` in ``widget`` is on the X screen (device pixels)."""
        g = widget.mapToGlobal(QPointF(pos))
        dpr = widget.screen().devicePixelRatio()
        return round(g.x() * dpr), round(g.y() * dpr)

    def key(self, name: str, changed) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        tl = self.window.timeline
        before = tl.x_range()
        self.xdotool("key", "--clearmodifiers", name)
        ok = spin(lambda: changed(before, tl.x_range()), 5.0)
        settle(0.05)
        return {"before": list(before), "after": list(tl.x_range()), "ok": ok}

    # ------------------------------------------------------------------ the steps
    def open_window(self) -> None:
        w = self.window
        w.show()
        w.raise_()
        w.activateWindow()
        exposed = spin(lambda: w.windowHandle() is not None and w.windowHandle().isExposed(), 20)
        self.xdotool("windowfocus", "--sync", str(int(w.winId())))
        screen = w.screen()
        self.result["window"] = {
            "exposed": exposed,
            "dpr": screen.devicePixelRatio(),
            "screen_logical": [screen.geometry().width(), screen.geometry().height()],
            "frame_logical": [w.frameGeometry().x(), w.frameGeometry().y(), w.width(), w.height()],
        }

    def wait_idle(self, timeout_s: float = 120.0) -> bool:
        w = self.window
        return spin(lambda: not w.is_loading and not w.workbench.runner.busy, timeout_s)

    def open_demo(self) -> None:
        w = self.window
        w.open_demo()
        # the load and the baseline replay run on worker threads (QThreads named lumos-task-N)
        seen: set[str] = set()
        spin(lambda: bool(seen.update(os_threads())) or any(n.startswith("lumos-task") for n in seen), 30)
        self.result["worker_threads_seen"] = sorted(n for n in seen if n.startswith("lumos-task"))
        loaded = spin(lambda: w.loaded is not None and not w.is_loading, 180)
        idle = self.wait_idle()
        settle(0.5)
        self.result["steps"]["demo"] = {
            "loaded": loaded and w.loaded is not None,
            "baseline_idle": idle,
            "ranks": len(w.loaded.job.ranks) if w.loaded else 0,
            "status": w.workbench.last_notice,
            "shown_mode": w.timeline.shown_mode,
            "row_height_px": self.row_height_px(),
        }
        self.result["clipped"] = self.clipped_widgets()
        self.screenshot("demo")

    def row_height_px(self) -> float:
        """One timeline row's height in device pixels."""
        tl = self.window.timeline
        y0 = tl.view_box.mapViewToScene(QPointF(0, 0)).y()
        y1 = tl.view_box.mapViewToScene(QPointF(0, 1)).y()
        return abs(y1 - y0) * tl.canvas.devicePixelRatioF()

    def clipped_widgets(self) -> list[str]:
        """Visible labels and buttons narrower or lower than their text needs."""
        clipped = []
        for wdg in self.window.findChildren(QWidget):
            if not wdg.isVisibleTo(self.window) or not isinstance(wdg, QLabel | QAbstractButton):
                continue
            text = wdg.text() if hasattr(wdg, "text") else ""
            if not text or (isinstance(wdg, QLabel) and wdg.wordWrap()):
                continue
            need = wdg.minimumSizeHint()
            if wdg.width() + 1 < need.width() or wdg.height() + 1 < need.height():
                clipped.append(
                    f"{type(wdg).__name__} {text[:40]!r}: {wdg.width()}x{wdg.height()} < {need.width()}x{need.height()}"
                )
        return clipped

    def find_task(self) -> tuple[Any, QPoint] | None:
        """A task at least 6 device pixels wide near the middle of the view, and where it is."""
        tl = self.window.timeline
        x0, x1 = tl.x_range()
        y0, y1 = tl.y_range()
        vp = tl.canvas.viewport()
        for row in range(int(y0), int(y1)):
            for k in range(1, 40):
                x = x0 + (x1 - x0) * k / 40
                hit = tl.pick(x, row + 0.5, tolerance_px=0)
                if hit is None:
                    continue
                s, e = tl.event_span_ms(hit)
                if (e - s) / (x1 - x0) * vp.width() < 6:
                    continue
                scene = tl.view_box.mapViewToScene(QPointF((s + e) / 2, row + 0.5))
                return hit, tl.canvas.mapFromScene(scene)
        return None

    def navigate(self) -> None:
        tl = self.window.timeline
        steps = self.result["steps"]
        found = self.find_task()
        if found is None:
            steps["click"] = {"ok": False, "why": "no task wide enough to click"}
            return
        hit, pos = found
        x, y = self.native(tl.canvas.viewport(), pos)
        self.xdotool("mousemove", "--sync", str(x), str(y))
        self.xdotool("click", "1")
        clicked = spin(lambda: tl.selected is not None, 5)
        steps["click"] = {
            "ok": clicked and tl.selected == hit,
            "aimed": [hit.rank_index, hit.event],
            "selected": [tl.selected.rank_index, tl.selected.event] if tl.selected else None,
            "focus": type(QApplication.focusWidget()).__name__ if QApplication.focusWidget() else None,
        }
        width = lambda r: r[1] - r[0]  # noqa: E731
        steps["W"] = self.key("w", lambda a, b: width(b) < width(a) * 0.95)
        steps["S"] = self.key("s", lambda a, b: width(b) > width(a) * 1.05)
        steps["D"] = self.key(
            "d", lambda a, b: b[0] > a[0] and abs(width(b) - width(a)) < 1e-6 * width(a) + 1e-9
        )
        steps["A"] = self.key("a", lambda a, b: b[0] < a[0])
        s, e = tl.event_span_ms(hit)
        steps["F"] = self.key("f", lambda a, b: b[0] <= s and b[1] >= e and width(b) < width(a))
        steps["F"]["task"] = [s, e]
        full = tl.full_range()
        steps["0"] = self.key(
            "0", lambda a, b: b[0] <= full[0] and b[1] >= full[1] and width(b) < 1.1 * width(full)
        )
        steps["]"] = self.key("bracketright", lambda a, b: width(b) < width(a) * 0.9)
        steps["]]"] = self.key("bracketright", lambda a, b: b[0] > a[0])
        steps["["] = self.key("bracketleft", lambda a, b: b[0] < a[0])
        self.screenshot("navigated")

    def what_if(self) -> None:
        w = self.window
        wb = w.workbench
        before = len(wb.scenarios)
        started = wb.request_estimate({"dp": 16})
        done = spin(lambda: len(wb.scenarios) > before and not wb.runner.busy, 120)
        settle(0.5)
        self.result["steps"]["what_if"] = {
            "started": started,
            "done": done,
            "error": wb.last_error,
            "shown_mode": w.timeline.shown_mode,
            "status": w.statusBar().currentMessage(),
        }
        self.screenshot("what_if")

    def open_folder(self) -> None:
        w = self.window
        w.open_path(FOLDER)
        spin(lambda: w.is_loading, 5)
        loaded = spin(
            lambda: w.loaded is not None and not w.is_loading and Path(w.loaded.path) == FOLDER, 120
        )
        idle = self.wait_idle()
        settle(0.5)
        self.result["steps"]["folder"] = {
            "loaded": loaded,
            "idle": idle,
            "ranks": len(w.loaded.job.ranks) if w.loaded else 0,
            "error": w.last_error,
        }
        self.screenshot("folder")

    def open_large(self) -> None:
        """A big job (``LUMOS_SMOKE_LARGE_JOB``, made by the test): what the status bar says
        before the first paint of its lanes (files and bytes parsed, an ETA), photographed once."""
        path = os.environ.get("LUMOS_SMOKE_LARGE_JOB")
        if not path:
            return
        w = self.window
        painted: list[float] = []
        w.first_painted.connect(painted.append)
        seen: list[str] = []
        shot: list[str] = []
        set_text = w.status_label.setText

        def record(text: str) -> None:  # every status line shown before the first paint
            if not painted:
                seen.append(text)
            set_text(text)

        w.status_label.setText = record  # type: ignore[method-assign]
        t0 = time.monotonic()
        w.open_path(path)

        def watch() -> bool:
            if not painted and not shot and "files" in w.status_label.text():
                shot.append(str(self.screenshot("large_progress")))  # the progress view, on the X server
            return bool(painted) and not w.is_loading

        loaded = spin(watch, 180)
        idle = self.wait_idle()
        w.status_label.setText = set_text  # type: ignore[method-assign]
        settle(0.5)
        self.screenshot("large")
        self.result["steps"]["large"] = {
            "loaded": loaded,
            "idle": idle,
            "ranks": len(w.loaded.job.ranks) if w.loaded else 0,
            "before_first_paint": seen,
            "first_paint_s": painted[0] if painted else None,
            "seconds": time.monotonic() - t0,
            "error": w.last_error,
        }

    def quit(self) -> None:
        w = self.window
        self.xdotool("windowfocus", "--sync", str(int(w.winId())))
        self.xdotool("key", "--clearmodifiers", "ctrl+q")
        closed = spin(lambda: not w.isVisible(), 30)
        self.result["steps"]["quit"] = {"closed_by_ctrl_q": closed}
        if not closed:
            w.close()
        w.shutdown()
        w.deleteLater()
        settle(0.3)
        self.result["threads_at_end"] = os_threads()
        self.result["python_threads_at_end"] = [t.name for t in threading.enumerate()]


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    d = Driver(out)
    try:
        d.open_window()
        d.open_demo()
        d.navigate()
        d.what_if()
        d.open_folder()
        d.open_large()
    finally:
        d.quit()
        (out / "result.json").write_text(json.dumps(d.result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
