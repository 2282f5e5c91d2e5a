"""Can Qt open a window here? Checked before the ``QApplication`` exists, without importing QtGui.

When Qt cannot load a platform plugin it aborts with "no Qt platform plugin could be
initialized. Reinstalling the application may fix this problem", which names neither the missing
library nor the fix (from Qt 6.5 it names libxcb-cursor0 even when another library is the one
missing). This module answers the same question first, the way Qt will: which platform plugins Qt
will try (``QT_QPA_PLATFORM``, else the session type), whether each plugin's shared libraries load
(all of them, not the first missing one), and whether its display server answers. The launcher
prints :func:`PlatformReport.message` and exits instead of letting Qt abort; ``lumos --doctor``
prints the details.

Only Linux and the other ELF systems are checked: on macOS and Windows the wheels carry everything.
Anything the check cannot decide (Qt not found, an unknown plugin) is left to Qt.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.elf_needs import loader_error, missing_libraries
from app.platform_packages import XCB_SET_DEBIAN, install_commands

EXIT_NO_PLATFORM = 3
SKIP_ENV = "LUMOS_SKIP_PLATFORM_CHECK"  # set to 1 to let Qt try anyway
WINDOWLESS = {"offscreen", "minimal", "minimalegl"}
# Qt 6.5+ loads libxcb-cursor at run time as well as linking it, so it is required even when
# a plugin build does not list it.
XCB_RUNTIME = ("libxcb-cursor.so.0",)
GUI_LIBS = ("libQt6Widgets.so.6", "libQt6Gui.so.6")
PLUGIN_FILES = {"xcb": "libqxcb.so", "wayland": "libqwayland.so", "wayland-egl": "libqwayland.so"}


@dataclass
class Candidate:
    """One platform plugin Qt will try, and why it cannot be used (``problem`` None: usable)."""

    name: str
    problem: str | None = None
    missing: list[str] = field(default_factory=list)
    detail: str = ""  # display, plugin file: for the doctor's report


@dataclass
class PlatformReport:
    candidates: list[Candidate]
    checked: bool = True  # False: nothing could be checked here (not Linux, Qt not found)
    qt_dir: Path | None = None

    @property
    def usable(self) -> Candidate | None:
        return next((c for c in self.candidates if c.problem is None), None)

    @property
    def ok(self) -> bool:
        return not self.checked or self.usable is not None

    @property
    def missing(self) -> list[str]:
        return list(dict.fromkeys(s for c in self.candidates for s in c.missing))

    def message(self) -> str:
        """The actionable text printed instead of Qt's abort (empty when a platform is usable)."""
        if self.ok:
            return ""
        lines = ["lumos: cannot open a window:"]
        for c in self.candidates:
            lines.append(f"  Qt platform {c.name!r}: {c.problem}")
        missing = self.missing
        if missing:
            lines.append("Install the missing libraries, then start lumos again:")
            lines += [f"  {line}" for line in install_commands(missing)]
            if any(c.name == "xcb" and c.missing for c in self.candidates):
                lines.append(f"  (all of Qt's X11 set at once: sudo apt install {' '.join(XCB_SET_DEBIAN)})")
        lines += [
            "Alternatives:",
            "  QT_QPA_PLATFORM=wayland lumos ...    on a Wayland desktop",
            "  lumos PATH --screenshot out.png      renders the window to a file without a display "
            "(QT_QPA_PLATFORM=offscreen)",
            "  lumos inspect|replay|estimate|sweep PATH   the command line needs no display",
            f"`lumos --doctor` prints the full report; {SKIP_ENV}=1 skips this check and lets Qt try.",
        ]
        return "\n".join(lines)


def qt_dir() -> Path | None:
    """PySide6's ``Qt`` folder (plugins/, lib/), found without importing Qt."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    if getattr(sys, "_MEIPASS", None):
        roots.append(Path(sys._MEIPASS) / "PySide6")
    return next((r / "Qt" for r in roots if (r / "Qt").is_dir()), None)


def library_dirs(qt: Path) -> list[Path]:
    """Where libraries ship with Lumos: Qt's lib folder, and in the built app (PyInstaller) the
    bundle's own folder, which holds the system libraries the build machine had."""
    dirs = [qt / "lib"]
    if getattr(sys, "_MEIPASS", None):
        dirs.append(Path(sys._MEIPASS))
    return dirs


def platform_candidates(environ: Mapping[str, str]) -> list[str]:
    """The plugins Qt tries, in order: ``QT_QPA_PLATFORM`` (``a;b``, each ``name:options``), else
    wayland then xcb in a Wayland session, else xcb (Qt 6's rule on Linux)."""
    requested = environ.get("QT_QPA_PLATFORM", "").strip()
    if requested:
        names = [part.split(":", 1)[0].strip() for part in requested.split(";")]
        return [n for n in names if n] or ["xcb"]
    if environ.get("XDG_SESSION_TYPE", "").lower() == "wayland":
        return ["wayland", "xcb"]
    return ["xcb"]


def _plugin_path(name: str, qt: Path, environ: Mapping[str, str]) -> Path | None:
    file = PLUGIN_FILES.get(name)
    if file is None:
        return None
    dirs = [Path(d) for d in environ.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if d]
    dirs.append(qt / "plugins" / "platforms")
    return next((d / file for d in dirs if (d / file).is_file()), None)


def x_server_error(display: str) -> str | None:
    """None if an X server answers on ``display`` (checked with libxcb, as Qt connects), else why."""
    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return None  # reported as a missing library instead
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)
    try:
        code = xcb.xcb_connection_has_error(conn)
    finally:
        xcb.xcb_disconnect(conn)
    if code:
        return f"no X server answers on DISPLAY={display} (is it running, and may this user connect?)"
    return None


def wayland_error(environ: Mapping[str, str]) -> str | None:
    name = environ.get("WAYLAND_DISPLAY") or "wayland-0"
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    path = Path(name) if os.path.isabs(name) else Path(runtime) / name
    if not os.path.isabs(name) and not runtime:
        return "XDG_RUNTIME_DIR is not set, so the Wayland socket cannot be found"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(path))
    except OSError:
        return f"no Wayland compositor at {path} (WAYLAND_DISPLAY={environ.get('WAYLAND_DISPLAY', '')!r})"
    return None


def _check_one(name: str, qt: Path, environ: Mapping[str, str], gui_missing: list[str]) -> Candidate:
    cand = Candidate(name)
    if name in WINDOWLESS:
        cand.detail = "draws into memory, no window (for --screenshot and tests)"
    elif name in PLUGIN_FILES:
        plugin = _plugin_path(name, qt, environ)
        if plugin is None:
            cand.problem = f"the plugin {PLUGIN_FILES[name]} is not in {qt / 'plugins' / 'platforms'}"
            return cand
        cand.detail = str(plugin)
        cand.missing = list(gui_missing)
        for soname in missing_libraries([plugin], library_dirs(qt)):
            if soname not in cand.missing:
                cand.missing.append(soname)
        if name == "xcb":
            cand.missing += [s for s in XCB_RUNTIME if s not in cand.missing and loader_error(s)]
        problems = [f"missing system libraries: {', '.join(cand.missing)}"] if cand.missing else []
        if name == "xcb":
            display = environ.get("DISPLAY", "")
            cand.detail = f"DISPLAY={display or '(unset)'}, {plugin}"
            server = x_server_error(display) if display else "DISPLAY is not set (no X server to draw on)"
        else:
            cand.detail = f"WAYLAND_DISPLAY={environ.get('WAYLAND_DISPLAY', '(unset)')}, {plugin}"
            server = wayland_error(environ)
        problems += [server] if server else []
        cand.problem = "; ".join(problems) or None
        return cand
    else:
        cand.detail = "not checked by Lumos (left to Qt)"
    if gui_missing:
        cand.missing = list(gui_missing)
        cand.problem = f"missing system libraries: {', '.join(gui_missing)}"
    return cand


def check(environ: Mapping[str, str] | None = None) -> PlatformReport:
    """What Qt will find when it starts in this environment (cheap: ~30 ms, no Qt import)."""
    env = os.environ if environ is None else environ
    names = platform_candidates(env)
    if not sys.platform.startswith(("linux", "freebsd")):
        return PlatformReport([Candidate(n) for n in names], checked=False)
    qt = qt_dir()
    if qt is None:
        return PlatformReport([Candidate(n, detail="PySide6 not found") for n in names], checked=False)
    gui = [qt / "lib" / lib for lib in GUI_LIBS if (qt / "lib" / lib).is_file()]
    gui_missing = missing_libraries(gui, library_dirs(qt))
    return PlatformReport([_check_one(n, qt, env, gui_missing) for n in names], qt_dir=qt)


def require_platform(environ: Mapping[str, str] | None = None) -> int:
    """0 if Qt can start here (or the check is skipped), else print the message and return the exit
    code for the launcher."""
    env = os.environ if environ is None else environ
    if env.get(SKIP_ENV, "") not in ("", "0"):
        return 0
    report = check(env)
    if report.ok:
        return 0
    print(report.message(), file=sys.stderr)
    return EXIT_NO_PLATFORM
