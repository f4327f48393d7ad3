"""The shared event index (LimeCEP section 4.2, "Shared TreeSet Structure"), one per process or
actor, used by every pattern manager: partition key -> event type -> time-ordered events.

Every event is stored in the buffer of its partition key and type and, while some query reads
across partitions (``keep_all``), also in its type's buffer for all partitions (``ALL``): two
references to one Event object. Events without a key live in the ``ALL`` buffers only. Buffers
are chunked sorted lists: an in-order event is an append to the last chunk (amortised O(1)); a
late event is placed by bisection and inserted into one bounded chunk (O(log n)). Duplicates
(same type, ts and id) are dropped on insert.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from itertools import compress, islice, repeat
from operator import attrgetter, eq

from cep.event import Event

_TS = attrgetter("ts")

CHUNK = 128


class _All:
    def __repr__(self):
        return "ALL"


#: the partition that holds every event
ALL = _All()
#: the pseudo-type that holds events of every type (kept only when a query needs it)
ANY_TYPE = None


class TimeBuffer:
    """Events of one type (and partition) ordered by (ts, id)."""

    __slots__ = ("_chunks", "_times", "_last", "_len", "_cols")

    def __init__(self):
        self._chunks: list[list[Event]] = []
        self._times: list[list[float]] = []
        self._last: list[float] = []      # the largest ts of each chunk
        self._len = 0
        self._cols: dict = {}             # (id(chunk), attr) -> (chunk, numeric values | None)

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        for chunk in self._chunks:
            yield from chunk

    def insert(self, ev: Event) -> bool:
        """Add ``ev``; False if it is a duplicate (same ts and id already present)."""
        ts = ev.ts
        last = self._last
        if not last or ts > last[-1]:
            if not self._chunks or len(self._chunks[-1]) >= CHUNK:
                self._chunks.append([ev])
                self._times.append([ts])
                last.append(ts)
            else:
                self._chunks[-1].append(ev)
                self._times[-1].append(ts)
                last[-1] = ts
            self._len += 1
            return True
        return self._insert_slow(ev)

    def extend(self, events: list, times: list):
        """Append ``events`` (with their ``times``): in (ts, id) order, each after every
        buffered event."""
        chunks = self._chunks
        if chunks and len(chunks[-1]) < CHUNK:
            room = CHUNK - len(chunks[-1])
            chunks[-1].extend(events[:room])
            self._times[-1].extend(times[:room])
            self._last[-1] = self._times[-1][-1]
        else:
            room = 0
        for k in range(room, len(events), CHUNK):
            piece = times[k:k + CHUNK]
            chunks.append(events[k:k + CHUNK])
            self._times.append(piece)
            self._last.append(piece[-1])
        self._len += len(events)

    def _insert_slow(self, ev: Event) -> bool:
        ts, eid = ev.ts, ev.id
        c = bisect_left(self._last, ts)
        chunk, times = self._chunks[c], self._times[c]
        pos = bisect_left(times, ts)
        # walk the run of equal timestamps (possibly across chunks) ordered by id
        while True:
            while pos < len(chunk) and times[pos] == ts:
                other = chunk[pos].id
                if other == eid:
                    return False
                if other > eid:
                    break
                pos += 1
            else:
                if pos == len(chunk) and c + 1 < len(self._chunks) and self._times[c + 1][0] == ts:
                    c, pos = c + 1, 0
                    chunk, times = self._chunks[c], self._times[c]
                    continue
            break
        chunk.insert(pos, ev)
        times.insert(pos, ts)
        if self._cols:
            self._cols = {k: v for k, v in self._cols.items() if k[0] != id(chunk)}
        self._last[c] = times[-1]
        self._len += 1
        if len(chunk) > 2 * CHUNK:
            half = len(chunk) // 2
            self._chunks[c:c + 1] = [chunk[:half], chunk[half:]]
            self._times[c:c + 1] = [times[:half], times[half:]]
            self._last[c:c + 1] = [times[half - 1], times[-1]]
        return True

    def range(self, lo: float, hi: float) -> list:
        """Events with ``lo <= ts <= hi``, in order."""
        last = self._last
        c = bisect_left(last, lo)
        out: list = []
        n = len(last)
        while c < n:
            times = self._times[c]
            start = bisect_left(times, lo) if times[0] < lo else 0
            if times[-1] <= hi:
                out.extend(self._chunks[c][start:] if start else self._chunks[c])
                c += 1
                continue
            out.extend(self._chunks[c][start:bisect_right(times, hi)])
            break
        return out

    def select(self, lo: float, hi: float, attr: str, op, value) -> tuple:
        """Events with ``lo <= ts <= hi`` whose attribute ``attr`` satisfies
        ``op(attr, value)`` for a number ``value`` and an order operator, compared column-wise
        in C over full chunks whose ``attr`` values are all numbers (cached per chunk).

        Returns ``(selected, in_range, unchecked)``: ``unchecked`` are the events of chunks that
        could not be compared column-wise (the caller filters them itself).
        """
        last = self._last
        c = bisect_left(last, lo)
        n = len(last)
        selected: list = []
        unchecked: list = []
        in_range = 0
        while c < n:
            times = self._times[c]
            chunk = self._chunks[c]
            start = bisect_left(times, lo) if times[0] < lo else 0
            end = len(times) if times[-1] <= hi else bisect_right(times, hi)
            in_range += end - start
            if end > start:
                vals = self._column(c, attr) if c < n - 1 else None
                if vals is None:
                    unchecked.extend(chunk[start:end])
                elif start == 0 and end == len(chunk):
                    selected.extend(compress(chunk, map(op, vals, repeat(value))))
                else:
                    selected.extend(compress(chunk[start:end],
                                             map(op, vals[start:end], repeat(value))))
            if end < len(times):
                break
            c += 1
        return selected, in_range, unchecked

    def _column(self, c: int, attr: str):
        """The values of ``attr`` in sealed chunk ``c`` if they are all numbers (not booleans),
        else None."""
        chunk = self._chunks[c]
        key = (id(chunk), attr)
        entry = self._cols.get(key)
        if entry is not None and entry[0] is chunk:
            return entry[1]
        vals = [e.attrs.get(attr) for e in chunk]
        ok = all(v.__class__ is float or v.__class__ is int for v in vals)
        self._cols[key] = (chunk, vals if ok else None)
        return self._cols[key][1]

    def count(self, lo: float, hi: float) -> int:
        """How many events have ``lo <= ts <= hi``."""
        last = self._last
        c = bisect_left(last, lo)
        total, n = 0, len(last)
        while c < n:
            times = self._times[c]
            start = bisect_left(times, lo) if times[0] < lo else 0
            if times[-1] <= hi:
                total += len(times) - start
                c += 1
                continue
            total += bisect_right(times, hi) - start
            break
        return total

    def evict_before(self, cutoff: float, sink: list | None = None) -> int:
        """Drop events with ``ts < cutoff``; returns how many. The dropped events are appended
        to ``sink`` (as lists) if given."""
        dropped = 0
        while self._last and self._last[0] < cutoff:
            dropped += len(self._chunks[0])
            if sink is not None:
                sink.append(self._chunks[0])
            del self._chunks[0], self._times[0], self._last[0]
        if self._chunks and self._times[0][0] < cutoff:
            k = bisect_left(self._times[0], cutoff)
            if sink is not None:
                sink.append(self._chunks[0][:k])
            del self._chunks[0][:k], self._times[0][:k]
            dropped += k
        self._len -= dropped
        if dropped and self._cols:
            live = {id(c) for c in self._chunks[1:]}     # the first chunk may have been cut
            self._cols = {key: v for key, v in self._cols.items() if key[0] in live}
        return dropped

    def first_ts(self):
        return self._times[0][0] if self._times else None


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

    def insert(self, ev: Event) -> bool:
        """Index ``ev``; False (and nothing changes) if it is a duplicate."""
        buffers = self._buffers
        etype, key = ev.type, ev.key
        part = ALL if key is None or self.keep_all else key
        buf = buffers.get((part, etype))
        if buf is None:
            buf = buffers[(part, etype)] = TimeBuffer()
        last = buf._last
        ts = ev.ts
        if last and ts > last[-1] and len(buf._times[-1]) < CHUNK:
            # the common case, inlined: an in-order event appended to the last chunk
            buf._chunks[-1].append(ev)
            buf._times[-1].append(ts)
            last[-1] = ts
            buf._len += 1
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
            groups = {}
            for ev, etype, ts in zip(events, types, times):
                group = groups.get(etype)
                if group is None:
                    group = groups[etype] = ([], [])
                group[0].append(ev)
                group[1].append(ts)
        for etype, (run, run_times) in groups.items():
            self._buffer(ALL, etype).extend(run, run_times)
        self.inserted += len(events)

    def _buffer(self, part, etype) -> TimeBuffer:
        """The buffer of ``etype`` in ``part``, created when missing."""
        buf = self._buffers.get((part, etype))
        if buf is None:
            buf = self._buffers[(part, etype)] = TimeBuffer()
        return buf

    def _add_any(self, ev: Event):
        key = ev.key
        parts = (ALL,) if key is None else ((ALL, key) if self.keep_keys else (ALL,)) \
            if self.keep_all else (key,)
        for part in parts:
            self._buffer(part, ANY_TYPE).insert(ev)

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

    def buffer(self, partition, etype) -> TimeBuffer | None:
        """The buffer of ``etype`` (None: every type) in ``partition`` (ALL: every partition)."""
        return self._buffers.get((partition, etype))

    def evict_before(self, cutoff: float) -> int:
        """Drop every event with ``ts < cutoff`` (the ids of the last ``remember_ids`` evicted
        events are remembered for ``seen_before``)."""
        dropped = 0
        sink: list = []
        for k in list(self._buffers):
            buf = self._buffers[k]
            primary = self._primary(*k)
            n = buf.evict_before(cutoff, sink if primary and self.remember_ids else None)
            if primary:
                dropped += n
            if not len(buf):
                del self._buffers[k]
        self.evicted += dropped
        sink.sort(key=lambda events: events[-1].ts)      # forget the oldest first
        for events in sink:
            self._gone.append(events)
            self._gone_n += len(events)
        self.gone_lists += len(sink)
        while self._gone and self._gone_n - len(self._gone[0]) >= self.remember_ids:
            self._gone_n -= len(self._gone.popleft())
        return dropped

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
        first = self.gone_lists - len(self._gone)
        skip = max(0, since - first)
        return max(first, since), list(islice(self._gone, skip, None))

    def evicted_span(self) -> tuple:
        """``(number of the first remembered list of evicted events, lists ever evicted)``."""
        return self.gone_lists - len(self._gone), self.gone_lists

    def remember_evicted(self, first: int, lists) -> None:
        """Take back the evicted events of a snapshot (``evicted_events()``, all of them)."""
        self._gone = deque(lists)
        self._gone_n = sum(map(len, self._gone))
        self.gone_lists = first + len(self._gone)

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
        for events in self._gone:
            if events[0].ts <= ts <= events[-1].ts:
                k = bisect_left(events, ts, key=_TS)
                while k < len(events) and events[k].ts == ts:
                    if _fingerprint(events[k]) in keys:
                        return True
                    k += 1
        return False

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
                yield from b.range(lo, hi)

    def events(self):
        """Every buffered event (each once)."""
        for k, b in list(self._buffers.items()):
            if self._primary(*k):
                yield from b
