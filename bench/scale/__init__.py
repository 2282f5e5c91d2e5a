"""The parts of the scale benchmark (``bench/bench_scale.py`` runs them): ``jobs`` (the synthetic jobs
and the measured runs), ``probe`` (the runtime floor and the machine's state), ``verdicts`` (the
targets, met or not), ``report`` (the table's lines) and ``parse`` (the cold parse beside its floor)."""
