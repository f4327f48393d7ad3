"""The push side of a Spark ingestion task (``job._pusher``): prepared rows, sorted by event
time, cut into chunks per target (``columnar.Chunker``) and pushed through one ``Lane`` per
actor (in order, pipelined, with backpressure and retries). After each batch the rows held
for a chunk are released up to the batch's latest time, so that no actor's rows lag behind
another's.

Re-partitioning (``raycep scale``, gateway/server/scaling.py). While the keys move, the
actors refuse chunks that start after the move's time (MovingError: the lanes send them
again, every lane's, so that every actor catches up to that time), then every chunk routed
for the old layout (ConflictError). A task that feeds every actor (the job's default: one
push task) then follows the new layout: it waits for its chunks in flight, reads the routing
table from the gateway actor, routes the rows no actor took (refused chunks and rows still
held) and every later row by the new layout, and goes on: each key's events stay in time
order, none is lost or taken twice. A task among several (``--executor-cores N``) stops with
the ConflictError instead: after a move two tasks' rows would meet at one actor, out of time
order.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycep.actors.handles import GATEWAY, NAMESPACE, actor_name, connect_ray, named_handle
from raycep.actors.producer import Lane
from raycep.actors.routing import RoutingTable, GLOBAL
from raycep.cep.errors import (CepError, ConflictError, MovingError, OverloadedError,
                               UnavailableError)
from raycep.spark_ingest.columnar import DEAD_TARGET, TARGET, TS, Chunker, Plan, encode_chunk


class Pusher:
    """One task's lanes. ``count(ack)``: each acknowledgement (the task's counts)."""

    def __init__(self, job_id: str, plan: Plan, settings, count):
        self.job_id, self.settings, self.count = job_id, settings, count
        self.origin = self.plan = plan          # routed for by the preparer / routing now
        self.single = len(set(plan.parts or (0,))) == 1   # one task feeds every actor
        self.lanes: dict = {}
        self.seq: dict = {}
        self.sent: dict = {}                    # batch id -> (target, chunk) not acknowledged
        self.chunker = Chunker(plan, settings.batch_size)
        self.follows = 0                        # layouts followed so far

    # ---------------------------------------------------------------- the task's calls
    def add(self, batch) -> list:
        """Chunk and push one prepared batch; its dead letters."""
        if self.plan is not self.origin:        # (the preparer routed for the first layout)
            table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) \
                else batch
            batch = self.origin.retarget(table, self.plan.partitions)
            if batch is None:
                raise ConflictError("the cluster was re-partitioned during this ingestion "
                                    "and a row of it takes the slow path; run the job again")
        dead, chunks = self.chunker.add(batch)
        targets = batch.column(TARGET).to_numpy()
        times = batch.column(TS).to_numpy(zero_copy_only=False)[targets != DEAD_TARGET]
        if len(times):
            chunks += self.chunker.release(float(np.max(times)))
        self._guarded(lambda: self._push(chunks))
        return dead

    def finish(self) -> int:
        """Push what is left and wait for every acknowledgement; the batches sent again."""
        self._guarded(lambda: self._push(self.chunker.flush()))
        self._guarded(self._flush, repeat=True)
        return sum(lane.refusals for lane in self.lanes.values())

    # ---------------------------------------------------------------- lanes
    def _lane(self, target) -> Lane:
        if target not in self.lanes:
            connect_ray(self.settings.ray_address, log_to_driver=False,
                        configure_logging=False)
            glob = target == self.plan.partitions
            name = actor_name(GLOBAL if glob else target)
            try:
                handle = named_handle(name)
            except ValueError:
                raise CepError(f"no actor {name!r} in Ray namespace {NAMESPACE!r}: is the "
                               f"raycep cluster running (raycep serve) on this Ray?") from None
            lane = self.lanes[target] = Lane(handle, self.settings.max_in_flight, self._ack,
                                             self.settings.retry_for,
                                             epoch=None if glob else self.plan.epoch)
            lane.on_moving = self._nudge
        return self.lanes[target]

    def _nudge(self, waiting: Lane) -> None:
        for lane in list(self.lanes.values()):
            if lane is not waiting:
                lane.nudge()

    def _ack(self, ack: dict) -> None:
        self.sent.pop(ack.get("batch_id"), None)
        self.count(ack)

    def _push(self, chunks: list) -> None:
        """Push ``chunks``; each is noted as sent first (``_follow`` sends again those not
        acknowledged, pushed or not)."""
        tag = f":{self.follows}" if self.follows else ""
        todo = []
        for target, chunk in chunks:
            self.seq[target] = self.seq.get(target, 0) + 1
            batch_id = f"{self.job_id}:{target}:{self.seq[target]}{tag}"
            self.sent[batch_id] = (target, chunk)
            todo.append((target, chunk, batch_id))
        for target, chunk, batch_id in todo:
            self._lane(target).push(encode_chunk(self.plan, chunk, self.settings.source,
                                                 batch_id), batch_id)

    def _flush(self) -> None:
        for lane in list(self.lanes.values()):
            lane.flush()

    # ---------------------------------------------------------------- re-partitioning
    def _guarded(self, step, repeat: bool = False) -> None:
        """Run ``step``; when the cluster was re-partitioned under it, follow the new
        layout and (``repeat``) run ``step`` again."""
        current = step
        for _ in range(20):
            try:
                current()
                if current is step or not repeat:
                    return
                current = step
            except Exception as exc:          # noqa: BLE001 (a move, or raised again)
                if not self.single or not _moved(exc):
                    raise
                current = (lambda exc=exc: self._follow(exc))
        raise ConflictError("the cluster was re-partitioned 20 times during one ingestion")

    def _follow(self, moved: BaseException) -> None:
        """Route by the new layout from now on (module docstring)."""
        for lane in list(self.lanes.values()):
            lane.unsettled()                  # (each acknowledged chunk leaves ``sent``)
        routing = self._new_routing(moved)
        left = [chunk for _, chunk in self.sent.values()]
        for tables in self.chunker.pending.values():
            left.extend(tables)
        self.sent.clear()
        table = pa.concat_tables(left) if left else None
        if table is not None and table.num_rows:
            table = self.plan.retarget(table, routing.partitions)
            if table is None:
                raise moved
            table = table.take(pc.sort_indices(table, [(TS, "ascending")]))
        keep = self.lanes.pop(self.plan.partitions, None)   # (the global actor stays)
        self.lanes = {} if keep is None else {routing.partitions: keep}
        self.plan = dataclasses.replace(self.plan, partitions=routing.partitions,
                                        epoch=routing.epoch)
        self.chunker = Chunker(self.plan, self.settings.batch_size)
        self.follows += 1
        if table is not None and table.num_rows:
            _, chunks = self.chunker.add(table)
            self._push(chunks + self.chunker.flush())

    def _new_routing(self, moved: BaseException) -> RoutingTable:
        """The gateway's routing table once its layout is not ours (the actors adopt theirs
        just before the gateway routes by it); ``moved`` raised when none comes within
        ``retry_for`` seconds (5 s where an actor did not answer: it may have crashed
        rather than been removed)."""
        conflict = _conflict(moved)
        deadline = time.monotonic() + (self.settings.retry_for if conflict else
                                       min(5.0, self.settings.retry_for))
        while True:
            try:
                got = RoutingTable.from_dict(named_handle(GATEWAY).get("routing", timeout=30))
            except ValueError:                # (no gateway actor)
                raise moved from None
            if got.epoch != self.plan.epoch:
                return got
            if not time.monotonic() < deadline:
                raise moved
            time.sleep(0.05)


def _conflict(exc: BaseException) -> bool:
    return any(isinstance(e, ConflictError) for e in (getattr(exc, "cause", None), exc))


def _moved(exc: BaseException) -> bool:
    """A chunk not taken because the layout changed: a ConflictError, or its actor gone
    (removed by the re-partitioning); not backpressure that outlasted the retries."""
    for err in (getattr(exc, "cause", None), exc):
        if isinstance(err, ConflictError) or isinstance(err, UnavailableError):
            return True
        if isinstance(err, OverloadedError) and not isinstance(err, MovingError):
            return False
    return type(exc).__name__ in ("RayActorError", "ActorDiedError")
