"""Render resources/icons/lumos.svg to the PNG, ICO and ICNS files the app and the packages use.

    python packaging/render_icons.py          # rewrite resources/icons/lumos-<size>.png, .ico, .icns

Rendering goes through Qt's own SVG renderer (QtSvg ships in PySide6-Essentials), so the outputs
can be regenerated on any machine that runs Lumos; no image tool is needed. ICO and ICNS are
written here as containers of PNG images (both formats allow that), because Qt's writers store a
single size per file and Windows and macOS want several.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ICONS = REPO / "resources" / "icons"
SVG = ICONS / "lumos.svg"

# The sizes desktops ask for: Linux hicolor 16–512, Windows 16–256, macOS 16–512 (+@2x from these).
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS element types that hold PNG data, by pixel size.
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09"}


def png_path(size: int) -> Path:
    return ICONS / f"lumos-{size}.png"


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: Qt cannot read {SVG}")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """ICONDIR + one ICONDIRENTRY per size, then the PNG streams (Windows Vista and later)."""
    sizes = [s for s in ICO_SIZES if s in pngs]
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, blobs = b"", b""
    for s in sizes:
        blob = pngs[s]
        dim = 0 if s >= 256 else s  # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        blobs += blob
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """'icns' header then one (type, length, PNG) element per size (macOS 10.7 and later)."""
    body = b"".join(
        kind + struct.pack(">I", 8 + len(pngs[s])) + pngs[s] for s, kind in ICNS_TYPES.items() if s in pngs
    )
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # no display needed
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    pngs = {size: render_png(size) for size in PNG_SIZES}
    for size, blob in pngs.items():
        png_path(size).write_bytes(blob)
    (ICONS / "lumos.ico").write_bytes(ico_bytes(pngs))
    (ICONS / "lumos.icns").write_bytes(icns_bytes(pngs))
    total = sum(p.stat().st_size for p in ICONS.iterdir())
    print(f"render_icons: wrote {len(pngs)} PNGs, lumos.ico, lumos.icns to {ICONS} ({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
