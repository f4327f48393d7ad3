"""Queries: the query lifecycle. Register (check, persist, install on the query's actors, all
or nothing), remove, describe (the actors' statistics merged), and at start-up converge the
actors to the persisted registry; each change replaces the routing table."""
from __future__ import annotations

import asyncio
import dataclasses
import logging

from raycep.actors.routing import GLOBAL
from raycep.cep.store.disorder import check_mode
from raycep.cep.errors import (CepError, ConflictError, NotFoundError, QueryValidationError,
                               UnavailableError)
from raycep.gateway.server.actors import PLANNER, Actors
from raycep.gateway.server.checks import analyse, check_params, parse_one
from raycep.gateway.server.messages import type_name
from raycep.gateway.server.planning import Planning
from raycep.gateway.server.query_sets import check_entries, labelled
from raycep.gateway.server.settings import GatewaySettings

log = logging.getLogger("raycep.gateway")


class Queries:
    """``types``: query id -> the event types it reads (None: any); the scopes are
    ``actors.scopes``. ``retain``: the actors' retention (read at ``start``)."""

    def __init__(self, actors: Actors, planning: Planning, registry, store,
                 key_attr: str | None, settings: GatewaySettings, outboxes):
        self.actors = actors
        #: the actors' outboxes (gateway/server/drain.py): drained before a removed query's
        #: stream closes, so the matches made before the removal reach its readers
        self.outboxes = outboxes
        self.planning = planning
        self.registry = registry
        self.store = store
        self.key_attr = key_attr
        self.settings = settings
        self.types: dict = {}
        self.retain = 0.0

    # ---------------------------------------------------------------- start-up
    async def start(self) -> None:
        """Converge the actors to the registry: add the registered queries they lack, remove
        the ones the registry does not know (a gateway restart keeps the queries)."""
        self.retain = await self.actors.call(GLOBAL, "retention")
        wanted = await self._restore()
        for target in self.actors.targets:
            await self._converge(target, wanted.get(target, []))
        self._update_routing()

    async def _restore(self) -> dict:
        """Take up the registry's queries (a query that no longer compiles is logged and
        skipped) and register them with the planner; target -> [(record, query)]."""
        wanted: dict = {}
        for rec in self.registry.all():
            try:
                query = parse_one(rec.text)
                scope, types = analyse(query, rec.params, self.key_attr)
            except CepError as exc:       # a registry written by another version
                log.error("registered query %s no longer compiles, skipped: %s", rec.id, exc)
                continue
            self._record(rec.id, scope, types)
            for t in self.actors.of_scope(scope):
                wanted.setdefault(t, []).append((rec, query))
            await self.planning.register(rec.id, query, rec.params, scope)
        return wanted

    async def _converge(self, target, wanted: list) -> None:
        """Add to ``target`` the ``wanted`` queries it lacks, remove the others it has."""
        have = set(await self.actors.call(target, "queries"))
        for rec, query in wanted:
            if rec.id not in have:
                await self.actors.call(target, "add_query", rec.id, query, rec.params, None,
                                       rec.mode)
        for name in have - {r.id for r, _ in wanted}:
            await self.actors.call(target, "remove_query", name)

    def _record(self, qid: str, scope: str, types) -> None:
        """Note where a query runs and what it reads; open its match stream."""
        self.actors.scopes[qid], self.types[qid] = scope, types
        self.store.open(qid)

    def _update_routing(self) -> None:
        # with a retention, a keyless query registered later sees the last seconds of every
        # type it reads: the global actor is sent the whole stream
        types: frozenset | None = None if self.retain > 0 else frozenset()
        for qid, scope in self.actors.scopes.items():
            if scope == "global":
                t = self.types[qid]
                types = None if t is None or types is None else types | t
        routing = self.actors.routing
        self.actors.routing = dataclasses.replace(routing, key_attr=self.key_attr,
                                                  global_types=types,
                                                  version=routing.version + 1)

    # ---------------------------------------------------------------- changes
    async def register(self, text: str, name: str | None = None,
                       params: dict | None = None, mode: str | None = None) -> dict:
        """Parse, validate and compile ``text``, persist it, install it on its actors.
        ``mode``: optimistic / pessimistic handling of out-of-order events (None: the
        cluster's default). Raises QuerySyntaxError / QueryValidationError (with line and
        column) or ConflictError; on a failure nothing stays registered."""
        query = parse_one(text)
        check_options(name, params, mode)
        name = name or query.name
        if name is not None and self.registry.get(name) is not None:
            raise ConflictError(f"a query named {name!r} is already registered; remove it "
                                f"first or choose another name")
        scope, types = analyse(query, params, self.key_attr, self.settings.max_window)
        rec = self.registry.add(name, text, params or {}, mode)
        await self._install(rec, query, scope, mode)
        self._record(rec.id, scope, types)
        self._update_routing()
        log.info("registered query %s (%s)", rec.id, scope)
        return await self.describe(rec.id)

    async def _install(self, rec, query, scope: str, mode: str | None) -> None:
        """Register a new query with the planner and add it to its actors, all at once; it
        sees the events after the stream's latest event time. On a failure whatever took it
        is undone (as far as it can be), its record removed from the registry, and the
        error raised."""
        done = []
        try:
            await self.planning.register(rec.id, query, rec.params, scope)
            since = await self.actors.clock()     # the query sees the events after it
            targets = list(self.actors.of_scope(scope))
            results = await asyncio.gather(*(
                self.actors.call(t, "add_query", rec.id, query, rec.params, None, mode, since)
                for t in targets), return_exceptions=True)      # every actor at once
            done = [t for t, r in zip(targets, results) if not isinstance(r, BaseException)]
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        except BaseException:
            await self._undo(rec.id, done)
            self.registry.remove(rec.id)
            raise

    async def _undo(self, qid: str, targets: list) -> None:
        """Remove a query that failed to install from ``targets`` and the planner; errors
        are ignored (the registration's own error is the one raised)."""
        for t in targets:
            try:
                await self.actors.call(t, "remove_query", qid)
            except CepError:
                pass
        try:
            await self.planning.unregister(qid)
        except CepError:
            pass

    async def register_many(self, entries: list) -> dict:
        """Register a query set (``query_sets.Entry`` list) all or nothing: every query is
        checked first (``query_sets.check_entries``; a name used twice or already registered
        is an error too), then the set is persisted in one transaction and installed with one
        call to the planner and one to each actor, all at the same stream time. Any failure
        leaves nothing registered; the error names the query. Returns ``{"registered":
        [{"id", "scope"}, ...]}`` in the set's order."""
        checked = check_entries(entries, self.key_attr, self.settings.max_window,
                                check_options)
        for c in checked:
            name = c.entry.name
            if name is not None and self.registry.get(name) is not None:
                raise labelled(ConflictError(
                    f"a query named {name!r} is already registered; remove it first or "
                    f"choose another name"), c.entry)
        records = self.registry.add_many([(c.entry.name, c.entry.text, c.entry.params,
                                           c.entry.mode) for c in checked])
        try:
            await self._install_many(records, checked)
        except BaseException:
            self.registry.remove_many([r.id for r in records])
            raise
        for rec, c in zip(records, checked):
            self._record(rec.id, c.scope, c.types)
        self._update_routing()
        log.info("registered a set of %d queries", len(records))
        return {"registered": [{"id": rec.id, "scope": c.scope}
                               for rec, c in zip(records, checked)]}

    async def _install_many(self, records: list, checked: list) -> None:
        """Register a checked set with the planner and add it to the actors: one call each,
        concurrently; on a failure whatever took it is undone and the error raised."""
        ids = [rec.id for rec in records]
        by_target: dict = {}
        for rec, c in zip(records, checked):
            for t in self.actors.of_scope(c.scope):
                by_target.setdefault(t, []).append(
                    (rec.id, c.query, rec.params, None, c.entry.mode))
        since = await self.actors.clock()        # the queries see the events after it
        targets = list(by_target)
        results = await asyncio.gather(
            self.planning.register_many([(rec.id, c.query, rec.params, c.scope)
                                         for rec, c in zip(records, checked)]),
            *(self.actors.call(t, "add_queries", by_target[t], since) for t in targets),
            return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if not failed:
            return
        for t, r in zip(targets, results[1:]):
            if not isinstance(r, BaseException):
                try:
                    await self.actors.call(t, "remove_queries", ids)
                except CepError:
                    pass
        if not isinstance(results[0], BaseException):
            try:
                await self.planning.unregister_many(ids)
            except CepError:
                pass
        raise failed[0]

    async def remove_many(self, qids: list) -> dict:
        """Remove a set of queries, all or none: an id that is not registered (or given
        twice) is an error and nothing is removed. One call to each actor and the planner.
        Returns ``{"removed": [{"id", "matches"}, ...]}``."""
        if not isinstance(qids, (list, tuple)) or not qids:
            raise QueryValidationError("ids must be a non-empty array of query ids")
        seen = set()
        for k, qid in enumerate(qids, start=1):
            if not isinstance(qid, str):
                raise QueryValidationError(f"id #{k} must be a string, got {type_name(qid)}")
            if qid in seen:
                raise QueryValidationError(f"query {qid!r} is given twice")
            seen.add(qid)
            if self.registry.get(qid) is None:
                raise NotFoundError(f"no query {qid!r} is registered (nothing was removed)")
        scopes = {qid: self.actors.scopes.get(qid, "keyed") for qid in qids}
        self.registry.remove_many(qids)
        for qid in qids:
            self.actors.scopes.pop(qid, None)
            self.types.pop(qid, None)
        self._update_routing()
        by_target: dict = {}
        for qid, scope in scopes.items():
            for t in self.actors.of_scope(scope):
                by_target.setdefault(t, []).append(qid)
        await asyncio.gather(*(self.actors.call(t, "remove_queries", names)
                               for t, names in by_target.items()))
        await self.planning.unregister_many(qids)
        await self.outboxes.drain_all()     # (made before the removal: stored, not orphans)
        out = []
        for qid in qids:
            stats = self.store.stats(qid) if qid in self.store.queries() else {}
            self.store.close(qid)
            out.append({"id": qid, "matches": stats.get("total", 0)})
        log.info("removed a set of %d queries", len(qids))
        return {"removed": out}

    async def remove(self, qid: str) -> dict:
        """Stop a query everywhere; the other queries are untouched."""
        if self.registry.get(qid) is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self.actors.scopes.get(qid, "keyed")
        self.registry.remove(qid)
        self.actors.scopes.pop(qid, None)
        self.types.pop(qid, None)
        self._update_routing()
        for t in self.actors.of_scope(scope):
            try:
                await self.actors.call(t, "remove_query", qid)
            except CepError as exc:
                if not isinstance(exc, UnavailableError) and "no query named" in str(exc):
                    continue
                raise
        await self.planning.unregister(qid)
        await self.outboxes.drain_all()     # (made before the removal: stored, not orphans)
        stats = self.store.stats(qid) if qid in self.store.queries() else {}
        self.store.close(qid)
        log.info("removed query %s", qid)
        return {"id": qid, "removed": True, "matches": stats.get("total", 0)}

    # ---------------------------------------------------------------- reading
    async def describe(self, qid: str, actor_stats: list | None = None) -> dict:
        """A registered query: its record, scope, status, newest plan, the actors'
        statistics merged, the store's counts and the warnings every actor gives."""
        rec = self.registry.get(qid)
        if rec is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self.actors.scopes.get(qid)
        if actor_stats is None:
            actor_stats = await self.actors.stats(self.actors.of_scope(scope or "keyed"))
        merged, plans, warned = merge_stats(qid, actor_stats)
        plan = max(plans, key=lambda p: p["version"] or 0) if plans else None
        store = self.store.stats(qid) if qid in self.store.queries() else {}
        status = "running" if scope and plans else "error: not installed on its actors"
        return {"id": rec.id, "text": rec.text, "params": rec.params, "created": rec.created,
                "scope": scope, "status": status, "plan": plan, "stats": merged,
                "matches": store, "warnings": sorted(warned or ())}

    async def explain(self, qid: str) -> dict:
        """What ``qid`` is and how it is planned (planner.explain, computed by the planner
        under the statistics it holds), with the plan in use on its actors, its conditions'
        counts summed over them, its sharing group and its evaluation path."""
        rec = self.registry.get(qid)
        if rec is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        if self.actors.planner is None:
            raise NotFoundError("this cluster has no planner: nothing to explain")
        scope = self.actors.scopes.get(qid)
        actor_stats = await self.actors.stats(self.actors.of_scope(scope or "keyed"))
        _, plans, _ = merge_stats(qid, actor_stats)
        plan = max(plans, key=lambda p: p["version"] or 0) if plans else {}
        info = await self.actors.call(PLANNER, "explain", qid, plan.get("order"),
                                      plan.get("version"))
        counters: dict = {}
        paths: dict = {}
        group = None
        for st in actor_stats:
            q = st.get("queries", {}).get(qid) or {}
            for c in q.get("conjuncts", ()):
                got = counters.setdefault(c["text"], {"tested": 0, "passed": 0, "failed": 0})
                for k in got:
                    got[k] += c.get(k, 0)
            for k, v in (st.get("paths", {}).get(qid) or {}).items():
                if isinstance(v, int):
                    paths[k] = paths.get(k, 0) + v
                elif v and k == "why":
                    paths[k] = v
            for g in st.get("groups", ()):
                if qid in g.get("queries", ()) and len(g["queries"]) > 1:
                    group = g
        return {**info, "scope": scope, "counters": counters, "path": paths or None,
                "group": group}

    async def all(self) -> list:
        """``describe`` of every registered query (the actors asked once)."""
        stats = await self.actors.stats()
        return [await self.describe(rec.id, stats) for rec in self.registry.all()]


def check_options(name, params, mode) -> None:
    """A registration's name (a string or None), parameters and mode."""
    if name is not None and not isinstance(name, str):
        raise QueryValidationError(f"name must be a string, got {type_name(name)}")
    if mode is not None:
        if not isinstance(mode, str):
            raise QueryValidationError(f"mode must be a string (optimistic or "
                                       f"pessimistic), got {type_name(mode)}")
        check_mode(mode)
    check_params(params)


def merge_stats(qid: str, actor_stats: list) -> tuple:
    """(merged counts, plans, warnings) of a query over the actors' ``stats()``: counts are
    added, the plan version is the newest, the warnings are those every actor that has seen
    input gives (cep.unseen; None: no such actor)."""
    merged: dict = {}
    plans = []
    warned = None
    for st in actor_stats:
        q = st.get("queries", {}).get(qid)
        if q is None:
            continue
        if st.get("events"):
            found = set(q.get("warnings", ()))
            warned = found if warned is None else warned & found
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
    return merged, plans, warned
