"""Stage 4, what-if: infer the traced configuration (``baseline``), re-time tasks for a new one
(``retime``), rebuild pipelines, microbatches and layers (``segments``, ``schedules``, ``rewrite``,
``rewrite_timeline``), and ``estimate`` it. ``scenario`` and ``session`` keep named runs for the app;
``export`` writes a predicted job as Kineto traces."""
