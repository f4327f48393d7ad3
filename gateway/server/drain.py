"""Outboxes: the actors' match outboxes moved to the match store (and its sink), and the
store read back. An actor keeps each record until a later drain acknowledges it, so a gateway
that stops between two drains loses nothing (actors/partition.py)."""
from __future__ import annotations

import asyncio
import logging

import orjson

from raycep.cep.errors import CepError, NotFoundError
from raycep.cep.io.output import record_identity, record_meta
from raycep.gateway.server.actors import Actors
from raycep.gateway.server.settings import GatewaySettings

log = logging.getLogger("raycep.gateway")

#: the store stream of late events (not a valid query name)
LATE = ":late"


class Outboxes:
    """Per actor: the last sequence number stored (acknowledged by the next drain), a lock
    (one drain at a time), the last drain error (logged when it changes)."""

    def __init__(self, actors: Actors, store, settings: GatewaySettings):
        self.actors = actors
        self.store = store
        self.settings = settings
        self._acks = {t: 0 for t in actors.targets}
        self._locks = {t: asyncio.Lock() for t in actors.targets}
        self._waiting: dict = {}            # target -> the drain that starts next (drain)
        self._errors: dict = {}

    async def start(self) -> None:
        """Open the late-events stream and turn every actor's outbox on (with its limit)."""
        self.store.open(LATE)
        for target in self.actors.targets:
            await self.actors.call(target, "set_outbox", True, self.settings.outbox_capacity)

    async def retarget(self) -> None:
        """After a rescale (gateway/server/scaling.py): forget the actors that are gone; an
        actor that is new starts at sequence number 0 with its outbox on."""
        for target in [t for t in self._acks if t not in self.actors.targets]:
            del self._acks[target], self._locks[target]
            self._errors.pop(target, None)
        for target in self.actors.targets:
            if target not in self._acks:
                self._acks[target], self._locks[target] = 0, asyncio.Lock()
                await self.actors.call(target, "set_outbox", True,
                                       self.settings.outbox_capacity)

    async def drain(self, target) -> int:
        """Move a target's outbox to the match store (and sink), page by page; returns the
        number of records moved. A page is acknowledged by the next drain call, after it is
        stored (the last one by a call without records), so the outbox ends empty: what it
        holds is never in the store yet, which is what its limit (backpressure) counts.

        Callers share drains: one that finds a drain of ``target`` waiting to start (behind
        the one running) waits for that one, which moves everything the outbox held when
        the caller came (issue 36: concurrent sends to one actor no longer drain it one
        after the other, each behind the others' calls at the actor)."""
        if target not in self._locks:       # an actor a rescale stopped (a drain of every
            return 0                        # actor began before)
        waiting = self._waiting.get(target)
        if waiting is None:
            waiting = self._waiting[target] = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(self._next_drain(target, waiting))
        return await asyncio.shield(waiting)

    async def _next_drain(self, target, done: asyncio.Future) -> None:
        lock = self._locks.get(target)
        if lock is None:                    # stopped by a rescale meanwhile
            del self._waiting[target]
            done.set_result(0)
            return
        async with lock:
            del self._waiting[target]       # started: a later caller needs the next one
            try:
                await self._drain_locked(target, done)
            except Exception as exc:        # the callers' error (the drain loop logs it)
                if not done.done():
                    done.set_exception(exc)
                else:
                    log.debug("acknowledging %s's outbox: %s (the next drain does)", target,
                              exc)

    async def call_and_drain(self, target, method: str, *args) -> int:
        """Call ``method`` on ``target`` and drain it, under its drain lock: the background
        drain loop cannot move what the call released in between, so the count is its."""
        async with self._locks[target]:
            await self.actors.call(target, method, *args)
            return await self._drain_locked(target)

    async def _drain_locked(self, target, done: asyncio.Future | None = None) -> int:
        """The drain; ``done``: given the count as soon as every record is stored, before
        the last acknowledgement (a call to the actor, queued behind its other calls, that
        the callers need not wait for: it is submitted before they go on, and nothing else
        drains the actor until it is answered)."""
        moved = 0
        while True:
            page = await self.actors.call(target, "drain", self._acks[target],
                                          self.settings.drain_limit)
            names = page.get("names")
            self.put_records(page["records"], None if names is None else
                             list(map(names.__getitem__, page["queries"])), page.get("ids"))
            moved += len(page["records"])
            self._acks[target] = page["last"]
            if not page["pending"]:
                if done is not None:
                    done.set_result(moved)
                if page["records"]:
                    await self.actors.call(target, "drain", self._acks[target], 0)
                return moved

    async def acknowledge(self) -> None:
        """Acknowledge what was stored (a graceful stop), so the next gateway does not receive
        it again; unreachable actors are skipped."""
        for target in self.actors.targets:
            try:
                await self.actors.call(target, "drain", self._acks[target], 0)
            except CepError:
                pass

    async def drain_all(self) -> int:
        """Drain every actor at once; the records moved. A failing actor is logged (when its
        error changes, not on every drain) and does not stop the others."""
        targets = list(self.actors.targets)
        results = await asyncio.gather(*(self.drain(t) for t in targets),
                                       return_exceptions=True)
        moved = 0
        for target, r in zip(targets, results):
            if isinstance(r, BaseException):
                if self._errors.get(target) != str(r):
                    log.warning("cannot drain %s: %s", target, r)
                self._errors[target] = str(r)
            else:
                if self._errors.pop(target, None) is not None:
                    log.warning("draining %s works again", target)
                moved += r
        return moved

    def put_records(self, records: list, queries: list | None = None,
                    idents: list | None = None) -> None:
        """Store records as the actors give them (JSON bytes), by query, without parsing a
        match or retraction: ``queries`` / ``idents`` are their queries and identities where
        the actor knew them (a drain page's), else cep.io.output.record_meta reads them; the
        store keeps the bytes; late-event records under LATE."""
        by_stream: dict = {}
        if queries is None:
            queries = idents = [None] * len(records)
        for stream, identity, data in zip(queries, idents, records):
            if stream is None:
                stream, identity = _meta(data)
            got = by_stream.get(stream)
            if got is None:
                by_stream[stream] = ([identity], [data])
            else:
                got[0].append(identity)
                got[1].append(data)
        for qid, (ids, datas) in by_stream.items():
            self.store.put_raw(qid, ids, datas)

    def put_matches(self, records: list) -> None:
        """Store match, retraction and late-event records (late events under LATE)."""
        by_stream: dict = {}
        for rec in records:
            by_stream.setdefault(_stream(rec), []).append(rec)
        for qid, recs in by_stream.items():
            self.store.put(qid, recs)

    def matches(self, qid: str, since: int = 0, limit: int = 1000) -> dict:
        if qid not in self.store.queries() or qid == LATE:
            raise NotFoundError(f"no query {qid!r} is registered")
        return self.store.read(qid, since, limit)

    def late_events(self, since: int = 0, limit: int = 1000) -> dict:
        """The late-events output (events later than the lateness threshold, never used), as
        a page like ``matches``: ``{"matches": [records], "next", "missed", "head"}``."""
        if LATE not in self.store.queries():
            self.store.open(LATE)
        return self.store.read(LATE, since, limit)

    def late_total(self) -> int:
        """How many late events the store has received."""
        return self.store.stats(LATE).get("total", 0) if LATE in self.store.queries() else 0


def _stream(record: dict) -> str:
    """The store stream of an output record: its query's, or LATE for a late event."""
    return LATE if record.get("late") else record["query"]


def _meta(data: bytes) -> tuple:
    """``(stream, identity)`` of an actor's record (JSON bytes)."""
    meta = record_meta(data)
    if meta is None:
        record = orjson.loads(data)
        meta = (_stream(record), record_identity(record))
    return meta

