"""Ingest: events from the HTTP API routed to their actors, each request's matches moved to the
store before it is answered, and ``advance`` (a watermark for every actor). An actor over its
outbox limit is drained and asked again (backpressure)."""
from __future__ import annotations

import asyncio
import itertools
import math

from raycep.actors.routing import GLOBAL, behind_steps, event_steps
from raycep.cep.io.codec import (decode_batch, encode_batch, encode_columns, encode_rows,
                                 read_header)
from raycep.cep.errors import IngestError, OverloadedError
from raycep.cep.event import make_event
from raycep.cep.lang.validate import finite, short_repr
from raycep.gateway.server.actors import Actors, event_clock
from raycep.gateway.server.drain import Outboxes
from raycep.gateway.server.messages import type_name
from raycep.gateway.server.send_stages import STARTED, SendStages, now
from raycep.gateway.server.settings import GatewaySettings


class Ingest:
    """``events_in`` / ``bad_rows``: the rows taken and refused so far; ``started``: the
    gateway's start time, part of the batch ids it makes."""

    def __init__(self, actors: Actors, outboxes: Outboxes, key_attr: str | None,
                 settings: GatewaySettings, started: float, observe_send=None):
        self.actors = actors
        self.outboxes = outboxes
        self.key_attr = key_attr
        self.settings = settings
        self.started = started
        self.events_in = 0
        self.bad_rows = 0
        self.stages = SendStages(observe_send)
        self._batch_ids = itertools.count(1)

    async def ingest_body(self, body, source: str = "gateway", batch: bool = False) -> dict:
        """Events from the HTTP API: a msgpack batch (cep.codec: bytes, or with ``batch`` its
        unpacked map) or JSON-like rows (a list of mappings, or ``{"events": [...]}``). Bad
        rows are reported and skipped.

        A version-1 batch of array rows (what ``Client.send`` and producers write) is routed
        by each row's type and key and forwarded as it came, without building events here:
        the actors decode and validate each row once, and their bad rows come back named by
        the row's index in this request. A version-2 batch (columns: ``Client.send`` of a
        table) is routed by its key column and each actor gets its rows as columns, which it
        evaluates in bulk (``Engine.process_columns``)."""
        STARTED.set(now())
        if batch or isinstance(body, (bytes, bytearray)):
            header, rows = read_header(body)
            if header["schema_version"] == 1:
                routed = self.actors.routing.route_rows(rows)
                if routed is not None:
                    return await self._forward(routed, rows, header["source"],
                                               header["batch_id"])
            else:
                table = _table(rows)
                routed = self.actors.routing.route_table(table) if table is not None else None
                if routed is not None:
                    return await self._forward_table(table, routed, header["source"],
                                                     header["batch_id"])
            batch, problems = decode_batch(header, errors="collect")
            events, source, batch_id = list(batch.events), batch.source, batch.batch_id
        else:
            batch_id = None
            events, source, problems = self._json_events(body, source)
        ack = await self.ingest(events, source, batch_id)
        ack["bad_rows"] = [str(p) for p in problems]
        self.bad_rows += len(problems)
        return ack

    def _json_events(self, body, source: str) -> tuple:
        """(events, source, problems) of JSON-like rows: a list of mappings, or
        ``{"events": [...], "source": ...}``; a bad row is an IngestError in problems."""
        rows = body.get("events") if isinstance(body, dict) else body
        if not isinstance(rows, list):
            raise IngestError("expected a list of events or {\"events\": [...]}")
        if isinstance(body, dict) and isinstance(body.get("source"), str):
            source = body["source"]
        events, problems = [], []
        for i, row in enumerate(rows):
            try:
                events.append(make_event(row, i, self.key_attr))
            except IngestError as exc:
                problems.append(exc)
        return events, source, problems

    async def _forward(self, routed: dict, rows: list, source: str,
                       batch_id: str | None = None) -> dict:
        """Send the ``rows`` of a request (wire rows), routed by ``RoutingTable.route_rows``,
        to their actors as they came; the acknowledgement of ``ingest``, bad rows named by
        their index in the request (once, also when a row went to two actors)."""
        bid = self._actor_batch_id(batch_id)
        payloads = {t: encode_rows(part, source, f"{bid}:{t}")
                    for t, (part, _) in routed.items()}
        times = [r[1] for r in rows]
        origins = {t: o for t, (_, o) in routed.items()}
        return await self._forwarded(payloads, origins, len(rows), latest_time(times),
                                     behind_steps(times, origins))

    async def _forward_table(self, table, routed: dict, source: str,
                             batch_id: str | None = None) -> dict:
        """Send each actor its rows of ``table`` (``RoutingTable.route_table``) as columns."""
        import numpy as np
        import pyarrow as pa
        bid = self._actor_batch_id(batch_id)
        payloads = {t: encode_columns(table.take(pa.array(rows)), source, f"{bid}:{t}")
                    for t, rows in routed.items()}
        times = table.column("ts").to_numpy().astype(np.float64, copy=False)
        return await self._forwarded(payloads, routed, table.num_rows,
                                     _latest_column_time(times), behind_steps(times, routed))

    async def _forwarded(self, payloads: dict, origins: dict, n_rows: int,
                         clock: float | None, steps: dict) -> dict:
        """Dispatch ``payloads``; the acknowledgement, an actor's bad rows named by their index
        in the request (``origins``: per target, its rows' indexes, a list or numpy array;
        ``steps``: ``behind_steps``)."""
        acks = await self._dispatch(payloads, clock, steps)
        bad: dict = {}
        for target, ack in zip(payloads, acks):
            origin = origins[target]
            for row, field, reason in ack.get("bad", ()):
                index = int(origin[row]) if row is not None and 0 <= row < len(origin) \
                    else row
                bad.setdefault(index, IngestError(reason, index, field))
        good = n_rows - len(bad)
        self.events_in += good
        self.bad_rows += len(bad)
        return merge_acks(list(payloads), acks, good, [str(e) for _, e in sorted(
            bad.items(), key=lambda item: -1 if item[0] is None else item[0])])

    def _actor_batch_id(self, batch_id: str | None) -> str:
        """The id of a request's batches to the actors: from the sender's batch id when it
        gave one, so a batch sent again (to this or a restarted gateway) is recognised by
        the actors and not applied twice; else a new one."""
        if batch_id is not None:
            return f"b:{batch_id}"
        return f"{self.started}:{next(self._batch_ids)}"

    async def ingest(self, events: list, source: str = "gateway",
                     batch_id: str | None = None) -> dict:
        """Route ``events`` to their actors (the same routing Spark jobs use), wait for the
        acknowledgements, and move the resulting matches to the store (and sink): the reply
        comes when every match of the request is there. An actor that refuses its batch
        (backpressure: its match outbox is over its limit) is drained and asked again for up
        to ``settings.overload_wait`` seconds, then OverloadedError (503) is raised."""
        routed = self.actors.routing.route(events)
        bid = self._actor_batch_id(batch_id)
        acks = await self._dispatch({
            t: encode_batch(routed[t], source, f"{bid}:{t}") for t in routed},
            latest_time(e.ts for e in events), event_steps(events, routed))
        self.events_in += len(events)
        return merge_acks(list(routed), acks, len(events),
                          [r for a in acks for r in a["bad_rows"]])

    async def _dispatch(self, payloads: dict, clock: float | None = None,
                        steps: dict | None = None) -> list:
        """Send each target its batch, all at once; drain them; their acks, in order.
        ``clock``: the latest event time of the request; the actors with queries that got
        no row of it observe it (PartitionWorker.observe), those with rows after them: every
        actor's event time is the stream's, as in one engine (deferred matches, lateness).
        ``steps``: per target, its rows behind an earlier row of the request and the time
        the stream had reached before each (``behind_steps``): observed before the row, so
        the actor scores it as one engine does (out of order, its lateness)."""
        steps = steps or {}
        idle = [t for t in self.actors.busy() if t not in payloads] \
            if clock is not None else []
        dispatched = now()
        got = await asyncio.gather(*(_timed(self._send(t, b, clock, steps.get(t)))
                                     for t, b in payloads.items()),
                                   *(self.actors.call(t, "observe", clock) for t in idle))
        acked = now()
        await asyncio.gather(*(self.outboxes.drain(t) for t in (*payloads, *idle)))
        acks = [ack for ack, _ in got[:len(payloads)]]
        started = STARTED.get()
        if started is not None:
            self.stages.add(started, dispatched, acked, now(), acks,
                            [took for _, took in got[:len(payloads)]])
        return acks

    async def _send(self, target, batch: bytes, clock: float | None,
                    steps: list | None = None) -> dict:
        """``ingest`` on one actor. Backpressure: an actor whose outbox is over its limit
        refuses the batch without processing it; drain it into the store and ask again,
        pausing longer each time, for up to ``settings.overload_wait`` seconds."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.settings.overload_wait, 0.0
        while True:
            try:
                return await self.actors.call(  # (the global actor is not re-partitioned)
                    target, "ingest", batch, None, clock,
                    None if target == GLOBAL else self.actors.routing.epoch, steps)
            except OverloadedError as exc:
                if not loop.time() < deadline:          # (a NaN setting: no retry)
                    why = getattr(exc, "cause", None) or exc
                    raise OverloadedError(
                        f"{why} (the gateway drained it and retried for "
                        f"{self.settings.overload_wait:g} s; that actor processed nothing "
                        f"of this request, others may have taken their part: sending it "
                        f"again is safe, events are de-duplicated by id)") from None
            await asyncio.sleep(pause)
            pause = min(0.5, max(0.01, pause * 2))
            await self.outboxes.drain(target)

    async def advance(self, watermark: float, force: bool = False) -> dict:
        """Tell every actor no event with ``ts <= watermark`` will come; releases deferred
        matches (trailing negation). Refused (IngestError): a watermark that is not a finite
        number, and, unless ``force``, one more than ``settings.max_advance_ahead`` past the
        latest event time the actors have seen (every later event would be late)."""
        w = check_watermark(watermark, force)
        if not force:
            await self._check_ahead(w)
        moved = sum(await asyncio.gather(*(
            self.outboxes.call_and_drain(t, "advance", w) for t in self.actors.targets)))
        return {"watermark": w, "matches": moved}

    async def _check_ahead(self, w: float) -> None:
        """Refuse a watermark more than ``settings.max_advance_ahead`` past the latest event
        time the actors have seen."""
        clock = event_clock(await self.actors.stats())
        bound = self.settings.max_advance_ahead
        if w > clock + bound:
            seen = f"latest event time {clock:g}" if clock > -math.inf else \
                "no event seen yet"
            raise IngestError(
                f"{w:g} is more than {bound:g} seconds ahead of the cluster's clock "
                f"({seen}), so every later event would be late; the bound is raycep "
                f"serve --max-advance-ahead; send force (\"force\": true, "
                f"client.advance(w, force=True), raycep advance --force) to advance anyway",
                field="watermark")


async def _timed(call) -> tuple:
    """(what ``call`` returns, the seconds it took)."""
    t = now()
    got = await call
    return got, now() - t


def check_watermark(watermark, force) -> float:
    """``advance``'s arguments: a finite number (as a float) and a boolean."""
    if isinstance(watermark, bool) or not isinstance(watermark, (int, float)):
        raise IngestError(f"must be a finite number, got {type_name(watermark)}",
                          field="watermark")
    if not finite(watermark):
        raise IngestError(f"must be a finite number, got {short_repr(watermark)}",
                          field="watermark")
    if not isinstance(force, bool):
        raise IngestError(f"must be true or false, got {type_name(force)}", field="force")
    return float(watermark)


def _table(data):
    """The pyarrow Table of a version-2 batch's Arrow bytes when its rows can be forwarded as
    columns (a ``ts`` column of numbers: event times in seconds); None otherwise (the rows are
    then decoded here, which names what is wrong)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    try:
        table = ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, ValueError, OSError):
        return None
    if "ts" not in table.schema.names:
        return None
    kind = table.schema.field("ts").type
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
        return None
    return table


def _latest_column_time(times) -> float | None:
    """``latest_time`` of a table's ``ts`` column (numbers, as float64)."""
    import numpy as np
    times = times[np.isfinite(times)]
    return float(times.max()) if len(times) else None


def latest_time(times) -> float | None:
    """The largest finite number among ``times`` (None: none; bad rows are named later)."""
    best = None
    for ts in times:
        if (ts.__class__ is float or ts.__class__ is int) and -math.inf < ts < math.inf \
                and (best is None or ts > best):
            best = ts
    return best


def merge_acks(targets: list, acks: list, events: int, bad_rows: list) -> dict:
    """One request's acknowledgement from its actors' acks."""
    return {"events": events,
            "duplicates": sum(a["duplicates"] for a in acks),
            "late": sum(a.get("late", 0) for a in acks),
            "partitions": {str(t): a["events"] for t, a in zip(targets, acks)},
            "matches": sum(a["queued"] + len(a["matches"]) - a.get("late", 0)
                           for a in acks),
            "truncated_triggers": sum(a.get("truncated", 0) for a in acks),
            # actors that had this batch already (a retry): they applied nothing again
            "redelivered": sum(1 for a in acks if a.get("redelivered")),
            "bad_rows": bad_rows}
