"""Writing a scenario out: its predicted timeline as Kineto JSON (one file per predicted rank, in
the background, as ``lumos estimate --out``) and its tables as CSV with a ``scenario.json``.

:class:`ScenarioExport` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`; it reads the
scenarios from the workbench's shared state and tells through its signals (``exported``, ``failed``,
``notice``).
"""

from __future__ import annotations

from pathlib import Path

import orjson
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.jobs import BackgroundTask
from app.panels.table_pane import write_tables
from app.whatif.workbench_state import WorkbenchState
from lumos_core.api.scenarios import default_out_name, refuse_inside_traces, write_job


class ScenarioExport(QObject):
    """Exports of the workbench's scenarios (see the module docstring)."""

    exported = Signal(str)  # folder written
    failed = Signal(str)
    notice = Signal(str, int)  # text, milliseconds

    def __init__(self, state: WorkbenchState, dialogs: QWidget) -> None:
        super().__init__()
        self.state, self.dialogs = state, dialogs
        self._export_tasks: dict[int, BackgroundTask] = {}
        self._export_token = 0

    def ask_export_timeline(self, scenario_id: int) -> None:
        s = self.state.scenarios.get(scenario_id)
        if s is None:
            return
        folder = QFileDialog.getExistingDirectory(
            self.dialogs, f"Export the predicted timeline of {s.name} into"
        )
        if folder:
            self.export_timeline(scenario_id, default_out_name(Path(folder), s.name))

    def export_timeline(self, scenario_id: int, out: str | Path) -> int:
        """Write the scenario's predicted ranks as Kineto JSON, one file per rank of the predicted
        job (as ``lumos estimate --out``), in the background; ``exported`` tells when done."""
        s = self.state.scenarios[scenario_id]
        result = s.result
        extra = {"lumos_scenario": s.name, "lumos_estimate_config": s.summary.config.as_dict()}
        represents = s.summary.represents
        timeline = result.timeline
        world = s.summary.world_size
        out = Path(out)
        traces = self.state.loaded.job.path if self.state.loaded is not None else None

        def work(progress, _on_file):  # type: ignore[no-untyped-def]
            refuse_inside_traces(out, traces)  # trace folders are read-only, as for lumos estimate --out
            return write_job(timeline, represents, out, world, extra=extra, progress=progress)

        self._export_token += 1
        token = self._export_token
        task = BackgroundTask(work, token)
        task.succeeded.connect(lambda _t, files: self._on_exported(out, files))
        task.failed.connect(lambda _t, msg: self._on_export_failed(out, msg))
        task.finished.connect(self._on_export_finished)
        self._export_tasks[token] = task
        self.notice.emit(f"Writing {world} predicted rank file(s) to {out}…", 5000)
        task.start()
        return token

    def _on_exported(self, out: Path, files: list[Path]) -> None:
        self.notice.emit(f"Wrote {len(files)} predicted rank file(s) to {out}", 10_000)
        self.exported.emit(str(out))

    def _on_export_failed(self, out: Path, message: str) -> None:
        self.state.last_error = message
        self.notice.emit(f"Could not export to {out}: {message}", 15_000)
        self.failed.emit(message)

    def _on_export_finished(self, token: int) -> None:
        task = self._export_tasks.pop(token, None)
        if task is not None:
            task.wait()
            task.deleteLater()

    @property
    def exporting(self) -> bool:
        return bool(self._export_tasks)

    def stop(self) -> None:
        """Cancel and wait for every export still writing."""
        for task in self._export_tasks.values():
            task.cancel()
        for task in list(self._export_tasks.values()):
            task.wait()
        self._export_tasks.clear()

    def ask_export_tables(self, scenario_id: int) -> None:
        if scenario_id not in self.state.scenarios:
            return
        folder = QFileDialog.getExistingDirectory(self.dialogs, "Export the scenario's tables as CSV into")
        if folder:
            written = self.export_tables(scenario_id, folder)
            self.notice.emit(f"Wrote {len(written)} file(s) to {folder}", 10_000)

    def export_tables(self, scenario_id: int, folder: str | Path) -> list[Path]:
        """iterations.csv, breakdown.csv, retimed.csv (estimates) and scenario.json (with, for an
        estimate, exactly what ``lumos estimate --json`` prints)."""
        s = self.state.scenarios[scenario_id]
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = write_tables(s.summary.tables(), folder)
        doc = {"scenario": s.summary.as_dict(), "estimate": s.summary.estimate_json}
        path = folder / "scenario.json"
        path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
        out.append(path)
        return out
