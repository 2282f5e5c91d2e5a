"""The CPU-paced warning at the top of a what-if headline (the Prediction tab, the sweep dialog),
with the one-click "assume GPU-bound": the same changes estimated again with the host time scaled
(:data:`lumos_core.whatif.throughput.GPU_BOUND_CPU_SCALE`, stated on the button)."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from lumos_core.api.knobs import GPU_BOUND_CPU_SCALE

# in app/panels, below both packages that show the banner (app/whatif, app/sweep)
GPU_BOUND_BUTTON = f"Assume GPU-bound (Host time × {GPU_BOUND_CPU_SCALE})"
GPU_BOUND_TIP = (
    f"Estimate this configuration again with the host (CPU) time × {GPU_BOUND_CPU_SCALE}, what CUDA "
    "graphs or torch.compile typically leave of an eager PyTorch job's Python and launch time: the "
    "GPU change then shows in the iteration"
)


class CpuPacedBanner(QFrame):
    """See the module docstring. Hidden while there is nothing to warn about."""

    gpu_bound_requested = Signal(dict)  # the changes to estimate (with cpu_scale)

    def __init__(self, button_text: str = GPU_BOUND_BUTTON, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CpuPacedBanner")
        # amber whatever the theme: a warning, readable on light and dark backgrounds alike
        self.setStyleSheet(
            "#CpuPacedBanner { background: #FEF3C7; border: 1px solid #D97706; border-radius: 4px; }"
            " #CpuPacedBanner QLabel { color: #78350F; }"
        )
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.button = QPushButton(button_text)
        self.button.setToolTip(GPU_BOUND_TIP)
        self.button.clicked.connect(lambda: self.gpu_bound_requested.emit(dict(self.changes)))
        self.changes: dict[str, Any] = {}
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.button)
        self.hide()

    def show_text(self, text: str, changes: dict[str, Any]) -> None:
        """Warn with ``text`` (hide when empty); the button then asks for ``changes``."""
        self.setVisible(bool(text))
        self.text.setText(f"<b>⚠ {html.escape(text)}</b>" if text else "")
        self.changes = dict(changes)
