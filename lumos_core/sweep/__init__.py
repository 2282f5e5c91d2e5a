"""Stage 5, sweeps: many what-ifs over a grid of knobs (``grid``), one estimate per point (``point``),
run by a local process pool or Ray (``engines``, ``run``), with resumable CSV results (``results``).
A one-knob sweep is a one-axis grid (``grid.axis_grid``, ``run.run_axis``)."""
