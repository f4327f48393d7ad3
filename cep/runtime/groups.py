"""Query groups: queries of one structure that differ only in constants, evaluated as one.

Multi-query sharing (issue 15). Queries with the same pattern, variable names and types,
strategy, equivalence attributes, disorder mode and forced plan whose WHERE conjuncts have the
same shape form a group: one trigger detection, one candidate range lookup per variable and one
join enumeration per trigger (Lazy Chain NFA, "Efficient Detection of Complex Event Patterns Using Lazy Chain Automata", sections 3-5) over the group's *loosest*
conditions, then each binding is tested against the members' constants through an index, as
Esper's filter service indexes the constants of many statements rather than testing each:

- an ordering comparison whose only differing constant sits under ``+``, ``-``, ``*``, unary
  minus, or a ``/`` (as a divisor only when every member's value has one sign): its truth is
  monotone in the constant, so the accepting members are a prefix or a suffix of the members
  sorted by it, found by bisection (O(log k) evaluations for k distinct constants);
- an equality ``expr = constant``: a hash map from the constant to its members;
- anything else: each distinct constant once (members with equal constants share the result).

Constants that change which events a query takes rather than which bindings it keeps are part
of the group key instead (conjuncts of negated or Kleene variables, SLIDE; the contiguity
strategies accept a binding by its events alone, so their constants may differ). Under
skip-till-next-match a member's constants also decide which events its run skips: the group's
join still finds every binding any member can keep (its Kleene runs, whose conditions do not
differ, are chosen once), and each binding is then accepted per member under the member's own
conditions (cep.evaluation.strategies.accepts), where one query's evaluation accepts it. Different windows share a group when the pattern has
no negation: the join runs over the largest and each member keeps the bindings within its own.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from bisect import bisect_left
from itertools import repeat
from operator import itemgetter

from raycep.cep.evaluation.loose import one_of
from raycep.cep.evaluation.manager import PatternManager, _timed
from raycep.cep.evaluation.strategies import Run, accepts
from raycep.cep.event import Event
from raycep.cep.lang import ast
from raycep.cep.lang.compiler import CompiledQuery, compile_query
from raycep.cep.lang.expressions import ORDERING, EvalFailure, arith_getter, compile_expr
from raycep.cep.lang.validate import conjuncts as split_conjuncts
from raycep.cep.match import Match, MatchBlock
from raycep.cep.store.index import ALL

_new = tuple.__new__
_BASE, _VAR, _EVENT = itemgetter(1), itemgetter(2), itemgetter(3)
_SKIP = frozenset(("pos", "text"))
_MONOTONE_OPS = frozenset(("+", "-", "*"))
_TOKENS = itertools.count()           # unique tokens of group conditions (cep.evaluation.prefixes)
_SAFE = 2 ** 53                       # larger ints may overflow float arithmetic (a failure)
#: strategies under which a constant decides which bindings a query keeps, never which events
#: it takes: contiguity is a property of the binding's events alone (cep.evaluation.strategies)
_LOOSE = frozenset(("skip_till_any_match", "strict_contiguity", "partition_contiguity"))
_NEXT = "skip_till_next_match"      # constants may differ; each member accepts its bindings


# --------------------------------------------------------------------------- signatures

def _kind(value) -> str:
    if value.__class__ is bool:
        return "bool"
    if value.__class__ in (int, float):
        return "number"
    return type(value).__name__


def _shape(node, lits: list):
    """A hashable description of an AST node without its literal values (appended to
    ``lits`` in traversal order) and source positions."""
    if node.__class__ is ast.Literal:
        lits.append(node.value)
        return ("lit", _kind(node.value))
    if isinstance(node, tuple):
        return tuple(_shape(x, lits) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (node.__class__.__name__,) + tuple(
            _shape(getattr(node, f.name), lits) for f in dataclasses.fields(node)
            if f.name not in _SKIP)
    return node


def _bind(node, params: dict):
    """``node`` with every parameter that has a value replaced by a literal."""
    if node.__class__ is ast.Param:
        return ast.Literal(params[node.name], node.pos) if node.name in params else node
    if isinstance(node, tuple):
        return tuple(_bind(x, params) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {f.name: _bind(getattr(node, f.name), params)
                   for f in dataclasses.fields(node) if f.init and f.name not in _SKIP}
        return dataclasses.replace(node, **changes)
    return node


@dataclasses.dataclass(frozen=True)
class Member:
    """One query of a group: its name, compiled query, the literal values of each conjunct
    that may differ within the group (() for one that may not) and its window."""
    name: str
    cq: CompiledQuery
    params: dict
    values: tuple
    window: float
    floor: float = -math.inf            # registered mid-stream: reads no event up to floor,
    since: float = -math.inf            # and evaluates no trigger up to since


def signature(query: ast.Query, params: dict, cq: CompiledQuery, mode: str, order,
              name: str, start: tuple = (-math.inf, -math.inf)) -> tuple:
    """``(key, member)``: queries with equal keys can be evaluated as one group. Members
    registered at different times (``start``: Engine.add_query's floor and since) share a group unless the
    query has a leading negation (its events, before the first bound one, would be read from
    the group's floor, not the member's)."""
    if params:
        query = _bind(query, params)
    taking = _taking(query.pattern, cq)
    loose = query.strategy in _LOOSE or (query.strategy == _NEXT and len(cq.branches) == 1)
    negation = any(v.negated for v in cq.variables.values())
    key: list = [_shape(query.pattern, []), tuple(query.equivalence), query.strategy, mode,
                 tuple(order) if order is not None else None]
    values = []
    for expr, c in zip(split_conjuncts(query.where), cq.conjuncts):
        lits: list = []
        shape = _shape(expr, lits)
        if loose and not taking(c.vars, expr):
            key.append(shape)
            values.append(tuple(lits))
        else:                               # the constants decide which events are taken
            key.append((shape, tuple(lits)))
            values.append(())
    if cq.slide is not None:
        key.append(("slide", object()))     # slides batch triggers: never shared
    key.append(("within", None) if loose and not negation else ("within", cq.window))
    if any(not n.before for b in cq.branches for n in b.negations):
        key.append(("floor", start[0]))
    return tuple(key), Member(name, cq, dict(params or {}), tuple(values), cq.window, *start)


def _taking(pattern, cq: CompiledQuery):
    """Whether a conjunct (its variables, its expression) decides which events a run takes
    (so its constants are part of the group key): one over a negated variable, or a begin or
    take condition of a Kleene variable. In a sequence of variables a conjunct is the
    condition of the last variable it names (cep.evaluation.strategies), so one that reads a
    Kleene variable before a simple one as a whole (``c.price < LAST(b.price) * 0.99``: an
    element by position, LEN, an aggregate of all elements) keeps bindings, as the simple
    variable's conditions do; element by element (``b.x``, ``b[i-1].x``, ``sum(b[..i].x)``)
    or in other patterns it decides."""
    kleene = {n for n, v in cq.variables.items() if v.kleene}
    negated = {n for n, v in cq.variables.items() if v.negated}
    flat = pattern.__class__ is ast.Seq and all(
        c.__class__ is ast.EventVar for c in pattern.children)
    position = {n: i for i, n in enumerate(cq.variables)}

    def taking(names, expr) -> bool:
        if names & negated:
            return True
        if not names & kleene:
            return False
        return not flat or max(names, key=position.__getitem__) in kleene or \
            _element_wise(expr, kleene)
    return taking


def _element_wise(expr, kleene: set) -> bool:
    """Whether ``expr`` reads a Kleene variable of ``kleene`` element by element."""
    return any((n.__class__ is ast.Attr and n.var in kleene
                and (n.index is None or n.index.base == "i"))
               or (n.__class__ is ast.Aggregate and n.var in kleene and n.upto is not None)
               for n in ast.walk_expr(expr))


# --------------------------------------------------------------------------- constant indexes

def _failing(fn):
    def check(env):
        try:
            return bool(fn(env, None))
        except EvalFailure:
            return False
    return check


def _literal_path(node, k: int):
    """The chain of nodes from ``node`` down to its ``k``-th literal (traversal order of
    ``_shape``), or None."""
    count = [0]

    def walk(n, path):
        if n.__class__ is ast.Literal:
            if count[0] == k:
                return path + [n]
            count[0] += 1
            return None
        children = n if isinstance(n, tuple) else (
            [getattr(n, f.name) for f in dataclasses.fields(n) if f.name not in _SKIP]
            if dataclasses.is_dataclass(n) and not isinstance(n, type) else [])
        for child in children:
            found = walk(child, path + ([n] if not isinstance(n, tuple) else []))
            if found is not None:
                return found
        return None
    return walk(node, [])


def _monotone(expr, k: int, values: list) -> bool:
    """Whether the truth of conjunct ``expr`` is monotone in its ``k``-th literal over
    ``values`` (an ordering comparison; the literal under +, -, *, unary minus, or /)."""
    if expr.__class__ is not ast.Compare or expr.op not in ORDERING:
        return False
    if not all(v.__class__ in (int, float) and abs(v) < _SAFE for v in values):
        return False
    path = _literal_path(expr, k)
    if path is None:
        return False
    for parent, child in zip(path[1:-1], path[2:]):
        if parent.__class__ is ast.Neg:
            continue
        if parent.__class__ is not ast.BinOp:
            return False
        if parent.op in _MONOTONE_OPS:
            continue
        if parent.op == "/":
            if parent.left is child:
                continue
            if all(v > 0 for v in values) or all(v < 0 for v in values):
                continue
        return False
    return True


class Variants:
    """The distinct constants of one conjunct among a group's members: which members accept a
    binding (``mask``, bit k = member k) and whether any does (``any``)."""

    def __init__(self, expr, entries: list, kind: str, other=None, separable=None,
                 variables=frozenset()):
        self.expr = expr
        self.vars = variables               # a binding without them: the conjunct's DNF
                                            # branch is another one (it does not apply)
        self.kind = kind                    # "ordered", "equal" or "scan"
        #: ordered: {var: (attr, getter, op, ordering, loosest value)} for the variables whose
        #: candidates can be filtered against the loosest of the members' values at once
        self.separable = separable or {}
        self.entries = entries              # [(value, check(env), member mask)], sorted if ordered
        self.checks = [e[1] for e in entries]
        self.other = other                  # equal: the other side's closure
        #: ordered: the entries per class of constant (int, float), each sorted: Python's
        #: arithmetic is exact on ints and rounds with a float, so truth is monotone in the
        #: constant within a class but not across them (2**60 + 1 <= 2**60 is false,
        #: 2**60 + 1.25 <= 2**60 true); one bisection per class
        self.parts = [(checks, _prefixes(part)) for checks, part in _classes(entries)] \
            if kind == "ordered" else []
        self.by_value = {}
        if kind == "equal":
            try:
                self.by_value = {e[0]: e for e in entries}
            except TypeError:
                self.kind = "scan"
        #: equal: the condition as set membership over columns (cep.evaluation.loose; None
        #: where a bulk evaluation does not decide it)
        self.one_of = one_of(expr, [e[0] for e in entries]) if self.kind == "equal" else None

    def any(self, env, p=None) -> bool:
        if self.kind == "ordered":
            for checks, _ in self.parts:
                if checks[0](env) or checks[-1](env):
                    return True
            return False
        if self.kind == "equal":
            entry = self._entry(env)
            return entry is not None and entry[1](env)
        return any(check(env) for check in self.checks)

    def mask(self, env) -> int:
        kind = self.kind
        if kind == "ordered":
            out = 0
            for checks, prefix in self.parts:
                first, last = checks[0](env), checks[-1](env)
                if first == last:
                    out |= prefix[-1] if first else 0
                    continue
                lo, hi = 1, len(checks) - 1     # the first index whose truth differs
                while lo < hi:
                    mid = (lo + hi) // 2
                    if checks[mid](env) == first:
                        lo = mid + 1
                    else:
                        hi = mid
                out |= prefix[lo] if first else prefix[-1] ^ prefix[lo]
            return out
        if kind == "equal":
            entry = self._entry(env)
            return entry[2] if entry is not None and entry[1](env) else 0
        out = 0
        for _, check, m in self.entries:
            if check(env):
                out |= m
        return out

    def _entry(self, env):
        try:
            return self.by_value.get(self.other(env, None))
        except (EvalFailure, TypeError):
            return None


def _classes(entries: list) -> list:
    """``[(checks, entries)]``: sorted ``entries`` split into those with an int constant and
    those with a float one (Variants.parts), or whole when they are of one class."""
    ints = [e for e in entries if e[0].__class__ is int]
    if not ints or len(ints) == len(entries):
        return [([e[1] for e in entries], entries)]
    floats = [e for e in entries if e[0].__class__ is not int]
    return [([e[1] for e in part], part) for part in (ints, floats)]


def _prefixes(entries: list) -> list:
    out = [0]
    for e in entries:
        out.append(out[-1] | e[2])
    return out


def _ends(values: list, i: int) -> list:
    """The value tuples of the extreme constants (``i``-th item) of each class (_classes):
    the members that can be the loosest for a binding."""
    ends = []
    for cls in (True, False):
        part = sorted((v for v in values if (v[i].__class__ is int) is cls),
                      key=lambda v: v[i])
        for v in part[:1] + part[-1:]:
            if v not in ends:
                ends.append(v)
    return ends


def _loosest(op, *ends):
    """The value of the other side that lets the most candidates pass ``candidate OP value``
    (truth is monotone in the constant within a class, so it is the value of one of the
    extreme constants, _ends): ``candidate OP pick(values)`` holds when any member's does."""
    pick = max if op in (operator.lt, operator.le) else min
    if len(ends) == 2:
        low, high = ends

        def value(env, p):
            return pick(low(env, p), high(env, p))
        return value

    def values(env, p):
        return pick([end(env, p) for end in ends])
    return values


def _loosest_getter(op, *ends):
    """The candidate's side of ``candidate OP value`` that passes most often, when the
    constant is in it (the value of one of the extreme constants)."""
    pick = min if op in (operator.lt, operator.le) else max
    if len(ends) == 2:
        low, high = ends
        a, b = getattr(low, "attr_arith", None), getattr(high, "attr_arith", None)
        if a is not None and b is not None and (a[0], a[1], a[3]) == (b[0], b[1], b[3]):
            return arith_getter(a[0], a[1], (a[2], b[2]), a[3], pick)   # attribute read once

        def value(ev):
            return pick(low(ev), high(ev))
        return value

    def values(ev):
        return pick([end(ev) for end in ends])
    return values


def variants(k: int, members: list) -> Variants:
    """The Variants of conjunct ``k`` over ``members`` (their values differ)."""
    table = _variants(k, members)
    table.vars = members[0].cq.conjuncts[k].vars
    return table


def _variants(k: int, members: list) -> Variants:
    expr = split_conjuncts(members[0].cq.query.where)[k]
    groups: dict = {}
    for bit, m in enumerate(members):
        entry = groups.get(m.values[k])
        if entry is None:
            groups[m.values[k]] = [m.cq.conjuncts[k], 1 << bit]
        else:
            entry[1] |= 1 << bit
    values = list(groups)
    differ = [i for i in range(len(values[0])) if len({v[i] for v in values}) > 1]
    if len(differ) == 1:
        i = differ[0]
        consts = [v[i] for v in values]
        if _monotone(expr, i, consts):
            ends = [groups[v][0].separable for v in _ends(values, i)]
            inside = _literal_path(expr, i)[1]       # the comparison's side with the constant
            separable = {}
            for x, (attr, getter, op, ordering, other) in ends[0].items():
                if not all(x in end for end in ends):
                    continue
                side = expr.left if x in _side_vars(expr.left) else expr.right
                if side is not inside:      # the constant is in the value compared with
                    separable[x] = (attr, getter, op, ordering,
                                    _loosest(op, *(end[x][4] for end in ends)))
                elif attr is None:          # ... in what is computed from the candidate
                    separable[x] = (None, _loosest_getter(op, *(end[x][1] for end in ends)),
                                    op, ordering, other)
            entries = sorted(((v[i], _failing(groups[v][0].fn), groups[v][1]) for v in values),
                             key=lambda e: e[0])
            return Variants(expr, entries, "ordered", separable=separable)
        if expr.__class__ is ast.Compare and expr.op == "=":
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if side.__class__ is ast.Literal and _literal_path(expr, i)[-1] is side:
                    entries = [(v[i], _failing(groups[v][0].fn), groups[v][1])
                               for v in values]
                    return Variants(expr, entries, "equal",
                                    compile_expr(other, frozenset(), {}))
    entries = [(v, _failing(groups[v][0].fn), groups[v][1]) for v in values]
    return Variants(expr, entries, "scan")


def _side_vars(expr) -> set:
    return {n.var for n in ast.walk_expr(expr)
            if isinstance(n, (ast.Attr, ast.Len, ast.Aggregate))}


class Windows:
    """Members' windows: those that keep a binding are a suffix of the sorted windows."""

    def __init__(self, members: list):
        by: dict = {}
        for bit, m in enumerate(members):
            by[m.window] = by.get(m.window, 0) | 1 << bit
        self.windows = sorted(by)
        self.prefix = [0]
        for w in self.windows:
            self.prefix.append(self.prefix[-1] | by[w])
        self.all = self.prefix[-1]

    def mask(self, env) -> int:
        first, last = _span(env)
        ws = self.windows
        lo, hi = 0, len(ws)                 # the first window that keeps the binding
        while lo < hi:
            mid = (lo + hi) // 2
            if first >= last - ws[mid]:
                hi = mid
            else:
                lo = mid + 1
        return self.all ^ self.prefix[lo]


class Floors:
    """Members registered mid-stream: those that keep a binding (its first event after their
    floor, its last after their since) are a prefix of the sorted floors and of the sorted
    sinces."""

    def __init__(self, members: list):
        self.floors, self.by_floor = self._prefixes(members, "floor")
        self.sinces, self.by_since = self._prefixes(members, "since")

    @staticmethod
    def _prefixes(members: list, field: str) -> tuple:
        by: dict = {}
        for bit, m in enumerate(members):
            value = getattr(m, field)
            by[value] = by.get(value, 0) | 1 << bit
        keys, prefix = sorted(by), [0]
        for k in keys:
            prefix.append(prefix[-1] | by[k])
        return keys, prefix

    def mask(self, env) -> int:
        first, last = _span(env)
        return self.by_floor[bisect_left(self.floors, first)] & \
            self.by_since[bisect_left(self.sinces, last)]


def _span(env) -> tuple:
    lo = hi = None
    for v in env.values():
        for e in ((v,) if v.__class__ is Event else v):
            if lo is None or e.ts < lo:
                lo = e.ts
            if hi is None or e.ts > hi:
                hi = e.ts
    return lo, hi


# --------------------------------------------------------------------------- the manager

class GroupManager(PatternManager):
    """A PatternManager that evaluates the queries of one group: the join of the group's
    compiled query (loosest conditions, largest window), then each binding fanned out to the
    members that accept it. With one member it is that query's own manager."""

    def __init__(self, name: str, index, settings, mode, order, member: Member):
        self.members: list = [member]
        self._restricted: dict = {}         # seq -> names of the members a pending item is for
        self._recheck: set = set()          # deferred bindings found with an older compiled query
        self._mask_counts: dict = {}        # member mask -> matches (folded into member_matches)
        self.member_matches: dict = {member.name: 0}
        self._tables: list = []             # Variants of the conjuncts whose constants differ
        self._windows = None
        self._names_of: dict = {}
        self._shape = None                  # what the group's compiled query was built for
        # skip-till-next-match variants (one branch: the only ones that group) each accept
        # their own bindings
        self._next = member.cq.strategy == _NEXT and len(member.cq.branches) == 1
        self._accepting = False             # ... and the evaluation leaves it to them
        self._runs = None                   # per member (cq, branch): _member_runs
        self._held_floors = None
        self.stale = True
        super().__init__(name, member.cq, index, order, settings, mode)
        self.refresh()

    # ------------------------------------------------------------ membership
    def join(self, member: Member):
        """Add a member between two events: pending work stays with the members it was for.
        The constant indexes are rebuilt at the next ``refresh`` (once for many joins)."""
        current = frozenset(m.name for m in self.members)
        for item in self._deferred:
            self._restrict(item[1], current)
        for item in self._held:
            self._restrict(item[1], current)
        self.members.append(member)
        self.member_matches[member.name] = 0
        self.stale = True

    def leave(self, name: str) -> bool:
        """Remove a member; True when none is left."""
        self.refresh()
        self._fold_counts()
        self.members = [m for m in self.members if m.name != name]
        self.member_matches.pop(name, None)
        for seq, names in list(self._restricted.items()):
            self._restricted[seq] = names - {name}
        if self.members:
            self.stale = True
        return not self.members

    def _restrict(self, seq: int, names: frozenset):
        old = self._restricted.get(seq)
        self._restricted[seq] = names if old is None else old & names

    def refresh(self):
        """Rebuild the constant indexes, and the group's compiled query if its shape changed,
        after members joined or left (between two events)."""
        if not self.stale:
            return
        self._fold_counts()
        members = self.members
        first = members[0]
        self.single = len(members) == 1
        self._accepting = self._next and not self.single
        self._label = first.name if self.single else self.name
        varying = tuple(k for k in range(len(first.values))
                        if len({m.values[k] for m in members}) > 1)
        tables = [variants(k, members) for k in varying]
        windows = {m.window for m in members}
        self._windows = Windows(members) if len(windows) > 1 else None
        self.floor = min(m.floor for m in members)
        self.since = min(m.since for m in members)
        self._floors = Floors(members) \
            if len({(m.floor, m.since) for m in members}) > 1 else None
        # a binding held back (SLIDE, a deferred negation, pessimistic mode) may have been found
        # while other members, registered earlier, were in the group: it is released to the
        # members whose floor and since it respects
        self._held_floors = Floors(members) \
            if any(m.floor > -math.inf or m.since > -math.inf for m in members) else None
        self._all = (1 << len(members)) - 1
        self._names_of = {}
        self.varying_texts = [f"{first.cq.conjuncts[k].text} ({len(t.entries)} constants, "
                              f"{t.kind})" for k, t in zip(varying, tables)] + \
            ([f"WITHIN ({len(windows)} windows)"] if self._windows is not None else [])
        # a separable filter whose constant sits on the candidate's side reads the candidate
        # through a getter built from the extreme constants (_loosest_getter): the compiled
        # query is rebuilt when they change, or a member looser than the old extremes loses
        # the candidates only it accepts
        shape = (varying, max(windows), tuple(tuple(t.separable) for t in tables),
                 tuple(tuple(e[0] for _, part in _classes(t.entries) for e in (part[0], part[-1]))
                       if t.kind == "ordered" else None for t in tables),
                 first.name if self.single else None)
        self._tables[:] = tables
        if shape != self._shape:
            self._shape = shape
            self._restructure(varying, max(windows))
        self._loose = {} if self.single else self._extremes(varying, tables)
        self._columns = None if self.single or self._floors is not None else \
            (varying, tables, self._windows)       # made when a bulk evaluation asks
        self._runs = None                          # _member_runs, made when asked
        self.stale = False

    def _extremes(self, varying: tuple, tables: list) -> dict:
        """id(group condition) -> the conditions of the members with its lowest and highest
        constant, for the ordered ones, the set of its constants for the equalities
        (cep.evaluation.bulk.plan_for's ``loose``)."""
        out = {}
        for k, table in zip(varying, tables):
            if table.one_of is not None:
                out[id(self.cq.conjuncts[k])] = table.one_of
            elif table.kind == "ordered":
                ends = (table.entries[0][2], table.entries[-1][2])
                out[id(self.cq.conjuncts[k])] = tuple(
                    self.members[(mask & -mask).bit_length() - 1].cq.conjuncts[k]
                    for mask in ends)
        return out

    def _restructure(self, varying: tuple, window: float):
        """The group's compiled query: the members' shared conjuncts; at each position whose
        constants differ, one that holds when any member's does (``Variants.any``, filtering
        candidates against the loosest value where it can); the largest window."""
        first = self.members[0]
        if self.single:
            cq = first.cq
        else:
            cq = compile_query(first.cq.query, first.params or None)
            swap = {}
            conjuncts = list(cq.conjuncts)
            for j, k in enumerate(varying):
                c = conjuncts[k]
                conjuncts[k] = swap[id(c)] = dataclasses.replace(
                    c, fn=self._any_of(j), separable=self._separable_of(j), tested=0,
                    passed=0, failed=0, text=f"{c.text} [differs]")
            branches = tuple(dataclasses.replace(
                b, conjuncts=tuple(swap.get(id(c), c) for c in b.conjuncts))
                for b in cq.branches)
            cq = dataclasses.replace(cq, window=window, branches=branches,
                                     conjuncts=tuple(conjuncts))
        if cq is not self.cq:
            self.cq = cq
            self._forget_steps()
            self._opaque = {id(cq.conjuncts[k]): ("differs", next(_TOKENS), k)
                            for k in varying} if not self.single else {}
            # a binding waiting for its window was found with the conditions of then: those
            # that no longer vary are checked again when it is released
            self._recheck.update(item[1] for item in self._deferred)

    def _any_of(self, j: int):
        tables = self._tables

        def any_member(env, p=None):
            return tables[j].any(env)
        return any_member

    def _separable_of(self, j: int) -> dict:
        tables = self._tables
        out = {}
        for x, (attr, getter, op, ordering, _) in tables[j].separable.items():
            def loosest(env, p, x=x):
                return tables[j].separable[x][4](env, p)
            out[x] = (attr, getter, op, ordering, loosest)
        return out

    def _fold_counts(self):
        counts = getattr(self, "_mask_counts", None)
        if not counts:
            return
        for mask, n in counts.items():
            for name in self._member_names(mask):
                self.member_matches[name] += n
        counts.clear()

    def _member_names(self, mask: int) -> tuple:
        members = self.members
        return tuple(members[k].name for k in self._member_positions(mask))

    def _member_positions(self, mask: int) -> tuple:
        """The members (their positions) whose bits ``mask`` has, in order."""
        got = self._names_of.get(mask)
        if got is None:
            bits = bin(mask)[:1:-1]
            got = tuple(k for k, c in enumerate(bits) if c == "1")
            if len(self._names_of) < 4096:
                self._names_of[mask] = got
        return got

    def _mask(self, env) -> int:
        mask = self._all
        for v in self._tables:
            if v.vars <= env.keys():
                mask &= v.mask(env)
                if not mask:
                    return 0
        if self._windows is not None:
            mask &= self._windows.mask(env)
        if self._floors is not None:
            mask &= self._floors.mask(env)
        return mask

    def _accepted_by(self, env: dict, mask: int) -> int:
        """The members of ``mask`` whose skip-till-next-match run selects the binding ``env``
        (each under its own conditions: cep.evaluation.strategies.accepts)."""
        part = ALL
        if self.partitioned:
            first = next(iter(env.values()))
            key = (first if first.__class__ is Event else first[0]).key
            if key is not None:
                part = key
        index, members, out = self.index, self.members, 0
        gaps: dict = {}                     # the binding's gaps, read once for every member
        for k in self._member_positions(mask):
            cq = members[k].cq
            if accepts(Run(cq, cq.branches[0], index, part), env, gaps=gaps):
                out |= 1 << k
        return out

    def _evaluation(self, b: int, trigger: Event):
        ev = super()._evaluation(b, trigger)
        if self._accepting:                 # each member's own, in _fan / _matches
            ev.accept = None
        return ev

    def _bulk_plan(self, b: int, name: str):
        plan = super()._bulk_plan(b, name)
        if plan is None or not self._accepting:
            return plan
        # skip-till-next-match variants: the join in bulk, each (binding, member) pair its
        # member's own run judges (cep.evaluation.bulk, ``accepting``), as _fan does
        if self._member_columns() is None:
            return None
        return dataclasses.replace(plan, accept=None)

    def _screen_queries(self) -> list:
        return [m.cq for m in self.members]

    def _member_runs(self):
        if not self._accepting:
            return None
        runs = self._runs
        if runs is None:
            runs = self._runs = [(m.cq, m.cq.branches[0]) for m in self.members]
        return runs

    def _refusal(self) -> str | None:
        if self._accepting and self.order is not None and self._member_columns() is None \
                and all(PatternManager._bulk_plan(self, b, name) is not None
                        for targets in self._triggers.values() for b, name in targets):
            return ("skip-till-next-match variants in one group whose constants are not "
                    "decided over columns (each member's selection decided binding by "
                    "binding)")
        return super()._refusal()

    # ------------------------------------------------------------ fan-out (manager hooks)
    def _in_order(self) -> bool:
        return self.single or self._member_columns() is not None

    def _fan(self, results: list, origin=None, count: bool = True) -> list:
        """The members' matches of one trigger's bindings: member by member (in the
        group's order), each member's in the bindings' order (as bulk evaluation gives
        them, cep.runtime.members)."""
        allowed = self._restricted.get(origin) if origin is not None else None
        if self.single and allowed is None:
            if count:
                self.matches += len(results)
                self.member_matches[self._label] += len(results)
            return results
        by_mask: dict = {}                  # member mask -> the bindings' numbers
        for i, m in enumerate(results):
            _, base, var, event, _ = m
            env = base if var is None else {**base, var: event}
            mask = self._mask(env)
            if mask and self._accepting:
                mask = self._accepted_by(env, mask)
            if mask:
                found = by_mask.get(mask)
                if found is None:
                    by_mask[mask] = [i]
                else:
                    found.append(i)
        if not by_mask:
            return []
        if count:
            if allowed is None:
                for mask, found in by_mask.items():
                    self._mask_counts[mask] = self._mask_counts.get(mask, 0) + len(found)
                if len(self._mask_counts) > 4096:
                    self._fold_counts()
            else:
                for mask, found in by_mask.items():
                    for n in self._member_names(mask):
                        if n in allowed:
                            self.member_matches[n] += len(found)
        if len(by_mask) == 1:
            (mask, found), = by_mask.items()
            per = [(k, found) for k in self._member_positions(mask)]
        else:
            lists: dict = {}
            for mask, found in by_mask.items():
                for k in self._member_positions(mask):
                    got = lists.get(k)
                    if got is None:
                        lists[k] = [found]
                    else:
                        got.append(found)
            per = [(k, got[0] if len(got) == 1 else sorted(itertools.chain(*got)))
                   for k, got in sorted(lists.items())]
        out: list = []
        for k, found in per:
            name = self.members[k].name
            if allowed is not None and name not in allowed:
                continue
            out.extend(map(_new, repeat(Match), (
                (name, base, var, event, order)
                for _, base, var, event, order in map(results.__getitem__, found))))
        if count:
            self.matches += len(out)
        return out

    def _fan_block(self, block, a: int, b: int, origin=None) -> list:
        if block.__class__ is MatchBlock and block.members is not None:
            self._count_members(block.members[a:b])     # fanned out in bulk already
            return block[a:b]
        return super()._fan_block(block, a, b, origin)

    def _taken(self, found, pieces: list):
        if pieces and pieces[0][0].members is not None:
            if found.__class__ is MatchBlock:
                self._count_members(found.members)
            else:
                for block, a, b in pieces:
                    self._count_members(block.members[a:b])
            return found
        return super()._taken(found, pieces)

    def _count_members(self, members) -> None:
        import numpy as np                  # a bulk evaluation's block: numpy is there
        counts = np.bincount(members, minlength=len(self.members))
        self.matches += len(members)
        for k in np.flatnonzero(counts).tolist():
            self.member_matches[self.members[k].name] += int(counts[k])

    def _member_columns(self):
        """The members decided in bulk (cep.runtime.members), or None."""
        columns = self._columns
        if columns.__class__ is tuple:
            from raycep.cep.runtime.members import MemberColumns      # numpy: bulk only
            columns = self._columns = MemberColumns.of(self.members, *columns)
        return columns

    def _matches(self, env: dict, seq=None, count: bool = True, keep: bool = False) -> list:
        allowed = None
        if seq is not None:
            allowed = self._restricted.get(seq) if keep else self._restricted.pop(seq, None)
            if seq in self._recheck and not keep:
                self._recheck.discard(seq)
                if not self._holds(env):
                    return []
        held = seq is not None and (self._next or self._held_floors is not None)
        if self.single and allowed is None and not held:
            names = (self._label,)
        else:                               # (a binding held back may have been found by
            mask = self._mask(env)          # the group before it was down to one member)
            if mask and seq is not None and self._held_floors is not None:
                mask &= self._held_floors.mask(env)
            if mask and self._next:
                mask = self._accepted_by(env, mask)
            names = self._member_names(mask) if mask else ()
            if allowed is not None:
                names = tuple(n for n in names if n in allowed)
        if count:
            self.matches += len(names)
            for n in names:
                self.member_matches[n] += 1
        return [Match(n, env, self._var_order) for n in names]

    @_timed
    def revise(self, event, before):
        out = super().revise(event, before)
        for m in out:
            if not m.retracted:
                self.member_matches[m.query] = self.member_matches.get(m.query, 0) + 1
        return out

    def _holds(self, env: dict) -> bool:
        """Whether ``env`` satisfies the group's shared positive conjuncts that apply to it
        (those whose constants differ are the members' masks)."""
        varying = {id(c) for k, c in enumerate(self.cq.conjuncts) if k in self._shape[0]}
        return all(c.check(env) for c in self.cq.conjuncts
                   if c.negated is None and id(c) not in varying and c.vars <= env.keys())

    def _inherit(self, seq: int, origin):
        if origin is not None and origin in self._restricted:
            self._restricted[seq] = self._restricted[origin]

    def _done(self, origin):
        if origin is not None:
            self._restricted.pop(origin, None)

    def _dropped(self, seqs):
        for seq in seqs:
            self._restricted.pop(seq, None)
            self._recheck.discard(seq)

    def expire_floor(self, kept_from: float) -> bool:
        changed = False
        for k, m in enumerate(self.members):
            if m.since > -math.inf and \
                    kept_from - 2 * (m.window + (self.cq.slide or 0.0)) > m.since:
                self.members[k] = dataclasses.replace(m, floor=-math.inf, since=-math.inf)
                changed = True
        if changed:
            self.stale = True
            self.refresh()
        return self.since > -math.inf

    # ------------------------------------------------------------ state
    def stats(self) -> dict:
        self._fold_counts()
        return super().stats()

    def group_info(self) -> dict:
        return {"name": self.name, "queries": [m.name for m in self.members],
                "varying": list(self.varying_texts)}

    def snapshot(self) -> dict:
        self._fold_counts()
        state = super().snapshot()
        state["restricted"] = dict(self._restricted)
        state["recheck"] = set(self._recheck)
        state["member_matches"] = dict(self.member_matches)
        return state

    def restore(self, state: dict):
        super().restore(state)
        self._restricted = dict(state.get("restricted", {}))
        self._recheck = set(state.get("recheck", ()))
        self.member_matches.update(state.get("member_matches", {}))
