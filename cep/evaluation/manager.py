"""PatternManager: one query's lazy evaluator over the shared index.

It keeps no partial matches. For an event that can be a match's last event it evaluates every
DNF branch in the current plan order, or, without a plan, in the Tree-NFA ad hoc order
(ascending number of buffered events of each variable's type in the window; "Efficient Detection of Complex Event Patterns Using Lazy Chain Automata", section 7).
Matches that need the window to close (trailing negation, AND with negation) wait in a heap
until the event-time clock passes ``min(ts) + window``. With ``SLIDE s`` triggers are collected
and evaluated at slide boundaries (RCEP section 2).

Out-of-order input (cep.store.disorder; LimeCEP section 4.4). A *pessimistic* manager holds every
trigger until the engine's watermark passes it, and deferred matches until the watermark passes
their window: the events it reads are then complete, it never corrects itself. An *optimistic*
manager evaluates at the trigger and the clock; when an accepted out-of-order event ``e``
arrives it re-evaluates the triggers whose result can depend on ``e`` (those within one window
after ``e``, or on either side of it for deferred negation) before and after ``e`` is indexed,
and reports the difference: a Retraction for each match that no longer holds, a Match for each
new one. Where ``e`` can only add matches (skip-till-any-match, ``e`` not of a negated type) the
"before" pass is skipped: the new matches are those that bind ``e``.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import sys
from bisect import bisect_right
from dataclasses import dataclass
from itertools import compress
from operator import and_, attrgetter
from time import perf_counter

from raycep.cep.errors import PlanningError
from raycep.cep.evaluation.evaluator import Evaluation, TooManyMatches
from raycep.cep.evaluation.prefixes import prefix_keys
from raycep.cep.evaluation.steps import build_steps
from raycep.cep.evaluation.timing import EvalTimes
from raycep.cep.event import Event
from raycep.cep.lang.compiler import CompiledQuery
from raycep.cep.match import Match, MatchBlock, Retraction
from raycep.cep.store.disorder import check_mode
from raycep.cep.store.index import ALL, ANY_TYPE, SharedEventIndex

log = logging.getLogger("raycep")
_TS = attrgetter("ts")


@dataclass(frozen=True)
class ManagerSettings:
    #: stop enumerating a trigger's matches after this many (None: no cap); reported, not silent
    max_matches_per_trigger: int | None = 100_000


def _timed(method):
    """``method`` with its seconds added to the manager's ``seconds`` (once: a timed method
    another one calls is inside that one's time)."""
    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        if self._timing:
            return method(self, *args, **kwargs)
        self._timing = True
        began = perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.times.add(perf_counter() - began)
            self._timing = False
    return timed


class PatternManager:
    def __init__(self, name: str, cq: CompiledQuery, index: SharedEventIndex,
                 order: tuple | None = None, settings: ManagerSettings = ManagerSettings(),
                 mode: str | None = None):
        self.name = name
        #: the seconds of its evaluations (its public methods: _timed; process: timed by the
        #: engine, its one caller)
        self.times = EvalTimes()
        self.switches = 0                # plan changes (set_order with another order)
        self._timing = False
        self._label = name               # the query name its Match objects carry
        self.cq = cq
        self.mode = check_mode(mode)
        self.pessimistic = self.mode == "pessimistic"
        self.index = index
        self.settings = settings
        self._steps: dict = {}           # (branch, trigger var, order) -> join steps
        self._shared: dict = {}          # id(steps) -> (steps, interned prefix keys)
        self._bulk: dict = {}            # id(steps) -> (steps, cep.evaluation.bulk plan or None)
        self._screens: dict = {}         # id(steps) -> (steps, the trigger's bulk filters or None)
        self._ready: dict = {}           # id(trigger) -> (trigger, {(branch, var): result})
        #: prepare's one result for all the triggers it was given (a _Chunk), kept whole
        #: rather than in _ready (_ready_map)
        self._chunk = None
        #: the engine's cep.evaluation.prefixes.SharedPrefixes while it has other evaluators
        #: (else None)
        self.prefixes = None
        #: id(condition) -> token (see cep.evaluation.prefixes.prefix_keys)
        self._opaque: dict = {}
        #: id(condition) -> the conditions it holds with one of (cep.evaluation.bulk.plan_for)
        self._loose: dict = {}
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
        self._held: list = []            # pessimistic: heap of (ts, seq, trigger)
        self._seq = itertools.count()
        self.has_deferred = any(n.deferred for b in cq.branches for n in b.negations)
        #: types whose late events can only add matches (no "before" pass needed)
        self._monotone = frozenset() if cq.strategy != "skip_till_any_match" or \
            None in cq.negated_types else cq.positive_types - cq.negated_types
        self.clock = -math.inf
        #: registered mid-stream (Engine.add_query): the query reads no event at or before
        #: ``floor`` and evaluates no trigger at or before ``since`` (>= floor)
        self.floor = self.since = -math.inf
        self._closed = -math.inf         # advance(): deferred matches up to here were released
        self.triggers_evaluated = 0
        self.bulk_triggers = 0           # of them, evaluated in bulk (cep.evaluation.bulk)
        self.matches = 0
        self.truncated = 0               # triggers whose enumeration hit the cap
        self.late_events = 0             # events older than the clock (out of order)
        self.retractions = 0
        self.revisions = 0               # out-of-order events that made it re-evaluate

    @property
    def seconds(self) -> float:
        """Seconds spent evaluating."""
        return self.times.seconds

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
        if order != self.order:
            self.switches += 1
        self.order = order
        self.version = self.version + 1 if version is None else version
        self._forget_steps()

    def _forget_steps(self):
        """Drop the join steps built for the old order or compiled query (and their shared
        prefix keys)."""
        self._steps.clear()
        self._shared.clear()
        self._bulk.clear()
        self._screens.clear()

    # ---------------------------------------------------------------- input
    def process(self, event: Event) -> list:
        """Matches completed by ``event`` (already inserted in the shared index)."""
        if self.pessimistic:
            if (event.type in self._triggers or self._any_triggers) and event.ts > self.since:
                heapq.heappush(self._held, (event.ts, next(self._seq), event))
            return []
        if event.ts > self.clock:
            out = self._tick(event.ts)
        else:
            out = []
            if event.ts < self.clock:
                self.late_events += 1
        targets = self._triggers.get(event.type)
        if self._any_triggers:
            targets = (targets or []) + self._any_triggers
        if not targets or event.ts <= self.since:
            return out
        if self.cq.slide and not self._slide_over(event.ts, self.clock):
            self._slide.append(event)
            return out
        out.extend(self._evaluate(event, targets))
        return out

    @_timed
    def tick(self, now: float) -> list:
        """The event-time clock reached ``now`` (an event with that ts arrived)."""
        return self._tick(now)

    def _tick(self, now: float) -> list:
        if now <= self.clock:
            return []
        self.clock = now
        return self._release(now, inclusive=False) if self.busy else []

    @property
    def due_at(self) -> float:
        """The earliest deadline of a deferred match (released at the first event after
        it); inf when none waits."""
        return self._deferred[0][0] if self._deferred else math.inf

    @property
    def busy(self) -> bool:
        """Whether matches or triggers are waiting for the clock."""
        return bool(self._deferred or self._slide)

    @_timed
    def advance(self, watermark: float) -> list:
        """No event with ``ts <= watermark`` will come any more: release what waited for it."""
        if self.pessimistic:
            return self.release(math.nextafter(watermark, math.inf)
                                if math.isfinite(watermark) else watermark)
        if watermark > self.clock:
            self.clock = watermark
        if watermark > self._closed:
            self._closed = watermark
        return self._release(watermark, inclusive=True)

    @_timed
    def release(self, watermark: float) -> list:
        """Pessimistic: every event before ``watermark`` has arrived; evaluate the held triggers
        before it (in (ts, id) order) and release the deferred matches whose window closed."""
        out: list = []
        held = self._held
        if held and held[0][0] < watermark:
            due = []
            while held and held[0][0] < watermark:
                _, seq, t = heapq.heappop(held)
                due.append((t, seq))
            due.sort(key=lambda item: item[0].order)
            for t, seq in due:
                if t.ts > self.clock:
                    self.clock = t.ts
                out.extend(self._evaluate(t, self._targets(t), seq))
                self._done(seq)
        if self._deferred and self._deferred[0][0] < watermark:
            out.extend(self._release(watermark, inclusive=False))
        return out

    def expire_floor(self, kept_from: float) -> bool:
        """No event before ``kept_from`` is processed any more: drop the floors once no
        evaluation can reach back to them (a correction re-reads a window on either side of
        a late event); whether one is left."""
        if kept_from - 2 * (self.cq.window + (self.cq.slide or 0.0)) > self.since:
            self.floor = self.since = -math.inf
        return self.since > -math.inf

    def retention_floor(self) -> float | None:
        """The oldest event time that pending work may still read."""
        times = [t.ts for t in self._slide] + [item[4].ts for item in self._deferred]
        if self._held:
            times.append(self._held[0][0])
        return min(times) - self.cq.window if times else None

    # ---------------------------------------------------------------- corrections
    def relevant(self, event: Event) -> bool:
        """Whether an out-of-order ``event`` can change this (optimistic) query's results."""
        types = self.cq.types
        return event.type in types or None in types

    def monotone(self, event: Event) -> bool:
        """Whether ``event`` can only add matches (no retraction possible)."""
        return event.type in self._monotone

    def emitted_around(self, event: Event) -> dict:
        """The reported matches of the triggers ``event`` can affect (before it is indexed),
        as the keys of a dict, in the order they are found."""
        return self._results(self._affected(event), update=False)

    @_timed
    def revise(self, event: Event, before: dict | None) -> list:
        """``event`` (out of order, now indexed) was accepted: re-evaluate the triggers it can
        affect; Retractions for matches in ``before`` that no longer hold, the new Matches
        (``before`` None: ``event`` is monotone, the new matches are those that bind it)."""
        self.revisions += 1
        after = self._results(self._affected(event), update=True)
        if before is None:
            added = [m for m in after if any(e is event for e in m.events())]
            removed = []
        else:
            added = [m for m in after if m not in before]
            removed = [Retraction.of(m) for m in before if m not in after]
        self.matches += len(added)
        self.retractions += len(removed)
        return removed + added

    def _affected(self, event: Event) -> list:
        """Evaluated triggers whose result may depend on ``event``, in (ts, id) order."""
        w = self.cq.window
        lo, hi = event.ts - (w if self.has_deferred else 0.0), event.ts + w
        part = ALL
        if self.partitioned and event.key is not None and self.cq.strategy in (
                "skip_till_any_match", "skip_till_next_match"):
            part = event.key
        types = [ANY_TYPE] if self._any_triggers else list(self._triggers)
        pending = {id(t) for t in self._slide}
        out = []
        for t in types:
            buf = self.index.buffer(part, t)
            if buf is not None:
                out.extend(e for e in buf.range(lo, hi)
                           if e is not event and id(e) not in pending and e.ts > self.since)
        out.sort(key=lambda e: e.order)
        return out

    def _results(self, triggers: list, update: bool) -> dict:
        """The matches reported for ``triggers`` given the index now: immediate ones and
        deferred ones whose window closed before the clock, as the keys of a dict in the
        order they are found (a set's order would change from run to run with the string
        hashes). With ``update`` the deferred matches still waiting replace those triggers'
        entries in the heap."""
        out: dict = {}
        waiting = []
        for t in triggers:
            for b, name in self._targets(t):
                ev = self._run(b, name, t, count=update)
                if not ev.deferred:
                    out.update(dict.fromkeys(self._fan(ev.results, count=False)))
                    continue
                for env in ev.results:
                    deadline = _first_ts(env) + self.cq.window
                    if self._due(deadline):
                        if _confirmed(ev, env):
                            out.update(dict.fromkeys(self._matches(env, count=False)))
                    else:
                        waiting.append((deadline, next(self._seq), b, env, t))
        if update:
            ids = {id(t) for t in triggers}
            self._dropped([item[1] for item in self._deferred if id(item[4]) in ids])
            self._deferred = [item for item in self._deferred if id(item[4]) not in ids]
            self._deferred.extend(waiting)
            heapq.heapify(self._deferred)
        return out

    def _due(self, deadline: float) -> bool:
        """Whether a deferred binding with this deadline is released already. Invariant the
        corrections rely on: every binding that is due has been confirmed and reported (an
        out-of-order trigger's binding may be due at once: it is confirmed at once, never
        left in the heap for the next clock tick)."""
        return deadline < self.clock or deadline <= self._closed

    def _slide_over(self, ts: float, now: float) -> bool:
        """Whether the slide interval of a trigger at ``ts`` ended by ``now``: its triggers
        are evaluated then, and one that arrives later (out of order) at once, so what waits
        for a slide never depends on the arrival order (RCEP, section 2)."""
        size = self.cq.slide
        return (math.floor(ts / size) + 1) * size <= now

    def _targets(self, trigger: Event) -> list:
        if trigger.ts <= self.since:
            return []
        return self._triggers.get(trigger.type, []) + self._any_triggers

    # ---------------------------------------------------------------- evaluation
    def _release(self, now: float, inclusive: bool) -> list:
        out: list = []
        if self._slide:
            due = [t for t in self._slide
                   if self._slide_over(t.ts, now) or (inclusive and now >= t.ts)]
            if due:
                ids = {id(t) for t in due}
                self._slide = [t for t in self._slide if id(t) not in ids]
                for t in due:
                    out.extend(self._evaluate(t, self._targets(t)))
        heap = self._deferred
        while heap and (heap[0][0] < now or (inclusive and heap[0][0] <= now)):
            _, seq, b, env, trigger = heapq.heappop(heap)
            if _confirmed(self._evaluation(b, trigger), env):
                out.extend(self._matches(env, seq))
            else:
                self._dropped((seq,))
        return out

    def _evaluation(self, b: int, trigger: Event) -> Evaluation:
        part = trigger.key if self.partitioned and trigger.key is not None else ALL
        return Evaluation(self.cq, self.cq.branches[b], self.index, trigger, part,
                          self.settings.max_matches_per_trigger, self._label, self._var_order,
                          self.floor)

    def _run(self, b: int, name: str, trigger: Event, count: bool = True) -> Evaluation:
        """Evaluate branch ``b`` with ``trigger`` bound to ``name``; a trigger that hits the
        match cap is counted and logged (``count``), its matches so far kept."""
        ev = self._evaluation(b, trigger)
        if not self.pessimistic:        # a negation at the end reads no further than now
            ev.until = self.clock       # (the engine may have indexed rows ahead of it)
        try:
            steps = self._steps_for(b, name, ev)
            # a floor cuts the events a prefix holds: neither read nor store shared ones
            prefixes = self.prefixes if self.floor == -math.inf else None
            if prefixes is None:
                ev.run(steps)
            else:
                keys = self._shared.get(id(steps))
                if keys is None:
                    keys = self._shared[id(steps)] = (steps, prefixes.intern(
                        prefix_keys(self.cq, steps, self._opaque)))
                ev.run(steps, (prefixes, keys[1]) if keys[1] else None)
        except TooManyMatches:
            if count:
                self.truncated += 1
                log.warning("query %s: trigger %s hit the cap of %d matches; the rest of its "
                            "matches were not enumerated (%d truncated triggers so far)",
                            self.name, trigger.id, self.settings.max_matches_per_trigger,
                            self.truncated)
        return ev

    def can_prepare(self, types) -> bool:
        """Whether some trigger of these types would be evaluated in bulk (``prepare``)."""
        if self.order is None or self.pessimistic or self._any_triggers or self.cq.slide:
            return False
        return any(self._bulk_plan(b, name) is not None or self._screen(b, name) is not None
                   or self._kleene_screen(b, name) is not None
                   for t in types for b, name in self._triggers.get(t, ()))

    @_timed
    def prepare(self, triggers: list, by_type: dict) -> None:
        """Evaluate in bulk (cep.evaluation.bulk) the triggers among ``triggers`` that this manager
        can (``can_prepare``): in-order events the engine processes next, in time order, every
        row up to the last of them indexed already (the triggers too); ``by_type``: they per
        type, in order (``triggers`` itself where they are all of one type). ``_evaluate``
        takes each result when the engine processes its trigger (or ``take_prepared`` all at
        once); ``unprepare`` drops the rest."""
        by_target: dict = {}
        floor = max(self.floor + self.cq.window, self.since)
        for typ, mine in self._triggers.items():
            ts = by_type.get(typ)
            if not ts:
                continue
            if ts[0].ts <= floor:                   # evaluated on its own (or not at all)
                ts = ts[bisect_right(list(map(_TS, ts)), floor):]
                if not ts:
                    continue
            for target in mine:
                by_target[target] = ts
        from raycep.cep.evaluation import bulk                    # numpy: only for column batches
        from raycep.cep.evaluation import kleene_screen as kleene
        ready = self._ready_map()
        cap = self.settings.max_matches_per_trigger
        for (b, name), group in by_target.items():
            plan = self._bulk_plan(b, name)
            screen = self._screen(b, name) if plan is None else None
            runs = self._kleene_screen(b, name) if plan is None and screen is None else None
            if plan is None and screen is None and runs is None:
                continue
            parts = self._partitions(group)
            if not parts:
                continue
            # every partition in one evaluation (their rows one after the other)
            number = {p: k for k, (p, _) in enumerate(parts)}
            ts = group if sum(len(p[1]) for p in parts) == len(group) else \
                [t for t in group if t.key is not None]
            if runs is not None:        # only the triggers no Kleene run can reach
                got = kleene.result(kleene.screen_triggers(runs, self.index, parts, ts))
            elif plan is None:          # only the triggers no condition of theirs passes
                got = bulk.screen(screen, ts)
            else:                       # (deferred bindings: their members when released)
                got = bulk.evaluate(plan, self.index, list(number), ts, self.cq.window,
                                    self._label, self._var_order, cap,
                                    None if plan.deferred else self._member_columns(),
                                    [number[t.key] for t in ts] if len(parts) > 1 else None,
                                    None if plan.deferred else self._member_runs())
            if ts is triggers and len(by_target) == 1 and not ready:
                self._chunk = _Chunk((b, name), ts)       # kept whole (_ready_map when needed)
                self._chunk.add(got, None)
                continue
            for i, (t, ok) in enumerate(zip(ts, got[2])):
                if ok:
                    ready.setdefault(id(t), (t, {}))[1][(b, name)] = (got, i)

    def _ready_map(self) -> dict:
        """``_ready``, with ``_chunk`` put in it."""
        chunk = self._chunk
        if chunk is not None:
            self._chunk = None
            ready, key = self._ready, chunk.key
            for g in compress(range(len(chunk.left)), chunk.left):
                t = chunk.triggers[g]
                ready.setdefault(id(t), (t, {}))[1][key] = chunk.result(g)
        return self._ready

    @_timed
    def quiet_mask(self, triggers: list) -> list:
        """``quiet`` of each of ``triggers`` (those given to ``prepare``)."""
        chunk = self._chunk
        if chunk is not None and chunk.triggers is triggers:
            return list(map(and_, chunk.left, (chunk.counts() == 0).tolist()))
        return list(map(self.quiet, triggers))

    def quiet(self, trigger: Event) -> bool:
        """Whether ``prepare`` evaluated ``trigger`` for each of its targets, without a
        match (``take_quiet`` takes it; the engine need not process it on its own)."""
        got = self._ready_map().get(id(trigger))
        if got is None or got[0] is not trigger or \
                len(got[1]) != len(self._triggers[trigger.type]):
            return False
        for (_, bounds, _, _), i in got[1].values():
            if bounds[i + 1] > bounds[i]:
                return False
        return True

    @_timed
    def take_quiet(self, triggers: list) -> None:
        """Take the results of ``quiet`` triggers (in time order, the next this manager
        processes): counted as ``process`` of each counts them."""
        chunk = self._chunk
        if chunk is not None:
            left = chunk.left
            for i in chunk.positions(triggers):
                left[i] = False
        else:
            ready = self._ready
            for t in triggers:
                del ready[id(t)]
        self.triggers_evaluated += len(triggers)
        self.bulk_triggers += len(triggers)
        if triggers and triggers[-1].ts > self.clock:
            self.clock = triggers[-1].ts

    @_timed
    def ready_for(self, triggers: list) -> bool:
        """Whether ``take_prepared(triggers)`` can take them: each was evaluated in bulk for
        each of its targets, and this manager's output keeps their order."""
        if self.has_deferred:           # its bindings wait for the clock: trigger by trigger
            return False
        chunk = self._chunk
        if chunk is not None and chunk.triggers is triggers:
            return len(self._triggers[triggers[0].type]) == 1 and all(chunk.left) and \
                self._in_order()
        ready = self._ready_map()
        if len(ready) < len(triggers) or not self._in_order():
            return False
        targets = self._triggers
        get = ready.get
        for t in triggers:                  # each of its targets evaluated (an OR's branches)
            got = get(id(t))
            if got is None or got[0] is not t or len(got[1]) != len(targets[t.type]):
                return False
        return True

    @_timed
    def take_prepared(self, triggers: list, counts: list | None = None) -> list | None:
        """The matches of all ``triggers`` (those given to ``prepare``), in order, when
        ``ready_for`` them (counted as ``_evaluate`` counts them): one MatchBlock where they
        are of one kind, else a list; None, and nothing taken, otherwise. ``counts``: gets
        the number of matches of each trigger."""
        if not self.ready_for(triggers):
            return None
        chunk = self._chunk
        if chunk is not None:                     # its results for them all (ready_for)
            self._chunk = None
            if counts is not None:
                counts.extend(chunk.counts().tolist())
            pieces = chunk.pieces()
            if len(chunk.results) == 1 and chunk.results[0][1] is None:
                return self._took(triggers, pieces[0][0] if pieces else [], pieces)
        else:
            ready, targets = self._ready, self._triggers
            pieces = []
            for t in triggers:
                got = ready[id(t)][1]
                n = 0
                for target in targets[t.type]:      # in _evaluate's order: target by target
                    (matches, bounds, _, _), i = got[target]
                    if bounds[i + 1] > bounds[i]:
                        pieces.append((matches, bounds[i], bounds[i + 1]))
                        n += bounds[i + 1] - bounds[i]
                if counts is not None:
                    counts.append(n)
            if len(ready) == len(triggers):
                ready.clear()
            else:                                   # the first ones (the engine's chunk cut)
                for t in triggers:
                    del ready[id(t)]
        if pieces and all(p[0].same_kind(pieces[0][0]) for p in pieces):
            found = MatchBlock.joined(pieces)
        else:
            found = [m for block, a, b in pieces for m in block[a:b]]
        return self._took(triggers, found, pieces)

    def _took(self, triggers: list, found, pieces: list):
        """``take_prepared`` once the matches are ``found``."""
        self.triggers_evaluated += len(triggers)
        self.bulk_triggers += len(triggers)
        if triggers[-1].ts > self.clock:
            self.clock = triggers[-1].ts
        return self._taken(found, pieces)

    def _taken(self, found, pieces: list):
        """``take_prepared``'s matches, counted (``pieces``: where they come from)."""
        return self._fan(found)

    def _member_columns(self):
        """A query group's members decided in bulk (GroupManager); None."""
        return None

    def _member_runs(self):
        """Per member of a group of skip-till-next-match variants, its ``(cq, branch)``
        (each judges its bindings, GroupManager); None."""
        return None

    def _in_order(self) -> bool:
        """Whether ``_fan`` of the matches of many triggers gives what it gives for each
        trigger's matches in turn."""
        return True

    def unprepare(self) -> None:
        """Drop the bulk results not taken, with their counters (their triggers will be
        evaluated one by one)."""
        chunk = self._chunk
        if chunk is not None:
            from raycep.cep.evaluation.bulk import untally
            for g in compress(range(len(chunk.left)), chunk.left):
                got, i = chunk.result(g)
                untally(got[3], i)
            self._chunk = None
        if self._ready:
            from raycep.cep.evaluation.bulk import untally
            for _, results in self._ready.values():
                for got, i in results.values():
                    untally(got[3], i)
            self._ready.clear()

    def path(self) -> dict:
        """How its triggers were evaluated: ``bulk`` (over columns, a chunk's triggers
        together), ``per_trigger`` (one by one), and ``why`` not in bulk, in words (None:
        nothing in the query stands in the way; triggers still go one by one in a chunk
        with fewer than the engine's BULK_TRIGGERS, with ties or behind the clock, with
        values that are not exact numbers, and while another query of their type cannot)."""
        return {"bulk": self.bulk_triggers,
                "per_trigger": self.triggers_evaluated - self.bulk_triggers,
                "why": self._refusal()}

    def _refusal(self) -> str | None:
        if self.order is None:
            return "no static plan yet (evaluated in the ad hoc Tree-NFA order)"
        if self.pessimistic:
            return "pessimistic disorder mode"
        if self._any_triggers:
            return "a variable of any type"
        if self.cq.slide:
            return "SLIDE"
        if "raycep.cep.evaluation.bulk" not in sys.modules:    # (numpy: column batches only)
            return "the input came event by event, not in column batches"
        from raycep.cep.evaluation.bulk import why_not
        for targets in self._triggers.values():
            for b, name in targets:
                if self._bulk_plan(b, name) is None:
                    return why_not(self.cq, self._steps_for(b, name, None), self._opaque,
                                   self._loose)
        return None

    def _bulk_plan(self, b: int, name: str):
        """The cep.evaluation.bulk plan of branch ``b`` triggered at ``name`` in the static order
        (None when bulk evaluation does not apply). A bulk evaluation neither reads nor stores
        shared prefixes (cep.evaluation.prefixes): another query materialises its own."""
        steps = self._steps_for(b, name, None)
        got = self._bulk.get(id(steps))
        if got is None:
            from raycep.cep.evaluation.bulk import plan_for
            got = self._bulk[id(steps)] = (steps, plan_for(self.cq, steps, self._opaque,
                                                           self._loose, self.cq.branches[b]))
        return got[1]

    def _screen(self, b: int, name: str):
        """The trigger's own conditions as bulk filters (cep.evaluation.bulk.screen) where
        branch ``b`` triggered at ``name`` has no bulk plan; None where they are not all such
        filters."""
        steps = self._steps_for(b, name, None)
        got = self._screens.get(id(steps))
        if got is None:
            from raycep.cep.evaluation.bulk import trigger_filters
            got = self._screens[id(steps)] = (steps, trigger_filters(steps, self._opaque))
        return got[1]

    def _kleene_screen(self, b: int, name: str):
        """The Kleene-run screen (cep.evaluation.kleene_screen) of branch ``b`` triggered at
        ``name`` where it has neither a bulk plan nor trigger filters; None where the shape
        is not one it screens."""
        cqs = self._screen_queries()
        key = ("kleene", b, name, tuple(map(id, cqs)))
        got = self._screens.get(key)
        if got is None:
            from raycep.cep.evaluation.kleene_screen import kleene_screen
            got = self._screens[key] = (cqs, kleene_screen(cqs, b, name))
        return got[1]

    def _screen_queries(self) -> list:
        """The compiled queries whose matches this manager gives (a group: its members')."""
        return [self.cq]

    def _partitions(self, triggers: list) -> list:
        """``[(partition, triggers)]``: the triggers by the partition their evaluation reads,
        those whose evaluation would filter on an equivalence attribute left out."""
        equiv = self.cq.equivalence
        if not self.partitioned:
            return [] if equiv else [(ALL, triggers)]
        key_attr = self.index.key_attr
        if any(a != key_attr for a in equiv):
            return []
        parts: dict = {}
        for t in triggers:
            if t.key is not None:
                parts.setdefault(t.key, []).append(t)
        return list(parts.items())

    def _evaluate(self, trigger: Event, targets, origin: int | None = None) -> list:
        """``origin``: the sequence number of the held trigger (pessimistic)."""
        self.triggers_evaluated += 1
        out = []
        bulk = 0
        ready = self._ready.pop(id(trigger), None) if self._ready else \
            self._chunk.take(trigger) if self._chunk is not None else None
        for b, name in targets:
            got = ready[1].get((b, name)) if ready is not None and ready[0] is trigger \
                else None
            if got is not None:
                bulk += 1
                (matches, bounds, _, _), i = got
                if bounds[i + 1] > bounds[i]:
                    plan = self._bulk_plan(b, name) if self.has_deferred else None
                    if plan is not None and plan.deferred:     # waiting as below
                        self._defer(b, trigger, origin, None, out,
                                    [{n: m.bindings[n] for n in plan.names}
                                     for m in matches[bounds[i]:bounds[i + 1]]])
                    else:
                        out.extend(self._fan_block(matches, bounds[i], bounds[i + 1],
                                                   origin))
                continue
            ev = self._run(b, name, trigger)
            if ev.deferred:
                self._defer(b, trigger, origin, ev, out, ev.results)
            elif ev.results:
                out.extend(self._fan(ev.results, origin))
        if bulk and bulk == len(targets):   # (a branch of an OR may not be)
            self.bulk_triggers += 1
        return out

    def _defer(self, b: int, trigger: Event, origin, ev, out: list, envs: list):
        """The bindings ``envs`` of ``trigger`` (branch ``b``; ``ev`` its Evaluation, None:
        found in bulk) wait for the clock to pass their deadline (a negation at the end),
        or are confirmed now where it has (an out-of-order trigger)."""
        for env in envs:
            deadline = _first_ts(env) + self.cq.window
            if self._due(deadline):        # an out-of-order trigger whose window closed
                if ev is None:
                    ev = self._evaluation(b, trigger)
                if _confirmed(ev, env):
                    out.extend(self._matches(env, origin, keep=True))
            else:
                seq = next(self._seq)
                heapq.heappush(self._deferred, (deadline, seq, b, env, trigger))
                self._inherit(seq, origin)

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

    # ---------------------------------------------------------------- output (GroupManager
    # fans a binding out to the members of a group; ``origin``/``seq``: the pending item it
    # came from, whose members it is for)
    def _fan(self, results: list, origin: int | None = None, count: bool = True) -> list:
        """The matches of a trigger's evaluation (Match objects made by Evaluation)."""
        if count:
            self.matches += len(results)
        return results

    def _fan_block(self, block, a: int, b: int, origin: int | None = None) -> list:
        """``_fan`` of matches ``a`` to ``b - 1`` of a bulk evaluation's ``block``."""
        return self._fan(block[a:b], origin)

    def _matches(self, env: dict, seq: int | None = None, count: bool = True,
                 keep: bool = False) -> list:
        """The matches of one confirmed binding (deferred negation)."""
        if count:
            self.matches += 1
        return [Match(self._label, env, self._var_order)]

    def _inherit(self, seq: int, origin: int | None):
        """A deferred binding ``seq`` came from the held trigger ``origin``."""

    def _done(self, origin: int | None):
        """The held trigger ``origin`` has been evaluated."""

    def _dropped(self, seqs):
        """These deferred bindings are gone without a match."""

    # ---------------------------------------------------------------- state
    def stats(self) -> dict:
        return {
            "triggers": self.triggers_evaluated, "matches": self.matches,
            "truncated_triggers": self.truncated, "late_events": self.late_events,
            "mode": self.mode, "retractions": self.retractions, "revisions": self.revisions,
            "pending": len(self._deferred) + len(self._slide) + len(self._held),
            "plan": list(self.order) if self.order else None, "plan_version": self.version,
            "plan_switches": self.switches,
            "conjuncts": [{"text": c.text, "tested": c.tested, "passed": c.passed,
                           "failed": c.failed, "last_error": c.last_error}
                          for c in self.cq.conjuncts],
        }

    def snapshot(self) -> dict:
        """Pending work and counters; events are referenced by object (the engine saves them)."""
        return {
            "clock": self.clock, "order": self.order, "version": self.version,
            "floor": self.floor, "since": self.since,
            # the heaps with their sequence numbers: equal deadlines keep their order
            "deferred": list(self._deferred), "held": list(self._held),
            "seq": next(self._seq), "slide": list(self._slide),
            "counters": (self.triggers_evaluated, self.matches, self.truncated, self.late_events,
                         self.retractions, self.revisions),
        }

    def restore(self, state: dict):
        self.clock = state["clock"]
        self.floor = state.get("floor", self.floor)
        self.since = state.get("since", self.since)
        self.set_order(state["order"], state["version"])
        self._deferred = list(state["deferred"])
        self._held = list(state["held"])
        self._seq = itertools.count(state["seq"])
        self._slide = list(state["slide"])
        (self.triggers_evaluated, self.matches, self.truncated, self.late_events,
         self.retractions, self.revisions) = state["counters"]


class _Chunk:
    """``prepare``'s results for all the triggers it was given (``key``: their target),
    kept whole: ``results`` ``[(result, positions)]`` (positions in ``triggers``, None for
    all of them; cep.evaluation.bulk.evaluate's result), per trigger ``left``: whether its
    result is there to take."""

    __slots__ = ("key", "triggers", "results", "left", "_which", "_at", "_pos")

    def __init__(self, key: tuple, triggers: list):
        self.key, self.triggers, self.results = key, triggers, []
        self.left = [False] * len(triggers)
        self._which = self._at = self._pos = None

    def add(self, got: tuple, at: list | None):
        """The result ``got`` of the triggers at ``at`` (None: all of them)."""
        if at is None:
            self.left = list(got[2])
        else:
            left = self.left
            for g, ok in zip(at, got[2]):
                left[g] = ok
        self.results.append((got, at))

    def _where(self) -> tuple:
        """Per trigger: its result's number (-1: none) and its position there (numpy)."""
        if self._which is None:
            import numpy as np
            n = len(self.triggers)
            which, at = np.full(n, -1, dtype=np.intp), np.zeros(n, dtype=np.intp)
            for k, (_, pos) in enumerate(self.results):
                pos = slice(None) if pos is None else np.asarray(pos, dtype=np.intp)
                which[pos] = k
                at[pos] = np.arange(len(at[pos]))
            self._which, self._at = which, at
        return self._which, self._at

    def counts(self):
        """The number of matches of each trigger (numpy; 0 for one without a result)."""
        import numpy as np
        out = np.zeros(len(self.triggers), dtype=np.intp)
        for got, pos in self.results:
            out[slice(None) if pos is None else np.asarray(pos, dtype=np.intp)] = \
                np.diff(np.asarray(got[1], dtype=np.intp))
        return out

    def pieces(self) -> list:
        """``[(matches, a, b)]`` of the triggers with matches, in trigger order."""
        if len(self.results) == 1 and self.results[0][1] is None:
            matches = self.results[0][0][0]
            return [(matches, 0, len(matches))] if len(matches) else []
        import numpy as np
        which, at = self._where()
        count = self.counts()
        some = np.flatnonzero(count)
        if not len(some):
            return []
        starts = np.zeros(len(self.triggers), dtype=np.intp)
        for k, (got, pos) in enumerate(self.results):
            starts[np.asarray(pos, dtype=np.intp)] = np.asarray(got[1][:-1], dtype=np.intp)
        blocks = [got[0] for got, _ in self.results]
        a = starts[some]
        return list(zip(map(blocks.__getitem__, which[some].tolist()), a.tolist(),
                        (a + count[some]).tolist()))

    def result(self, g: int) -> tuple:
        """``(result, position there)`` of trigger ``g``."""
        which, at = self._where()
        return self.results[which[g]][0], int(at[g])

    def index(self, trigger) -> int | None:
        """The position of ``trigger``, or None."""
        pos = self._pos
        if pos is None:
            pos = self._pos = dict(zip(map(id, self.triggers), range(len(self.triggers))))
        i = pos.get(id(trigger))
        return i if i is not None and self.triggers[i] is trigger else None

    def positions(self, triggers: list) -> list:
        """The positions of ``triggers`` (each one of them)."""
        if self._pos is None:
            self.index(self.triggers[0])
        return list(map(self._pos.__getitem__, map(id, triggers)))

    def take(self, trigger):
        """``(trigger, {key: (result, position)})`` as in ``_ready``, taken; None when there
        is none."""
        g = self.index(trigger)
        if g is None or not self.left[g]:
            return None
        self.left[g] = False
        return trigger, {self.key: self.result(g)}


def _first_ts(env: dict) -> float:
    """The earliest event time of a binding (var -> Event | tuple of Events)."""
    return min(v.ts if v.__class__ is Event else v[0].ts for v in env.values())


def _confirmed(ev: Evaluation, env: dict) -> bool:
    """Whether no event violates a deferred negation of the binding ``env`` (its window has
    closed, so the index holds every event that could)."""
    ev.env = dict(env)
    tmin = _first_ts(env)
    return all(ev.witness(n, tmin) is None for n in ev.deferred)
