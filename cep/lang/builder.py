"""Build queries in Python: the same :class:`cep.lang.ast.Query` the parser makes from text.

    from raycep.cep.lang.builder import seq, var, kleene, attr, next_, first, query
    q = query(seq(var(None, "a"), kleene(None, "b"), var(None, "c")),
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

``where`` takes an expression built with these helpers, an AST node, or query text, which is
parsed as the WHERE clause of the query language: ``where="[symbol] AND b.price < a.price"``
is the same as the ``E`` expression (a string is never a string literal there; a literal
string operand is ``attr("a", "s") == "x"`` or ``lit("x")``).

Variables: ``var("Stock", "a")`` is ``Stock a`` (the event type first, then the name);
``var(None, "a")`` is the untyped ``a``, which matches events of every type. A single
argument is refused (``var("Stock")`` would otherwise be a variable named Stock of any type),
and a name declared twice because type and name were swapped is reported as such.

Durations: ``within=60`` is ``Duration(Literal(60), 1.0)``, i.e. ``WITHIN 60 seconds``;
``within="10 seconds"`` (any amount and unit of the query language) is ``WITHIN 10 seconds``;
``within="W"`` (an identifier) is a parameter, ``within="W minutes"`` too; ``within=(30,
"minutes")`` is ``Duration(Literal(30), 60.0)``, i.e. ``WITHIN 30 minutes``; a
``datetime.timedelta`` is its length in seconds. ``WITHIN 30 minutes`` and ``within=1800`` are
the same window but not equal ASTs, so compare builder and parser output with the same unit.

An argument of the wrong Python type raises ``TypeError`` naming the argument; a well-typed
argument that means nothing (an unknown unit, a bad duration text) raises the query errors
(``QuerySyntaxError``/``QueryValidationError``).
"""
from __future__ import annotations

import datetime

from raycep.cep.errors import QueryValidationError
from raycep.cep.lang.ast import (STRATEGIES, Aggregate, And, Attr, BinOp, BoolAnd, BoolNot, BoolOr,
                                 Compare, Duration, EventVar, KIndex, Len, Literal, Neg, Or, Param,
                                 Query, Seq, event_vars, walk_expr)
from raycep.cep.lang.parser import UNITS, _Parser, tokenize
from raycep.cep.lang.validate import validate

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

_PATTERNS = (EventVar, Seq, And, Or)
_NO_NAME = object()


def _children(func: str, children) -> tuple:
    for k, child in enumerate(children):
        if not isinstance(child, _PATTERNS):
            raise TypeError(f"{func}() argument {k + 1} must be a pattern (var, kleene, neg, "
                            f"seq, and_, or_), got {type(child).__name__}: {child!r}")
    return tuple(children)


def seq(*children) -> Seq:
    return Seq(_children("seq", children))


def and_(*children) -> And:
    return And(_children("and_", children))


def or_(*children) -> Or:
    return Or(_children("or_", children))


def _leaf(func: str, type, name, kleene=False, negated=False) -> EventVar:
    example = {"var": ("Stock", "a"), "kleene": ("Stock", "b"), "neg": ("Stock", "n")}[func]
    if name is _NO_NAME:
        raise TypeError(
            f"{func}({type!r}) has one argument: {func}() takes the event type and the "
            f"variable name, {func}({example[0]!r}, {example[1]!r}); a variable that matches "
            f"every event type is {func}(None, {type!r})")
    if type is not None and not isinstance(type, str):
        raise TypeError(f"{func}() argument 'type' must be a string or None, got "
                        f"{type.__class__.__name__}: {type!r}")
    if not isinstance(name, str):
        raise TypeError(f"{func}() argument 'name' must be a string, got "
                        f"{name.__class__.__name__}: {name!r}")
    return EventVar(type, name, kleene, negated)


def var(type: str | None, name: str = _NO_NAME) -> EventVar:
    """``var("A", "a")`` is ``A a``; ``var(None, "a")`` is the untyped ``a``."""
    return _leaf("var", type, name)


def kleene(type: str | None, name: str = _NO_NAME) -> EventVar:
    """``kleene("B", "b")`` is ``B+ b[]``; ``kleene(None, "b")`` is the untyped ``b+``."""
    return _leaf("kleene", type, name, kleene=True)


def neg(type: str | None, name: str = _NO_NAME) -> EventVar:
    """``neg("C", "c")`` is ``~C c``."""
    return _leaf("neg", type, name, negated=True)


# --------------------------------------------------------------------------- expressions

def _kindex(upto) -> KIndex | None:
    if upto is None or isinstance(upto, KIndex):
        return upto
    return KIndex("i", upto)


def _strings(func: str, **args) -> None:
    for arg, value in args.items():
        if not isinstance(value, str):
            raise TypeError(f"{func}() argument {arg!r} must be a string, got "
                            f"{value.__class__.__name__}: {value!r}")


def attr(var: str, name: str, i: int | None = None, index: KIndex | None = None) -> E:
    """``attr("a", "x")`` is ``a.x``; ``i=-1`` gives ``a[i-1].x``, ``i=0`` gives ``a[i].x``."""
    _strings("attr", var=var, name=name)
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
    if not isinstance(unit, str):
        raise TypeError(f"duration() argument 'unit' must be a string such as 'seconds', got "
                        f"{unit.__class__.__name__}: {unit!r}")
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        raise TypeError(f"duration() argument 'amount' must be a number or a parameter name, "
                        f"got {amount.__class__.__name__}: {amount!r}")
    if unit.lower() not in UNITS:
        raise QueryValidationError(f"unknown time unit {unit!r} "
                                   "(expected seconds, minutes, hours, days or milliseconds)")
    value = Param(amount) if isinstance(amount, str) else Literal(amount)
    return Duration(value, UNITS[unit.lower()])


def _duration(d, arg: str) -> Duration | None:
    if d is None or isinstance(d, Duration):
        return d
    if isinstance(d, tuple) and len(d) == 2:
        return duration(*d)
    if isinstance(d, datetime.timedelta):
        seconds = d.total_seconds()
        return duration(int(seconds) if seconds.is_integer() else seconds)
    if isinstance(d, str):
        return _parse_duration(d, arg)
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError(f"query() argument {arg!r} must be seconds (a number), a text such as "
                        f"'10 seconds', a parameter name, (amount, unit), a datetime.timedelta "
                        f"or a Duration, got {d.__class__.__name__}: {d!r}")
    return duration(d)


def _parse_duration(text: str, arg: str) -> Duration:
    """``"10 seconds"``, ``"250 ms"``, ``"1.5 h"``, ``"10"`` (seconds), ``"W"`` (a parameter),
    ``"W minutes"``: the query language's duration."""
    parser = _Parser(text, tokenize(text))
    d = parser.duration(arg.upper() if arg in ("within", "slide") else arg)
    if parser.tok.kind != "eof":
        raise parser.expected("the end of the duration (an amount and a unit, e.g. "
                              "'10 seconds')")
    return d


def _where(where, pattern) -> tuple:
    """``(expression or None, equivalence attributes, strategy or None)`` of ``where``."""
    if where is None:
        return None, (), None
    if not isinstance(where, str):
        if isinstance(where, (E, Literal, Param, Attr, Len, Aggregate, BinOp, Neg, Compare,
                              BoolAnd, BoolOr, BoolNot, bool)):
            return _node(where), (), None
        raise TypeError(f"query() argument 'where' must be an expression (attr(...) < ..., "
                        f"...), an AST node or query text, got {where.__class__.__name__}: "
                        f"{where!r}")
    parser = _Parser(where, tokenize(where))
    try:
        expr, equivalence, strategy = parser.where(pattern)
    except RecursionError:
        raise parser.error("condition nested too deeply") from None
    if parser.tok.kind != "eof":
        raise parser.expected("AND, OR, a comparison or the end of the condition")
    return expr, equivalence, strategy


def _swapped(pattern, where) -> None:
    """``var("a", "Stock")`` declares a variable named Stock of type a: when that shows (a
    name declared twice, or WHERE reading a "variable" that is a type), say so."""
    leaves = event_vars(pattern)
    names = [v.name for v in leaves]
    used = {n.var for n in walk_expr(where) if isinstance(n, (Attr, Len, Aggregate))}
    for v in leaves:
        if v.type is None:
            continue
        twice = names.count(v.name) > 1
        if twice or (v.type in used and v.type not in names):
            func = "neg" if v.negated else "kleene" if v.kleene else "var"
            why = (f"variable {v.name!r} is declared {names.count(v.name)} times" if twice else
                   f"WHERE reads variable {v.type!r}, which the PATTERN has as an event type")
            raise QueryValidationError(
                f"{why}: {func}({v.type!r}, {v.name!r}) declares a variable named {v.name!r} "
                f"of event type {v.type!r}; {func}() takes the event type first, then the "
                f"name: did you mean {func}({v.name!r}, {v.type!r})?")


def query(pattern, where=None, within=None, slide=None, equivalence=(),
          strategy: str = STRATEGIES[0], name: str | None = None) -> Query:
    """Build and validate a Query (see the module docstring for ``where``, ``within`` and
    ``slide``)."""
    if not isinstance(pattern, _PATTERNS):
        raise TypeError(f"query() argument 'pattern' must be a pattern (var, kleene, neg, seq, "
                        f"and_, or_), got {pattern.__class__.__name__}: {pattern!r}")
    if isinstance(equivalence, str):
        equivalence = (equivalence,)
    try:
        equivalence = list(equivalence)
    except TypeError:
        raise TypeError(f"query() argument 'equivalence' must be an attribute name or a list "
                        f"of them, got {equivalence.__class__.__name__}: {equivalence!r}") \
            from None
    for a in equivalence:
        if not isinstance(a, str):
            raise TypeError(f"query() argument 'equivalence' must hold attribute names "
                            f"(strings), got {a.__class__.__name__}: {a!r}")
    if not isinstance(strategy, str):
        raise TypeError(f"query() argument 'strategy' must be a string, got "
                        f"{strategy.__class__.__name__}: {strategy!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"query() argument 'name' must be a string or None, got "
                        f"{name.__class__.__name__}: {name!r}")
    expr, more, where_strategy = _where(where, pattern)
    if where_strategy is not None:
        if strategy not in (STRATEGIES[0], where_strategy):
            raise QueryValidationError(f"conflicting selection strategies: '{where_strategy}' "
                                       f"in where and '{strategy}' in strategy")
        strategy = where_strategy
    equiv: list = []
    for a in (*equivalence, *more):
        if a not in equiv:
            equiv.append(a)
    _swapped(pattern, expr)
    q = Query(pattern=pattern, where=expr, equivalence=tuple(equiv),
              within=_duration(within, "within"), slide=_duration(slide, "slide"),
              strategy=strategy, name=name)
    try:
        return validate(q)
    except QueryValidationError as exc:
        if isinstance(where, str) and exc.line is not None:   # a node of the where text
            raise QueryValidationError(exc.reason, where, exc.line, exc.column) from None
        raise
