"""Label and message bugs of issue 28, each pinned: a predicted rank's header names the traced rank
its rows show; the Files pane fills its rank column and keeps "rankN" visible when it shortens a
name; a non-trace JSON's banner shows quotes, not "&#x27;"; a PNG renamed .json is called what it is,
with its file name."""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

import pytest
from app_helpers import wait_loaded
from conftest import REPO
from PySide6.QtGui import QFont, QFontMetrics, QTextDocument
from PySide6.QtWidgets import QApplication

from app.panels.rank_elide import elide_keeping_rank
from app.view_model.overlay_data import predicted_header
from lumos_core.errors import LumosError
from lumos_core.trace.loader import load_job

pytest_plugins = ["app_fixtures"]  # isolated QSettings

CPU_GPT = REPO / "tests" / "data" / "cpu-gpt"


def test_a_predicted_header_names_the_traced_rank_its_rows_show() -> None:
    """256-rank job: predicted rank 128 (standing for 128 and 192) drawn on traced rank 64's rows,
    which read "rank 64 ▸ stream 7": the header must say so."""
    head = predicted_header(128, [128, 192], 64)
    assert head.startswith("rank 128 (= ranks 128, 192)") and "traced rank 64" in head
    assert predicted_header(3, [3], 3) == "rank 3"  # the same rank: nothing to add
    assert predicted_header(0, [0, 8], 0) == "rank 0 (= ranks 0, 8)"


@pytest.mark.parametrize(
    "name",
    [
        "Baseline - 12-11 - e049e-rank0-chrome-trace.json.gz",
        "worker3_step_12.1694128201557.pt.trace.json.gz",
        "job-2025-01-01-host-a1b2c3d4e5f6-rank_117.1700000000000.pt.trace.json",
    ],
)
@pytest.mark.parametrize("width", [60, 90, 140, 220])
def test_shortened_file_names_keep_the_rank(qapp, name: str, width: int) -> None:  # type: ignore[no-untyped-def]
    fm = QFontMetrics(QFont())
    token = next(t for t in ("rank0", "worker3", "rank_117") if t in name)
    shown = elide_keeping_rank(name, fm, width)
    assert token in shown
    assert fm.horizontalAdvance(shown) <= max(width, fm.horizontalAdvance(token) + 2)
    assert elide_keeping_rank(name, fm, 10_000) == name  # room for all of it: unchanged


def test_the_files_pane_fills_its_rank_column(window) -> None:  # type: ignore[no-untyped-def]
    window.open_path(CPU_GPT / "dp2")
    wait_loaded(window)
    rows = window.summaries.files.model.rows
    loaded = [r for r in rows if r.state in ("loaded", "cached")]
    assert len(loaded) == 2 and sorted(r.rank for r in loaded) == [0, 1]
    view = window.summaries.files.view
    assert view.itemDelegateForColumn(2) is not None  # the rank-keeping elision


def _banner_plain_text(window) -> str:  # type: ignore[no-untyped-def]
    doc = QTextDocument()
    doc.setHtml(window.banner.text.text())
    return doc.toPlainText()


def _open_and_wait(window, path: Path) -> None:  # type: ignore[no-untyped-def]
    window.open_path(path)
    end = time.monotonic() + 60
    while window.is_loading and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    QApplication.processEvents()


def test_a_non_trace_json_banner_shows_quotes(window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "notatrace"
    folder.mkdir()
    (folder / "rank0.json").write_text('{"hello": "world", "n": 1}')
    _open_and_wait(window, folder)
    text = _banner_plain_text(window)
    assert "'traceEvents'" in text and "&#x27;" not in text and "&#x27;" not in window.banner.text.text()
    assert "rank0.json" in text


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 4 for _ in range(4))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def test_a_png_renamed_json_is_called_what_it_is(window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "png"
    folder.mkdir()
    (folder / "rank0.json").write_bytes(_png())
    with pytest.raises(LumosError) as err:
        load_job(folder, use_cache=False, workers=1)
    message = str(err.value)
    assert "rank0.json" in message and "not a Kineto trace" in message and "PNG image" in message
    assert "surrogates" not in message and "UTF-8" not in message
    _open_and_wait(window, folder)
    text = _banner_plain_text(window)
    assert "rank0.json" in text and "PNG image" in text and "surrogates" not in text
