"""Tables as the engine's input: a pandas or polars DataFrame, a pyarrow Table, RecordBatch or
RecordBatchReader, or anything with the Arrow C stream interface (``__arrow_c_stream__``).

A table is read as the columns of a Parquet file are (cep.io.sources): ``convert_times``, then
``typed_table`` and ``build_columns`` of cep.io.columns, a ``cep.store.batch.ColumnBatch`` per
BATCH_ROWS rows, so the engine evaluates it in bulk and an Event is made only for a row a
query reads. The same columns give the same events, ids and errors as that file, but for
text attributes: a table's text column stays text (a Parquet file's is typed cell by cell,
as CSV cells are). No row loop in Python, and neither pandas nor polars is imported here:
their frames are recognised by their class and handed to pyarrow.

Columns: ``type`` (or ``type=``: the name of another column, or one event type for every
row), ``ts`` (or ``ts=``: the event-time column), optional ``id`` and ``key`` (the partition
key, unless ``key_attr`` names another column: then ``key`` is an attribute), every other
column an attribute; null (a pandas NaN / None / NaT) = absent. A pandas index level named by
``ts``, ``type`` or ``key_attr`` is read as a column; the rest of the index is not read.

Event times (seconds since the epoch, as floats, like every event time of the engine):

* numbers in ``ts_format`` (``s``, ``ms``, ``us``, ``ns``: cep.io.timestamps, correctly rounded);
* timestamps of any unit (pandas ``datetime64``, Arrow ``timestamp``): naive = UTC, with a
  time zone the instant they name; dates are their midnight UTC;
* text: ISO 8601 with ``ts_format="iso"``, a strftime pattern, or numbers in the unit.

Errors are ``IngestError`` naming the column (``field``) and, for one row, its position
counted from 0 (``row``).
"""
from __future__ import annotations

import warnings

from raycep.cep.errors import IngestError
from raycep.cep.io.timestamps import TS_UNITS, check_format

#: rows per column batch (a Parquet file is read in as many:
#: cep.io.parquet_reader.PARQUET_BATCH_ROWS)
BATCH_ROWS = 65_536
#: numeric event times beyond this many seconds (the year 5138) are probably not seconds
_NOT_SECONDS = 1e11
_ARROW_CLASSES = ("Table", "RecordBatch", "RecordBatchReader")
_ROLES = ("type", "ts", "id")

__all__ = ["BATCH_ROWS", "TableReader", "TimeUnitWarning", "arrow_table", "is_table",
           "refuse_table", "time_type_of"]


class TimeUnitWarning(UserWarning):
    """Numeric event times read as seconds that look like milliseconds or finer."""


def is_table(obj) -> bool:
    """Whether ``obj`` is a table TableReader reads (checked without importing pyarrow,
    pandas or polars)."""
    cls = type(obj)
    top = cls.__module__.partition(".")[0]
    if top == "pyarrow":
        return cls.__name__ in _ARROW_CLASSES
    if top in ("pandas", "polars"):
        return cls.__name__ == "DataFrame"
    return hasattr(cls, "__arrow_c_stream__") or hasattr(cls, "__dataframe__")


def _kind(obj) -> str:
    cls = type(obj)
    return f"{cls.__module__.partition('.')[0]}.{cls.__name__}"


def refuse_table(obj, method: str = "process") -> None:
    """``Engine.process`` takes one Event: TypeError naming what to use for ``obj`` instead
    when it is a table (``process_table``) or no event at all."""
    if is_table(obj):
        raise TypeError(f"Engine.{method} takes one Event, got a {_kind(obj)}: a table goes "
                        f"to engine.process_table(table, ts=..., type=..., ts_format=...)")
    if not (hasattr(obj, "type") and hasattr(obj, "ts")):
        raise TypeError(f"Engine.{method} takes one Event, got {type(obj).__name__}: make one "
                        f"with raycep.Event(type, ts, attrs) (a mapping: raycep.cep.event.make_event)")


# --------------------------------------------------------------------------- to Arrow

def _record_batches(obj, names: tuple) -> tuple:
    """``(schema, iterator of pyarrow RecordBatch)`` of a table; ``names``: columns that may
    be index levels of a pandas frame."""
    import pyarrow as pa
    if isinstance(obj, pa.Table):
        return obj.schema, iter(obj.to_batches())
    if isinstance(obj, pa.RecordBatch):
        return obj.schema, iter((obj,))
    if isinstance(obj, pa.RecordBatchReader):
        return obj.schema, iter(obj)
    cls = type(obj)
    if cls.__module__.partition(".")[0] == "pandas" and cls.__name__ == "DataFrame":
        table = _from_pandas(obj, names)
        return table.schema, iter(table.to_batches())
    try:
        if hasattr(cls, "__arrow_c_stream__"):             # polars, pandas 3, DuckDB, ...
            reader = pa.RecordBatchReader.from_stream(obj)
            return reader.schema, iter(reader)
        if hasattr(cls, "__dataframe__"):                  # the dataframe interchange protocol
            from pyarrow.interchange import from_dataframe
            table = from_dataframe(obj)
            return table.schema, iter(table.to_batches())
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise IngestError(f"cannot read the {_kind(obj)} as Arrow: "
                          f"{str(exc).splitlines()[0]}") from None
    raise TypeError(f"expected a table (a pandas or polars DataFrame, a pyarrow Table, "
                    f"RecordBatch or RecordBatchReader, or an object with "
                    f"__arrow_c_stream__), got {_kind(obj)}")


def _from_pandas(df, names: tuple):
    """A pandas frame as a pyarrow Table: index levels named in ``names`` become columns
    (the rest of the index is dropped); an object column of values of several kinds (7 in
    one row, "n/a" in another), which pyarrow refuses, becomes a dense union of them
    (cep.io.columns), NaN / None / NaT absent."""
    import pyarrow as pa
    levels = [name for name in names if name is not None and name not in df.columns
              and name in df.index.names]
    if levels:
        df = df.reset_index(level=levels)
    if len(set(df.columns)) != len(df.columns):
        twice = next(n for n in df.columns if list(df.columns).count(n) > 1)
        raise IngestError(f"column {twice!r} appears twice", field=str(twice))
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    from raycep.cep.io.columns import column_from_values
    arrays = []
    for name in df.columns:
        series = df[name]
        try:
            arrays.append(pa.Array.from_pandas(series))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            missing = series.isna().tolist()
            values = [None if gone else value.item() if hasattr(value, "item") else value
                      for value, gone in zip(series.tolist(), missing)]
            arrays.append(column_from_values(values, str(name)))
    return pa.Table.from_arrays(arrays, names=[str(name) for name in df.columns])


def arrow_table(obj):
    """A table read whole into one pyarrow Table (the columns as they come, before
    TableReader's reading)."""
    import pyarrow as pa
    schema, batches = _record_batches(obj, ())
    return pa.Table.from_batches(list(batches), schema=schema)


def _rebatched(batches):
    """pyarrow Tables of BATCH_ROWS rows (the last one fewer) from record batches of any
    size."""
    import pyarrow as pa
    pending, rows = [], 0
    for batch in batches:
        while batch.num_rows:
            take = min(batch.num_rows, BATCH_ROWS - rows)
            pending.append(batch.slice(0, take))
            rows += take
            batch = batch.slice(take)
            if rows == BATCH_ROWS:
                yield pa.Table.from_batches(pending)
                pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


# --------------------------------------------------------------------------- the reader

class TableReader:
    """The events of a table: iterating gives ``cep.store.batch.ColumnBatch`` pieces of
    BATCH_ROWS rows (``Engine.process_columns`` takes them); ``tables()`` gives the same
    rows as Arrow tables with the engine's columns (``type``, ``ts`` in float seconds, ...),
    as the columnar wire format carries them (cep.io.codec).

    ``ts``: the event-time column; ``type``: the event-type column, or (naming no column)
    the event type of every row (default: the column ``type``); ``ts_format``: how numbers
    or text in the event-time column are read (see the module docstring); ``key_attr``: the
    partition key attribute (as ``Engine(key_attr=...)``). The columns are checked here; the
    rows are read lazily. ``time_type``: the Arrow type the event times came in when they
    were timestamps, dates or ISO/pattern text (matches give their times back in it), else
    None (numbers)."""

    def __init__(self, table, *, key_attr: str | None = None, ts: str = "ts",
                 type: str | None = None, ts_format: str = "s"):
        import pyarrow as pa
        for arg, value in (("ts", ts), ("type", type), ("key_attr", key_attr)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"{arg} must be a column name (a non-empty string), got "
                                f"{value!r}")
        self.ts_format = check_format(ts_format)
        self.key_attr = key_attr
        schema, self._batches = _record_batches(table, (ts, type, key_attr))
        names = list(schema.names)
        shown = ", ".join(map(repr, names)) or "none"
        if ts not in names:
            raise IngestError(f"the table has no event-time column {ts!r} (columns: {shown}): "
                              f"name it with ts=COLUMN", field=ts)
        if type is None:
            if "type" not in names:
                raise IngestError(f"the table has no 'type' column (columns: {shown}): name "
                                  f"the event-type column with type=COLUMN, or give every row "
                                  f"one event type with type='Stock'", field="type")
            type = "type"
        self.ts, self.type = ts, type
        self._constant = type not in names
        for role, given in (("ts", ts), ("type", type)):
            if given != role and role in names:
                what = "event type" if role == "type" else "event time"
                raise IngestError(f"the column {role!r} is not the {what} ({role}={given!r}) "
                                  f"and cannot be an attribute: rename or drop it", field=role)
        if key_attr is not None and key_attr not in names:
            raise IngestError(f"the table has no column {key_attr!r} for the partition key "
                              f"(columns: {shown})", field=key_attr)
        for field in schema:
            if field.name not in (ts, type):
                _check_attribute(field)
        self.time_type = _time_type(schema.field(ts).type, ts, self.ts_format)
        self._numbers = pa.types.is_integer(_value_type(schema.field(ts).type)) or \
            pa.types.is_floating(_value_type(schema.field(ts).type))
        if not self._constant:
            t = _value_type(schema.field(type).type)
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise IngestError(f"column {type!r} has type {t}: event types are text",
                                  field=type)
        self.rows = 0                   # rows read so far
        self._read = None

    def __iter__(self):
        """The column batches (one iterator: a table is read once)."""
        if self._read is None:
            self._read = self._batches_of_events()
        return self._read

    def _batches_of_events(self):
        from raycep.cep.io.columns import build_columns
        for table, wrong in self._tables():
            batch, bad = build_columns(table, self.key_attr, first_row=self.rows)
            if bad:
                position, err = bad[0]
                raise self._named(wrong.get(position, err))
            self.rows += table.num_rows
            yield batch

    def tables(self):
        """The rows as pyarrow Tables with the engine's columns, BATCH_ROWS at a time: what
        ``build_columns`` reads (the wire's columns: ts as float seconds; with a
        ``key_attr`` other than ``key``, a ``key`` column holding its values). Rows whose
        event time cannot be read raise here; the other checks are the receiver's."""
        for table, wrong in self._tables():
            if wrong:
                raise self._named(wrong[min(wrong)])
            if self.key_attr not in (None, "key"):
                if "key" in table.schema.names:
                    raise IngestError(f"the column 'key' is an attribute when the partition "
                                      f"key is {self.key_attr!r}: rename it to send the "
                                      f"table", field="key")
                table = table.append_column("key", table.column(self.key_attr))
            self.rows += table.num_rows
            yield table

    def _tables(self):
        """``(table, {position: IngestError})`` per BATCH_ROWS rows: the engine's columns
        (cep.io.columns.typed_table) and the event times that could not be read."""
        import pyarrow as pa
        from raycep.cep.io.columns import convert_times, typed_table
        from raycep.cep.store.arrow import arrow_array
        for part in _rebatched(self._batches):
            n = part.num_rows
            names, arrays = [], []
            if self._constant:
                names.append("type")
                arrays.append(pa.DictionaryArray.from_arrays(
                    arrow_array(_zeros(n), pa.int32()), arrow_array([self.type], pa.string())))
            for name, column in zip(part.schema.names, part.columns):
                if name == self.ts:
                    if column.null_count:
                        self._missing_time(column)
                    name = "ts"
                elif name == self.type:
                    name = "type"
                names.append(name)
                arrays.append(column)
            table = pa.Table.from_arrays(arrays, names=names)
            table, wrong = convert_times(table, self.ts_format, first_row=self.rows)
            if self._numbers and self.ts_format == "s" and self.rows == 0:
                _look_at_unit(table.column("ts"), self.ts)
            yield typed_table(table, empty_absent=False, typed_strings=False), wrong

    def _missing_time(self, column) -> None:
        import numpy as np
        from raycep.cep.store.arrow import valid_mask
        from raycep.cep.store.values import plain_array
        missing = np.flatnonzero(~valid_mask(plain_array(column)))
        raise IngestError(f"event time missing (null) in {len(missing)} row(s) of this "
                          f"batch, the first at row {self.rows + int(missing[0])}",
                          self.rows + int(missing[0]), self.ts)

    def _named(self, err: IngestError) -> IngestError:
        """``err`` with the user's column names for the roles ``ts`` and ``type``."""
        field = {"ts": self.ts, "type": self.type if not self._constant else "type"}.get(
            err.field, err.field)
        reason = err.reason
        if field == self.ts and self.ts_format == "s" and \
                reason.startswith("event time must be a number"):
            reason += "; dates or times as text are read with ts_format='iso' or a strftime " \
                      "pattern such as '%Y-%m-%d %H:%M:%S'"
        if field == err.field and reason == err.reason:
            return err
        return IngestError(reason, err.row, field)


def _zeros(n: int):
    import numpy as np
    return np.zeros(n, dtype=np.int32)


def _value_type(t):
    """The type of the values of a (dictionary-encoded) column."""
    import pyarrow as pa
    return t.value_type if pa.types.is_dictionary(t) else t


def time_type_of(t, ts_format: str):
    """The Arrow type matches give their times back in, for event times of Arrow type ``t``
    (None: text, as in a CSV file) read with ``ts_format``: the timestamp type itself, a
    naive microsecond timestamp for dates, a UTC one for ISO or pattern text; None for
    numbers (float seconds)."""
    import pyarrow as pa
    t = _value_type(t) if t is not None else pa.string()
    if pa.types.is_timestamp(t):
        return t
    if pa.types.is_date(t):
        return pa.timestamp("us")
    if (pa.types.is_string(t) or pa.types.is_large_string(t)) and ts_format not in TS_UNITS:
        return pa.timestamp("us", "UTC")
    return None


def _time_type(t, name: str, ts_format: str):
    """``time_type_of``, or IngestError for a column that cannot hold event times or does
    not fit ``ts_format``."""
    import pyarrow as pa
    v = _value_type(t)
    if (pa.types.is_integer(v) or pa.types.is_floating(v)) and not pa.types.is_float16(v):
        if ts_format not in TS_UNITS:
            raise IngestError(f"column {name!r} holds numbers ({v}), which ts_format="
                              f"{ts_format!r} does not read: give their unit, ts_format='s', "
                              f"'ms', 'us' or 'ns'", field=name)
        return None
    if pa.types.is_timestamp(v) or pa.types.is_date(v) or pa.types.is_string(v) or \
            pa.types.is_large_string(v):
        return time_type_of(v, ts_format)
    raise IngestError(f"column {name!r} has type {v}: event times are numbers (with "
                      f"ts_format 's', 'ms', 'us' or 'ns'), timestamps, dates or text (ISO "
                      f"with ts_format='iso', or a strftime pattern)", field=name)


def _check_attribute(field) -> None:
    """IngestError for a column of a type no attribute holds (durations, intervals, ...)."""
    import pyarrow as pa
    t = _value_type(field.type)
    if pa.types.is_duration(t) or pa.types.is_interval(t) or pa.types.is_float16(t) or \
            isinstance(t, pa.ExtensionType):
        hint = " (a duration: as seconds, e.g. pandas' .dt.total_seconds())" \
            if pa.types.is_duration(t) else ""
        raise IngestError(f"column {field.name!r} has type {t}, which no event attribute "
                          f"holds (numbers, text, booleans, bytes, timestamps, dates, times, "
                          f"decimals, lists, structs and maps do): convert it first{hint}",
                          field=field.name)


def _look_at_unit(column, name: str) -> None:
    """Warns when event times read as seconds reach the year 5138: they are probably in
    milliseconds or finer (a factor of 1,000 off without a word otherwise)."""
    import pyarrow.compute as pc
    largest = pc.max(pc.abs(column)).as_py()
    if largest is not None and largest > _NOT_SECONDS:
        unit = "ns" if largest > 1e17 else "us" if largest > 1e14 else "ms"
        warnings.warn(f"event times in column {name!r} are read as seconds (ts_format='s') "
                      f"and reach {largest:.6g}, after the year 5000: if they are "
                      f"milliseconds or finer, say so, e.g. ts_format={unit!r}",
                      TimeUnitWarning, stacklevel=4)
