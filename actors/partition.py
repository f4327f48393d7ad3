"""PartitionWorker: one partition of the cluster (docs/architecture.md, "Data flow"): one cep Engine, i.e.
one shared event index and one pattern manager per registered query, fed by msgpack batches.

A plain class, tested in-process; ``partition_actor()`` wraps it as the Ray actor (the only
place ray is imported). The planner pushes plans with ``set_plan(query, order, version)`` and
reads ``report()`` (the arguments of ``PlannerService.report``). Until it does, a query is
planned by the worker itself, as ``raycep local`` plans: a provisional plan from the default
statistics at its registration, one from the measured statistics once it has seen
``WorkerSettings.first_plan`` events (planner.local), so that it is evaluated in bulk
(cep.evaluation.bulk) rather than trigger by trigger; the planner's plans replace them.
Matches found in bulk become records in bulk too (cep.io.output.MatchLines.records).

Delivery is at-least-once and idempotent: a batch whose ``(source, batch_id)`` was seen among
the last ``WorkerSettings.remember_batches`` batches is acknowledged (``"redelivered":
True``) and not processed again; events are also deduplicated by id in the index, so a redelivered batch that
was forgotten still yields no duplicate matches for events that are still buffered. Each
match carries a stable ``id`` (a hash of the query name and the bound event ids), so a reader
can de-duplicate matches that reach it twice.

Out-of-order input is handled by the engine (cep.store.disorder): a Retraction becomes a match
record with ``"retracted": true`` (same ``id`` as the match it cancels); a late event becomes
a record ``{"late": true, "id", "source", "reason", "score", "threshold", "watermark",
"event"}``; both travel like matches (returned, or through the outbox).

With ``WorkerSettings(outbox=True)`` (how the cluster runs it) matches are not returned by
``ingest`` but kept in an outbox that the gateway drains with ``drain(ack)``: a record stays
until a later ``drain`` acknowledges its sequence number, so a gateway that dies between two
drains loses nothing (the next gateway receives the unacknowledged records again; match ids
de-duplicate). Producers (the gateway's ``/events``, Spark jobs) then never handle matches themselves.

The outbox never drops a record. Backpressure instead: while it holds ``outbox_capacity``
undelivered records or more, ``ingest`` refuses new batches with OverloadedError before it
changes anything (the sender drains or waits, and sends the batch again). A batch that arrives
below the limit is processed whole, however many matches it completes, so the outbox holds at
most the limit plus one batch's records. A sender that pipelines batches passes ``after`` (the
id of its previous batch to this actor): a batch whose predecessor was not accepted is refused
too, so batches refused and sent again are processed in their order.
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from itertools import islice

import orjson

from raycep.actors.handles import node_id, ray_metric_types
from raycep.actors.metrics import ActorMetrics
from raycep.actors.outbox import Outbox
from raycep.actors.recovery import (CheckpointSettings, DurableLog, logged_outputs,
                                     replayed_outputs)
from raycep.actors.rescale import (cut_worker, merge_worker, no_cyclic_gc, pack_share,
                                   unpack_share)
from raycep.actors.routing import good_row_steps
from raycep.cep.errors import ConflictError, MovingError, OverloadedError, PlanningError
from raycep.cep.io.codec import decode_batch
from raycep.cep.io.output import MatchLines, unknown_meta
from raycep.cep.lang.ast import Query
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.disorder import DisorderSettings, LateEvent
from raycep.planner.local import first_plan, provisional_plan
from raycep.planner.stats import RateTracker

log = logging.getLogger("raycep.actors")


def late_record(late: LateEvent) -> dict:
    """A late event as an output record; its ``id`` is stable (source and event id)."""
    out = late.to_dict()
    out["id"] = f"late:{late.source}:{late.event.id}"
    return out


@dataclass(frozen=True)
class WorkerSettings:
    """How a partition actor runs, beside its engine's ManagerSettings and DisorderSettings
    and its CheckpointSettings."""
    #: matches kept in an outbox the gateway drains (how the cluster runs it), not returned
    #: by ``ingest``
    outbox: bool = False
    #: undelivered records the outbox may hold before ``ingest`` refuses batches
    outbox_capacity: int = 100_000
    #: (source, batch_id) pairs remembered to recognise a batch delivered again
    remember_batches: int = 10_000
    #: seconds of event time the planner's rates are measured over
    rate_horizon: float = 60.0
    #: optimistic or pessimistic handling of out-of-order events (None: the engine's default)
    mode: str | None = None
    #: evaluate variants of a query together (cep.groups)
    sharing: bool = True
    #: seconds of event time kept for queries registered later (cep.engine.Engine)
    retain: float = 0.0
    #: a query registered without a plan runs a provisional one from the default statistics
    #: (planner.local.provisional_plan), then, after this many events, one from this
    #: worker's measured statistics (planner.local.first_plan), until the planner's: a
    #: planned query is evaluated in bulk. Both use the planner's default algorithm and keep
    #: the query's plan version, so the planner's plans replace them. 0: neither (the query
    #: is evaluated trigger by trigger until the planner plans it). raycep local does the
    #: same, its planner's first look after as many events (local.run.FIRST_PLAN_EVENTS)
    first_plan: int = 200


class PartitionWorker:
    def __init__(self, partition: str = "p0", key_attr: str | None = None, settings=None,
                 worker: WorkerSettings = WorkerSettings(),
                 disorder: DisorderSettings | None = None,
                 checkpoint: CheckpointSettings | None = None):
        """``settings``: the engine's ManagerSettings; ``checkpoint``: where the worker saves
        its state and restores it from (None: nowhere, a restart starts empty)."""
        # what column batches use, loaded now rather than in the first batch (~0.5 s)
        import numpy  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import raycep.cep.evaluation.bulk  # noqa: F401
        import raycep.cep.io.columns  # noqa: F401
        import raycep.cep.runtime.members  # noqa: F401
        self.partition = partition
        self.engine = Engine(key_attr, settings, disorder=disorder, mode=worker.mode,
                             sharing=worker.sharing, retain=worker.retain)
        self.retain = self.engine.retain
        self._evicted_at = None                      # the engine clock of the last eviction
        self._lines = MatchLines()
        self.rates = RateTracker(worker.rate_horizon)
        self.remember_batches = worker.remember_batches
        self._recent: OrderedDict = OrderedDict()   # (source, batch_id) -> None, oldest first
        self._recent_added = 0                      # batch ids ever added to _recent
        self._recent_saved = 0                      # ... when the last checkpoint was written
        self._reported: dict = {}                   # query -> [(tested, passed)] at last report
        self.first_plan = worker.first_plan
        self._rows = 0                               # rows of the batches accepted so far
        self._unplanned: dict = {}                   # evaluator -> _rows when it was added
        self.own_plans: set = set()                  # evaluators planned by this worker
        self.batches = 0
        self.busy = 0.0                              # seconds spent taking batches (autoscale)
        self.redelivered = 0
        self._checkpoint_seconds = 0.0              # of the checkpoint the last call wrote
        self.bad_rows = 0
        #: the partition layout this actor holds the keys of (actors.routing.RoutingTable.epoch)
        self.epoch = 0
        #: while the cluster is re-partitioned (``seal``): routed batches are taken only up
        #: to this event time (None: not sealed)
        self._cut: float | None = None
        self._sealed_taken = 0                       # routed batches taken while sealed
        self._direct_at = -math.inf                  # the last batch of a producer's lane
        self._left: int | None = None                # removed by re-partitioning to N actors
        self._kept = None                            # ((number, parts, key groups), its
        #                                              own share, the keys that leave it)
        #                                              between give and take
        #: records, oldest first, with their queries and identities (actors/outbox.py);
        #: sequence numbers ``outbox_seq - len(outbox) + 1`` on
        self.outbox = Outbox() if worker.outbox else None
        self.outbox_capacity = worker.outbox_capacity
        self.outbox_seq = 0
        self.refused = 0                             # batches refused (outbox over its limit)
        self._refusing = False                       # since the last batch accepted
        self.recoveries = 0                          # restarts that restored saved state
        self.recovery: dict | None = None            # the last one: replayed, seconds
        self._replay = None                          # outputs of a logged change being replayed
        self._replaying = False                      # (while recovering: nothing is logged)
        types = ray_metric_types()
        #: the figures published as Ray metrics (in a Ray process; None elsewhere)
        self.metrics = ActorMetrics(partition, types) if types is not None else None
        self.durable = None
        if checkpoint is not None:
            self.durable = DurableLog(checkpoint.directory, partition, checkpoint.every_events,
                                      checkpoint.every_seconds, checkpoint.fsync)
            self.engine.journal = []                # what a checkpoint saves: the changes
            self._recover()

    # ---------------------------------------------------------------- queries
    def add_query(self, name: str, text, params: dict | None = None,
                  order: tuple | None = None, mode: str | None = None,
                  since: float | None = None) -> str:
        """Register a query (text or Query AST) under ``name``. It sees the events after
        ``since``, the stream's latest event time at its registration (the gateway's: the
        largest ``clock()`` of the actors; None: this actor's), and the last ``retain``
        seconds before it (cep.runtime.engine.Engine.add_query). ``mode``: optimistic or pessimistic
        handling of out-of-order events (None: the worker's default)."""
        new = len(self.engine.evaluators)
        name = self.engine.add_query(text, name=name, params=params, order=order, mode=mode,
                                     since=since)
        manager = self.engine.managers[name]
        if self.first_plan and len(self.engine.evaluators) > new and manager.order is None:
            self._plan(manager, provisional_plan)
            self._unplanned[manager.name] = self._rows
        self._reported[name] = [(c.tested, c.passed)
                                for c in self.engine.managers[name].cq.conjuncts]
        self._log("add_query", (name, text, params, order, mode, since))
        return name

    def add_queries(self, entries: list, since: float | None = None) -> list:
        """Register many queries in one call, all or nothing: ``entries`` holds ``(name,
        text or Query, params, order, mode)`` tuples, each as ``add_query`` takes them, all
        registered at ``since``. When one fails, those added before it are removed again and
        its error raised. Logged as one change (replayed as one on recovery), each parsed
        query as its source text: a thousand ASTs cost more to write than to parse again."""
        added = []
        replaying, self._replaying = self._replaying, True     # one log record, below
        try:
            for name, text, params, order, mode in entries:
                added.append(self.add_query(name, text, params, order, mode, since))
        except BaseException:
            for name in added:
                self._removed(name)
            raise
        finally:
            self._replaying = replaying
        self._log("add_queries", ([(name, _as_text(text), params, order, mode)
                                   for name, text, params, order, mode in entries], since))
        return added

    def remove_query(self, name: str):
        """Unregister a query; its pending matches are dropped, the other queries are untouched."""
        self._removed(name)
        self._log("remove_query", (name,))

    def remove_queries(self, names: list) -> list:
        """Unregister the queries of ``names`` this worker has (the others are skipped);
        returns those it removed. Logged as one change."""
        removed = [n for n in names if n in self.engine.managers]
        for name in removed:
            self._removed(name)
        self._log("remove_queries", (removed,))
        return removed

    def _removed(self, name: str) -> None:
        """Unregister query ``name`` from the engine (and its evaluator, when it was the last
        of its group)."""
        manager = self.engine.managers.get(name)
        self.engine.remove_query(name)                  # CepError: no such query
        evaluator = manager.name
        self._reported.pop(name, None)
        if evaluator not in self.engine.evaluators:
            self._unplanned.pop(evaluator, None)
            self.own_plans.discard(evaluator)

    def queries(self) -> list:
        return list(self.engine.managers)

    def retention(self) -> float:
        """The seconds of event time kept for queries registered later (``retain``)."""
        return self.engine.retain

    def clock(self) -> float:
        """The latest event time this actor has seen or been advanced to (-inf: none)."""
        return self.engine.clock

    def set_plan(self, query: str, order, version: int | None = None) -> bool:
        """Install a plan (an order of the positive variables, None: Tree-NFA) between two
        batches. A plan older than the current version is ignored (returns False)."""
        manager = self.engine.managers.get(query)
        if manager is None:
            raise PlanningError(f"partition {self.partition}: no query named {query!r} "
                                f"is registered")
        if version is not None and version < manager.version:
            return False
        manager.set_order(tuple(order) if order is not None else None, version)
        self._unplanned.pop(manager.name, None)
        self.own_plans.discard(manager.name)
        self._log("set_plan", (query, order, version))
        return True

    # ---------------------------------------------------------------- input
    def ingest(self, batch: bytes, after: str | None = None,
               clock: float | None = None, epoch: int | None = None,
               steps: list | None = None) -> dict:
        """Process one msgpack batch (cep.io.codec). A malformed header raises IngestError and
        changes nothing; malformed rows are reported in ``bad_rows`` and the others processed.
        ``clock``: the latest event time of the request the batch is this actor's part of
        (``observe``d after the rows); ``steps``: ``[[row, time], ...]``, rows (ascending)
        that came after a later event of the request sent elsewhere, and the latest event
        time before each (``observe``d before the row: it is out of order here as in one
        engine fed the request).

        Raises OverloadedError, changing nothing, while the outbox holds ``outbox_capacity``
        records or more (a batch seen before is acknowledged all the same), and when
        ``after`` (the id of the sender's previous batch, same source) names a batch this
        worker has not accepted.

        Returns ``{"batch_id", "events", "duplicates", "late", "bad_rows", "matches",
        "queued", "outbox", "truncated", "redelivered"}``; ``matches`` holds match,
        retraction and late-event records; with an outbox it is empty, ``queued`` counts the
        records put in the outbox and ``outbox`` how many it holds now; ``truncated`` counts
        the triggers whose matches hit the per-trigger cap (the rest were not enumerated).
        """
        began = time.perf_counter()
        self._checkpoint_seconds = 0.0
        box = self.outbox
        decoded, problems = decode_batch(batch, errors="collect", columns=True)
        ident = (decoded.source, decoded.batch_id)
        if ident in self._recent:
            self.redelivered += 1
            return {"batch_id": decoded.batch_id, "events": 0, "duplicates": 0, "late": 0,
                    "bad_rows": [], "matches": [], "queued": 0,
                    "outbox": len(box) if box is not None else 0, "truncated": 0,
                    "redelivered": True}
        if epoch is not None and not self._replaying:
            if self._left is not None:
                raise ConflictError(
                    f"batch {decoded.batch_id!r}: partition {self.partition} was removed by "
                    f"re-partitioning to {self._left} actors: read the routing table again "
                    f"(GET /v1/routing) and send the events again")
            if epoch != self.epoch:
                raise ConflictError(
                    f"batch {decoded.batch_id!r} was routed for partition layout {epoch}; "
                    f"the cluster was re-partitioned (layout {self.epoch}): read the routing "
                    f"table again (GET /v1/routing) and send the events again")
            if self._cut is not None:
                self._sealed(decoded, clock)
            if after is not None:                       # (a lane: a producer of its own)
                self._direct_at = time.monotonic()
        if box is not None and len(box) >= self.outbox_capacity and not self._replaying:
            self._refuse(f"its match outbox holds {len(box)} undelivered records (limit "
                         f"{self.outbox_capacity})")
        if after is not None and (decoded.source, after) not in self._recent \
                and not self._replaying:
            self._refuse(f"batch {decoded.batch_id!r} of source {decoded.source!r} follows "
                         f"batch {after!r}, which this actor has not accepted")
        self._refusing = False
        engine = self.engine
        dup0 = engine.duplicates
        capped0 = self._truncated()
        if steps and problems:
            steps = good_row_steps(steps, [p.row for p in problems])
        matches = self._process(decoded.events, decoded.source, steps)
        released = engine.observe(clock) if clock is not None else None
        if released:
            matches = [*matches, *released]
        if engine.clock != self._evicted_at:    # the tail of the batch too (issue 33: an
            engine.evict()                       # idle actor keeps only what windows need)
            self._evicted_at = engine.clock
        self._recent[ident] = None
        self._recent_added += 1
        if len(self._recent) > self.remember_batches:
            self._recent.popitem(last=False)
        self.batches += 1
        self.bad_rows += len(problems)
        late = [orjson.dumps(late_record(x), default=str) for x in engine.take_late()]
        out, meta = self._records(matches, late)
        records = self._deliver(out, meta)
        self._log("ingest", (batch, after, clock, None, steps) if steps else (batch, after, clock),
                  logged_outputs(out, meta), len(decoded.events))
        self._publish()
        self.busy += time.perf_counter() - began
        return {"batch_id": decoded.batch_id, "events": len(decoded.events),
                "duplicates": engine.duplicates - dup0,
                "late": len(late), "bad_rows": [str(p) for p in problems],
                "bad": [[p.row, p.field, p.reason] for p in problems],
                "matches": records, "queued": len(out) - len(records),
                "outbox": len(box) if box is not None else 0,
                "truncated": self._truncated() - capped0, "redelivered": False,
                "seconds": time.perf_counter() - began,
                "checkpoint_seconds": self._checkpoint_seconds}

    def _process(self, rows, source: str, steps: list | None = None) -> list:
        """Process the rows of a batch (a tuple of Events, or a column batch: Events only
        where used, matches found in bulk as MatchBlock / MatchMix entries), cut where a
        query is due for its first plan (``_plan_first``) and at each of ``steps`` (``ingest``),
        whose time is observed before its row."""
        out: list = []
        i, n = 0, len(rows)
        steps = deque(steps or ())
        while True:
            if self._unplanned and self._rows >= self._plan_due():
                self._plan_first()
            if i >= n:
                return out
            while steps and steps[0][0] <= i:
                row, at = steps.popleft()
                if row == i:
                    out += self.engine.observe(float(at))
            j = n if not self._unplanned else min(n, i + self._plan_due() - self._rows)
            if steps:
                j = min(j, int(steps[0][0]))
            if isinstance(rows, tuple):
                part = list(rows[i:j])
                self.rates.observe_many(part)
                out += self.engine.process_many(part, source)
            else:
                self.rates.observe_runs(rows.types[i:j], rows.times[i:j])
                out += self.engine.process_columns(rows, i, j, source=source, blocks=True)
            self._rows += j - i
            i = j

    def _plan_due(self) -> int:
        """The count of rows at which the next query without a plan gets its first."""
        return min(self._unplanned.values()) + self.first_plan

    def _plan_first(self) -> None:
        """Plan the queries that have waited ``first_plan`` rows for a plan from this
        worker's statistics (planner.local.first_plan). Not logged: replaying the log
        plans them again (and a plan never changes the matches)."""
        rates = self.rates.rates()
        keys = max(1, self.engine.index.partitions())
        for name, since in list(self._unplanned.items()):
            if since + self.first_plan > self._rows:
                continue
            del self._unplanned[name]
            manager = self.engine.evaluators.get(name)
            if manager is not None:
                self._plan(manager, lambda m: first_plan(m, rates, keys))

    def _plan(self, manager, make) -> None:
        """Install ``make(manager)``, a plan of this worker's own, at the manager's version
        (so the planner's plans replace it); a query that cannot be planned is logged and
        keeps its order."""
        try:
            plan = make(manager)
        except PlanningError as exc:
            log.warning("partition %s: no plan of its own for %s: %s", self.partition,
                        manager.name, exc)
            return
        manager.set_order(plan.order, plan.version)
        self.own_plans.add(manager.name)

    def seal(self, cut: float | None) -> dict:
        """Re-partitioning (gateway/server/scaling.py): from now on take a routed batch only
        when its events (or, empty, its clock) are not after ``cut``, and refuse the others
        with MovingError (the sender tries again; after ``adopt`` they are refused with a
        ConflictError and routed again for the new layout). ``cut=-inf`` refuses every routed
        batch, None ends the seal. Returns ``{"clock", "taken", "direct_age"}``: this actor's
        event-time clock, the routed batches taken since the previous call, and the seconds
        since a producer's lane (actors.producer.Lane) last sent it a batch."""
        taken, self._sealed_taken = self._sealed_taken, 0
        self._cut = None if cut is None else float(cut)
        if cut is None:
            self._kept = None                        # (a re-partitioning that failed)
        return {"clock": self.engine.clock, "taken": taken,
                "direct_age": time.monotonic() - self._direct_at}

    def leave(self, partitions: int) -> None:
        """Re-partitioning to ``partitions`` actors removes this one (its keys moved): from
        now on it refuses every routed batch with a ConflictError."""
        self._left = partitions

    def _sealed(self, decoded, clock) -> None:
        """Take (count) or refuse a routed batch while sealed (``seal``)."""
        rows = decoded.events
        times = rows.times if hasattr(rows, "times") else [e.ts for e in rows]
        first = min(times) if len(times) else clock
        if first is not None and first > self._cut:
            raise MovingError(f"partition {self.partition}: the cluster is being "
                              f"re-partitioned and batch {decoded.batch_id!r} starts after "
                              f"the time its keys move at; it was not processed: send it "
                              f"again shortly")
        self._sealed_taken += 1

    def _refuse(self, why: str):
        """Backpressure: refuse a batch (nothing changed but the counter; logged once until
        a batch is accepted again)."""
        if not self._refusing:
            log.warning("partition %s: refusing batches: %s (is the gateway draining?)",
                        self.partition, why)
        self._refusing = True
        self.refused += 1
        raise OverloadedError(f"partition {self.partition}: {why}; the batch was not "
                              f"processed: send it again (in order) after the gateway has "
                              f"drained the outbox")

    def _truncated(self) -> int:
        """Triggers that hit the per-trigger match cap so far, over all queries."""
        return sum(m.truncated for m in self.engine.managers.values())

    def advance(self, watermark: float) -> list:
        """No event with ``ts <= watermark`` will arrive any more (later ones are late): the
        matches that waited for it (as records with ids; queued instead with an outbox)."""
        out, meta = self._records(self.engine.advance(watermark))
        records = self._deliver(out, meta)
        self._log("advance", (watermark,), logged_outputs(out, meta))
        return records

    def observe(self, clock: float) -> list:
        """The stream's event time reached ``clock`` in events this actor was not sent
        (cep.runtime.engine.Engine.observe): the matches that waited for it (records; queued with an
        outbox)."""
        out, meta = self._records(self.engine.observe(clock))
        if self.engine.clock != self._evicted_at:
            self.engine.evict()
            self._evicted_at = self.engine.clock
        records = self._deliver(out, meta)
        self._log("observe", (clock,), logged_outputs(out, meta))
        return records

    def _records(self, matches: list, late: list = ()) -> tuple:
        """``(records, (queries, identities))``: match and retraction records as JSON texts
        (bytes), ``match_record`` assembled from the events' cached JSON, those of the
        matches found in bulk (MatchBlock and MatchMix entries) made in bulk too, with their
        queries and ids (cep.io.output.MatchLines.records); then the ``late`` records (their
        query and identity None: read from the record)."""
        meta: tuple = ([], [])
        records = self._lines.records(matches, meta)
        records += late
        unknown_meta(meta, len(late))
        return records, meta

    # ---------------------------------------------------------------- outbox
    def _deliver(self, records: list, meta: tuple = (None, None)) -> list:
        """Queue ``records`` (JSON texts; ``meta``: their queries and identities, as
        ``_records`` gives them) in the outbox (returns []; never drops: ``ingest`` refuses
        batches while it is full) or hand them back as dicts (no outbox)."""
        if self._replay is not None:              # the records this change gave before
            records, self._replay = replayed_outputs(self._replay, records, meta), None
            meta = (None, None)
        if self.outbox is None:
            return [orjson.loads(r) for r in records]
        self.outbox.extend(records, *meta)
        self.outbox_seq += len(records)
        return []

    def set_outbox(self, enabled: bool = True, capacity: int | None = None):
        """Keep matches in the outbox for ``drain`` (the gateway does this when it attaches);
        ``capacity``: a new limit of undelivered records (backpressure, see ``ingest``)."""
        if capacity is not None:
            if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
                raise ValueError(f"outbox capacity must be an integer >= 1, got {capacity!r}")
            self.outbox_capacity = capacity
        if enabled and self.outbox is None:
            self.outbox = Outbox()
        elif not enabled and self.outbox is not None and not self.outbox:
            self.outbox = None
        self._log("set_outbox", (enabled, capacity))

    def drain(self, ack: int = 0, limit: int = 10_000) -> dict:
        """Forget the outbox records up to sequence number ``ack`` (delivered) and return the
        next ones: ``{"records": [...], "names": [...], "queries": [...], "ids": [...],
        "last": seq of the last returned (or ack), "pending": how many remain after
        those}``. Each record is its JSON text (bytes, what ``match_record`` / ``late_record``
        give, serialised): cheap to ship through Ray; ``ids`` holds each record's identity
        and ``queries`` its query as a position in ``names`` (a str per record would be
        decoded anew per record at the gateway) where the worker knew them; a record it
        did not has identity None and a position whose name is None (the gateway reads
        the record)."""
        box = self.outbox
        self._publish()
        if box is None:
            return {"records": [], "names": [], "queries": [], "ids": [], "last": ack,
                    "pending": 0}
        done = min(len(box), ack - self._first_seq() + 1)
        if done > 0:
            box.forget(done)
            self._log("drain", (ack, 0))
        out, queries, idents = box.page(limit)
        last = self._first_seq() + len(out) - 1 if out else ack
        names = list(dict.fromkeys(queries))
        codes = list(map({n: k for k, n in enumerate(names)}.__getitem__, queries))
        return {"records": out, "names": names, "queries": codes, "ids": idents, "last": last,
                "pending": len(box) - len(out)}

    def _first_seq(self) -> int:
        """The sequence number of the oldest record in the outbox (or of the next one)."""
        return self.outbox_seq - len(self.outbox) + 1

    # ---------------------------------------------------------------- state
    def _publish(self) -> None:
        """Publish this actor's Ray metrics when due (actors/metrics.py)."""
        if self.metrics is not None and self.metrics.due():
            self.metrics.publish(self._stats())

    def health(self) -> dict:
        """What ``GET /v1/health`` reads of an actor, cheap to make: the events it processed,
        the events its index holds, the records in its outbox (and its capacity), its
        event-time clock, the seconds it spent taking batches and the batches it refused
        (what the autoscaler looks at)."""
        return {"events": self.engine.events, "buffered": len(self.engine.index),
                "outbox": len(self.outbox) if self.outbox is not None else None,
                "outbox_capacity": self.outbox_capacity, "clock": self.engine.clock,
                "busy": self.busy, "refused": self.refused}

    def stats(self) -> dict:
        out = self._stats()
        if self.metrics is not None and self.metrics.due():
            self.metrics.publish(out)
        return out

    def _stats(self) -> dict:
        out = self.engine.stats()
        last = self.durable.last_checkpoint if self.durable is not None else None
        out.update(partition=self.partition, batches=self.batches,
                   seconds=self.engine.seconds(), timings=self.engine.timings(),
                   checkpoint_age=time.time() - last["at"] if last and last.get("at")
                   else None,
                   redelivered_batches=self.redelivered, bad_rows=self.bad_rows,
                   outbox=len(self.outbox) if self.outbox is not None else None,
                   outbox_capacity=self.outbox_capacity, refused_batches=self.refused,
                   plans={name: {"order": list(m.order) if m.order else None,
                                 "version": m.version}
                          for name, m in self.engine.managers.items()},
                   own_plans=sorted(self.own_plans),
                   recoveries=self.recoveries, recovery=self.recovery, pid=os.getpid(),
                   node=node_id(),
                   checkpoint=self.durable.stats() if self.durable is not None else None)
        return out

    def snapshot(self, evicted: bool = True, events: bool = True,
                 recent: bool = True) -> dict:
        """The worker's state (engine snapshot, outbox, remembered batch ids, counters), to
        continue elsewhere with ``PartitionWorker.restore``; picklable. ``evicted=False``,
        ``events=False``, ``recent=False``: without the remembered evicted events, the
        buffered events, the remembered batch ids (a checkpoint writes them apart,
        incrementally)."""
        return {"partition": self.partition, "engine": self.engine.snapshot(evicted, events),
                "recent": list(self._recent) if recent else None, "batches": self.batches,
                "redelivered": self.redelivered, "bad_rows": self.bad_rows,
                "outbox": {"first": self._first_seq(), "records": list(self.outbox.records)}
                if self.outbox is not None else None,
                "outbox_seq": self.outbox_seq, "outbox_capacity": self.outbox_capacity,
                "refused": self.refused, "recoveries": self.recoveries,
                "rows": self._rows, "unplanned": dict(self._unplanned), "epoch": self.epoch,
                "own_plans": sorted(self.own_plans)}

    @classmethod
    def restore(cls, snap: dict, settings=None) -> "PartitionWorker":
        worker = cls(snap["partition"], snap["engine"]["key_attr"], settings, WorkerSettings(
            outbox=snap["outbox"] is not None,
            outbox_capacity=snap.get("outbox_capacity", 100_000),
            retain=snap["engine"].get("retain", 0.0)))
        worker._adopt(snap, settings)
        return worker

    def give(self, number: int, parts: int, key_groups: int) -> dict:
        """Re-partitioning to ``parts`` actors (sealed, outbox drained): this actor's state,
        as partition actor ``number`` of the old layout, cut into one share per new actor
        (actors/rescale.py); returns ``{j: bytes}`` of the shares for the others, keeps its
        own (``take`` merges it). Nothing changes here until ``take``. OverloadedError while
        the outbox holds records."""
        moving, shares = cut_worker(self, number, parts, key_groups)
        self._kept = ((number, parts, key_groups), shares[number], moving) \
            if number < parts else None
        with no_cyclic_gc():
            return {j: pack_share(got) for j, got in enumerate(shares) if j != number}

    def take(self, shares: list, partition: int, epoch: int, parts: int,
             key_groups: int) -> dict:
        """Become partition actor ``partition`` of layout ``epoch`` (``parts`` actors,
        ``key_groups``) from the shares every old actor gave it (``give``), in their order:
        bytes, or None at its own place (it was partition ``partition`` before): its own
        share, the one ``give`` kept (or cut again from its state, which has not changed since:
        a take replayed from the log). Its index stays: the keys that left are dropped from
        it, the events it is given merged in. With a checkpoint directory the move is logged
        and the next checkpoint is a compaction. The matches due at the merged clock are
        released (queued in the outbox; without one, ``records``). Returns ``{"buffered",
        "queries", "records"}``."""
        kept, self._kept = self._kept, None
        if None not in shares:
            kept = None
        elif shares.index(None) != partition or shares.count(None) > 1:
            raise ConflictError(f"partition {self.partition}: re-partitioning to {parts} "
                                f"actors: no share of its own at place {partition}")
        elif kept is None or kept[0] != (partition, parts, key_groups):
            moving, cut = cut_worker(self, partition, parts, key_groups)
            kept = (None, cut[partition], moving)
        got = [kept[1] if data is None else unpack_share(data) for data in shares]
        own = self.outbox_seq if kept is not None else None
        with no_cyclic_gc():
            index = None
            if kept is not None:            # its staying keys' events stay where they are
                index = self.engine.index
                index.drop_keys(kept[2])
            snap = merge_worker(got, partition, epoch, own)
            self._adopt(snap, index=index)
        self._cut, self._sealed_taken = None, 0
        self.partition = snap["partition"]
        # the merged clock is the latest of the shares': what waited for it is due now (an
        # actor whose clock was behind would otherwise hold it until a later event)
        out, meta = self._records(self.engine.due())
        records = self._deliver(out, meta)
        if self.durable is not None:
            # logged, not checkpointed here: a restart replays the take from the log; the
            # next checkpoint writes every live event (a compaction: the saved segments still
            # hold the keys that left) and every remembered batch id
            self.engine.journal = []
            self.durable.compact_next = True
            self._log("take", (shares, partition, epoch, parts, key_groups),
                      logged_outputs(out, meta))
        return {"buffered": len(self.engine.index), "queries": len(self.engine.managers),
                "records": records}

    def _adopt(self, snap: dict, settings=None, index=None) -> None:
        """Take over the state of a snapshot (``index``: Engine.restore's)."""
        self.engine = Engine.restore(snap["engine"], settings, index)
        self.engine.retain = self.retain         # this actor's setting, not the saved one
        self._recent = OrderedDict((tuple(i), None) for i in snap["recent"] or ())
        while len(self._recent) > self.remember_batches:
            self._recent.popitem(last=False)
        self._recent_added = self._recent_saved = len(self._recent)
        self.batches, self.redelivered = snap["batches"], snap["redelivered"]
        self.bad_rows = snap["bad_rows"]
        box = snap["outbox"]                # (a list of (seq, record) pairs: earlier
        self.outbox = None if box is None else Outbox(  # snapshots)
            box["records"] if box.__class__ is dict else (record for _, record in box))
        self.outbox_seq, self.refused = snap["outbox_seq"], snap.get("refused", 0)
        self.outbox_capacity = snap.get("outbox_capacity", self.outbox_capacity)
        self.recoveries = snap.get("recoveries", 0)
        self._rows = snap.get("rows", 0)
        self.epoch = snap.get("epoch", 0)
        self._unplanned = dict(snap.get("unplanned", {})) if self.first_plan else {}
        self.own_plans = set(snap.get("own_plans", ()))
        self._reported = {name: [(c.tested, c.passed) for c in m.cq.conjuncts]
                          for name, m in self.engine.managers.items()}

    # ---------------------------------------------------------------- durability
    def _log(self, op: str, args: tuple, outputs=None, events: int = 0) -> None:
        """Append a change to the write-ahead log (before the caller is answered) and write
        a checkpoint when one is due (actors/recovery.py)."""
        if self.durable is None or self._replaying:
            return
        self.durable.log(op, args, outputs, events)
        if self.durable.due():
            began = time.perf_counter()
            self.checkpoint()
            self._checkpoint_seconds = time.perf_counter() - began

    def checkpoint(self, force: bool = False) -> dict | None:
        """Write a checkpoint now: what changed since the last one (actors/recovery.py);
        returns its figures. None without a checkpoint directory, and when nothing changed
        since the last checkpoint (nothing is written: counted in ``skipped``)."""
        durable = self.durable
        if durable is None:
            return None
        if not durable.changed() and not force:
            durable.skipped += 1
            return None
        engine = self.engine
        index = engine.index
        live_from, total = index.evicted_span()
        new_from, new = index.evicted_rows(durable.evicted_written)
        fresh = min(self._recent_added - self._recent_saved, len(self._recent))
        batches = list(islice(reversed(self._recent), fresh))[::-1]
        out = durable.checkpoint(
            self.snapshot(evicted=False, events=False, recent=False),
            engine.changes_since(durable.mark), batches, engine.mark(),
            (live_from, new_from, new, total), len(index),
            lambda: (list(index.events()), list(self._recent)))
        engine.journal = []
        self._recent_saved = self._recent_added
        return out

    def _recover(self) -> None:
        """Load the checkpoint and replay the log after it: the state of the last answer.
        A replayed batch or advance yields the records it logged (not recomputed ones), so the
        outbox's sequence numbers are those the gateway has acknowledged."""
        started = time.perf_counter()
        snap, records, evicted = self.durable.load()
        if snap is None and not records:
            return
        if snap is not None:
            self._adopt(snap, self.engine.settings)
            self.engine.index.remember_evicted(*evicted)
            self.engine.journal = []
        self._replaying = True
        try:
            for _, op, args, outputs in records:
                if op in ("ingest", "advance", "observe", "take") and outputs is not None:
                    self._replay = list(outputs)
                getattr(self, op)(*args)
                self._replay = None
        finally:
            self._replaying = False
        self.recoveries += 1
        self.recovery = {"replayed": len(records), "from_checkpoint": snap is not None,
                         "seconds": round(time.perf_counter() - started, 3)}
        log.warning("partition %s: restored %s and replayed %d logged changes in %.3f s",
                    self.partition, "its checkpoint" if snap is not None else "no checkpoint",
                    len(records), self.recovery["seconds"])
        self.checkpoint(force=True)          # the replayed log (and this recovery) saved

    def report(self) -> dict:
        """Per query, the statistics since the previous report, as PlannerService.report takes
        them: ``{query: {"rates", "tested", "passed", "keys"}}`` (use
        ``service.report(worker.partition, query, **entry)``). Rates are events/s of event
        time of the query's types; tested/passed are per conjunct index."""
        rates = self.rates.rates()
        out = {}
        for name, m in self.engine.managers.items():
            types = m.cq.types
            q_rates = dict(rates) if None in types else \
                {t: r for t, r in rates.items() if t in types}
            last = self._reported.get(name) or [(0, 0)] * len(m.cq.conjuncts)
            now = [(c.tested, c.passed) for c in m.cq.conjuncts]
            tested = {k: t - last[k][0] for k, (t, _) in enumerate(now)}
            passed = {k: p - last[k][1] for k, (_, p) in enumerate(now)}
            self._reported[name] = now
            keys = self.engine.index.partitions() if m.partitioned else 1
            out[name] = {"rates": q_rates, "tested": tested, "passed": passed,
                         "keys": max(1, keys)}
        return out


def _as_text(query):
    """A parsed query as the text it was parsed from (when it has one), else as it is."""
    text = getattr(query, "text", None) if isinstance(query, Query) else None
    return text if text else query


def partition_actor(**options):
    """The Ray actor class of PartitionWorker (``partition_actor().remote("p0", key_attr)``)."""
    from raycep.actors.handles import actor_class
    return actor_class(PartitionWorker, **options)

