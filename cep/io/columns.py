"""Events from Arrow columns in bulk, and columns from events.

The columnar wire format (cep.io.codec, schema version 2) and the file readers (cep.io.sources)
share this module. The rules stay those of ``cep.event.make_event``: each column is checked once (a
string or integer column needs no check, a float column is checked for NaN / infinity in one
vectorised pass), events are built from whole columns (one ``to_pylist`` per column, then
zip), and only the rows a check flags are rebuilt as a mapping and passed to ``make_event`` (or
``cep.io.codec.decode_row`` for the wire), which accepts them or raises the IngestError the
row-by-row path raises. So a table gives the same events, ids and errors as its rows would.
``build_columns`` keeps the good rows as a ``cep.store.batch.ColumnBatch`` instead (attribute
columns stay Arrow until asked for, Events are made per row on demand).

A table has the columns ``type``, ``ts``, optional ``id``, ``key`` and ``attrs`` (a map of
further attributes, as in make_event), every other column is an attribute; null = absent.
Arrow columns have one type, so an attribute column whose values are of several kinds (7 in
one row, 7.5 or "n/a" in another) is a dense union with one child per kind, named ``str``,
``int`` (int64), ``uint`` (2**63 .. 2**64-1), ``float``, ``bool``, ``bytes``, ``bigint`` (an
integer beyond 64 bits as decimal text: a bad row, as make_event says) and ``msgpack``
(anything else, msgpack-packed: null as a value, lists, maps); a null child value, or the
child ``absent`` of type null, means the attribute is absent. A column of one kind is a plain
Arrow column of that type. Python types survive exactly: int stays int, float float, bool bool.

CSV cells are typed by ``typed_column`` with the rules of ``cep.io.cells.parse_cell`` applied
to every cell: strict ASCII patterns (``-42``, ``4.2``, ``1e3``, ``true``) are converted with
pyarrow.compute in one pass, any other cell goes through ``parse_cell`` itself (once per
distinct text), so a column gives exactly what ``parse_cell`` gives cell by cell.
"""
from __future__ import annotations

import datetime as dt
import gc
from itertools import compress

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycep.cep.errors import IngestError
from raycep.cep.event import Event, make_event
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.timestamps import bulk_seconds, event_time, timestamp_seconds
from raycep.cep.store.arrow import arrow_array, to_numpy, true_mask, valid_mask
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.values import NULL, Column, column_values, is_text, plain_array

#: the characters Python's str.strip() removes (all of them are below U+3001)
_PY_SPACE = "".join(ch for ch in map(chr, range(0x3001)) if ch.isspace())

# Cells these patterns match are typed in bulk; every other cell goes through parse_cell.
# Bounded digit counts keep the bulk values in range: int64, and finite floats.
_INT_FAST = r"^-?[0-9]{1,18}$"
_MANTISSA = r"(?:[0-9]{1,20}\.[0-9]{0,20}|\.[0-9]{1,20})"
_EXPONENT = r"[eE][+-]?[0-9]{1,2}"
_FLOAT_FAST = rf"^[+-]?(?:{_MANTISSA}(?:{_EXPONENT})?|[0-9]{{1,20}}{_EXPONENT})$"
_BOOL_FAST = r"^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"
#: an event time given as text: an integer or a float, read as a float
_TS_FAST = rf"^[+-]?(?:{_MANTISSA}|[0-9]{{1,20}})(?:{_EXPONENT})?$"

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -2 ** 63, 2 ** 63 - 1, 2 ** 64 - 1

#: union children: kind -> Arrow type
_KIND_TYPES = {"str": pa.string(), "int": pa.int64(), "uint": pa.uint64(),
               "float": pa.float64(), "bool": pa.bool_(), "bytes": pa.binary(),
               "bigint": pa.string(), "msgpack": pa.binary(), "absent": pa.null()}
#: kinds whose values make_event must see (a bad value, or one it converts or walks)
_CHECKED_KINDS = ("bigint", "msgpack")

#: absent cell while building columns
_ABSENT = object()

_ROLES = ("type", "ts", "id")


# --------------------------------------------------------------------------- small helpers

#: scalars for pyarrow.compute, made without pa.scalar (see cep.store.arrow)
_EMPTY_TEXT = arrow_array([""], pa.string())[0]


def _null_scalar(arrow_type):
    return pa.nulls(1, arrow_type)[0]


def _match(arr, pattern: str) -> np.ndarray:
    """Cells of ``arr`` that ``pattern`` (``_TS_FAST``) matches; cells a byte check proves to
    match it (the common ``123`` / ``-123`` / ``12.34``, see ``_shapes``) skip the regular
    expression."""
    ints, floats = _shapes(arr)
    sure = ints | floats
    if sure.all():
        return sure
    return _matched(arr, pattern, sure, np.flatnonzero(~sure))


def _matched(arr, pattern: str, hits: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """``hits`` (a mask, changed) with the cells at positions ``cells`` that ``pattern``
    matches set (pyarrow's regular expressions over those cells only)."""
    if len(cells):
        hits[cells] = true_mask(pc.match_substring_regex(arr.take(arrow_array(cells)), pattern))
    return hits


def _shapes(arr) -> tuple:
    """``(ints, floats)``: the cells of a string array that surely match ``_INT_FAST`` (an
    optional ``-`` and 1-18 digits: exactly that pattern) and ``_FLOAT_FAST`` (1-20 digits, a
    dot, 1-20 digits), by a vectorised look at their bytes, both from one pass."""
    n = len(arr)
    _, offsets, data = arr.buffers()[:3]
    offsets = np.frombuffer(offsets, dtype=np.int32)[arr.offset:arr.offset + n + 1]
    if data is None or not n or offsets[-1] <= offsets[0]:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    data = np.frombuffer(data, dtype=np.uint8)[:offsets[-1]]
    other = np.empty(len(data) + 1, dtype=np.int32)       # running count of non-digits
    other[0] = 0
    np.cumsum((data - np.uint8(48)) > 9, dtype=np.int32, out=other[1:])    # (wraps below '0')
    starts, ends = offsets[:-1], offsets[1:]
    length = ends - starts
    odd = other[ends] - other[starts]                      # bytes that are not digits
    first = np.where(length > 0, data[np.minimum(starts, len(data) - 1)], 0)
    minus = first == 45
    ints = (odd == minus) & (length - minus >= 1) & (length - minus <= 18)
    if (odd == 1).any():
        dots = other                                        # reused: running count of dots
        np.cumsum(data == 46, dtype=np.int32, out=dots[1:])
        one_dot = (odd == 1) & (dots[ends] - dots[starts] == 1)
        last = np.where(length > 0, data[np.maximum(ends - 1, 0)], 0)
        floats = one_dot & (first != 46) & (last != 46) & (length <= 21)
    else:
        floats = np.zeros(n, dtype=bool)
    if arr.null_count:
        valid = true_mask(pc.is_valid(arr))
        ints &= valid
        floats &= valid
    return ints, floats


def _strings(arr) -> pa.Array:
    arr = plain_array(arr)
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    if not pa.types.is_string(arr.type):
        raise IngestError(f"expected a column of strings, got {arr.type}")
    return arr


def _edge_bytes(arr) -> tuple:
    """First and last byte of every cell of a string array (0 for an empty or null cell)."""
    n = len(arr)
    validity, offsets, data = arr.buffers()[:3]
    offsets = np.frombuffer(offsets, dtype=np.int32)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    filled = ends > starts
    first = np.zeros(n, dtype=np.uint8)
    last = np.zeros(n, dtype=np.uint8)
    first[filled] = data[starts[filled]]
    last[filled] = data[ends[filled] - 1]
    return first, last


#: bytes that may begin or end a cell Python's str.strip() changes (ASCII whitespace and
#: the lead/trail bytes of non-ASCII characters)
_EDGE = np.zeros(256, dtype=bool)
_EDGE[[ord(ch) for ch in _PY_SPACE if ord(ch) < 128]] = True
_EDGE[128:] = True
#: bytes that may begin a cell _INT_FAST / _FLOAT_FAST / _BOOL_FAST match
_NUMERIC_START = np.zeros(256, dtype=bool)
_NUMERIC_START[[ord(ch) for ch in "0123456789+-."]] = True
_BOOL_START = np.zeros(256, dtype=bool)
_BOOL_START[[ord(ch) for ch in "tTfF"]] = True


def strip_text(arr) -> pa.Array:
    """Python's ``str.strip()`` applied to every cell of a string column (nulls stay)."""
    arr = _strings(arr)
    first, last = _edge_bytes(arr)
    maybe = np.flatnonzero(_EDGE[first] | _EDGE[last])
    if not maybe.size:
        return arr
    values = arr.to_pylist()
    changed = False
    for i in maybe.tolist():
        value = values[i]
        if value is not None and value != (value := value.strip()):
            values[i] = value
            changed = True
    return arrow_array(values, pa.string()) if changed else arr


# --------------------------------------------------------------------------- typing text

def typed_column(arr, empty_absent: bool = True) -> pa.Array:
    """A string column typed cell by cell with the rules of ``cep.io.cells.parse_cell``: int,
    float, bool or the text itself; null (and with ``empty_absent`` the empty string, as in a
    CSV file) is absent. Returns a plain column when all cells are of one kind, else a dense
    union (see the module docstring)."""
    arr = _strings(arr)
    n = len(arr)
    present = true_mask(pc.is_valid(arr)) if arr.null_count else np.ones(n, dtype=bool)
    if empty_absent and n:
        present &= true_mask(pc.not_equal(arr, _EMPTY_TEXT))
    first, _ = _edge_bytes(arr)
    parts = []
    rest = present
    shapes = None
    for kind, pattern, starts in (("int", _INT_FAST, _NUMERIC_START),
                                  ("float", _FLOAT_FAST, _NUMERIC_START),
                                  ("bool", _BOOL_FAST, _BOOL_START)):
        maybe = rest & starts[first]        # a cell the pattern matches starts with one of these
        if not maybe.any():
            continue
        if kind == "bool":
            hit = _matched(arr, pattern, np.zeros(n, dtype=bool), np.flatnonzero(maybe))
        else:
            if shapes is None:
                shapes = _shapes(arr)
            hit = rest & shapes[kind == "float"]
            if kind == "float":                 # the byte check is _INT_FAST exactly, not this
                hit = _matched(arr, pattern, hit, np.flatnonzero(maybe & ~hit))
        if hit.any():
            cells = arr.filter(arrow_array(hit))
            if kind == "bool":
                child = pc.match_substring_regex(cells, "^[Tt]")
            else:
                child = pc.cast(cells, _KIND_TYPES[kind])
            parts.append((kind, np.flatnonzero(hit), child))
            rest = rest & ~hit
    if rest.any():
        parts.extend(_parsed_cells(arr.filter(arrow_array(rest)), np.flatnonzero(rest)))
    return _assemble(n, parts)


def _parsed_cells(cells, positions) -> list:
    """Parts of cells the bulk patterns leave: ``parse_cell`` once per distinct text."""
    encoded = pc.dictionary_encode(cells)
    parsed = [parse_cell(text) for text in encoded.dictionary.to_pylist()]
    if all(value.__class__ is str for value in parsed):
        return [("str", positions, cells)]               # parse_cell keeps text as given
    index = to_numpy(encoded.indices)
    kinds = np.array([_kind(value) for value in parsed])
    parts = []
    for kind in np.unique(kinds).tolist():
        mask = kinds[index] == kind
        if kind == "str":
            parts.append((kind, positions[mask], cells.filter(arrow_array(mask))))
            continue
        values = [parsed[i] for i in index[mask].tolist()]
        parts.extend(_parts_from_values(positions[mask], values, None))
    return parts


# --------------------------------------------------------------------------- values -> Arrow

def _kind(value) -> str:
    cls = value.__class__
    if cls is str:
        return "str"
    if cls is float:
        return "float"
    if cls is bool:
        return "bool"
    if cls is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            return "int"
        return "uint" if 0 <= value <= _UINT64_MAX else "bigint"
    if cls is bytes:
        return "bytes"
    return "msgpack"


def _child(kind: str, values: list, positions, field) -> pa.Array:
    if kind == "bigint":
        return arrow_array([str(v) for v in values], pa.string())
    if kind == "msgpack":
        packed = []
        for pos, value in zip(positions, values):
            try:
                packed.append(msgpack.packb(None if value is NULL else value,
                                            use_bin_type=True))
            except (TypeError, ValueError, OverflowError):
                raise _unencodable(value, int(pos), field) from None
        return arrow_array(packed, pa.binary())
    try:
        return arrow_array(values, _KIND_TYPES[kind])
    except (ValueError, TypeError, OverflowError, pa.ArrowException):
        for pos, value in zip(positions, values):       # a str that is not UTF-8 (surrogates)
            try:
                arrow_array([value], _KIND_TYPES[kind])
            except (ValueError, TypeError, OverflowError, pa.ArrowException):
                raise _unencodable(value, int(pos), field) from None
        raise


def _unencodable(value, row, field) -> IngestError:
    what = f"attribute {field!r} cannot be encoded: " if field not in (None,) + _ROLES + \
        ("key",) else "cannot be encoded: "
    return IngestError(f"{what}{type(value).__name__} value {value!r}", row, field)


def _parts_from_values(positions, values: list, field, bigint: bool = True) -> list:
    """Group Python values by kind: [(kind, positions, child array)]. Without ``bigint`` an
    integer beyond 64 bits is packed (msgpack refuses it: IngestError, as version 1 says)."""
    classes = set(map(type, values))
    if len(classes) == 1:
        kind = _kind(values[0])
        if kind not in ("int", "uint", "bigint"):
            return [(kind, np.asarray(positions), _child(kind, values, positions, field))]
    groups: dict = {}
    for pos, value in zip(positions, values):
        kind = _kind(value)
        if kind == "bigint" and not bigint:
            kind = "msgpack"
        group = groups.get(kind)
        if group is None:
            group = groups[kind] = ([], [])
        group[0].append(pos)
        group[1].append(value)
    return [(kind, np.asarray(pos, dtype=np.int64), _child(kind, vals, pos, field))
            for kind, (pos, vals) in groups.items()]


def _assemble(n: int, parts: list) -> pa.Array:
    """One column of length ``n`` from (kind, positions, child) parts; rows in no part are
    absent (null)."""
    merged: dict = {}
    for kind, positions, child in parts:
        if kind in merged:
            pos0, child0 = merged[kind]
            merged[kind] = (np.concatenate([pos0, positions]), pa.concat_arrays([child0, child]))
        else:
            merged[kind] = (np.asarray(positions, dtype=np.int64), child)
    if not merged:
        return pa.nulls(n)
    if len(merged) == 1 and not merged.keys() & set(_CHECKED_KINDS):
        (positions, child), = merged.values()
        if len(positions) == n and (n == 0 or (positions[0] == 0 and
                                               np.all(np.diff(positions) == 1))):
            return child
        index = np.full(n, -1, dtype=np.int64)
        index[positions] = np.arange(len(positions))
        return child.take(arrow_array(index, mask=index < 0))
    codes = np.full(n, len(merged), dtype=np.int8)
    offsets = np.zeros(n, dtype=np.int32)
    children, names = [], []
    for code, (kind, (positions, child)) in enumerate(merged.items()):
        codes[positions] = code
        offsets[positions] = np.arange(len(positions), dtype=np.int32)
        children.append(child)
        names.append(kind)
    return dense_union(codes, offsets, children, names, len(merged))


def dense_union(codes, offsets, children: list, names: list, absent_code: int) -> pa.Array:
    """A dense union array from numpy ``codes``/``offsets`` and its children; rows whose code
    is ``absent_code`` get the null child ``absent`` (the attribute is absent there)."""
    absent = np.flatnonzero(codes == absent_code)
    if absent.size:
        offsets[absent] = np.arange(absent.size, dtype=np.int32)
        children.append(pa.nulls(absent.size))
        names.append("absent")
    return pa.UnionArray.from_dense(arrow_array(codes, pa.int8()),
                                    arrow_array(offsets, pa.int32()), children, names)


def column_from_values(values: list, field=None, none_is_absent: bool = True,
                       bigint: bool = False) -> pa.Array:
    """An Arrow column of Python values (``_ABSENT`` = absent; ``None`` absent, or with
    ``none_is_absent=False`` a present null). An integer beyond 64 bits raises IngestError,
    or with ``bigint`` is kept (the row it is in is then bad, as make_event says)."""
    n = len(values)
    classes = set(map(type, values))
    if len(classes) == 1 and n:
        cls = next(iter(classes))
        arrow_type = {str: pa.string(), float: pa.float64(), bool: pa.bool_(),
                      bytes: pa.binary(), int: pa.int64()}.get(cls)
        if arrow_type is not None:
            try:
                return arrow_array(values, arrow_type)
            except (ValueError, TypeError, OverflowError, pa.ArrowException):
                pass                                     # out of int64, bad UTF-8: below
    positions, present = [], []
    for i, value in enumerate(values):
        if value is _ABSENT or (value is None and none_is_absent):
            continue
        positions.append(i)
        present.append(NULL if value is None else value)
    if not positions:
        return pa.nulls(n)
    return _assemble(n, _parts_from_values(positions, present, field, bigint=bigint))


def table_from_events(events) -> pa.Table:
    """The columns of ``events`` (a sequence of Event): type, ts (float64), key, id (always
    written, so a receiver never re-derives it), one column per attribute in first-seen order;
    attributes named like a field (type, ts, id, key, attrs) travel in the ``attrs`` column.

    Raises IngestError naming the row and field of a value that cannot be encoded (the values
    ``cep.io.codec.encode_batch`` accepts: null, bool, int, float, str, bytes, lists/maps)."""
    events = list(events)
    n = len(events)
    for index, ev in enumerate(events):
        if not isinstance(ev, Event):
            raise IngestError(f"expected an Event, got {type(ev).__name__}", index)
    columns: dict = {}
    extra = None
    for index, ev in enumerate(events):
        for name, value in ev.attrs.items():
            if name in _ROLES or name in ("key", "attrs") or name.__class__ is not str:
                if extra is None:
                    extra = [_ABSENT] * n
                if extra[index] is _ABSENT:
                    extra[index] = {}
                extra[index][name] = value
                continue
            column = columns.get(name)
            if column is None:
                column = columns[name] = [_ABSENT] * n
            column[index] = value
    ts = [ev.ts for ev in events]
    if set(map(type, ts)) <= {float, int}:
        try:
            ts = arrow_array([float(t) for t in ts], pa.float64())
        except OverflowError:
            ts = column_from_values(ts, "ts")
    else:
        ts = column_from_values(ts, "ts")
    names = ["type", "ts", "key", "id"]
    arrays = [column_from_values([ev.type for ev in events], "type"), ts,
              column_from_values([ev.key for ev in events], "key"),
              column_from_values([ev.id for ev in events], "id")]
    for name, values in columns.items():
        names.append(name)
        arrays.append(column_from_values(values, name, none_is_absent=False))
    if extra is not None:
        names.append("attrs")
        arrays.append(column_from_values(extra, "attrs"))
    try:
        return pa.Table.from_arrays(arrays, names=names)
    except (ValueError, TypeError, pa.ArrowException) as exc:       # a name that is not UTF-8
        raise IngestError(f"columns cannot be encoded: {exc}") from None


# --------------------------------------------------------------------------- Arrow -> events

def events_from_table(table, key_attr: str | None = None, on_error=None,
                      first_row: int = 0) -> list:
    """The events of ``table`` (pyarrow Table or RecordBatch), in row order, with the
    semantics of ``make_event(row, index, key_attr)`` applied to each row (null = absent).

    A bad row raises its IngestError (row = ``first_row`` + its position), or with
    ``on_error`` is passed to it and skipped."""
    events, problems = build_events(table, key_attr, first_row=first_row)
    for _, err in problems:
        if on_error is None:
            raise err
        on_error(err)
    return events


def build_events(table, key_attr: str | None = None, *, rows=None, first_row: int = 0,
                 fallback=None, text_times: bool = True) -> tuple:
    """``(events, problems)``: the Events of ``build_columns`` (same arguments), in row
    order, and its problems."""
    batch, problems = build_columns(table, key_attr, rows=rows, first_row=first_row,
                                    fallback=fallback, text_times=text_times)
    # Only acyclic objects are made here: the collector need not run a pass per 700 of them
    # (a third of the time on a large heap).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return batch.events(), problems
    finally:
        if collecting:
            gc.enable()


def build_columns(table, key_attr: str | None = None, *, rows=None, first_row: int = 0,
                  fallback=None, text_times: bool = True) -> tuple:
    """``(batch, problems)`` of ``table``: a ``cep.store.batch.ColumnBatch`` of the good rows in
    row order (attribute columns kept as Arrow, decoded when the batch needs them) and
    ``[(position, IngestError), ...]`` for the bad ones. The row index an error names is
    ``rows[position]`` (e.g. file line numbers) or ``first_row + position``. ``fallback(row,
    index)`` builds the event of a flagged row from its mapping (default: make_event with
    ``key_attr``; the codec passes its ``decode_row``): the batch keeps that Event.
    ``text_times=False``: an event time given as text is not a number (the wire's rule), so
    such rows go to the fallback."""
    if fallback is None:
        def fallback(row, index):
            return make_event(row, index, key_attr)
    n = table.num_rows
    names = list(table.schema.names)
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise IngestError(f"column {twice!r} appears twice", field=twice)
    if n == 0:
        return ColumnBatch([], []), []
    arrays = {name: plain_array(table.column(i)) for i, name in enumerate(names)}
    raw: dict = {}          # name -> values or the Arrow column, for the flagged rows
    bad = np.zeros(n, dtype=bool)
    key_is_field = key_attr is None or key_attr == "key"

    arr = arrays.get("type")
    type_values = None
    if arr is not None:
        type_values = raw["type"] = column_values(arr).values
        if is_text(arr.type):
            if arr.null_count:
                bad |= true_mask(pc.is_null(arr))
            bad |= true_mask(pc.equal(arr, _EMPTY_TEXT))
        else:
            bad[:] = True
    else:
        bad[:] = True

    ts_values = _event_times(arrays.get("ts"), raw, bad, not text_times)

    arr = arrays.get("id")
    id_values = None
    if arr is not None and not pa.types.is_null(arr.type):
        id_values = raw["id"] = column_values(arr).values
        if not is_text(arr.type):
            bad |= np.array([v is not None for v in id_values], dtype=bool)

    attr_names, attr_columns, attr_nulls = [], [], []
    key_values = None
    key_name = "key" if key_is_field else key_attr
    if key_attr in _ROLES or key_attr == "attrs":
        bad[:] = True                                # make_event says why
    for name, arr in arrays.items():
        if name in _ROLES:
            continue
        is_key = name == key_name
        col = _checked(arr, is_key)
        column = raw[name] = col.values if col.values is not None else arr
        if col.flags is not None:
            bad |= col.flags
        if name == "attrs":
            bad |= true_mask(pc.is_valid(arr)) if not pa.types.is_union(arr.type) else \
                np.array([v is not None for v in col.values], dtype=bool)
            continue
        if is_key:
            key_values = col.values
            if key_attr is not None and col.nulls is not None:
                bad[col.nulls] = True                # the key attribute is missing
            if key_is_field:
                continue
        attr_names.append(name)
        attr_columns.append(column)
        attr_nulls.append(col.nulls)
    if key_attr is not None and key_name not in arrays:
        bad[:] = True

    flagged = np.flatnonzero(bad)
    if len(flagged) * 16 > n:            # many rows to rebuild: decode the columns now, once
        raw = {name: v if isinstance(v, list) else column_values(v).values
               for name, v in raw.items()}
        attr_columns = [raw[name] for name in attr_names]
    overrides, problems = _fallback_rows(flagged, raw, rows, first_row, fallback) \
        if len(flagged) else ({}, [])
    absent = [np.bincount(nulls, minlength=n) > 0 if nulls is not None else None
              for nulls in attr_nulls]
    lists = [type_values if type_values is not None else [None] * n,
             ts_values if ts_values is not None else [None] * n, key_values, id_values]
    if problems:                                     # the batch holds the other rows
        keep = np.ones(n, dtype=bool)
        keep[[p for p, _ in problems]] = False
        kept = keep.tolist()
        lists = [list(compress(c, kept)) if c is not None else None for c in lists]
        taken = arrow_array(keep)
        attr_columns = [list(compress(c, kept)) if isinstance(c, list) else c.filter(taken)
                        for c in attr_columns]
        absent = [m[keep] if m is not None else None for m in absent]
        row_of = np.cumsum(keep) - 1
        overrides = {int(row_of[p]): ev for p, ev in overrides.items()}
    codes = None
    arr = arrays.get("type")
    if not problems and not overrides and arr is not None and is_text(arr.type):
        encoded = pc.dictionary_encode(arr)         # the batch's type index (C++)
        codes = (encoded.dictionary.to_pylist(), to_numpy(encoded.indices))
    batch = ColumnBatch(*lists, attr_names, attr_columns, absent, overrides, codes)
    return batch, problems


def _checked(arr, key: bool = False) -> Column:
    """``column_values(arr, key)``, but a column of plain values (text, integers, booleans,
    floats, bytes; not a key) is not decoded: its ``values`` are None, its flags and nulls
    come from Arrow."""
    t = arr.type
    if key or pa.types.is_union(t):
        return column_values(arr, key)
    plain = is_text(t) or pa.types.is_integer(t) or pa.types.is_boolean(t) or \
        pa.types.is_null(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
    if not plain and not pa.types.is_floating(t):
        return column_values(arr, key)          # every present value goes to make_event
    nulls = np.flatnonzero(~valid_mask(arr)) if arr.null_count else None
    flags = None
    if pa.types.is_floating(t):
        flags = true_mask(pc.invert(pc.is_finite(arr)))
        flags = flags if flags.any() else None
    return Column(None, flags, nulls)


def _fallback_rows(flagged, raw: dict, rows, first_row: int, fallback) -> tuple:
    """``({position: Event}, [(position, IngestError)])`` of the flagged rows, each rebuilt
    as a mapping (type, ts, id, then the other columns in table order; null = absent) and
    passed to ``fallback``."""
    positions = flagged.tolist()
    picked = None
    columns = []
    for name, values in raw.items():
        if not isinstance(values, list):             # an Arrow column: decode these rows
            if picked is None:
                picked = arrow_array(flagged)
            values = column_values(values.take(picked)).values
        else:
            values = list(map(values.__getitem__, positions))
        columns.append((name, values))
    made, problems = {}, []
    for k, position in enumerate(positions):
        row = {}
        for name, values in columns:
            value = values[k]
            if value is not None:
                row[name] = None if value is NULL else value
        index = int(rows[position]) if rows is not None else first_row + position
        try:
            made[position] = fallback(row, index)
        except IngestError as err:
            problems.append((position, err))
    return made, problems


def _event_times(arr, raw: dict, bad: np.ndarray, strict: bool):
    """Float event times of the ``ts`` column; flags rows that are missing, non-finite or not
    numbers (text is read as a number unless ``strict``, the wire's rule)."""
    if arr is None:
        bad[:] = True
        return None
    t = arr.type
    if pa.types.is_floating(t):
        values = arr.to_pylist()
        raw["ts"] = values if pa.types.is_float64(t) else arr
        bad |= ~true_mask(pc.is_finite(arr))
        if not pa.types.is_float64(t):
            values = [None if v is None else float(v) for v in values]
        return values
    if pa.types.is_integer(t):
        raw["ts"] = arr
        ints = to_numpy(arr)
        if arr.null_count:
            present = valid_mask(arr)
            bad |= ~present
            ints = np.where(present, ints, 0)
        if ints.size and (ints.max() > 2 ** 53 or ints.min() < -2 ** 53):
            return [float(v) for v in ints.tolist()]
        return ints.astype(np.float64).tolist()
    if is_text(t) and not strict:
        raw["ts"] = arr
        fast = _match(arr, _TS_FAST)
        if not fast.any():
            bad[:] = True
            return [None] * len(arr)
        floats = pc.cast(pc.if_else(arrow_array(fast), arr, _null_scalar(arr.type)),
                         pa.float64())
        bad |= ~(fast & true_mask(pc.is_finite(floats)))
        return floats.to_pylist()
    raw["ts"] = column_values(arr).values
    bad[:] = True
    return raw["ts"]


# --------------------------------------------------------------------------- typed tables

def typed_table(table, empty_absent: bool = True, typed_strings: bool = True) -> pa.Table:
    """A table of source columns made ready for ``build_events``, with the rules of
    ``spark_ingest.mapping.EventMapping`` (the defaults): text in ``type``/``ts``/``id`` is
    stripped (with ``empty_absent``, an empty cell, as in CSV, is absent, not one that strips
    to nothing); text attributes are typed cell by cell (``typed_column``); timestamps (event time
    or attribute) become epoch seconds, naive ones read as UTC; dates and times become ISO
    text (a date event time: its midnight UTC); decimals become floats."""
    names, arrays = [], []
    for name, column in zip(table.schema.names, table.columns):
        arr = plain_array(column)
        t = arr.type
        if is_text(t):
            if name in _ROLES:
                if empty_absent:                        # an empty cell is absent; a blank
                    arr = pc.if_else(pc.equal(arr, _EMPTY_TEXT), _null_scalar(pa.string()), arr)
                arr = strip_text(arr)                   # one is present (an id of "")
            elif typed_strings:
                arr = typed_column(arr, empty_absent)
        elif pa.types.is_timestamp(t):
            arr = timestamp_seconds(arr)
        elif pa.types.is_date(t):
            if name == "ts":
                arr = arrow_array([None if d is None else
                                (d - dt.date(1970, 1, 1)).days * 86400.0
                                for d in arr.to_pylist()], pa.float64())
            else:
                arr = arrow_array([None if d is None else d.isoformat() for d in arr.to_pylist()],
                               pa.string())
        elif pa.types.is_time(t):
            arr = arrow_array([None if d is None else d.isoformat() for d in arr.to_pylist()],
                           pa.string())
        elif pa.types.is_decimal(t):
            arr = arrow_array([None if d is None else float(d) for d in arr.to_pylist()],
                           pa.float64())
        names.append(name)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=names)


def convert_times(table, unit: str, rows=None, first_row: int = 0) -> tuple:
    """``(table, {position: IngestError})``: ``table`` with its ``ts`` column read in ``unit``
    (``cep.io.timestamps.event_time``: ms, us, ns, iso, a strftime pattern) as float seconds, and
    the errors of the cells that are not valid times (their ``ts`` is null). Timestamp and
    date columns are left to ``typed_table``; ``unit="s"`` changes nothing."""
    names = list(table.schema.names)
    if unit == "s" or "ts" not in names:
        return table, {}
    position = names.index("ts")
    arr = plain_array(table.column(position))
    if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
        return table, {}
    read = bulk_seconds(_strings(arr) if is_text(arr.type) else arr, unit, rows, first_row)
    if read is not None:                    # numbers in a unit, ISO text: in bulk
        seconds, errors = read
        return table.set_column(position, "ts", seconds), errors
    seconds, errors = [], {}
    for i, value in enumerate(column_values(arr).values):
        if value is None or value is NULL:
            seconds.append(None)                 # absent: build_events says so
            continue
        row = int(rows[i]) if rows is not None else first_row + i
        try:
            seconds.append(event_time(value, unit, row))
        except IngestError as err:
            errors[i] = err
            seconds.append(None)
    return table.set_column(position, "ts", arrow_array(seconds, pa.float64())), errors


__all__ = ["events_from_table", "build_events", "build_columns", "convert_times",
           "table_from_events", "typed_column", "typed_table", "column_values",
           "column_from_values", "strip_text", "arrow_array"]
