"""The direct getter of ``x.attr OP number`` (what the join filters candidates with) computes
exactly what the compiled expression computes, failures included."""
from __future__ import annotations

from hypothesis import given, strategies as st

from raycep.cep.event import trusted_event
from raycep.cep.lang import ast
from raycep.cep.lang.expressions import EvalFailure, attr_arith, compile_expr

VALUES = st.one_of(st.integers(-3, 3), st.floats(-3, 3), st.booleans(), st.text(max_size=2),
                   st.just(10 ** 400), st.none())


def outcome(fn, *args):
    try:
        return ("value", fn(*args))
    except EvalFailure:
        return ("fails",)


@given(op=st.sampled_from("+-*/"), const=st.one_of(st.integers(-2, 2), st.floats(-2, 2)),
       left=st.booleans(), value=VALUES, attr=st.sampled_from(["x", "type", "key", "nope"]))
def test_direct_getter_equals_the_compiled_expression(op, const, left, value, attr):
    var, lit = ast.Attr("a", attr), ast.Literal(const)
    side = ast.BinOp(op, lit, var) if left else ast.BinOp(op, var, lit)
    getter = attr_arith(side, {})
    assert getter is not None and getter.attr_arith == (attr, op, const, left)
    compiled = compile_expr(side, frozenset(), {})
    ev = trusted_event("T", 1.0, {} if value is None else {"x": value}, key="k1")  # 10**400
    assert outcome(getter, ev) == outcome(compiled, {"a": ev}, None)


def test_other_forms_have_no_direct_getter():
    a, b = ast.Attr("a", "x"), ast.Attr("b", "x")
    assert attr_arith(ast.BinOp("*", a, b), {}) is None
    assert attr_arith(ast.BinOp("*", ast.Attr("a", "ts"), ast.Literal(2)), {}) is None
    assert attr_arith(ast.BinOp("*", a, ast.Literal("s")), {}) is None
    assert attr_arith(ast.BinOp("*", a, ast.Param("p")), {"p": 2}).attr_arith == \
        ("x", "*", 2, False)
