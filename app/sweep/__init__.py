"""Sweeps in the app: the grid dialog, the one-knob sweep view and the Pareto chart."""
