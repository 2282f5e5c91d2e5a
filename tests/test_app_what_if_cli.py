"""`lumos --estimate/--replay/--session` with `--screenshot`: the predicted overlay rendered
offscreen, on the demo job (generated, no shared traces needed)."""

from __future__ import annotations

import orjson
from app_helpers import color_pixels
from conftest import run_lumos
from PySide6.QtGui import QImage

from app.theme import FAMILY_HEX
from app.timeline.timeline_view import PREDICTED_LABEL_COLOR
from lumos_core.trace.kernel_families import Family


def test_demo_estimate_screenshot_draws_the_overlay(tmp_path) -> None:
    png = tmp_path / "dp16.png"
    out = run_lumos(
        "--demo", "--estimate", "dp=16", "--screenshot", str(png), "--size", "1500x950", tmp_path=tmp_path
    )
    assert out.returncode == 0, out.stderr
    img = QImage(str(png))
    assert (img.width(), img.height()) == (1500, 950)
    # paired rows: the predicted rows' labels are drawn in their own colour, below measured rows
    assert color_pixels(img, PREDICTED_LABEL_COLOR["light"], tolerance=40) > 200
    assert color_pixels(img, FAMILY_HEX[Family.GEMM]) > 1000


def test_session_and_overlay_options(tmp_path) -> None:
    session = tmp_path / "demo.lumos.json"
    session.write_bytes(
        orjson.dumps(
            {
                "format": "lumos-session",
                "version": 1,
                "trace": {"demo": True},
                "scenarios": [
                    {"name": "baseline replay", "kind": "replay"},
                    {"name": "faster GPUs", "changes": {"gpu": "B200"}},
                ],
                "view": {"selected": "faster GPUs", "overlay": "ghost"},
            }
        )
    )
    png = tmp_path / "session.png"
    out = run_lumos(
        "--session", str(session), "--screenshot", str(png), "--size", "1400x900", tmp_path=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert QImage(str(png)).width() == 1400


def test_bad_what_if_options_exit_2(tmp_path) -> None:
    out = run_lumos(
        "--demo", "--estimate", "dq=16", "--screenshot", str(tmp_path / "x.png"), tmp_path=tmp_path
    )
    assert out.returncode == 2 and "unknown knob 'dq'" in out.stderr
    out = run_lumos("--demo", "--session", str(tmp_path / "s.json"), tmp_path=tmp_path)
    assert out.returncode == 2 and "--session opens its own traces" in out.stderr
    out = run_lumos(
        "--session",
        str(tmp_path / "missing.json"),
        "--screenshot",
        str(tmp_path / "y.png"),
        tmp_path=tmp_path,
    )
    assert out.returncode == 1 and "no such session file" in out.stderr


def test_help_lists_the_what_if_options(tmp_path) -> None:
    out = run_lumos("--help", tmp_path=tmp_path)
    assert out.returncode == 0
    assert (
        "--estimate KNOB=VALUE" in out.stdout and "--session FILE" in out.stdout and "--overlay" in out.stdout
    )
