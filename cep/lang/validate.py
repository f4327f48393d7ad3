"""Semantic checks on a parsed or built :class:`cep.lang.ast.Query`.

``validate(query)`` returns the query unchanged or raises :class:`QueryValidationError` naming
the variable/attribute and what is wrong, with the position of the offending node (caret excerpt
from ``query.text`` when the query came from text). The rules are the restrictions of the
semantics (docs/language.md, docs/semantics.md): a conjunct may use the index ``i`` of at most
one Kleene variable and mention at most one negated variable (SASE+ section 2; negation as in
"Efficient Detection of Complex Event Patterns Using Lazy Chain Automata"), every negation is
bounded by a positive event, and every query has a window.
"""
from __future__ import annotations

import math

from raycep.cep.errors import QueryValidationError, short_repr
from raycep.cep.lang.ast import (STRATEGIES, Aggregate, And, Attr, BinOp, BoolAnd, BoolNot, BoolOr,
                                 Compare, Duration, EventVar, KIndex, Len, Literal, Neg, Or, Param,
                                 Query, Seq, expr_text, walk_expr, walk_pattern)

__all__ = ["validate", "conjuncts", "check_strategy_vars", "finite", "static_kind",
           "AGGREGATES"]

AGGREGATES = ("avg", "sum", "min", "max", "count")
_COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")
_ARITH_OPS = ("+", "-", "*", "/")
_EXPR_NODES = (Literal, Param, Attr, Len, Aggregate, BinOp, Neg, Compare, BoolAnd, BoolOr, BoolNot)


def finite(value) -> bool:
    """``value`` is a finite number as a float (an int too large for a float is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def conjuncts(expr) -> list:
    """The top-level conjuncts of a WHERE expression (nested BoolAnd flattened); [] for None."""
    if expr is None:
        return []
    if isinstance(expr, BoolAnd):
        out = []
        for item in expr.items:
            out.extend(conjuncts(item))
        return out
    return [expr]


def validate(query: Query) -> Query:
    """Check ``query``; return it unchanged or raise QueryValidationError."""
    if not isinstance(query, Query):
        raise QueryValidationError(f"expected a Query, got {type(query).__name__}")
    text = query.text
    variables = _check_pattern(query.pattern, text)
    _check_where(query.where, variables, text)
    _check_windows(query, text)
    if query.strategy not in STRATEGIES:
        raise QueryValidationError(f"unknown selection strategy {query.strategy!r} "
                                   f"(expected one of {', '.join(STRATEGIES)})")
    if not isinstance(query.equivalence, tuple) or not all(
            isinstance(a, str) and a for a in query.equivalence):
        raise QueryValidationError("equivalence must be a tuple of attribute names, "
                                   f"got {query.equivalence!r}")
    if query.name is not None and not (isinstance(query.name, str) and query.name):
        raise QueryValidationError(f"query name must be a non-empty string, got {query.name!r}")
    return query


def check_strategy_vars(pattern, args, text: str | None = None) -> None:
    """SASE+ ``WHERE strategy(a, b[ ]) {...}``: every listed name must be a PATTERN variable.

    ``args`` is a list of ``(name, has_brackets, pos)``.
    """
    declared = {v.name: v for v in walk_pattern(pattern) if isinstance(v, EventVar)}
    for name, bracketed, pos in args:
        if name not in declared:
            _fail(f"variable {name!r} in the strategy argument list is not declared in the "
                  "PATTERN", pos, text)
        if bracketed and not declared[name].kleene:
            _fail(f"'{name}[ ]' in the strategy argument list, but {name!r} is not a Kleene "
                  "variable", pos, text)


# --------------------------------------------------------------------------- helpers

def _fail(message: str, pos, text: str | None):
    line, col = pos if pos else (None, None)
    raise QueryValidationError(message, text, line, col)


def _fmt_var(v: EventVar) -> str:
    sign = "~" if v.negated else ""
    if v.type is None:
        return f"{sign}{v.name}{'+' if v.kleene else ''}"
    return f"{sign}{v.type}{'+' if v.kleene else ''} {v.name}{'[]' if v.kleene else ''}"


def _fmt_pattern(node) -> str:
    if isinstance(node, EventVar):
        return _fmt_var(node)
    op = type(node).__name__.upper()
    return f"{op}({', '.join(_fmt_pattern(c) for c in node.children)})"


def _fmt_index(var: str, index: KIndex) -> str:
    off = index.offset
    if index.base == "i":
        return "[i]" if off == 0 else f"[i{off:+d}]"
    if index.base == "first":
        return f"[{off + 1}]"
    return f"[{var}.LEN]" if off == 0 else f"[{var}.LEN{off:+d}]"


def _kleene_hint(v: EventVar) -> str:
    return f"{v.type}+ {v.name}[]" if v.type else f"{v.name}+"


# --------------------------------------------------------------------------- pattern

def _bounded(node) -> bool:
    """True if every DNF branch of ``node`` binds at least one positive variable."""
    if isinstance(node, EventVar):
        return not node.negated
    if isinstance(node, Or):
        return all(_bounded(c) for c in node.children)
    return any(_bounded(c) for c in node.children)


def _check_pattern(pattern, text) -> dict:
    variables: dict = {}
    for node in walk_pattern(pattern):
        if isinstance(node, (Seq, And, Or)):
            if not isinstance(node.children, tuple) or not node.children:
                _fail(f"{type(node).__name__.upper()}(...) needs at least one child (a tuple)",
                      node.pos, text)
            continue
        if not isinstance(node, EventVar):
            _fail(f"unexpected pattern node {node!r}", None, text)
        if not isinstance(node.name, str) or not node.name:
            _fail(f"event variable name must be a non-empty string, got {node.name!r}",
                  node.pos, text)
        if node.name in variables:
            _fail(f"variable {node.name!r} is declared twice in the PATTERN "
                  "(variable names must be unique)", node.pos, text)
        if node.negated and node.kleene:
            _fail(f"negated variable {node.name!r} cannot be a Kleene variable "
                  "(a negation forbids single events: write ~Type var)", node.pos, text)
        variables[node.name] = node
    if not any(not v.negated for v in variables.values()):
        _fail("the PATTERN has no positive (non-negated) variable: nothing bounds its negations",
              getattr(pattern, "pos", None), text)
    for node in walk_pattern(pattern):
        if isinstance(node, Or):
            for child in node.children:
                if not _bounded(child):
                    _fail(f"OR branch '{_fmt_pattern(child)}' has only negated variables: "
                          "nothing bounds the negation (put it in a SEQ or AND with a positive "
                          "variable)", child.pos, text)
    if not _bounded(pattern):
        _fail("a branch of the PATTERN has only negated variables: nothing bounds the negation",
              getattr(pattern, "pos", None), text)
    return variables


# --------------------------------------------------------------------------- WHERE

def _check_where(where, variables: dict, text) -> None:
    if where is None:
        return
    for node in walk_expr(where):
        _check_node(node, variables, text)
    for conj in conjuncts(where):
        _check_conjunct(conj, variables, text)
        _check_condition(conj, text)
    for node in walk_expr(where):
        if isinstance(node, (BoolAnd, BoolOr)):
            for item in node.items:
                _check_condition(item, text, node)
        elif isinstance(node, BoolNot):
            _check_condition(node.item, text, node)
        elif isinstance(node, Compare):
            _check_comparable(node, text)


#: what a value of each Python kind is called in messages
_KIND_NAMES = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}


def static_kind(node) -> str | None:
    """What ``node`` evaluates to whatever the events: "a boolean", "a number" or "a string";
    None when only the events (an attribute) or the parameters can tell."""
    if isinstance(node, Literal):
        return _KIND_NAMES.get(node.value.__class__)
    if isinstance(node, (Compare, BoolAnd, BoolOr, BoolNot)):
        return "a boolean"
    if isinstance(node, (Len, Aggregate, BinOp, Neg)):
        return "a number"
    return None


def _check_condition(node, text, parent=None) -> None:
    """A conjunct, an operand of AND/OR or the operand of NOT is a condition: it must be able
    to be true or false (docs/semantics.md, "Predicates": a WHERE term that is not a boolean fails, so
    one that can never be a boolean is refused here). An attribute or a parameter may hold a
    boolean: that is checked when it is evaluated (a non-boolean is false)."""
    kind = static_kind(node)
    if kind is None or kind == "a boolean":
        return
    shown = expr_text(node)
    where = "the operand of NOT" if isinstance(parent, BoolNot) else \
        f"an operand of {'AND' if isinstance(parent, BoolAnd) else 'OR'}" if parent else \
        "a WHERE condition"
    hint = f" (compare it, e.g. {shown} > 0)" if kind == "a number" else \
        f" (compare it with an attribute, e.g. a.x = {shown})" if kind == "a string" else ""
    _fail(f"{where} must be true or false, but {shown} is always {kind}{hint}",
          getattr(node, "pos", None), text)


def _check_comparable(node: Compare, text) -> None:
    """A comparison whose two sides are of kinds known here to differ (a number and a string)
    or that orders booleans can never hold (docs/semantics.md, "Predicates": it fails on every
    evaluation): refused here."""
    left, right = static_kind(node.left), static_kind(node.right)
    if left is not None and right is not None and left != right:
        _fail(f"comparison {expr_text(node)} can never hold: it compares {left} with "
              f"{right} (values of different kinds are not comparable)", node.pos, text)
    if node.op in ("<", "<=", ">", ">=") and "a boolean" in (left, right):
        _fail(f"comparison {expr_text(node)} can never hold: booleans have no order "
              f"(use = or !=)", node.pos, text)


def _declared(name, node, variables, text) -> EventVar:
    if name not in variables:
        _fail(f"variable {name!r} is not declared in the PATTERN", node.pos, text)
    return variables[name]


def _check_kindex(var: str, index, node, text) -> None:
    if not isinstance(index, KIndex) or index.base not in ("i", "first", "last") \
            or not isinstance(index.offset, int):
        _fail(f"bad index {index!r} on {var!r}", node.pos, text)
    if index.base == "first" and index.offset < 0:
        _fail(f"index before the first event of {var!r}: {var}{_fmt_index(var, index)}",
              node.pos, text)
    if index.base == "last" and index.offset > 0:
        _fail(f"index past the last event of {var!r}: {var}[{var}.LEN+{index.offset}]",
              node.pos, text)


def _check_node(node, variables, text) -> None:
    if not isinstance(node, _EXPR_NODES):
        _fail(f"unexpected expression node {node!r} in WHERE", None, text)
    if isinstance(node, Attr):
        var = _declared(node.var, node, variables, text)
        if not isinstance(node.attr, str) or not node.attr:
            _fail(f"attribute name of {node.var!r} must be a non-empty string", node.pos, text)
        if node.index is not None:
            _check_kindex(node.var, node.index, node, text)
            if not var.kleene:
                _fail(f"index {_fmt_index(node.var, node.index)} used on {node.var!r}, which is "
                      f"not a Kleene variable (declare it as {_kleene_hint(var)})",
                      node.pos, text)
    elif isinstance(node, Len):
        var = _declared(node.var, node, variables, text)
        if not var.kleene:
            _fail(f"{node.var}.LEN used on {node.var!r}, which is not a Kleene variable "
                  f"(declare it as {_kleene_hint(var)})", node.pos, text)
    elif isinstance(node, Aggregate):
        if node.func not in AGGREGATES:
            _fail(f"unknown aggregate function {node.func!r} "
                  f"(expected one of {', '.join(AGGREGATES)})", node.pos, text)
        var = _declared(node.var, node, variables, text)
        if node.attr is None and node.func != "count":
            _fail(f"aggregate {node.func}({node.var}) needs an attribute, e.g. "
                  f"{node.func}({node.var}.x): only count may omit it", node.pos, text)
        if node.upto is not None:
            _check_kindex(node.var, node.upto, node, text)
        if not var.kleene:
            _fail(f"aggregate {node.func}(...) used on {node.var!r}, which is not a Kleene "
                  f"variable (declare it as {_kleene_hint(var)})", node.pos, text)
    elif isinstance(node, Literal):
        if not isinstance(node.value, (bool, int, float, str)):
            _fail(f"literal must be a number, string or boolean, got {node.value!r}",
                  node.pos, text)
        if isinstance(node.value, (int, float)) and not finite(node.value):
            _fail(f"number {short_repr(node.value)} is not a finite number "
                  "(out of range, infinite or NaN)", node.pos, text)
    elif isinstance(node, Param):
        if not isinstance(node.name, str) or not node.name:
            _fail(f"parameter name must be a non-empty string, got {node.name!r}",
                  node.pos, text)
    elif isinstance(node, Compare) and node.op not in _COMPARE_OPS:
        _fail(f"unknown comparison {node.op!r} (expected one of {' '.join(_COMPARE_OPS)})",
              node.pos, text)
    elif isinstance(node, BinOp) and node.op not in _ARITH_OPS:
        _fail(f"unknown arithmetic operator {node.op!r}", node.pos, text)
    elif isinstance(node, (BoolAnd, BoolOr)) and (not isinstance(node.items, tuple)
                                                   or not node.items):
        _fail(f"{type(node).__name__} needs a non-empty tuple of items", node.pos, text)


def _uses_i(node, variables) -> str | None:
    """The Kleene variable whose current index ``i`` this node uses, if any."""
    if isinstance(node, Attr):
        var = variables.get(node.var)
        if var is not None and var.kleene and (node.index is None or node.index.base == "i"):
            return node.var
    if isinstance(node, Aggregate) and node.upto is not None and node.upto.base == "i":
        return node.var
    return None


def _check_conjunct(conj, variables, text) -> None:
    i_vars: list = []
    negated: list = []
    for node in walk_expr(conj):
        kv = _uses_i(node, variables)
        if kv and kv not in i_vars:
            i_vars.append(kv)
        name = getattr(node, "var", None) if isinstance(node, (Attr, Len, Aggregate)) else None
        if name and variables[name].negated and name not in negated:
            negated.append(name)
    if len(i_vars) > 1:
        _fail(f"a conjunct uses the current index i of two Kleene variables {i_vars[0]!r} and "
              f"{i_vars[1]!r}; a conjunct may use the index i of at most one Kleene variable",
              conj.pos, text)
    if len(negated) > 1:
        _fail(f"a conjunct mentions two negated variables {negated[0]!r} and {negated[1]!r}; "
              "a conjunct may mention at most one negated variable", conj.pos, text)
    if negated and i_vars:
        _fail(f"a conjunct mentions the negated variable {negated[0]!r} together with the "
              f"current index i of the Kleene variable {i_vars[0]!r} (use FIRST/LAST, "
              "an index such as [1], or an aggregate instead)", conj.pos, text)


# --------------------------------------------------------------------------- windows

def _seconds(d: Duration, clause: str, text) -> float | None:
    """Check a WITHIN/SLIDE duration; its length in seconds, or None for a parameter."""
    if not isinstance(d, Duration):
        _fail(f"{clause} must be a Duration, got {d!r}", None, text)
    unit = d.unit_seconds
    if isinstance(unit, bool) or not isinstance(unit, (int, float)) or not finite(unit) \
            or unit <= 0:
        _fail(f"{clause} unit must be a positive number of seconds, got {unit!r}", d.pos, text)
    if isinstance(d.amount, Param):
        return None
    value = d.amount.value if isinstance(d.amount, Literal) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(f"{clause} must be a number with a unit or a parameter, got {value!r}",
              d.pos, text)
    if not finite(value) or not finite(value * unit):
        _fail(f"{clause} must be a finite number of seconds, got {short_repr(value)}"
              f"{'' if unit == 1 else f' x {unit:g} seconds'}", d.pos, text)
    if value <= 0:
        _fail(f"{clause} must be positive, got {value:g}", d.pos, text)
    return value * unit


def _check_windows(query: Query, text) -> None:
    if query.within is None:
        _fail("missing WITHIN: every query needs a time window", None, text)
    within = _seconds(query.within, "WITHIN", text)
    if query.slide is None:
        return
    slide = _seconds(query.slide, "SLIDE", text)
    if within is not None and slide is not None and slide > within:
        _fail(f"SLIDE ({slide:g} seconds) is larger than WITHIN ({within:g} seconds)",
              query.slide.pos, text)
