"""Lumos desktop app (PySide6 + pyqtgraph). Presents and orchestrates; the engine is lumos_core."""
