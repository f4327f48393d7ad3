"""Events of a JSON Lines file, a block of lines at a time (cep.io.sources).

One JSON object per line with ``type``, ``ts``, optional ``id``/``key`` and the attributes at
top level or under ``attrs``; blank lines are ignored. Lines are parsed with orjson; a line
orjson refuses or might read differently (NaN, integers beyond 64 bits, deep nesting) is parsed
by the standard json module, so every line reads as it always did. A run of ``JSON_RUN`` lines
or more with the same fields is read as columns (``cep.io.columns``), unless the file is small
(``small``): then every line is made an Event with ``make_event``.
"""
from __future__ import annotations

import json
from operator import itemgetter

from raycep.cep.errors import IngestError
from raycep.cep.event import make_event
from raycep.cep.io.files import line_blocks, small
from raycep.cep.io.timestamps import event_time

#: JSON lines with the same fields in a row from which events are built from columns
JSON_RUN = 32

#: a run of digits orjson may read differently from json (integers beyond 64 bits): found
#: as 20 zeros once every digit is made a zero
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 20
#: orjson reads an integer below -2**63 as a float (one above 2**64 - 1 needs 20 digits):
#: lines with such a run are read by json, whose int make_event refuses as the rows' reader
_NEGATIVE_RUN = b"-" + b"0" * 19
#: more brackets than this in a line: json decides (it refuses deep nesting, orjson does not)
_DEEP = 200
_BLANK = object()


def jsonl_chunks(path: str, handle, key_attr, ts_unit):
    """``(pieces, their line numbers, [(line, IngestError)])`` per block of a JSONL file: a
    ColumnBatch per run read as columns, a list of Events per stretch read row by row."""
    import orjson
    loads = orjson.loads
    run = None if small(handle) else JSON_RUN          # rows of a small file: no columns
    for data, first in line_blocks(path, handle):
        # lines end at LF, CRLF and a lone CR, as in text mode; each keeps its end (json's
        # error messages count it in their column numbers)
        lines = data.splitlines(keepends=True)
        digits = data.translate(_DIGITS_AS_ZERO)
        careful = _LONG_RUN in digits or _NEGATIVE_RUN in digits
        rows, numbers, problems = [], [], []
        for number, line in enumerate(lines, start=first):
            if (careful and _long_number(line.translate(_DIGITS_AS_ZERO))) or \
                    (len(line) > _DEEP and line.count(b"[") + line.count(b"{") > _DEEP):
                row = _json_row(line, number)
            else:
                try:
                    row = loads(line)
                except orjson.JSONDecodeError:
                    row = _json_row(line, number)
            if row is _BLANK:
                continue
            if row.__class__ is dict:
                rows.append(row)
                numbers.append(number)
            elif isinstance(row, IngestError):
                problems.append((number, row))
            else:
                problems.append((number, IngestError(
                    f"expected a JSON object, got {_json_kind(row)}", number)))
        pieces, lines_of_events = [], []
        for start, stop in _shapes(rows):
            _json_events(rows[start:stop], numbers[start:stop], key_attr, ts_unit, pieces,
                         lines_of_events, problems, run)
        problems.sort(key=lambda item: item[0])
        yield pieces, lines_of_events, problems


def _long_number(digits: bytes) -> bool:
    """Whether a line (digits as 0) has a number orjson would not read exactly."""
    return _LONG_RUN in digits or _NEGATIVE_RUN in digits


def _shapes(rows: list):
    """``(start, stop)`` of the runs of rows with the same fields in the same order."""
    start = 0
    fields = None
    for i, row in enumerate(rows):
        shape = tuple(row)
        if shape != fields:
            if i > start:
                yield start, i
            start, fields = i, shape
    if rows:
        yield start, len(rows)


def _json_events(rows, numbers, key_attr, ts_unit, pieces, lines, problems, run) -> None:
    """The events of a run of JSON objects with the same fields, added to ``pieces``: a
    ColumnBatch when the run is ``run`` rows or longer (raycep.cep.io.columns), else (or if ``run``
    is None) Events made row by row with make_event, added to the list ``pieces`` ends with."""
    if run is not None and len(rows) >= run:
        table = _json_table(rows)
        if table is not None:
            from raycep.cep.io.columns import build_columns, convert_times
            table, wrong = convert_times(table, ts_unit, numbers)
            batch, bad = build_columns(table, key_attr, rows=numbers)
            bad = [(p, wrong.get(p, err)) for p, err in bad]
            failed = {p for p, _ in bad}
            pieces.append(batch)
            lines.extend(n for p, n in enumerate(numbers) if p not in failed)
            problems.extend((numbers[p], err) for p, err in bad)
            return
    if not pieces or pieces[-1].__class__ is not list:
        pieces.append([])
    events = pieces[-1]
    for row, number in zip(rows, numbers):
        try:
            if ts_unit != "s" and row.get("ts") is not None:
                row["ts"] = event_time(row["ts"], ts_unit, number)
            events.append(make_event(row, number, key_attr))
            lines.append(number)
        except IngestError as err:
            problems.append((number, err))


def _json_table(rows):
    """Columns of JSON objects that have the same fields (null is a value, not absent), or
    None if a value has no column form (text that is not UTF-8, nesting msgpack refuses)."""
    import pyarrow as pa
    from raycep.cep.io.columns import column_from_values
    names = list(rows[0])
    if not names:
        return None                                      # {}: a table needs a column
    arrays = []
    try:
        for name in names:
            values = list(map(itemgetter(name), rows))
            if name == "ts" and set(map(type, values)) <= {int, float}:
                try:
                    values = list(map(float, values))        # as make_event reads them
                except OverflowError:
                    pass
            # null is absent for type, ts and id (make_event reads both alike), a value
            # elsewhere (an attribute null; a null key is no key, a missing one an error)
            arrays.append(column_from_values(values, name, bigint=True,
                                             none_is_absent=name in ("type", "ts", "id")))
        return pa.Table.from_arrays(arrays, names=names)
    except (IngestError, ValueError, TypeError, pa.ArrowException):
        return None


def _json_row(line: bytes, number: int):
    """One line read by the json module: a value, _BLANK for a blank line, or IngestError."""
    text = line.decode("utf-8")
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return IngestError(f"invalid JSON: {exc.msg} at column {exc.colno}", number)
    except (ValueError, RecursionError) as exc:     # a number of 4,300+ digits, deep nesting
        return IngestError(f"invalid JSON: {str(exc).split(':')[0]}", number)


def _json_kind(value) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


__all__ = ["jsonl_chunks"]
