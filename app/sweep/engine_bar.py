"""The Sweep dialog's run controls: engine (local processes or Ray), workers, Ray address, Run and
Cancel, progress and the status line; and the engine they describe."""

from __future__ import annotations

import os

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox

from lumos_core.api.sweep import Engine, LocalEngine, RayEngine


class EngineBar:
    """The controls (``engine_row`` and ``progress_row`` go into the dialog's layout)."""

    def __init__(self) -> None:
        self.ray_engine: RayEngine | None = None
        self.engine_combo = QComboBox()
        self.engine_combo.addItem("Local processes", "local")
        self.engine_combo.addItem("Ray", "ray")
        self.engine_combo.currentIndexChanged.connect(self._on_engine_changed)
        self.workers = QSpinBox()
        self.workers.setRange(1, 1024)
        self.workers.setValue(os.cpu_count() or 1)
        self.workers.setToolTip(
            "parallel workers (Ray: CPUs of the local instance, tasks in flight on a cluster)"
        )
        self.address = QLineEdit()
        self.address.setPlaceholderText("Ray address (empty: a local Ray instance)")
        self.run_button = QPushButton("Run sweep")
        self.run_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.engine_row = QHBoxLayout()
        self.engine_row.addWidget(QLabel("Engine:"))
        self.engine_row.addWidget(self.engine_combo)
        self.engine_row.addWidget(QLabel("Workers:"))
        self.engine_row.addWidget(self.workers)
        self.engine_row.addWidget(self.address, 1)
        self.engine_row.addWidget(self.run_button)
        self.engine_row.addWidget(self.cancel_button)
        self.progress_row = QHBoxLayout()
        self.progress_row.addWidget(self.progress, 1)
        self.progress_row.addWidget(self.status, 2)
        self._on_engine_changed()

    def engine(self) -> Engine:
        """The engine the controls describe (Ray is started once and kept while they match)."""
        jobs = self.workers.value()
        if self.engine_combo.currentData() == "ray":
            address = self.address.text().strip() or None
            if self.ray_engine is None or (self.ray_engine.address, self.ray_engine.jobs) != (address, jobs):
                if self.ray_engine is not None:
                    self.ray_engine.close()
                self.ray_engine = RayEngine(address, jobs)  # kept: Ray starts once per session
            return self.ray_engine
        return LocalEngine(jobs)

    def close(self) -> None:
        """Stop Ray if these controls started it."""
        if self.ray_engine is not None:
            self.ray_engine.close()
            self.ray_engine = None

    def set_running(self, running: bool, can_run: bool) -> None:
        self.run_button.setEnabled(not running and can_run)
        self.cancel_button.setEnabled(running)
        self.progress.setVisible(running)
        if not running:
            self.progress.setValue(0)

    def _on_engine_changed(self) -> None:
        self.address.setEnabled(self.engine_combo.currentData() == "ray")
