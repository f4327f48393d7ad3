"""Bulk evaluation: all the triggers of a chunk of in-order rows at once, over columns (issue 14).

The lazy join of ``cep.evaluation.evaluator`` (the Lazy Chain NFA of "Efficient Detection of Complex
Event Patterns Using Lazy Chain Automata", section 4) binds the variables of one trigger in plan
order, a candidate range per step found by bisection and each separable comparison applied to
the whole range. For a sequence pattern under skip-till-any-match with no Kleene variable, whose
conditions are order comparisons of an attribute (or ``attribute OP number``) with a number or
with such a term of a variable bound before, the same steps run for every trigger of a chunk
together: each step's candidate ranges by ``searchsorted`` over the buffer's times, each
comparison one numpy mask over the candidates of all bindings, each negation between two bound
variables decided per binding over its range (its minimum or maximum, or each filter counted, as
the evaluator does it). Variables of one type are allowed when each is ordered against the
others (a bound event is then a range's end, never a candidate). The bindings come out in the
evaluator's enumeration order (trigger, then each step's candidates in time order), the matches
are made as the evaluator makes them (``Match.batch`` per prefix binding, or one bindings dict
per match), and each condition's counters are summed per trigger, so plans, statistics and
output stay identical; the one difference is that a bulk evaluation neither reads nor stores
shared plan prefixes (``cep.evaluation.prefixes``), so their reuse counts differ.

Under the other selection strategies (skip-till-next-match, strict and partition contiguity:
SASE+ NFA^b, cep.evaluation.strategies) the evaluator keeps the bindings of the same join
that ``accepts`` keeps; so does a bulk evaluation: contiguity over columns (no row of the
query's types between a binding's first and last event but its own, counted by bisection
in its partition), skip-till-next-match binding by binding over the index, the conditions
it tests there counted per trigger like the join's; a group of skip-till-next-match
variants judges each (binding, member) pair under the member's own query (issue 35).

A filter may also be an equality (``=``, ``!=``) of an attribute with a text or a number
literal: a text is compared over the batches' text codes (``TimeBuffer.text_equal``), a row
holding no ``str`` there is one the evaluator fails (left to it, as a non-number is for a
number). Where a pattern has no bulk plan, the trigger's own conditions still are decided for
the whole chunk (``screen``): a trigger that fails one has no match and is counted as the
evaluator counts it, never evaluated one by one (issue 35).

A trigger whose evaluation the columns cannot reproduce exactly is left to the evaluator: a
range or a compared value holding something float64 does not hold exactly (a string, a
boolean, a missing attribute, an int beyond 2**53, NaN, an arithmetic result from 2**53 on
or a division by 0: the evaluator counts failures or compares in Python); an event at the
time of a range's end that is not the bound event there (ordered by id); a trigger that
reaches the per-trigger match cap.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from itertools import repeat

import numpy as np

from raycep.cep.evaluation.loose import OneOf
from raycep.cep.evaluation.strategies import Run, accepts
from raycep.cep.evaluation.vector import compile_term, compile_vector
from raycep.cep.event import EXACT, EXACT_INT, kind_of
from raycep.cep.lang import ast
from raycep.cep.lang.expressions import FIELDS
from raycep.cep.match import MatchBlock
from raycep.cep.store.batch import numeric_of
from raycep.cep.store.index import ALL, text_numbers


@dataclass(frozen=True)
class _Filter:
    """``candidate OP value``: ``candidate`` is ``attr`` of the step's variable (through
    ``arith``), ``value`` the number ``const`` or ``other`` of the variable bound at step
    ``var`` (through ``other_arith``); an arithmetic is ``(op, number, number on the
    left)``."""
    conj: object                 # the Conjunct (its counters are summed)
    attr: str
    op: object                   # operator.lt, le, gt or ge
    const: float | None = None
    var: int = -1
    other: str = ""
    arith: tuple | None = None
    other_arith: tuple | None = None
    alt: "_Filter | None" = None     # a query group's condition (cep.runtime.groups): it holds
    #                                  when this or ``alt`` does (its loosest member's)
    term: object = None              # the value: a term of variables bound before
    #                                  (cep.evaluation.vector.compile_term; ``var`` -1)
    term_steps: tuple = ()           # ((variable, its step), ...) the term reads


@dataclass(frozen=True)
class BulkPlan:
    """What ``evaluate`` needs of a branch's steps (``plan_for``)."""
    names: tuple                 # the variables in step order (the trigger's first)
    types: tuple
    after: tuple                 # per step: the steps whose events precede its event
    before: tuple                # per step: the steps whose events follow it (trigger aside)
    same: tuple                  # per step: the earlier steps of its event type
    filters: tuple               # per step: its _Filters, in the evaluator's order
    negations: tuple = ()        # per step: the _Negations decided after it
    batch: bool = True           # matches share the prefix binding (Match.batch), as the
    #                              evaluator makes them when the last step checks nothing else
    checks: tuple = ()           # per step: its _Checks (conditions on it and steps before)
    accept: tuple | None = None  # (cq, branch) under a selection strategy other than
    #                              skip-till-any-match: a binding is kept where
    #                              cep.evaluation.strategies.accepts keeps it
    deferred: bool = False       # a negation at the end: the bindings wait for the clock
    #                              (decided at their deadline, not here)


@dataclass(frozen=True)
class _Check:
    """A condition checked on each candidate once bound (not a filter of one variable, e.g.
    ``a.x + b.x > c.x``): holds where one of ``fns`` (cep.evaluation.vector) does (two for a
    query group's: its members with the extreme constants)."""
    conj: object
    fns: tuple


@dataclass(frozen=True)
class _Negation:
    """No event of ``type`` strictly between the steps ``before`` and ``after`` for which
    every one of ``filters`` holds. ``extreme``: decided by the range's minimum or maximum
    without counting (``Negation.extreme``); else the evaluator counts each filter over the
    range's events (``Evaluation.witness``)."""
    type: str
    before: tuple
    after: tuple
    same: tuple                  # the steps of that type (bounds, never witnesses)
    filters: tuple
    extreme: bool


def plan_for(cq, steps: tuple, opaque: dict, loose: dict | None = None,
             branch=None) -> BulkPlan | None:
    """The bulk plan of ``steps`` (cep.evaluation.steps.build_steps, the trigger's variable first),
    or None when the pattern is not one bulk evaluation reproduces (module docstring).
    ``opaque``: id(condition) of conditions whose expression is not what they evaluate (a
    query group's, cep.runtime.groups); ``loose``: for some of them, the conditions of the
    members with the extreme constants, ``(low, high)``: such a condition holds when one of
    those does (an ordering comparison monotone in its constant). ``branch``: the branch of
    ``steps`` (needed under a selection strategy other than skip-till-any-match, whose
    bindings are the join's that ``accepts`` keeps, as the evaluator does)."""
    loose = loose or {}
    strategic = cq.strategy != "skip_till_any_match"
    if cq.slide or len(steps) < 2 or (strategic and branch is None):
        return None
    names = tuple(s.var.name for s in steps)
    types = tuple(s.var.type for s in steps)
    if None in types:
        return None
    pos = {n: k for k, n in enumerate(names)}
    filters, same, negations = [], [], []
    checks = []
    # a negation at the end, after the trigger: nothing lies between it and the trigger's
    # time at the trigger (rows in bulk have distinct times); the manager decides it when
    # the clock passes its deadline
    later = [n for b in ((branch,) if branch is not None else cq.branches)
             for n in b.negations if n.deferred]
    if later and (strategic or branch is None or any(names[0] not in n.before for n in later)):
        return None
    deferred = bool(later)
    for k, s in enumerate(steps):
        if s.var.kleene or s.var.negated or \
                (not k and any(not n.deferred for n in s.negations)):
            return None
        step_checks = tuple(_check(c, loose, opaque) for c in s.conjuncts)
        if None in step_checks:
            return None
        checks.append(step_checks)
        negs = tuple(_negation(n, names, types, pos, k, opaque) for n in s.negations
                     if not n.deferred)
        if None in negs:
            return None
        negations.append(negs)
        # an event of the type bound before is a bound of the range: never a candidate
        ordered = set(s.after_of) | set(s.before_of)
        same.append(tuple(j for j in range(k) if types[j] == types[k]))
        if any(names[j] not in ordered for j in same[-1]):
            return None
        step_filters = []
        for c in s.filters:
            f = _loose_filter(c, loose[id(c)], s.var.name, pos, k) if id(c) in loose else \
                None if id(c) in opaque else _filter(c, s.var.name, pos, k)
            if f is None:
                return None
            step_filters.append(f)
        filters.append(tuple(step_filters))
    last = steps[-1]
    return BulkPlan(names, types, tuple(tuple(pos[n] for n in s.after_of) for s in steps),
                    tuple(tuple(pos[n] for n in s.before_of) for s in steps), tuple(same),
                    tuple(filters), tuple(negations),
                    not (strategic or deferred or last.negations or last.check_used or
                         last.conjuncts),
                    tuple(checks), (cq, branch) if strategic else None, deferred)


def _check(c, loose: dict, opaque: dict) -> _Check | None:
    """Condition ``c`` as a _Check, or None (not a comparison of numbers over columns)."""
    if c.kleene_i is not None:
        return None
    spec = loose.get(id(c))
    if spec.__class__ is OneOf:
        return _Check(c, (_one_of(spec),))
    if spec is not None:
        exprs = tuple(e.expr for e in spec)
    elif id(c) in opaque:
        return None
    else:
        exprs = (c.expr,)
    fns = tuple(compile_vector(e) for e in exprs)
    return None if None in fns else _Check(c, fns)


def why_not(cq, steps: tuple, opaque: dict, loose: dict | None = None) -> str:
    """Why ``plan_for`` refuses ``steps``: the first thing a bulk evaluation does not
    reproduce, in words (what ``Engine.stats()["paths"]`` tells a user)."""
    loose = loose or {}
    if cq.slide:
        return "SLIDE"
    if len(steps) < 2:
        return "one variable"
    names = tuple(s.var.name for s in steps)
    types = tuple(s.var.type for s in steps)
    if None in types:
        return "a variable of any type"
    pos = {n: k for k, n in enumerate(names)}
    for k, s in enumerate(steps):
        if s.var.kleene:
            return f"Kleene variable {s.var.name}"
        for c in s.conjuncts:
            if _check(c, loose, opaque) is None:
                return f"condition {c.text!r}: not a comparison of numbers over columns"
        if not k and any(not n.deferred for n in s.negations):
            return "a negation before the first event"
        for n in s.negations:
            if n.deferred:
                if cq.strategy != "skip_till_any_match" or names[0] not in n.before:
                    return "a negation at the end, under this strategy or trigger"
                continue
            if _negation(n, names, types, pos, k, opaque) is None:
                return f"negation {n.var.name}: its conditions or position"
        if any(names[j] not in set(s.after_of) | set(s.before_of)
               for j in range(k) if types[j] == types[k]):
            return f"variables of type {types[k]} not ordered"
        for c in s.filters:
            if id(c) in loose:
                if _loose_filter(c, loose[id(c)], s.var.name, pos, k) is None:
                    return f"condition {c.text!r}: its members' constants"
            elif id(c) in opaque:
                return f"condition {c.text!r}: its members' constants"
            elif _filter(c, s.var.name, pos, k) is None:
                return f"condition {c.text!r}: not an order comparison of numbers " \
                    "nor an equality with a number or text"
    return "not a sequence bulk evaluation reproduces"


def _negation(neg, names: tuple, types: tuple, pos: dict, k: int, opaque: dict):
    """``neg`` (decided after step ``k``) as a _Negation, or None."""
    if neg.var.type is None or neg.checks or neg.deferred or \
            any(id(c) in opaque for c in neg.filters):
        return None
    before, after = tuple(pos[n] for n in neg.before), tuple(pos[n] for n in neg.after)
    same = tuple(j for j in range(k + 1) if types[j] == neg.var.type)
    if any(j not in before and j not in after for j in same):
        return None
    filters = tuple(_filter(c, neg.var.name, pos, k + 1) for c in neg.filters)
    if None in filters or any(_text(f) or _joined(f) for f in filters):
        return None
    extreme = neg.extreme is not None
    if extreme and filters[0].arith is not None:
        return None
    return _Negation(neg.var.type, before, after, same, filters, extreme)


def _loose_filter(c, ends: tuple, name: str, pos: dict, k: int) -> _Filter | None:
    """Group condition ``c`` as the _Filter of its extreme members' ``ends`` (plan_for)."""
    if ends.__class__ is OneOf:
        return None
    low, high = (_filter(e, name, pos, k) for e in ends)
    if low is None or high is None or low.op not in _ORDERING or (low.attr, low.op, low.var, low.other) != \
            (high.attr, high.op, high.var, high.other) or \
            (low.arith is None) != (high.arith is None):
        return None
    return replace(low, conj=c, alt=replace(high, conj=c))


def _filter(c, name: str, pos: dict, k: int) -> _Filter | None:
    """``c`` as a _Filter on variable ``name`` (bound at step ``k``), or None."""
    attr, getter, op, ordering, _ = c.separable[name]
    expr = c.expr
    if expr.__class__ is not ast.Compare:
        return None
    if not ordering:
        return _equality(c, attr, op, expr, name, pos, k)
    arith = None
    if attr is None:
        spec = getattr(getter, "attr_arith", None)      # x.attr OP number (expressions)
        if spec is None:
            return None
        attr, arith = spec[0], _arith_spec(spec[1], spec[2], spec[3])
        if arith is None:
            return None
    if attr in FIELDS:
        return None
    other = expr.right if name in _names(expr.left) else expr.left
    if other.__class__ is ast.Literal:
        if not _exact(other.value):
            return None
        return _Filter(c, attr, op, float(other.value), arith=arith)
    other_arith = None
    if other.__class__ is ast.BinOp:
        for side, const, left in ((other.left, other.right, False),
                                  (other.right, other.left, True)):
            if side.__class__ is ast.Attr and const.__class__ is ast.Literal:
                other_arith = _arith_spec(other.op, const.value, left)
                if other_arith is None:
                    return None
                other = side
                break
    if other.__class__ is ast.Attr and other.index is None and other.attr not in FIELDS \
            and pos.get(other.var, k) < k:
        return _Filter(c, attr, op, None, pos[other.var], other.attr, arith, other_arith)
    if other_arith is None:             # any numeric term of the variables bound before
        names = _names(other)
        term = compile_term(other)
        if term is not None and names and all(pos.get(v, k) < k for v in names):
            return _Filter(c, attr, op, None, arith=arith, term=term,
                           term_steps=tuple((v, pos[v]) for v in sorted(names)))
    return None


def _equality(c, attr, op, expr, name: str, pos: dict, k: int) -> _Filter | None:
    """``x.attr = value`` or ``!=`` with a literal text or exact number, as a _Filter (its
    ``const`` the text itself, or the number as a float), or with an attribute of a
    variable bound before (``_joined``), or None."""
    mine = expr.left.__class__ is ast.Attr and expr.left.var == name
    other = expr.right if mine else expr.left
    if attr is None or attr in FIELDS:
        return None
    if other.__class__ is ast.Attr and other.index is None and other.attr not in FIELDS \
            and pos.get(other.var, k) < k:
        return _Filter(c, attr, op, None, pos[other.var], other.attr)
    if other.__class__ is not ast.Literal:
        return None
    value = other.value
    if value.__class__ is str:
        return _Filter(c, attr, op, value)
    return _Filter(c, attr, op, float(value)) if _exact(value) else None


def _text(f: _Filter) -> bool:
    """Whether ``f`` compares with a text (``_equality``)."""
    return f.const.__class__ is str


def _joined(f: _Filter) -> bool:
    """Whether ``f`` is an equality (``=``, ``!=``) with another variable's attribute, texts
    or numbers (``_equality``, ``_equal_join``)."""
    return f.const is None and f.term is None and f.op not in _ORDERING


def _equal_join(f: _Filter, col, cols, rows: list, parent, cand, table: dict) -> tuple:
    """``(held, unsure)`` of equality ``f`` per candidate ``cand`` of ``col`` against its
    binding's (``parent``) value of ``f.other``: two texts compared by their numbers in
    ``table`` (one numbering per evaluation, _Columns.text_ids), two exact numbers as
    float64; anything else is a comparison the evaluator fails or makes in Python
    (``unsure``)."""
    at = rows[f.var][parent]
    mine = col.text_ids(f.attr, table, True)[cand]
    theirs = cols[f.var].text_ids(f.other, table, True)[at]
    text = (mine >= 0) & (theirs >= 0)
    equal = mine == theirs
    unsure = ~text
    if unsure.any():
        values, odd = col.column(f.attr)
        other, other_odd = cols[f.var].column(f.other)
        number = ~odd[cand] & ~other_odd[at]
        equal = np.where(text, equal, values[cand] == other[at])
        unsure = ~(text | number)
    return (equal if f.op is operator.eq else ~equal), unsure


def _held(col, f: _Filter, at):
    """``(held, odd)`` of text filter ``f`` at rows ``at`` of ``col`` (_Columns or
    _Triggers): whether the row's value equals (or, for ``!=``, differs from) the text, and
    whether it is no ``str`` (the evaluator fails the comparison there)."""
    equal, odd = col.text(f.attr, f.const)
    held = equal[at]
    return (held if f.op is operator.eq else ~held), odd


def _arith_spec(op: str, const, left: bool) -> tuple | None:
    """``(numpy function, number, number on the left)`` for ``x OP number`` (``number OP x``
    when ``left``), or None (a number float64 does not hold exactly, a division by 0)."""
    if op not in _ARITH or not _exact(const) or (op == "/" and not left and const == 0):
        return None
    return _ARITH[op], float(const), left


def _exact(value) -> bool:
    return value.__class__ is not bool and kind_of(value) == EXACT


def _names(expr) -> set:
    return {n.var for n in ast.walk_expr(expr) if n.__class__ is ast.Attr}


_ORDERING = (operator.lt, operator.le, operator.gt, operator.ge)
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


class _Columns:
    """The events of one type in a time span, in each partition the triggers read, as numpy:
    the partitions' rows one after the other (partition ``p``'s from ``off[p]`` on), their
    times, and per attribute the values and whether each is not an exact number
    (TimeBuffer.numeric). ``search`` finds a time within a partition's rows."""

    def __init__(self, bufs: list, lo: float, hi: float):
        self.parts = [(buf, *buf.span(lo, hi)) if buf is not None else None for buf in bufs]
        sizes = [p[2] - p[1] if p is not None else 0 for p in self.parts]
        self.off = np.concatenate(([0], np.cumsum(sizes))).astype(np.intp)
        self.ts = np.array([t for p in self.parts if p is not None for t in p[0].times(*p[1:])],
                           dtype=np.float64)
        self._cols: dict = {}
        self._keys = None                   # (distinct times, partition * width + rank)

    def search(self, values, part, side: str):
        """Per entry: the first row of partition ``part`` (per entry, None: the only one)
        whose time is at or after (``side`` left) or after (right) ``values``; the row after
        the partition's last where none is."""
        if part is None or len(self.off) == 2:
            return np.searchsorted(self.ts, values, side)
        if self._keys is None:
            uniq = np.unique(self.ts)
            width = len(uniq) + 1
            segment = np.repeat(np.arange(len(self.off) - 1), np.diff(self.off))
            self._keys = (uniq, width, segment * width + np.searchsorted(uniq, self.ts))
        uniq, width, keys = self._keys
        return np.searchsorted(keys, part * width + np.searchsorted(uniq, values, side))

    def column(self, attr: str) -> tuple:
        """``(values, odd)``: odd also where a value is NaN (an Event made in Python may
        hold one; the evaluator's comparisons and extremes treat it their own way)."""
        col = self._cols.get(attr)
        if col is None:
            got = [p[0].numeric(p[1], p[2], attr) for p in self.parts if p is not None]
            if not got:
                col = (np.zeros(0), np.zeros(0, dtype=bool))
            else:
                values = np.concatenate([v for v, _ in got]) if len(got) > 1 else got[0][0]
                odd = np.concatenate([o for _, o in got]) if len(got) > 1 else got[0][1]
                col = (values, odd | np.isnan(values))
            self._cols[attr] = col
        return col

    def text(self, attr: str, value: str) -> tuple:
        """``(equal, odd)``: where ``attr`` holds the text ``value``, and where it holds no
        ``str`` (TimeBuffer.text_equal)."""
        key = (attr, value)
        col = self._cols.get(key)
        if col is None:
            got = [p[0].text_equal(p[1], p[2], attr, value) for p in self.parts
                   if p is not None]
            if not got:
                col = (np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))
            elif len(got) == 1:
                col = got[0]
            else:
                col = (np.concatenate([e for e, _ in got]), np.concatenate([o for _, o in got]))
            self._cols[key] = col
        return col

    def text_ids(self, attr: str, table: dict, grow: bool = False):
        """``attr`` of every row as the number ``table`` gives its text, -1 where it is no
        text (or, unless ``grow``, one ``table`` lacks) (TimeBuffer.text_ids); made once per
        attribute and table."""
        key = ("ids", attr, id(table))
        got = self._cols.get(key)
        if got is None:
            got = [p[0].text_ids(p[1], p[2], attr, table, grow) for p in self.parts
                   if p is not None]
            got = self._cols[key] = np.concatenate(got) if len(got) > 1 else \
                got[0] if got else np.zeros(0, dtype=np.int64)
        return got

    def events(self, rows) -> list:
        """The Events of ``rows`` (numpy, rows as above), one per entry."""
        if len(self.parts) == 1:
            buf, p0, _ = self.parts[0]
            return buf.events_at(p0, rows)
        out = [None] * len(rows)
        seg = np.searchsorted(self.off, rows, "right") - 1
        for k, part in enumerate(self.parts):
            if part is None or self.off[k + 1] == self.off[k]:
                continue
            buf, p0, _ = part
            sel = np.flatnonzero(seg == k)
            if len(sel):
                for i, ev in zip(sel.tolist(), buf.events_at(p0, rows[sel] - self.off[k])):
                    out[i] = ev
        return out


class _Triggers:
    """The triggers' attributes as numpy, like _Columns: values (NaN where not an exact
    number) and that mask, per attribute once."""

    def __init__(self, triggers: list):
        self.triggers = triggers
        self._cols: dict = {}

    def column(self, attr: str) -> tuple:
        col = self._cols.get(attr)
        if col is None:
            values, kinds = numeric_of([t.attrs.get(attr) for t in self.triggers])
            values = np.where(kinds == EXACT, values, np.nan)    # as _value of each
            col = self._cols[attr] = (values, np.isnan(values))
        return col

    def text_ids(self, attr: str, table: dict, grow: bool = False):
        """Like _Columns.text_ids, over the triggers."""
        key = ("ids", attr, id(table))
        got = self._cols.get(key)
        if got is None:
            number = text_numbers(table, grow)
            got = self._cols[key] = np.fromiter(
                (number(t.attrs.get(attr)) for t in self.triggers), dtype=np.int64,
                count=len(self.triggers))
        return got

    def text(self, attr: str, value: str) -> tuple:
        """Like _Columns.text, over the triggers."""
        key = (attr, value)
        col = self._cols.get(key)
        if col is None:
            got = [t.attrs.get(attr) for t in self.triggers]
            col = self._cols[key] = (
                np.fromiter((v.__class__ is str and v == value for v in got), dtype=bool,
                            count=len(got)),
                np.fromiter((v.__class__ is not str for v in got), dtype=bool,
                            count=len(got)))
        return col


def evaluate(plan: BulkPlan, index, partitions: list, triggers: list, window: float,
             label: str, order: tuple, cap: int | None, members=None, part=None,
             accepting: list | None = None) -> tuple:
    """Evaluate ``triggers`` (events of ``plan.types[0]``, in time order), each in its
    partition: ``partitions[part[i]]`` for trigger ``i`` (``part`` None: the only one). All
    partitions are evaluated together, their buffers' rows one after the other (_Columns).
    Returns ``(matches, bounds, good, tallies)``: the matches of the
    ``good`` triggers as the evaluator would give them, trigger ``i``'s being
    ``matches[bounds[i]:bounds[i + 1]]``; the others are left to the evaluator. The
    conditions' counters of the good triggers are added already; ``tallies``
    (``[(conjunct, tested, passed)]``, lists per trigger) says what to take back for a
    result not used (``untally``).

    ``members``: a query group's members (cep.runtime.members.MemberColumns): each binding
    is matched to the members that accept it, and the matches are theirs (a MatchBlock with
    ``members``), each trigger's member by member (in the group's order), each member's in
    enumeration order; a trigger with a binding they cannot decide is left to the
    evaluator.

    ``accepting``: per member, its ``(cq, branch)``: a group of skip-till-next-match
    variants, whose members each keep the (binding, member) pairs their own run selects
    (``_chosen``; the plan's ``accept`` is then None)."""
    n = len(triggers)
    tts = np.array([t.ts for t in triggers], dtype=np.float64)
    tlow_all = tts - window
    bad = np.zeros(n, dtype=bool)
    tpart = np.asarray(part, dtype=np.intp) if part is not None and len(partitions) > 1 \
        else None
    block = _Block(index, partitions, tpart, tts, tlow_all, {}, [], bad, [], {})
    cols = block.cols
    cols += [_Triggers(triggers)] + [block.columns(typ) for typ in plan.types[1:]]
    trig = np.arange(n)                  # per binding: its trigger
    rows = [trig]                        # per bound step: the row of each binding
    times = [tts]                        # per bound step: the event time of each binding
    tallies = block.tallies              # (conjunct, trigger per tested candidate, passed)
    last = len(plan.filters) - 1
    parent = trig
    cand = _screened(plan.filters[0], cols[0], trig, bad, tallies)
    for check in plan.checks[0] if plan.checks else ():     # on the trigger alone
        held, unsure = _checked(check, plan, cols, rows, 0, cand, cand)
        bad[cand[unsure]] = True
        tallies.append((check.conj, cand, held))
        cand = cand[held]
    trig = rows[0] = cand
    times[0] = tts[cand]
    for k in range(1, last + 1):
        filters, col, same = plan.filters[k], cols[k], plan.same[k]
        ts = col.ts
        # the range: after the latest event bound before (from the window's start) and before
        # the earliest bound after; a row at a bound's time that is not a bound event itself
        # is ordered by id there: such a trigger is left to the evaluator
        start, end, tie, first, stop = _span(
            col, block.part_of(trig), tlow_all[trig], [times[j] for j in plan.after[k]],
            [times[0]] + [times[j] for j in plan.before[k]], [times[j] for j in same])
        bad[trig[tie]] = True
        # the evaluator's first comparison of a plain attribute counts the range with the
        # bound events at its ends (TimeBuffer.select), the rest the events between them
        whole = bool(filters) and filters[0].arith is None and filters[0].op in _ORDERING
        if not whole:
            first, stop = start, end
        some = first < stop
        count = np.where(some, stop - first, 0)
        for f in filters:
            if _joined(f):               # (decided per candidate: _equal_join)
                continue
            # the evaluator fails such rows, or compares them row by row: any in a range
            odd = col.text(f.attr, f.const)[1] if _text(f) else col.column(f.attr)[1]
            if odd.any():
                cum = np.concatenate(([0], np.cumsum(odd)))
                bad[trig[some & (cum[stop] - cum[first] > 0)]] = True
        parent = np.repeat(np.arange(len(trig)), count)
        cand = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - first, count)
        for f in filters:
            passed = None
            for g in (f, f.alt) if f.alt is not None else (f,):
                if _text(g):
                    held = _held(col, g, cand)[0]
                    passed = held if passed is None else passed | held
                    continue
                if _joined(g):
                    held, unsure = _equal_join(g, col, cols, rows, parent, cand, block.texts)
                    bad[trig[parent[unsure]]] = True
                    passed = held if passed is None else passed | held
                    continue
                values = col.column(g.attr)[0][cand]
                if g.arith is not None:
                    values = _apply(g.arith, values)
                    bad[trig[parent[np.isnan(values)]]] = True
                if g.const is not None:
                    value = g.const
                else:
                    value = _bound(cols, rows, g, parent)
                    bad[trig[parent[np.isnan(value)]]] = True
                held = g.op(values, value)
                passed = held if passed is None else passed | held
            tallies.append((f.conj, trig[parent], passed))
            if whole:
                whole = False
                passed = passed & (cand >= start[parent]) & (cand < end[parent])
            cand, parent = cand[passed], parent[passed]
        for check in plan.checks[k] if plan.checks else ():
            held, unsure = _checked(check, plan, cols, rows, k, parent, cand)
            bad[trig[parent[unsure]]] = True
            tallies.append((check.conj, trig[parent], held))
            cand, parent = cand[held], parent[held]
        for g in plan.negations[k]:
            held = _absent(g, block, k, trig, rows, times, parent, cand)
            cand, parent = cand[held], parent[held]
        if k < last:
            trig = trig[parent]
            rows = [r[parent] for r in rows] + [cand]
            times = [t[parent] for t in times] + [ts[cand]]
    if plan.accept is not None:
        held = _contiguous(plan, block, trig, times, parent, cand)
        if held is None:
            held = _accepted(plan, Run(*plan.accept, index, None), partitions, tpart, cols,
                             rows, parent, cand, triggers, bad, tallies, block, trig)
        cand, parent = cand[held], parent[held]
    owner = trig[parent]                 # per binding: its trigger
    if cap is not None:
        bad |= np.bincount(owner, minlength=n) >= cap
    fanned = None
    if members is not None:
        fanned = _members(members, plan, cols, rows, times, parent, cand, owner, bad)
        if accepting is not None:
            fanned = _chosen(accepting, plan, index, partitions, tpart, cols, rows, parent,
                             cand, triggers, fanned, bad, tallies, block, trig)
    good = ~bad
    counts = _counted(tallies, good, n)
    return (*_matches(plan, cols, rows, parent, cand, owner, triggers, good, label, order,
                      fanned), good.tolist(), counts)


def _accepted(plan: BulkPlan, run: Run, partitions: list, tpart, cols, rows: list, parent,
              cand, triggers: list, bad, tallies: list, block=None, trig=None):
    """Per binding of the join: whether its selection strategy keeps it
    (cep.evaluation.strategies.accepts over the index, binding by binding, as the evaluator
    decides each binding it completes). The conditions it tests (skip-till-next-match's
    begin conditions over the gaps) are counted in ``tallies`` per trigger, not on the
    conditions; a trigger for which one fails is left to the evaluator (``bad``)."""
    if not len(cand):
        return np.zeros(0, dtype=bool)
    held = _next_match(run.cq, run.branch, plan, block, trig, rows, parent, cand,
                       np.arange(len(cand)), tallies)
    if held is not None:
        return held
    first = rows[0][parent]
    envs = _envs(plan, cols, rows, parent, cand, triggers, np.arange(len(cand)))
    runs = [replace(run, partition=p) for p in partitions]
    where = tpart[first].tolist() if tpart is not None else repeat(0)
    return _judged(zip(first.tolist(), map(runs.__getitem__, where), envs),
                   run.branch.conjuncts, len(cand), bad, tallies)


def _contiguous(plan: BulkPlan, block, trig, times: list, parent, cand):
    """Per binding of the join, whether a contiguity strategy keeps it, over columns: no
    event of the query's types (strategies._contiguous: of its partition under partition
    contiguity, the key's rows) strictly between its first and last event other than its
    own; a row at one of those two times that is not the binding's is ordered by id: its
    trigger is left to the evaluator. None where the rows read are not the partitions'
    (strict contiguity over several partitions, a partition that is not the key alone):
    ``accepts`` decides binding by binding."""
    cq = plan.accept[0]
    strict = cq.strategy == "strict_contiguity" or not cq.equivalence
    if cq.strategy not in ("strict_contiguity", "partition_contiguity") or None in cq.positive_types:
        return None
    if strict:
        if block.part is not None or block.partitions[0] is not ALL:
            return None
    elif block.partitions[0] is ALL or tuple(cq.equivalence) != (block.index.key_attr,):
        return None
    if not len(cand):
        return np.zeros(0, dtype=bool)
    last = len(plan.names) - 1
    owner = trig[parent]
    stamps = [t[parent] for t in times[:last]] + [block.cols[last].ts[cand]]
    first, end = np.minimum.reduce(stamps), np.maximum.reduce(stamps)
    part = block.part_of(owner)
    between = at_first = at_end = 0
    for typ in set(cq.positive_types):
        col = block.columns(typ)
        a, b = col.search(first, part, "left"), col.search(first, part, "right")
        c, d = col.search(end, part, "left"), col.search(end, part, "right")
        between = between + np.maximum(c - b, 0)
        at_first = at_first + (b - a)
        at_end = at_end + (d - c)
    for t in stamps:                     # the binding's own events are no gap
        between = between - ((t > first) & (t < end))
        at_first = at_first - (t == first)
        at_end = at_end - (t == end)
    at_end = np.where(end > first, at_end, 0)      # (one time: the rows counted once)
    block.bad[owner[(at_first != 0) | (at_end != 0)]] = True
    return between == 0


def _chosen(accepting: list, plan: BulkPlan, index, partitions: list, tpart, cols,
            rows: list, parent, cand, triggers: list, fanned: tuple, bad, tallies: list,
            block=None, trig=None):
    """``fanned`` (``_members``' pairs of a binding and a member whose conditions hold)
    less the pairs whose member's own skip-till-next-match run does not select the binding
    (``accepts`` under the member's query, as cep.runtime.groups decides a binding's members
    one by one); counted like ``_accepted``."""
    binding, member, names = fanned
    if not len(binding):
        return fanned
    held = np.zeros(len(binding), dtype=bool)
    rest = []
    for k in np.unique(member).tolist():            # member by member: its own conditions
        cq, branch = accepting[k]
        sel = np.flatnonzero(member == k)
        got = _next_match(cq, branch, plan, block, trig, rows, parent, cand, binding[sel],
                          tallies)
        if got is None:
            rest.append(k)
        else:
            held[sel] = got
    if rest:
        held |= _chosen_one_by_one(accepting, rest, plan, index, partitions, tpart, cols,
                                   rows, parent, cand, triggers, binding, member, bad,
                                   tallies)
    trig_of = rows[0][parent][binding]
    held &= ~bad[trig_of]               # (a trigger a judgement failed on is left whole)
    return binding[held], member[held], names


def _chosen_one_by_one(accepting: list, rest: list, plan: BulkPlan, index, partitions: list,
                       tpart, cols, rows: list, parent, cand, triggers: list, binding, member,
                       bad, tallies: list):
    """``_chosen`` for the members ``rest``: ``accepts`` pair by pair."""
    sel_all = np.flatnonzero(np.isin(member, rest))
    used = np.unique(binding[sel_all])
    envs = dict(zip(used.tolist(), _envs(plan, cols, rows, parent, cand, triggers, used)))
    trig = rows[0][parent][binding]
    where = tpart[trig] if tpart is not None else np.zeros(len(binding), dtype=np.intp)
    held = np.zeros(len(binding), dtype=bool)
    for k in rest:
        cq, branch = accepting[k]
        sel = np.flatnonzero(member == k)
        runs = {p: Run(cq, branch, index, partitions[p]) for p in np.unique(where[sel]).tolist()}
        held[sel] = _judged(zip(trig[sel].tolist(), map(runs.__getitem__, where[sel].tolist()),
                                map(envs.__getitem__, binding[sel].tolist())),
                            branch.conjuncts, len(sel), bad, tallies)
    return held


def _next_match(cq, branch, plan: BulkPlan, block, trig, rows: list, parent, cand, at,
                tallies: list):
    """Skip-till-next-match over columns for the bindings ``at`` (positions among the
    join's candidates ``cand``) of a sequence without Kleene variables: a binding is kept
    unless, between two of its events in time order, an event of the second one's type
    (in its partition) satisfies that one's conditions on it and the events before (the
    NFA^b's begin condition, strategies.accepts). The conditions are tested as ``accepts``
    tests them: gap by gap, event by event in time order, each event's conditions in turn
    up to the first that fails, up to the first event that satisfies them all; what they
    count goes to ``tallies`` per trigger; a trigger with a value the columns cannot
    compare is left to the evaluator. None where this does not apply (a Kleene variable, a
    variable of any type, an equivalence not the partition key alone, variables not in one
    time order, a condition that is not one of numbers)."""
    if block is None or cq.strategy != "skip_till_next_match" or \
            None in cq.positive_types or any(v.kleene for v in branch.positives):
        return None
    key_attr = block.index.key_attr
    if block.partitions[0] is ALL:
        if cq.equivalence:
            return None
    elif tuple(cq.equivalence) != (key_attr,):
        return None
    names = plan.names
    m = len(names)
    earlier = [set(plan.after[k]) for k in range(m)]       # the steps whose events precede
    for k in range(m):
        for j in plan.before[k]:
            earlier[j].add(k)
    steps = sorted(range(m), key=lambda k: len(earlier[k]))
    if any(earlier[k] != set(steps[:i]) for i, k in enumerate(steps)):
        return None                      # not one time order
    variables = {v.name: v for v in branch.positives}
    gaps = []                            # (step before, step after, its conditions' fns)
    for i in range(1, len(steps)):
        name = names[steps[i]]
        bound = {names[k] for k in steps[:i + 1]}
        conjs = [c for c in branch.conjuncts if name in c.vars and c.vars <= bound]
        fns = [compile_vector(c.expr) if c.kleene_i is None else None for c in conjs]
        if None in fns:
            return None
        gaps.append((steps[i - 1], steps[i], conjs, fns, variables[name].type))
    n = len(at)
    if not n:
        return np.zeros(0, dtype=bool)
    cols, bad = block.cols, block.bad
    last = len(names) - 1
    owner = trig[parent[at]]
    part = block.part_of(owner)
    where = [rows[k][parent[at]] if k < last else cand[at] for k in range(len(names))]
    stamps = [block.tts[where[0]]] + [cols[k].ts[where[k]] for k in range(1, len(names))]
    held = np.ones(n, dtype=bool)
    for p, q, conjs, fns, typ in gaps:
        live = np.flatnonzero(held)
        if not len(live):
            break
        col = block.columns(typ)
        lo_t, hi_t = stamps[p][live], stamps[q][live]
        lp = None if part is None else part[live]
        start, end = col.search(lo_t, lp, "right"), col.search(hi_t, lp, "left")
        ties = (start - col.search(lo_t, lp, "left")) + (col.search(hi_t, lp, "right") - end)
        ties = ties - (plan.types[p] == typ) - (plan.types[q] == typ)
        bad[owner[live[ties > 0]]] = True
        count = np.maximum(end - start, 0)
        which = np.repeat(np.arange(len(live)), count)            # per gap event: binding
        gap = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - start, count)
        if not len(gap):
            continue
        rank = gap - start[which]                        # its place in its gap

        def get(var, attr, which=which, gap=gap, col=col, qname=names[q]):
            if var == qname:
                values, odd = col.column(attr)
                return values[gap], odd[gap]
            k = names.index(var)
            values, odd = cols[k].column(attr)
            rows_k = where[k][live][which]
            return values[rows_k], odd[rows_k]
        reached = np.ones(len(gap), dtype=bool)         # the conditions tested so far held
        truths = []
        for c, fn in zip(conjs, fns):
            truth, unsure = fn(get, None)
            truth = np.broadcast_to(truth, (len(gap),))
            unsure = np.broadcast_to(unsure, (len(gap),))
            bad[owner[live[which[reached & unsure]]]] = True
            truths.append((c, reached.copy(), truth))
            reached = reached & truth
        # an event satisfying them all ends the run; the events after it are not tested
        firsts = np.full(len(live), np.iinfo(np.intp).max, dtype=np.intp)
        hit = np.flatnonzero(reached)
        np.minimum.at(firsts, which[hit], rank[hit])
        tested = rank <= firsts[which]
        for c, reach, truth in truths:
            mine = tested & reach
            tallies.append((c, owner[live[which[mine]]], truth[mine]))
        held[live[firsts < np.iinfo(np.intp).max]] = False
    return held



def _envs(plan: BulkPlan, cols, rows: list, parent, cand, triggers: list, at) -> list:
    """The bindings ``at`` (positions among the join's ``cand``) as dicts, variable ->
    Event."""
    last = len(plan.names) - 1
    bound = [list(map(triggers.__getitem__, rows[0][parent[at]].tolist()))]
    bound += [cols[k].events(rows[k][parent[at]]) for k in range(1, last)]
    bound.append(cols[last].events(cand[at]))
    names = plan.names
    return [dict(zip(names, events)) for events in zip(*bound)]


def _judged(todo, conjs: list, n: int, bad, tallies: list):
    """``accepts(run, env)`` of each ``(trigger, run, env)`` of ``todo`` (``n`` of them);
    what the conditions ``conjs`` count meanwhile is taken back and put in ``tallies`` per
    trigger, a trigger for which one fails is marked ``bad`` (_accepted)."""
    saved = [(c.tested, c.passed, c.failed, c.last_error) for c in conjs]
    counted: list = [[] for _ in conjs]          # per condition: (trigger, tested, passed)
    held = np.zeros(n, dtype=bool)
    for i, (t, run, env) in enumerate(todo):
        before = [(c.tested, c.passed, c.failed) for c in conjs]
        held[i] = accepts(run, env)
        for k, c in enumerate(conjs):
            if c.tested != before[k][0]:
                counted[k].append((t, c.tested - before[k][0], c.passed - before[k][1]))
                if c.failed != before[k][2]:
                    bad[t] = True
    for c, (tested, passed, failed, error) in zip(conjs, saved):
        c.tested, c.passed, c.failed, c.last_error = tested, passed, failed, error
    for c, got in zip(conjs, counted):
        if got:
            t, dt, dp = map(np.asarray, zip(*got))
            tallies.append((c, np.repeat(t, dt),
                            np.arange(int(dt.sum())) - np.repeat(np.cumsum(dt) - dt, dt)
                            < np.repeat(dp, dt)))
    return held


def _counted(tallies: list, good, n: int) -> list:
    """Add the ``good`` triggers' tallies to their conditions' counters; returns each
    condition's per-trigger counts (``untally``)."""
    counts = []
    for conj, tested, passed in tallies:
        t = np.bincount(tested, minlength=n)
        p = np.bincount(tested[passed], minlength=n)
        conj.tested += int(t[good].sum())
        conj.passed += int(p[good].sum())
        counts.append((conj, t.tolist(), p.tolist()))
    return counts


def _values(cols, rows: list, steps: dict, k: int, parent, cand):
    """``get(var, attr)`` (cep.evaluation.vector): the bindings' values of ``attr`` of the
    variable bound at step ``steps[var]``; step ``k``'s are the candidates ``cand``'s, the
    others those of each candidate's binding (``parent``). ``get.ids(var, attr, table)``:
    their texts as ``table`` numbers them (-1: no text of it, _Columns.text_ids)."""
    def get(var, attr):
        j = steps[var]
        values, odd = cols[j].column(attr)
        at = cand if j == k else rows[j][parent]
        return values[at], odd[at]

    def ids(var, attr, table):
        j = steps[var]
        return cols[j].text_ids(attr, table)[cand if j == k else rows[j][parent]]
    get.ids = ids
    return get


def _one_of(spec: OneOf):
    """``fn(get, const) -> (truth, unsure)`` of a OneOf (as cep.evaluation.vector's): its
    attribute's value is one of the constants. A value of another kind is no member's (the
    group's condition is false there, never a failure); a value that is no exact number is
    left to the evaluator when the constants are numbers."""
    if spec.texts:
        table = spec.table

        def texts(get, const):
            return get.ids(spec.var, spec.attr, table) >= 0, False
        return texts
    consts = np.asarray(spec.values, dtype=np.float64)

    def numbers(get, const):
        values, odd = get(spec.var, spec.attr)
        return np.isin(values, consts) & ~odd, odd
    return numbers


def _screened(filters: tuple, col: _Triggers, cand, bad, tallies: list):
    """The triggers among ``cand`` (positions) that pass the trigger's own ``filters``,
    each filter counted over the triggers the one before passed (as the evaluator tests
    them); ``bad``: the triggers with a value the columns cannot compare."""
    for f in filters:
        passed = None
        for g in (f, f.alt) if f.alt is not None else (f,):
            if _text(g):
                held, odd = _held(col, g, cand)
                bad |= odd
            else:
                values = col.column(g.attr)[0]
                if g.arith is not None:
                    values = _apply(g.arith, values)
                bad |= np.isnan(values)
                held = g.op(values[cand], g.const)
            passed = held if passed is None else passed | held
        tallies.append((f.conj, cand, passed))
        cand = cand[passed]
    return cand


def trigger_filters(steps: tuple, opaque: dict) -> tuple | None:
    """The trigger's own conditions (``steps[0].filters``, what the evaluator tests first)
    as _Filters, for ``screen``; None where one is no such filter or the trigger is a
    Kleene variable."""
    first = steps[0]
    if first.var.kleene or first.var.negated or first.var.type is None or \
            not first.filters or any(id(c) in opaque for c in first.filters):
        return None
    name = first.var.name
    filters = tuple(_filter(c, name, {name: 0}, 0) for c in first.filters)
    return None if None in filters else filters


def screen(filters: tuple, triggers: list) -> tuple:
    """``evaluate``'s result for ``triggers`` where only their own conditions (``filters``,
    trigger_filters) are decided in bulk: the triggers that fail one are ``good`` (no match:
    the evaluator stops there), their counters added; the others are left to the
    evaluator."""
    n = len(triggers)
    bad = np.zeros(n, dtype=bool)
    tallies: list = []
    kept = _screened(filters, _Triggers(triggers), np.arange(n), bad, tallies)
    bad[kept] = True
    good = ~bad
    counts = _counted(tallies, good, n)
    return [], [0] * (n + 1), good.tolist(), counts


def _members(members, plan: BulkPlan, cols, rows: list, times: list, parent, cand, owner,
             bad) -> tuple:
    """``(binding, member)`` per match of a group's bindings (evaluate's ``members``), in
    output order; the triggers of a binding the members cannot decide are marked ``bad``."""
    last = len(plan.names) - 1
    get = _values(cols, rows, {name: k for k, name in enumerate(plan.names)}, last, parent,
                  cand)
    stamps = [t[parent] for t in times[:last]] + [cols[last].ts[cand]]
    first, end = np.minimum.reduce(stamps), np.maximum.reduce(stamps)
    binding, member, unsure = members.resolve(get, first, end, frozenset(plan.names))
    bad[owner[unsure]] = True
    keep = ~bad[owner[binding]]
    binding, member = binding[keep], member[keep]
    # by trigger, then member, then binding: ``binding`` comes ascending (resolve), so a
    # stable sort on (trigger, member) keeps it (a third of lexsort's time on 1M pairs)
    at = np.argsort(owner[binding] * len(members.names) + member, kind="stable")
    return binding[at], member[at], members.names


def _checked(check: _Check, plan: BulkPlan, cols, rows: list, k: int, parent, cand) -> tuple:
    """``(held, unsure)`` of ``check`` per candidate of step ``k`` (``parent``: its binding
    among ``rows``)."""
    get = _values(cols, rows, {name: j for j, name in enumerate(plan.names)}, k, parent, cand)
    held = unsure = None
    for fn in check.fns:
        got, bad = fn(get, None)
        held = got if held is None else held | got
        unsure = bad if unsure is None else unsure | bad
    n = len(cand)                        # (an unsure one's trigger is left to the evaluator)
    return np.broadcast_to(held, (n,)).copy(), np.broadcast_to(unsure, (n,))


def untally(counts: list, i: int) -> None:
    """Take back the counters ``evaluate`` added for trigger ``i``."""
    for conj, tested, passed in counts:
        conj.tested -= tested[i]
        conj.passed -= passed[i]


def _span(col, part, tlow, after: list, before: list, same: list) -> tuple:
    """``(start, end, tie, first, stop)`` per binding: ``start`` to ``end - 1`` are the rows
    of ``ts`` from ``tlow`` on, strictly after the latest time of ``after`` and strictly
    before the earliest of ``before`` (the evaluator's candidates, cep.evaluation.evaluator),
    ``first`` to ``stop - 1`` the same with the rows at those two times (the range
    ``TimeBuffer.select`` counts); ``tie``: a row at one of those times is not one of the
    bound events of that type (``same``), so the evaluator orders it by id: left to the
    evaluator."""
    hi = before[0]
    for t in before[1:]:
        hi = np.minimum(hi, t)
    end, stop = col.search(hi, part, "left"), col.search(hi, part, "right")
    extra = stop - end
    for t in same:
        extra -= t == hi
    start = first = col.search(tlow, part, "left")
    if after:
        latest = after[0]
        for t in after[1:]:
            latest = np.maximum(latest, t)
        inside = latest >= tlow
        left, right = col.search(latest, part, "left"), col.search(latest, part, "right")
        start, first = np.where(inside, right, start), np.where(inside, left, start)
        over = right - left
        for t in same:
            over -= t == latest
        extra += np.where(inside, over, 0)
    return start, end, extra > 0, first, stop


@dataclass(frozen=True)
class _Block:
    """What one ``evaluate`` call shares with its negations: where the buffers are, the
    triggers' times and window starts, the columns (``spans`` per type, ``cols`` per step),
    and what they report: ``bad`` (the triggers left to the evaluator) and ``tallies``."""
    index: object
    partitions: list
    part: object                 # per trigger: its partition's number (None: one partition)
    tts: np.ndarray
    tlow_all: np.ndarray
    spans: dict
    cols: list
    bad: np.ndarray
    tallies: list
    texts: dict                  # the texts compared with each other, numbered (_equal_join)

    def columns(self, typ) -> _Columns:
        """The buffer of ``typ`` over the triggers' time span, made once per type."""
        col = self.spans.get(typ)
        if col is None:
            col = self.spans[typ] = _Columns(
                [self.index.buffer(p, typ) for p in self.partitions],
                float(self.tlow_all.min()), float(self.tts.max()))
        return col

    def part_of(self, trig):
        """The partition of each trigger of ``trig`` (None: one partition)."""
        return None if self.part is None else self.part[trig]


def _absent(g: _Negation, block: _Block, k: int, trig, rows: list, times: list, parent,
            cand):
    """Per candidate of step ``k`` (``trig``, ``rows``, ``times``: the bindings so far,
    ``parent``: each candidate's binding): whether negation ``g`` holds, i.e. no event
    between its bounds satisfies its filters: with ``g.extreme`` the range's minimum or
    maximum compared once (the evaluator's suffix extremes, ``Evaluation.violated``), else
    each filter over the range's events, counted."""
    col = block.columns(g.type)
    cols, bad, tallies = block.cols, block.bad, block.tallies
    owner = trig[parent]

    def bound(j):
        return cols[k].ts[cand] if j == k else times[j][parent]
    start, end, tie, _, _ = _span(col, block.part_of(owner), block.tlow_all[owner],
                                  [bound(j) for j in g.before],
                                  [bound(j) for j in g.after], [bound(j) for j in g.same])
    some = start < end
    for f in g.filters:
        odd = col.column(f.attr)[1]
        if odd.any():                     # a number float64 does not hold, or no number
            cum = np.concatenate(([0], np.cumsum(odd)))
            tie |= some & (cum[end] - cum[start] > 0)
    values = [_other(f, k, cols, rows, parent, cand) for f in g.filters]
    for value in values:
        if value.__class__ is not float:
            tie |= np.isnan(value)
    bad[owner[tie]] = True
    if not g.filters:
        return ~some
    if g.extreme:
        f, value = g.filters[0], values[0]
        low = f.op in (operator.lt, operator.le)
        padded = np.append(col.column(f.attr)[0], np.inf if low else -np.inf)
        at = np.empty(2 * len(start), dtype=np.intp)
        at[0::2], at[1::2] = start, np.maximum(start, end)
        if not len(at):
            return some
        extreme = (np.minimum if low else np.maximum).reduceat(padded, at)[0::2]
        return ~(some & f.op(extreme, value))
    count = np.where(some, end - start, 0)
    which = np.repeat(np.arange(len(cand)), count)
    witness = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - start, count)
    for f, value in zip(g.filters, values):
        got = col.column(f.attr)[0][witness]
        if f.arith is not None:
            got = _apply(f.arith, got)
            bad[owner[which[np.isnan(got)]]] = True
        passed = f.op(got, value if value.__class__ is float else value[which])
        tallies.append((f.conj, owner[which], passed))
        which, witness = which[passed], witness[passed]
    return np.bincount(which, minlength=len(cand)) == 0


def _other(f: _Filter, k: int, cols, rows, parent, cand):
    """The value ``f`` compares with per candidate of step ``k``: its number, or the other
    side from the binding (NaN where not an exact number)."""
    if f.const is not None:
        return f.const
    if f.term is not None:
        return _term_values(f, k, cols, rows, parent, cand)
    if f.var == k:
        got, odd = cols[k].column(f.other)
        value = np.where(odd[cand], np.nan, got[cand])
        return _apply(f.other_arith, value) if f.other_arith is not None else value
    return _bound(cols, rows, f, parent)


def _value(value) -> float:
    """``value`` as a float when it is an exact number, else NaN (see ``_apply``)."""
    if value is not None and value.__class__ is not bool and kind_of(value) == EXACT:
        return float(value)
    return np.nan


def _apply(spec: tuple, values):
    """The arithmetic ``spec`` (_Filter) over float64 ``values``: what the evaluator computes
    where both are exact (IEEE arithmetic is what Python's float does; an int result is
    exact below 2**53); NaN where that is not sure (from 2**53 on, a division by 0)."""
    fn, const, left = spec
    with np.errstate(all="ignore"):
        out = fn(const, values) if left else fn(values, const)
    out[~(np.abs(out) < EXACT_INT)] = np.nan
    return out


def _bound(cols, rows, f: _Filter, parent):
    """The value of ``f``'s other side for each candidate (``parent``: its binding), NaN
    where it is not an exact number."""
    if f.term is not None:
        return _term_values(f, -1, cols, rows, parent, None)
    got, odd = cols[f.var].column(f.other)
    at = rows[f.var][parent]
    values = np.where(odd[at], np.nan, got[at])
    return _apply(f.other_arith, values) if f.other_arith is not None else values


def _term_values(f: _Filter, k: int, cols, rows, parent, cand):
    """``f``'s term per candidate (``parent``: its binding; step ``k``'s own value is the
    candidate's), NaN where it is not sure."""
    values, unsure = f.term(_values(cols, rows, dict(f.term_steps), k, parent, cand))
    values = np.array(values, dtype=np.float64)
    values[np.broadcast_to(unsure, values.shape)] = np.nan
    return values


def _matches(plan, cols, rows, parent, cand, owner, triggers, good, label, order,
             fanned=None) -> tuple:
    """``(matches, bounds)``: the matches of the ``good`` triggers as a MatchBlock (one
    Match.batch per prefix binding, in enumeration order, as cep.evaluation.evaluator makes them;
    the Events of the bound rows made in bulk), trigger ``i``'s being
    ``matches[bounds[i]:bounds[i + 1]]``."""
    n = len(triggers)
    keep = good[owner]
    if fanned is not None:              # only the bindings of a member's match are kept
        binding, member, names = fanned
        used = np.zeros(len(keep), dtype=bool)
        used[binding] = True
        keep &= used
        binding = (np.cumsum(keep) - 1)[binding]
    if not keep.all():
        parent, cand, owner = parent[keep], cand[keep], owner[keep]
    if fanned is not None:
        bounds = np.searchsorted(owner[binding], np.arange(n + 1)).tolist()
        if not len(binding):
            return [], bounds
    else:
        bounds = np.searchsorted(owner, np.arange(n + 1)).tolist()
    if not len(owner):
        return [], bounds
    last = len(plan.names) - 1
    # each prefix binding with a match, and its events
    cut = np.flatnonzero(parent[1:] != parent[:-1]) + 1
    firsts = parent[np.concatenate(([0], cut))]
    heads = [list(map(triggers.__getitem__, rows[0][firsts].tolist()))]
    heads += [cols[k].events(rows[k][firsts]) for k in range(1, last)]
    prefix = np.repeat(np.arange(len(firsts)), np.diff(np.concatenate(([0], cut,
                                                                       [len(parent)]))))
    present = np.flatnonzero(np.bincount(cand))     # the distinct last events
    at = np.zeros(len(present) and int(present[-1]) + 1, dtype=np.intp)
    at[present] = np.arange(len(present))
    if fanned is None:
        return MatchBlock(label, tuple(plan.names), order, plan.batch, heads[:last], prefix,
                          cols[last].events(present), at[cand]), bounds
    return MatchBlock(label, tuple(plan.names), order, plan.batch, heads[:last],
                      prefix[binding], cols[last].events(present), at[cand][binding], names,
                      member), bounds
