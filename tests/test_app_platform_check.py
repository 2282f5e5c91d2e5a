"""Starting on a desktop where Qt cannot: the pre-flight platform check and ``lumos --doctor``.

The missing library is made on purpose: a copy of PySide6's own xcb plugin whose DT_NEEDED entry
for libxcb-icccm.so.4 is renamed to a library no system has, given to Qt through its own
``QT_QPA_PLATFORM_PLUGIN_PATH``. Without the check, Qt aborts on it exactly as on a machine without
libxcb-icccm4 (Qt's abort text names libxcb-cursor0, which is present).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from app import elf_needs, platform_check
from app.platform_check import EXIT_NO_PLATFORM, check, platform_candidates
from app.platform_packages import PACKAGES, install_commands

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF/X11 checks are for Linux")

REAL = "libxcb-icccm.so.4"
FAKE = "libxcb-lumos.so.4"  # same length, so the string table keeps its layout


def qt() -> Path:
    found = platform_check.qt_dir()
    assert found is not None
    return found


@pytest.fixture
def broken_plugin_dir(tmp_path: Path) -> Path:
    """A platforms/ folder whose xcb plugin needs a library that exists nowhere."""
    src = qt() / "plugins" / "platforms" / "libqxcb.so"
    data = src.read_bytes()
    assert REAL.encode() in data
    folder = tmp_path / "platforms"
    folder.mkdir()
    (folder / "libqxcb.so").write_bytes(data.replace(REAL.encode() + b"\0", FAKE.encode() + b"\0"))
    return folder


def lumos(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "XDG_SESSION_TYPE")}
    base["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=base | env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_needed_libraries_are_read_from_the_plugin_itself() -> None:
    plugin = qt() / "plugins" / "platforms" / "libqxcb.so"
    names = elf_needs.needed(plugin)
    assert names is not None
    assert {"libQt6XcbQpa.so.6", "libxcb.so.1", REAL} <= set(names)
    assert elf_needs.needed(REPO / "README.md") is None
    if shutil.which("ldd"):  # the dynamic loader's own answer, where ldd exists
        ldd = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=30).stdout
        not_found = {line.split()[0] for line in ldd.splitlines() if "not found" in line}
        assert set(elf_needs.missing_libraries([plugin], [qt() / "lib"])) == not_found


def test_demo_under_x_without_the_library_says_what_to_install(
    broken_plugin_dir: Path, tmp_path: Path
) -> None:
    env = {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0", "QT_QPA_PLATFORM_PLUGIN_PATH": str(broken_plugin_dir)}
    out = lumos("--demo", env=env, tmp_path=tmp_path)
    assert out.returncode == EXIT_NO_PLATFORM, out.stderr
    err = out.stderr
    assert FAKE in err and "cannot open a window" in err
    assert "Debian/Ubuntu" in err and "apt install" in err  # the whole X11 set, with the packages
    assert "QT_QPA_PLATFORM=wayland" in err and "--screenshot" in err
    assert "lumos inspect" in err and "needs no display" in err
    assert "Reinstalling the application" not in err  # Qt never got to abort
    assert "Traceback" not in err


def test_known_libraries_get_package_names_per_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without libxcb-icccm4 and libxcb-keysyms1 (as the issue's fresh Debian)."""
    absent = {REAL, "libxcb-keysyms.so.1"}
    real_error = elf_needs.loader_error
    monkeypatch.setattr(
        elf_needs,
        "loader_error",
        lambda s: f"{s}: cannot open shared object file" if s in absent else real_error(s),
    )
    monkeypatch.setattr(platform_check, "loader_error", elf_needs.loader_error)
    report = check({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"})
    assert not report.ok and set(report.missing) == absent
    msg = report.message()
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in msg
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms" in msg
    assert "sudo pacman -S xcb-util-wm xcb-util-keysyms" in msg
    assert "libxcb-cursor0" in msg  # the full set, so that one install is enough


def test_platform_order_follows_qt() -> None:
    assert platform_candidates({}) == ["xcb"]
    assert platform_candidates({"XDG_SESSION_TYPE": "wayland"}) == ["wayland", "xcb"]
    assert platform_candidates({"QT_QPA_PLATFORM": "offscreen:fontengine=freetype;xcb"}) == [
        "offscreen",
        "xcb",
    ]


def test_no_display_and_offscreen() -> None:
    report = check({"QT_QPA_PLATFORM": "xcb"})
    assert not report.ok and "DISPLAY is not set" in report.message()
    assert check({"QT_QPA_PLATFORM": "offscreen"}).ok
    assert "no Wayland compositor" in (
        check({"QT_QPA_PLATFORM": "wayland", "XDG_RUNTIME_DIR": "/nonexistent"}).message()
    )


def test_unknown_library_still_named() -> None:
    lines = install_commands(["libxcb-icccm.so.4", "libweird.so.7"])
    assert any("libweird.so.7" in line and line.startswith("other:") for line in lines)
    assert all(len(v) == 3 for v in PACKAGES.values())


def test_doctor_reports_versions_platform_cache_and_gpus(tmp_path: Path) -> None:
    out = lumos("--doctor", env={"QT_QPA_PLATFORM": "offscreen"}, tmp_path=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for label in ("python", "PySide6", "pyqtgraph", "numpy", "ray", "cache", "GPU profiles"):
        assert f"\n{label}" in "\n" + text, label
    assert "Qt start        ok: platform offscreen: started" in text
    assert "H100" in text and os.environ["LUMOS_CACHE_DIR"] in text


def test_doctor_works_where_qt_cannot_start(broken_plugin_dir: Path, tmp_path: Path) -> None:
    env = {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0", "QT_QPA_PLATFORM_PLUGIN_PATH": str(broken_plugin_dir)}
    out = lumos("doctor", env=env, tmp_path=tmp_path)
    assert out.returncode == EXIT_NO_PLATFORM
    assert FAKE in out.stdout and "PySide6" in out.stdout and "GPU profiles" in out.stdout
    assert "Traceback" not in out.stderr
