"""The `lumos` entry point: help, and `--screenshot` rendering offscreen (demo, a real folder, errors)."""

from __future__ import annotations

from app_helpers import color_pixels
from conftest import needs_shared, run_lumos, shared
from PySide6.QtGui import QImage

from app.theme import FAMILY_HEX
from lumos_core.trace.kernel_families import Family

pytest_plugins = ["app_fixtures"]  # window, isolated QSettings


def test_help_lists_app_options_and_engine_commands(tmp_path) -> None:
    out = run_lumos("--help", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--screenshot" in out.stdout and "--demo" in out.stdout
    assert "lumos inspect" in out.stdout and "engine commands" in out.stdout


def test_demo_screenshot_renders_lanes_offscreen(tmp_path) -> None:
    png = tmp_path / "demo.png"
    out = run_lumos(
        "--demo", "--iteration", "2", "--screenshot", str(png), "--size", "1400x900", tmp_path=tmp_path
    )
    assert out.returncode == 0, out.stderr
    img = QImage(str(png))
    assert (img.width(), img.height()) == (1400, 900)
    assert color_pixels(img, FAMILY_HEX[Family.GEMM]) > 1000
    assert color_pixels(img, FAMILY_HEX[Family.NCCL_ALL_REDUCE]) > 100


@needs_shared
def test_folder_screenshot_with_timings(tmp_path) -> None:
    png = tmp_path / "nanogpt.png"
    out = run_lumos(
        str(shared("h100-nanogpt-8rank")), "--screenshot", str(png), "--timings", tmp_path=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "first paint after" in out.stderr
    img = QImage(str(png))
    assert color_pixels(img, FAMILY_HEX[Family.NCCL_REDUCE_SCATTER]) > 300
    assert color_pixels(img, FAMILY_HEX[Family.GEMM]) > 3000


def test_unloadable_path_saves_the_error_and_exits_1(tmp_path) -> None:
    png = tmp_path / "error.png"
    out = run_lumos(str(tmp_path / "missing"), "--screenshot", str(png), tmp_path=tmp_path)
    assert out.returncode == 1
    assert "no such file or folder" in out.stderr
    assert png.is_file()
