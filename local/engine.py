"""``raycep.Engine``: the engine of ``raycep local`` for use in Python, event by event or
table by table: the queries are planned as the command plans them (a provisional plan from
the default statistics at once, so that they are evaluated in bulk; then plans from the
measured rates and selectivities, re-planned as they drift: "Join Query Optimization
Techniques for Complex Event Processing Applications", Kolchinsky & Schuster, VLDB 2018,
sections 3-5), and it can say how (``explain``).

The engine without a planner is ``raycep.cep.Engine`` (every query in the Tree-NFA ad hoc
order unless given one; ``snapshot`` / ``restore``); this one holds it as ``engine`` and
answers for it what it does not override (``warnings``, ``take_late``, ``paths``, ``clock``,
...).
"""
from __future__ import annotations

from raycep.cep.errors import CepError
from raycep.cep.runtime.engine import Engine as CoreEngine
from raycep.cep.store.disorder import DEFAULT_SOURCE
from raycep.local.run import CHECK_EVERY, FIRST_PLAN_EVENTS
from raycep.planner.explain import explain
from raycep.planner.local import ADAPTIVE, PlannedEngine, settings_for
from raycep.planner.stats import per_key


class Engine(PlannedEngine):
    """A complex event processing engine in this process, planned as ``raycep local`` plans:
    queries (text, a builder ``Query``) registered and removed at any time, events in,
    matches out.

        engine = Engine(key_attr="symbol")           # events keyed by their symbol attribute
        engine.add_query("PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND "
                         "b.price > a.price * 1.01 WITHIN 30 seconds", name="jump")
        matches = engine.process_many(events)       # Event objects, in arrival order
        matches += engine.process_table(df)         # a DataFrame / Arrow table
        matches += engine.advance(math.inf)         # the end: windows close, pending released
        engine.explain("jump")                      # its plan and what it came from

    ``key_attr``: the attribute that partitions the stream (queries with ``[key_attr]``
    evaluate per key); ``disorder``: out-of-order handling (``DisorderSettings``: slack,
    lateness); ``mode``: ``optimistic`` (report at once, retract when a late event changes a
    result) or ``pessimistic`` (wait for the watermark); ``sharing``: evaluate queries that
    differ only in constants as one group; ``retain``: seconds of events kept for queries
    registered later; ``planner``: how queries are planned (``raycep local --planner``:
    ``adaptive``, ``adaptive:NAME``, a static ``NAME``, or ``tree-nfa`` for no plan);
    the planner looks at the statistics first after ``first_check`` events, then every
    ``check_every``. ``stats()``, ``warnings()`` and ``take_late()`` tell what happened.
    """

    def __init__(self, key_attr: str | None = None, settings=None, *, disorder=None,
                 mode: str | None = None, sharing: bool = True, retain: float = 0.0,
                 planner: str = ADAPTIVE, check_every: int = CHECK_EVERY,
                 first_check: int = FIRST_PLAN_EVENTS):
        settings_for(planner)                       # an unknown planner: PlanningError now
        super().__init__(CoreEngine(key_attr, settings, disorder=disorder, mode=mode,
                                    sharing=sharing, retain=retain),
                         check_every=check_every, first_check=min(check_every, first_check))
        self.planner = planner

    def __getattr__(self, name: str):
        if name == "engine":                        # (not set yet: no recursion)
            raise AttributeError(name)
        return getattr(self.engine, name)

    def add_query(self, query, name: str | None = None, params: dict | None = None,
                  order: tuple | None = None, mode: str | None = None,
                  since: float | None = None, planner: str | None = None) -> str:
        """Register a query (text or ``Query``); returns its name. ``params`` binds its named
        parameters; ``order`` forces a static evaluation order of its positive variables,
        else ``planner`` (default: the engine's) plans it; ``mode`` and ``since`` as
        ``raycep.cep.Engine.add_query``'s (out-of-order mode; registered mid-stream: the
        matches completed by events after ``since``)."""
        return super().add_query(query, name=name, params=params, order=order,
                                 planner=planner or self.planner, mode=mode, since=since)

    def process_table(self, table, *, ts: str = "ts", type: str | None = None,
                      ts_format: str = "s", source: str = DEFAULT_SOURCE) -> list:
        """``process_many`` of the rows of a table: a pandas or polars DataFrame, a pyarrow
        Table, RecordBatch or RecordBatchReader, or anything with ``__arrow_c_stream__``.
        ``ts``: the event-time column; ``type``: the event-type column, or (naming no
        column) every row's type; ``ts_format``: how numbers and text in the event-time
        column are written (s, ms, us, ns, iso or a strftime pattern)."""
        from raycep.cep.io.tables import TableReader
        out: list = []
        for batch in TableReader(table, key_attr=self.engine.index.key_attr, ts=ts, type=type,
                                 ts_format=ts_format):
            out += self.process_columns(batch, source=source)
        return out

    def stats(self) -> dict:
        """The engine's stats (``raycep.cep.Engine.stats``: per query its counts, plan in
        use and evaluation path) and ``plan_changes``: the plans the planner installed, in
        order."""
        out = self.engine.stats()
        out["plan_changes"] = [
            {"events": c.events, "clock": c.clock, "query": c.query,
             "order": list(c.order) if c.order else None, "version": c.version,
             "algorithm": c.algorithm, "cost": c.cost} for c in self.history]
        return out

    def explain(self, name: str) -> dict:
        """What query ``name`` is and how it is planned (``raycep explain``'s answer):
        its DNF branches, the plan in use with its estimated cost, the plan the planning
        algorithm would choose under the statistics measured so far, each condition's
        selectivity (measured or the default guess) and counts, its sharing group and its
        evaluation path. Text for a person: ``raycep.planner.explain.render(info)``."""
        manager = self.engine.managers.get(name)
        if manager is None:
            raise CepError(f"no query named {name!r} is registered")
        evaluator = manager.name
        policy = self.policies.get(evaluator)
        settings = policy.settings if policy is not None else settings_for(ADAPTIVE)
        rates = self.rates.rates()
        if manager.partitioned:
            rates = per_key(rates, self.engine.index.partitions())
        tracker = self._selectivity.get(evaluator)
        info = explain(manager.cq, name, rates, dict(tracker.estimates) if tracker else {},
                       manager.order, manager.version, settings.algorithm, settings.alpha)
        info["counters"] = {c.text: {"tested": c.tested, "passed": c.passed,
                                     "failed": c.failed} for c in manager.cq.conjuncts}
        info["path"] = self.engine.paths()[name]
        group = next((g for g in self.engine.groups() if g["name"] == evaluator), None)
        if group is not None and len(group["queries"]) > 1:
            info["group"] = group
        return info
