"""PatternManager: one query's lazy evaluator over the shared index.

It keeps no partial matches. For an event that can be a match's last event it evaluates every
DNF branch in the current plan order, or, without a plan, in the Tree-NFA ad hoc order
(ascending number of buffered events of each variable's type in the window; seed 003 section 7).
Matches that need the window to close (trailing negation, AND with negation) wait in a heap
until the event-time clock passes ``min(ts) + window``. With ``SLIDE s`` triggers are collected
and evaluated at slide boundaries (RCEP section 2).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import math
from dataclasses import dataclass

from cep.compiler import CompiledQuery
from cep.errors import PlanningError
from cep.evaluator import Evaluation, TooManyMatches
from cep.steps import build_steps
from cep.event import Event
from cep.index import ALL, SharedEventIndex
from cep.match import Match

log = logging.getLogger("raycep")


@dataclass(frozen=True)
class ManagerSettings:
    #: stop enumerating a trigger's matches after this many (None: no cap); reported, not silent
    max_matches_per_trigger: int | None = 100_000


class PatternManager:
    def __init__(self, name: str, cq: CompiledQuery, index: SharedEventIndex,
                 order: tuple | None = None, settings: ManagerSettings = ManagerSettings()):
        self.name = name
        self.cq = cq
        self.index = index
        self.settings = settings
        self._steps: dict = {}           # (branch, trigger var, order) -> join steps
        self.order = None
        self.version = 0
        self.set_order(order)
        self.partitioned = index.key_attr is not None and index.key_attr in cq.equivalence
        self._triggers: dict = {}        # type -> [(branch_no, var_name)]
        for b, branch in enumerate(cq.branches):
            for name in branch.triggers:
                var = cq.variables[name]
                self._triggers.setdefault(var.type, []).append((b, name))
        self._any_triggers = self._triggers.pop(None, [])
        #: event types that can complete a match (None in the set: every type)
        self.trigger_types = frozenset(self._triggers) | ({None} if self._any_triggers else set())
        self._var_order = tuple(cq.variables)
        self._deferred: list = []        # heap of (deadline, seq, branch_no, env, trigger)
        self._slide: list = []           # triggers waiting for their slide boundary
        self._seq = itertools.count()
        self.clock = -math.inf
        self.triggers_evaluated = 0
        self.matches = 0
        self.truncated = 0               # triggers whose enumeration hit the cap
        self.late_events = 0             # events older than the clock (out of order)

    # ---------------------------------------------------------------- plan
    def set_order(self, order: tuple | None, version: int | None = None):
        """Use a static order of the positive variables (None: Tree-NFA ad hoc order)."""
        if order is not None:
            order = tuple(order)
            names = set(self.cq.positive_names)
            if set(order) != names or len(order) != len(names):
                raise PlanningError(
                    f"plan order {list(order)} of query {self.name!r} must list each positive "
                    f"variable exactly once: {sorted(names)}")
        self.order = order
        self.version = self.version + 1 if version is None else version
        self._steps.clear()

    # ---------------------------------------------------------------- input
    def process(self, event: Event) -> list:
        """Matches completed by ``event`` (already inserted in the shared index)."""
        if event.ts > self.clock:
            out = self.tick(event.ts)
        else:
            out = []
            if event.ts < self.clock:
                self.late_events += 1
        targets = self._triggers.get(event.type)
        if self._any_triggers:
            targets = (targets or []) + self._any_triggers
        if not targets:
            return out
        if self.cq.slide:
            self._slide.append(event)
            return out
        out.extend(self._evaluate(event, targets))
        return out

    def tick(self, now: float) -> list:
        """The event-time clock reached ``now`` (an event with that ts arrived)."""
        if now <= self.clock:
            return []
        self.clock = now
        return self._release(now, inclusive=False) if self.busy else []

    @property
    def busy(self) -> bool:
        """Whether matches or triggers are waiting for the clock."""
        return bool(self._deferred or self._slide)

    def advance(self, watermark: float) -> list:
        """No event with ``ts <= watermark`` will come any more: release what waited for it."""
        if watermark > self.clock:
            self.clock = watermark
        return self._release(watermark, inclusive=True)

    def retention_floor(self) -> float | None:
        """The oldest event time that pending work may still read."""
        times = [t.ts for t in self._slide] + [item[4].ts for item in self._deferred]
        return min(times) - self.cq.window if times else None

    # ---------------------------------------------------------------- evaluation
    def _release(self, now: float, inclusive: bool) -> list:
        out: list = []
        if self._slide:
            size = self.cq.slide
            due = [t for t in self._slide
                   if (math.floor(t.ts / size) + 1) * size <= now or (inclusive and now >= t.ts)]
            if due:
                ids = {id(t) for t in due}
                self._slide = [t for t in self._slide if id(t) not in ids]
                for t in due:
                    targets = self._triggers.get(t.type, []) + self._any_triggers
                    out.extend(self._evaluate(t, targets))
        heap = self._deferred
        while heap and (heap[0][0] < now or (inclusive and heap[0][0] <= now)):
            _, _, b, env, trigger = heapq.heappop(heap)
            ev = self._evaluation(b, trigger)
            ev.env = dict(env)
            tmin = min(v.ts if v.__class__ is Event else v[0].ts for v in env.values())
            if all(ev.witness(n, tmin) is None for n in ev.branch.negations if n.deferred):
                out.append(self._match(env))
        return out

    def _evaluation(self, b: int, trigger: Event) -> Evaluation:
        part = trigger.key if self.partitioned and trigger.key is not None else ALL
        return Evaluation(self.cq, self.cq.branches[b], self.index, trigger, part,
                          self.settings.max_matches_per_trigger, self.name, self._var_order)

    def _evaluate(self, trigger: Event, targets) -> list:
        self.triggers_evaluated += 1
        out = []
        for b, name in targets:
            ev = self._evaluation(b, trigger)
            steps = self._steps_for(b, name, ev)
            try:
                ev.run(steps)
            except TooManyMatches:
                self.truncated += 1
                log.warning("query %s: trigger %s hit the cap of %d matches; the rest of its "
                            "matches were not enumerated (%d truncated triggers so far)",
                            self.name, trigger.id, self.settings.max_matches_per_trigger,
                            self.truncated)
            if ev.deferred:
                for env in ev.results:
                    tmin = min(v.ts if v.__class__ is Event else v[0].ts for v in env.values())
                    heapq.heappush(self._deferred, (tmin + self.cq.window, next(self._seq), b,
                                                    env, trigger))
            elif ev.results:
                out.extend(ev.results)
                self.matches += len(ev.results)
        return out

    def _steps_for(self, b: int, trigger_var: str, ev: Evaluation) -> tuple:
        branch = self.cq.branches[b]
        if self.order is not None:
            rest = tuple(n for n in self.order if n != trigger_var and n in branch.before)
        else:
            rest = self._adhoc_order(branch, trigger_var, ev)
        key = (b, trigger_var, rest)
        steps = self._steps.get(key)
        if steps is None:
            steps = self._steps[key] = build_steps(branch, (trigger_var,) + rest)
        return steps

    def _adhoc_order(self, branch, trigger_var: str, ev: Evaluation) -> tuple:
        """Tree NFA: ascending count of buffered candidates in the window (ties: text order)."""
        lo, hi = ev.tlow, ev.trigger.ts
        counts = []
        for k, var in enumerate(branch.positives):
            if var.name == trigger_var:
                continue
            buf = self.index.buffer(ev.partition, var.type)
            counts.append((buf.count(lo, hi) if buf is not None else 0, k, var.name))
        counts.sort()
        return tuple(name for _, _, name in counts)

    def _match(self, env: dict) -> Match:
        self.matches += 1
        return Match(self.name, env, self._var_order)

    # ---------------------------------------------------------------- state
    def stats(self) -> dict:
        return {
            "triggers": self.triggers_evaluated, "matches": self.matches,
            "truncated_triggers": self.truncated, "late_events": self.late_events,
            "pending": len(self._deferred) + len(self._slide),
            "plan": list(self.order) if self.order else None, "plan_version": self.version,
            "conjuncts": [{"text": c.text, "tested": c.tested, "passed": c.passed,
                           "failed": c.failed, "last_error": c.last_error}
                          for c in self.cq.conjuncts],
        }

    def snapshot(self) -> dict:
        """Pending work and counters; events are referenced by object (the engine saves them)."""
        return {
            "clock": self.clock, "order": self.order, "version": self.version,
            "deferred": [(d, b, env, trig) for d, _, b, env, trig in self._deferred],
            "slide": list(self._slide),
            "counters": (self.triggers_evaluated, self.matches, self.truncated, self.late_events),
        }

    def restore(self, state: dict):
        self.clock = state["clock"]
        self.set_order(state["order"], state["version"])
        self._deferred = [(d, next(self._seq), b, env, trig)
                          for d, b, env, trig in state["deferred"]]
        heapq.heapify(self._deferred)
        self._slide = list(state["slide"])
        (self.triggers_evaluated, self.matches, self.truncated,
         self.late_events) = state["counters"]
