"""A WHERE comparison evaluated over many bindings at once, with numpy.

``compile_vector(expr, hole)`` turns a comparison of numbers (attributes of bound variables,
number literals, ``+ - * /``, unary minus) into ``fn(get, const) -> (truth, unsure)``: ``get(var,
attr)`` gives an attribute of every binding as float64 values and a mask of those that are not
an exact number (cep.event.kind_of); the ``hole``-th literal of ``expr`` (in the order
cep.runtime.groups numbers them: left to right) reads ``const`` instead, a number or one per
binding. ``unsure`` marks the bindings whose truth float64 cannot promise to be what the
expression interpreter (cep.lang.expressions) gives: a value that is not an exact number, an
arithmetic result from 2**53 on (or not finite), a division by zero. Their callers leave them
to the interpreter.
"""
from __future__ import annotations

import numpy as np

from raycep.cep.event import EXACT_INT
from raycep.cep.lang import ast
from raycep.cep.lang.expressions import FIELDS

_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "=": np.equal, "!=": np.not_equal}
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


class _Holes:
    """Numbers the literals of an expression left to right, as ``_shape`` of
    cep.runtime.groups meets them."""

    def __init__(self, hole: int):
        self.hole, self.seen = hole, 0

    def take(self) -> bool:
        found = self.seen == self.hole
        self.seen += 1
        return found


def compile_vector(expr, hole: int = -1):
    """``fn(get, const) -> (truth, unsure)`` for comparison ``expr`` (module docstring), or
    None when it is not one of numbers this module evaluates."""
    if expr.__class__ is not ast.Compare or expr.op not in _COMPARE:
        return None
    holes = _Holes(hole)
    left, right = _term(expr.left, holes), _term(expr.right, holes)
    if left is None or right is None:
        return None
    compare = _COMPARE[expr.op]

    def fn(get, const):
        a, bad_a = left(get, const)
        b, bad_b = right(get, const)
        with np.errstate(invalid="ignore"):
            return compare(a, b), bad_a | bad_b
    return fn


def compile_term(expr):
    """``fn(get) -> (values, unsure)`` of numeric term ``expr`` (as ``compile_vector``'s
    sides), or None."""
    term = _term(expr, _Holes(-1))
    if term is None:
        return None
    return lambda get: term(get, None)


def _term(node, holes: _Holes):
    """``fn(get, const) -> (values, unsure)`` of a numeric term, or None."""
    cls = node.__class__
    if cls is ast.Literal:
        if holes.take():
            return _const
        value = node.value
        if value.__class__ not in (int, float) or not abs(value) < EXACT_INT:
            return None
        number = float(value)
        return lambda get, const: (number, False)
    if cls is ast.Attr:
        if node.index is not None or node.attr in FIELDS:
            return None
        var, attr = node.var, node.attr
        return lambda get, const: get(var, attr)
    if cls is ast.Neg:
        inner = _term(node.operand, holes)
        if inner is None:
            return None

        def neg(get, const):
            values, bad = inner(get, const)
            return -values, bad
        return neg
    if cls is ast.BinOp and node.op in _ARITH:
        left, right = _term(node.left, holes), _term(node.right, holes)
        if left is None or right is None:
            return None
        op, divide = _ARITH[node.op], node.op == "/"

        def arith(get, const):
            a, bad_a = left(get, const)
            b, bad_b = right(get, const)
            with np.errstate(all="ignore"):
                out = op(a, b)
            bad = bad_a | bad_b | ~(np.abs(out) < EXACT_INT)
            if divide:
                bad = bad | (np.asarray(b) == 0)
            return out, bad
        return arith
    return None


def _const(get, const):
    return const, False
