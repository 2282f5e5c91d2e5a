"""Stage 1, reading: Kineto files -> one columnar :class:`Job` (a :class:`RankTrace` per rank).

``loader.load_job`` drives it: ``kineto_reader`` streams each file into numpy columns (``json_stream``,
``kineto_schema`` for the format's names), ``rank_analysis`` finds iterations and collectives, ``cache``
memory-maps the columns, ``collectives`` matches collectives across ranks and ``clocks`` aligns the
ranks' clocks. ``model`` holds the data types every later stage reads.
"""
