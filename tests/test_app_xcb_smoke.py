"""The app on a real X server (Xvfb) with Qt's xcb platform, at scale factor 1 and 2.

Every other app test runs on Qt's offscreen platform, which cannot show what a desktop does: a
plugin that does not load, input that never reaches the timeline, a window drawn differently from
``widget.grab()``. Here ``tests/xcb_smoke_driver.py`` runs the app in a child process on its own
Xvfb display: the window opens on the demo, a real pointer click and key presses (sent through the
X server with xdotool) change the view, a what-if runs and its overlay is drawn, a folder opens, and
Ctrl+Q closes the window with no worker thread left. Checks are made on screenshots of the X screen.
The screenshots are kept under build/test-artifacts/xcb-smoke/ (listed at the end of the run).

Skips, naming the reason, where Xvfb, xdotool, ImageMagick/xwd or Qt's xcb libraries are missing
(``.ci/run`` installs them); the offscreen suite is unaffected.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from app_helpers import color_pixels
from conftest import REPO, add_artifact, artifact_dir
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage

from app.platform_check import check
from app.theme import FAMILY_HEX
from lumos_core.trace.kernel_families import Family

SCREEN = (2560, 1700)  # holds the 1200x760 window at a scale factor of 2
DRIVER = REPO / "tests" / "xcb_smoke_driver.py"
RESULTS: dict[int, dict] = {}


def unavailable_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the xcb smoke test runs on Linux only"
    for tool, package in (("Xvfb", "xvfb"), ("xdotool", "xdotool")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian/Ubuntu: apt install {package}; .ci/run installs it)"
    if shutil.which("import") is None and not (shutil.which("xwd") and shutil.which("convert")):
        return "no screenshot tool: ImageMagick's import, or xwd + convert (apt install imagemagick x11-apps)"
    report = check({"QT_QPA_PLATFORM": "xcb"})
    if report.missing:
        return (
            f"Qt's xcb platform cannot load here: missing {', '.join(report.missing)} (.ci/run installs them)"
        )
    return None


@pytest.fixture(scope="module")
def xvfb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    log = (tmp_path_factory.mktemp("xvfb") / "xvfb.log").open("w+b")
    read_fd, write_fd = os.pipe()
    # -displayfd: Xvfb picks a free display number itself and writes it once it accepts clients
    proc = subprocess.Popen(
        [
            "Xvfb",
            "-displayfd",
            str(write_fd),
            "-screen",
            "0",
            f"{SCREEN[0]}x{SCREEN[1]}x24",
            "-nolisten",
            "tcp",
        ],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 20)
        number = os.read(read_fd, 64).decode().strip() if ready else ""
        if not number:
            proc.kill()
            proc.wait(10)
            log.seek(0)
            err = log.read().decode(errors="replace")[-400:]
            pytest.skip(f"Xvfb did not start: {err or 'no display number within 20 s'}")
        yield f":{number}"
    finally:
        os.close(read_fd)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()


LARGE_RANKS = 64


@pytest.fixture(scope="module")
def large_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SYNTHETIC 64-rank job (lumos synth), parsed cold (the session's cache has never seen it),
    for the progress a big job shows while it opens. (At 128 ranks a native thread named after a
    worker outlives the window on the X server; not yet understood, see the smoke driver.)"""
    from lumos_core.synth.generate import synthesize
    from lumos_core.synth.models import ModelSpec, SynthConfig

    model = ModelSpec("smoke", layers=4, hidden=512, ffn=2048, heads=8, seq=512, vocab=32000)
    out = tmp_path_factory.mktemp("large") / f"synth-{LARGE_RANKS}"
    synthesize(SynthConfig(model=model, tp=2, pp=2, dp=LARGE_RANKS // 4, microbatches=4, iterations=2), out)
    return out


def run_driver(display: str, scale: int, tmp_path: Path, large: Path | None = None) -> dict:
    out = artifact_dir("xcb-smoke", f"scale{scale}")
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "XDG_SESSION_TYPE")}
    env |= {
        "DISPLAY": display,
        "QT_QPA_PLATFORM": "xcb",
        "QT_SCALE_FACTOR": str(scale),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "LUMOS_CACHE_DIR": os.environ["LUMOS_CACHE_DIR"],
        **({"LUMOS_SMOKE_LARGE_JOB": str(large)} if large is not None else {}),
    }
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
    )
    result_file = out / "result.json"
    assert proc.returncode == 0 and result_file.is_file(), (
        f"driver failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    )
    add_artifact(f"xcb smoke test at scale {scale}: screenshots of the X screen in {out}")
    return json.loads(result_file.read_text())


def window_region(result: dict) -> QRect:
    x, y, w, h = result["window"]["frame_logical"]
    dpr = result["window"]["dpr"]
    return QRect(round(x * dpr), round(y * dpr), round(w * dpr), round(h * dpr))


def changed_fraction(a: QImage, b: QImage, region: QRect) -> float:
    def pixels(img: QImage) -> np.ndarray:
        img = img.copy(region).convertToFormat(QImage.Format.Format_RGB32)
        arr = np.frombuffer(img.constBits(), np.uint8, img.bytesPerLine() * img.height())
        return arr.reshape(img.height(), img.bytesPerLine())[:, : img.width() * 4].copy()  # img goes away

    return float((pixels(a) != pixels(b)).any(axis=1).mean()) if region.height() else 0.0


@pytest.mark.parametrize("scale", [1, 2])
def test_app_on_a_real_x_server(xvfb: str, scale: int, tmp_path: Path, large_job: Path) -> None:
    r = run_driver(xvfb, scale, tmp_path, large_job)
    RESULTS[scale] = r
    steps = r["steps"]
    assert r["platform"] == "xcb"
    win = r["window"]
    assert win["exposed"] and win["dpr"] == scale
    region = window_region(r)
    assert region.right() < SCREEN[0] and region.bottom() < SCREEN[1], f"window off screen: {region}"

    demo = steps["demo"]
    assert demo["loaded"] and demo["baseline_idle"] and demo["ranks"] == 8, demo
    # the default view after the automatic baseline replay: the measured colours, the replay's match
    assert demo["shown_mode"] == "differences" and "matches the measured timeline within" in demo["status"]
    for name in ("click", "W", "S", "D", "A", "F", "0", "]", "]]", "["):
        assert steps[name]["ok"], f"{name}: {steps[name]}"
    what_if = steps["what_if"]
    assert what_if["started"] and what_if["done"] and not what_if["error"], what_if
    assert what_if["shown_mode"] != "measured", what_if
    assert steps["folder"]["loaded"] and steps["folder"]["ranks"] == 2, steps["folder"]
    # a big job says what it is doing before its lanes are painted: files and bytes parsed (the
    # first run at scale 1 parses; the second reads the cache, and says so with the same counts)
    large = steps["large"]
    assert large["loaded"] and large["ranks"] == LARGE_RANKS and not large["error"], large
    counts = re.compile(rf"\b\d+ of {LARGE_RANKS} files, [\d.]+ of [\d.]+ [MG]B")
    assert any(counts.search(t) for t in large["before_first_paint"]), large["before_first_paint"]
    assert steps["quit"]["closed_by_ctrl_q"]
    # every worker thread has ended: the load's and replays' QThreads were seen running and are gone;
    # what else is left are Qt's own threads that live as long as the application (its D-Bus
    # connection, its GUI thread pool for parallel image conversion, idle for 30 s then ended)
    assert r["worker_threads_seen"], "no worker thread was seen running (the check below would be empty)"
    assert not [n for n in r["threads_at_end"] if n.startswith("lumos-")], r["threads_at_end"]
    # Qt's own threads, which live as long as the app and may start after the first snapshot
    qt_own = Counter({"QDBusConnection": 1, "QXcbEventQueue": 1, "Thread (pooled)": os.cpu_count() or 1})
    extra = Counter(r["threads_at_end"]) - Counter(r["threads_at_start"]) - qt_own
    assert not extra, r["threads_at_end"]
    assert r["python_threads_at_end"] == ["MainThread"], r["python_threads_at_end"]
    assert r["clipped"] == [], r["clipped"]

    shots = {name: QImage(path) for name, path in r["screenshots"].items()}
    for name, img in shots.items():
        assert (img.width(), img.height()) == SCREEN, name
    demo_window = shots["demo"].copy(region)
    area = scale * scale
    # the measured timeline in its family colours, as the X server shows it
    assert color_pixels(demo_window, FAMILY_HEX[Family.GEMM]) > 2000 * area
    assert (
        color_pixels(demo_window, FAMILY_HEX[Family.NCCL_ALL_REDUCE])
        + color_pixels(demo_window, FAMILY_HEX[Family.NCCL_REDUCE_SCATTER])
        > 100 * area
    )
    # the navigation and the what-if overlay changed what is on the screen
    assert changed_fraction(shots["demo"], shots["navigated"], region) > 0.2
    assert changed_fraction(shots["navigated"], shots["what_if"], region) > 0.2
    assert changed_fraction(shots["what_if"], shots["folder"], region) > 0.2


def test_the_lumos_command_starts_on_the_x_server(xvfb: str, tmp_path: Path) -> None:
    """The launcher itself (the platform check passes, Qt's xcb plugin loads): the doctor starts Qt
    on the X server, and ``lumos --demo`` opens and renders its window there."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "QT_QPA_PLATFORM")
    }
    env |= {"DISPLAY": xvfb, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    doctor = subprocess.run(
        [sys.executable, "-m", "app", "--doctor"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "Qt start        ok: platform xcb: started; screen 2560x1700" in doctor.stdout
    png = tmp_path / "demo.png"
    run = subprocess.run(
        [sys.executable, "-m", "app", "--demo", "--screenshot", str(png), "--size", "1200x760"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    assert color_pixels(QImage(str(png)), FAMILY_HEX[Family.GEMM]) > 1000


def test_scale_factor_two_keeps_rows_and_text_in_proportion(xvfb: str) -> None:
    if 1 not in RESULTS or 2 not in RESULTS:
        pytest.skip("needs both scale factors' runs (test_app_on_a_real_x_server)")
    one, two = RESULTS[1]["steps"]["demo"], RESULTS[2]["steps"]["demo"]
    # rows are as tall in logical pixels at 2x (twice the device pixels), so lanes stay readable
    assert two["row_height_px"] == pytest.approx(2 * one["row_height_px"], rel=0.15)
    assert RESULTS[2]["window"]["frame_logical"][2:] == RESULTS[1]["window"]["frame_logical"][2:]
