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
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycep.actors.handles import GATEWAY, NAMESPACE, actor_name, connect_ray, named_handle
from raycep.actors.producer import Lane, follow_moves, next_layout, nudge_others
from raycep.actors.routing import GLOBAL, RoutingTable
from raycep.cep.errors import CepError, ConflictError
from raycep.spark_ingest.columnar import DEAD_TARGET, TARGET, TS, Chunker, Plan, encode_chunk


#: a row whose key the push task cannot route again by itself (it travels as a wire row)
SLOW_ROW = ("the cluster was re-partitioned during this ingestion and a row of it takes the "
            "slow path; run the job again")


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
                raise ConflictError(SLOW_ROW)
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
            lane.on_moving = lambda waiting: nudge_others(self.lanes.values(), waiting)
        return self.lanes[target]

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
        layout and (``repeat``) run ``step`` again (a task among several: ``step`` alone)."""
        if not self.single:
            return step()
        follow_moves(step, lambda exc: partial(self._follow, next_layout(
            partial(self._gateway_routing, exc), self.plan.epoch, exc,
            self.settings.retry_for)), repeat, limit=20)

    @staticmethod
    def _gateway_routing(moved: BaseException) -> RoutingTable:
        """The routing table of the gateway actor; ``moved`` raised without one."""
        try:
            return RoutingTable.from_dict(named_handle(GATEWAY).get("routing", timeout=30))
        except ValueError:
            raise moved from None

    def _follow(self, routing: RoutingTable) -> None:
        """Route by ``routing`` from now on (module docstring)."""
        for lane in list(self.lanes.values()):
            lane.unsettled()                  # (each acknowledged chunk leaves ``sent``)
        left = [chunk for _, chunk in self.sent.values()]
        for tables in self.chunker.pending.values():
            left.extend(tables)
        self.sent.clear()
        table = pa.concat_tables(left) if left else None
        if table is not None and table.num_rows:
            table = self.plan.retarget(table, routing.partitions)
            if table is None:
                raise ConflictError(SLOW_ROW)
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
