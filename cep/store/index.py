"""The shared event index (LimeCEP section 4.2, "Shared TreeSet Structure"), one per process or
actor, used by every pattern manager: partition key -> event type -> time-ordered events.

Every event is stored in the buffer of its partition key and type and, while some query reads
across partitions (``keep_all``), also in its type's buffer for all partitions (``ALL``): two
references to one Event object. Events without a key live in the ``ALL`` buffers only.
Duplicates (same type, ts and id) are dropped on insert.

A buffer is a set of parallel flat lists in (ts, id) order: an in-order event is an append
(amortised O(1)); a late one is placed by bisection and inserted with a list insert (a memmove
of the pointers after it: late events land near the end). Rows of a column batch
(cep.store.batch.ColumnBatch, what ``raycep local`` reads) are indexed as (batch, row) and become
Events only when something reads them (issue 14); ``select`` compares an attribute over a
cached column of the buffer, so the rows a filter rejects never become Events.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import compress, islice, repeat
from operator import attrgetter, eq, is_, is_not, itemgetter

from raycep.cep.errors import CepError
from raycep.cep.event import EXACT, Event, event_row, kind_of

_MISSING = object()
_TS = attrgetter("ts")


def text_numbers(table: dict, grow: bool):
    """``number(value)``: the number ``table`` gives the text ``value``; -1 for a value that
    is no ``str`` or, unless ``grow`` (a new text then gets the next number), a text
    ``table`` lacks."""
    if grow:
        def number(value) -> int:
            return table.setdefault(value, len(table)) if value.__class__ is str else -1
    else:
        def number(value) -> int:
            return table.get(value, -1) if value.__class__ is str else -1
    return number


class _All:
    def __repr__(self):
        return "ALL"


#: the partition that holds every event
ALL = _All()
#: the pseudo-type that holds events of every type (kept only when a query needs it)
ANY_TYPE = None


class _Rows:
    """Rows in (ts, id) order as parallel lists: ``ts``, ``objs`` (the Event, or None while
    not made) and, once a row came from a column batch, ``src``/``off`` (its batch and row
    there). A row's Event is made through its batch (``ColumnBatch.event``), so every list
    holding the row gets the same object."""

    __slots__ = ("_ts", "_objs", "_src", "_off")

    def __len__(self) -> int:
        return len(self._ts)

    def _get(self, k: int) -> Event:
        ev = self._objs[k]
        if ev is None:
            ev = self._objs[k] = self._src[k].event(self._off[k])
        return ev

    def _fill(self, i: int, j: int):
        """Make the Events of rows ``i`` to ``j - 1``."""
        self._make(list(compress(range(i, j), map(is_, self._objs[i:j], repeat(None)))))

    def _make(self, missing: list):
        """Make the Events of the rows at ``missing`` (ascending, none made yet), in bulk per
        batch."""
        objs, src, off = self._objs, self._src, self._off
        k = 0
        while k < len(missing):
            batch = src[missing[k]]
            end = k + 1
            while end < len(missing) and src[missing[end]] is batch:
                end += 1
            rows = missing[k:end]
            for pos, ev in zip(rows, batch.events([off[r] for r in rows])):
                objs[pos] = ev
            k = end

    def _slice(self, i: int, j: int) -> list:
        if self._src is not None:
            self._fill(i, j)
        return self._objs[i:j]

    def _rows(self, i: int, j: int) -> list:
        """``[type, ts, key, attrs, id]`` of rows ``i`` to ``j - 1`` (cep.event.event_row),
        those of batch rows whose Event is not made read from their batch's columns without
        making it (ColumnBatch.rows)."""
        objs, src, off = self._objs, self._src, self._off
        if src is None:
            return list(map(event_row, objs[i:j]))
        out: list = []
        k = i
        while k < j:
            batch = src[k] if objs[k] is None else None
            end = k + 1
            if batch is None:
                while end < j and objs[end] is not None:
                    end += 1
                out += map(event_row, objs[k:end])
            else:
                while end < j and objs[end] is None and src[end] is batch:
                    end += 1
                out += batch.rows(off[k:end])
            k = end
        return out


class EvictedRows(_Rows):
    """Rows a buffer evicted (remembered for ``seen_before``), Events made only on demand."""

    def __init__(self, ts: list, objs: list, src=None, off=None):
        self._ts, self._objs, self._src, self._off = ts, objs, src, off

    def first_ts(self) -> float:
        return self._ts[0]

    def last_ts(self) -> float:
        return self._ts[-1]

    def at(self, ts: float) -> list:
        """The events with event time ``ts``."""
        return self._slice(bisect_left(self._ts, ts), bisect_right(self._ts, ts))

    def events(self) -> list:
        return self._slice(0, len(self._ts))

    def rows(self) -> list:
        """Its events as rows (``_rows``), no Event made."""
        return self._rows(0, len(self._ts))

    def __iter__(self):
        return iter(self.events())


class TimeBuffer(_Rows):
    """Events of one type (and partition) ordered by (ts, id): flat lists (an in-order event
    is an append; a late one is placed by bisection and a list insert, a memmove of the rows
    after it), rows of column batches kept as (batch, row) until asked for, and per attribute
    a numeric column (float64 values and kinds, cep.store.batch) for ``select``."""

    __slots__ = ("_cols",)

    def __init__(self):
        self._ts: list = []
        self._objs: list = []
        self._src = None                  # batch of each row, once one came from a batch
        self._off = None
        self._cols: dict = {}             # attr -> [values, kinds, rows covered from the start]

    def __iter__(self):
        if self._src is not None:
            self._fill(0, len(self._ts))
        return iter(self._objs)

    def insert(self, ev: Event) -> bool:
        """Add ``ev``; False if it is a duplicate (same ts and id already present)."""
        times = self._ts
        if not times or ev.ts > times[-1]:
            times.append(ev.ts)
            self._objs.append(ev)
            if self._src is not None:
                self._src.append(None)
                self._off.append(0)
            return True
        return self._insert_slow(ev)

    def extend(self, events: list, times: list):
        """Append ``events`` (with their ``times``): in (ts, id) order, each after every
        buffered event."""
        self._ts.extend(times)
        self._objs.extend(events)
        if self._src is not None:
            self._src.extend(repeat(None, len(events)))
            self._off.extend(repeat(0, len(events)))

    def extend_rows(self, batch, rows: list, times: list):
        """Append rows ``rows`` of column batch ``batch`` (with their ``times``): in (ts, id)
        order, each after every buffered event. No Event is made."""
        if self._src is None:
            n = len(self._ts)
            self._src, self._off = [None] * n, [0] * n
        self._ts.extend(times)
        self._objs.extend(repeat(None, len(rows)))
        self._src.extend(repeat(batch, len(rows)))
        self._off.extend(rows)

    def merge(self, events: list) -> None:
        """Add ``events`` (in time order, none of them buffered already) where they belong,
        in one pass over the buffer (a re-partitioning brings the events of other keys from
        the whole window); the events of one time end up in id order."""
        import numpy as np
        new_ts = [e.ts for e in events]
        if not self._ts or new_ts[0] > self._ts[-1]:
            self.extend(events, new_ts)
        else:                           # a stable sort of both by time, in C
            order = np.argsort(np.array(self._ts + new_ts, dtype=np.float64), kind="stable")
            pick = itemgetter(*order.tolist())
            self._ts = list(pick(self._ts + new_ts))
            self._objs = list(pick(self._objs + events))
            if self._src is not None:
                self._src = list(pick(self._src + [None] * len(events)))
                self._off = list(pick(self._off + [0] * len(events)))
            self._cols = {}
        self._order_ties(new_ts)

    def _order_ties(self, new_ts: list) -> None:
        """Put the rows of each time of ``new_ts`` that several rows share in id order."""
        import numpy as np
        ts = np.array(self._ts, dtype=np.float64)
        same = (ts[1:] == ts[:-1]).astype(np.int8)
        if not same.any():
            return
        edges = np.diff(np.concatenate(([0], same, [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) + 1
        mine = np.isin(ts[starts], np.array(new_ts, dtype=np.float64))
        for i, j in zip(starts[mine].tolist(), ends[mine].tolist()):
            rows = sorted(range(i, j), key=lambda k: self._get(k).id)
            if rows == list(range(i, j)):
                continue
            for name in ("_objs", "_src", "_off"):
                col = getattr(self, name)
                if col is not None:
                    col[i:j] = [col[k] for k in rows]

    def drop(self, keys: set) -> int:
        """Forget the rows of the partition keys ``keys``; returns how many (their Events are
        not made: a batch row's key is read from its batch)."""
        objs, src, off = self._objs, self._src, self._off
        if src is None:
            keep = [ev.key not in keys for ev in objs]
        else:
            keep = [(ev.key if ev is not None else
                     (b.keys[r] if b.keys is not None else None)) not in keys
                    for ev, b, r in zip(objs, src, off)]
        gone = len(keep) - sum(keep)
        if gone:
            self._ts = list(compress(self._ts, keep))
            self._objs = list(compress(objs, keep))
            if src is not None:
                self._src, self._off = list(compress(src, keep)), list(compress(off, keep))
            self._cols = {}
        return gone

    def _insert_slow(self, ev: Event) -> bool:
        ts, eid = ev.ts, ev.id
        times = self._ts
        pos = bisect_left(times, ts)
        # walk the run of equal timestamps ordered by id
        while pos < len(times) and times[pos] == ts:
            other = self._get(pos).id
            if other == eid:
                return False
            if other > eid:
                break
            pos += 1
        times.insert(pos, ts)
        self._objs.insert(pos, ev)
        if self._src is not None:
            self._src.insert(pos, None)
            self._off.insert(pos, 0)
        for col in self._cols.values():
            if col[2] > pos:
                vals, odd, _ = col
                del vals[pos:]
                del odd[bisect_left(odd, pos):]
                col[2] = pos
        return True

    def range(self, lo: float, hi: float) -> list:
        """Events with ``lo <= ts <= hi``, in order."""
        times = self._ts
        return self._slice(bisect_left(times, lo), bisect_right(times, hi))

    def each(self, lo: float, hi: float):
        """``range(lo, hi)`` one by one, each Event made when reached (a reader that stops
        early makes no more)."""
        times = self._ts
        for k in range(bisect_left(times, lo), bisect_right(times, hi)):
            yield self._get(k)

    def select(self, lo: float, hi: float, attr: str, op, value) -> tuple:
        """Events with ``lo <= ts <= hi`` whose attribute ``attr`` satisfies
        ``op(attr, value)`` for a number ``value`` and an order operator, compared in C over
        the attribute's column when every event of the range has a number there that float64
        holds exactly (cep.store.batch: kind EXACT), without making Events for the others.

        Returns ``(selected, in_range, unchecked)``: ``unchecked`` are the events that could
        not be compared that way (the caller filters them itself)."""
        times = self._ts
        i, j = bisect_left(times, lo), bisect_right(times, hi)
        if j <= i:
            return [], 0, []
        vals, odd = self._column(attr)
        if odd and bisect_left(odd, i) < len(odd) and odd[bisect_left(odd, i)] < j:
            return [], j - i, self._slice(i, j)
        if self._src is None:
            return list(compress(self._objs[i:j], map(op, vals[i:j], repeat(value)))), \
                j - i, []
        return self._pick(list(compress(range(i, j), map(op, vals[i:j], repeat(value))))), \
            j - i, []

    def _pick(self, positions: list) -> list:
        """The Events at ``positions`` (ascending), made where needed."""
        objs = self._objs
        got = list(map(objs.__getitem__, positions))
        if any(map(is_, got, repeat(None))):
            self._make(list(compress(positions, map(is_, got, repeat(None)))))
            got = list(map(objs.__getitem__, positions))
        return got

    def _column(self, attr: str) -> tuple:
        """``(values, odd)`` of ``attr``: a value per row (a float where the row's kind is
        EXACT, see cep.store.batch) and the ascending positions of the other rows; kept per
        attribute and extended to the rows added since the last call."""
        n = len(self._ts)
        col = self._cols.get(attr)
        if col is None:
            col = self._cols[attr] = [[], [], 0]
        vals, odd, done = col
        if done < n:
            src, objs = self._src, self._objs
            a = done
            while a < n:
                batch = src[a] if src is not None else None
                b = a + 1
                while b < n and (src[b] if src is not None else None) is batch:
                    b += 1
                if batch is None:
                    for k in range(a, b):
                        v = objs[k].attrs.get(attr, _MISSING)
                        if v is not _MISSING and kind_of(v) == EXACT:
                            vals.append(v)
                        else:
                            vals.append(0.0)
                            odd.append(k)
                else:
                    bvals, bodd = batch.column(attr)
                    rows = self._off[a:b]
                    vals.extend(map(bvals.__getitem__, rows))
                    if bodd:
                        odd.extend(compress(range(a, b), map(bodd.__contains__, rows)))
                a = b
            col[2] = n
        return vals, odd

    def span(self, lo: float, hi: float) -> tuple:
        """``(i, j)``: the positions of the events with ``lo <= ts <= hi`` are ``i`` to
        ``j - 1`` (valid until the buffer changes)."""
        times = self._ts
        return bisect_left(times, lo), bisect_right(times, hi)

    def times(self, i: int, j: int) -> list:
        """The event times of positions ``i`` to ``j - 1``."""
        return self._ts[i:j]

    def numeric(self, i: int, j: int, attr: str) -> tuple:
        """``(values, odd)`` of ``attr`` at positions ``i`` to ``j - 1`` as numpy: float64
        values and whether each is not an exact number (see ``_column``), gathered from the
        batches' columns (cep.store.batch ``numeric``) when every row came from one."""
        import numpy as np
        if j <= i:
            return np.zeros(0), np.zeros(0, dtype=bool)
        src = self._src
        part = src[i:j] if src is not None else None
        if part is None or any(map(is_, part, repeat(None))):
            vals, odd = self._column(attr)
            mask = np.zeros(j - i, dtype=bool)
            cut = bisect_left(odd, i)
            if cut < len(odd) and odd[cut] < j:
                mask[np.array(odd[cut:bisect_left(odd, j)], dtype=np.intp) - i] = True
            return np.array(vals[i:j], dtype=np.float64), mask
        values, odd, off = [], [], self._off
        for batch, a, b in self._pieces(i, j):
            vals, kinds = batch.numeric(attr)
            rows = np.array(off[i + a:i + b], dtype=np.intp)
            values.append(vals[rows])
            odd.append(kinds[rows] != EXACT)
        if len(values) == 1:
            return values[0], odd[0]
        return np.concatenate(values), np.concatenate(odd)

    def text_equal(self, i: int, j: int, attr: str, value: str) -> tuple:
        """``(equal, odd)`` of ``attr`` at positions ``i`` to ``j - 1`` as numpy bools: whether
        each holds the text ``value`` and whether it holds no ``str`` at all (absent, a
        number, ...: the evaluator fails a string comparison there), from the batches' text
        codes (cep.store.batch ``texts``) for the rows that came from one, from the Events
        for the others."""
        import numpy as np
        if j <= i:
            return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
        equal, odd, off = [], [], self._off
        for batch, a, b in self._pieces(i, j):
            if batch is None:
                got = [ev.attrs.get(attr, _MISSING) for ev in self._objs[i + a:i + b]]
                odd.append(np.fromiter((v.__class__ is not str for v in got), dtype=bool,
                                       count=b - a))
                equal.append(np.fromiter((v.__class__ is str and v == value for v in got),
                                         dtype=bool, count=b - a))
                continue
            codes, index = batch.texts(attr)
            got = codes[np.array(off[i + a:i + b], dtype=np.intp)]
            equal.append(got == index.get(value, -2))
            odd.append(got < 0)
        if len(equal) == 1:
            return equal[0], odd[0]
        return np.concatenate(equal), np.concatenate(odd)

    def text_ids(self, i: int, j: int, attr: str, table: dict, grow: bool) -> "np.ndarray":
        """``attr`` at positions ``i`` to ``j - 1`` as the numbers ``table`` gives its texts
        (int64 numpy): -1 where the row holds no ``str`` (absent, a number, ...) or, unless
        ``grow`` (then a new text gets the next number), a text ``table`` lacks. Texts are
        compared once per batch and distinct text (its codes, cep.store.batch ``texts``),
        the rows made as Events one by one."""
        import numpy as np
        if j <= i:
            return np.zeros(0, dtype=np.int64)
        number = text_numbers(table, grow)
        out, off = [], self._off
        for batch, a, b in self._pieces(i, j):
            if batch is None:
                out.append(np.fromiter(
                    (number(ev.attrs.get(attr)) for ev in self._objs[i + a:i + b]),
                    dtype=np.int64, count=b - a))
                continue
            codes, index = batch.texts(attr)
            lut = np.full(len(index) + 1, -1, dtype=np.int64)     # code -1: the last
            for text, code in index.items():
                lut[code] = number(text)
            out.append(lut[codes[np.array(off[i + a:i + b], dtype=np.intp)]])
        return out[0] if len(out) == 1 else np.concatenate(out)

    def _pieces(self, i: int, j: int) -> list:
        """``[(batch, a, b)]``: positions ``i + a`` to ``i + b - 1`` came from one column
        batch (None: rows held as Events), in order."""
        src = self._src
        part = src[i:j] if src is not None else [None]
        cuts = [0, *(k + 1 for k in compress(range(len(part) - 1),
                                             map(is_not, part[1:], part))), j - i]
        return [(part[a], a, b) for a, b in zip(cuts, cuts[1:])]

    def compare(self, i: int, j: int, attr: str, op, value) -> tuple:
        """``(held, odd)`` at positions ``i`` to ``j - 1`` as numpy bools: ``op(attr,
        value)`` for a text ``value`` (``op`` ``eq`` or ``ne``, ``text_equal``) or a number
        (``numeric``), and where the row holds no value of that kind the columns hold
        exactly (meaningless ``held`` there)."""
        if value.__class__ is str:
            equal, odd = self.text_equal(i, j, attr, value)
            return (equal if op is eq else ~equal), odd
        values, odd = self.numeric(i, j, attr)
        return op(values, value), odd

    def event(self, k: int) -> Event:
        """The Event at position ``k`` (made if needed)."""
        return self._get(k)

    @property
    def batched(self) -> bool:
        """Whether some row came from a column batch (its columns are at hand)."""
        return self._src is not None

    def events_at(self, i: int, rows) -> list:
        """The Event at position ``i + r`` for each ``r`` of ``rows`` (numpy integers, in any
        order, repeats allowed), made where needed."""
        import numpy as np
        if not len(rows):
            return []
        present = np.flatnonzero(np.bincount(rows)).tolist()
        objs = self._objs
        if self._src is not None:
            missing = [i + r for r in present if objs[i + r] is None]
            if missing:
                self._make(missing)
        part = objs[i:i + present[-1] + 1]
        return list(map(part.__getitem__, rows.tolist()))

    def count(self, lo: float, hi: float) -> int:
        """How many events have ``lo <= ts <= hi``."""
        times = self._ts
        return max(0, bisect_right(times, hi) - bisect_left(times, lo))

    def evict_before(self, cutoff: float, sink: list | None = None) -> int:
        """Drop events with ``ts < cutoff``; returns how many. The dropped rows are appended
        to ``sink`` (as one EvictedRows) if given."""
        times = self._ts
        k = bisect_left(times, cutoff)
        if not k:
            return 0
        src = self._src
        if sink is not None:
            sink.append(EvictedRows(times[:k], self._objs[:k],
                                    src[:k] if src is not None else None,
                                    self._off[:k] if src is not None else None))
        del times[:k], self._objs[:k]
        if src is not None:
            del src[:k], self._off[:k]
            if not any(map(is_not, src, repeat(None))):
                self._src = self._off = None
        for col in self._cols.values():
            vals, odd, done = col
            if done > k:
                del vals[:k]
                cut = bisect_left(odd, k)
                col[1] = [p - k for p in odd[cut:]]
                col[2] = done - k
            else:
                col[:] = [[], [], 0]
        return k

    def truncate_after(self, ts: float) -> None:
        """Drop the events with an event time after ``ts``."""
        times = self._ts
        k = bisect_right(times, ts)
        if k == len(times):
            return
        del times[k:], self._objs[k:]
        if self._src is not None:
            del self._src[k:], self._off[k:]
            if not any(map(is_not, self._src, repeat(None))):
                self._src = self._off = None
        for col in self._cols.values():
            if col[2] > k:
                del col[0][k:]
                del col[1][bisect_left(col[1], k):]
                col[2] = k

    def first_ts(self):
        return self._ts[0] if self._ts else None


def _grouped(labels, items, times) -> dict:
    """``{label: (items, times)}`` of parallel sequences, in order within each label."""
    groups: dict = {}
    for label, item, ts in zip(labels, items, times):
        group = groups.get(label)
        if group is None:
            group = groups[label] = ([], [])
        group[0].append(item)
        group[1].append(ts)
    return groups


def _content(ev: Event) -> int:
    """A hash of what a derived id is computed from (type, ts, key, attributes), without
    computing the id (blake2b of msgpack, ~10x dearer); attribute values that cannot be hashed
    (lists, maps) fall back to the id."""
    try:
        return hash((ev.type, ev.ts, ev.key, tuple(ev.attrs.items())))
    except TypeError:
        return hash(ev.id)


def _fingerprint(ev: Event) -> int:
    """What an evicted event is remembered by: its id when it has one already (given, or
    derived for output), else its content, which determines the id it would derive. A late copy
    is a duplicate when its id or its content matches (``seen_before``): the same answer as
    comparing ids, except that an evicted event without a given id and a late event with the
    same content but another given id count as one event (and the same content with the
    attributes in another order as two)."""
    eid = ev._id
    return hash(eid) if eid is not None else _content(ev)


class SharedEventIndex:
    """All buffered events of one process/actor, shared by every query.

    ``key_attr`` names the attribute whose value is the partition key (the events' ``key``).
    """

    def __init__(self, key_attr: str | None = None, remember_ids: int = 100_000):
        self.key_attr = key_attr
        self._buffers: dict = {}          # (partition, type) -> TimeBuffer
        self.remember_ids = remember_ids
        self._gone: deque = deque()       # lists of evicted events, oldest first
        self._gone_n = 0
        self.gone_lists = 0               # lists ever added to _gone (numbers them)
        self.keep_all = True              # also index keyed events under ALL
        self.keep_keys = True             # index keyed events under their key (while some
                                          # query reads per key, or keep_all is off)
        self.keep_any = False             # also index every event under ANY_TYPE
        self.duplicates = 0
        self.inserted = 0
        self.evicted = 0
        self.floor = -math.inf            # the largest eviction cutoff: all before it is gone

    def insert(self, ev: Event) -> bool:
        """Index ``ev``; False (and nothing changes) if it is a duplicate."""
        buffers = self._buffers
        etype, key = ev.type, ev.key
        part = ALL if key is None or self.keep_all else key
        buf = buffers.get((part, etype))
        if buf is None:
            buf = buffers[(part, etype)] = TimeBuffer()
        times = buf._ts
        ts = ev.ts
        if times and ts > times[-1] and buf._src is None:
            # the common case, inlined: an in-order event appended
            times.append(ts)
            buf._objs.append(ev)
        elif not buf.insert(ev):
            self.duplicates += 1
            return False
        if part is ALL and key is not None and self.keep_keys:
            kb = buffers.get((key, etype))
            if kb is None:
                kb = buffers[(key, etype)] = TimeBuffer()
            kb.insert(ev)
        if self.keep_any:
            self._add_any(ev)
        self.inserted += 1
        return True

    def extend(self, events: list, types: list, times: list):
        """``insert`` each of ``events`` (with their ``types`` and ``times``): in (ts, id)
        order, each after every buffered event (so none is a duplicate); appended per type in
        bulk."""
        if self.keep_any or not self.keep_all:
            for ev in events:
                self.insert(ev)
            return
        if self.keep_keys:
            for ev in events:
                if ev.key is not None:
                    self._buffer(ev.key, ev.type).insert(ev)
        kinds = set(types)
        if len(kinds) == 1:
            groups = {types[0]: (list(events), times)}
        elif len(kinds) <= 8:                      # C-level masks, one per type
            groups = {}
            for etype in kinds:
                mask = list(map(eq, types, repeat(etype)))
                groups[etype] = (list(compress(events, mask)), list(compress(times, mask)))
        else:
            groups = _grouped(types, events, times)
        for etype, (run, run_times) in groups.items():
            self._buffer(ALL, etype).extend(run, run_times)
        self.inserted += len(events)

    def extend_rows(self, batch, groups: dict) -> None:
        """``extend`` with rows of column batch ``batch`` (cep.store.batch), given as ``{type:
        (rows, times)}`` (``ColumnBatch.groups``): the same buffers and order, no Event made
        (while every-type buffers are kept, the rows are made and inserted one by one)."""
        if self.keep_any:
            rows = sorted(r for group, _ in groups.values() for r in group)
            for ev in batch.events(rows):
                self.insert(ev)
            return
        keyed = self.keep_keys or not self.keep_all
        keys = batch.keys if keyed else None
        n = 0
        for etype, (rows, times) in groups.items():
            n += len(rows)
            per = _grouped(map(keys.__getitem__, rows), rows, times) if keys is not None \
                else {None: (rows, times)}
            if self.keep_all:
                self._buffer(ALL, etype).extend_rows(batch, rows, times)
                per.pop(None, None)
            elif None in per:                             # rows without a key
                self._buffer(ALL, etype).extend_rows(batch, *per.pop(None))
            for key, (krows, ktimes) in per.items():
                self._buffer(key, etype).extend_rows(batch, krows, ktimes)
        self.inserted += n

    def truncate_after(self, types, ts: float) -> None:
        """Drop the events of ``types`` with an event time after ``ts`` (rows indexed ahead
        by ``Engine.process_columns`` that it then takes back)."""
        for (_, t), buf in list(self._buffers.items()):
            if t in types:
                buf.truncate_after(ts)
                if not len(buf):
                    del self._buffers[(_, t)]

    def _buffer(self, part, etype) -> TimeBuffer:
        """The buffer of ``etype`` in ``part``, created when missing."""
        buf = self._buffers.get((part, etype))
        if buf is None:
            buf = self._buffers[(part, etype)] = TimeBuffer()
        return buf

    def _add_any(self, ev: Event):
        for part in self._any_parts(ev.key):
            self._buffer(part, ANY_TYPE).insert(ev)

    def _any_parts(self, key) -> tuple:
        """The partitions whose every-type buffer holds an event of partition key ``key``."""
        return (ALL,) if key is None else ((ALL, key) if self.keep_keys else (ALL,)) \
            if self.keep_all else (key,)

    def enable_any(self):
        """Start keeping the every-type buffers (needed by queries with untyped variables)."""
        if self.keep_any:
            return
        self.keep_any = True
        for ev in list(self.events()):
            self._add_any(ev)

    def set_keep_keys(self, keep: bool):
        """Keep (or stop keeping) the per-key buffers of keyed events while the all-partitions
        buffers hold them too (no query reading per key: one insert per event, not two)."""
        keep = keep or not self.keep_all
        if keep == self.keep_keys:
            return
        self.keep_keys = keep
        if not keep:
            self._buffers = {k: b for k, b in self._buffers.items() if k[0] is ALL}
            return
        for ev in list(self.events()):
            if ev.key is not None:
                for t in (ev.type, ANY_TYPE) if self.keep_any else (ev.type,):
                    self._buffer(ev.key, t).insert(ev)

    def set_keep_all(self, keep: bool):
        """Keep (or stop keeping) the all-partitions buffers of keyed events; rebuilds them."""
        if keep == self.keep_all:
            return
        if not keep:
            self.set_keep_keys(True)
        events = list(self.events())
        self.keep_all = keep
        self._buffers = {k: b for k, b in self._buffers.items() if k[0] is not ALL}
        for ev in events:
            if ev.key is None or keep:
                for t in (ev.type, ANY_TYPE) if self.keep_any else (ev.type,):
                    self._buffer(ALL, t).insert(ev)

    def _primary(self, part, etype) -> bool:
        """Whether this buffer counts its events (each event is counted in one buffer)."""
        if etype is ANY_TYPE:
            return False
        return part is ALL if self.keep_all else True

    def window_counts(self, spans: dict) -> dict:
        """Events held per span: ``spans`` maps a key to ``(types, lo, hi)`` (``types``: a
        set of event types, None among them: every type), the result the key to how many
        events of those types the index holds with ``lo <= ts <= hi`` (each event once)."""
        out = dict.fromkeys(spans, 0)
        for (part, etype), buf in self._buffers.items():
            if not self._primary(part, etype):
                continue
            for key, (types, lo, hi) in spans.items():
                if etype in types or None in types:
                    out[key] += buf.count(lo, hi)
        return out

    def buffer(self, partition, etype) -> TimeBuffer | None:
        """The buffer of ``etype`` (None: every type) in ``partition`` (ALL: every partition)."""
        return self._buffers.get((partition, etype))

    def evict_before(self, cutoff: float) -> int:
        """Drop every event with ``ts < cutoff`` (the ids of the last ``remember_ids`` evicted
        events are remembered for ``seen_before``)."""
        dropped = 0
        sink: list = []
        if cutoff > self.floor:
            self.floor = cutoff
        for k in list(self._buffers):
            buf = self._buffers[k]
            primary = self._primary(*k)
            n = buf.evict_before(cutoff, sink if primary and self.remember_ids else None)
            if primary:
                dropped += n
            if not len(buf):
                del self._buffers[k]
        self.evicted += dropped
        sink.sort(key=EvictedRows.last_ts)              # forget the oldest first
        for rows in sink:
            self._gone.append(rows)
            self._gone_n += len(rows)
        self.gone_lists += len(sink)
        while self._gone and self._gone_n - len(self._gone[0]) >= self.remember_ids:
            self._gone_n -= len(self._gone.popleft())
        return dropped

    def since(self, ts: float, skip=frozenset()) -> list:
        """The buffered events with an event time at or after ``ts`` (each once), but not
        those at exactly ``ts`` whose id is in ``skip``: what was indexed after a checkpoint
        that saw the events up to ``ts`` (actors/recovery.py), in bulk per buffer."""
        out: list = []
        for k, buf in list(self._buffers.items()):
            if not self._primary(*k):
                continue
            times = buf._ts
            i = bisect_left(times, ts)
            if i == len(times):
                continue
            part = buf._slice(i, len(times))
            if skip and times[i] == ts:
                part = [e for e in part if e.ts != ts or e.id not in skip]
            out += part
        return out

    def ids_at(self, ts: float) -> list:
        """The ids of the buffered events with event time ``ts``."""
        if not math.isfinite(ts):
            return []
        return [e.id for k, buf in list(self._buffers.items()) if self._primary(*k)
                for e in buf.range(ts, ts)]

    def contains(self, ev: Event) -> bool:
        """Whether an event with ``ev``'s type, ts and id is buffered."""
        part = ALL if ev.key is None or self.keep_all else ev.key
        buf = self._buffers.get((part, ev.type))
        if buf is None:
            return False
        eid = ev.id
        return any(e.id == eid for e in buf.range(ev.ts, ev.ts))

    def evicted_events(self, since: int = 0) -> tuple:
        """``(number of the first, [lists])``: the remembered evicted events (lists of
        events, oldest first, numbered in the order they were evicted) from list number
        ``since`` on. Part of a snapshot, so a restored index still recognises a late copy of
        one (``seen_before``); a checkpoint writes only the lists it has not written yet."""
        first, lists = self._gone_since(since)
        return first, [rows.events() for rows in lists]

    def evicted_rows(self, since: int = 0) -> tuple:
        """``evicted_events(since)`` with each event as a row (cep.event.event_row), made
        from the columns of the batches they came in where their Event was never made:
        what a checkpoint writes of them (actors/recovery.py)."""
        first, lists = self._gone_since(since)
        return first, [rows.rows() for rows in lists]

    def _gone_since(self, since: int) -> tuple:
        """``(number of the first, its EvictedRows and those after)``: the remembered
        lists of evicted events from list number ``since`` on."""
        first = self.gone_lists - len(self._gone)
        return max(first, since), islice(self._gone, max(0, since - first), None)

    def evicted_span(self) -> tuple:
        """``(number of the first remembered list of evicted events, lists ever evicted)``."""
        return self.gone_lists - len(self._gone), self.gone_lists

    def remember_evicted(self, first: int, lists) -> None:
        """Take back the evicted events of a snapshot (``evicted_events()``, all of them)."""
        lists = list(lists)
        self._gone = deque(EvictedRows([e.ts for e in events], list(events))
                           for events in lists if events)
        self._gone_n = sum(map(len, self._gone))
        self.gone_lists = first + len(lists)

    def seen_before(self, ev: Event) -> bool:
        """Whether ``ev`` is buffered or among the remembered evicted events (see
        ``_fingerprint``: by id, or by content for an evicted event whose id was derived).
        The evicted events are kept as the time-ordered lists their buffers dropped and
        fingerprinted here, only those at ``ev``'s time: a late copy is rare, eviction is
        not."""
        if self.contains(ev):
            return True
        keys = {hash(ev.id), _content(ev)}
        ts = ev.ts
        for rows in self._gone:
            if rows.first_ts() <= ts <= rows.last_ts():
                if any(_fingerprint(e) in keys for e in rows.at(ts)):
                    return True
        return False

    def keys(self) -> set:
        """The partition keys of the buffered events (None for events without one)."""
        if not (self.keep_keys or not self.keep_all):
            return {ev.key for ev in self.events()}
        keys = {p for p, _ in self._buffers if p is not ALL}
        whole = sum(len(b) for (p, t), b in self._buffers.items() if p is ALL and t is not ANY_TYPE)
        keyed = sum(len(b) for (p, t), b in self._buffers.items()
                    if p is not ALL and t is not ANY_TYPE) if self.keep_all else 0
        if whole > keyed:                      # events without a key (only under ALL)
            keys.add(None)
        return keys

    def key_events(self, keys: set) -> list:
        """The buffered events of the partition keys ``keys`` (None: events without one), each
        once, in time order (the events of one time in buffer order)."""
        if (self.keep_keys or not self.keep_all) and None not in keys:
            out = [ev for (p, t), buf in list(self._buffers.items())
                   if p is not ALL and p in keys and t is not ANY_TYPE for ev in buf]
        else:
            out = [ev for ev in self.events() if ev.key in keys]
        out.sort(key=_TS)
        return out

    def drop_keys(self, keys: set) -> int:
        """Forget every buffered event of the partition keys ``keys`` (re-partitioning: they
        moved to another index); returns how many."""
        gone = 0
        if self.keep_all:                       # the all-partitions buffers, without them
            for k in [k for k in self._buffers if k[0] is ALL]:
                n = self._buffers[k].drop(keys)
                gone += n if self._primary(*k) else 0
                if not len(self._buffers[k]):
                    del self._buffers[k]
        elif None in keys:                      # they hold the events without a key only
            for k in [k for k in self._buffers if k[0] is ALL]:
                gone += len(self._buffers[k]) if self._primary(*k) else 0
                del self._buffers[k]
        for k in [k for k in self._buffers if k[0] is not ALL and k[0] in keys]:
            gone += len(self._buffers[k]) if self._primary(*k) else 0
            del self._buffers[k]
        return gone

    def merge_in(self, events: list) -> None:
        """``insert`` each of ``events`` (in time order; none a copy of a buffered event: the
        events of other keys, a re-partitioning's), a buffer's events merged in one pass."""
        per: dict = {}
        for ev in events:
            key = ev.key
            if self.keep_any:
                for part in self._any_parts(key):
                    per.setdefault((part, ANY_TYPE), []).append(ev)
            part = ALL if key is None or self.keep_all else key
            per.setdefault((part, ev.type), []).append(ev)
            if part is ALL and key is not None and self.keep_keys:
                per.setdefault((key, ev.type), []).append(ev)
        for k, run in per.items():
            self._buffer(*k).merge(run)
        self.inserted += len(events)

    def take_over(self, other: "SharedEventIndex") -> None:
        """Hold what ``other`` holds (its buffers and remembered evicted events; ``other`` is
        not used after). ``other`` is first given this index's layout, as a live index
        changes it when its queries change (its every-type buffers stay where it kept
        them: they are kept once a query needed them, as a live index keeps them)."""
        if other.key_attr != self.key_attr:
            raise CepError(f"an event index keyed by {other.key_attr!r} cannot be taken over "
                           f"by one keyed by {self.key_attr!r}")
        other.set_keep_all(self.keep_all)
        other.set_keep_keys(self.keep_keys)
        need_any, self.keep_any = self.keep_any, other.keep_any
        self._buffers = other._buffers
        self._gone, self._gone_n, self.gone_lists = other._gone, other._gone_n, other.gone_lists
        self.duplicates, self.evicted = other.duplicates, other.evicted
        self.floor = max(self.floor, other.floor)
        if need_any:
            self.enable_any()

    def add_evicted(self, lists) -> None:
        """Remember the evicted events of ``lists`` too (lists of events in time order; a
        re-partitioning's: those of the keys moved here), numbered after those remembered
        (a checkpoint writes them as new lists), the oldest lists forgotten first."""
        added = [EvictedRows([e.ts for e in events], list(events)) for events in lists if events]
        if not added:
            return
        self._gone.extend(added)
        self._gone_n += sum(map(len, added))
        self.gone_lists += len(added)
        while self._gone and self._gone_n - len(self._gone[0]) >= self.remember_ids:
            self._gone_n -= len(self._gone.popleft())

    def __len__(self) -> int:
        return sum(len(b) for k, b in self._buffers.items() if self._primary(*k))

    def partitions(self) -> int:
        """How many partition keys have buffered events."""
        return len({p for p, _ in self._buffers if p is not ALL})

    def counts(self) -> dict:
        """type -> number of buffered events."""
        out: dict = {}
        for (p, t), b in self._buffers.items():
            if self._primary(p, t):
                out[t] = out.get(t, 0) + len(b)
        return out

    def events_of(self, etype, lo: float, hi: float):
        """The buffered events of ``etype`` with ``lo <= ts <= hi`` (each once; partitions
        one after another, not in time order)."""
        for (p, t), b in list(self._buffers.items()):
            if t == etype and self._primary(p, t):
                yield from b.each(lo, hi)

    def events(self):
        """Every buffered event (each once)."""
        for k, b in list(self._buffers.items()):
            if self._primary(*k):
                yield from b
