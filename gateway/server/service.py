"""GatewayService: the control plane of a raycep cluster (docs/architecture.md, "Control flow").

It owns the query registry (persisted), the match store (bounded) and the routing table, and
talks to the partition actors, the global actor and the planner through actor handles
(``actors.handles``: Ray actors, or plain objects in one process). Every method that reaches an
actor is async. It is the one coordinator between the actors and the planner: it collects the
actors' statistics, hands them to the planner and installs the plans the planner returns. The
HTTP layer (``gateway.server.http``) is a thin translation of requests to these methods.

A query whose equivalence includes the cluster's key attribute (``[symbol]``) runs on every
partition actor, each seeing the events of its keys; any other query runs on the global actor,
which receives every event of the types such queries read (``RoutingTable.global_types``).

As Ray Serve's controller delegates to one state manager per concern, this class is a facade
over one object per job, all sharing ``actors.Actors`` (the handles, each query's scope, the
routing table): ``queries.Queries`` (the query lifecycle), ``ingest.Ingest`` (events and
watermarks), ``drain.Outboxes`` (matches moved to the store and read back) and
``planning.Planning`` (planner rounds).
"""
from __future__ import annotations

import asyncio
import os
import time

from raycep.cep.errors import CepError
from raycep.gateway.server.actors import Actors
from raycep.gateway.server.drain import Outboxes
from raycep.gateway.server.ingest import Ingest
from raycep.gateway.server.metrics import GatewayMetrics
from raycep.gateway.server.planning import Planning
from raycep.gateway.server.queries import Queries
from raycep.gateway.server.autoscale import Autoscaler
from raycep.gateway.server.scaling import Gate, Scaling
from raycep.gateway.server.settings import GatewaySettings

__all__ = ["GatewayService", "GatewaySettings"]     # GatewaySettings: where callers import it


class GatewayService:
    """What the HTTP layer calls; each method is one of the managers' (their docstrings say
    what it does)."""

    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 registry, store, settings: GatewaySettings = GatewaySettings(),
                 spawner=None):
        # what routing a table's columns uses, loaded now rather than in the first request
        import numpy  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyarrow.ipc  # noqa: F401
        # (pyarrow's first conversion of Python values imports pandas when it is installed:
        # ~0.3 s of the first table's request otherwise)
        pyarrow.compute.dictionary_encode(pyarrow.array(["x"]))
        self.key_attr = key_attr
        self.registry = registry
        self.store = store
        self.settings = settings
        self._started = time.time()
        self.actors = Actors(partitions, global_actor, planner, key_attr, settings.key_groups)
        self._outboxes = Outboxes(self.actors, store, settings)
        self._planning = Planning(self.actors, registry)
        self._queries = Queries(self.actors, self._planning, registry, store, key_attr,
                                settings, self._outboxes)
        self.metrics = GatewayMetrics()
        self.started = False
        self._ingest = Ingest(self.actors, self._outboxes, key_attr, settings, self._started,
                              self.metrics.observe_send)
        self._gate = Gate()
        self._scaling = Scaling(self.actors, self._outboxes, self._gate, settings, spawner)
        self._autoscaler = Autoscaler(settings.autoscale, self.actors, self._scaling.scale) \
            if settings.autoscale is not None and spawner is not None else None

    @property
    def targets(self) -> dict:
        """Partition index or GLOBAL -> actor handle."""
        return self.actors.targets

    @property
    def planner(self):
        return self.actors.planner

    @property
    def routing(self):
        return self.actors.routing

    @property
    def events_in(self) -> int:
        return self._ingest.events_in

    @property
    def bad_rows(self) -> int:
        return self._ingest.bad_rows

    async def start(self):
        """Turn the actors' outboxes on and converge them to the registry (a gateway restart
        keeps the queries)."""
        await self._outboxes.start()
        await self._queries.start()
        self.started = True
        if self._autoscaler is not None:
            self._autoscaler.start()

    async def ready(self, timeout: float = 5.0) -> bool:
        """Whether the gateway has started and every actor answers within ``timeout``
        seconds (GET /readyz)."""
        if not self.started:
            return False
        try:
            await asyncio.wait_for(self.actors.clock(), timeout)
        except (asyncio.TimeoutError, CepError):
            return False
        return True

    async def stream_clock(self) -> float:
        return await self.actors.clock()

    # ---------------------------------------------------------------- queries
    async def register(self, text: str, name: str | None = None,
                       params: dict | None = None, mode: str | None = None) -> dict:
        async with self._gate.shared():
            return await self._queries.register(text, name, params, mode)

    async def register_many(self, entries: list) -> dict:
        async with self._gate.shared():
            return await self._queries.register_many(entries)

    async def remove(self, qid: str) -> dict:
        async with self._gate.shared():
            return await self._queries.remove(qid)

    async def remove_many(self, qids: list) -> dict:
        async with self._gate.shared():
            return await self._queries.remove_many(qids)

    async def describe(self, qid: str, actor_stats: list | None = None) -> dict:
        return await self._queries.describe(qid, actor_stats)

    async def queries(self) -> list:
        return await self._queries.all()

    async def explain(self, qid: str) -> dict:
        return await self._queries.explain(qid)

    # ---------------------------------------------------------------- events
    async def ingest_body(self, body, source: str = "gateway", batch: bool = False) -> dict:
        async with self._gate.shared():
            return await self._ingest.ingest_body(body, source, batch)

    async def ingest(self, events: list, source: str = "gateway",
                     batch_id: str | None = None) -> dict:
        async with self._gate.shared():
            return await self._ingest.ingest(events, source, batch_id)

    async def advance(self, watermark: float, force: bool = False) -> dict:
        async with self._gate.shared():
            return await self._ingest.advance(watermark, force)

    # ---------------------------------------------------------------- scaling
    async def scale(self, partitions) -> dict:
        return await self._scaling.scale(partitions)

    async def stop_autoscale(self) -> None:
        if self._autoscaler is not None:
            await self._autoscaler.stop()

    def autoscale(self) -> dict | None:
        """The autoscaler's settings and decisions (None: not autoscaling)."""
        return self._autoscaler.describe() if self._autoscaler is not None else None

    def scaling(self) -> list:
        """The re-partitionings done by this gateway, oldest first."""
        return list(self._scaling.history)

    # ---------------------------------------------------------------- matches
    async def drain(self, target) -> int:
        return await self._outboxes.drain(target)

    async def drain_all(self) -> int:
        return await self._outboxes.drain_all()

    async def acknowledge(self):
        await self._outboxes.acknowledge()

    def put_matches(self, records: list):
        self._outboxes.put_matches(records)

    def matches(self, qid: str, since: int = 0, limit: int = 1000) -> dict:
        return self._outboxes.matches(qid, since, limit)

    def late_events(self, since: int = 0, limit: int = 1000) -> dict:
        return self._outboxes.late_events(since, limit)

    # ---------------------------------------------------------------- planning
    async def plan_round(self) -> dict:
        return await self._planning.round()

    async def install_plans(self, plans: dict) -> None:
        await self._planning.install(plans)

    # ---------------------------------------------------------------- status
    async def health(self) -> dict:
        """``status`` ("ok", or "degraded" while an actor does not answer), the actors alive
        of all, the events the actors processed (from the gateway and from Spark jobs
        alike) and those the gateway took in, the queries, the uptime."""
        targets = list(self.targets)
        answers = await asyncio.gather(*(asyncio.wait_for(self.actors.call(t, "health"), 5.0)
                                         for t in targets), return_exceptions=True)
        alive = [a for a in answers if isinstance(a, dict)]
        return {"status": "ok" if len(alive) == len(targets) else "degraded",
                "partitions": self.routing.partitions, "key_attr": self.key_attr,
                "queries": len(self.actors.scopes),
                "actors": {"alive": len(alive), "total": len(targets)},
                "events": sum(a.get("events", 0) for a in alive),
                "gateway_events": self.events_in,
                "uptime": round(time.time() - self._started, 3)}

    async def stats(self) -> dict:
        actors = await self.actors.stats()
        return {"gateway": {**self._gateway_counts(),
                            "send_stages": self._ingest.stages.summary()},
                "actors": {str(t): {k: v for k, v in st.items() if k != "queries"}
                           for t, st in zip(self.targets, actors)},
                "routing": self.routing.to_dict()}

    def _gateway_counts(self) -> dict:
        history = self._scaling.history
        return {"events": self.events_in, "bad_rows": self.bad_rows, "pid": os.getpid(),
                "orphan_matches": self.store.orphans,
                "late_events": self._outboxes.late_total(),
                "partitions": self.routing.partitions, "rescales": len(history),
                "rescale_held_seconds": sum(r.get("held_seconds", r["seconds"])
                                            for r in history),
                "autoscale_decisions": len(self._autoscaler.decisions)
                if self._autoscaler is not None else 0}

    async def metrics_text(self) -> bytes:
        """The Prometheus exposition (gateway/server/metrics.py) of this gateway and of every
        actor's stats, read now."""
        actors = await self.actors.stats()
        store = {}
        for q in self.store.queries():
            if not q.startswith(":"):
                store[q] = self.store.stats(q)
        return self.metrics.exposition({
            "gateway": self._gateway_counts(),    # (the send stages: their histogram)
            "actors": {str(t): st for t, st in zip(self.targets, actors)},
            "store": store})
