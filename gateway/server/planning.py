"""Planning: the gateway between the actors and the planner. It registers each query with the
planner, runs planner rounds (every actor's statistics in, new plans out) and installs the
plans on each query's actors; a restarted planner is given the queries again."""
from __future__ import annotations

import asyncio
import logging

from raycep.cep.errors import CepError
from raycep.gateway.server.actors import PLANNER, Actors
from raycep.gateway.server.checks import parse_one

log = logging.getLogger("raycep.gateway")


class Planning:
    """``versions``: query -> the latest plan version installed (a query registered with the
    planner again continues after it). Without a planner every method does nothing."""

    def __init__(self, actors: Actors, registry):
        self.actors = actors
        self.registry = registry
        self.versions: dict = {}

    async def register(self, qid: str, query, params, scope: str) -> None:
        """Register a query with the planner (one it has already is left as it is)."""
        if self.actors.planner is None:
            return
        try:
            await self.actors.call(PLANNER, "register", qid, query, params, None,
                                   scope == "keyed", self.versions.get(qid, 0) + 1)
        except CepError as exc:
            if "already planned" not in str(exc):
                raise

    async def register_many(self, entries: list) -> None:
        """``register`` each of ``(qid, query, params, scope)`` in one planner call."""
        if self.actors.planner is None:
            return
        await self.actors.call(PLANNER, "register_many", [
            (qid, query, params, scope == "keyed", self.versions.get(qid, 0) + 1)
            for qid, query, params, scope in entries])

    async def unregister(self, qid: str) -> None:
        if self.actors.planner is not None:
            await self.actors.call(PLANNER, "unregister", qid)

    async def unregister_many(self, qids: list) -> None:
        if self.actors.planner is not None:
            await self.actors.call(PLANNER, "unregister_many", list(qids))

    async def round(self) -> dict:
        """One planner round: collect every actor's statistics (concurrently), hand them to the
        planner in one call, install the plans it returns on each query's actors. An
        unreachable actor is left out of the round (logged); the others go on."""
        if self.actors.planner is None or not self.actors.scopes:
            return {}                     # no query: nothing to plan (an idle cluster idles)
        await self.converge()
        batch = await self._reports()
        if batch:
            await self.actors.call(PLANNER, "report_many", batch)
        changed = await self.actors.call(PLANNER, "replan")
        await self.install(changed)
        return changed

    async def _reports(self) -> list:
        """Every actor's ``report()`` of the registered queries, as ``report_many`` takes
        them; an actor that does not answer is logged and left out."""
        targets = list(self.actors.targets)
        reports = await asyncio.gather(*(self.actors.call(t, "report") for t in targets),
                                       return_exceptions=True)
        batch = []
        for target, report in zip(targets, reports):
            if isinstance(report, BaseException):
                log.warning("planner round: no statistics from %s: %s", target, report)
                continue
            for qid, entry in report.items():
                if qid in self.actors.scopes:
                    batch.append((str(target), qid, entry["rates"], entry["tested"],
                                  entry["passed"], entry["keys"]))
        return batch

    async def converge(self) -> None:
        """Register with the planner the queries it does not know: after a planner restart
        (its state is statistics and plans, rebuilt from the next reports), its plans then
        continue after the versions the actors have."""
        scopes = self.actors.scopes
        known = set(await self.actors.call(PLANNER, "queries"))
        if known >= scopes.keys():
            return                                   # the usual case: no registry read
        missing = [rec for rec in self.registry.all()
                   if rec.id in scopes and rec.id not in known]
        for rec in missing:
            await self.register(rec.id, parse_one(rec.text), rec.params, scopes[rec.id])
        if missing:
            log.warning("the planner had lost %d queries (restarted?): registered again",
                        len(missing))

    async def install(self, plans: dict) -> None:
        """``set_plan`` on the actors of each query of ``plans`` (``replan``'s result), all at
        once; an actor that fails is logged and does not stop the others."""
        scopes = self.actors.scopes
        calls = [(t, qid, p) for qid, p in plans.items() if qid in scopes
                 for t in self.actors.of_scope(scopes[qid])]
        results = await asyncio.gather(*(
            self.actors.call(t, "set_plan", qid, p["order"], p["version"])
            for t, qid, p in calls), return_exceptions=True)
        for qid, p in plans.items():
            self.versions[qid] = max(self.versions.get(qid, 0), p["version"])
        for (target, qid, p), r in zip(calls, results):
            if isinstance(r, BaseException):
                log.warning("cannot install plan v%s of %s on %s: %s", p["version"], qid,
                            target, r)
