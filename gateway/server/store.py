"""The gateway's bounded match store: one cursor-addressed stream of matches per query.

Readers poll with ``read(query, since=cursor)`` (or long-poll with ``wait``) and resume from
the ``next`` cursor they got back. Memory is bounded: each query keeps at most ``capacity``
matches and drops the oldest when full, counting the drops so that a slow reader learns how
many it ``missed``. An optional JSONL sink keeps every match on disk regardless. Matches are
delivered at least once upstream, so a record whose ``"id"`` is already retained is ignored
(a retraction, ``"retracted": true``, has its match's id and is told apart by that flag).

Pure Python on purpose (no Ray, no HTTP): the server wraps it, the tests use it directly.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import deque
from itertools import compress, count, islice

import orjson

from raycep.cep.io.output import record_identity

log = logging.getLogger("raycep.gateway")


class _Stream:
    """The retained matches of one query plus its counters."""

    __slots__ = ("base", "head", "records", "idents", "ids", "dropped", "duplicates")

    def __init__(self, base: int):
        self.base = base          # cursors of this stream start at base + 1
        self.head = base          # latest cursor assigned
        # the retained records' JSON bytes and identities, oldest first; their cursors are
        # contiguous, ``head - len(records) + 1`` to ``head`` (no tuple per record)
        self.records: deque = deque()
        self.idents: deque = deque()
        self.ids: set[str] = set()
        self.dropped = 0
        self.duplicates = 0


def _json(record: dict) -> bytes:
    """A record (without its cursor) as compact JSON (orjson; json for what orjson refuses)."""
    if "cursor" in record:
        record = {k: v for k, v in record.items() if k != "cursor"}
    try:
        return orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(record, default=str, separators=(",", ":")).encode()


def _line(cursor: int, data: bytes) -> bytes:
    """A stored record as its sink line: its JSON with its ``"cursor"`` last."""
    return b"%s,\"cursor\":%d}\n" % (data[:-1], cursor) if len(data) > 2 else \
        b'{"cursor":%d}\n' % cursor


#: the key of the event that wakes the waiters for any query (not a valid query name)
_ANY = ":any"


def _tail(records: deque, start: int, limit: int) -> list:
    """``records[start:start + limit]`` of a deque, walked from the nearer end (a reader near
    the head costs what it reads, not the records retained before it)."""
    n = len(records)
    stop = min(n, start + limit)
    if start >= stop:
        return []
    if start <= n - stop:
        return list(islice(records, start, stop))
    out = list(islice(reversed(records), n - stop, n - start))
    out.reverse()
    return out


def _record(cursor: int, data: bytes) -> dict:
    """A stored record as a reader gets it: its fields and its ``"cursor"``."""
    record = orjson.loads(data)
    record["cursor"] = cursor
    return record


#: records of the JSONL sink whose ids the store remembers (read back at start): more than the
#: records a gateway can have written but not yet acknowledged (a drain page per actor)
SINK_MEMORY = 200_000


def _ends_torn(path: str) -> bool:
    """Whether a file is not empty and does not end with a line end."""
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def _sink_tail(path: str, count: int) -> list:
    """Identities of the last ``count`` records of a JSONL sink (a torn last line skipped)."""
    with open(path, "rb") as f:                      # read back from the end, 1 MiB at a
        at = f.seek(0, os.SEEK_END)                  # time, until ``count`` whole lines
        blocks, ends = [], 0
        while at > 0 and ends <= count:
            step = min(at, 1 << 20)
            at -= step
            f.seek(at)
            blocks.append(f.read(step))
            ends += blocks[-1].count(b"\n")
        lines = b"".join(reversed(blocks)).splitlines()[-count:]
    out = []
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue                                 # a line cut by a crash, or the first
        if isinstance(record, dict):                 # line read from its middle
            out.append(record_identity(record))
    return out


class MatchStore:
    """Bounded per-query match streams with integer cursors (policy: drop oldest)."""

    def __init__(self, capacity: int = 10_000, jsonl_path: str | None = None,
                 cursor_base: int = 0):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"match store capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self.jsonl_path = jsonl_path
        #: records put for a query that is not open (unknown or already closed)
        self.orphans = 0
        self._streams: dict[str, _Stream] = {}
        # last cursor of closed queries: a re-opened query continues after it, so a cursor is
        # never reused for a query name and an old reader cannot mistake new matches for old
        self._closed_heads: dict[str, int] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._sink = None
        #: the cursor after which a newly opened stream starts (the gateway passes its start
        #: time in ms x 1000, so cursors keep growing across gateway restarts)
        self.cursor_base = cursor_base
        # identities of the last SINK_MEMORY records in the sink, read back from its tail when
        # the gateway starts: a gateway that died between writing records and acknowledging
        # them to their actor receives them again, and the sink must not hold them twice
        self._written: deque = deque()
        self._written_ids: set = set()
        if jsonl_path is not None and os.path.isfile(jsonl_path):
            self._remember(_sink_tail(jsonl_path, SINK_MEMORY))

    # -- streams -------------------------------------------------------------------------
    def open(self, query: str) -> None:
        """Create the stream of ``query``; a no-op when it is already open."""
        if query not in self._streams:
            self._streams[query] = _Stream(self._closed_heads.pop(query, self.cursor_base))

    def close(self, query: str) -> None:
        """Drop the stream of ``query`` (the query was removed) and wake its waiters."""
        stream = self._streams.pop(query, None)
        if stream is not None:
            self._closed_heads[query] = stream.head
        self._wake(query)

    def queries(self) -> list[str]:
        return list(self._streams)

    # -- writing -------------------------------------------------------------------------
    def put(self, query: str, records: list[dict]) -> int:
        """``put_raw`` of records given as mappings."""
        return self.put_raw(query, [record_identity(r) for r in records],
                            [_json(r) for r in records])

    def put_raw(self, query: str, idents: list, datas: list) -> int:
        """Append records, their JSON bytes ``datas`` with their ``idents`` (identity: its id,
        or ``"retracted:" + id``, or None), to the stream of ``query``; returns how many
        were appended. Records are kept as their JSON and parsed when read.

        Each appended record gets a new ``"cursor"``. Records whose ``"id"`` is
        already retained (or repeated within ``datas``) are duplicates and skipped; records
        for a query that is not open are counted in ``orphans``. The new records are written
        to the JSONL sink first, then retained, so the sink receives every one of them even
        when the store drops the oldest right away, and a failed sink write changes nothing
        (the caller does not acknowledge the records and puts them again).
        """
        stream = self._streams.get(query)
        if stream is None:
            self.orphans += len(datas)
            return 0
        given = len(datas)
        ids, written = stream.ids, self._written_ids
        seen = set(idents)
        if len(seen) != given or None in seen or not seen.isdisjoint(ids) or \
                not seen.isdisjoint(written):   # (else no duplicate, the usual page: in C)
            keep, seen = [], set()
            for match_id in idents:
                fresh = match_id is None or not (match_id in ids or match_id in seen or
                                                 match_id in written)
                keep.append(fresh)
                if fresh and match_id is not None:
                    seen.add(match_id)
            idents, datas = list(compress(idents, keep)), list(compress(datas, keep))
        stream.duplicates += given - len(datas)
        if not datas:
            return 0
        self._write_sink(stream.head + 1, datas)
        if self.jsonl_path is not None:
            self._remember(seen)
        stream.head += len(datas)
        stream.records.extend(datas)
        stream.idents.extend(idents)
        stream.ids.update(seen)
        excess = len(stream.records) - self.capacity
        if excess > 0:
            self._drop_oldest(query, stream, excess)
        self._wake(query)
        return len(datas)

    def _drop_oldest(self, query: str, stream: _Stream, count: int) -> None:
        before = stream.dropped
        for _ in range(count):
            stream.records.popleft()
            stream.ids.discard(stream.idents.popleft())
        stream.dropped += count
        # warn on the first drop, then once per `capacity` further drops (drops 1, 1 + c, ...)
        first = before + 1 + (-before) % self.capacity
        for n in range(first, stream.dropped + 1, self.capacity):
            log.warning(
                "match store: query %r has dropped %d matches so far (capacity %d per query, "
                "policy drop-oldest): readers are too slow; raise the capacity or use the "
                "JSONL sink to keep every match", query, n, self.capacity)

    def _write_sink(self, first: int, datas: list) -> None:
        """Append the records ``datas`` to the sink (their cursors from ``first`` on)."""
        if self.jsonl_path is None:
            return
        if self._sink is None:
            parent = os.path.dirname(self.jsonl_path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._sink = open(self.jsonl_path, "ab")
            if _ends_torn(self.jsonl_path):          # a line cut by a crash: end it, so the
                self._sink.write(b"\n")             # next record is a line of its own
        self._sink.write(b"".join(map(_line, range(first, first + len(datas)), datas)))
        self._sink.flush()

    def _remember(self, identities) -> None:
        """Keep the identities of the last SINK_MEMORY records written to the sink."""
        written, ids = self._written, self._written_ids
        new = set(identities)
        new.discard(None)
        new -= ids
        written.extend(new)
        ids |= new
        excess = len(written) - SINK_MEMORY
        if excess > 0:                       # popleft ``excess`` times, in C
            ids.difference_update(list(islice(iter(written.popleft, None), excess)))

    def close_sink(self) -> None:
        """Close the JSONL sink (it reopens in append mode on the next put)."""
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    # -- reading -------------------------------------------------------------------------
    def _stream(self, query: str) -> _Stream:
        try:
            return self._streams[query]
        except KeyError:
            raise KeyError(query) from None

    def read(self, query: str, since: int = 0, limit: int = 1000) -> dict:
        """Matches of ``query`` with cursor > ``since``, oldest first, at most ``limit``.

        ``missed`` counts the matches after ``since`` that were dropped before this read.
        Raises ``KeyError(query)`` for a query that is not open.
        """
        stream = self._stream(query)
        since = max(0, since)
        missed = 0
        start = 0
        # cursors of the retained records are contiguous: oldest .. head
        oldest = stream.head - len(stream.records) + 1
        if stream.records:
            start = max(0, since - oldest + 1)
            missed = max(0, oldest - max(since, stream.base) - 1)
        matches = list(map(_record, count(oldest + start),
                           _tail(stream.records, start, max(0, limit))))
        return {
            "matches": matches,
            # nothing after ``since`` is retained: continue from the head (a reader that starts
            # at 0 skips the cursors before this gateway's ``cursor_base``)
            "next": matches[-1]["cursor"] if matches else
            (max(since, stream.head) if limit > 0 else since),
            "head": stream.head,
            "missed": missed,
        }

    def stats(self, query: str) -> dict:
        stream = self._stream(query)
        return {
            "stored": len(stream.records),
            "total": stream.head - stream.base,
            "dropped": stream.dropped,
            "duplicates": stream.duplicates,
            "head": stream.head,
        }

    async def wait(self, query: str, since: int, timeout: float) -> bool:
        """True as soon as ``query`` has a cursor > ``since``; False on timeout or close."""
        return await self._wait({query: since}, query, timeout, closed=False)

    async def wait_any(self, cursors: dict, timeout: float) -> bool:
        """True as soon as one of the queries of ``cursors`` has a cursor past its own (or
        is closed); False on timeout (a long poll of several queries: POST /v1/matches)."""
        return await self._wait(cursors, _ANY, timeout, closed=True)

    async def _wait(self, cursors: dict, key: str, timeout: float, closed: bool) -> bool:
        """Wait on the event ``key`` (a query's, or _ANY) until one of ``cursors`` moved
        (True), one of their queries is closed (``closed``) or ``timeout`` passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for query, since in cursors.items():
                stream = self._streams.get(query)
                if stream is None:
                    return closed
                if stream.head > since:
                    return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            event = self._events.get(key)
            if event is None:
                event = self._events[key] = asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                return False

    def _wake(self, query: str) -> None:
        # a set event is discarded, so the next waiter creates a fresh one (no clear() race)
        for key in (query, _ANY):
            event = self._events.pop(key, None)
            if event is not None:
                event.set()
