"""The planner running in-process next to one Engine (``raycep local``; the PlannerActor does
the same for a cluster).

Every ``check_every`` events it samples the statistics (arrival rates over a sliding horizon of
event time, selectivities from the evaluator's counters), asks each query's AdaptivePolicy
whether to re-plan, and installs a new plan between two events. Until the first look a query
runs a provisional plan made from the default statistics (so that it is evaluated in bulk). Queries evaluated as one group
(cep.runtime.groups) have one plan, from the group's statistics.
"""
from __future__ import annotations

from dataclasses import dataclass

from raycep.cep.errors import PlanningError
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.disorder import DEFAULT_SOURCE
from raycep.planner.adaptive import AdaptationSettings, AdaptivePolicy
from raycep.planner.algorithms import ALGORITHMS
from raycep.planner.plan import TREE_NFA, Plan, make_plan
from raycep.planner.stats import (RateTracker, SelectivityEstimator, SelectivityTracker,
                                  Statistics, per_key)

ADAPTIVE = "adaptive"


def settings_for(planner: str) -> AdaptationSettings | None:
    """``--planner`` value -> settings. ``adaptive`` (default: adaptive DP-LD),
    ``adaptive:NAME``, a static ``NAME`` (planned once, from the first statistics), or
    ``tree-nfa`` (no static plan: the order is chosen at every trigger; returns None)."""
    if planner == TREE_NFA:
        return None
    if planner == ADAPTIVE:
        return AdaptationSettings()
    if planner.startswith(ADAPTIVE + ":"):
        return AdaptationSettings(algorithm=planner.split(":", 1)[1], adaptive=True)
    if planner in ALGORITHMS:
        return AdaptationSettings(algorithm=planner, adaptive=False)
    known = ", ".join([ADAPTIVE, *(f"{ADAPTIVE}:{a}" for a in ALGORITHMS), *ALGORITHMS, TREE_NFA])
    raise PlanningError(f"unknown planner {planner!r} (known: {known})")


def provisional_plan(manager, settings: AdaptationSettings = AdaptationSettings()) -> Plan:
    """A plan of evaluator ``manager`` from the default statistics (equal rates, no
    selectivity measured), until measured ones give a better (``first_plan``): evaluated in
    bulk from its first events rather than one by one in the ad hoc order. Its version is
    the manager's current one."""
    return make_plan(manager.cq, None, settings.algorithm, settings.alpha,
                     version=manager.version, name=manager.name)


def first_plan(manager, rates: dict, keys: int = 1,
               settings: AdaptationSettings = AdaptationSettings()) -> Plan:
    """A plan of evaluator ``manager`` (a PatternManager or GroupManager) from what its engine
    measured so far, as ``PlannedEngine``'s first look makes it: the stream's arrival
    ``rates`` (over ``keys`` partition keys for an evaluator evaluated per key, ``per_key``),
    the selectivities of its conjuncts' counters since they were compiled (a
    SelectivityEstimator's first sample), ``settings``' algorithm. Its version is the
    manager's current one. For a partition actor that has no plan from the planner yet
    (actors.partition.WorkerSettings.first_plan)."""
    cq = manager.cq
    estimator = SelectivityEstimator()
    estimator.add({k: c.tested for k, c in enumerate(cq.conjuncts)},
                  {k: c.passed for k, c in enumerate(cq.conjuncts)})
    if manager.partitioned:
        rates = per_key(rates, keys)
    return make_plan(cq, Statistics(rates, estimator.sample()), settings.algorithm,
                     settings.alpha, version=manager.version, name=manager.name)


@dataclass(frozen=True)
class PlanChange:
    events: int          # events processed when the plan was installed
    clock: float         # event time then
    query: str
    order: tuple | None
    version: int
    algorithm: str
    cost: float


class PlannedEngine:
    """An Engine whose queries are planned from measured statistics."""

    def __init__(self, engine: Engine | None = None, check_every: int = 2000,
                 horizon: float = 60.0, first_check: int | None = None):
        self.engine = engine or Engine()
        self.check_every = check_every
        #: events before the first look at the statistics (then every ``check_every``): until
        #: a query has a plan its order is chosen per trigger, and only a planned query is
        #: evaluated in bulk (cep.evaluation.bulk)
        if check_every < 1 or (first_check is not None and first_check < 1):
            raise PlanningError(f"the planner looks at the statistics every {check_every} "
                                f"events, first after {first_check}: both must be at least 1")
        self._next = first_check if first_check is not None else check_every
        self.rates = RateTracker(horizon)
        self.policies: dict = {}
        self._selectivity: dict = {}
        self.history: list = []
        self._seen = 0

    def add_query(self, query, name: str | None = None, params: dict | None = None,
                  order: tuple | None = None, planner: str = ADAPTIVE,
                  mode: str | None = None, since: float | None = None) -> str:
        """Register a query; ``order`` forces a static order, else ``planner`` decides;
        ``mode`` and ``since`` as ``Engine.add_query``'s."""
        settings = settings_for(planner) if order is None else None
        name = self.engine.add_query(query, name=name, params=params, order=order, mode=mode,
                                     since=since)
        manager = self.engine.managers[name]
        if settings is not None and manager.name not in self.policies:
            self.policies[manager.name] = AdaptivePolicy(manager.cq, manager.name, settings)
            self._selectivity[manager.name] = SelectivityTracker(manager.cq)
            self._provisional(manager.name)
        return name

    def remove_query(self, name: str):
        group = self.engine.managers[name].name if name in self.engine.managers else None
        self.engine.remove_query(name)
        if group not in self.engine.evaluators:
            self.policies.pop(group, None)
            self._selectivity.pop(group, None)

    def process(self, event, source: str = DEFAULT_SOURCE) -> list:
        self.rates.observe(event.type, event.ts)
        out = self.engine.process(event, source)
        self._seen += 1
        if self._seen >= self._next:
            self._checked()
        return out

    def process_many(self, events: list, source: str = DEFAULT_SOURCE) -> list:
        """``process`` of each event in turn (the same outputs and plans), in runs
        (``Engine.process_many``) cut where the planner looks at the statistics."""
        def run(i, j):
            part = events[i:j] if j - i < len(events) else events
            self.rates.observe_many(part)
            return self.engine.process_many(part, source)
        return self._in_steps(0, len(events), run)

    def process_columns(self, batch, lo: int = 0, hi: int | None = None,
                        blocks: bool = False, source: str = DEFAULT_SOURCE) -> list:
        """``process_many`` of rows ``lo`` to ``hi - 1`` of a column batch
        (``Engine.process_columns``, ``blocks`` as there), cut where the planner looks at the
        statistics."""
        def run(i, j):
            self.rates.observe_runs(batch.types[i:j], batch.times[i:j])
            return self.engine.process_columns(batch, i, j, source=source, blocks=blocks)
        return self._in_steps(lo, len(batch) if hi is None else hi, run)

    def _provisional(self, name: str):
        """A query (or group) that has no plan yet gets one from the default statistics
        (equal rates, no selectivity measured), so that it is evaluated in bulk from its
        first events rather than one by one in the ad hoc order; the policy's first plan (at
        the next look, from the measured rates and selectivities) replaces it. Not a plan
        of the policy: ``history`` does not list it."""
        policy, manager = self.policies[name], self.engine.evaluators[name]
        if policy.plan is None and manager.order is None and \
                policy.settings.algorithm != TREE_NFA:
            manager.set_order(provisional_plan(manager, policy.settings).order,
                              manager.version)

    def _in_steps(self, i: int, n: int, run) -> list:
        """``run(a, b)`` over rows ``i`` to ``n - 1`` in pieces that end where the planner
        looks at the statistics (every ``check_every`` events), re-planning there."""
        out: list = []
        while i < n:
            take = n - i
            if self.policies:
                take = min(take, self._next - self._seen)
            out.extend(run(i, i + take))
            self._seen += take
            i += take
            if self._seen >= self._next:
                self._checked()
        return out

    def _checked(self):
        """The count of events reached the next look at the statistics."""
        self._next = (self._seen // self.check_every + 1) * self.check_every
        if self.policies:
            self.replan()

    def advance(self, watermark: float) -> list:
        return self.engine.advance(watermark)

    def statistics(self, name: str) -> Statistics:
        """Current statistics for the evaluator ``name`` (a query or group); rates are per
        partition for one that the engine evaluates partition by partition (the cost model
        counts events per window)."""
        rates = self.rates.rates()
        manager = self.engine.evaluators[name]
        if manager.partitioned:
            rates = per_key(rates, self.engine.index.partitions())
        return Statistics(rates, self._selectivity[name].sample())

    def replan(self):
        """Ask every policy; install the plans that changed (between two events)."""
        for name, policy in self.policies.items():
            manager = self.engine.evaluators[name]
            if policy.cq is not manager.cq:     # the group's members changed
                policy.cq = manager.cq
                self._selectivity[name] = SelectivityTracker(manager.cq)
            plan = policy.consider(self.statistics(name))
            if plan is None:
                continue
            manager.set_order(plan.order, plan.version)
            self.history.append(PlanChange(self._seen, self.engine.clock, name, plan.order,
                                           plan.version, plan.algorithm, plan.cost))
