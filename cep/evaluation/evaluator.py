"""The lazy, recomputation-based join (Kolchinsky, Schuster & Keren, "Efficient Detection of
Complex Event Patterns Using Lazy Chain Automata", sections 3-5; RCEP, "All that Incremental is
not Efficient: Towards Recomputation Based Complex Event Processing for Expensive Queries").

Nothing is stored but events. When a trigger event arrives it is bound to a variable that can
hold a match's last event; the other positive variables are bound in plan order from the shared
index, each candidate range found by bisection (window, SEQ order against the variables already
bound), every conjunct checked at the first step where all its variables are bound, every
negation checked as soon as its position is fixed (first-chance), and a Kleene variable
enumerated as increasing subsets of its candidates (RCEP's bitmask enumeration, pruned by the
element-wise conjuncts as each element is added).

Under skip-till-next-match the run through a Kleene block is deterministic (SASE+ NFA^b): when
the block sits between its bound neighbours, its first element is the first event after the
preceding block that satisfies the begin condition, and each next element the first one that
satisfies the take condition. Such runs are computed once per trigger and shared by every
binding of the variables before the block.
"""
from __future__ import annotations

import math
import operator
from bisect import bisect_left
from itertools import compress

from raycep.cep.evaluation.prefixes import Prefix, conditions
from raycep.cep.evaluation.steps import _TS, NUMERIC_KINDS, ORDER_FILTERS, _Span
from raycep.cep.evaluation.strategies import accepts
from raycep.cep.event import Event, before
from raycep.cep.lang.compiler import Branch, CompiledQuery, Negation
from raycep.cep.lang.expressions import FIELDS, EvalFailure, event_attr, field_value, kinds_clash
from raycep.cep.match import Match
from raycep.cep.store.index import ALL, SharedEventIndex

_MISSING = object()
#: the fewest candidates compared over a buffer's columns (numpy) rather than one by one
COLUMNAR_MIN = 24
#: value kinds that compare with each other (see expressions.kinds_clash)
FAST_KINDS = {int: frozenset((int, float)), float: frozenset((int, float)), str: frozenset((str,))}


class TooManyMatches(Exception):
    """The per-trigger match cap was reached (internal control flow)."""


class _TooMany(Exception):
    """A prefix has more partial bindings than are materialised (internal control flow)."""


class Evaluation:
    """One trigger's evaluation of one branch (a short-lived object)."""

    def __init__(self, cq: CompiledQuery, branch: Branch, index: SharedEventIndex, trigger: Event,
                 partition, cap: int | None, query: str = "", order: tuple | None = None,
                 floor: float = -math.inf):
        self.cq = cq
        self.branch = branch
        self.index = index
        self.trigger = trigger
        self.partition = partition
        self.tlow = trigger.ts - cq.window
        if floor >= self.tlow:            # registered mid-stream: no event at or before floor
            self.tlow = math.nextafter(floor, math.inf)
        self.cap = cap
        self.found = 0
        self.equiv = self._equivalence_filter(trigger, partition)
        self.env: dict = {}
        self.results: list = []
        self._extremes: dict = {}
        self._spans: dict = {}            # (Kleene step, upper bound) -> _Span
        self.proven: dict = {}            # Kleene runs chosen as the NFA^b does (accepts)
        self.deferred = tuple(n for n in branch.negations if n.deferred)
        self.until = math.inf             # a deferred negation reads no event after it (the
        #                                   trigger's time; the engine may index rows ahead)
        self.plain = cq.strategy == "skip_till_any_match" and not self.deferred
        # whether the strategy keeps a completed binding (None: every one; a query group of
        # skip-till-next-match variants judges each binding per member, cep.runtime.groups)
        self.accept = None if cq.strategy == "skip_till_any_match" else accepts
        self.query = query                # results are Match objects, or binding dicts while
        self.order = order                # deferred negations still have to confirm them

    def _equivalence_filter(self, trigger, partition):
        attrs = self.cq.equivalence
        if partition is not ALL:
            attrs = tuple(a for a in attrs if a != self.index.key_attr)
        return tuple((a, field_value(trigger, a, _MISSING)) for a in attrs)

    def candidates(self, var, lo: Event | None, hi: Event) -> list:
        buf = self.index.buffer(self.partition, var.type)
        if buf is None:
            return []
        lo_ts = self.tlow if lo is None or lo.ts < self.tlow else lo.ts
        evs = buf.range(lo_ts, hi.ts)
        if evs and lo is not None and evs[0].ts == lo.ts:
            evs = [e for e in evs if before(lo, e)]
        if evs and evs[-1].ts == hi.ts:
            evs = [e for e in evs if before(e, hi)]
        if self.equiv:
            if len(self.equiv) == 1:
                a, value = self.equiv[0]
                if value.__class__ is not bool:
                    return [e for e in evs if e.attrs.get(a, _MISSING) == value
                            or (a not in e.attrs and self._same_partition(e))]
            evs = [e for e in evs if self._same_partition(e)]
        return evs

    def _same_partition(self, ev) -> bool:
        attrs = ev.attrs
        for a, value in self.equiv:
            got = attrs.get(a, _MISSING)
            if got is _MISSING:
                got = field_value(ev, a, _MISSING)
            if got != value:
                return False
        return True

    def run(self, steps: tuple, shared=None):
        """Enumerate the trigger's matches along ``steps``; ``shared``: ``(SharedPrefixes,
        interned prefix keys)`` to start from a prefix another evaluator materialised."""
        trig = self.trigger
        if self.equiv and not self._same_partition(trig):
            return
        if self.equiv and any(v is _MISSING for _, v in self.equiv):
            return
        if shared is not None and self._run_shared(steps, *shared):
            return
        self._start(steps)

    def _start(self, steps: tuple):
        first = steps[0]
        trig = self.trigger
        if first.var.kleene:
            for seq in self._kleene([e for e in self._kleene_candidates(first, None, trig)],
                                    first, trig):
                self.env[first.var.name] = seq
                if self._after_step(first):
                    self._step(steps, 1)
        elif self._filtered(first.filters, first.var.name, [trig]):
            self.env[first.var.name] = trig
            if self._after_step(first):
                self._step(steps, 1)

    def _run_shared(self, steps: tuple, prefixes, keys: tuple) -> bool:
        """Run ``steps`` from a shared prefix (``cep.evaluation.prefixes``); False when none
        applies."""
        found = prefixes.find(keys, self.trigger, self.partition)
        if found is None:
            return False
        k, slot, prefix = found
        conds = conditions(steps[:k])
        if prefix is None:
            prefix = self._materialise(steps[:k], conds, prefixes.limit)
            prefixes.store(slot, prefix)
            if prefix is None:
                return False
        else:
            for c, (tested, passed, failed, error) in zip(conds, prefix.counts):
                c.tested += tested
                c.passed += passed
                if failed:
                    c.failed += failed
                    c.last_error = error
        names = [s.var.name for s in steps[:k]]
        env = self.env
        step = self._step
        for binding in prefix.bindings:
            env.update(zip(names, binding))
            step(steps, k)
        for name in names:
            env.pop(name, None)
        return True

    def _materialise(self, steps: tuple, conds: list, limit: int):
        """The partial bindings of ``steps`` (a prefix) in enumeration order, as a Prefix;
        None (and the conditions' counters as they were) when there are more than ``limit``."""
        before = [(c.tested, c.passed, c.failed) for c in conds]
        names = [s.var.name for s in steps]
        env = self.env
        out: list = []

        def collect():
            if len(out) >= limit:
                raise _TooMany()
            out.append(tuple([env[n] for n in names]))

        plain = self.plain
        self._complete, self.plain = collect, False
        try:
            self._start(steps)
        except _TooMany:
            for c, (tested, passed, failed) in zip(conds, before):
                c.tested, c.passed, c.failed = tested, passed, failed
            return None
        finally:
            del self._complete
            self.plain = plain
            for name in names:
                env.pop(name, None)
        return Prefix(out, [(c.tested - t, c.passed - p, c.failed - f, c.last_error)
                            for c, (t, p, f) in zip(conds, before)])

    def _bounds(self, step):
        """The latest event that must precede the step's variable and the earliest that must
        follow it (the trigger at the latest)."""
        return self._latest(step.after_of), self._earliest(step.before_of, self.trigger)

    def _latest(self, names) -> Event | None:
        lo = None
        for name in names:
            v = self.env[name]
            last = v if v.__class__ is Event else v[-1]
            if lo is None or before(lo, last):
                lo = last
        return lo

    def _earliest(self, names, hi: Event | None = None) -> Event | None:
        for name in names:
            v = self.env[name]
            first = v if v.__class__ is Event else v[0]
            if hi is None or before(first, hi):
                hi = first
        return hi

    def _used(self, ev) -> bool:
        for v in self.env.values():
            if v is ev or (v.__class__ is not Event and any(x is ev for x in v)):
                return True
        return False

    def _step(self, steps, k):
        if k == len(steps):
            self._complete()
            return
        step = steps[k]
        lo, hi = self._bounds(step)
        name = step.var.name
        env = self.env
        if step.var.kleene:
            if step.chained and self._mode(step) == "next":
                seqs = self._runs(step, lo, hi)
            else:
                seqs = self._kleene(self._kleene_candidates(step, lo, hi), step, None)
            for seq in seqs:
                env[name] = seq
                if self._after_step(step):
                    self._step(steps, k + 1)
            env.pop(name, None)
            self.proven.pop(name, None)
            return
        conjuncts, negations, check_used = step.conjuncts, step.negations, step.check_used
        nxt = k + 1
        complete = nxt == len(steps)
        if step.filters:
            cands = self._selected(step, lo, hi)
            if cands is None:
                cands = self._filtered(step.filters, name, self.candidates(step.var, lo, hi))
        else:
            cands = self.candidates(step.var, lo, hi)
        if complete and self.plain and not (conjuncts or negations or check_used):
            self._complete_all(name, cands)
            env.pop(name, None)
            return
        for ev in cands:
            if check_used and self._used(ev):
                continue
            env[name] = ev
            for c in conjuncts:
                if not c.check(env):
                    break
            else:
                if negations and any(self.violated(n) for n in negations):
                    continue
                if complete:
                    self._complete()
                else:
                    self._step(steps, nxt)
        env.pop(name, None)

    def _selected(self, step, lo, hi) -> list | None:
        """Candidates of ``step`` that pass its first filter, compared column-wise by the index
        when the filter is an order comparison of a plain attribute with a number and the
        partition's buffer needs no further partition filter; None when that does not apply."""
        first = step.filters[0]
        name = step.var.name
        attr, _, op, ordering, other = first.separable[name]
        if not ordering and (op is operator.eq or op is operator.ne):
            return self._selected_text(step, lo, hi)
        if not ordering or attr is None or attr in FIELDS or self.equiv:
            return None
        try:
            value = other(self.env, None)
        except EvalFailure:
            return None
        if value.__class__ is not float and value.__class__ is not int:
            return None
        buf = self.index.buffer(self.partition, step.var.type)
        if buf is None:
            return []
        lo_ts = self.tlow if lo is None or lo.ts < self.tlow else lo.ts
        evs, n, unchecked = buf.select(lo_ts, hi.ts, attr, op, value)
        first.tested += n - len(unchecked)
        first.passed += len(evs)
        if unchecked:                   # counted by _filtered
            rest = self._filtered((first,), name, unchecked)
            if rest:
                ordered = not evs or evs[-1].ts <= rest[0].ts
                evs = evs + rest if ordered else sorted(evs + rest, key=_TS)
        if evs and lo is not None and evs[0].ts == lo.ts:
            evs = [e for e in evs if before(lo, e)]
        if evs and evs[-1].ts == hi.ts:
            evs = [e for e in evs if before(e, hi)]
        if len(step.filters) > 1 and evs:
            evs = self._filtered(step.filters[1:], name, evs)
        return evs

    def _selected_text(self, step, lo, hi) -> list | None:
        """``_selected`` for a first filter ``attr = text`` (or ``!=``) over a long range of
        column-batch rows: compared over the buffer's text codes (TimeBuffer.text_equal),
        counted as ``_filtered`` counts it; None (the caller filters one by one) where a
        row holds no text, a row shares a bound's time, or that does not apply."""
        first = step.filters[0]
        name = step.var.name
        attr, _, op, _, other = first.separable[name]
        if attr is None or attr in FIELDS or self.equiv:
            return None
        try:
            value = other(self.env, None)
        except EvalFailure:
            return None
        if value.__class__ is not str:
            return None
        found = self._columnar_range(step.var, lo, hi)
        if found is None:
            return None
        buf, i, j = found
        held, odd = buf.compare(i, j, attr, op, value)
        if odd.any():
            return None
        import numpy as np
        rows = np.flatnonzero(held)
        first.tested += j - i
        first.passed += len(rows)
        evs = buf.events_at(i, rows)
        if len(step.filters) > 1 and evs:
            evs = self._filtered(step.filters[1:], name, evs)
        return evs

    def _columnar_range(self, var, lo, hi):
        """``(buffer, i, j)``: the candidates of ``var`` between ``lo`` and ``hi`` are the
        buffer's positions ``i`` to ``j - 1``, at least COLUMNAR_MIN of them, rows of column
        batches, none at a bound's time but the bound event itself (``candidates`` leaves
        it out); None otherwise."""
        buf = self.index.buffer(self.partition, var.type)
        if buf is None or not buf.batched:
            return None
        lo_ts = self.tlow if lo is None or lo.ts < self.tlow else lo.ts
        i, j = buf.span(lo_ts, hi.ts)
        if j - i < COLUMNAR_MIN:
            return None
        last = buf.times(max(i, j - 2), j)
        if last[-1] == hi.ts:               # only the bound itself there: not a candidate
            if len(last) > 1 and last[-2] == hi.ts or buf.event(j - 1) is not hi:
                return None
            j -= 1
        first = buf.times(i, min(j, i + 2))
        if lo is not None and first and first[0] == lo.ts:
            if len(first) > 1 and first[1] == lo.ts or buf.event(i) is not lo:
                return None
            i += 1
        if j - i < COLUMNAR_MIN:
            return None
        return buf, i, j

    def _filtered(self, filters, name: str, cands: list) -> list:
        """Apply separable comparisons ``f(name) OP value`` to all candidates at once:
        ``value`` is computed once from the variables already bound."""
        env = self.env
        for c in filters:
            if not cands:
                break
            attr, getter, op, ordering, other = c.separable[name]
            n = len(cands)
            c.tested += n
            try:
                value = other(env, None)
            except EvalFailure as exc:
                c.failed += n
                c.last_error = str(exc)
                return []
            vc = value.__class__
            if attr is not None and attr not in FIELDS and vc in FAST_KINDS:
                if ordering:
                    try:
                        out = ORDER_FILTERS[op](cands, attr, value)
                        c.passed += len(out)
                        cands = out
                        continue
                    except (KeyError, TypeError):
                        pass
                kinds = FAST_KINDS[vc]
                # one pass: True passes, None is false, False failed (wrong kind or missing)
                flags = [(x := e.attrs.get(attr, _MISSING)).__class__ in kinds
                         and (op(x, value) or None) for e in cands]
                cands = list(compress(cands, flags))
                c.passed += len(cands)
                fails = flags.count(False)
                if fails:
                    c.failed += fails
                    c.last_error = f"attribute {attr!r} missing or not comparable with {value!r}"
                continue
            out, failed = [], 0
            for e in cands:
                try:
                    x = (e.attrs[attr] if attr in e.attrs else event_attr(e, attr)) \
                        if attr is not None else getter(e)
                except EvalFailure as exc:
                    failed += 1
                    c.last_error = str(exc)
                    continue
                if (x.__class__ is not vc or vc is bool) and kinds_clash(x, value, ordering):
                    failed += 1
                    c.last_error = f"cannot compare {x!r} with {value!r}"
                    continue
                if op(x, value):
                    out.append(e)
            c.passed += len(out)
            c.failed += failed
            cands = out
        return cands

    def _kleene_candidates(self, step, lo, hi, used: bool = True) -> list:
        if step.columnar is not None and not self.equiv and not (used and step.check_used) \
                and self._mode(step) != "contiguous":
            cands = self._columnar_unary(step, lo, hi)
            if cands is not None:
                return cands
        cands = self.candidates(step.var, lo, hi)
        if used and step.check_used:
            cands = [e for e in cands if not self._used(e)]
        if step.unary and self._mode(step) != "contiguous":
            env, name = self.env, step.var.name
            keep = []
            for e in cands:
                env[name] = (e,)
                if all(c.check_at(env, 0) for c in step.unary):
                    keep.append(e)
            env.pop(name, None)
            cands = keep
        return cands

    def _columnar_unary(self, step, lo, hi) -> list | None:
        """The candidates of Kleene ``step`` that pass its element-wise conditions on one
        element (``step.columnar``: each ``attr OP literal``), compared over the buffer's
        columns and counted as ``check_at`` of each counts them; None (the caller checks
        them one by one) where a row holds no value of the literal's kind, or
        ``_columnar_range`` does not apply."""
        found = self._columnar_range(step.var, lo, hi)
        if found is None:
            return None
        buf, i, j = found
        import numpy as np
        keep = np.arange(j - i)
        counts = []
        for c, (attr, op, value) in zip(step.unary, step.columnar):
            if not len(keep):
                break
            held, odd = buf.compare(i, j, attr, op, value)
            if odd[keep].any():
                return None
            n = len(keep)
            keep = keep[held[keep]]
            counts.append((c, n, len(keep)))
        for c, n, k in counts:
            c.tested += n
            c.passed += k
        return buf.events_at(i, keep)

    def _mode(self, step) -> str:
        """How the strategy prunes a Kleene enumeration: 'any' (every subset), 'next' (after an
        element, the next one is the first candidate satisfying the take condition) or
        'contiguous' (the next one is the next candidate)."""
        strategy = self.cq.strategy
        if strategy == "skip_till_any_match":
            return "any"
        if strategy == "skip_till_next_match":
            return "next" if step.take_complete else "any"
        return "contiguous"

    def _kleene(self, cands: list, step, last: Event | None):
        """Increasing sequences from ``cands`` (ending with ``last``, the trigger, when given)
        whose element-wise conjuncts hold, pruned as the selection strategy allows."""
        env, name = self.env, step.var.name
        mode = self._mode(step)
        checks = step.incremental + step.unary if mode == "contiguous" else step.incremental
        if last is not None and step.unary:
            env[name] = (last,)
            if not all(c.check_at(env, 0) for c in step.unary):
                return
        n = len(cands)

        def ok(seq):
            env[name] = seq
            p = len(seq) - 1
            for c in checks:
                if not c.check_at(env, p):
                    return False
            return True

        if mode != "any":
            yield from self._kleene_chains(cands, last, ok, mode == "next")
            return
        stack = [((), 0)]
        while stack:
            prefix, start = stack.pop()
            if last is not None:
                seq = prefix + (last,)
                if ok(seq):
                    yield seq
            for j in range(n - 1, start - 1, -1):
                seq = prefix + (cands[j],)
                if ok(seq):
                    if last is None:
                        yield seq
                    stack.append((seq, j + 1))

    @staticmethod
    def _kleene_chains(cands, last, ok, skip: bool):
        """Deterministic continuation (SASE+ section 2): under skip-till-next-match a run at
        ``p[i]`` must take the first event satisfying the take condition (or leave the
        Kleene); under contiguity it must take the very next one."""
        n = len(cands)
        if last is not None and ok((last,)):
            yield (last,)
        for s in range(n):
            seq, j = (cands[s],), s
            if not ok(seq):
                continue
            while True:
                if last is None:
                    yield seq
                nxt = None
                for j2 in range(j + 1, n if skip else min(j + 2, n)):
                    cand = seq + (cands[j2],)
                    if ok(cand):
                        nxt = (cand, j2)
                        break
                    if not skip:
                        break
                if nxt is None:
                    if last is not None and (skip or j == n - 1):
                        cand = seq + (last,)
                        if ok(cand):
                            yield cand
                    break
                seq, j = nxt

    def _runs(self, step, lo, hi):
        """The skip-till-next-match runs of a chained Kleene step between ``lo`` and ``hi``
        (what _kleene_chains yields for the same candidates, in the same order).

        The step's candidates up to ``hi`` and each run from a given first element are computed
        once per trigger and shared by every ``lo``: no other bound variable has an event
        between ``lo`` and ``hi``, and the take condition reads only this variable. With a
        begin condition, only the first candidate after ``lo`` that satisfies it can start a
        run: it is in the gap of every later start, which the NFA^b cannot ignore
        (strategies.accepts would reject them).
        """
        span = self._spans.get((id(step), id(hi)))
        if span is None:
            cands = self._kleene_candidates(step, None, hi, used=False)
            span = self._spans[(id(step), id(hi))] = _Span(cands)
        cands = span.events
        n = len(cands)
        k = 0
        if lo is not None and lo.ts >= self.tlow:
            k = bisect_left(span.times, lo.ts)
            while k < n and not before(lo, cands[k]):
                k += 1
        starts, begun = range(k, n), False
        env, name = self.env, step.var.name
        if step.begin is not None and any(env[v] is lo for v in step.after_of):
            first = self._first_begin(step, span, k)    # the preceding block is simple
            if first is None:
                return
            if self._same_run_partition(cands[first], self._earliest(step.after_of)):
                starts, begun = (first,), True
        if step.ordered is not None and (span.ordered is not None or (
                k == 0 and not begun and not span.nexts and span.ordered_nexts(*step.ordered))):
            yield from self._ordered_runs(step, span, starts, begun)
            return
        checks = step.incremental
        for s in starts:
            env[name] = (cands[s],)
            if not all(c.check_at(env, 0) for c in checks):
                continue
            run = self._run(step, span, s)
            self.proven[name] = (begun, run)
            first = step.min_len
            if first > 1:               # the shorter prefixes fail the step's first conjunct
                step.conjuncts[0].tested += min(first - 1, len(run))
            for m in range(first, len(run) + 1):
                yield run[:m]

    def _ordered_runs(self, step, span, starts, begun: bool):
        """``_runs``' loop where the take condition is one order comparison of consecutive
        elements (``step.ordered``): every candidate's next element found at once
        (_Span.ordered_nexts, counted as the evaluator's tests of them count: each
        candidate's next is looked for once per trigger when every candidate starts a run,
        which is when this is first asked), the length of each run from the next elements,
        and only the runs long enough to yield made."""
        nexts, tested = span.ordered
        if not span.nexts:                  # first use: count the tests, as _next would
            c = step.incremental[0]
            c.tested += tested
            c.passed += len(nexts) - nexts.count(None)
            span.nexts.update(enumerate(nexts))
        lengths = span.lengths()
        first = step.min_len
        conj = step.conjuncts[0] if first > 1 else None
        name = step.var.name
        for s in starts:
            length = lengths[s]
            if length < first:              # the prefixes fail the step's first conjunct
                conj.tested += length
                continue
            run = self._run(step, span, s)
            self.proven[name] = (begun, run)
            if conj is not None:
                conj.tested += first - 1
            for m in range(first, length + 1):
                yield run[:m]

    def _first_begin(self, step, span, k: int) -> int | None:
        """The first candidate from position ``k`` on that satisfies the begin condition."""
        env, name, cands = self.env, step.var.name, span.events
        n = len(cands)
        try:
            while k < n:
                ev = cands[k]
                env[name] = (ev,)
                for c, at_0, jump in step.begin:
                    if not (c.check_at(env, 0) if at_0 else c.check(env)):
                        break
                else:
                    return k
                if jump is not None and ev.attrs.get(jump[0]).__class__ in NUMERIC_KINDS:
                    k = span.skip(jump)[k]
                else:
                    k += 1
            return None
        finally:
            env.pop(name, None)

    def _same_run_partition(self, ev, first) -> bool:
        """Whether ``ev`` has the equivalence attributes of the run's first event (then it is
        an event the NFA^b begin condition tests, not only a candidate of this partition)."""
        for a in self.cq.equivalence:
            value = field_value(ev, a, _MISSING)
            if value is _MISSING or value != field_value(first, a, _MISSING):
                return False
        return True

    def _run(self, step, span, s: int) -> tuple:
        """The run from candidate ``s``: each next element is the first later candidate that
        satisfies the take condition (memoised per element when the condition is local)."""
        runs = span.runs
        got = runs.get(s)
        if got is not None:
            return got
        env, name, cands = self.env, step.var.name, span.events
        checks = step.incremental
        if step.local:
            path, j = [], s
            while j is not None and j not in runs:
                path.append(j)
                j = self._next(step, span, j)
            tail = runs[j] if j is not None else ()
            for j in reversed(path):
                tail = runs[j] = (cands[j],) + tail
            return tail
        seq, j, n = (cands[s],), s, len(cands)
        while True:
            for j2 in range(j + 1, n):
                cand = env[name] = seq + (cands[j2],)
                p = len(cand) - 1
                if all(c.check_at(env, p) for c in checks):
                    seq, j = cand, j2
                    break
            else:
                break
        runs[s] = seq
        return seq

    def _next(self, step, span, j: int) -> int | None:
        """The next element after candidate ``j`` under a local take condition."""
        nexts = span.nexts
        if j in nexts:
            return nexts[j]
        env, name, cands = self.env, step.var.name, span.events
        checks = step.incremental
        found, prev = None, cands[j]
        for j2 in range(j + 1, len(cands)):
            env[name] = (prev, cands[j2])
            if all(c.check_at(env, 1) for c in checks):
                found = j2
                break
        nexts[j] = found
        return found

    def _after_step(self, step) -> bool:
        env = self.env
        for c in step.conjuncts:
            if not c.check(env):
                return False
        for neg in step.negations:
            if self.violated(neg):
                return False
        return True

    def violated(self, neg: Negation) -> bool:
        """Whether a witness of ``neg`` exists for the current binding (first-chance check).

        When the negation's upper bound stays fixed during this trigger's evaluation and its only
        condition is one comparison ``n.attr OP value``, the candidates between the bound and the
        window start are gathered once with their suffix maxima/minima, and each check is a
        bisection (Lazy NFA's early negation check made O(log n) per partial match).
        """
        spec = neg.extreme
        if spec is None:
            return self.witness(neg) is not None
        hi = self._earliest(neg.after)
        key = (id(neg), id(hi))
        cache = self._extremes.get(key)
        if cache is None:
            cache = self._extremes[key] = self._extreme_table(neg, spec, hi)
        attr, op, other = spec
        try:
            value = other(self.env, None)
        except EvalFailure:
            return False
        if value.__class__ not in NUMERIC_KINDS:
            return self.witness(neg) is not None
        events, times, extreme = cache
        lo = self._latest(neg.before)
        k = 0
        if lo is not None:
            k = bisect_left(times, lo.ts)
            while k < len(events) and not before(lo, events[k]):
                k += 1
        return k < len(events) and op(extreme[k], value)

    def _extreme_table(self, neg, spec, hi) -> tuple:
        attr, op, _ = spec
        buf = self.index.buffer(self.partition, neg.var.type)
        cands = buf.range(self.tlow, hi.ts) if buf is not None else []
        if cands and cands[-1].ts == hi.ts:
            cands = [x for x in cands if before(x, hi)]
        if cands and self.equiv:
            cands = [x for x in cands if self._same_partition(x)]
        kept = [(x, v) for x in cands       # NaN (made in Python) compares false: no witness
                if (v := x.attrs.get(attr, _MISSING)).__class__ in NUMERIC_KINDS and v == v]
        pick = max if op in (operator.gt, operator.ge) else min
        extreme = [0.0] * len(kept)
        for k in range(len(kept) - 1, -1, -1):
            v = kept[k][1]
            extreme[k] = v if k == len(kept) - 1 else pick(v, extreme[k + 1])
        return [x for x, _ in kept], [x.ts for x, _ in kept], extreme

    def witness(self, neg: Negation, tmin: float | None = None) -> Event | None:
        """An event that violates negation ``neg`` for the current binding, or None."""
        env = self.env
        lo, hi = self._latest(neg.before), self._earliest(neg.after)
        buf = self.index.buffer(self.partition, neg.var.type)
        if buf is None:
            return None
        lo_ts = self.tlow if lo is None or lo.ts < self.tlow else lo.ts
        if hi is not None:
            top = hi.ts
        else:                           # a negation at the end: up to the deadline, or now
            top = tmin + self.cq.window
            if self.until < top:
                top = self.until
        cands = buf.range(lo_ts, top)
        if cands and lo is not None and cands[0].ts == lo.ts:
            cands = [x for x in cands if before(lo, x)]
        if cands and hi is not None and cands[-1].ts == hi.ts:
            cands = [x for x in cands if before(x, hi)]
        if cands and self.equiv:
            cands = [x for x in cands if self._same_partition(x)]
        if cands and neg.may_be_bound:
            cands = [x for x in cands if not self._used(x)]
        name = neg.var.name
        filters = neg.filters
        if cands and filters:
            cands = self._filtered(filters, name, cands)
        checks = neg.checks
        if not checks or not cands:
            return cands[0] if cands else None
        found = None
        for x in cands:
            env[name] = x
            if all(c.check(env) for c in checks):
                found = x
                break
        env.pop(name, None)
        return found

    def _complete(self):
        env = self.env
        if not self.plain:
            accept = self.accept
            if accept is not None and not accept(self, env, self.proven):
                return
            if self.deferred:
                tmin = min(v.ts if v.__class__ is Event else v[0].ts for v in env.values())
                for neg in self.deferred:
                    if self.witness(neg, tmin) is not None:
                        return
                self.results.append(env.copy())
                self.found += 1
                if self.cap is not None and self.found >= self.cap:
                    raise TooManyMatches()
                return
        self.results.append(Match(self.query, env.copy(), self.order))
        self.found += 1
        if self.cap is not None and self.found >= self.cap:
            raise TooManyMatches()

    def _complete_all(self, name: str, cands: list):
        """The last step of a plain evaluation: every candidate completes a match."""
        env = self.env
        env.pop(name, None)
        if self.cap is not None and self.found + len(cands) >= self.cap:
            cands = cands[:self.cap - self.found]
        self.results.extend(Match.batch(self.query, env.copy(), name, cands, self.order))
        self.found += len(cands)
        if self.cap is not None and self.found >= self.cap:
            raise TooManyMatches()
