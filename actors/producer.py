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

Re-partitioning (``raycep scale``, gateway/server/scaling.py): while the keys move, the
actors refuse batches that start after the move's time (MovingError: the lane tries again
every ``backoff`` seconds), then, once they hold the new layout, refuse every batch routed
for the old one (ConflictError). A ``Producer`` given a way to reach the actors of any layout
(``handles`` a function of the routing table, e.g. ``named_handles``) then reads the routing
table again and sends the refused events again, routed for the new layout: none is lost or
processed twice, and each key's events stay in order.
"""
from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from functools import partial

from raycep.actors.handles import as_handle, ready, result as _result
from raycep.actors.routing import GLOBAL, event_steps
from raycep.cep.errors import ConflictError, MovingError, OverloadedError, UnavailableError
from raycep.cep.io.codec import encode_batch


def _overloaded(exc: BaseException) -> OverloadedError | None:
    """The OverloadedError in ``exc`` (Ray wraps an actor's exception: its cause, without
    Ray's traceback text), or None."""
    for err in (getattr(exc, "cause", None), exc):
        if isinstance(err, OverloadedError):
            return err
    return None


def _moved(exc: BaseException) -> bool:
    """Whether ``exc`` says that a batch was not taken because its actor's keys moved (or
    are moving, or the actor was removed by re-partitioning)."""
    for err in (getattr(exc, "cause", None), exc):
        if isinstance(err, (ConflictError, OverloadedError, UnavailableError)):
            return True
    return type(exc).__name__ in ("RayActorError", "ActorDiedError")


def _conflict(exc: BaseException) -> bool:
    return any(isinstance(err, ConflictError) for err in (getattr(exc, "cause", None), exc))


def _backpressure(exc: BaseException) -> bool:
    """An OverloadedError that is not a move (a full outbox still refusing after the
    retries): raised as it is."""
    refused = _overloaded(exc)
    return refused is not None and not isinstance(refused, MovingError)


def is_move(exc: BaseException) -> bool:
    """Whether a batch was not taken because the cluster was re-partitioned: a ConflictError
    (routed for another layout), or its actor gone (removed); not backpressure that
    outlasted a lane's retries."""
    return _moved(exc) and not _backpressure(exc)


def follow_moves(op, follow, repeat: bool = False, limit: int = 100) -> None:
    """Run ``op``; while it fails because the cluster was re-partitioned (``is_move``),
    run ``follow(exc)``'s step instead (it routes for the new layout and sends again what
    no actor took), then (``repeat``) ``op`` again. Any other error is raised."""
    step = op
    for _ in range(limit):
        try:
            step()
            if step is op or not repeat:
                return
            step = op
        except Exception as exc:              # noqa: BLE001 (a move, or raised again)
            if not is_move(exc):
                raise
            step = follow(exc)
    raise ConflictError(f"the cluster was re-partitioned {limit} times while one send "
                        f"went on")


def next_layout(read, epoch: int, exc: BaseException, retry_for: float):
    """The routing table ``read()`` gives once its layout is not ``epoch`` (the actors adopt
    their keys just before the gateway routes by them); ``exc`` (what refused a batch) raised
    when none comes within ``retry_for`` seconds (5 s for an actor that did not answer: it
    may have crashed rather than been removed)."""
    wait = retry_for if _conflict(exc) else min(5.0, retry_for)
    deadline = time.monotonic() + wait
    while True:
        routing = read()
        if routing.epoch != epoch:
            return routing
        if not time.monotonic() < deadline:
            raise exc
        time.sleep(0.05)


def nudge_others(lanes, waiting: "Lane") -> None:
    """A lane's actor refuses batches because keys are about to move: every other lane
    sends again what its actor refused (each actor must catch up to the move's time)."""
    for lane in list(lanes):
        if lane is not waiting:
            lane.nudge()


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
        self._flight: deque = deque()        # (ref, data, batch_id, after, clock, steps)
        self._last = None                    # id of the last batch pushed
        #: called (with this lane) while it waits for an actor that refused a batch
        #: because its keys are about to move (MovingError): the Producer then sends again
        #: what its other lanes had refused (``nudge``), so that every actor catches up to
        #: the move's time, not only this one
        self.on_moving = None

    def push(self, data: bytes, batch_id: str, clock: float | None = None,
             steps: list | None = None):
        """Send a batch after the ones pushed before; ``clock``: the latest event time of
        the slice it is part of (PartitionWorker.ingest observes it after the rows);
        ``steps``: its rows behind another actor's row of the slice (routing.behind_steps)."""
        self._flight.append(self._send(data, batch_id, self._last, clock, steps))
        self._last = batch_id
        while len(self._flight) > self.max_in_flight:
            self._settle()

    def flush(self):
        """Wait until every batch pushed is acknowledged."""
        while self._flight:
            self._settle()

    def nudge(self) -> None:
        """Without waiting: take the answers that came for the oldest batches in flight,
        and send again (in order) those refused because keys are about to move."""
        while self._flight and ready(self._flight[0][0]):
            try:
                ack = _result(self._flight[0][0])
            except Exception as exc:          # noqa: BLE001 (a refusal: sent again)
                if not isinstance(_overloaded(exc), MovingError):
                    return                    # (left for _settle to raise or retry)
                again = []
                while self._flight and ready(self._flight[0][0]):
                    entry = self._flight[0]
                    try:
                        self.on_ack(_result(entry[0]))
                        self._flight.popleft()
                        continue
                    except Exception as exc2:     # noqa: BLE001
                        if _overloaded(exc2) is None:
                            break
                    again.append(self._flight.popleft())
                rest = list(self._flight)
                self._flight.clear()
                self.refusals += len(again)
                self._flight.extend(self._send(*entry[1:]) for entry in again)
                self._flight.extend(rest)     # (refused too when they come: sent later)
                return
            self._flight.popleft()
            self.on_ack(ack)

    def unsettled(self) -> list:
        """After a ConflictError (the cluster was re-partitioned): wait for every batch in
        flight and return the ids of those the actor did not take (refused, or its actor
        gone), oldest first; the lane is then empty."""
        out = []
        while self._flight:
            entry = self._flight.popleft()
            try:
                self.on_ack(_result(entry[0], self.wait_for))
            except Exception as exc:          # noqa: BLE001 (any refusal: sent again)
                if not _moved(exc):
                    raise
                out.append(entry[2])
        return out

    def _send(self, data: bytes, batch_id: str, after, clock=None, steps=None) -> tuple:
        args = (data, after, clock, self.epoch, steps)
        while args[-1] is None:                   # (left out: ingest's defaults)
            args = args[:-1]
        return (self.handle.submit("ingest", *args), data, batch_id, after, clock, steps)

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
                        if _overloaded(exc2) is None:   # (kept for unsettled)
                            self._flight.appendleft(entry)
                            self._flight.extendleft(reversed(again))
                            raise
                        again.append(entry)
                self.refusals += len(again)
                time.sleep(delay)
                if not isinstance(refused, MovingError):  # (a move: try again soon)
                    delay = min(1.0, delay * 2)
                self._flight.extend(self._send(*entry[1:]) for entry in again)
                if isinstance(refused, MovingError) and self.on_moving is not None:
                    self.on_moving(self)
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
    ``LocalHandle`` in one process), or a function of a RoutingTable returning them
    (``named_handles`` itself): then the producer follows re-partitionings (module
    docstring); with a fixed dict it raises ConflictError when the layout changes.
    An actor that refuses batches (backpressure) gets them again, in order, for up to
    ``retry_for`` seconds (see ``Lane``)."""

    def __init__(self, handles, routing, source: str, max_in_flight: int = 8,
                 refresh_every: int = 1, retry_for: float = 60.0):
        self._handles_for = handles if callable(handles) else None
        self._routing_source = routing if callable(routing) else (lambda: routing)
        self.routing = self._routing_source()
        self.handles = handles(self.routing) if callable(handles) else handles
        self.source = source
        self.max_in_flight = max_in_flight
        self.retry_for = retry_for
        self.refresh_every = refresh_every
        self._seq = itertools.count(1)
        self._run = uuid.uuid4().hex[:12]
        self._lanes = self._lanes_for(self.handles, self.routing)
        #: slice -> (its events, its clock, {batch id: the events of that batch not yet
        #: acknowledged}): what a re-partitioning may make us send again
        self._slices: dict = {}
        self.rerouted = 0                    # events sent again for a new layout
        self.redelivered = 0
        self.events = 0
        self.bad_rows: list = []
        self.duplicates = 0
        self.matches = 0
        self.truncated = 0

    def _lanes_for(self, handles: dict, routing) -> dict:
        lanes = {t: Lane(h, self.max_in_flight, self._account, self.retry_for,
                         epoch=None if t == GLOBAL else routing.epoch)
                 for t, h in handles.items()}
        for lane in lanes.values():
            lane.on_moving = lambda waiting: nudge_others(self._lanes.values(), waiting)
        return lanes

    def send(self, events: list):
        """Push one slice of the stream: every actor gets one batch, with the slice's latest
        event time (an actor none of its events go to gets an empty one), so each actor's
        event time is the stream's, as through the gateway."""
        seq = next(self._seq)
        if seq > 1 and (seq - 1) % self.refresh_every == 0:
            routing = self._routing_source()
            if routing.epoch != self.routing.epoch:
                self._guarded(lambda: self._follow(routing))
            else:
                self.routing = routing
        clock = max((e.ts for e in events), default=None)
        self._slices[seq] = (events, clock, {})
        self._guarded(lambda: self._push(seq, clock, self.routing.route(events)))
        self.events += len(events)
        for old in [s for s in self._slices if s <= seq - self.max_in_flight - 1]:
            if not self._slices[old][2]:           # (acknowledged by every actor)
                del self._slices[old]

    def _push(self, seq: int, clock, routed: dict, tag: str = "", only=None) -> None:
        """Send slice ``seq``'s ``routed`` events to each lane (``only``: those targets),
        with the times before its events behind another actor's (``routing.event_steps``);
        each batch is noted as pending first (``_follow`` sends again what is left)."""
        pending = self._slices[seq][2]
        out = []
        for target, lane in self._lanes.items():
            if only is not None and target not in only:
                continue
            evs = routed.get(target)
            if evs is None and clock is None:
                continue
            batch_id = f"{self._run}:{seq}:{target}{tag}"
            pending[batch_id] = evs or []
            out.append((lane, batch_id, evs or [], target))
        steps = event_steps(self._slices[seq][0], routed)
        for lane, batch_id, evs, target in out:
            lane.push(encode_batch(evs, self.source, batch_id), batch_id, clock,
                      steps.get(target))

    def _guarded(self, op, repeat: bool = False) -> None:
        """Run ``op``; when an actor refuses a batch because the cluster was
        re-partitioned, follow the new layout (``_follow``), then (``repeat``) run ``op``
        again. With a fixed set of actors, ``op`` alone."""
        if self._handles_for is None:
            return op()
        follow_moves(op, lambda exc: partial(self._follow, next_layout(
            self._routing_source, self.routing.epoch, exc, self.retry_for)), repeat)

    def _follow(self, routing) -> None:
        """Route by ``routing`` from now on: wait for every batch in flight, and send the
        events the actors did not take again, slice by slice, routed for the new layout
        (the global actor's, which does not move, to it as they were)."""
        if self._handles_for is None:
            raise ConflictError(
                f"the cluster was re-partitioned ({self.routing.partitions} -> "
                f"{routing.partitions} partition actors) after this producer started: make "
                f"a new one with the actors of the new layout, or give it a function that "
                f"finds them (handles=named_handles); batches after the last acknowledged "
                f"were not processed")
        for lane in self._lanes.values():
            lane.unsettled()                  # (each acknowledged one leaves its pending)
        glob = str(GLOBAL)
        left: dict = {}                       # slice -> ([events not taken], [global ones])
        for seq, (_, _, pending) in self._slices.items():
            for batch_id, evs in pending.items():
                to = left.setdefault(seq, ([], []))
                to[1 if batch_id.split(":")[2] == glob else 0].extend(evs)
            pending.clear()
        keep = {t: lane for t, lane in self._lanes.items() if t == GLOBAL}
        routing, self.handles = self._actors_of(routing)
        self.routing = routing
        self._lanes = {**self._lanes_for({t: h for t, h in self.handles.items()
                                           if t != GLOBAL}, routing), **keep}
        tag = f":{routing.epoch}"
        for seq in sorted(left):
            events, clock, _ = self._slices[seq]
            place = {id(e): i for i, e in enumerate(events)}
            again, globals_ = left[seq]
            again.sort(key=lambda e: place[id(e)])
            self.rerouted += len(again)
            routed = routing.route(again)
            routed.pop(GLOBAL, None)          # (the global actor has them)
            if globals_:
                routed[GLOBAL] = sorted(globals_, key=lambda e: place[id(e)])
            self._push(seq, clock, routed, tag,
                       only=[t for t in self._lanes if t != GLOBAL or globals_])

    def _actors_of(self, routing) -> tuple:
        """``(routing, handles)``: the actors of ``routing``'s layout, or of a later one
        where the cluster was re-partitioned again meanwhile (an actor of it is gone)."""
        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                return routing, self._handles_for(routing)
            except (LookupError, ValueError):
                if not time.monotonic() < deadline:
                    raise
                time.sleep(0.05)
                routing = self._routing_source()

    def flush(self) -> dict:
        self._guarded(self._flush_lanes, repeat=True)
        return {"events": self.events, "duplicates": self.duplicates,
                "redelivered_batches": self.redelivered,
                "refused_batches": sum(lane.refusals for lane in self._lanes.values()),
                "bad_rows": self.bad_rows, "matches": self.matches,
                "truncated_triggers": self.truncated}

    def _flush_lanes(self) -> None:
        for lane in self._lanes.values():
            lane.flush()

    def _account(self, ack: dict):
        batch = ack.get("batch_id")
        if batch is not None:
            seq = batch.split(":")[1] if batch.count(":") >= 2 else None
            got = self._slices.get(int(seq)) if seq and seq.isdigit() else None
            if got is not None:
                got[2].pop(batch, None)
        self.redelivered += ack["redelivered"]
        self.duplicates += ack["duplicates"]
        self.bad_rows.extend(ack["bad_rows"])
        self.matches += ack["queued"] + len(ack["matches"])
        self.truncated += ack.get("truncated", 0)
