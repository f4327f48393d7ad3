"""Producer: the bulk ingestion path shared by Spark jobs and ``raycep demo``.

Events are routed with the cluster's RoutingTable, packed into msgpack batches (cep.io.codec) and
pushed straight to the partition actors (named ``raycep-p<i>`` / ``raycep-global`` in the Ray
namespace ``raycep``), bypassing the gateway; the gateway drains the actors' match outboxes.
Batch ids are ``<producer run>:<sequence>:<target>`` (the run is a random token per Producer),
so a batch this producer sends twice is recognised, and two producers that share a source
name never mistake each other's batches for redeliveries.

Backpressure: an actor whose match outbox is over its limit refuses batches (OverloadedError,
nothing processed). Each ``Lane`` (the batches of one producer to one actor) names every
batch's predecessor, so the actor also refuses the batches in flight behind a refused one;
the lane waits (growing pauses) and sends them again in their order, for up to ``retry_for``
seconds, then raises the OverloadedError. Nothing is lost and the order is kept.
"""
from __future__ import annotations

import itertools
import time
import uuid
from collections import deque

from raycep.actors.handles import as_handle, result as _result
from raycep.actors.routing import GLOBAL
from raycep.cep.errors import ConflictError, OverloadedError
from raycep.cep.io.codec import encode_batch


def _overloaded(exc: BaseException) -> OverloadedError | None:
    """The OverloadedError in ``exc`` (Ray wraps an actor's exception: its cause, without
    Ray's traceback text), or None."""
    for err in (getattr(exc, "cause", None), exc):
        if isinstance(err, OverloadedError):
            return err
    return None


class Lane:
    """The batches of one sender to one partition actor, in order, with at most
    ``max_in_flight`` unacknowledged. ``on_ack(ack)`` gets each batch's acknowledgement.

    Every batch names its predecessor (``ingest(data, after)``), so when the actor refuses a
    batch (its outbox is full) it refuses the ones behind it too; the lane then sends them all
    again in order after a pause (``backoff`` seconds, doubling up to 1 s), and raises the
    OverloadedError when the actor still refuses after ``retry_for`` seconds. A batch the
    actor does not answer within ``wait_for`` seconds raises UnavailableError (a Ray actor
    that died is restarted and the batch retried by Ray meanwhile, see gateway/runtime.py)."""

    def __init__(self, handle, max_in_flight: int = 8, on_ack=None, retry_for: float = 60.0,
                 backoff: float = 0.05, wait_for: float = 120.0, epoch: int | None = None):
        """``epoch``: the partition layout the batches were routed for (the actor refuses
        them after a rescale: ConflictError)."""
        self.handle = as_handle(handle)
        self.epoch = epoch
        self.max_in_flight = max(1, max_in_flight)
        self.on_ack = on_ack or (lambda ack: None)
        self.retry_for = retry_for
        self.backoff = backoff
        self.wait_for = wait_for
        self.refusals = 0                    # refused batches sent again
        self._flight: deque = deque()        # (ref, data, batch_id, after), oldest first
        self._last = None                    # id of the last batch pushed

    def push(self, data: bytes, batch_id: str, clock: float | None = None):
        """Send a batch after the ones pushed before; ``clock``: the latest event time of
        the slice it is part of (PartitionWorker.ingest observes it after the rows)."""
        self._flight.append(self._send(data, batch_id, self._last, clock))
        self._last = batch_id
        while len(self._flight) > self.max_in_flight:
            self._settle()

    def flush(self):
        """Wait until every batch pushed is acknowledged."""
        while self._flight:
            self._settle()

    def _send(self, data: bytes, batch_id: str, after, clock=None) -> tuple:
        args = (data, after, clock) if self.epoch is None else (data, after, clock, self.epoch)
        return (self.handle.submit("ingest", *args), data, batch_id, after, clock)

    def _settle(self):
        """Wait for the oldest batch in flight; while the actor refuses it, send it and the
        batches behind it (refused as well) again."""
        deadline, delay = None, self.backoff
        while True:
            try:
                ack = _result(self._flight[0][0], self.wait_for)
            except Exception as exc:
                refused = _overloaded(exc)
                if refused is None:
                    moved = getattr(exc, "cause", None)
                    if isinstance(moved, ConflictError):
                        raise moved from None
                    raise
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.retry_for
                if not now < deadline:            # (a NaN retry_for: no retry)
                    raise OverloadedError(f"{refused} (still refused after "
                                          f"{self.retry_for:g} s of retries)") from None
                again = [self._flight.popleft()]
                while self._flight:           # refused too: their predecessor was
                    entry = self._flight.popleft()
                    try:
                        self.on_ack(_result(entry[0]))
                    except Exception as exc2:
                        if _overloaded(exc2) is None:
                            raise
                        again.append(entry)
                self.refusals += len(again)
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                self._flight.extend(self._send(d, b, a, c) for _, d, b, a, c in again)
                continue
            self._flight.popleft()
            self.on_ack(ack)
            return


class Producer:
    """``send(events)`` routes, encodes and pushes; ``flush()`` waits for the acks.

    ``routing`` is a RoutingTable or a callable returning one (e.g. a GET of the gateway's
    ``/v1/routing``), re-read before every ``refresh_every``-th slice (default: every slice),
    so a global query registered while the stream flows gets its events from the next slice.
    Raise ``refresh_every`` for very small slices where one request per slice is too much.
    ``handles``: actor handles (``actors.handles``: ``named_handles`` in a Ray cluster,
    ``LocalHandle`` in one process).
    An actor that refuses batches (backpressure) gets them again, in order, for up to
    ``retry_for`` seconds (see ``Lane``)."""

    def __init__(self, handles: dict, routing, source: str, max_in_flight: int = 8,
                 refresh_every: int = 1, retry_for: float = 60.0):
        self.handles = handles
        self._routing_source = routing if callable(routing) else (lambda: routing)
        self.routing = self._routing_source()
        self.source = source
        self.max_in_flight = max_in_flight
        self.refresh_every = refresh_every
        self._seq = itertools.count(1)
        self._run = uuid.uuid4().hex[:12]
        self._lanes = {t: Lane(h, max_in_flight, self._account, retry_for,
                               epoch=None if t == GLOBAL else self.routing.epoch)
                       for t, h in handles.items()}
        self.redelivered = 0
        self.events = 0
        self.bad_rows: list = []
        self.duplicates = 0
        self.matches = 0
        self.truncated = 0

    def send(self, events: list):
        """Push one slice of the stream: every actor gets one batch, with the slice's latest
        event time (an actor none of its events go to gets an empty one), so each actor's
        event time is the stream's, as through the gateway."""
        seq = next(self._seq)
        if seq > 1 and (seq - 1) % self.refresh_every == 0:
            routing = self._routing_source()
            if routing.epoch != self.routing.epoch:
                raise ConflictError(
                    f"the cluster was re-partitioned ({self.routing.partitions} -> "
                    f"{routing.partitions} partition actors) after this producer started: "
                    f"make a new one with the actors of the new layout; this slice was not "
                    f"sent")
            self.routing = routing
        routed = self.routing.route(events)
        clock = max((e.ts for e in events), default=None)
        for target, lane in self._lanes.items():
            evs = routed.get(target)
            if evs is None and clock is None:
                continue
            batch_id = f"{self._run}:{seq}:{target}"
            lane.push(encode_batch(evs or [], self.source, batch_id), batch_id, clock)
        self.events += len(events)

    def flush(self) -> dict:
        for lane in self._lanes.values():
            lane.flush()
        return {"events": self.events, "duplicates": self.duplicates,
                "redelivered_batches": self.redelivered,
                "refused_batches": sum(lane.refusals for lane in self._lanes.values()),
                "bad_rows": self.bad_rows, "matches": self.matches,
                "truncated_triggers": self.truncated}

    def _account(self, ack: dict):
        self.redelivered += ack["redelivered"]
        self.duplicates += ack["duplicates"]
        self.bad_rows.extend(ack["bad_rows"])
        self.matches += ack["queued"] + len(ack["matches"])
        self.truncated += ack.get("truncated", 0)
