"""``match``: queries over a table or an events file in this process, the matches as a
pyarrow Table: ``raycep local``'s run (local.run) for Python and notebooks."""
from __future__ import annotations

import os
import warnings
from collections.abc import Iterable

from raycep.cep.lang.ast import Query
from raycep.local.queries import load_queries
from raycep.local.run import build_engine, evaluate, few_collections

__all__ = ["match"]


def match(queries, events, *, key: str | None = None, params: dict | None = None,
          ts: str = "ts", type: str | None = None, ts_format: str = "s"):
    """Run pattern queries over a table of events; return the matches as a pyarrow Table.

    It is ``raycep local`` in this process: the same planner defaults, chunks and bulk
    evaluation, so the same events give the same matches with the same ids (for each query
    in the same order; ``raycep local`` may cut a large CSV or JSON Lines file into time
    slices evaluated by several processes, ``match`` evaluates in this one).

    Usage::

        import pandas as pd
        from raycep import match

        ticks = pd.DataFrame({"type": "Stock", "ts": pd.to_datetime([...]),
                              "symbol": [...], "price": [...]})
        found = match('''PATTERN SEQ(Stock a, Stock b)
                         WHERE [symbol] AND b.price > a.price * 1.01
                         WITHIN 30 seconds''', ticks, key="symbol")
        found.to_pandas()                  # or polars.from_arrow(found)
        found.filter(pc.equal(found["query"], "q1")).flatten()   # a column per field

    Arguments:

    * ``queries``: query text (one or more queries separated by ``;``, each optionally
      ``NAME n PATTERN ...``), the path of a query file, a Query built with cep.lang.builder,
      or a list of these. Unnamed queries are called ``q1``, ``q2``, ... in order.
    * ``events``: a pandas or polars DataFrame, a pyarrow Table, RecordBatch or
      RecordBatchReader, anything with the Arrow C stream interface, or the path of a
      ``.csv``, ``.jsonl`` or ``.parquet`` file (read as ``raycep local --events`` reads it).
      A table's columns: the event type (``type``), the event time (``ts``), optional ``id``
      and ``key``, every other column an attribute; null / NaN / NaT = absent. A table's
      text columns stay text (a file's cells are typed as ``raycep local`` types them).
    * ``key``: the partition key attribute (``raycep local --key``): queries with
      ``[key]`` are evaluated per partition.
    * ``params``: values of the queries' parameters (``WITHIN W``: ``{"W": 30}``).
    * ``ts``: the event-time column of a table. Numbers are read in ``ts_format``;
      ``datetime64`` and Arrow timestamps of any unit are read as they are (naive = UTC,
      with a time zone: that instant), dates as their midnight UTC.
    * ``type``: the event-type column of a table, or (naming no column) the event type of
      every row (``type="Stock"``). Default: the column ``type``.
    * ``ts_format``: how numbers and text in the event-time column are written, as
      ``raycep local --ts-format``: ``s`` (default), ``ms``, ``us``, ``ns``, ``iso`` (ISO
      8601 text) or a strftime pattern such as ``'%Y-%m-%d %H:%M:%S'``. Numbers that read
      as seconds after the year 5000 are warned about (they are likely milliseconds).

    Returns a pyarrow Table, one row per match (and per retraction: a match a late event
    cancelled), in the order they were found:

    * ``query`` (string), ``id`` (string, as the gateway and ``raycep local`` identify the
      match: ``cep.match.match_id``), ``retracted`` (bool);
    * ``start``, ``end``: the time of its first and last event: a timestamp of the input's
      timestamp type when the event times were timestamps (UTC microseconds for dates, ISO
      or pattern text), else float seconds;
    * a column per variable of the queries: a struct ``{id, type, ts, key, attributes...}``
      of the event bound to it, a list of such structs for a Kleene variable (a name Kleene
      in one query and single in another: a list in every row); null where the row's query
      does not bind that name (a negated variable, another query's variable).

    Raises QuerySourceError (a query that cannot be read or added), IngestError naming the
    column and row of an event that cannot be read (missing or null event times, a column
    of a type no attribute holds), TypeError for arguments of the wrong kind. Late events
    (out of order beyond the learnt lateness threshold) are not used and warned about.
    """
    from raycep.cep.io.match_table import MatchTable
    if isinstance(queries, (str, os.PathLike, Query)) or not isinstance(queries, Iterable):
        queries = [queries]
    engine = build_engine(load_queries(list(queries)), key=key, params=params)
    runs, time_type = _runs(events, key, ts, type, ts_format)
    table = MatchTable(time_type)
    with few_collections():
        _, stopped = evaluate(engine, runs, table.add)
        if stopped is not None:
            raise stopped
        result = table.table()
    late = engine.engine.late_events
    if late:
        warnings.warn(f"{late} late event(s) were not used: they came after the lateness "
                      f"threshold of the events before them (sort the input by its event "
                      f"time, or see cep.store.disorder)", stacklevel=2)
    return result


def _runs(events, key, ts, type, ts_format) -> tuple:
    """``(pieces to evaluate, the Arrow type of the times or None)`` of ``events``: a file
    path read as raycep local reads it, or a table (cep.io.tables.TableReader)."""
    from raycep.cep.io.tables import TableReader, time_type_of
    from raycep.cep.io.timestamps import check_format
    if not isinstance(events, (str, os.PathLike)):
        reader = TableReader(events, key_attr=key, ts=ts, type=type, ts_format=ts_format)
        return reader, reader.time_type
    if ts != "ts" or type is not None:
        raise TypeError("ts= and type= name the columns of a table; an events file's columns "
                        "are named type and ts")
    from raycep.cep.io.sources import iter_batch_runs
    path = os.fspath(events)
    runs = iter_batch_runs(path, key_attr=key, ts_unit=check_format(ts_format))
    time_type = None
    if path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq
        schema = pq.read_schema(path)
        if "ts" in schema.names:
            time_type = time_type_of(schema.field("ts").type, ts_format)
    else:
        time_type = time_type_of(None, ts_format)
    return runs, time_type
