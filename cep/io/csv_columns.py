"""A block of simple CSV lines typed column by column in Python: a ``ColumnBatch`` of list
columns, no Event and no ``make_event`` call per row, no pyarrow.

``raycep local`` reads a file of ``ROW_BATCH_BYTES`` to ``ROW_READ_BYTES`` this way
(``cep.io.sources``): importing pyarrow would cost more time and memory than it saves there, and
building one Event per row cost ~5 us a row. Every cell is typed as the row-by-row reader types
it (``parse_cell``, once per distinct cell text; ``float`` for the time) and checked as
``make_event`` checks it, on the distinct values of each column; a block with anything the
checks do not pass (a missing type or time, a number that is not finite or too large, a line
with the wrong number of cells, a blank line, an ``attrs`` column) gives None, and the caller
reads it row by row, which reports the bad rows exactly as before.
"""
from __future__ import annotations

from itertools import repeat

import numpy as np

from raycep.cep.errors import IngestError
from raycep.cep.event import _INT_MAX, _INT_MIN
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.timestamps import event_time
from raycep.cep.store.batch import ColumnBatch

#: columns make_event reads as text (stripped), not as typed cells
_TEXT = ("type", "ts", "id")


def csv_block_batch(header: list, text: str, first: int, key_attr, ts_unit: str):
    """``(ColumnBatch, line numbers)`` of ``text`` (whole lines of a block that Python's csv
    module splits at every comma, CRLF made LF; ``first`` the number of its first line), or
    None when a line is blank, has the wrong number of cells or would be a bad row."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    width = len(header)
    if not lines or "attrs" in header or \
            set(map(str.count, lines, repeat(","))) != {width - 1}:
        return None
    cells = ",".join(lines).split(",")
    columns = {name: cells[j::width] for j, name in enumerate(header)}
    n = len(lines)
    numbers = list(range(first, first + n))
    types = list(map(str.strip, columns["type"]))
    if "" in types:
        return None
    times = _times(columns["ts"], ts_unit, numbers)
    if times is None:
        return None
    ids = None
    if "id" in columns:
        ids = [cell.strip() if cell else None for cell in columns["id"]]
    key_is_field = key_attr is None or key_attr == "key"
    names, values, absent = [], [], []
    for name, column in columns.items():
        if name in _TEXT or (key_is_field and name == "key"):
            continue
        typed = _typed(column)
        if typed is None:
            return None
        names.append(name)
        values.append(typed[0])
        absent.append(typed[1])
    keys = None
    if key_is_field:
        if "key" in columns:
            typed = _typed(columns["key"])
            if typed is None or (key_attr is not None and typed[1] is not None):
                return None                                 # a missing key is a bad row
            keys = typed[0]
        elif key_attr is not None:
            return None
    else:
        if key_attr not in names or absent[names.index(key_attr)] is not None:
            return None
        keys = values[names.index(key_attr)]
    batch = ColumnBatch(types, times, keys, ids if ids and any(i is not None for i in ids)
                        else None, names, values, absent)
    return batch, numbers


def _times(cells: list, ts_unit: str, numbers: list):
    """The event times of a ts column (as make_event reads them), or None if one is bad."""
    texts = list(map(str.strip, cells))
    try:
        if ts_unit != "s":
            texts = list(map(event_time, texts, repeat(ts_unit), numbers))
        times = list(map(float, texts))
    except (ValueError, OverflowError, IngestError):
        return None
    if not np.isfinite(np.array(times, dtype=np.float64)).all():
        return None
    return times


def _typed(column: list):
    """``(values, absent mask or None)`` of a column of cells typed by parse_cell (an empty
    cell: absent, value None), or None when a value would make its row bad."""
    typed = {cell: parse_cell(cell) for cell in set(column)}
    empty = typed.pop("", _NONE) is not _NONE
    for value in typed.values():
        cls = value.__class__
        if (cls is float and value - value != 0.0) or \
                (cls is int and not _INT_MIN <= value <= _INT_MAX):
            return None
    if empty:
        typed[""] = None
        mask = np.fromiter(map("".__eq__, column), dtype=bool, count=len(column))
    else:
        mask = None
    return list(map(typed.__getitem__, column)), mask


_NONE = object()
