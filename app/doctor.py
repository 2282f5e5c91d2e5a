"""``lumos --doctor`` (also ``lumos doctor``): what a user pastes into a bug report.

Versions (Python, PySide6/Qt, pyqtgraph, numpy, Ray), the Qt platform plugin that would be used and
whether it loads, the cache folder, its size and its cap, and the GPU profiles Lumos knows. It must work on
exactly the machines where the app does not start, so Qt is only imported inside ``try`` and the
real start of Qt happens in a child process (``--platform-probe``) whose abort cannot take the
report down with it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.platform_check import EXIT_NO_PLATFORM, PlatformReport, check

if TYPE_CHECKING:
    from lumos_core.api.loading import CacheConfig

PROBE_FLAG = "--platform-probe"
PROBE_TIMEOUT_S = 30
ENV_SHOWN = (
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_SESSION_TYPE",
    "QT_QPA_PLATFORM",
    "QT_SCALE_FACTOR",
    "LUMOS_CACHE_DIR",
    "LUMOS_CACHE_MAX",
)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _qt_versions() -> str:
    try:
        import PySide6
        from PySide6 import QtCore
    except Exception as exc:  # a broken Qt is what the doctor is for: report it, do not die
        return f"cannot import: {exc}"
    return f"{PySide6.__version__} (Qt {QtCore.qVersion()})"


def _cache_config() -> CacheConfig:
    """The app's cache configuration (its saved cap needs Qt's settings: without Qt, the default)."""
    try:
        from app.settings import cache_config

        return cache_config()
    except Exception:  # no usable Qt: the doctor still reports the cache
        from lumos_core.api.loading import CacheConfig

        return CacheConfig.resolve()


def _cache_line() -> str:
    from lumos_core.api.loading import cache_info, format_size

    config = _cache_config()
    d = cache_info(config)
    where = f"{d['location']}" + ("" if d["exists"] else " (not created yet)")
    return (
        f"{where} ({format_size(d['bytes'])} in {d['entries']} entries"
        f"{', ' + str(d['stale_entries']) + ' stale' if d['stale_entries'] else ''}); cap {d['cap']}"
    )


def _gpus_line() -> str:
    from lumos_core.api.knobs import GPUS

    return ", ".join(f"{name} ({p.device_name})" for name, p in GPUS.items())


def probe_command() -> list[str]:
    """How to start this same Lumos as the platform probe (a frozen app is its own interpreter)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, PROBE_FLAG]
    return [sys.executable, "-m", "app", PROBE_FLAG]


def run_probe() -> int:
    """Child process: start Qt for real and print what it got (or let Qt abort with its message)."""
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication([sys.argv[0] if sys.argv else "lumos"])
    screen = app.primaryScreen()
    if screen is None:
        print(f"platform {app.platformName()}: started, but no screen")
        return 1
    g = screen.geometry()
    print(
        f"platform {app.platformName()}: started; screen {g.width()}x{g.height()} "
        f"(device pixel ratio {screen.devicePixelRatio():g}, {screen.logicalDotsPerInch():.0f} dpi)"
    )
    return 0


def probe() -> tuple[bool, str]:
    """Start Qt in a child process: (started, what it printed or its last error lines)."""
    env = {**os.environ, "LUMOS_SKIP_PLATFORM_CHECK": "1"}
    try:
        out = subprocess.run(
            probe_command(), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        return False, f"Qt did not start within {PROBE_TIMEOUT_S} s"
    except OSError as exc:
        return False, f"could not run the probe: {exc}"
    if out.returncode == 0:
        return True, out.stdout.strip()
    tail = [line for line in (out.stderr + out.stdout).strip().splitlines() if line.strip()][-4:]
    return False, f"exit {out.returncode}: " + " | ".join(tail)


def _platform_lines(report: PlatformReport) -> list[str]:
    names = ", ".join(c.name for c in report.candidates)
    lines = [f"Qt will try     {names}" + ("" if report.checked else " (not checked on this system)")]
    for c in report.candidates:
        state = "usable" if c.problem is None else c.problem
        lines.append(f"  {c.name:<13} {state}")
        if c.detail:
            lines.append(f"  {'':<13} {c.detail}")
    return lines


def report_lines(with_probe: bool = True) -> tuple[list[str], bool]:
    """The report, and whether a window can open here."""
    lines = [
        f"lumos           {_version('lumos')} ({'frozen app ' + sys.executable if getattr(sys, 'frozen', False) else Path(__file__).resolve().parent.parent})",
        f"python          {platform.python_version()} ({sys.executable})",
        f"system          {platform.platform()}",
        f"PySide6         {_qt_versions()}",
        f"pyqtgraph       {_version('pyqtgraph')}",
        f"numpy           {_version('numpy')}",
        f"ray             {_version('ray') if importlib.util.find_spec('ray') else 'not installed (lumos sweep --engine local still works)'}",
        "environment     " + " ".join(f"{k}={os.environ.get(k, '')!r}" for k in ENV_SHOWN),
    ]
    report = check()
    lines += _platform_lines(report)
    ok = report.ok
    if with_probe and ok:
        started, text = probe()
        lines.append(f"Qt start        {'ok' if started else 'FAILED'}: {text}")
        ok = started
    elif not ok:
        lines.append("Qt start        not attempted (see above); fix:")
        lines += ["  " + line for line in report.message().splitlines()[1:]]
    try:
        lines.append(f"cache           {_cache_line()}")
        lines.append(f"GPU profiles    {_gpus_line()}")
    except Exception as exc:
        lines.append(f"lumos_core      cannot import: {exc}")
    return lines, ok


def run_doctor() -> int:
    lines, ok = report_lines()
    print("\n".join(lines))
    return 0 if ok else EXIT_NO_PLATFORM
