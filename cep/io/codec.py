"""The msgpack batch codec: how events travel between ingestion and the partition actors.

A batch is one msgpack map::

    {"schema_version": 1, "source": str, "batch_id": str,
     "rows": [[type, ts, attrs, key, id], ...]}

Each row is a compact array ``[type, ts, attrs, key, id]`` (``attrs`` a map or nil, ``key``
and ``id`` may be nil or left off at the end). Rows given as maps
``{"type", "ts", "attrs", "key", "id"}`` are accepted too (attributes may also sit at the top
level of such a map). The encoder always writes the event id, so the receiver never re-derives
it and a redelivered batch deduplicates by id. ``(source, batch_id)`` identifies the batch, so a
receiver can also drop a redelivered batch as a whole.

Rows are validated by ``cep.event.make_event``, the one validation layer of every input path,
while they are decoded (no second pass): a row whose event time or any number (also inside a
list or map attribute) is NaN or infinite, whose ``key`` is not a string, a finite number or
a boolean (a map, a list), or whose id is a map or list is a bad row, reported with its index
and field (``decode_batch(errors="collect")``) while the other rows are decoded.

Schema version 2 carries the rows as columns::

    {"schema_version": 2, "source": str, "batch_id": str, "arrow": bytes}

``arrow`` is an Arrow IPC stream (``pyarrow.ipc``, one schema, any number of record batches):
columns ``type`` (string), ``ts`` (float or integer seconds), optional ``key`` and ``id``
(string; null: derived from the content on demand, the same id version 1 would carry), an
optional ``attrs`` column (a map of more attributes, e.g. ones named like a field) and one
column per attribute, null = absent (``cep.io.columns`` describes how a column of mixed kinds is
a dense union, so int, float, bool, str keep their Python types). It is encoded by
``encode_columns`` (a table built by a producer, e.g. from Spark's Arrow batches) or
``encode_batch(..., schema_version=2)`` and decoded in bulk: each column is checked once, events
are built from whole columns, and only rows a check flags go through ``decode_row``, so a
version-2 batch gives the same events, ids and errors (row index, field) as version 1.
Attributes come out in column order. ``decode_batch`` reads both versions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import msgpack

from raycep.cep.errors import IngestError
from raycep.cep.event import Event, make_event

#: the schema version encode_batch writes by default; decoding accepts exactly these versions
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1, 2)

#: field order of an array row
ROW_FIELDS = ("type", "ts", "attrs", "key", "id")


@dataclass(frozen=True)
class Batch:
    """A decoded batch: the header fields and the events, in wire order."""
    schema_version: int
    source: str
    batch_id: str
    events: tuple = ()

    def __len__(self) -> int:
        return len(self.events)


# --------------------------------------------------------------------------- encoding

def encode_batch(events, source: str, batch_id: str,
                 schema_version: int = SCHEMA_VERSION) -> bytes:
    """Pack ``events`` (an iterable of Event) into one msgpack batch of ``schema_version``
    (1: rows, 2: columns).

    Raises IngestError naming the row index and field when a value cannot be packed
    (attribute values must be nil, bool, int, float, str, bytes, or lists/maps of those).
    """
    if schema_version == 2:
        from raycep.cep.io.columns import table_from_events
        _check_header(source, batch_id)
        return encode_columns(table_from_events(events), source, batch_id)
    if schema_version != 1:
        raise ValueError(f"schema_version must be one of {SUPPORTED_VERSIONS}, not "
                         f"{schema_version!r}")
    rows = []
    for index, ev in enumerate(events):
        if not isinstance(ev, Event):
            raise IngestError(f"expected an Event, got {type(ev).__name__}", index)
        rows.append([ev.type, ev.ts, ev.attrs, ev.key, ev.id])
    return encode_rows(rows, source, batch_id)


def encode_rows(rows: list, source: str, batch_id: str) -> bytes:
    """Pack wire rows ``[type, ts, attrs, key, id]`` (already built, e.g. inside a Spark task)
    into one msgpack batch; the errors of ``encode_batch``."""
    _check_header(source, batch_id)
    body = {"schema_version": 1, "source": source, "batch_id": batch_id, "rows": rows}
    try:
        return msgpack.packb(body, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _unpackable_row(rows, exc) from None


def encode_columns(table, source: str, batch_id: str) -> bytes:
    """Pack a pyarrow Table or RecordBatch (columns ``type``, ``ts``, optional ``key``,
    ``id``, every other column an attribute, null = absent) into one schema-version-2 batch:
    the columns travel as an Arrow IPC stream, no per-row work. IngestError for a header that
    is not a string, or a table with a column named twice or without ``type`` / ``ts``."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    _check_header(source, batch_id)
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise IngestError(f"expected a pyarrow Table or RecordBatch, got "
                          f"{type(table).__name__}")
    names = table.schema.names
    for name in names:
        if names.count(name) > 1:
            raise IngestError(f"column {name!r} appears twice", field=name)
    for name in ("type", "ts"):
        if name not in names:
            raise IngestError(f"the table has no {name!r} column", field=name)
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    body = {"schema_version": 2, "source": source, "batch_id": batch_id,
            "arrow": memoryview(sink.getvalue())}
    return msgpack.packb(body, use_bin_type=True)


def _check_header(source, batch_id) -> None:
    if not isinstance(source, str):
        raise IngestError(f"source must be a string, got {type(source).__name__}",
                          field="source")
    if not isinstance(batch_id, str):
        raise IngestError(f"batch id must be a string, got {type(batch_id).__name__}",
                          field="batch_id")


def _unpackable_row(rows: list, exc: Exception) -> IngestError:
    """Find the first row/field that msgpack refuses, for a precise error."""
    for index, row in enumerate(rows):
        for field, value in zip(ROW_FIELDS, row):
            if field == "attrs":
                for name, attr in value.items():
                    if not _packs(name) or not _packs(attr):
                        return IngestError(f"attribute {name!r} cannot be encoded: "
                                           f"{type(attr).__name__} value {attr!r}", index, name)
            elif not _packs(value):
                return IngestError(f"cannot be encoded: {type(value).__name__} value {value!r}",
                                   index, field)
    return IngestError(f"batch cannot be encoded: {exc}")


def _packs(value) -> bool:
    try:
        msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


# --------------------------------------------------------------------------- decoding

def decode_batch(data, errors: str = "raise", columns: bool = False):
    """Unpack and validate a batch: its bytes, or its msgpack map already unpacked (a
    receiver that had to look into the body first need not unpack it twice).
    ``columns=True``: a version-2 batch's ``events`` is a cep.store.batch.ColumnBatch (Events made
    on demand: ``Engine.process_columns``) instead of a tuple of Events.

    ``errors="raise"`` (default): return a Batch; the first malformed row raises IngestError
    naming the row index and field. ``errors="collect"``: return ``(Batch, [IngestError, ...])``
    where the Batch holds only the good rows. A malformed header always raises.
    """
    if errors not in ("raise", "collect"):
        raise ValueError(f"errors must be 'raise' or 'collect', not {errors!r}")
    header, rows = _decode_header(data)
    if header["schema_version"] == 2:
        events, problems = _decode_columns(rows, errors, columns)
        batch = Batch(2, header["source"], header["batch_id"],
                      events if columns else tuple(events))
        return (batch, problems) if errors == "collect" else batch
    events, problems = [], []
    for index, row in enumerate(rows):
        try:
            events.append(decode_row(row, index))
        except IngestError as err:
            if errors == "raise":
                raise
            problems.append(err)
    batch = Batch(header["schema_version"], header["source"], header["batch_id"], tuple(events))
    return (batch, problems) if errors == "collect" else batch


def read_header(data) -> tuple:
    """``(header map, rows)`` of a batch (its bytes or its unpacked map), the header checked
    as ``decode_batch`` checks it, the rows not decoded (version 1: the row list; version 2:
    the Arrow bytes). For a receiver that forwards rows without building events."""
    return _decode_header(data)


def _decode_header(data) -> tuple:
    body = data                           # (already unpacked)
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            body = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise IngestError(f"not a msgpack batch: {str(exc) or type(exc).__name__}") \
                from None
    if not isinstance(body, dict):
        raise IngestError(f"batch must be a msgpack map (or the bytes of one), got "
                          f"{type(body).__name__}")
    for field in ("schema_version", "source", "batch_id"):
        if field not in body:
            raise IngestError("missing header field", field=field)
    version = body["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise IngestError(f"schema version must be an integer, got {version!r}",
                          field="schema_version")
    if version not in SUPPORTED_VERSIONS:
        raise IngestError(f"unsupported schema version {version} (supported: "
                          f"{', '.join(map(str, SUPPORTED_VERSIONS))})", field="schema_version")
    for field in ("source", "batch_id"):
        if not isinstance(body[field], str):
            raise IngestError(f"must be a string, got {type(body[field]).__name__}",
                              field=field)
    field = "rows" if version == 1 else "arrow"
    if field not in body:
        raise IngestError("missing header field", field=field)
    rows = body[field]
    if version == 1 and not isinstance(rows, list):
        raise IngestError(f"rows must be an array, got {type(rows).__name__}", field="rows")
    if version == 2 and not isinstance(rows, (bytes, bytearray, memoryview)):
        raise IngestError(f"arrow must be the bytes of an Arrow IPC stream, got "
                          f"{type(rows).__name__}", field="arrow")
    return body, rows


def _decode_columns(data, errors: str, columns: bool = False) -> tuple:
    """Events (``columns``: a ColumnBatch) and row errors of a version-2 body (Arrow IPC
    stream bytes), built in bulk."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    from raycep.cep.io.columns import build_columns, build_events
    try:
        table = ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise IngestError(f"not an Arrow IPC stream: {reason}", field="arrow") from None
    build = build_columns if columns else build_events
    events, problems = build(table, fallback=decode_row, text_times=False)
    if problems and errors == "raise":
        raise problems[0][1]
    return events, [err for _, err in problems]


def decode_row(row, index: int | None = None) -> Event:
    """One wire row (array or map) -> Event; IngestError names ``index`` and the field."""
    if isinstance(row, list):
        if not 2 <= len(row) <= len(ROW_FIELDS):
            raise IngestError(f"array row must have 2 to {len(ROW_FIELDS)} items "
                              f"({', '.join(ROW_FIELDS)}), got {len(row)}", index)
        mapping = dict(zip(ROW_FIELDS, row))
    elif isinstance(row, dict):
        mapping = row
        for name in mapping:
            if not isinstance(name, str):
                raise IngestError(f"field names must be strings, got {name!r}", index)
    else:
        raise IngestError(f"row must be a map or an array, got {type(row).__name__}", index)
    ts = mapping.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float))):
        raise IngestError(f"event time must be a number (seconds), got {ts!r}", index, "ts")
    if isinstance(ts, float) and not math.isfinite(ts):
        raise IngestError(f"event time must be finite, got {ts!r}", index, "ts")
    attrs = mapping.get("attrs")
    if isinstance(attrs, dict):
        for name in attrs:
            if not isinstance(name, str):
                raise IngestError(f"attribute names must be strings, got {name!r}", index,
                                  "attrs")
    return make_event(mapping, index)
