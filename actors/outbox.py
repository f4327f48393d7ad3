"""A partition worker's outbox: the records it produced that the gateway has not acknowledged,
oldest first, each with its query and identity where the worker knew them when it made the
record (the bulk records of cep.io.output.MatchLines.records), so that the gateway stores them
without reading them (None: the gateway reads the record, cep.io.output.record_meta).

The records are one deque (no container per record for the collector to track); their
queries and identities are kept as the lists each delivery came with (a segment per
``extend``), so adding, acknowledging and paging cost C-level slices, not work per record."""
from __future__ import annotations

from collections import deque
from itertools import islice


class Outbox:
    """Records (JSON bytes) with their queries and identities (str or None each)."""

    __slots__ = ("records", "_segments", "_done")

    def __init__(self, records=()):
        self.records: deque = deque(records)
        #: [count, queries or None, identities or None] per delivery, oldest first
        self._segments: deque = deque()
        if self.records:
            self._segments.append([len(self.records), None, None])
        self._done = 0                    # records of the oldest segment acknowledged

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def extend(self, records: list, queries: list | None = None,
               idents: list | None = None) -> None:
        """Append ``records``; ``queries`` / ``idents``: theirs, in order (None: unknown)."""
        if records:
            self.records.extend(records)
            if queries is not None and queries.count(None) == len(queries):
                queries = idents = None             # (records made one by one)
            self._segments.append([len(records), queries, idents])

    def forget(self, count: int) -> None:
        """Drop the ``count`` oldest records (at most as many as there are)."""
        box = self.records
        count = min(count, len(box))
        deque(islice(iter(box.popleft, object()), count), maxlen=0)   # popleft, in C
        segments = self._segments
        while count:
            left = segments[0][0] - self._done
            if count < left:
                self._done += count
                return
            segments.popleft()
            self._done = 0
            count -= left

    def page(self, limit: int) -> tuple:
        """``(records, queries, idents)`` of the ``limit`` oldest, as lists."""
        records = list(islice(self.records, limit))
        queries: list = []
        idents: list = []
        start, want = self._done, len(records)
        for n, q, i in self._segments:
            if not want:
                break
            take = min(want, n - start)
            if q is None:
                queries += [None] * take
                idents += [None] * take
            else:
                queries += q[start:start + take]
                idents += i[start:start + take]
            want -= take
            start = 0
        return records, queries, idents
