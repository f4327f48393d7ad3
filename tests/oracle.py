"""A brute-force oracle for raycep queries: docs/semantics.md, written plainly.

It is a test instrument, not product code, and it shares nothing with the engine except the
AST, Event, match_key and the error classes. Two independent evaluators live here:

* ``enumerate_matches``: the declarative definition (skip_till_any_match). Every binding of
  every DNF branch is tried (backtracking, pruned only by type, distinctness, SEQ order,
  window and the conjuncts whose variables are all bound), then negation is checked.
* ``nfa_matches``: SASE+'s NFA^b (section 3.1-3.2) simulated literally, with all runs of the
  nondeterministic automaton, for every linear extension of every DNF branch. It implements
  all four selection strategies; for skip_till_any_match it must agree with the enumeration
  whenever no Kleene variable sits under an AND (a Kleene variable is one block of a linear
  extension, so it cannot interleave with other variables there).

``oracle_matches`` picks the enumeration for skip_till_any_match and the NFA^b otherwise and
returns the set of canonical match keys over the whole finite stream.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from raycep.cep.errors import QueryValidationError
from raycep.cep.event import Event, before
from raycep.cep.lang import ast as A
from raycep.cep.match import match_key


# =========================================================================== expressions

class _Fail(Exception):
    """Evaluation failed (missing attribute, type mismatch, division by zero, bad index):
    the conjunct being evaluated is false."""


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _kind(v):
    if _is_num(v):
        return "num"
    if isinstance(v, str):
        return "str"
    if isinstance(v, bool):
        return "bool"
    raise _Fail(f"unsupported value {v!r}")


def attr_value(ev: Event, name: str):
    """``x.type`` = attribute 'type' if present else the event type; ``x.ts`` = event time."""
    if name == "type":
        return ev.attrs.get("type", ev.type)
    if name == "ts":
        return ev.ts
    try:
        return ev.attrs[name]
    except KeyError:
        raise _Fail(f"missing attribute {name!r}") from None


def _index(kidx: A.KIndex | None, seq: tuple, i: int | None) -> int:
    """1-based position named by a KIndex (None = ``[i]``)."""
    if kidx is None:
        kidx = A.KIndex("i", 0)
    if kidx.base == "i":
        if i is None:
            raise _Fail("index i outside a quantified conjunct")
        return i + kidx.offset
    if kidx.base == "first":
        return 1 + kidx.offset
    if kidx.base == "last":
        return len(seq) + kidx.offset
    raise _Fail(f"unknown index base {kidx.base!r}")


class _Env:
    """What an expression sees: bindings (var -> Event | tuple), the Kleene var names,
    the parameters and the current index i."""

    __slots__ = ("bind", "kleene", "params", "i")

    def __init__(self, bind, kleene, params, i=None):
        self.bind, self.kleene, self.params, self.i = bind, kleene, params, i


def _seq(env: _Env, var: str) -> tuple:
    if var not in env.kleene or var not in env.bind:
        raise _Fail(f"{var} is not a bound Kleene variable")
    return env.bind[var]


def _eval(x, env: _Env):
    if isinstance(x, A.Literal):
        return x.value
    if isinstance(x, A.Param):
        if x.name not in env.params:
            raise QueryValidationError(f"unbound parameter {x.name!r}")
        return env.params[x.name]
    if isinstance(x, A.Attr):
        if x.var not in env.bind:
            raise _Fail(f"unbound variable {x.var}")
        if x.var in env.kleene:
            seq = env.bind[x.var]
            n = _index(x.index, seq, env.i)
            if not 1 <= n <= len(seq):
                raise _Fail(f"index {n} outside 1..{len(seq)}")
            return attr_value(seq[n - 1], x.attr)
        if x.index is not None:
            raise _Fail(f"index on the simple variable {x.var}")
        return attr_value(env.bind[x.var], x.attr)
    if isinstance(x, A.Len):
        return len(_seq(env, x.var))
    if isinstance(x, A.Aggregate):
        seq = _seq(env, x.var)
        if x.upto is not None:
            n = _index(x.upto, seq, env.i)
            if not 1 <= n <= len(seq):
                raise _Fail("empty or out-of-range aggregate prefix")
            seq = seq[:n]
        if x.attr is None:
            return len(seq)                 # count(b)
        vals = [attr_value(e, x.attr) for e in seq]   # a missing attribute fails, as b[j].x
        if x.func == "count":
            return len(vals)
        if not all(_is_num(v) for v in vals):
            raise _Fail("aggregate over non-numbers")
        if x.func == "sum":
            return sum(vals)
        if x.func == "avg":
            return sum(vals) / len(vals)
        if x.func == "min":
            return min(vals)
        if x.func == "max":
            return max(vals)
        raise _Fail(f"unknown aggregate {x.func}")
    if isinstance(x, A.BinOp):
        left, right = _eval(x.left, env), _eval(x.right, env)
        if not (_is_num(left) and _is_num(right)):
            raise _Fail("arithmetic on non-numbers")
        if x.op == "+":
            return left + right
        if x.op == "-":
            return left - right
        if x.op == "*":
            return left * right
        if x.op == "/":
            if right == 0:
                raise _Fail("division by zero")
            return left / right
        raise _Fail(f"unknown operator {x.op}")
    if isinstance(x, A.Neg):
        v = _eval(x.operand, env)
        if not _is_num(v):
            raise _Fail("unary minus on a non-number")
        return -v
    if isinstance(x, A.Compare):
        left, right = _eval(x.left, env), _eval(x.right, env)
        kind = _kind(left)
        if kind != _kind(right):
            raise _Fail(f"comparing {left!r} with {right!r}")
        if x.op == "=":
            return left == right
        if x.op == "!=":
            return left != right
        if kind == "bool":
            raise _Fail("ordering booleans")
        if x.op == "<":
            return left < right
        if x.op == "<=":
            return left <= right
        if x.op == ">":
            return left > right
        if x.op == ">=":
            return left >= right
        raise _Fail(f"unknown comparison {x.op}")
    if isinstance(x, (A.BoolAnd, A.BoolOr)):
        # left to right with short-circuit: an operand that is never reached cannot fail
        want = isinstance(x, A.BoolOr)
        for item in x.items:
            v = _eval(item, env)
            if not isinstance(v, bool):
                raise _Fail("boolean operator on a non-boolean")
            if v == want:
                return want
        return not want
    if isinstance(x, A.BoolNot):
        v = _eval(x.item, env)
        if not isinstance(v, bool):
            raise _Fail("NOT on a non-boolean")
        return not v
    raise _Fail(f"unknown expression {type(x).__name__}")


def split_conjuncts(expr) -> list:
    """Top-level conjuncts of WHERE (nested BoolAnd flattened)."""
    if expr is None:
        return []
    if isinstance(expr, A.BoolAnd):
        return [c for item in expr.items for c in split_conjuncts(item)]
    return [expr]


@dataclass(frozen=True)
class Conj:
    """One conjunct and what the semantics need to know about it.

    ``kvar``: the Kleene variable whose current index i it uses (None if none);
    ``ioffs``: offsets k of the indices i+k it uses (a bare ``b.x`` is offset 0, a prefix
    aggregate ``b[..i-1]`` offset -1); ``idents``: its other identifiers, for NFA^b placement:
    ('simple', v) | ('fixed', v, n) (``v[n]``) | ('closed', v) (needs the whole iteration).
    """
    expr: object
    vars: frozenset
    negvar: str | None
    kvar: str | None
    ioffs: tuple
    idents: tuple


def analyse(expr, kleene: set, negated: set) -> Conj:
    vars_, kvars, ioffs, idents = set(), set(), [], []

    def kidx(var, k):
        if k is None or k.base == "i":
            kvars.add(var)
            ioffs.append(0 if k is None else k.offset)
        elif k.base == "first":
            idents.append(("fixed", var, 1 + k.offset))
        else:
            idents.append(("closed", var))

    for node in A.walk_expr(expr):
        if isinstance(node, A.Attr):
            vars_.add(node.var)
            if node.var in kleene:
                kidx(node.var, node.index)
            else:
                idents.append(("simple", node.var))
        elif isinstance(node, A.Len):
            vars_.add(node.var)
            idents.append(("closed", node.var) if node.var in kleene else ("simple", node.var))
        elif isinstance(node, A.Aggregate):
            vars_.add(node.var)
            if node.var not in kleene:
                idents.append(("simple", node.var))
            elif node.upto is None:
                idents.append(("closed", node.var))
            else:
                kidx(node.var, node.upto)
    if len(kvars) > 1:
        raise QueryValidationError("a conjunct may use the index i of one Kleene variable only")
    negs = vars_ & negated
    if len(negs) > 1:
        raise QueryValidationError("a conjunct may mention one negated variable only")
    return Conj(expr, frozenset(vars_), next(iter(negs), None), next(iter(kvars), None),
                tuple(ioffs), tuple(idents))


def _true(c: Conj, bind: dict, kleene: set, params: dict, i=None) -> bool:
    try:
        return _eval(c.expr, _Env(bind, kleene, params, i)) is True
    except _Fail:
        return False


def instances(c: Conj, bind: dict, closed) -> tuple:
    """The instances of ``c`` evaluable in a (partial) binding: () if some identifier is not
    instantiated yet, (None,) for a conjunct without i, else the i values for which every
    i-based index lies in 1..len(b). ``closed``: Kleene variables whose iteration is complete
    (in a full binding: all of them)."""
    for ident in c.idents:
        v = ident[1]
        if v not in bind:
            return ()
        if ident[0] == "fixed" and v not in closed and len(bind[v]) < ident[2]:
            return ()
        if ident[0] == "closed" and v not in closed:
            return ()
    if c.kvar is None:
        return (None,)
    if c.kvar not in bind:
        return ()
    n = len(bind[c.kvar])
    return tuple(i for i in range(1, n + 1) if all(1 <= i + o <= n for o in c.ioffs))


def holds(c: Conj, bind: dict, kleene: set, params: dict) -> bool:
    """The conjunct on a complete binding: for every i in its quantification range."""
    return all(_true(c, bind, kleene, params, i) for i in instances(c, bind, kleene))


# =========================================================================== query structure

def dnf(node) -> list:
    """The OR-free branches of a pattern (disjunctive normal form)."""
    if isinstance(node, A.EventVar):
        return [node]
    if isinstance(node, A.Or):
        return [b for child in node.children for b in dnf(child)]
    combos = itertools.product(*(dnf(child) for child in node.children))
    return [type(node)(tuple(combo)) for combo in combos]


def _positives(node) -> list:
    return [v.name for v in A.event_vars(node) if not v.negated]


@dataclass
class Branch:
    pos: list            # positive variable names, pattern order
    negs: list           # negated variable names
    types: dict          # var -> type or None
    order: set           # (u, v): every event of u before every event of v
    neg_ctx: dict        # negated var -> (before set, after set)
    pos_conjs: list      # conjuncts on positive variables of this branch
    neg_conjs: dict      # negated var -> its conjuncts


def _branch(tree, conjs: list) -> Branch:
    leaves = A.event_vars(tree)
    names = {v.name for v in leaves}
    br = Branch([v.name for v in leaves if not v.negated], [v.name for v in leaves if v.negated],
                {v.name: v.type for v in leaves}, set(), {}, [], {})

    def walk(node, lo: frozenset, hi: frozenset):
        if isinstance(node, A.EventVar):
            if node.negated:
                br.neg_ctx[node.name] = (lo, hi)
            return
        if isinstance(node, A.Seq):
            parts = [_positives(c) for c in node.children]
            for j, child in enumerate(node.children):
                earlier = frozenset(v for p in parts[:j] for v in p)
                later = frozenset(v for p in parts[j + 1:] for v in p)
                for u in earlier:
                    for v in parts[j]:
                        br.order.add((u, v))
                walk(child, lo | earlier, hi | later)
        else:
            for child in node.children:
                walk(child, lo, hi)

    walk(tree, frozenset(), frozenset())
    for c in conjs:
        if not c.vars <= names:
            continue                     # mentions a variable of another OR branch
        if c.negvar is None:
            br.pos_conjs.append(c)
        else:
            br.neg_conjs.setdefault(c.negvar, []).append(c)
    return br


@dataclass
class Prepared:
    branches: list
    kleene: set
    equiv: tuple
    window: float
    params: dict
    stream_types: set | None   # types of positive variables; None = every type


def prepare(query: A.Query, params: dict | None = None) -> Prepared:
    params = dict(params or {})
    leaves = A.event_vars(query.pattern)
    kleene = {v.name for v in leaves if v.kleene}
    negated = {v.name for v in leaves if v.negated}
    conjs = [analyse(c, kleene, negated) for c in split_conjuncts(query.where)]
    if query.within is None:
        window = math.inf
    else:
        amount = query.within.amount
        if isinstance(amount, A.Param):
            if amount.name not in params:
                raise QueryValidationError(f"unbound parameter {amount.name!r}")
            value = params[amount.name]
        else:
            value = amount.value
        window = value * query.within.unit_seconds
    pos_types = {v.type for v in leaves if not v.negated}
    return Prepared([_branch(t, conjs) for t in dnf(query.pattern)], kleene,
                    tuple(query.equivalence), window, params,
                    None if None in pos_types else pos_types)


# =========================================================================== shared checks

def _events(bind: dict) -> list:
    out = []
    for val in bind.values():
        out.extend([val] if isinstance(val, Event) else val)
    return out


def _equiv_values(ev: Event, attrs: tuple):
    try:
        return tuple(attr_value(ev, a) for a in attrs)
    except _Fail:
        return None


def _type_ok(vtype, ev: Event) -> bool:
    return vtype is None or ev.type == vtype


def negation_ok(p: Prepared, br: Branch, bind: dict, stream: list) -> bool:
    """False if some negated variable of the branch has a witness event (docs/semantics.md, Negation)."""
    if not br.negs:
        return True
    bound = _events(bind)
    members = set(bound)
    lo, hi = min(e.ts for e in bound), max(e.ts for e in bound)
    eqv = _equiv_values(bound[0], p.equiv) if p.equiv else None
    for n in br.negs:
        before_vars, after_vars = br.neg_ctx[n]
        lows = [e for v in before_vars for e in _events({v: bind[v]})]
        highs = [e for v in after_vars for e in _events({v: bind[v]})]
        for x in stream:
            if x in members or not _type_ok(br.types[n], x):
                continue
            if not all(before(e, x) for e in lows) or not all(before(x, e) for e in highs):
                continue
            if max(hi, x.ts) - min(lo, x.ts) > p.window:
                continue
            if p.equiv and _equiv_values(x, p.equiv) != eqv:
                continue
            ext = dict(bind)
            ext[n] = x
            if all(holds(c, ext, p.kleene, p.params) for c in br.neg_conjs.get(n, ())):
                return False
    return True


def _window_ok(p: Prepared, bind: dict) -> bool:
    ts = [e.ts for e in _events(bind)]
    return max(ts) - min(ts) <= p.window


def _sorted(events) -> list:
    """The stream in (ts, id) order; a second copy of an event (same type, ts, id) is dropped."""
    unique = {(e.type, e.ts, e.id): e for e in reversed(list(events))}
    return sorted(unique.values(), key=lambda e: (e.ts, e.id))


# =========================================================================== enumeration

def enumerate_bindings(query: A.Query, events: list, params: dict | None = None) -> list:
    """All bindings under skip_till_any_match: the declarative definition, brute force."""
    p = prepare(query, params)
    stream = _sorted(events)
    out = []
    for br in p.branches:
        out.extend(_enumerate_branch(p, br, stream))
    return out


def _enumerate_branch(p: Prepared, br: Branch, stream: list) -> list:
    order = br.pos
    # a conjunct is checked as soon as its last variable (in `order`) is assigned
    check_at = {j: [] for j in range(len(order))}
    for c in br.pos_conjs:
        last = max((order.index(v) for v in c.vars), default=0)
        check_at[last].append(c)
    out = []

    def candidates(v, bind, used, lo, hi, eqv):
        for e in stream:
            if e in used or not _type_ok(br.types[v], e):
                continue
            if max(hi, e.ts) - min(lo, e.ts) > p.window:
                continue
            if p.equiv:
                val = _equiv_values(e, p.equiv)
                if val is None or (eqv is not None and val != eqv):
                    continue
            ok = True
            for u, val in bind.items():
                u_events = [val] if isinstance(val, Event) else val
                if (u, v) in br.order and not before(u_events[-1], e):
                    ok = False
                if (v, u) in br.order and not before(e, u_events[0]):
                    ok = False
            if ok:
                yield e

    def subsets(cands, chosen, lo, hi):
        for j, e in enumerate(cands):
            nlo, nhi = min(lo, e.ts), max(hi, e.ts)
            if nhi - nlo > p.window:
                continue
            seq = chosen + (e,)
            yield seq, nlo, nhi
            yield from subsets(cands[j + 1:], seq, nlo, nhi)

    def assign(j, bind, used, lo, hi, eqv):
        if j == len(order):
            if negation_ok(p, br, bind, stream):
                out.append(dict(bind))
            return
        v = order[j]
        cands = list(candidates(v, bind, used, lo, hi, eqv))
        if v in p.kleene:
            options = subsets(cands, (), lo, hi)
        else:
            options = ((e, min(lo, e.ts), max(hi, e.ts)) for e in cands)
        for val, nlo, nhi in options:
            if eqv is None and p.equiv and not isinstance(val, Event) and \
                    len({_equiv_values(e, p.equiv) for e in val}) > 1:
                continue
            bind[v] = val
            if all(holds(c, bind, p.kleene, p.params) for c in check_at[j]):
                first = val if isinstance(val, Event) else val[0]
                neqv = eqv if eqv is not None or not p.equiv else _equiv_values(first, p.equiv)
                added = {val} if isinstance(val, Event) else set(val)
                assign(j + 1, bind, used | added, nlo, nhi, neqv)
            del bind[v]

    assign(0, {}, frozenset(), math.inf, -math.inf, None)
    return out


# =========================================================================== NFA^b

def linear_extensions(br: Branch) -> list:
    """Every order of the branch's positive variables compatible with its SEQ constraints."""
    out = []

    def rec(prefix, rest):
        if not rest:
            out.append(tuple(prefix))
            return
        for v in rest:
            if any((u, v) in br.order for u in rest if u != v):
                continue
            rec(prefix + [v], [u for u in rest if u != v])

    rec([], list(br.pos))
    return out


class _Automaton:
    """The NFA^b of one linear sequence v1..vm (section 3.2 steps 1-3).

    A run is (k, bind): k is the index of the current block (k == m: final state); for a
    Kleene block, ``bind`` lacking the variable means state p[1], else p[i]. Kleene variables
    of blocks before k are complete ("closed"). Runs with the same (k, bind) are merged: their
    futures are identical.
    """

    def __init__(self, p: Prepared, br: Branch, seq: tuple, strategy: str):
        self.p, self.br, self.seq, self.strategy = p, br, seq, strategy
        self.m = len(seq)
        self.closed = [frozenset(v for v in seq[:k] if v in p.kleene) for k in range(self.m + 1)]

    def _edge_ok(self, old_bind, old_closed, new_bind, new_closed, first_edge) -> bool:
        """The conjunct instances whose last identifier this edge instantiates all hold."""
        for c in self.br.pos_conjs:
            new = instances(c, new_bind, new_closed)
            if not new:
                continue
            old = () if first_edge else instances(c, old_bind, old_closed)
            for i in new:
                if i not in old and not _true(c, new_bind, self.p.kleene, self.p.params, i):
                    return False
        return True

    def first_event(self, bind):
        return _events({self.seq[0]: bind[self.seq[0]]})[0] if bind else None

    def cond(self, k, bind, e):
        """Begin condition (simple v / p[1]) or take condition (p[i]) of state k for event e:
        the new binding if it holds, else None."""
        v = self.seq[k]
        if not _type_ok(self.br.types[v], e):
            return None
        if self.p.equiv:
            val = _equiv_values(e, self.p.equiv)
            first = self.first_event(bind)
            if val is None or (first is not None and val != _equiv_values(first, self.p.equiv)):
                return None
        new = dict(bind)
        new[v] = bind[v] + (e,) if v in bind else ((e,) if v in self.p.kleene else e)
        closed = self.closed[k]
        return new if self._edge_ok(bind, closed, new, closed, not bind) else None

    def ignore_ok(self, k, bind, e) -> bool:
        """Step 3: the ignore-edge formula of the strategy."""
        s = self.strategy
        if s == "skip_till_any_match":
            return True
        if s == "strict_contiguity":
            return False
        if s == "partition_contiguity":
            if not self.p.equiv:
                return False
            val = _equiv_values(e, self.p.equiv)
            return val is None or val != _equiv_values(self.first_event(bind), self.p.equiv)
        if s == "skip_till_next_match":
            return self.cond(k, bind, e) is None
        raise QueryValidationError(f"unknown strategy {s!r}")

    def proceed(self, k, bind):
        """The proceed (epsilon) edge of p[i]: the successor run or None."""
        v = self.seq[k]
        if v not in self.p.kleene or v not in bind:
            return None
        ok = self._edge_ok(bind, self.closed[k], bind, self.closed[k + 1], False)
        return (k + 1, bind) if ok else None

    def run(self, stream: list) -> list:
        runs = {}
        accepted = {}

        def add(target, k, bind):
            if k == self.m:
                accepted[match_key(bind)] = bind
                return
            target[(k, match_key(bind))] = (k, bind)
            nxt = self.proceed(k, bind)            # epsilon move, whenever it holds
            if nxt is not None:
                add(target, *nxt)

        for e in stream:
            new_runs = {}
            for k, bind in runs.values():
                if self.first_event(bind).ts + self.p.window < e.ts:
                    continue                        # can never write a later event again
                nb = self.cond(k, bind, e)
                if nb is not None:
                    v = self.seq[k]
                    add(new_runs, k + 1 if v not in self.p.kleene else k, nb)
                if self.ignore_ok(k, bind, e):
                    add(new_runs, k, bind)
            nb = self.cond(0, {}, e)                # a new run at every begin of v1
            if nb is not None:
                add(new_runs, 1 if self.seq[0] not in self.p.kleene else 0, nb)
            runs = new_runs
        return list(accepted.values())


def nfa_bindings(query: A.Query, events: list, params: dict | None = None,
                 strategy: str | None = None) -> list:
    """Bindings accepted by the NFA^b of some linear extension of some DNF branch, then
    filtered by window and negation (docs/semantics.md, Selection strategies)."""
    strategy = strategy or query.strategy
    p = prepare(query, params)
    everything = _sorted(events)
    stream = [e for e in everything if p.stream_types is None or e.type in p.stream_types]
    out = {}
    for br in p.branches:
        for seq in linear_extensions(br):
            for bind in _Automaton(p, br, seq, strategy).run(stream):
                if _window_ok(p, bind) and negation_ok(p, br, bind, everything):
                    out[match_key(bind)] = bind
    return list(out.values())


# =========================================================================== entry points

def enumerate_matches(query, events, params=None) -> set:
    return {match_key(b) for b in enumerate_bindings(query, events, params)}


def nfa_matches(query, events, params=None, strategy=None) -> set:
    return {match_key(b) for b in nfa_bindings(query, events, params, strategy)}


def oracle_matches(query: A.Query, events: list, params: dict | None = None) -> set:
    """The set of canonical match keys of ``query`` over the finite stream ``events``."""
    if query.strategy == "skip_till_any_match":
        return enumerate_matches(query, events, params)
    return nfa_matches(query, events, params, query.strategy)


def oracle_bindings(query: A.Query, events: list, params: dict | None = None) -> list:
    """Like oracle_matches but the bindings themselves (for debugging output)."""
    if query.strategy == "skip_till_any_match":
        return enumerate_bindings(query, events, params)
    return nfa_bindings(query, events, params, query.strategy)
