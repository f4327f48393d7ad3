"""Read events from files: CSV (header row) and JSON Lines.

CSV: the header names the columns; ``type`` and ``ts`` are required, ``id`` and ``key`` are
optional, every other column is an attribute. Cells are typed from their text: integers
(``42``), floats (``4.2``, ``1e3``), ``true``/``false`` (any case) as booleans, anything else
a string; an empty cell means the attribute is absent. ``id`` cells stay strings.

JSON Lines: one JSON object per line with ``type``, ``ts``, optional ``id``/``key`` and the
attributes at top level or under ``attrs``; blank lines are ignored.

``id`` is the event id. ``key`` is the partition key, unless ``key_attr`` names another
attribute: then it is an ordinary attribute, so a user's column called ``key`` is never lost
(see ``cep.event.make_event``, which also rejects non-finite numbers and non-scalar keys).

Errors are IngestError with ``row`` = the 1-based line number in the file (the CSV header is
line 1), ``field`` = the offending field, and the file named in the message (also in the
error's ``path`` attribute).
"""
from __future__ import annotations

import csv
import json
import os
import re

from cep.errors import IngestError
from cep.event import make_event

#: file extensions read_events understands
SUPPORTED_EXTENSIONS = (".csv", ".jsonl", ".ndjson")

REQUIRED_COLUMNS = ("type", "ts")

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def read_events(path, key_attr: str | None = None, errors: str = "raise"):
    """Events of a .csv / .jsonl file, in file order.

    ``errors="raise"`` (default): a lazy iterator of Event; the first bad row raises
    IngestError. ``errors="collect"``: ``(list of good Events, list of IngestError)``.
    ``key_attr`` sets each event's partition key from that attribute (missing -> IngestError).
    """
    if errors == "raise":
        return iter_events(path, key_attr)
    if errors == "collect":
        problems: list = []
        events = list(iter_events(path, key_attr, on_error=problems.append))
        return events, problems
    raise ValueError(f"errors must be 'raise' or 'collect', not {errors!r}")


def iter_events(path, key_attr: str | None = None, on_error=None):
    """Iterator over the events of ``path`` (the file is checked now, read lazily).

    A bad row is passed to ``on_error(IngestError)`` and skipped, or raised when ``on_error``
    is None. Errors that concern the whole file (unreadable, unsupported extension, missing
    CSV column) always raise.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".csv":
        reader = _csv_rows
    elif ext in (".jsonl", ".ndjson"):
        reader = _jsonl_rows
    else:
        raise _file_error(path, f"unsupported file extension {ext or '(none)'!r}; supported: "
                                f"{', '.join(SUPPORTED_EXTENSIONS)}")
    if not os.path.exists(path):
        raise _file_error(path, "events file not found")
    if os.path.isdir(path):
        raise _file_error(path, "events path is a directory, not a file")
    return _generate(path, reader, key_attr, on_error)


def _generate(path: str, reader, key_attr, on_error):
    try:
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise _file_error(path, f"cannot open events file: {exc.strerror or exc}") from None
    with handle:
        line = 0
        try:
            for line, row in reader(path, handle):
                try:
                    if isinstance(row, IngestError):
                        raise row
                    yield make_event(row, line, key_attr)
                except IngestError as err:
                    located = _located(path, line, err)
                    if on_error is None:
                        raise located from None
                    on_error(located)
        except UnicodeDecodeError as exc:
            raise _file_error(path, f"not UTF-8 text after line {line}: {exc.reason}") from None
        except OSError as exc:
            raise _file_error(path, f"read failed after line {line}: {exc}") from None


# --------------------------------------------------------------------------- formats

def _csv_rows(path: str, handle):
    """Yield (line number, row dict or IngestError) for each data row of a CSV file."""
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise _file_error(path, "empty CSV file: expected a header row with columns "
                                "'type' and 'ts'", row=1) from None
    except csv.Error as exc:
        raise _file_error(path, f"malformed CSV header: {exc}", row=1) from None
    header = [name.strip() for name in header]
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise _file_error(path, f"CSV header lacks required column(s) "
                                f"{', '.join(repr(m) for m in missing)} (header: "
                                f"{', '.join(header)})", row=1, field=missing[0])
    for position, name in enumerate(header):
        if not name:
            raise _file_error(path, f"CSV header column {position + 1} has no name", row=1)
        if header.index(name) != position:
            raise _file_error(path, f"CSV header names column {name!r} twice", row=1,
                              field=name)
    width = len(header)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield reader.line_num, IngestError(f"malformed CSV: {exc}", reader.line_num)
            continue
        line = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue                                    # blank line
        if len(cells) != width:
            yield line, IngestError(f"row has {len(cells)} cells, the header has {width}",
                                    line)
            continue
        row = {}
        for name, cell in zip(header, cells):
            if cell == "":
                continue
            if name in ("type", "ts", "id"):
                row[name] = cell.strip()
            else:
                row[name] = parse_cell(cell)
        yield line, row


def _jsonl_rows(path: str, handle):
    """Yield (line number, row dict or IngestError) for each non-blank line of a JSONL file."""
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            yield line, IngestError(f"invalid JSON: {exc.msg} at column {exc.colno}", line)
            continue
        except (ValueError, RecursionError) as exc:    # a number of 4,300+ digits, deep nesting
            yield line, IngestError(f"invalid JSON: {str(exc).split(':')[0]}", line)
            continue
        if not isinstance(row, dict):
            yield line, IngestError(f"expected a JSON object, got {_json_kind(row)}", line)
            continue
        yield line, row


def parse_cell(text: str):
    """Type a CSV cell: int, float, bool (true/false) or the text itself."""
    stripped = text.strip()
    if _INT.fullmatch(stripped):
        try:
            return int(stripped)
        except ValueError:                  # more digits than int() reads: keep the text
            return text
    if _FLOAT.fullmatch(stripped):
        return float(stripped)
    lowered = stripped.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return text


# --------------------------------------------------------------------------- errors

def _json_kind(value) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _file_error(path: str, message: str, row: int | None = None,
                field: str | None = None) -> IngestError:
    err = IngestError(f"{message} (file {path})", row, field)
    err.path = path
    return err


def _located(path: str, line: int, err: IngestError) -> IngestError:
    """Re-issue a row error with the file and line number."""
    located = IngestError(f"{err.reason} (file {path}, line {line})", line, err.field)
    located.path = path
    return located


__all__ = ["read_events", "iter_events", "parse_cell", "SUPPORTED_EXTENSIONS"]
