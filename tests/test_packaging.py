"""packaging/: the PyInstaller spec, the Linux desktop entry, the app icon, and (opt-in) a real build.

The spec is executed with stand-ins for PyInstaller's spec classes, so its real logic (paths, data
files, hidden imports, excludes, per-platform icon and bundle) is checked on every run without
PyInstaller. The actual build takes minutes and needs PyInstaller: it runs only with
LUMOS_TEST_BUILD=1 (``pip install -e '.[package]'``), and then also starts the built app offscreen.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import pkgutil
import shutil
import struct
import subprocess
import sys
import time
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from lumos_core.cli import COMMANDS

PACKAGING = REPO / "packaging"
SPEC = PACKAGING / "lumos.spec"
DESKTOP = PACKAGING / "lumos.desktop"
ICONS = REPO / "resources" / "icons"


def _load_render_icons() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("render_icons", PACKAGING / "render_icons.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_icons = _load_render_icons()


# ---------------------------------------------------------------- the spec, run with stand-ins


class _Recorded:
    """Stands in for PYZ, EXE, COLLECT and BUNDLE: keeps what the spec passed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


class _Analysis(_Recorded):
    # Two entries as PyInstaller's Analysis would list them, to see the spec's filter at work.
    DATAS = [
        ("PySide6/Qt/translations/qtbase_de.qm", "/x/qtbase_de.qm", "DATA"),
        ("pyqtgraph/icons/auto.png", "/x/auto.png", "DATA"),
    ]

    def __init__(self, scripts: list[str], **kwargs: Any) -> None:
        super().__init__(scripts, **kwargs)
        self.scripts, self.pure, self.binaries = scripts, [], []
        self.datas = list(self.DATAS)


def _collect_submodules(package: str) -> list[str]:
    """What PyInstaller's collect_submodules returns, for a package of this repository."""
    module = __import__(package, fromlist=["_"])
    return [package] + [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]


def run_spec(monkeypatch: pytest.MonkeyPatch, platform: str = "linux") -> dict[str, Any]:
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = _collect_submodules  # type: ignore[attr-defined]
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "platform", platform)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "SPECPATH": str(PACKAGING),
        "Analysis": _Analysis,
        "PYZ": _Recorded,
        "EXE": _Recorded,
        "COLLECT": _Recorded,
        "BUNDLE": _Recorded,
    }
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)
    return namespace


def test_spec_entry_point_data_files_and_hidden_imports(monkeypatch) -> None:
    ns = run_spec(monkeypatch)
    a = ns["a"]
    (entry,) = a.args[0]
    assert Path(entry) == PACKAGING / "lumos_main.py" and Path(entry).is_file()
    assert str(REPO) in a.kwargs["pathex"]  # app/ and lumos_core/ come from this checkout

    datas = a.kwargs["datas"]
    assert datas, "the spec bundles no resources"
    for src, dest in datas:
        assert Path(src).is_file(), src
        assert dest == "resources/icons"  # where app/resources.py looks under sys._MEIPASS
    bundled = {Path(src).name for src, _ in datas}
    assert {f"lumos-{s}.png" for s in render_icons.PNG_SIZES} <= bundled

    hidden = set(a.kwargs["hiddenimports"])
    assert {f"lumos_core.commands.{name}" for name in COMMANDS} <= hidden
    # the compiled kernels and the compiler they need
    assert {
        "numba",
        "llvmlite",
        "lumos_core.graph.kernels",
        "lumos_core.replay.kernels",
        "lumos_core.replay.warm_up",
    } <= hidden
    excluded = set(a.kwargs["excludes"])
    assert not {"numba", "llvmlite"} & excluded

    # Qt's translations are dropped, everything else is kept.
    assert [d[0] for d in a.datas] == ["pyqtgraph/icons/auto.png"]

    exe, coll = ns["exe"], ns["coll"]
    assert exe.kwargs["name"] == "lumos" and coll.kwargs["name"] == "lumos"
    assert exe.kwargs["console"] is True  # Linux: the engine subcommands print to the terminal
    assert not exe.kwargs["upx"] and not coll.kwargs["upx"]
    assert "app" not in ns  # no macOS bundle on Linux


@pytest.mark.parametrize(
    ("platform", "icon"), [("win32", "lumos.ico"), ("darwin", "lumos.icns")], ids=["windows", "macos"]
)
def test_spec_icons_and_bundle_per_platform(monkeypatch, platform: str, icon: str) -> None:
    ns = run_spec(monkeypatch, platform)
    exe_icon = Path(ns["exe"].kwargs["icon"])
    assert exe_icon.name == icon and exe_icon.is_file()
    assert ns["exe"].kwargs["console"] is False
    if platform == "darwin":
        bundle = ns["app"].kwargs
        assert bundle["name"] == "Lumos.app" and Path(bundle["icon"]).is_file()
        assert bundle["info_plist"]["NSRequiresAquaSystemAppearance"] is False  # follows dark mode


def test_spec_excludes_no_module_the_app_imports(monkeypatch) -> None:
    """Excluding a Qt module the app needs breaks only the built app: compare with a real start."""
    excludes = run_spec(monkeypatch).get("a").kwargs["excludes"]
    code = (
        "import sys\n"
        "from app import launch, main_window, resources, theme_follow\n"
        "from app.panels import export\n"
        "import pyqtgraph\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    imported = set(out.stdout.split())
    # pyqtgraph imports QtTest inside try/except and never uses it outside its own tests.
    optional = {"PySide6.QtTest"}
    needed = [
        m for m in imported for ex in excludes if (m == ex or m.startswith(ex + ".")) and ex not in optional
    ]
    assert not needed, f"the spec excludes modules the app imports: {sorted(needed)}"


def test_entry_script_runs_the_lumos_command_line() -> None:
    out = subprocess.run(
        [sys.executable, str(PACKAGING / "lumos_main.py"), "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "--screenshot" in out.stdout and "lumos inspect" in out.stdout
    assert "freeze_support()" in (PACKAGING / "lumos_main.py").read_text()


# ---------------------------------------------------------------- Linux desktop entry

# Desktop Entry Specification 1.4: the keys an Application entry may have, and the main categories.
DESKTOP_KEYS = {
    "Type", "Version", "Name", "GenericName", "NoDisplay", "Comment", "Icon", "Hidden", "OnlyShowIn",
    "NotShowIn", "DBusActivatable", "TryExec", "Exec", "Path", "Terminal", "Actions", "MimeType",
    "Categories", "Implements", "Keywords", "StartupNotify", "StartupWMClass", "PrefersNonDefaultGPU",
    "SingleMainWindow",
}  # fmt: skip
MAIN_CATEGORIES = {
    "AudioVideo", "Audio", "Video", "Development", "Education", "Game", "Graphics", "Network",
    "Office", "Science", "Settings", "System", "Utility",
}  # fmt: skip
BOOLEAN_KEYS = {"Terminal", "StartupNotify", "NoDisplay", "Hidden", "DBusActivatable"}


def read_desktop(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(path.read_text(encoding="utf-8"))
    assert parser.sections() == ["Desktop Entry"]
    return dict(parser["Desktop Entry"])


def test_desktop_entry_keys_and_values() -> None:
    entry = read_desktop(DESKTOP)
    assert set(entry) <= DESKTOP_KEYS, set(entry) - DESKTOP_KEYS
    assert entry["Type"] == "Application" and entry["Name"] == "Lumos"
    assert entry["Version"] in {"1.0", "1.1", "1.2", "1.3", "1.4", "1.5"}
    exec_args = entry["Exec"].split()
    assert exec_args[0] == "lumos" and exec_args[1:] == ["%f"]  # one trace folder or file
    assert entry["TryExec"] == "lumos"
    assert entry["Icon"] == "lumos"  # the icon theme name that install_linux.sh installs
    for key in BOOLEAN_KEYS & set(entry):
        assert entry[key] in ("true", "false"), key
    assert entry["Categories"].endswith(";") and entry["Keywords"].endswith(";")
    categories = entry["Categories"].rstrip(";").split(";")
    assert MAIN_CATEGORIES & set(categories)
    if shutil.which("desktop-file-validate"):
        out = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
        assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="installs a Linux desktop entry")
def test_install_linux_points_the_entry_at_the_built_app(tmp_path) -> None:
    app_dir = tmp_path / "my apps" / "lumos"
    app_dir.mkdir(parents=True)
    (app_dir / "lumos").write_text("#!/bin/sh\n")
    (app_dir / "lumos").chmod(0o755)
    data = tmp_path / "data"
    out = subprocess.run(
        ["bash", str(PACKAGING / "install_linux.sh"), str(app_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_DATA_HOME": str(data)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    entry = read_desktop(data / "applications" / "lumos.desktop")
    assert entry["Exec"] == f'"{app_dir / "lumos"}" %f'
    assert entry["TryExec"] == str(app_dir / "lumos")
    for size in render_icons.PNG_SIZES:
        assert (data / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "lumos.png").is_file()
    assert (data / "icons" / "hicolor" / "scalable" / "apps" / "lumos.svg").is_file()


def test_install_linux_says_when_the_app_cannot_open_a_window(tmp_path) -> None:
    app_dir = tmp_path / "lumos"
    app_dir.mkdir()
    # stands in for the built app on a desktop without Qt's xcb libraries: what `lumos doctor` prints
    (app_dir / "lumos").write_text(
        "#!/bin/sh\n"
        "printf 'numpy           2\\nQt will try     xcb\\n  xcb  missing system libraries: libxcb-icccm.so.4\\n"
        "    Debian/Ubuntu: sudo apt install libxcb-icccm4\\ncache           /c\\n'\n"
        "exit 3\n"
    )
    (app_dir / "lumos").chmod(0o755)
    out = subprocess.run(
        ["bash", str(PACKAGING / "install_linux.sh"), str(app_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr  # the entry is installed either way
    assert "cannot open a window on this desktop" in out.stderr
    assert "sudo apt install libxcb-icccm4" in out.stderr
    assert "numpy" not in out.stderr and "cache" not in out.stderr


# ---------------------------------------------------------------- the icon


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_icons_exist_at_the_sizes_they_claim() -> None:
    for size in render_icons.PNG_SIZES:
        path = ICONS / f"lumos-{size}.png"
        assert path.is_file(), f"{path} missing: run python packaging/render_icons.py"
        assert png_size(path.read_bytes()) == (size, size), path


def test_ico_and_icns_hold_the_pngs() -> None:
    ico = (ICONS / "lumos.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind, count) == (0, 1, len(render_icons.ICO_SIZES))
    for i, size in enumerate(render_icons.ICO_SIZES):
        w, h, _, _, _, _, length, offset = struct.unpack("<BBBBHHII", ico[6 + 16 * i : 22 + 16 * i])
        assert (w or 256, h or 256) == (size, size)
        assert png_size(ico[offset : offset + length]) == (size, size)

    icns = (ICONS / "lumos.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)
    pos, found = 8, {}
    while pos < len(icns):
        kind, length = icns[pos : pos + 4], struct.unpack(">I", icns[pos + 4 : pos + 8])[0]
        found[kind] = png_size(icns[pos + 8 : pos + length])
        pos += length
    assert found == {kind: (s, s) for s, kind in render_icons.ICNS_TYPES.items()}


def test_svg_is_square_and_renders_at_every_size(qapp) -> None:
    root = ET.parse(ICONS / "lumos.svg").getroot()
    assert root.get("viewBox") == "0 0 256 256"
    from PySide6.QtGui import QImage

    for size in (16, 48):
        image = QImage.fromData(render_icons.render_png(size))
        assert (image.width(), image.height()) == (size, size)
        assert image.pixelColor(size // 2, size // 2).alpha() == 255  # the tile, not transparency
        assert image.pixelColor(0, 0).alpha() < 255  # rounded corners


def test_resources_found_in_source_tree_and_frozen_bundle(qapp, monkeypatch, tmp_path) -> None:
    from app import resources

    assert resources.resource_path("icons/lumos.svg") == ICONS / "lumos.svg"
    assert [s for s, _ in resources.icon_files()] == sorted(render_icons.PNG_SIZES)
    icon = resources.app_icon()
    assert not icon.isNull() and len(icon.availableSizes()) == len(render_icons.PNG_SIZES)

    bundle_icons = tmp_path / "resources" / "icons"
    bundle_icons.mkdir(parents=True)
    shutil.copy(ICONS / "lumos-32.png", bundle_icons)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert resources.resource_path("icons") == bundle_icons
    assert [s for s, _ in resources.icon_files()] == [32]


# ---------------------------------------------------------------- the real build (opt-in)

HAVE_PYINSTALLER = importlib.util.find_spec("PyInstaller") is not None
BUILD_REQUESTED = os.environ.get("LUMOS_TEST_BUILD") == "1"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    not (HAVE_PYINSTALLER and BUILD_REQUESTED),
    reason="the PyInstaller build takes minutes: set LUMOS_TEST_BUILD=1 with PyInstaller installed "
    "(pip install -e '.[package]')"
    + ("" if HAVE_PYINSTALLER else "; PyInstaller is not installed")
    + ("" if BUILD_REQUESTED else "; LUMOS_TEST_BUILD is not 1"),
)
def test_built_app_starts_and_takes_a_screenshot(tmp_path) -> None:
    from app_helpers import color_pixels
    from PySide6.QtGui import QImage

    from app.theme import FAMILY_HEX
    from lumos_core.trace.kernel_families import Family

    dist, work = tmp_path / "dist", tmp_path / "work"
    started = time.monotonic()
    command = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--distpath", str(dist)]
    build = subprocess.run(
        [*command, "--workpath", str(work)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1500,
    )
    assert build.returncode == 0, build.stderr[-5000:]
    build_s = time.monotonic() - started
    app_dir = dist / "lumos"
    exe = app_dir / ("lumos.exe" if sys.platform == "win32" else "lumos")
    assert exe.is_file()
    internal = app_dir / "_internal"
    assert (internal / "resources" / "icons" / "lumos-256.png").is_file()
    assert not list(internal.rglob("*.qm")), "Qt translations should be left out"
    size_mb = sum(p.stat().st_size for p in app_dir.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20
    print(f"\nbuilt {app_dir} in {build_s:.0f} s, {size_mb:.0f} MiB")

    # A fresh cache: the frozen app generates the demo job itself (lumos_core.synth, frozen).
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "LUMOS_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    png = tmp_path / "frozen.png"
    run = subprocess.run(
        [str(exe), "--demo", "--screenshot", str(png)], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    image = QImage(str(png))
    assert (image.width(), image.height()) == (1600, 1000)
    assert color_pixels(image, FAMILY_HEX[Family.GEMM]) > 1000  # the timeline was painted
    assert color_pixels(image, FAMILY_HEX[Family.NCCL_ALL_REDUCE]) > 100

    # Engine subcommands are imported by name at run time (hidden imports): run two of them.
    traces = tmp_path / "traces"
    for args in (["synth", str(traces), "--layers", "2", "--quiet"], ["inspect", str(traces)]):
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    assert "rank(s)" in out.stdout

    # the doctor starts the frozen app again as its Qt probe (--platform-probe)
    out = subprocess.run([str(exe), "doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Qt start        ok: platform offscreen" in out.stdout
