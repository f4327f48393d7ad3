"""PlannerService: the cluster's planner (docs/architecture.md, "Control flow"). Partition actors report their
statistics (through the gateway, ``report_many``); the service merges them per query, asks
each query's AdaptivePolicy and returns the plans that changed: the gateway, the one
coordinator between the actors and the planner, installs them on the query's actors.

A plain class, so it runs in-process too; ``gateway/runtime.py`` makes it the Ray actor
(``actors.handles.actor_class``).
"""
from __future__ import annotations

import logging

from raycep.cep.errors import PlanningError
from raycep.cep.lang.compiler import compile_query
from raycep.planner.adaptive import AdaptationSettings, AdaptivePolicy
from raycep.planner.explain import explain
from raycep.planner.plan import Plan
from raycep.planner.stats import SelectivityEstimator, Statistics, per_key

log = logging.getLogger("raycep.planner")


class PlannerService:
    def __init__(self, settings: AdaptationSettings | None = None):
        self.settings = settings or AdaptationSettings()
        self._policies: dict = {}           # query -> AdaptivePolicy
        self._partitioned: dict = {}        # query -> evaluated per partition key?
        self._reports: dict = {}            # (partition, query) -> {"rates", "keys"}
        self._selectivity: dict = {}        # query -> SelectivityEstimator

    # ---------------------------------------------------------------- queries
    def register(self, name: str, query, params: dict | None = None,
                 settings: AdaptationSettings | None = None, partitioned: bool = False,
                 first_version: int = 1):
        """Start planning query ``name`` (text or Query AST). ``first_version``: the version
        of its first plan (a restarted planner continues after the plans installed before,
        which the actors would otherwise ignore as older)."""
        if name in self._policies:
            raise PlanningError(f"query {name!r} is already planned")
        cq = compile_query(query, params)
        self._policies[name] = AdaptivePolicy(cq, name, settings or self.settings,
                                              first_version)
        self._partitioned[name] = partitioned
        self._selectivity[name] = SelectivityEstimator()

    def register_many(self, entries: list) -> list:
        """``register`` each of ``entries``, ``(name, query, params, partitioned,
        first_version)`` tuples, in one call; a query already planned is left as it is.
        All or nothing: when one fails, those registered before it are unregistered again
        and its error raised. Returns the names registered."""
        added = []
        try:
            for name, query, params, partitioned, first_version in entries:
                if name not in self._policies:
                    self.register(name, query, params, None, partitioned, first_version)
                    added.append(name)
        except BaseException:
            for name in added:
                self.unregister(name)
            raise
        return added

    def unregister_many(self, names: list) -> None:
        gone = set(names)
        for name in gone:
            self._policies.pop(name, None)
            self._partitioned.pop(name, None)
            self._selectivity.pop(name, None)
        self._reports = {k: v for k, v in self._reports.items() if k[1] not in gone}

    def queries(self) -> list:
        """The queries being planned."""
        return list(self._policies)

    def unregister(self, name: str):
        self._policies.pop(name, None)
        self._partitioned.pop(name, None)
        self._selectivity.pop(name, None)
        self._reports = {k: v for k, v in self._reports.items() if k[1] != name}

    # ---------------------------------------------------------------- statistics
    def report(self, partition: str, query: str, rates: dict, tested: dict, passed: dict,
               keys: int = 1):
        """Statistics of one partition for one query since its previous report: arrival rates
        (events/s by type), per-conjunct tested/passed counts and the number of partition keys
        it holds. A report replaces the partition's previous rates and keys; its counts go to
        the query's selectivity estimate (the same ``SelectivityEstimator`` as ``raycep
        local``'s)."""
        if query not in self._policies:
            raise PlanningError(f"statistics for unknown query {query!r}")
        self._reports[(partition, query)] = {"rates": dict(rates), "keys": max(1, int(keys))}
        self._selectivity[query].add(tested, passed)

    def report_many(self, reports) -> None:
        """Several ``report`` calls in one: ``(partition, query, rates, tested, passed,
        keys)`` each (one round trip per planner round)."""
        for r in reports:
            self.report(*r)

    def statistics(self, query: str) -> Statistics:
        """The merged statistics of ``query``: rates add up over partitions (divided by the
        number of keys for a query evaluated per key); selectivities from every partition's
        counts (``SelectivityEstimator``)."""
        return Statistics(self._rates(query), self._selectivity[query].sample())

    def _rates(self, query: str) -> dict:
        reports = [r for (p, q), r in self._reports.items() if q == query]
        rates: dict = {}
        keys = 0
        for r in reports:
            keys += r["keys"]
            for t, v in r["rates"].items():
                rates[t] = rates.get(t, 0.0) + v
        if self._partitioned.get(query):
            rates = per_key(rates, keys)
        return rates

    def explain(self, query: str, order, version) -> dict:
        """planner.explain of ``query`` under the statistics held for it now (the estimates
        so far: explaining does not sample the counts waiting for the next round), with the
        plan in use ``order`` / ``version`` (the actors')."""
        policy = self._policies.get(query)
        if policy is None:
            raise PlanningError(f"query {query!r} is not planned")
        s = policy.settings
        return explain(policy.cq, query, self._rates(query),
                       dict(self._selectivity[query].estimates),
                       tuple(order) if order else None, version, s.algorithm, s.alpha)

    # ---------------------------------------------------------------- planning
    def replan(self) -> dict:
        """Re-plan every query that has statistics; the plans that changed (to install)."""
        changed = {}
        for name, policy in self._policies.items():
            if not any(q == name for _, q in self._reports):
                continue
            plan = policy.consider(self.statistics(name))
            if plan is not None:
                changed[name] = plan
        return {name: _as_dict(p) for name, p in changed.items()}

    def plans(self) -> dict:
        return {name: _as_dict(p.plan) for name, p in self._policies.items() if p.plan}


def _as_dict(plan: Plan) -> dict:
    return {"query": plan.query, "order": list(plan.order) if plan.order else None,
            "version": plan.version, "algorithm": plan.algorithm, "cost": plan.cost}
