"""Compile a validated Query AST into a CompiledQuery: DNF branches with their order
constraints, negations and conjuncts compiled to closures (never eval).

The pattern is brought into disjunctive normal form (VLDB 2018, section 4.3: "nested
patterns"): every OR is distributed, and each branch is a tree of SEQ/AND over variables. A
branch is described by its positive variables, the precedence ``before[v]`` (positive variables
whose events all precede ``v``'s) that SEQ imposes, its negations with their position and the
conjuncts that apply to it.
"""
from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field
from functools import cached_property

from raycep.cep.errors import QueryValidationError, short_repr
from raycep.cep.lang import ast
from raycep.cep.lang.expressions import (FIELDS, EvalFailure, compile_expr, kleene_offset_shift,
                                         separable)
from raycep.cep.lang.validate import conjuncts as split_conjuncts, finite, static_kind, validate


@dataclass(frozen=True)
class Var:
    name: str
    type: str | None      # None: any event type
    kleene: bool
    negated: bool


@dataclass(eq=False)
class Conjunct:
    """One top-level conjunct of WHERE.

    ``kleene_i``: the Kleene variable whose current index ``i`` the conjunct uses (checked for
    every valid position ``p >= p_min``); ``set_level``: Kleene variables used through LAST, LEN
    or a whole-iteration aggregate; ``max_first``: per Kleene variable, the largest fixed
    ``[k]`` position (0-based) used.
    """
    expr: object
    vars: frozenset
    negated: str | None
    kleene_i: str | None
    p_min: int
    set_level: frozenset
    max_first: dict
    fn: object                    # fn(env, p) -> bool, raises EvalFailure
    unary: bool = False           # uses only the current element of kleene_i (no prefix/first)
    separable: dict = field(default_factory=dict)   # see cep.lang.expressions.separable
    text: str = ""
    tested: int = 0
    passed: int = 0
    failed: int = 0
    last_error: str = ""          # why the latest failed evaluation failed

    def check(self, env) -> bool:
        """All instances (every valid ``i`` for an element-wise conjunct) hold."""
        self.tested += 1
        try:
            if self.kleene_i is None:
                ok = self.fn(env, None)
            else:
                fn = self.fn
                ok = all(fn(env, p) for p in range(self.p_min, len(env[self.kleene_i])))
        except EvalFailure as exc:
            self.failed += 1
            self.last_error = str(exc)
            return False
        if ok:
            self.passed += 1
        return ok

    def check_at(self, env, p: int) -> bool:
        """The instance at position ``p`` of ``kleene_i`` (true when ``p`` has no instance)."""
        if p < self.p_min:
            return True
        self.tested += 1
        try:
            ok = self.fn(env, p)
        except EvalFailure as exc:
            self.failed += 1
            self.last_error = str(exc)
            return False
        if ok:
            self.passed += 1
        return ok


@dataclass(frozen=True)
class Negation:
    var: Var
    before: frozenset          # positive vars whose events all precede the negated event
    after: frozenset           # positive vars whose events all follow it
    conjuncts: tuple           # conjuncts that mention the negated variable
    may_be_bound: bool = True  # a positive variable could hold the same event

    @property
    def filters(self) -> tuple:
        """Conjuncts that filter all witness candidates at once (see expressions.separable)."""
        return tuple(c for c in self.conjuncts if self.var.name in c.separable)

    @property
    def checks(self) -> tuple:
        return tuple(c for c in self.conjuncts if self.var.name not in c.separable)

    @cached_property
    def extreme(self):
        """(attr, op, value_fn) when the negation is decided by one ordering comparison on a
        plain attribute of the negated event that no bound event can satisfy; else None (the
        evaluator then searches witnesses one by one)."""
        filters = self.filters
        if self.deferred or self.may_be_bound or self.checks or len(filters) != 1:
            return None
        attr, _, op, ordering, other = filters[0].separable[self.var.name]
        if attr is None or attr in FIELDS or not ordering:
            return None
        return attr, op, other

    @property
    def deferred(self) -> bool:
        """Nothing bounds it from above but the window: confirm when the window closes."""
        return not self.after


@dataclass(frozen=True)
class Branch:
    """One DNF branch: a conjunction of SEQ/AND constraints over positive variables."""
    positives: tuple           # Var, in pattern (text) order
    before: dict               # name -> frozenset of names that must precede it
    after: dict                # name -> frozenset of names that must follow it
    negations: tuple           # Negation
    conjuncts: tuple           # positive conjuncts applying to this branch
    triggers: tuple            # names of variables that can hold a match's last event

    @property
    def names(self) -> tuple:
        return tuple(v.name for v in self.positives)

    def linear_extensions(self) -> list:
        """Orders of the positive variables compatible with the precedence (Kleene = block)."""
        names = self.names
        return [perm for perm in itertools.permutations(names)
                if all(perm.index(u) < perm.index(v) for v in names for u in self.before[v])]


@dataclass
class CompiledQuery:
    query: ast.Query
    window: float
    slide: float | None
    strategy: str
    equivalence: tuple
    variables: dict                     # name -> Var
    branches: tuple
    conjuncts: tuple                    # every conjunct (positive and negation ones)
    positive_types: frozenset           # types of positive variables (None: any)
    negated_types: frozenset
    deferred: bool = field(init=False)

    def __post_init__(self):
        self.deferred = any(n.deferred for b in self.branches for n in b.negations)

    @property
    def positive_names(self) -> tuple:
        return tuple(n for n, v in self.variables.items() if not v.negated)

    @property
    def types(self) -> frozenset:
        """Every event type the query reads (None in the set: every type)."""
        return self.positive_types | self.negated_types


def compile_query(query, params: dict | None = None) -> CompiledQuery:
    """Compile a Query AST (or query text) with the given parameter values."""
    if isinstance(query, str):
        from raycep.cep.lang.parser import parse_query
        query = parse_query(query)
    else:
        validate(query)
    params = dict(params or {})
    text = query.text
    _check_params(query, params, text)
    window = _duration(query.within, params, text, "WITHIN")
    if window is None:
        raise QueryValidationError("missing WITHIN: every query needs a time window", text)
    slide = _duration(query.slide, params, text, "SLIDE")
    leaves = ast.event_vars(query.pattern)
    variables = {v.name: Var(v.name, v.type, v.kleene, v.negated) for v in leaves}
    kleene = frozenset(n for n, v in variables.items() if v.kleene)
    conjuncts = tuple(_compile_conjunct(c, variables, kleene, params, text)
                      for c in split_conjuncts(query.where))
    branches = tuple(_branch(tree, variables, conjuncts) for tree in _dnf(query.pattern))
    return CompiledQuery(
        query=query, window=window, slide=slide, strategy=query.strategy,
        equivalence=tuple(query.equivalence), variables=variables, branches=branches,
        conjuncts=conjuncts,
        positive_types=frozenset(v.type for v in variables.values() if not v.negated),
        negated_types=frozenset(v.type for v in variables.values() if v.negated))


def _check_params(query, params: dict, text) -> None:
    """Every parameter the query uses has a value; when one has none, the error also names
    the given parameters that the query does not use, with the closest used name (a
    misspelt ``treshold`` for ``threshold``). Unused parameters alone are no error: one
    ``--param`` set serves several queries."""
    used: dict = {}
    clause: dict = {}
    for d, what in ((query.within, "WITHIN"), (query.slide, "SLIDE")):
        if d is not None and isinstance(d.amount, ast.Param):
            used.setdefault(d.amount.name, d.amount)
            clause.setdefault(d.amount.name, f" of {what}")
    for node in ast.walk_expr(query.where):
        if isinstance(node, ast.Param):
            used.setdefault(node.name, node)
    missing = [name for name in used if name not in params]
    if not missing:
        return
    unknown = [name for name in params if name not in used]
    node = used[missing[0]]
    message = (f"parameter {missing[0]!r}{clause.get(missing[0], '')} has no value (pass "
               f"params={{'{missing[0]}': ...}} or --param {missing[0]}=VALUE)")
    if len(missing) > 1:
        message += f"; also without a value: {', '.join(repr(m) for m in missing[1:])}"
    if unknown:
        hints = []
        lower = {m.lower(): m for m in missing}
        for name in unknown:
            close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
            hints.append(f"{name!r}" + (f" (did you mean {lower[close[0]]!r}?)" if close
                                        else ""))
        message += (f"; the query has no parameter{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(hints)} (its parameters: "
                    f"{', '.join(repr(u) for u in used)})")
    line, col = node.pos or (None, None)
    raise QueryValidationError(message, text, line, col)


def _duration(d, params, text, clause):
    if d is None:
        return None
    amount = d.amount
    if isinstance(amount, ast.Param):
        if amount.name not in params:
            line, col = amount.pos or (None, None)
            raise QueryValidationError(
                f"parameter {amount.name!r} of {clause} has no value", text, line, col)
        value = params[amount.name]
        what = f"parameter {amount.name!r} of {clause}"
    else:
        value = amount.value
        what = clause
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value) \
            or value <= 0 or not finite(float(value) * d.unit_seconds):
        line, col = amount.pos or d.pos or (None, None)
        raise QueryValidationError(f"{what} must be a positive finite number (seconds), got "
                                   f"{short_repr(value)} ({type(value).__name__})", text,
                                   line, col)
    return float(value) * d.unit_seconds


def _compile_conjunct(expr, variables, kleene, params, text) -> Conjunct:
    used, i_vars, set_level, max_first, p_min = set(), set(), set(), {}, 0
    prefix_agg = False
    shift = kleene_offset_shift(expr)
    min_off = 0
    for node in ast.walk_expr(expr):
        if isinstance(node, (ast.Attr, ast.Len, ast.Aggregate)):
            used.add(node.var)
            if node.var not in variables:
                line, col = node.pos or (None, None)
                raise QueryValidationError(f"variable {node.var!r} is not declared in the PATTERN",
                                           text, line, col)
        if node.__class__ is ast.Attr and node.var in kleene:
            idx = node.index
            if idx is None or idx.base == "i":
                i_vars.add(node.var)
                min_off = min(min_off, (idx.offset if idx else 0) - shift)
            elif idx.base == "first":
                max_first[node.var] = max(max_first.get(node.var, 0), idx.offset)
            else:
                set_level.add(node.var)
        elif isinstance(node, ast.Len):
            set_level.add(node.var)
        elif isinstance(node, ast.Aggregate):
            if node.upto is None or node.upto.base == "last":
                set_level.add(node.var)
            elif node.upto.base == "i":
                i_vars.add(node.var)
                prefix_agg = True
                p_min = max(p_min, shift - node.upto.offset)
            else:
                max_first[node.var] = max(max_first.get(node.var, 0), node.upto.offset)
    p_min = max(p_min, -min_off)
    if len(i_vars) > 1:
        raise QueryValidationError(
            f"a conjunct uses the index i of several Kleene variables: {sorted(i_vars)}", text)
    negated = [v for v in used if variables[v].negated]
    if len(negated) > 1:
        raise QueryValidationError(
            f"a conjunct mentions several negated variables: {sorted(negated)}", text)
    _check_param_conditions(expr, params, text)
    fn = compile_expr(expr, kleene, params, shift, text)
    if static_kind(expr) is None:       # an attribute (or a parameter) used as a condition
        fn = _boolean(fn)
    return Conjunct(expr=expr, vars=frozenset(used), negated=negated[0] if negated else None,
                    kleene_i=next(iter(i_vars)) if i_vars else None, p_min=p_min,
                    set_level=frozenset(set_level), max_first=max_first, fn=fn,
                    unary=bool(i_vars) and p_min == 0 and min_off == 0 and not prefix_agg
                    and not (set(max_first) | set_level) & i_vars,
                    separable=separable(expr, kleene, variables, params, text)
                    if not i_vars else {},
                    text=ast.expr_text(expr))


def _boolean(fn):
    """``fn`` whose value must be a boolean: anything else fails, i.e. the conjunct is false
    (docs/semantics.md, "Predicates"), never Python truthiness (``WHERE a.price`` with price 5)."""
    def condition(env, p):
        value = fn(env, p)
        if value is True or value is False:
            return value
        raise EvalFailure(f"expected a boolean, got {short_repr(value)}")
    return condition


def _check_param_conditions(expr, params, text) -> None:
    """A parameter used as a condition (a conjunct, an operand of AND/OR/NOT) must be bound
    to a boolean (a missing one is reported by compile_expr)."""
    spots = [expr]
    for node in ast.walk_expr(expr):
        if isinstance(node, (ast.BoolAnd, ast.BoolOr)):
            spots.extend(node.items)
        elif isinstance(node, ast.BoolNot):
            spots.append(node.item)
    for node in spots:
        if isinstance(node, ast.Param) and node.name in params \
                and params[node.name].__class__ is not bool:
            value = params[node.name]
            line, col = node.pos or (None, None)
            raise QueryValidationError(
                f"parameter {node.name!r} is used as a condition, so it must be true or false, "
                f"got {short_repr(value)} ({type(value).__name__})", text, line, col)


def _dnf(node) -> list:
    """OR-free trees whose union is ``node``."""
    if isinstance(node, ast.EventVar):
        return [node]
    if isinstance(node, ast.Or):
        return [t for child in node.children for t in _dnf(child)]
    combos = itertools.product(*[_dnf(child) for child in node.children])
    return [type(node)(tuple(combo)) for combo in combos]


def _positives(node) -> list:
    return [v.name for v in ast.event_vars(node) if not v.negated]


def _positions(node, before: frozenset, after: frozenset, out: dict):
    """name -> (before, after) for every variable of an OR-free tree."""
    if isinstance(node, ast.EventVar):
        out[node.name] = (before, after)
    elif isinstance(node, ast.Seq):
        kids = node.children
        for k, child in enumerate(kids):
            b = before.union(*[_positives(c) for c in kids[:k]])
            a = after.union(*[_positives(c) for c in kids[k + 1:]])
            _positions(child, b, a, out)
    else:
        for child in node.children:
            _positions(child, before, after, out)


def _branch(tree, variables, conjuncts) -> Branch:
    positions: dict = {}
    _positions(tree, frozenset(), frozenset(), positions)
    names = set(positions)
    positives = tuple(variables[n] for n in positions if not variables[n].negated)
    applicable = [c for c in conjuncts if c.vars <= names]
    negations = tuple(
        Negation(var=variables[n], before=positions[n][0], after=positions[n][1],
                 conjuncts=tuple(c for c in applicable if c.negated == n),
                 may_be_bound=any(v.type is None or variables[n].type is None
                                  or v.type == variables[n].type for v in positives))
        for n in positions if variables[n].negated)
    return Branch(
        positives=positives,
        before={v.name: positions[v.name][0] for v in positives},
        after={v.name: positions[v.name][1] for v in positives},
        negations=negations,
        conjuncts=tuple(c for c in applicable if c.negated is None),
        triggers=tuple(v.name for v in positives if not positions[v.name][1]))
