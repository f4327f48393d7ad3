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

from raycep.cep.event import Event
from raycep.cep.match import MatchBlock, MatchMix
from raycep.cep.store.arrow import arrow_array

__all__ = ["MatchTable", "matches_table"]

_QUERY, _BASE, _NAME, _EVENT, _ORDER = (itemgetter(k) for k in range(5))
_ID, _TYPE, _TS, _KEY, _ATTRS = (attrgetter(a) for a in ("id", "type", "ts", "key", "attrs"))
_RETRACTED = attrgetter("retracted")
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_FIELDS = ("id", "type", "ts")
_TWO = b"\x92"                          # msgpack: an array of two items (cep.match.match_id)
#: byte -> its two lowercase hex digits (as uint16 in memory order)
_HEX = np.frombuffer(b"".join(b"%02x" % k for k in range(256)), dtype=np.uint16)


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
        if MatchMix in set(map(type, found)):      # several queries' blocks interleaved
            found = [m for item in found
                     for m in (item if item.__class__ is MatchMix else (item,))]
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
        names: dict = {}                # query name -> its code
        codes, retracted, variables = [], [], {}
        at = 0
        for part in self._parts:
            at += _gather(part, names, codes, retracted, variables, at, n)
        codes = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)
        queries = list(names)
        columns = {"query": arrow_array(queries, pa.string()).take(arrow_array(codes)),
                   "id": None,
                   "retracted": arrow_array(np.concatenate(retracted) if retracted else
                                            np.zeros(0, dtype=bool))}
        starts = np.full(n, np.inf)
        ends = np.full(n, -np.inf)
        fragments = []
        for name, variable in variables.items():
            if not variable.events:
                continue                            # never bound (a negated variable)
            array, first, last, parts = variable.column(name, self.time_type)
            columns[name] = array
            np.fmin(starts, first, out=starts)
            np.fmax(ends, last, out=ends)
            fragments.append((name, parts, variable.lengths > 0))
        columns["id"] = _ids(queries, codes, fragments)
        columns["start"] = _times(starts, self.time_type)
        columns["end"] = _times(ends, self.time_type)
        order = ["query", "id", "retracted", "start", "end"] + list(variables)
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


def _gather(part, names: dict, codes: list, retracted: list, variables: dict, at: int,
            n: int) -> int:
    """Adds the rows of ``part`` from row ``at`` (of ``n``): the codes of their query names
    (``names``: name -> code), their retracted flags and what they bind to each variable
    (``variables``: name -> _Variable, made on first use); returns the number of rows."""
    def variable(name):
        got = variables.get(name)
        if got is None:
            got = variables[name] = _Variable(n)
        return got

    size = len(part)
    if part.__class__ is MatchBlock:
        if part.members is None:
            codes.append(np.full(size, names.setdefault(part.query, len(names)),
                                 dtype=np.int32))
        else:                           # a group's: each match's query is a member's
            of = np.array([names.setdefault(q, len(names)) for q in part.queries],
                          dtype=np.int32)
            codes.append(of[part.members])
        retracted.append(np.zeros(size, dtype=bool))
        last = len(part.names) - 1
        for k, name in enumerate(part.names):
            if k < last:                # the events of each prefix binding, taken by prefix
                variable(name).singles(at, None, part.heads[k], part.prefix)
            else:
                variable(name).singles(at, None, part.lasts, part.last)
        return size
    for name in set(map(_QUERY, part)):
        names.setdefault(name, len(names))
    codes.append(np.fromiter(map(names.__getitem__, map(_QUERY, part)), dtype=np.int32,
                             count=size))
    retracted.append(np.fromiter(map(_RETRACTED, part), dtype=bool, count=size))
    bases, varied, events = list(map(_BASE, part)), list(map(_NAME, part)), \
        list(map(_EVENT, part))
    orders = set(map(_ORDER, part))
    bound: dict = {}
    for order in orders:
        if order is not None:
            bound.update(dict.fromkeys(order))
    if None in orders:
        bound.update(dict.fromkeys(chain.from_iterable(bases)))
        bound.update(dict.fromkeys(name for name in set(varied) if name is not None))
    for var in bound:
        cells = [event if name == var else base.get(var)
                 for base, name, event in zip(bases, varied, events)]
        if tuple in set(map(type, cells)):
            variable(var).many(at, cells)
        else:
            keys = np.fromiter(map(id, cells), dtype=np.uint64, count=size)
            present = keys != id(None)
            rows = np.flatnonzero(present)
            _, first, inverse = np.unique(keys[rows], return_index=True, return_inverse=True)
            variable(var).singles(at, present, [cells[i] for i in rows[first].tolist()],
                                  inverse.reshape(-1))
    return size


class _Variable:
    """What the rows bind to one variable name, gathered part by part: distinct Events
    (``events``, a part's events once each, a MatchBlock's per prefix binding), the number
    bound in each row (``lengths``: 0 where unbound), whether a row binds one Event (not a
    Kleene tuple: ``single``) and the index into ``events`` of each bound event, in row
    order (``codes``, a piece per part)."""

    __slots__ = ("events", "lengths", "single", "codes")

    def __init__(self, n: int):
        self.events: list = []
        self.lengths = np.zeros(n, dtype=np.int64)
        self.single = np.zeros(n, dtype=bool)
        self.codes: list = []

    def singles(self, at: int, present, events: list, codes) -> None:
        """Rows ``at`` on bind one Event each where ``present`` (None: every row of
        ``codes``): ``events[codes[k]]``, k counting the bound rows."""
        size = len(codes) if present is None else len(present)
        rows = slice(at, at + size)
        self.lengths[rows] = 1 if present is None else present
        self.single[rows] = True if present is None else present
        self.codes.append(np.asarray(codes, dtype=np.int64) + len(self.events))
        self.events.extend(events)

    def many(self, at: int, cells: list) -> None:
        """Rows ``at`` on bind ``cells``: an Event, a tuple of Events (Kleene) or None."""
        size = len(cells)
        lengths = np.fromiter((0 if c is None else 1 if c.__class__ is Event else len(c)
                               for c in cells), dtype=np.int64, count=size)
        single = np.fromiter((c.__class__ is Event for c in cells), dtype=bool, count=size)
        flat = _objects(list(chain.from_iterable(
            () if c is None else (c,) if c.__class__ is Event else c for c in cells)))
        keys = np.fromiter(map(id, flat), dtype=np.uint64, count=len(flat))
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        self.lengths[at:at + size] = lengths
        self.single[at:at + size] = single
        self.codes.append(inverse.reshape(-1).astype(np.int64) + len(self.events))
        self.events.extend(flat[first].tolist())

    def column(self, name: str, time_type) -> tuple:
        """``(array, first time, last time, id fragments)`` per row: a struct column (a
        list of structs when a row binds a Kleene tuple); times inf / -inf and fragment
        b"" where unbound; the fragment is the msgpack ``[name, id or [ids]]`` of the
        binding (cep.match.match_id)."""
        n = len(self.lengths)
        present = self.lengths > 0
        codes = np.concatenate(self.codes)
        struct = _struct(self.events, time_type)
        times = np.fromiter(map(_TS, self.events), dtype=np.float64,
                            count=len(self.events))[codes]
        pack = msgpack.Packer(use_bin_type=True).pack
        head = _TWO + pack(name)
        ids = [pack(e.id) for e in self.events]
        if self.single[present].all():                  # one event per bound row
            rows = np.zeros(n, dtype=np.int64)
            rows[present] = codes
            array = struct.take(arrow_array(rows, mask=~present))
            first = np.where(present, 0.0, np.inf)
            first[present] = times
            last = np.where(present, first, -np.inf)
            packed = _objects([head + i for i in ids])
            fragments = np.where(present, packed[rows], b"")
            return array, first, last, fragments
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        array = pa.ListArray.from_arrays(arrow_array(offsets.astype(np.int32)),
                                         struct.take(arrow_array(codes)),
                                         mask=arrow_array(~present))
        starts = offsets[:-1][present]
        first = np.full(n, np.inf)
        last = np.full(n, -np.inf)
        first[present] = np.minimum.reduceat(times, starts)
        last[present] = np.maximum.reduceat(times, starts)
        fragments = []
        for k, a, b in zip(self.single.tolist(), offsets[:-1].tolist(), offsets[1:].tolist()):
            if a == b:
                fragments.append(b"")
            elif k:
                fragments.append(head + ids[codes[a]])
            else:
                fragments.append(head + _array_header(b - a) + b"".join(
                    map(ids.__getitem__, codes[a:b].tolist())))
        return array, first, last, _objects(fragments)


def _array_header(n: int) -> bytes:
    return bytes((0x90 | n,)) if n < 16 else msgpack.Packer().pack_array_header(n)


def _ids(queries: list, codes: np.ndarray, fragments: list) -> pa.Array:
    """``match_id`` of every row (``codes``: the row's query in ``queries``): blake2b of
    msgpack ``[query, [[var, id or ids], ...]]`` (bound variables by name), assembled from
    fragments packed once per query and event; the digests written as hex in bulk."""
    pack = msgpack.Packer(use_bin_type=True).pack
    body = _objects([_TWO + pack(q) for q in queries])[codes]
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
    digests = np.frombuffer(b"".join([blake2b(b, digest_size=12).digest()
                                      for b in body.tolist()]), dtype=np.uint8)
    text = _HEX[digests].tobytes()           # two hex digits per byte
    n = len(codes)
    offsets = np.arange(0, 24 * n + 1, 24, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(text)])


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
