"""Build queries in Python: the same :class:`cep.ast.Query` the parser makes from text.

    from cep.builder import seq, var, kleene, attr, next_, first, query
    q = query(seq(var("a"), kleene("b"), var("c")),
              where=(attr("a", "price") < attr("b", "price"))
                    & (attr("b", "price") < next_("b", "price"))
                    & (attr("c", "price") < first("b", "price")),
              equivalence="companyID", within=(30, "minutes"), slide=(2, "minutes"))

is equal to ``parse_query("PATTERN SEQ(a, b+, c) WHERE [companyID] AND a.price < b.price AND
b.price < NEXT(b.price) AND c.price < FIRST(b.price) WITHIN 30 minutes SLIDE 2 minutes")``.

Expressions are wrapped in :class:`E`, which overloads ``< <= > >= == !=`` (Compare; ``==``
gives op ``'='``), ``& | ~`` (BoolAnd/BoolOr/BoolNot, nested ones flattened like the parser
does) and ``+ - * /`` (BinOp); plain numbers, strings and booleans become Literals.
Python's ``and``/``or``/``not`` and chained comparisons (``a < b < c``) cannot be overloaded:
an ``E`` refuses to be used as a truth value, so such mistakes fail loudly.

Durations: ``within=60`` is ``Duration(Literal(60), 1.0)``, i.e. ``WITHIN 60 seconds``;
``within="W"`` is a parameter; ``within=(30, "minutes")`` is ``Duration(Literal(30), 60.0)``,
i.e. ``WITHIN 30 minutes``. ``WITHIN 30 minutes`` and ``within=1800`` are the same window but
not equal ASTs, so compare builder and parser output with the same unit.
"""
from __future__ import annotations

from cep.ast import (STRATEGIES, Aggregate, And, Attr, BinOp, BoolAnd, BoolNot, BoolOr, Compare,
                     Duration, EventVar, KIndex, Len, Literal, Neg, Or, Param, Query, Seq)
from cep.errors import QueryValidationError
from cep.parser import UNITS
from cep.validate import validate

__all__ = ["E", "seq", "and_", "or_", "var", "kleene", "neg", "attr", "nth", "first", "last",
           "next_", "length", "param", "lit", "agg", "avg", "sum_", "min_", "max_", "count",
           "duration", "query"]

_EXPR_NODES = (Literal, Param, Attr, Len, Aggregate, BinOp, Neg, Compare, BoolAnd, BoolOr, BoolNot)


def _node(x):
    """Unwrap an E, pass an AST expression through, wrap a Python constant as a Literal."""
    if isinstance(x, E):
        return x.node
    if isinstance(x, _EXPR_NODES):
        return x
    if isinstance(x, (bool, int, float, str)):
        return Literal(x)
    raise TypeError(f"cannot use {x!r} in a query expression")


def _combine(cls, left, right):
    items = []
    for item in (_node(left), _node(right)):
        items.extend(item.items if isinstance(item, cls) else (item,))
    return E(cls(tuple(items)))


class E:
    """A thin wrapper around an expression node that gives it Python operators."""

    __slots__ = ("node",)
    __hash__ = None

    def __init__(self, node):
        self.node = _node(node)

    def __repr__(self):
        return f"E({self.node!r})"

    def __bool__(self):
        raise TypeError("a query expression has no truth value: use & | ~ instead of "
                        "and/or/not, and write a < b < c as (a < b) & (b < c)")

    # comparisons
    def __lt__(self, other):
        return E(Compare("<", self.node, _node(other)))

    def __le__(self, other):
        return E(Compare("<=", self.node, _node(other)))

    def __gt__(self, other):
        return E(Compare(">", self.node, _node(other)))

    def __ge__(self, other):
        return E(Compare(">=", self.node, _node(other)))

    def __eq__(self, other):
        return E(Compare("=", self.node, _node(other)))

    def __ne__(self, other):
        return E(Compare("!=", self.node, _node(other)))

    # boolean connectives
    def __and__(self, other):
        return _combine(BoolAnd, self, other)

    def __rand__(self, other):
        return _combine(BoolAnd, other, self)

    def __or__(self, other):
        return _combine(BoolOr, self, other)

    def __ror__(self, other):
        return _combine(BoolOr, other, self)

    def __invert__(self):
        return E(BoolNot(self.node))

    # arithmetic
    def __add__(self, other):
        return E(BinOp("+", self.node, _node(other)))

    def __radd__(self, other):
        return E(BinOp("+", _node(other), self.node))

    def __sub__(self, other):
        return E(BinOp("-", self.node, _node(other)))

    def __rsub__(self, other):
        return E(BinOp("-", _node(other), self.node))

    def __mul__(self, other):
        return E(BinOp("*", self.node, _node(other)))

    def __rmul__(self, other):
        return E(BinOp("*", _node(other), self.node))

    def __truediv__(self, other):
        return E(BinOp("/", self.node, _node(other)))

    def __rtruediv__(self, other):
        return E(BinOp("/", _node(other), self.node))

    def __neg__(self):
        n = self.node
        if isinstance(n, Literal) and isinstance(n.value, (int, float)) \
                and not isinstance(n.value, bool):
            return E(Literal(-n.value))      # the parser folds -5 the same way
        return E(Neg(n))

    def __pos__(self):
        return self


# --------------------------------------------------------------------------- patterns

def seq(*children) -> Seq:
    return Seq(tuple(children))


def and_(*children) -> And:
    return And(tuple(children))


def or_(*children) -> Or:
    return Or(tuple(children))


def _leaf(type_or_name, name, kleene=False, negated=False) -> EventVar:
    if name is None:                         # var("a") is the untyped leaf `a`
        return EventVar(None, type_or_name, kleene, negated)
    return EventVar(type_or_name, name, kleene, negated)


def var(type_or_name: str, name: str | None = None) -> EventVar:
    """``var("A", "a")`` is ``A a``; ``var("a")`` is the untyped ``a``."""
    return _leaf(type_or_name, name)


def kleene(type_or_name: str, name: str | None = None) -> EventVar:
    """``kleene("B", "b")`` is ``B+ b[]``; ``kleene("b")`` is the untyped ``b+``."""
    return _leaf(type_or_name, name, kleene=True)


def neg(type_or_name: str, name: str | None = None) -> EventVar:
    """``neg("C", "c")`` is ``~C c``."""
    return _leaf(type_or_name, name, negated=True)


# --------------------------------------------------------------------------- expressions

def _kindex(upto) -> KIndex | None:
    if upto is None or isinstance(upto, KIndex):
        return upto
    return KIndex("i", upto)


def attr(var: str, name: str, i: int | None = None, index: KIndex | None = None) -> E:
    """``attr("a", "x")`` is ``a.x``; ``i=-1`` gives ``a[i-1].x``, ``i=0`` gives ``a[i].x``."""
    return E(Attr(var, name, index if index is not None else _kindex(i)))


def nth(var: str, name: str, n: int) -> E:
    """``b[n].x`` (1-based, as in the query language)."""
    return E(Attr(var, name, KIndex("first", n - 1)))


def first(var: str, name: str, offset: int = 0) -> E:
    """``FIRST(b.x)`` = ``b[1].x``; offset 1 is ``b[2].x``."""
    return E(Attr(var, name, KIndex("first", offset)))


def last(var: str, name: str, offset: int = 0) -> E:
    """``LAST(b.x)`` = ``b[b.LEN].x``; offset -1 is ``b[b.LEN-1].x``."""
    return E(Attr(var, name, KIndex("last", offset)))


def next_(var: str, name: str) -> E:
    """``NEXT(b.x)`` = ``b[i+1].x``."""
    return E(Attr(var, name, KIndex("i", 1)))


def length(var: str) -> E:
    """``b.LEN``."""
    return E(Len(var))


def param(name: str) -> E:
    """A query parameter (a bare identifier in the text)."""
    return E(Param(name))


def lit(value) -> E:
    return E(Literal(value))


def agg(func: str, var: str, attr: str | None = None, upto=None) -> E:
    """An aggregate; ``upto=-1`` (or ``KIndex('i', -1)``) is ``b[..i-1]``, None the whole ``b``."""
    return E(Aggregate(func, var, attr, _kindex(upto)))


def avg(var: str, attr: str, upto=None) -> E:
    return agg("avg", var, attr, upto)


def sum_(var: str, attr: str, upto=None) -> E:
    return agg("sum", var, attr, upto)


def min_(var: str, attr: str, upto=None) -> E:
    return agg("min", var, attr, upto)


def max_(var: str, attr: str, upto=None) -> E:
    return agg("max", var, attr, upto)


def count(var: str, attr: str | None = None, upto=None) -> E:
    return agg("count", var, attr, upto)


# --------------------------------------------------------------------------- query

def duration(amount, unit: str = "seconds") -> Duration:
    """``duration(30, "minutes")`` = ``WITHIN 30 minutes``; a str amount is a parameter."""
    if unit.lower() not in UNITS:
        raise QueryValidationError(f"unknown time unit {unit!r} "
                                   "(expected seconds, minutes, hours, days or milliseconds)")
    value = Param(amount) if isinstance(amount, str) else Literal(amount)
    return Duration(value, UNITS[unit.lower()])


def _duration(d) -> Duration | None:
    if d is None or isinstance(d, Duration):
        return d
    if isinstance(d, tuple) and len(d) == 2:
        return duration(*d)
    if isinstance(d, bool) or not isinstance(d, (int, float, str)):
        raise QueryValidationError(f"a window is seconds, a parameter name, (amount, unit) or a "
                                   f"Duration, got {d!r}")
    return duration(d)


def query(pattern, where=None, within=None, slide=None, equivalence=(),
          strategy: str = STRATEGIES[0], name: str | None = None) -> Query:
    """Build and validate a Query (see the module docstring for ``within``/``slide``)."""
    if isinstance(equivalence, str):
        equivalence = (equivalence,)
    equiv: list = []
    for a in equivalence:
        if a not in equiv:
            equiv.append(a)
    q = Query(pattern=pattern, where=None if where is None else _node(where),
              equivalence=tuple(equiv), within=_duration(within), slide=_duration(slide),
              strategy=strategy, name=name)
    return validate(q)
