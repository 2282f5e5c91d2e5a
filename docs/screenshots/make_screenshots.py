"""Make the README's screenshots of issue 28's headlines (offscreen Qt; run from the repository root):

    python docs/screenshots/make_screenshots.py SYNTH_SMALL SYNTH_LARGE NANOGPT

SYNTH_SMALL: a SYNTHETIC job (``lumos synth --model custom --layers 24 --hidden 1024 --ffn 4096
--heads 16 --seq 1024 --tp 1 --pp 1 --dp 2 --microbatches 8 --micro-batch 2``), SYNTH_LARGE a
128-rank one, NANOGPT the real ../shared/traces/h100-nanogpt-8rank. Synthetic numbers are Lumos's
own cost models: the pictures show the widgets, not accuracy. ``--diff`` alone makes only the Diff
pane's picture (recorded CPU GPT runs from tests/data).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.main_window import MainWindow  # noqa: E402

OUT = Path(__file__).resolve().parent


def spin(until, timeout_s: float = 300.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        QApplication.processEvents()
        if until():
            return True
        time.sleep(0.01)
    return bool(until())


def idle(w: MainWindow) -> None:
    assert spin(lambda: not w.is_loading and not w.workbench.runner.busy), "did not finish"
    QApplication.processEvents()


def save(widget: QWidget, name: str, width: int | None = None) -> None:
    img = widget.grab().toImage()
    if width and img.width() > width:
        img = img.scaledToWidth(width, Qt.TransformationMode.SmoothTransformation)
    img.save(str(OUT / name))
    print("wrote", OUT / name, img.width(), "x", img.height())


def window() -> MainWindow:
    w = MainWindow(restore_layout=False, theme="light")
    w.resize(1400, 860)
    w.show()
    return w


def scenario_list(folder: str) -> None:
    w = window()
    w.open_path(folder)
    idle(w)
    wb = w.workbench
    for changes in ({"microbatches": 16}, {"microbatches": 4}, {"pp": 2, "layers": 12}, {"gpu": "B200"}):
        wb.request_estimate(changes)
        idle(w)
    sl = wb.scenario_list
    sl.resize(760, 190)
    for c in range(sl.tree.columnCount()):
        sl.tree.resizeColumnToContents(c)
    save(sl, "scenarios-ranked-by-throughput.png")
    w.shutdown()


def cpu_paced(folder: str) -> None:
    w = window()
    w.open_path(folder)
    idle(w)
    wb = w.workbench
    wb.request_estimate({"dp": 16})
    idle(w)
    pane = wb.prediction.top_scroll
    pane.resize(900, 360)
    save(pane, "cpu-paced-banner.png")
    w.shutdown()


def progress(folder: str) -> None:
    w = window()
    w.resize(1200, 700)
    w.open_path(folder)
    assert spin(lambda: "files" in w.status_label.text() and w.progress.value() > 300, 120)
    save(w, "progress-opening-a-job.png", 900)
    idle(w)
    w.shutdown()


def diff_pane() -> None:
    """The Diff pane: the recorded CPU GPT base run against its hidden-512 twin (tests/data)."""
    w = window()
    w.open_path(str(REPO / "tests/data/cpu-gpt/base"))
    idle(w)
    mc = w.workbench.measured_compare
    mc.compare_with(REPO / "tests/data/cpu-gpt/hidden512")
    assert spin(lambda: not mc.busy and mc.diff is not None), "no diff"
    mc.dock.setFloating(True)  # the pane alone, at a readable size
    mc.dock.resize(760, 560)
    QApplication.processEvents()
    save(mc.dock, "diff-pane.png")
    w.shutdown()


def main() -> None:
    app = QApplication.instance() or QApplication([])  # noqa: F841
    # a settings folder of its own: no one's recent folders in the pictures
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tempfile.mkdtemp())
    if sys.argv[1:] == ["--diff"]:  # only the picture that needs no generated job
        diff_pane()
        return
    small, large, nanogpt = sys.argv[1:4]
    progress(large)
    scenario_list(small)
    cpu_paced(nanogpt)
    diff_pane()


if __name__ == "__main__":
    main()
