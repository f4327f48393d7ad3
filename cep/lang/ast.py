"""The query AST: frozen dataclasses produced by the parser and by the builder API.

text --parser--> Query (this module) --compiler--> CompiledQuery --planner--> Plan.

``pos`` fields hold ``(line, column)`` of the construct in the query text (1-based), or None
for queries built in Python; they never take part in equality.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

STRATEGIES = (
    "skip_till_any_match",     # default
    "skip_till_next_match",
    "partition_contiguity",
    "strict_contiguity",
)

Pos = Union[tuple, None]


def _pos():
    return field(default=None, compare=False, repr=False)


# --------------------------------------------------------------------------- pattern nodes

@dataclass(frozen=True)
class EventVar:
    """``A a`` / ``A+ a[]`` / ``~A a`` / ``!A a`` / ``~(A a)``; ``type`` None = any type (``a``)."""
    type: str | None
    name: str
    kleene: bool = False
    negated: bool = False
    pos: Pos = _pos()


@dataclass(frozen=True)
class Seq:
    children: tuple
    pos: Pos = _pos()


@dataclass(frozen=True)
class And:
    children: tuple
    pos: Pos = _pos()


@dataclass(frozen=True)
class Or:
    children: tuple
    pos: Pos = _pos()


Pattern = Union[EventVar, Seq, And, Or]


# --------------------------------------------------------------------------- expressions

@dataclass(frozen=True)
class KIndex:
    """An index into a Kleene variable.

    base 'i' (the current element; offset -1 is ``i-1``, +1 is ``i+1`` / NEXT),
    base 'first' (offset 0 is ``[1]`` / FIRST, offset 1 is ``[2]``),
    base 'last' (offset 0 is ``[x.LEN]`` / LAST, -1 is ``[x.LEN-1]``).
    """
    base: str
    offset: int = 0


@dataclass(frozen=True)
class Literal:
    """A number, string or boolean. ``80%`` is parsed as the number 0.8."""
    value: object
    pos: Pos = _pos()


@dataclass(frozen=True)
class Param:
    """A bare identifier (``thresholdGas``, ``W``): a query parameter bound at compile time."""
    name: str
    pos: Pos = _pos()


@dataclass(frozen=True)
class Attr:
    """``var.attr`` or ``var[index].attr``; index None on a Kleene variable means ``[i]``."""
    var: str
    attr: str
    index: KIndex | None = None
    pos: Pos = _pos()


@dataclass(frozen=True)
class Len:
    """``var.LEN``: the number of events bound to a Kleene variable."""
    var: str
    pos: Pos = _pos()


@dataclass(frozen=True)
class Aggregate:
    """``avg|sum|min|max|count`` over a Kleene variable.

    ``upto`` None: the whole iteration (``avg(b.price)``, ``avg(b[].price)``, ``count(b)``);
    otherwise the prefix ``b[..upto]``, e.g. ``KIndex('i', -1)`` for ``b[..i-1]``.
    ``attr`` is None only for ``count``.
    """
    func: str
    var: str
    attr: str | None
    upto: KIndex | None = None
    pos: Pos = _pos()


@dataclass(frozen=True)
class BinOp:
    """Arithmetic: op in ``+ - * /``."""
    op: str
    left: object
    right: object
    pos: Pos = _pos()


@dataclass(frozen=True)
class Neg:
    """Unary minus."""
    operand: object
    pos: Pos = _pos()


@dataclass(frozen=True)
class Compare:
    """op in ``= != < <= > >=`` (``==`` and ``<>`` are normalised to ``=`` and ``!=``)."""
    op: str
    left: object
    right: object
    pos: Pos = _pos()


@dataclass(frozen=True)
class BoolAnd:
    items: tuple
    pos: Pos = _pos()


@dataclass(frozen=True)
class BoolOr:
    items: tuple
    pos: Pos = _pos()


@dataclass(frozen=True)
class BoolNot:
    item: object
    pos: Pos = _pos()


Expr = Union[Literal, Param, Attr, Len, Aggregate, BinOp, Neg, Compare, BoolAnd, BoolOr, BoolNot]


# --------------------------------------------------------------------------- the query

@dataclass(frozen=True)
class Duration:
    """``WITHIN 30 minutes`` -> Duration(Literal(30), 60.0); ``WITHIN W`` -> Duration(Param('W'), 1.0)."""
    amount: Literal | Param
    unit_seconds: float = 1.0
    pos: Pos = _pos()


@dataclass(frozen=True)
class Query:
    """One pattern query.

    ``where`` holds the predicates (the strategy braces of SASE+ are unwrapped);
    ``equivalence`` the ``[attr]`` tests, which apply to every variable, negated ones included.
    """
    pattern: Pattern
    where: Expr | None = None
    equivalence: tuple = ()
    within: Duration | None = None
    slide: Duration | None = None
    strategy: str = "skip_till_any_match"
    name: str | None = None
    text: str | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        """The query as query-language text (``query_text``), also for a built one."""
        return query_text(self)


def walk_pattern(node):
    """Yield every pattern node, depth first."""
    yield node
    for child in getattr(node, "children", ()):
        yield from walk_pattern(child)


def event_vars(node) -> list:
    """All EventVar leaves of a pattern, left to right."""
    return [n for n in walk_pattern(node) if isinstance(n, EventVar)]


def walk_expr(expr):
    """Yield every expression node, depth first."""
    if expr is None:
        return
    yield expr
    if isinstance(expr, (BinOp, Compare)):
        yield from walk_expr(expr.left)
        yield from walk_expr(expr.right)
    elif isinstance(expr, Neg):
        yield from walk_expr(expr.operand)
    elif isinstance(expr, (BoolAnd, BoolOr)):
        for item in expr.items:
            yield from walk_expr(item)
    elif isinstance(expr, BoolNot):
        yield from walk_expr(expr.item)


#: the escapes of the query language's string literals (cep.lang.parser), for writing them back
_STRING_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r",
                   "\0": "\\0"}
#: WITHIN / SLIDE units written back (seconds per unit)
_UNIT_NAMES = {0.001: "milliseconds", 1.0: "seconds", 60.0: "minutes", 3600.0: "hours",
               86400.0: "days"}


def _string_text(value: str) -> str:
    return "'" + "".join(_STRING_ESCAPES.get(ch, ch) for ch in value) + "'"


def expr_text(expr) -> str:
    """Query-language text of an expression (for messages and statistics; the parser reads it
    back as the same expression)."""
    def index(var, idx):
        if idx is None:
            return var
        return f"{var}[{index_text(var, idx)}]"

    def index_text(var, idx):
        if idx.base == "i":
            return f"i{idx.offset:+d}" if idx.offset else "i"
        if idx.base == "first":
            return str(idx.offset + 1)
        return f"{var}.LEN{idx.offset:+d}" if idx.offset else f"{var}.LEN"

    def operand(e) -> str:
        """An operand of a comparison or arithmetic: a comparison or NOT in parentheses
        (``a < b = true`` would read as a chain, ``NOT x = y`` as the negated comparison)."""
        return f"({text(e)})" if isinstance(e, (Compare, BoolNot)) else text(e)

    def text(e) -> str:
        if isinstance(e, Literal):
            return _string_text(e.value) if isinstance(e.value, str) else \
                str(e.value).lower() if isinstance(e.value, bool) else str(e.value)
        if isinstance(e, Param):
            return e.name
        if isinstance(e, Attr):
            return f"{index(e.var, e.index)}.{e.attr}"
        if isinstance(e, Len):
            return f"{e.var}.LEN"
        if isinstance(e, Aggregate):
            target = e.var if e.upto is None else f"{e.var}[..{index_text(e.var, e.upto)}]"
            return f"{e.func}({target}{'.' + e.attr if e.attr else ''})"
        if isinstance(e, BinOp):
            return f"({operand(e.left)} {e.op} {operand(e.right)})"
        if isinstance(e, Neg):
            return f"-{operand(e.operand)}"
        if isinstance(e, Compare):
            return f"{operand(e.left)} {e.op} {operand(e.right)}"
        if isinstance(e, BoolAnd):
            return "(" + " AND ".join(text(i) for i in e.items) + ")"
        if isinstance(e, BoolOr):
            return "(" + " OR ".join(text(i) for i in e.items) + ")"
        if isinstance(e, BoolNot):
            return f"NOT {text(e.item)}"
        return type(e).__name__
    return text(expr)


def pattern_text(node) -> str:
    """Query-language text of a pattern (``SEQ(Stock a, Stock+ b[], ~Stock n)``)."""
    if isinstance(node, EventVar):
        if node.type is None:
            body = f"{node.name}+" if node.kleene else node.name
        else:
            body = f"{node.type}+ {node.name}[]" if node.kleene else f"{node.type} {node.name}"
        return f"~{body}" if node.negated else body
    name = {Seq: "SEQ", And: "AND", Or: "OR"}[type(node)]
    return f"{name}(" + ", ".join(pattern_text(c) for c in node.children) + ")"


def _duration_text(d: Duration) -> str:
    amount = d.amount.name if isinstance(d.amount, Param) else d.amount.value
    unit = _UNIT_NAMES.get(d.unit_seconds)
    if unit is None:                    # (not made by the parser or the builder)
        if isinstance(amount, str):
            raise ValueError(f"a duration of parameter {amount} in units of "
                             f"{d.unit_seconds} seconds has no query text")
        amount, unit = amount * d.unit_seconds, "seconds"
    return f"{amount} {unit}"


def query_text(query: Query) -> str:
    """Query-language text of a Query (``str(query)``): ``parse_query`` of it gives an equal
    Query, so a query built in Python (cep.lang.builder) can be stored, shown or registered as
    text."""
    parts = [f"NAME {query.name}"] if query.name else []
    parts.append(f"PATTERN {pattern_text(query.pattern)}")
    conds = [f"[{', '.join(query.equivalence)}]"] if query.equivalence else []
    if query.where is not None:
        items = query.where.items if isinstance(query.where, BoolAnd) else (query.where,)
        conds += [expr_text(item) for item in items]
    if conds:
        parts.append("WHERE " + " AND ".join(conds))
    if query.within is not None:
        parts.append(f"WITHIN {_duration_text(query.within)}")
    if query.slide is not None:
        parts.append(f"SLIDE {_duration_text(query.slide)}")
    if query.strategy != STRATEGIES[0]:
        parts.append(f"STRATEGY {query.strategy}")
    return "\n".join(parts)
