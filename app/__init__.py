"""Lumos desktop app (PySide6 + pyqtgraph). Presents and orchestrates; the engine is lumos_core.

Layout:
- ``main_window`` assembles the window from parts: ``job_opening`` (loads on a background task,
  newest token wins; drag and drop), ``window_menus`` (status bar, toolbar, menus) and
  ``window_chrome`` (legend, banner, welcome page). It places what the what-if workbench gives.
- ``timeline/``: ``timeline_view.TimelineView`` is assembled from ``navigation`` (ranges, zoom,
  keys, iterations), ``selection`` (picking, hover, launch arrow), ``search`` and
  ``prediction_layers`` (the predicted layer); ``canvas`` holds the pyqtgraph pieces,
  ``span_item``/``frame``/``layer`` draw the rows, ``lane_data``/``lane_layout`` build them.
- ``whatif/``: ``workbench.WhatIfWorkbench`` wires the panel, runner, scenarios, compare view and
  sweeps; its parts are ``overlay_choice``, ``scenario_export``, ``session_keeping`` and
  ``workbench_menus``.
- ``sweep/``: the grid dialog (``sweep_dialog`` with ``grid_form``, ``engine_bar``, ``grid_views``),
  the one-knob Sweep tab (``sweep_view``) and the Pareto chart.
- ``panels/``: summaries, details, tables and their export.

How the parts talk: Qt signals and small public methods, never the other side's private names, and
no import cycle (tests/test_app_layering.py). The workbench knows the window only as a
``JobHost`` (open traces, show an error) and asks for a page with ``reveal_requested``; the
What-if panel offers ``add_action`` for buttons of other tools (the Sweep dialog's).
"""
