"""An eager, incremental SASE-style NFA: the baseline the lazy engine is benchmarked against.

This is the classic evaluator that the lazy/recomputation papers compare with (SASE+ NFA^b,
"Efficient Pattern Matching over Event Streams" section 3; the "eager NFA" of the Lazy Chain
Automata paper, section 2): every event is pushed through the automaton at once, and every
partial match (a run) is stored until it completes or expires.

What it does, so that the comparison is fair (a competent eager implementation):

* skip-till-any-match over ``SEQ(v1, ..., vn)``: an event of type ``T`` extends every stored run
  whose next variable has type ``T`` (the run is kept, too: any-match is non-deterministic);
* runs are hash-partitioned by the equivalence key (``[k]``), so an event only meets the runs
  of its own partition;
* each predicate is checked at the first transition where all its variables are bound
  (a run that fails is never created), element-wise Kleene predicates as each element is taken;
* runs whose first event left the window are dropped whenever their state is scanned, and a
  periodic sweep drops those of states that were not scanned (memory stays bounded);
* a Kleene-plus variable ``T+ b[]`` has a self-loop: a run in its state is extended by every
  qualifying event of ``T`` (and is kept), and proceeds to the next variable from there;
* negation in the middle of a SEQ (``SEQ(A a, ~B b, C c)``) is checked when a run completes,
  as in SASE: the negated type's events are buffered per partition for one window, and the run
  is rejected if one of them lies between its neighbours and satisfies the negation's
  predicates.

Predicates are plain Python functions over the run's binding tuple ``m`` (``m[j]`` is the event
of the j-th positive variable, a tuple of events for a Kleene variable); the workloads give
them next to the query text that the lazy engine parses. Input must arrive in event-time order
(strictly increasing ``ts``), which the benchmark streams guarantee.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Var:
    """A positive variable of the SEQ.

    ``checks``: functions ``f(m, e) -> bool`` tested before event ``e`` is bound to this
    variable (``m`` holds the earlier variables' bindings; the extended run is only built when
    they hold). A Kleene variable has none: checks on its whole iteration go on the next
    variable. ``elem_checks`` (Kleene only): ``f(m, p) -> bool`` tested when element ``p``
    (0-based) is taken, ``m[j]`` being the iteration including it.
    """
    name: str
    type: str
    kleene: bool = False
    checks: tuple = ()
    elem_checks: tuple = ()


@dataclass(frozen=True)
class NegVar:
    """``~type name`` between positive variables ``pos - 1`` and ``pos``; ``checks`` are
    ``f(m, x) -> bool`` over the complete binding and a candidate negated event ``x``."""
    name: str
    type: str
    pos: int
    checks: tuple = ()


@dataclass(frozen=True)
class EagerQuery:
    name: str
    vars: tuple                     # Var, in SEQ order
    window: float
    key: str | None = None          # equivalence attribute = partition attribute
    negations: tuple = ()           # NegVar

    def __post_init__(self):
        positive = {v.type for v in self.vars}
        for n in self.negations:
            if not 0 < n.pos < len(self.vars):
                raise ValueError("only negation in the middle of a SEQ is supported")
            if n.type in positive:
                raise ValueError("a negated type must not also be a positive type here")
        if self.vars[-1].kleene:
            raise ValueError("a Kleene variable must not end the SEQ here")
        if any(v.kleene and v.checks for v in self.vars):
            raise ValueError("put set-level checks of a Kleene variable on the next variable")


@dataclass
class _Partition:
    states: list                     # states[j]: runs that have bound vars[0..j]
    scanned: list                    # scanned[j]: ts of the last scan (it pruned states[j])
    negs: dict = field(default_factory=dict)   # negated type -> ([ts], [event])


class EagerNFA:
    """Push-based: ``process(event) -> [binding dict]`` for the matches ``event`` completes."""

    def __init__(self, query: EagerQuery):
        self.q = query
        self.n = len(query.vars)
        self.window = query.window
        self.key = query.key
        # event type -> [(j, var)]: transitions that bind variable j with an event of that type
        self._by_type: dict = {}
        for j, v in reversed(list(enumerate(query.vars))):
            self._by_type.setdefault(v.type, []).append((j, v))
        self._neg_types = {n.type for n in query.negations}
        self._names = tuple(v.name for v in query.vars)
        self.parts: dict = {}
        self.sweep_every = query.window / 4.0
        self._next_sweep = None
        self.runs_created = 0
        self.matches = 0
        # a run is the tuple of its bindings; its first event's ts decides its expiry
        self._k0 = query.vars[0].kleene

    # ------------------------------------------------------------------ input
    def process(self, e) -> list:
        ts = e.ts
        if self._next_sweep is None:
            self._next_sweep = ts + self.sweep_every
        elif ts >= self._next_sweep:
            self.sweep(ts)
            self._next_sweep = ts + self.sweep_every
        if self.key is not None:
            pkey = e.attrs.get(self.key)
            if pkey is None:
                return []
        else:
            pkey = None
        etype = e.type
        if etype in self._neg_types:
            part = self._part(pkey)
            tss, evs = part.negs.setdefault(etype, ([], []))
            tss.append(ts)
            evs.append(e)
        trans = self._by_type.get(etype)
        if not trans:
            return []
        part = self._part(pkey)
        states = part.states
        lo = ts - self.window
        new = []                       # (state, run) created by this event
        created = 0
        out = []
        last = self.n - 1
        k0 = self._k0
        for j, v in trans:
            checks = v.checks
            if v.kleene:
                elem_checks = v.elem_checks
                # self-loop: take e as one more element of runs already in state j
                runs = states[j]
                if runs:
                    part.scanned[j] = ts
                    expired = False
                    for m in runs:
                        if (m[0][0] if k0 else m[0]).ts < lo:
                            expired = True
                            continue
                        seq = m[j] + (e,)
                        m2 = m[:j] + (seq,)
                        p = len(seq) - 1
                        for f in elem_checks:
                            if not f(m2, p):
                                break
                        else:
                            new.append((j, m2))
                    if expired:
                        states[j] = [m for m in runs if (m[0][0] if k0 else m[0]).ts >= lo]
                # begin the iteration with e
                if j == 0:
                    m2 = ((e,),)
                    if all(f(m2, 0) for f in elem_checks):
                        new.append((0, m2))
                    continue
                src = states[j - 1]
                if not src:
                    continue
                part.scanned[j - 1] = ts
                expired = False
                for m in src:
                    if (m[0][0] if k0 else m[0]).ts < lo:
                        expired = True
                        continue
                    m2 = m + ((e,),)
                    for f in elem_checks:
                        if not f(m2, 0):
                            break
                    else:
                        new.append((j, m2))
                if expired:
                    states[j - 1] = [m for m in src if (m[0][0] if k0 else m[0]).ts >= lo]
                continue
            if j == 0:
                if all(f((), e) for f in checks):
                    if last == 0:
                        self._emit(part, (e,), out)
                    else:
                        new.append((0, (e,)))
                continue
            src = states[j - 1]
            if not src:
                continue
            part.scanned[j - 1] = ts
            expired = False
            # transitions run in descending j, so states[j] was already scanned for this event
            # and the new runs can go straight in
            add = None if j == last else states[j].append
            for m in src:
                if (m[0][0] if k0 else m[0]).ts < lo:
                    expired = True
                    continue
                for f in checks:
                    if not f(m, e):
                        break
                else:
                    if add is not None:
                        add(m + (e,))
                        created += 1
                    else:
                        self._emit(part, m + (e,), out)
            if expired:
                states[j - 1] = [m for m in src if (m[0][0] if k0 else m[0]).ts >= lo]
        for j, m in new:
            states[j].append(m)
        self.runs_created += len(new) + created
        return out

    def _part(self, pkey) -> _Partition:
        part = self.parts.get(pkey)
        if part is None:
            part = self.parts[pkey] = _Partition([[] for _ in range(self.n)], [-math.inf] * self.n)
        return part

    def _emit(self, part: _Partition, m: tuple, out: list):
        for neg in self.q.negations:
            buf = part.negs.get(neg.type)
            if buf and self._witness(neg, buf, m):
                return
        self.matches += 1
        out.append(dict(zip(self._names, m)))

    @staticmethod
    def _witness(neg: NegVar, buf, m) -> bool:
        left, right = m[neg.pos - 1], m[neg.pos]
        lo = left[-1].ts if left.__class__ is tuple else left.ts
        hi = right[0].ts if right.__class__ is tuple else right.ts
        tss, evs = buf
        for i in range(bisect_right(tss, lo), bisect_left(tss, hi)):
            x = evs[i]
            if all(f(m, x) for f in neg.checks):
                return True
        return False

    # ------------------------------------------------------------------ housekeeping
    def advance(self, watermark: float) -> list:
        """Nothing is deferred for the supported patterns; expire what the window passed."""
        self.sweep(watermark)
        return []

    def sweep(self, now: float):
        """Drop runs and negation events that can no longer take part in a match.

        A state scanned within the last sweep period was pruned by that scan (it holds no run
        older than a window before it) and is skipped."""
        lo = now - self.window
        recent = now - self.sweep_every
        k0 = self._k0
        dead = []
        for pkey, part in self.parts.items():
            alive = False
            for j, runs in enumerate(part.states):
                if runs and part.scanned[j] < recent:
                    runs = part.states[j] = [m for m in runs
                                             if (m[0][0] if k0 else m[0]).ts >= lo]
                    part.scanned[j] = now
                alive = alive or bool(runs)
            for t, (tss, evs) in part.negs.items():
                k = bisect_left(tss, lo)
                if k:
                    del tss[:k], evs[:k]
                alive = alive or bool(tss)
            if not alive:
                dead.append(pkey)
        for pkey in dead:
            del self.parts[pkey]

    def stored_runs(self) -> int:
        """Partial matches currently stored (the eager evaluator's state)."""
        return sum(len(r) for p in self.parts.values() for r in p.states)

    def stored_events(self) -> int:
        """Negated-type events buffered for completion-time checks."""
        return sum(len(b[0]) for p in self.parts.values() for b in p.negs.values())
