"""GatewayService: the control plane of a raycep cluster (DESIGN.md "Control").

It owns the query registry (persisted), the match store (bounded) and the routing table, and
talks to the partition actors, the global actor and the planner through actor handles (Ray
handles, or ``actors.local.LocalHandle`` in one process). Every method that reaches an actor is
async. The HTTP layer (``gateway.http``) is a thin translation of requests to these methods.

A query whose equivalence includes the cluster's key attribute (``[symbol]``) runs on every
partition actor, each seeing the events of its keys; any other query runs on the global actor,
which receives every event of the types such queries read (``RoutingTable.global_types``).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass

from actors.routing import GLOBAL, RoutingTable
from cep.codec import decode_batch, encode_batch
from cep.compiler import compile_query
from cep.disorder import check_mode
from cep.errors import (CepError, ConflictError, IngestError, NotFoundError,
                        QueryValidationError, UnavailableError)
from cep.event import make_event
from cep.parser import parse_queries, parse_query

log = logging.getLogger("raycep.gateway")


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8470
    token: str | None = None
    registry_path: str | None = "raycep-registry.sqlite"
    match_capacity: int = 10_000
    matches_jsonl: str | None = None
    drain_every: float = 0.02          # seconds between outbox drains when idle
    plan_every: float = 2.0            # seconds between planner rounds (0: never)
    drain_limit: int = 10_000


#: the store stream of late events (not a valid query name)
LATE = ":late"


class GatewayService:
    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 registry, store, settings: GatewaySettings = GatewaySettings()):
        self.targets = {i: h for i, h in enumerate(partitions)}
        self.targets[GLOBAL] = global_actor
        self.planner = planner
        self.key_attr = key_attr
        self.registry = registry
        self.store = store
        self.settings = settings
        self.routing = RoutingTable(len(partitions), key_attr)
        self._scopes: dict = {}            # query id -> "keyed" | "global"
        self._types: dict = {}             # query id -> frozenset of types (None: any)
        self._acks = {t: 0 for t in self.targets}
        self._drain_locks = {t: asyncio.Lock() for t in self.targets}
        self._drain_errors: dict = {}      # target -> last drain error (logged once)
        self._batch_ids = itertools.count(1)
        self._started = time.time()
        self.events_in = 0
        self.bad_rows = 0

    # ---------------------------------------------------------------- actors
    async def _call(self, target, method: str, *args):
        """``await handle.method.remote(*args)``; an unreachable actor -> UnavailableError,
        raycep errors pass through."""
        handle = self.targets[target] if target != "planner" else self.planner
        try:
            return await getattr(handle, method).remote(*args)
        except CepError:
            raise
        except Exception as exc:
            name = "the planner" if target == "planner" else \
                "the global actor" if target == GLOBAL else f"partition actor {target}"
            raise UnavailableError(f"{name} is unreachable ({method}): "
                                   f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                                   ) from exc

    def _scope_targets(self, scope: str) -> list:
        return [GLOBAL] if scope == "global" else [t for t in self.targets if t != GLOBAL]

    # ---------------------------------------------------------------- start-up
    async def start(self):
        """Converge the actors to the registry: add the registered queries they lack, remove
        the ones the registry does not know (a gateway restart keeps the queries)."""
        self.store.open(LATE)
        for target in self.targets:
            await self._call(target, "set_outbox", True)
        if self.planner is not None:
            for target, handle in self.targets.items():
                await self._call("planner", "subscribe", str(target), handle)
        wanted: dict = {}
        for rec in self.registry.all():
            try:
                scope, types = self._analyse(rec.text, rec.params)
            except CepError as exc:       # a registry written by another version
                log.error("registered query %s no longer compiles, skipped: %s", rec.id, exc)
                continue
            self._scopes[rec.id], self._types[rec.id] = scope, types
            self.store.open(rec.id)
            for t in self._scope_targets(scope):
                wanted.setdefault(t, []).append(rec)
            await self._plan_register(rec.id, rec.text, rec.params, scope)
        for target in self.targets:
            have = set(await self._call(target, "queries"))
            for rec in wanted.get(target, []):
                if rec.id not in have:
                    await self._call(target, "add_query", rec.id, rec.text, rec.params, None,
                                     rec.mode)
            for name in have - {r.id for r in wanted.get(target, [])}:
                await self._call(target, "remove_query", name)
        self._update_routing()

    def _analyse(self, text: str, params: dict | None) -> tuple:
        """(scope, types) of a query text: compile it (raising its syntax/validation error)."""
        cq = compile_query(self._parse_one(text), params)
        keyed = self.key_attr is not None and self.key_attr in cq.equivalence
        types = None if None in cq.types else frozenset(cq.types)
        return ("keyed" if keyed else "global"), types

    @staticmethod
    def _parse_one(text: str):
        if not isinstance(text, str) or not text.strip():
            raise QueryValidationError("the query text is empty")
        queries = parse_queries(text)
        if len(queries) != 1:
            raise QueryValidationError(f"register one query at a time; the text holds "
                                       f"{len(queries)} (separated by ';')")
        return parse_query(text.strip().rstrip(";"))

    def _update_routing(self):
        types: frozenset | None = frozenset()
        for qid, scope in self._scopes.items():
            if scope == "global":
                t = self._types[qid]
                types = None if t is None or types is None else types | t
        self.routing = RoutingTable(self.routing.partitions, self.key_attr, types,
                                    self.routing.version + 1)

    async def _plan_register(self, qid, text, params, scope):
        if self.planner is None:
            return
        try:
            await self._call("planner", "register", qid, text, params, None, scope == "keyed")
        except CepError as exc:
            if "already planned" not in str(exc):
                raise

    # ---------------------------------------------------------------- queries
    async def register(self, text: str, name: str | None = None,
                       params: dict | None = None, mode: str | None = None) -> dict:
        """Parse, validate and compile ``text``, persist it, install it on its actors.
        ``mode``: optimistic / pessimistic handling of out-of-order events (None: the
        cluster's default). Raises QuerySyntaxError / QueryValidationError (with line and
        column) or ConflictError; on a failure nothing stays registered."""
        query = self._parse_one(text)
        if mode is not None:
            check_mode(mode)
        name = name or query.name
        if name is not None and self.registry.get(name) is not None:
            raise ConflictError(f"a query named {name!r} is already registered; remove it "
                                f"first or choose another name")
        scope, types = self._analyse(text, params)
        rec = self.registry.add(name, text, params or {}, mode)
        done = []
        try:
            await self._plan_register(rec.id, text, rec.params, scope)
            for t in self._scope_targets(scope):
                await self._call(t, "add_query", rec.id, text, rec.params, None, mode)
                done.append(t)
        except BaseException:
            for t in done:
                try:
                    await self._call(t, "remove_query", rec.id)
                except CepError:
                    pass
            if self.planner is not None:
                try:
                    await self._call("planner", "unregister", rec.id)
                except CepError:
                    pass
            self.registry.remove(rec.id)
            raise
        self._scopes[rec.id], self._types[rec.id] = scope, types
        self.store.open(rec.id)
        self._update_routing()
        log.info("registered query %s (%s)", rec.id, scope)
        return await self.describe(rec.id)

    async def remove(self, qid: str) -> dict:
        """Stop a query everywhere; the other queries are untouched."""
        if self.registry.get(qid) is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self._scopes.get(qid, "keyed")
        self.registry.remove(qid)
        self._scopes.pop(qid, None)
        self._types.pop(qid, None)
        self._update_routing()
        for t in self._scope_targets(scope):
            try:
                await self._call(t, "remove_query", qid)
            except CepError as exc:
                if not isinstance(exc, UnavailableError) and "no query named" in str(exc):
                    continue
                raise
        if self.planner is not None:
            await self._call("planner", "unregister", qid)
        stats = self.store.stats(qid) if qid in self.store.queries() else {}
        self.store.close(qid)
        log.info("removed query %s", qid)
        return {"id": qid, "removed": True, "matches": stats.get("total", 0)}

    async def describe(self, qid: str, actor_stats: list | None = None) -> dict:
        rec = self.registry.get(qid)
        if rec is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self._scopes.get(qid)
        if actor_stats is None:
            actor_stats = await self._actor_stats(self._scope_targets(scope or "keyed"))
        merged: dict = {}
        plans = []
        for st in actor_stats:
            q = st.get("queries", {}).get(qid)
            if q is None:
                continue
            for k, v in q.items():
                if k == "mode":
                    merged[k] = v
                elif k == "plan_version":             # a version, not a count: the newest
                    merged[k] = max(merged.get(k) or 0, v or 0)
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    merged[k] = merged.get(k, 0) + v
            plan = st.get("plans", {}).get(qid)
            if plan:
                plans.append(plan)
        plan = max(plans, key=lambda p: p["version"] or 0) if plans else None
        store = self.store.stats(qid) if qid in self.store.queries() else {}
        status = "running" if scope and plans else "error: not installed on its actors"
        return {"id": rec.id, "text": rec.text, "params": rec.params, "created": rec.created,
                "scope": scope, "status": status, "plan": plan, "stats": merged,
                "matches": store}

    async def queries(self) -> list:
        stats = await self._actor_stats(list(self.targets))
        return [await self.describe(rec.id, stats) for rec in self.registry.all()]

    async def _actor_stats(self, targets) -> list:
        return list(await asyncio.gather(*(self._call(t, "stats") for t in targets)))

    # ---------------------------------------------------------------- events
    async def ingest_body(self, body, source: str = "gateway") -> dict:
        """Events from the HTTP API: a msgpack batch (bytes, cep.codec) or JSON-like rows (a
        list of mappings, or ``{"events": [...]}``). Bad rows are reported and skipped."""
        if isinstance(body, (bytes, bytearray)):
            batch, problems = decode_batch(bytes(body), errors="collect")
            events, source = list(batch.events), batch.source
        else:
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
        ack = await self.ingest(events, source)
        ack["bad_rows"] = [str(p) for p in problems]
        self.bad_rows += len(problems)
        return ack

    async def ingest(self, events: list, source: str = "gateway") -> dict:
        """Route ``events`` to their actors (the same routing Spark jobs use), wait for the
        acknowledgements, and move the resulting matches to the store."""
        routed = self.routing.route(events)
        bid = next(self._batch_ids)
        targets = list(routed)
        acks = await asyncio.gather(*(
            self._call(t, "ingest", encode_batch(routed[t], source, f"{self._started}:{bid}:{t}"))
            for t in targets))
        await asyncio.gather(*(self.drain(t) for t in targets))
        self.events_in += len(events)
        return {"events": len(events),
                "duplicates": sum(a["duplicates"] for a in acks),
                "late": sum(a.get("late", 0) for a in acks),
                "partitions": {str(t): a["events"] for t, a in zip(targets, acks)},
                "matches": sum(a["queued"] + len(a["matches"]) - a.get("late", 0)
                               for a in acks),
                "bad_rows": [r for a in acks for r in a["bad_rows"]]}

    async def advance(self, watermark: float) -> dict:
        """Tell every actor no event with ``ts <= watermark`` will come; releases deferred
        matches (trailing negation)."""
        await asyncio.gather(*(self._call(t, "advance", float(watermark)) for t in self.targets))
        moved = sum(await asyncio.gather(*(self.drain(t) for t in self.targets)))
        return {"watermark": watermark, "matches": moved}

    # ---------------------------------------------------------------- matches
    async def drain(self, target) -> int:
        """Move a target's outbox to the match store; returns the number of records moved."""
        moved = 0
        async with self._drain_locks[target]:
            while True:
                page = await self._call(target, "drain", self._acks[target],
                                        self.settings.drain_limit)
                self.put_matches(page["records"])
                moved += len(page["records"])
                self._acks[target] = page["last"]
                if not page["pending"]:
                    return moved

    async def acknowledge(self):
        """Acknowledge what was stored (a graceful stop), so the next gateway does not receive
        it again; unreachable actors are skipped."""
        for target in self.targets:
            try:
                await self._call(target, "drain", self._acks[target], 0)
            except CepError:
                pass

    async def drain_all(self) -> int:
        results = await asyncio.gather(*(self.drain(t) for t in self.targets),
                                       return_exceptions=True)
        moved = 0
        for target, r in zip(self.targets, results):
            if isinstance(r, BaseException):
                # log a failing actor when its error changes, not on every drain
                if self._drain_errors.get(target) != str(r):
                    log.warning("cannot drain %s: %s", target, r)
                self._drain_errors[target] = str(r)
            else:
                if self._drain_errors.pop(target, None) is not None:
                    log.warning("draining %s works again", target)
                moved += r
        return moved

    def put_matches(self, records: list):
        """Store match, retraction and late-event records (late events under LATE)."""
        by_query: dict = {}
        for rec in records:
            by_query.setdefault(LATE if rec.get("late") else rec["query"], []).append(rec)
        for qid, recs in by_query.items():
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

    # ---------------------------------------------------------------- planning
    async def plan_round(self) -> dict:
        """One planner round: collect each actor's statistics, re-plan, push new plans."""
        if self.planner is None:
            return {}
        for target in self.targets:
            report = await self._call(target, "report")
            for qid, entry in report.items():
                if qid in self._scopes:
                    await self._call("planner", "report", str(target), qid, entry["rates"],
                                     entry["tested"], entry["passed"], entry["keys"])
        return await self._call("planner", "replan")

    # ---------------------------------------------------------------- status
    async def health(self) -> dict:
        return {"status": "ok", "partitions": self.routing.partitions,
                "key_attr": self.key_attr, "queries": len(self._scopes),
                "events": self.events_in, "uptime": round(time.time() - self._started, 3)}

    async def stats(self) -> dict:
        actors = await self._actor_stats(list(self.targets))
        late = self.store.stats(LATE) if LATE in self.store.queries() else {}
        return {"gateway": {"events": self.events_in, "bad_rows": self.bad_rows,
                            "orphan_matches": self.store.orphans,
                            "late_events": late.get("total", 0)},
                "actors": {str(t): {k: v for k, v in st.items() if k != "queries"}
                           for t, st in zip(self.targets, actors)},
                "routing": self.routing.to_dict()}
