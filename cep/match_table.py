"""Matches as an Arrow table, built column by column: one row per match (a Match, a
Retraction, or each match of a cep.match.MatchBlock), in the order the engine found them.

Columns:

* ``query`` (string), ``id`` (string: ``cep.match.match_id``, the id the gateway and the
  client give the match), ``retracted`` (bool: a Retraction cancels the match of that id);
* ``start``, ``end``: the time of the match's first and last event: float seconds, or the
  Arrow timestamp type of the input's event times (``time_type``);
* one column per variable name of the queries, in the order they first come: a struct
  ``{id, type, ts, key, <attributes>}`` (``key`` only when an event has a partition key;
  ``ts`` as ``start``) for a single event, a list of such structs for a Kleene variable (a
  name that is Kleene in one query and single in another: a list in every row). Null where
  the row's query has no such variable, or does not bind it (a negated variable, the other
  branch of an OR); a field is null where that event lacks the attribute.

An attribute field is typed by the values it holds: int64 (uint64 beyond), float64 (ints and
floats together), bool, string, binary; any other mix (text and numbers, lists, maps) as
their JSON text. The table converts to pandas (``to_pandas()``: structs as dicts) or polars
(``pl.from_arrow``); ``table.flatten()`` gives a column per field (``a.price``).

Each distinct event of a variable is made into a struct row once and taken into the rows of
its matches by index (a MatchBlock's events per prefix binding, not per match); a match's id
is the hash of fragments packed once per distinct event. Nothing goes through a Python dict
per match or through JSON.
"""
from __future__ import annotations

import hashlib
from itertools import chain
from operator import attrgetter, itemgetter

import msgpack
import numpy as np
import orjson
import pyarrow as pa

from cep.arrow import arrow_array
from cep.event import Event
from cep.match import MatchBlock

__all__ = ["MatchTable", "matches_table"]

_QUERY, _BASE, _NAME, _EVENT, _ORDER = (itemgetter(k) for k in range(5))
_ID, _TYPE, _TS, _KEY, _ATTRS = (attrgetter(a) for a in ("id", "type", "ts", "key", "attrs"))
_RETRACTED = attrgetter("retracted")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_FIELDS = ("id", "type", "ts")
_TWO = b"\x92"                          # msgpack: an array of two items (cep.match.match_id)


class MatchTable:
    """Collects what an engine returns (``add``, chunk after chunk) and makes the table
    (``table``). ``time_type``: the Arrow timestamp type of the times (None: float
    seconds)."""

    def __init__(self, time_type=None):
        self.time_type = time_type
        self.rows = 0
        self._parts: list = []          # MatchBlock, or a list of Match / Retraction

    def add(self, found) -> int:
        """Keeps the matches of ``found`` (a list of Match, Retraction and MatchBlock
        entries, as ``Engine.process_columns(..., blocks=True)`` returns); returns how many
        matches it holds."""
        if not found:
            return 0
        if MatchBlock not in set(map(type, found)):
            self._parts.append(list(found))
            n = len(found)
        else:
            n, run = 0, []
            for item in found:
                if item.__class__ is MatchBlock:
                    if run:
                        self._parts.append(run)
                        run = []
                    self._parts.append(item)
                    n += len(item)
                else:
                    run.append(item)
                    n += 1
            if run:
                self._parts.append(run)
        self.rows += n
        return n

    def table(self) -> pa.Table:
        """The table of every match added so far."""
        n = self.rows
        queries, retracted, cells = [], [], {}
        at = 0
        for part in self._parts:
            size = _cells(part, queries, retracted, cells, at, n)
            at += size
        columns = {"query": arrow_array(queries, pa.string()),
                   "id": None,
                   "retracted": arrow_array(np.concatenate(retracted) if retracted else
                                            np.zeros(0, dtype=bool))}
        starts = np.full(n, np.inf)
        ends = np.full(n, -np.inf)
        fragments = []
        for name, values in cells.items():
            column = _Column(name, values, self.time_type)
            if column.array is None:
                continue                            # never bound (a negated variable)
            columns[name] = column.array
            np.fmin(starts, column.starts, out=starts)
            np.fmax(ends, column.ends, out=ends)
            fragments.append((name, column.fragments, column.present))
        columns["id"] = arrow_array(_ids(queries, fragments, n), pa.string())
        columns["start"] = _times(starts, self.time_type)
        columns["end"] = _times(ends, self.time_type)
        order = ["query", "id", "retracted", "start", "end"] + list(cells)
        names = [name for name in order if name in columns]
        return pa.Table.from_arrays([columns[name] for name in names], names=names)


def matches_table(matches, time_type=None) -> pa.Table:
    """The table of ``matches`` (Match, Retraction or MatchBlock entries); ``time_type``: the
    Arrow timestamp type of the times (None: float seconds)."""
    table = MatchTable(time_type)
    table.add(list(matches))
    return table.table()


def _objects(values) -> np.ndarray:
    """A numpy object array of ``values`` (tuples stay elements)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _cells(part, queries: list, retracted: list, cells: dict, at: int, n: int) -> int:
    """Adds the rows of ``part`` from row ``at``: their query names and retracted flags, and
    per variable the Event, tuple of Events or None of each row (``cells``: variable ->
    object array of all ``n`` rows, made on first use)."""
    def column(name):
        values = cells.get(name)
        if values is None:
            values = cells[name] = np.full(n, None, dtype=object)
        return values

    if part.__class__ is MatchBlock:
        size = len(part)
        queries.extend([part.query] * size)
        retracted.append(np.zeros(size, dtype=bool))
        last = len(part.names) - 1
        for k, name in enumerate(part.names):
            if k < last:
                column(name)[at:at + size] = _objects(part.heads[k])[part.prefix]
            else:
                column(name)[at:at + size] = _objects(part.lasts)[part.last]
        return size
    size = len(part)
    queries.extend(map(_QUERY, part))
    retracted.append(np.fromiter(map(_RETRACTED, part), dtype=bool, count=size))
    bases, names, events = list(map(_BASE, part)), list(map(_NAME, part)), list(map(_EVENT, part))
    variables: dict = {}
    for order in set(map(_ORDER, part)):
        if order is not None:
            variables.update(dict.fromkeys(order))
    if None in set(map(_ORDER, part)):
        variables.update(dict.fromkeys(chain.from_iterable(bases)))
        variables.update(dict.fromkeys(name for name in set(names) if name is not None))
    for var in variables:
        column(var)[at:at + size] = _objects(
            [event if name == var else base.get(var)
             for base, name, event in zip(bases, names, events)])
    return size


class _Column:
    """One variable's column of the table: ``array`` (None when no row binds it), the
    first/last event time per row (``starts``/``ends``: inf/-inf where unbound), the packed
    ``(variable, id or ids)`` of each row for its match id (``fragments``) and which rows
    bind it (``present``)."""

    def __init__(self, name: str, values: np.ndarray, time_type):
        n = len(values)
        self.present = np.fromiter(map(id, values), dtype=np.uint64, count=n) != id(None)
        self.array = None
        if not self.present.any():
            return
        pack = msgpack.Packer(use_bin_type=True).pack
        head = _TWO + pack(name)
        kinds = set(map(type, values))
        if tuple not in kinds:
            events, codes = _distinct(values, self.present)
            struct = _struct(events, time_type)
            take = arrow_array(codes, pa.int64(), mask=~self.present)
            self.array = struct.take(take)
            times = np.fromiter(map(_TS, events), dtype=np.float64, count=len(events))
            self.starts = np.where(self.present, times[codes], np.inf)
            self.ends = np.where(self.present, self.starts, -np.inf)
            packed = _objects([head + pack(e.id) for e in events])
            self.fragments = np.where(self.present, packed[codes], b"")
            return
        lengths = np.fromiter((0 if v is None else 1 if v.__class__ is Event else len(v)
                               for v in values), dtype=np.int64, count=n)
        flat = list(chain.from_iterable(() if v is None else (v,) if v.__class__ is Event
                                        else v for v in values))
        events, codes = _distinct(_objects(flat), None)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        items = _struct(events, time_type).take(arrow_array(codes, pa.int64()))
        self.array = pa.ListArray.from_arrays(arrow_array(offsets.astype(np.int32), pa.int32()),
                                              items, mask=arrow_array(~self.present))
        times = np.fromiter(map(_TS, events), dtype=np.float64, count=len(events))[codes]
        firsts = offsets[:-1][self.present]
        self.starts = np.full(n, np.inf)
        self.ends = np.full(n, -np.inf)
        if len(times):
            self.starts[self.present] = np.minimum.reduceat(times, firsts)
            self.ends[self.present] = np.maximum.reduceat(times, firsts)
        ids = [pack(e.id) for e in events]
        fragments = []
        for v, a, b in zip(values.tolist(), offsets[:-1].tolist(), offsets[1:].tolist()):
            if v is None:
                fragments.append(b"")
            elif v.__class__ is Event:
                fragments.append(head + ids[codes[a]])
            else:
                fragments.append(head + _array_header(b - a) + b"".join(
                    map(ids.__getitem__, codes[a:b].tolist())))
        self.fragments = _objects(fragments)


def _array_header(n: int) -> bytes:
    return bytes((0x90 | n,)) if n < 16 else msgpack.Packer().pack_array_header(n)


def _distinct(values: np.ndarray, present) -> tuple:
    """``(distinct Events, index of each value's among them)`` by identity (absent rows,
    where ``present`` is False, get index 0)."""
    if present is not None and not present.all():
        events, codes = _distinct(values[present], None)
        out = np.zeros(len(values), dtype=np.int64)
        out[present] = codes
        return events, out
    keys = np.fromiter(map(id, values), dtype=np.uint64, count=len(values))
    _, first, codes = np.unique(keys, return_index=True, return_inverse=True)
    return values[first].tolist(), codes.reshape(-1)


def _ids(queries: list, fragments: list, n: int) -> list:
    """``match_id`` of every row: blake2b of msgpack ``[query, [[var, id or ids], ...]]``
    (bound variables by name), assembled from fragments packed once per query and event."""
    pack = msgpack.Packer(use_bin_type=True).pack
    heads = {q: _TWO + pack(q) for q in set(queries)}
    body = _objects(list(map(heads.__getitem__, queries)))
    if fragments:
        fragments.sort(key=itemgetter(0))
        count = np.sum([present for _, _, present in fragments], axis=0, dtype=np.int64)
        headers = _objects([_array_header(k) for k in range(len(fragments) + 1)])
        body = body + headers[count]
        for _, parts, _ in fragments:
            body = body + parts
    else:
        body = body + _array_header(0)
    blake2b = hashlib.blake2b
    return [blake2b(b, digest_size=12).hexdigest() for b in body.tolist()]


def _times(seconds: np.ndarray, time_type) -> pa.Array:
    """Event times (float seconds) as float64, or as ``time_type`` (an Arrow timestamp):
    the tick nearest each time, and in nanoseconds the whole microsecond whose time (as the
    input was read: correctly rounded) is that float, where one is (float seconds hold
    ~0.2 us today: a time given in ms or us comes back exactly)."""
    if time_type is None:
        return arrow_array(np.ascontiguousarray(seconds, dtype=np.float64))
    ticks = np.round(seconds * _PER_SECOND[time_type.unit]).astype(np.int64)
    if time_type.unit == "ns":
        micros = np.round(seconds * 1e6)
        exact = micros / 1e6 == seconds
        ticks[exact] = micros[exact].astype(np.int64) * 1000
    return pa.Array.from_buffers(time_type, len(ticks), [None, pa.py_buffer(ticks)])


def _struct(events: list, time_type) -> pa.StructArray:
    """The struct rows of ``events``: id, type, ts, key (when an event has one), then the
    attributes in the order they first come (an attribute named like a field is shown as
    ``Event.to_dict`` shows it: ``key`` wins over the partition key, the others lose)."""
    n = len(events)
    attrs = list(map(_ATTRS, events))
    names = dict.fromkeys(chain.from_iterable(attrs))
    keys = list(map(_KEY, events))
    fields = {"id": arrow_array([e.id for e in events], pa.string()),
              "type": arrow_array(list(map(_TYPE, events)), pa.string()),
              "ts": _times(np.fromiter(map(_TS, events), dtype=np.float64, count=n),
                           time_type)}
    if "key" in names:
        fields["key"] = _values([a["key"] if "key" in a else k for a, k in zip(attrs, keys)])
    elif any(k is not None for k in keys):
        fields["key"] = _values(keys)
    for name in names:
        if name not in fields and name not in _FIELDS:
            fields[name] = _values([a.get(name) for a in attrs])
    return pa.StructArray.from_arrays(list(fields.values()), names=list(fields))


def _values(values: list) -> pa.Array:
    """An Arrow column of attribute values (None = null), typed by what it holds (see the
    module docstring)."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if not kinds:
        return pa.nulls(len(values))
    try:
        if kinds == {str}:
            return arrow_array(values, pa.string())
        if kinds == {bool}:
            return arrow_array(values, pa.bool_())
        if kinds == {int}:
            try:
                return arrow_array(values, pa.int64())
            except OverflowError:
                return arrow_array(values, pa.uint64())
        if kinds <= {int, float}:
            return arrow_array([None if v is None else float(v) for v in values], pa.float64())
        if kinds == {bytes}:
            return arrow_array(values, pa.binary())
    except (OverflowError, ValueError, pa.ArrowException):
        pass
    return arrow_array([None if v is None else orjson.dumps(v, default=str).decode()
                        for v in values], pa.string())
