"""Hypothesis strategies for random (query AST, event stream) pairs, and a text renderer.

Queries: 2-5 variables under SEQ/AND/OR (nested), optional negation (leading, middle,
trailing, inside AND), up to two Kleene variables with element-wise, prefix-aggregate and
whole-iteration predicates, comparisons between variables and with constants, arithmetic,
``x.ts``/``x.type``, strings, division (by zero, sometimes), OR/NOT, a parameter, an optional
equivalence test (``[k]``, ``[y][k]``, ``[type]``), a window (literal or parameter ``W``) and
sometimes a SLIDE. Every query satisfies the validation rules: unique variable names, a positive
variable in every DNF branch and in every OR child, WITHIN present, at most one negated variable
and one Kleene index ``i`` per conjunct, and no negated variable next to an index ``i``.

Streams: 5-25 events over the types A-D, small integer timestamps with ties (ids are a random
permutation, so ties are ordered deterministically but not in list order), attributes
x in 0..5, y in 0..3, k in 0..2, s in {p, q, r, 1}; sometimes y, s or k is missing or a
``type`` attribute overrides the event type. At most 6 events of a Kleene type fall into any
window, so Kleene enumeration stays small.
"""
from __future__ import annotations

from hypothesis import strategies as st

from raycep.cep.event import Event
from raycep.cep.lang import ast as A

TYPES = ("A", "B", "C")
STREAM_TYPES = ("A", "B", "C", "D")
NAMES = ("a", "b", "c", "d", "e")
OPS = ("=", "!=", "<", "<=", ">", ">=")
MAX_KLEENE_PER_WINDOW = 6


# --------------------------------------------------------------------------- pattern

def _shape(draw, n: int, allow_or: bool):
    """A random operator tree with n leaves: 'leaf' or (op, [subtrees])."""
    if n == 1:
        return "leaf"
    ops = ["seq", "seq", "seq", "and"] + (["or"] if allow_or else [])
    op = draw(st.sampled_from(ops))
    k = draw(st.integers(2, min(n, 4 if op == "seq" else 3)))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1,
                                unique=True)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    return (op, [_shape(draw, s, allow_or) for s in sizes])


def _build(shape, leaves: list):
    if shape == "leaf":
        return leaves.pop(0)
    op, children = shape
    cls = {"seq": A.Seq, "and": A.And, "or": A.Or}[op]
    return cls(tuple(_build(c, leaves) for c in children))


def _dnf(node) -> list:
    if isinstance(node, A.EventVar):
        return [[node]]
    if isinstance(node, A.Or):
        return [b for c in node.children for b in _dnf(c)]
    out = [[]]
    for child in node.children:
        out = [left + right for left in out for right in _dnf(child)]
    return out


def pattern_valid(pattern) -> bool:
    """Every DNF branch, and every branch of every OR child, has a positive variable."""
    def positive_everywhere(node):
        return all(any(not v.negated for v in br) for br in _dnf(node))
    if not positive_everywhere(pattern):
        return False
    for node in A.walk_pattern(pattern):
        if isinstance(node, A.Or) and not all(positive_everywhere(c) for c in node.children):
            return False
    return True


def kleene_under_and(pattern) -> bool:
    def rec(node, under):
        if isinstance(node, A.EventVar):
            return node.kleene and under
        here = under or isinstance(node, A.And)
        return any(rec(c, here) for c in node.children)
    return rec(pattern, False)


# --------------------------------------------------------------------------- predicates

def _ref(draw, var: A.EventVar, attr: str, element_wise: bool = True):
    """``var.attr``; for a Kleene variable ``b[i].attr`` (if element_wise), FIRST or LAST."""
    if not var.kleene:
        return A.Attr(var.name, attr)
    choices = [A.KIndex("first", 0), A.KIndex("last", 0)]
    if element_wise:
        choices += [None, A.KIndex("i", 0)]
    return A.Attr(var.name, attr, draw(st.sampled_from(choices)))


def _const(draw, attr: str):
    if attr == "s":
        return A.Literal(draw(st.sampled_from(["p", "q", "r"])))
    return A.Literal(draw(st.integers(0, 5 if attr == "x" else 3)))


def _kleene_conjunct(draw, b: str, others: list):
    """Element-wise and whole-iteration predicates on the Kleene variable ``b``."""
    op = draw(st.sampled_from(OPS))
    attr = draw(st.sampled_from(["x", "x", "y"]))
    cur = A.Attr(b, attr, A.KIndex("i", 0))
    other = draw(st.sampled_from(others)) if others else None
    choice = draw(st.integers(0, 11))
    if choice <= 2:      # b[i].x op b[i-1].x  (checked for i = 2..LEN)
        return A.Compare(op, cur, A.Attr(b, attr, A.KIndex("i", -1)))
    if choice == 3:      # NEXT(b.x) op b.x  (i = 1..LEN-1)
        return A.Compare(op, A.Attr(b, attr, A.KIndex("i", 1)), A.Attr(b, attr))
    if choice == 4:      # b[i].x op agg(b[..i-1].x)
        func = draw(st.sampled_from(["avg", "sum", "min", "max", "count"]))
        count_all = func == "count" and draw(st.booleans())
        agg = A.Aggregate(func, b, None if count_all else attr, A.KIndex("i", -1))
        return A.Compare(op, cur, agg)
    if choice == 5:      # FIRST(b).x op LAST(b).x
        return A.Compare(op, A.Attr(b, attr, A.KIndex("first", 0)),
                         A.Attr(b, attr, A.KIndex("last", 0)))
    if choice == 6:      # b[i].x op FIRST / LAST (same variable)
        fixed = draw(st.sampled_from([A.KIndex("first", 0), A.KIndex("last", 0)]))
        return A.Compare(op, cur, A.Attr(b, attr, fixed))
    if choice == 7:      # b.LEN / count(b) bounds
        size = A.Len(b) if draw(st.booleans()) else A.Aggregate("count", b, None)
        return A.Compare(draw(st.sampled_from(["<=", ">=", "=", "!="])), size,
                         A.Literal(draw(st.integers(1, 3))))
    if choice == 8 and other is not None:    # agg(b.x) op other.x  (whole iteration)
        func = draw(st.sampled_from(["sum", "max", "min", "avg"]))
        return A.Compare(op, A.Aggregate(func, b, attr),
                         _ref(draw, other, "x", not other.negated))
    if other is not None and not other.negated:   # b[i].x op other.x  (every i)
        return A.Compare(op, cur, _ref(draw, other, draw(st.sampled_from("xy")), False))
    return A.Compare(op, cur, _const(draw, attr))


def _conjunct(draw, pos: list, neg: list, kleene: list, params: dict):
    """One random conjunct: at most one negated variable, no negated variable together with
    the index i of a Kleene variable (cep.lang.validate forbids it), at most one Kleene ``i``."""
    allvars = pos + neg
    kind = draw(st.sampled_from(["const", "const", "pair", "pair", "arith", "eq_y", "bool",
                                 "kleene", "kleene", "neg", "ts", "str", "div", "param"]))
    if kind == "kleene" and not kleene:
        kind = "pair"
    if kind == "neg" and not neg:
        kind = "const"
    if kind == "const":
        v = draw(st.sampled_from(allvars))
        attr = draw(st.sampled_from(["x", "x", "y"]))
        return A.Compare(draw(st.sampled_from(OPS)), _ref(draw, v, attr, not v.negated),
                         _const(draw, attr))
    if kind == "kleene":
        b = draw(st.sampled_from(kleene))
        return _kleene_conjunct(draw, b.name, [v for v in allvars if v is not b])
    if kind in ("pair", "arith", "eq_y", "neg", "ts", "div"):
        if kind == "neg":
            u = draw(st.sampled_from(neg))
            v = draw(st.sampled_from(pos))
        else:
            u = draw(st.sampled_from(allvars))
            v = draw(st.sampled_from([w for w in allvars
                                      if w is not u and not (u.negated and w.negated)]))
        # one index i at most, and none next to a negated variable
        ew_u = not v.negated and not u.negated
        ew_v = ew_u and not (u.kleene and v.kleene)
        if kind == "eq_y":
            return A.Compare("=", _ref(draw, u, "y", ew_u), _ref(draw, v, "y", ew_v))
        if kind == "ts":     # v.ts - u.ts op c, or u.type = v.type
            if draw(st.booleans()):
                return A.Compare(draw(st.sampled_from(["=", "!="])), _ref(draw, u, "type", ew_u),
                                 _ref(draw, v, "type", ew_v))
            diff = A.BinOp("-", _ref(draw, v, "ts", ew_v), _ref(draw, u, "ts", ew_u))
            return A.Compare(draw(st.sampled_from(OPS)), diff, A.Literal(draw(st.integers(0, 3))))
        left = _ref(draw, u, "x", ew_u)
        right = _ref(draw, v, draw(st.sampled_from(["x", "x", "y"])), ew_v)
        if kind == "div":    # y may be 0: division by zero makes the conjunct false
            return A.Compare(draw(st.sampled_from(OPS)), A.BinOp("/", left, right),
                             A.Literal(draw(st.sampled_from([1, 2, 0.5]))))
        if kind == "arith":
            left = A.BinOp(draw(st.sampled_from(["+", "-", "*"])), left,
                           A.Literal(draw(st.integers(1, 2))))
            if draw(st.integers(0, 3)) == 0:
                left = A.Neg(left)
        return A.Compare(draw(st.sampled_from(OPS)), left, right)
    if kind == "str":        # s is a string, sometimes a number (comparison fails)
        v = draw(st.sampled_from(allvars))
        w = draw(st.sampled_from([u for u in allvars if not (u.negated and v.negated)]))
        ew = not v.negated and not w.negated and not (v.kleene and w.kleene and v is not w)
        right = _const(draw, "s") if draw(st.booleans()) else _ref(draw, w, "s", ew)
        return A.Compare(draw(st.sampled_from(OPS)), _ref(draw, v, "s", ew), right)
    if kind == "param":      # a parameter bound at compile time
        v = draw(st.sampled_from(allvars))
        params.setdefault("T", draw(st.integers(0, 5)))
        return A.Compare(draw(st.sampled_from(OPS)), _ref(draw, v, "x", not v.negated),
                         A.Param("T"))
    # kind == "bool": OR / NOT; the second operand may fail (missing y) after a true first one
    v = draw(st.sampled_from(allvars))
    w = draw(st.sampled_from([u for u in allvars if not (u.negated and v.negated)]))
    ew = not v.negated and not w.negated and not (v.kleene and w.kleene and v is not w)
    c1 = A.Compare(draw(st.sampled_from(OPS)), _ref(draw, v, "x", ew), _const(draw, "x"))
    c2 = A.Compare(draw(st.sampled_from(OPS)), _ref(draw, w, "y", ew), _const(draw, "y"))
    if draw(st.booleans()):
        return A.BoolOr((c1, c2))
    return A.BoolNot(A.BoolAnd((c1, c2)))


# --------------------------------------------------------------------------- queries

@st.composite
def queries(draw, min_vars=2, max_vars=5, allow_or=True, allow_negation=True,
            allow_kleene=True, allow_untyped=True, equivalence=None):
    """A random valid Query (strategy skip_till_any_match; tests replace it).

    ``equivalence``: None = random, True = always ``[k]``, False = never.
    Returns (query, params).
    """
    n = draw(st.integers(min_vars, max_vars))
    for _ in range(20):
        shape = _shape(draw, n, allow_or)
        n_neg = draw(st.sampled_from([0, 0, 1, 1, 2])) if allow_negation else 0
        n_neg = min(n_neg, n - 1)
        negated = set(draw(st.lists(st.integers(0, n - 1), min_size=n_neg, max_size=n_neg,
                                    unique=True)))
        choices = [j for j in range(n) if j not in negated]
        n_kleene = draw(st.sampled_from([0, 0, 0, 1, 1, 2])) if allow_kleene else 0
        kleene_at = set(draw(st.lists(st.sampled_from(choices), min_size=0,
                                      max_size=n_kleene, unique=True))) if n_kleene else set()
        untyped_at = None
        simple = [j for j in range(n) if j not in kleene_at]
        if allow_untyped and simple and draw(st.integers(0, 9)) == 0:
            untyped_at = draw(st.sampled_from(simple))
        leaves = []
        for j in range(n):
            vtype = None if j == untyped_at else draw(st.sampled_from(TYPES))
            leaves.append(A.EventVar(vtype, NAMES[j], kleene=j in kleene_at,
                                     negated=j in negated))
        pattern = _build(shape, list(leaves))
        if pattern_valid(pattern):
            break
    else:
        leaves = [A.EventVar(draw(st.sampled_from(TYPES)), NAMES[j]) for j in range(n)]
        pattern = A.Seq(tuple(leaves))
    pos = [v for v in leaves if not v.negated]
    neg = [v for v in leaves if v.negated]
    kleene = [v for v in leaves if v.kleene]
    params = {}
    n_conj = draw(st.sampled_from([0, 1, 1, 2, 2, 2, 3, 4]))
    conjs = [_conjunct(draw, pos, neg, kleene, params) for _ in range(n_conj)]
    where = None if not conjs else conjs[0] if len(conjs) == 1 else A.BoolAnd(tuple(conjs))
    if equivalence is None:
        equiv = draw(st.sampled_from([(), (), (), (), (), ("k",), ("k",), ("y", "k"),
                                      ("type",)]))
    else:
        equiv = ("k",) if equivalence else ()
    w = draw(st.sampled_from([1, 2, 3, 3, 4, 5, 6, 8, 10, 2.5]))
    if draw(st.integers(0, 9)) == 0:
        within = A.Duration(A.Param("W"), 1.0)
        params["W"] = w
    else:
        within = A.Duration(A.Literal(w), 1.0)
    slide = None
    if draw(st.integers(0, 9)) == 0:
        slide = A.Duration(A.Literal(draw(st.sampled_from([0.5, 1, 2]))), 1.0)
        if slide.amount.value > w:
            slide = None
    return A.Query(pattern, where, equiv, within, slide), params


def window_of(query: A.Query, params: dict) -> float:
    amount = query.within.amount
    value = params[amount.name] if isinstance(amount, A.Param) else amount.value
    return value * query.within.unit_seconds


def kleene_types(query: A.Query) -> set:
    return {v.type for v in A.event_vars(query.pattern) if v.kleene}


# --------------------------------------------------------------------------- streams

@st.composite
def streams(draw, min_events=5, max_events=25, limit_types=(), window=0.0, keyed=False):
    """A list of Events sorted by (ts, id). ``limit_types``: at most 6 events of each of
    these types within any window; ``keyed``: Event.key = attribute k."""
    n = draw(st.integers(min_events, max_events))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 1, 2, 3]), min_size=n, max_size=n))
    ids = draw(st.permutations(range(n)))
    missing = draw(st.integers(0, 4)) == 0
    odd_type = draw(st.integers(0, 9)) == 0
    events, ts = [], 0
    for j in range(n):
        ts += steps[j]
        attrs = {"x": draw(st.integers(0, 5)), "y": draw(st.integers(0, 3)),
                 "k": draw(st.integers(0, 2)), "s": draw(st.sampled_from(["p", "q", "r", 1]))}
        if missing and draw(st.integers(0, 3)) == 0:
            del attrs[draw(st.sampled_from(["y", "s"] if keyed else ["y", "s", "k"]))]
        if odd_type and draw(st.integers(0, 4)) == 0:
            attrs["type"] = draw(st.sampled_from(["A", "B", "Z"]))
        etype = draw(st.sampled_from(STREAM_TYPES))
        events.append(Event(etype, float(ts), attrs, key=attrs["k"] if keyed else None,
                            id=f"e{ids[j]:02d}"))
    events.sort(key=lambda e: (e.ts, e.id))
    return limit_kleene(events, limit_types, window)


def limit_kleene(events: list, limit_types, window: float) -> list:
    """Drop events of the given types so that at most 6 of a type fall into any window."""
    kept, recent = [], {t: [] for t in limit_types}
    for e in events:
        if e.type in recent:
            lst = recent[e.type]
            if sum(1 for t in lst if t >= e.ts - window) >= MAX_KLEENE_PER_WINDOW:
                continue
            lst.append(e.ts)
        kept.append(e)
    return kept


@st.composite
def query_and_stream(draw, keyed=False, **kw):
    """(query, params, events) with the Kleene candidate limit applied."""
    query, params = draw(queries(**kw))
    events = draw(streams(limit_types=kleene_types(query), window=window_of(query, params),
                          keyed=keyed))
    return query, params, events


# --------------------------------------------------------------------------- rendering

def _idx(var: str, k: A.KIndex | None) -> str:
    if k is None:
        return ""
    if k.base == "i":
        return "[i]" if k.offset == 0 else f"[i{k.offset:+d}]"
    if k.base == "first":
        return f"[{1 + k.offset}]"
    return f"[{var}.LEN]" if k.offset == 0 else f"[{var}.LEN{k.offset:+d}]"


def expr_text(x) -> str:
    if isinstance(x, A.Literal):
        if isinstance(x.value, bool):
            return "true" if x.value else "false"
        return repr(x.value) if isinstance(x.value, str) else str(x.value)
    if isinstance(x, A.Param):
        return x.name
    if isinstance(x, A.Attr):
        return f"{x.var}{_idx(x.var, x.index)}.{x.attr}"
    if isinstance(x, A.Len):
        return f"{x.var}.LEN"
    if isinstance(x, A.Aggregate):
        if x.attr is None:
            return f"{x.func}({x.var})"
        if x.upto is None:
            return f"{x.func}({x.var}[].{x.attr})"
        return f"{x.func}({x.var}[..{_idx(x.var, x.upto)[1:-1]}].{x.attr})"
    if isinstance(x, A.BinOp):
        return f"({expr_text(x.left)} {x.op} {expr_text(x.right)})"
    if isinstance(x, A.Neg):
        return f"-{expr_text(x.operand)}"
    if isinstance(x, A.Compare):
        return f"{expr_text(x.left)} {x.op} {expr_text(x.right)}"
    if isinstance(x, A.BoolAnd):
        return "(" + " AND ".join(expr_text(i) for i in x.items) + ")"
    if isinstance(x, A.BoolOr):
        return "(" + " OR ".join(expr_text(i) for i in x.items) + ")"
    if isinstance(x, A.BoolNot):
        return f"NOT ({expr_text(x.item)})"
    raise TypeError(x)


def pattern_text(node) -> str:
    if isinstance(node, A.EventVar):
        if node.type is None:
            body = f"{node.name}+" if node.kleene else node.name
        elif node.kleene:
            body = f"{node.type}+ {node.name}[]"
        else:
            body = f"{node.type} {node.name}"
        return f"~{body}" if node.negated else body
    name = {A.Seq: "SEQ", A.And: "AND", A.Or: "OR"}[type(node)]
    return f"{name}(" + ", ".join(pattern_text(c) for c in node.children) + ")"


def query_text(q: A.Query) -> str:
    """The query in the query language (failure reports; queries registered as text)."""
    parts = [f"PATTERN {pattern_text(q.pattern)}"]
    conds = [f"[{a}]" for a in q.equivalence]
    if q.where is not None:
        items = q.where.items if isinstance(q.where, A.BoolAnd) else (q.where,)
        conds += [expr_text(c) for c in items]
    if conds:
        parts.append("WHERE " + " AND ".join(conds))
    if q.within is not None:
        amount = q.within.amount
        a = amount.name if isinstance(amount, A.Param) else f"{amount.value} seconds"
        parts.append(f"WITHIN {a}")
    if q.slide is not None:
        amount = q.slide.amount
        a = amount.name if isinstance(amount, A.Param) else f"{amount.value} seconds"
        parts.append(f"SLIDE {a}")
    if q.strategy != "skip_till_any_match":
        parts.append(f"STRATEGY {q.strategy}")
    return "\n".join(parts)


def events_text(events) -> str:
    return "\n".join(f"  {e.type} ts={e.ts:g} id={e.id} {e.attrs}" for e in events)


@st.composite
def trailing_negation_query_and_stream(draw, keyed=False):
    """(query, params, events) whose pattern ends with a negated variable ``z`` (a deferred
    negation: its matches are confirmed only when the window has closed), with an optional
    predicate on ``z``. Issue 13: out-of-order triggers of such queries lost matches."""
    query, params = draw(queries(allow_or=False))
    z = A.EventVar(draw(st.sampled_from(TYPES)), "z", negated=True)
    pattern = query.pattern
    children = pattern.children if isinstance(pattern, A.Seq) else (pattern,)
    where = query.where
    if draw(st.booleans()):
        pos = [v for v in A.event_vars(pattern) if not v.negated]
        kleene = [v for v in pos if v.kleene]
        extra = _conjunct(draw, pos, [z], kleene, params)
        where = extra if where is None else A.BoolAnd((where, extra))
    query = A.Query(A.Seq(tuple(children) + (z,)), where, query.equivalence, query.within,
                    query.slide)
    events = draw(streams(limit_types=kleene_types(query), window=window_of(query, params),
                          keyed=keyed))
    return query, params, events
