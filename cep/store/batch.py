"""Column batches: the rows of one input batch kept as columns, an Event made for a row only
when something asks for it (issue 14: "Event objects materialised only for events that end up
in a match").

A row's Event is made once and kept in ``objs``, so every caller (each index buffer holding
the row, a match, a snapshot) gets the same object: identity (``is``) is load-bearing in the
evaluator, the corrections and the output. Attribute values are decoded from Arrow to Python
per column on first need; comparisons over a column use ``numeric`` (float64 values and a kind
per row) without any Event.
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import chain, compress, repeat

import numpy as np

from raycep.cep.event import (ABSENT, EXACT, EXACT_INT, OTHER, Event, checked_key, event_row,
                              kind_of, trusted_event)

_NUMBERS = frozenset((int, float))
_FLOATS = {float}


def numeric_of(values) -> tuple:
    """``(float64 values, int8 kinds)`` of Python values (None = absent, kind 0)."""
    n = len(values)
    classes = set(map(type, values))
    if classes and classes <= _NUMBERS and (classes == _FLOATS or
                                           -EXACT_INT <= min(values) <= max(values) <= EXACT_INT):
        # only floats and ints float64 holds exactly (a common column): converted in C
        return np.array(values, dtype=np.float64), np.full(n, EXACT, dtype=np.int8)
    kinds = np.fromiter((ABSENT if v is None else kind_of(v) for v in values),
                        dtype=np.int8, count=n)
    vals = np.zeros(n, dtype=np.float64)
    exact = kinds == EXACT
    if exact.any():
        vals[exact] = np.fromiter(compress(values, exact.tolist()), dtype=np.float64)
    return vals, kinds


class ColumnBatch:
    """Rows of one batch: ``types``, ``times``, ``keys`` and ``ids`` (lists, one entry per
    row; ``keys``/``ids`` None when no row has one), attribute ``names`` in batch order with
    their ``columns`` (a Python list, or a pyarrow Array decoded on first need, entry per row)
    and ``absent`` masks (numpy bool or None: rows without that attribute). ``overrides``
    ``{row: Event}``: rows whose Event was built another way (make_event's fallback); their
    type, time and key come from that Event."""

    __slots__ = ("types", "times", "keys", "ids", "names", "_columns", "_absent", "objs",
                 "_numeric", "_overrides", "_decoded", "_lists", "_rows_of", "_times",
                 "_codes", "_texts")

    def __init__(self, types: list, times: list, keys=None, ids=None, names=(), columns=(),
                 absent=None, overrides=None, codes=None):
        n = len(types)
        self.types, self.times, self.keys, self.ids = types, times, keys, ids
        self.names = list(names)
        self._columns = list(columns)
        self._absent = list(absent) if absent is not None else [None] * len(self.names)
        for j, col in enumerate(self._columns):
            if self._absent[j] is None and not isinstance(col, list) and col.null_count:
                from raycep.cep.store.arrow import valid_mask
                self._absent[j] = ~valid_mask(col)                # null = absent
        self.objs: list = [None] * n
        self._overrides = sorted(overrides) if overrides else ()
        self._decoded = None
        self._lists: dict = {}
        self._rows_of = None
        self._times = None                  # numpy event times (behind), made on first need
        self._numeric: dict = {}
        self._texts: dict = {}
        #: ``(distinct types, numpy code per row)`` when the reader has them (Arrow's
        #: dictionary encoding): the type index is made from them (``_type_rows``)
        self._codes = codes if not overrides else None
        if overrides:
            for row, ev in overrides.items():
                self.objs[row] = ev
                types[row], times[row] = ev.type, ev.ts
                if ev.key is not None and keys is None:
                    keys = self.keys = [None] * n
                if keys is not None:
                    keys[row] = ev.key

    @classmethod
    def from_events(cls, events, keep: bool = False) -> "ColumnBatch":
        """A batch holding the content of ``events``: new Events are made from it on demand,
        each with its attributes in the order of the original (which a content fingerprint
        depends on: cep.store.index); ``keep``: the rows' Events are ``events`` themselves (what
        ``raycep local`` reads row by row, evaluated in bulk as a batch)."""
        events = list(events)
        names: dict = {}
        for ev in events:
            names.update(dict.fromkeys(ev.attrs))
        if keep:
            overrides = None
        else:
            order = {name: k for k, name in enumerate(names)}
            overrides = {r: trusted_event(ev.type, ev.ts, dict(ev.attrs), ev.key, ev._id)
                         for r, ev in enumerate(events)
                         if list(ev.attrs) != sorted(ev.attrs, key=order.__getitem__)}
        columns, absent = [], []
        for name in names:
            columns.append([ev.attrs.get(name) for ev in events])
            absent.append(np.array([name not in ev.attrs for ev in events], dtype=bool))
        keys = [ev.key for ev in events]
        ids = [ev._id for ev in events]
        batch = cls([ev.type for ev in events], [ev.ts for ev in events],
                    keys if any(k is not None for k in keys) else None,
                    ids if any(i is not None for i in ids) else None, list(names), columns,
                    absent, overrides)
        if keep:
            batch.objs = events
        return batch

    def __len__(self) -> int:
        return len(self.types)

    def _decode(self) -> list:
        """``[(name, values, absent)]`` per attribute: Python values and absent flags (a list
        of bools, or None)."""
        got = self._decoded
        if got is None:
            if not all(isinstance(col, list) for col in self._columns):
                from raycep.cep.store.values import column_values         # pyarrow
            got = self._decoded = [
                (name, col if isinstance(col, list) else column_values(col).values,
                 absent.tolist() if absent is not None and absent.any() else None)
                for name, col, absent in zip(self.names, self._columns, self._absent)]
        return got

    def event(self, i: int) -> Event:
        """The Event of row ``i`` (made on the first call, the same object after)."""
        ev = self.objs[i]
        if ev is None:
            attrs = {name: values[i] for name, values, absent in self._decoded or self._decode()
                     if absent is None or not absent[i]}
            ev = self.objs[i] = trusted_event(      # the columns were checked when read
                self.types[i], self.times[i], attrs,
                self.keys[i] if self.keys is not None else None,
                self.ids[i] if self.ids is not None else None)
        return ev

    def events(self, rows=None) -> list:
        """The Events of ``rows`` (positions; all rows when None), in that order."""
        objs = self.objs
        if rows is None:
            n = len(objs)
            if n and (not any(objs) or (self._overrides and objs.count(None) ==
                                        n - len(self._overrides))):
                made = self._build()                    # none made yet (but the overrides):
                for i in self._overrides:               # all of them at once
                    made[i] = objs[i]
                objs[:] = made
                return made
            rows = range(n)
        missing = [i for i in rows if objs[i] is None]
        if len(missing) > 4:
            self._make(missing)
        elif missing:
            for i in missing:
                self.event(i)
        return [objs[i] for i in rows]

    def _make(self, rows: list):
        """Make the Events of ``rows`` (none made yet) in bulk."""
        objs = self.objs
        for i, ev in zip(rows, self._build(rows)):
            objs[i] = ev

    def _build(self, rows=None) -> list:
        """New Events of ``rows`` (all rows when None), in that order, built column-wise."""
        return list(map(trusted_event, *self._fields(rows)))

    def rows(self, rows: list) -> list:
        """``[type, ts, key, attrs, id]`` of ``rows`` (positions), in that order, without
        making Events (cep.event.event_row of those made: a made Event is the truth for its
        row): what a checkpoint writes of evicted rows."""
        objs = self.objs
        made = [i for i, k in enumerate(rows) if objs[k] is not None]
        if len(made) == len(rows):
            return [event_row(objs[k]) for k in rows]
        types, times, attrs, keys, ids = self._fields(rows)
        out = list(map(list, zip(types, times, keys, attrs, ids)))
        for i in made:
            out[i] = event_row(objs[rows[i]])
        return out

    def _fields(self, rows=None) -> tuple:
        """``(types, times, attrs, keys, ids)`` of ``rows`` (all rows when None), each in
        that order, built column-wise (``_build``, ``rows``)."""
        if rows is None:
            n, pick = len(self.types), _whole
        else:
            n, pick = len(rows), lambda values: list(map(values.__getitem__, rows))
        decoded = self._decoded or (self._picked(rows) if rows is not None else None) or \
            self._decode()
        if decoded:
            attrs = list(map(dict, map(zip, repeat(self.names, n),
                                       zip(*[values if values.__class__ is _Picked else
                                             pick(values) for _, values, _ in decoded]))))
            for name, _, absent in decoded:
                if absent is not None:
                    for k in compress(range(n), pick(absent)):
                        del attrs[k][name]
        else:
            attrs = [{} for _ in range(n)]
        return (pick(self.types), pick(self.times), attrs,
                pick(self.keys) if self.keys is not None else repeat(None, n),
                pick(self.ids) if self.ids is not None else repeat(None, n))

    def _picked(self, rows: list):
        """``_decode()`` for ``rows`` only (values of those rows, as ``_Picked``) while no
        column is decoded yet and each is a list or a plain int64/float64 Arrow column (a few
        matched rows of a large block need not decode the block); None otherwise."""
        out = []
        for name, col, absent in zip(self.names, self._columns, self._absent):
            if isinstance(col, list):
                values = _Picked(map(col.__getitem__, rows))
            elif col.null_count == 0 and str(col.type) in ("int64", "double"):
                from raycep.cep.store.arrow import to_numpy
                values = _Picked(to_numpy(col)[rows].tolist())
            else:
                return None
            out.append((name, values, absent.tolist() if absent is not None and absent.any()
                        else None))
        return out

    def numeric(self, name: str) -> tuple:
        """``(values float64, kinds int8)`` of attribute ``name`` per row: kind ABSENT (the
        row lacks it), EXACT (a float, or an int float64 holds exactly; not a bool; the value
        is in ``values``) or OTHER (anything else: compare it as a Python value)."""
        got = self._numeric.get(name)
        if got is not None:
            return got
        n = len(self.types)
        if name not in self.names:
            vals, kinds = np.zeros(n), np.zeros(n, dtype=np.int8)
        else:
            j = self.names.index(name)
            vals, kinds = _arrow_numeric(self._columns[j], n)
            if vals is None:
                vals, kinds = numeric_of(self._decode()[j][1])
            absent = self._absent[j]
            if absent is not None:
                kinds[absent] = ABSENT
        for i in self._overrides:           # a made Event is the truth for its row
            value = self.objs[i].attrs.get(name, _MISSING)
            if value is _MISSING:
                kinds[i] = ABSENT
            else:
                k = kind_of(value)
                kinds[i] = k
                if k == EXACT:
                    vals[i] = value
        got = self._numeric[name] = (vals, kinds)
        return got

    def texts(self, name: str) -> tuple:
        """``(codes int32, {text: code})`` of attribute ``name`` per row: the code of the
        row's text where its value is a ``str``, -1 where it is anything else or absent (the
        evaluator fails a string comparison there: compare it as a Python value)."""
        got = self._texts.get(name)
        if got is not None:
            return got
        n = len(self.types)
        codes, index = None, {}
        if name not in self.names:
            codes = np.full(n, -1, dtype=np.int32)
        else:
            j = self.names.index(name)
            col = self._columns[j]
            if not isinstance(col, list):
                codes, index = _arrow_texts(col)
            if codes is None:
                values = self._decode()[j][1]
                index = {}
                put = index.setdefault
                codes = np.fromiter((put(v, len(index)) if v.__class__ is str else -1
                                     for v in values), dtype=np.int32, count=n)
            absent = self._absent[j]
            if absent is not None:
                codes[absent] = -1
        for i in self._overrides:           # a made Event is the truth for its row
            value = self.objs[i].attrs.get(name, _MISSING)
            codes[i] = index.setdefault(value, len(index)) if value.__class__ is str else -1
        got = self._texts[name] = (codes, index)
        return got

    def groups(self, lo: int, hi: int) -> dict:
        """``{type: (rows, times)}`` of rows ``lo`` to ``hi - 1``, rows ascending, types in
        the order they first come."""
        by_type = self._rows_of or self._type_rows()
        out = []
        get = self.times.__getitem__
        for t, rows in by_type.items():
            a, b = bisect_left(rows, lo), bisect_left(rows, hi)
            if b > a:
                part = rows[a:b]
                out.append((part[0], t, part, list(map(get, part))))
        out.sort()                          # types in the order they first come in the run
        return {t: (part, times) for _, t, part, times in out}

    def _type_rows(self) -> dict:
        """``{type: rows}`` (ascending) of the whole batch, kept."""
        types, n = self.types, len(self.types)
        if self._codes is not None:
            distinct, codes = self._codes
            code = {t: k for k, t in enumerate(distinct)}
        else:
            code = {t: k for k, t in enumerate(dict.fromkeys(types))}
            codes = np.fromiter(map(code.__getitem__, types), dtype=np.int64, count=n)
        order = np.argsort(codes, kind="stable")
        cuts = np.searchsorted(codes[order], np.arange(len(code) + 1)).tolist()
        order = order.tolist()
        by_type = self._rows_of = {t: order[cuts[k]:cuts[k + 1]] for t, k in code.items()}
        return by_type

    def rows_of(self, types, lo: int, hi: int) -> list:
        """The rows ``lo`` to ``hi - 1`` whose type is in ``types``, ascending."""
        parts = [rows[bisect_left(rows, lo):bisect_left(rows, hi)]
                 for t, rows in (self._rows_of or self._type_rows()).items() if t in types]
        if len(parts) == 1:
            return parts[0]
        return sorted(chain.from_iterable(parts))

    def behind(self, lo: int, hi: int) -> list:
        """The rows ``lo + 1`` to ``hi - 1`` whose event time is not after the row before."""
        times = self._times
        if times is None:
            times = self._times = np.array(self.times, dtype=np.float64)
        return (np.flatnonzero(times[lo + 1:hi] <= times[lo:hi - 1]) + (lo + 1)).tolist()

    def column(self, name: str) -> tuple:
        """``numeric(name)`` as Python lists: ``(values, odd)``, a float per row (meaningful
        where the row's kind is EXACT) and the set of the other rows."""
        got = self._lists.get(name)
        if got is None:
            vals, kinds = self.numeric(name)
            got = self._lists[name] = (vals.tolist(), set(np.flatnonzero(kinds != EXACT).tolist()))
        return got

    def key_by(self, attr: str) -> None:
        """Give the rows of a batch without keys their attribute ``attr`` as the partition
        key (``keyed_events``' rule: a row without the attribute keeps no key), so that an
        engine keyed by ``attr`` evaluates them in bulk per key. IngestError for a value
        that cannot be a key. Nothing changes for a batch that has keys, has no such
        attribute, or holds rows built as Events (``overrides``)."""
        if self.keys is not None or self._overrides or attr not in self.names:
            return
        j = self.names.index(attr)
        col = self._columns[j]
        values = col if isinstance(col, list) else col.to_pylist()
        absent = self._absent[j]
        if absent is not None:
            values = [None if gone else v for v, gone in zip(values, absent.tolist())]
        if any(v.__class__ is not str for v in values):
            values = [None if v is None else checked_key(v, k, attr)
                      for k, v in enumerate(values)]
        self.keys = values

    def slice(self, a: int, b: int) -> "ColumnBatch":
        """Rows ``a`` to ``b - 1`` as a batch of their own (sharing no Event cache: take rows
        of a batch through one of its slices only)."""
        part = ColumnBatch.__new__(ColumnBatch)
        part.types, part.times = self.types[a:b], self.times[a:b]
        part.keys = self.keys[a:b] if self.keys is not None else None
        part.ids = self.ids[a:b] if self.ids is not None else None
        part.names = self.names
        part._columns = [c[a:b] for c in self._columns]
        part._decoded = [(name, values[a:b], absent[a:b] if absent is not None else None)
                         for name, values, absent in self._decoded] \
            if self._decoded is not None else None
        part._absent = [m[a:b] if m is not None else None for m in self._absent]
        part.objs = self.objs[a:b]
        part._numeric = {k: (v[a:b], t[a:b]) for k, (v, t) in self._numeric.items()}
        part._lists = {}
        part._texts = {k: (c[a:b], d) for k, (c, d) in self._texts.items()}
        part._rows_of = part._times = None
        part._codes = (self._codes[0], self._codes[1][a:b]) if self._codes is not None \
            else None
        part._overrides = [i - a for i in self._overrides if a <= i < b]
        return part


_MISSING = object()


class _Picked(list):
    """Attribute values of the rows being built (ColumnBatch._picked), not of the batch."""

    __slots__ = ()


def _whole(values):
    return values


def _arrow_texts(col) -> tuple:
    """``ColumnBatch.texts`` straight from a text Arrow column (nulls -1), or ``(None, {})``
    for anything else."""
    from raycep.cep.store.values import is_text, plain_array
    import pyarrow.compute as pc
    from raycep.cep.store.arrow import to_numpy, valid_mask
    arr = plain_array(col)
    if not is_text(arr.type):
        return None, {}
    encoded = pc.dictionary_encode(arr)
    texts = encoded.dictionary.to_pylist()
    codes = to_numpy(encoded.indices).astype(np.int32)
    if arr.null_count:
        codes[~valid_mask(encoded.indices)] = -1
    return codes, {t: k for k, t in enumerate(texts)}


def _arrow_numeric(col, n: int) -> tuple:
    """``(values, kinds)`` straight from an int/float Arrow column (nulls absent), or
    ``(None, None)`` for anything else."""
    if isinstance(col, list):
        return None, None
    import pyarrow as pa
    # not to_numpy()/fill_null: see cep.store.arrow
    from raycep.cep.store.arrow import to_numpy, valid_mask
    t = col.type
    if pa.types.is_floating(t) or pa.types.is_integer(t):
        try:
            raw = to_numpy(col)
        except KeyError:                             # float16: from Python values
            return None, None
        vals = raw.astype(np.float64)
        kinds = np.full(n, EXACT, dtype=np.int8)
        if pa.types.is_integer(t):
            big = raw > np.uint64(EXACT_INT) if pa.types.is_unsigned_integer(t) else \
                (raw > EXACT_INT) | (raw < -EXACT_INT)
            kinds[big] = OTHER
        if col.null_count:
            nulls = ~valid_mask(col)
            vals[nulls] = 0.0
            kinds[nulls] = ABSENT
        return vals, kinds
    return None, None
