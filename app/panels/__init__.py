"""Docked panels: summaries, details of a selected task, tables and their export."""
