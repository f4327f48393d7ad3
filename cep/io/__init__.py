"""Events in and matches out: the file readers (``sources``, with ``csv_columns``,
``columns``, ``cells``, ``timestamps``; ``slices`` for ``raycep local --workers``), tables as
input (``tables``), the wire format between processes (``codec``), match lines (``output``)
and matches as an Arrow table (``match_table``).

Imports the base of ``raycep.cep`` and its store (column batches); never the query language,
the evaluation or the engine.
"""
