"""validate(): every rule raises QueryValidationError naming the variable and the problem."""
import dataclasses

import pytest

from raycep.cep.errors import QueryValidationError
from raycep.cep.lang.ast import (Aggregate, Attr, BoolAnd, BoolOr, Compare, Duration, EventVar,
                                 KIndex, Literal, Param, Query, Seq)
from raycep.cep.lang.parser import parse_query
from raycep.cep.lang.validate import conjuncts, validate


def invalid(text, pattern):
    """Parse ``text`` expecting a QueryValidationError whose message matches ``pattern``."""
    with pytest.raises(QueryValidationError, match=pattern) as info:
        parse_query(text)
    return info.value


def test_valid_query_is_returned_unchanged():
    q = Query(Seq((EventVar("A", "a"), EventVar("B", "b"))),
              where=Compare("<", Attr("a", "x"), Attr("b", "x")),
              within=Duration(Literal(5), 1.0))
    assert validate(q) is q


# --------------------------------------------------------------------------- pattern rules

@pytest.mark.parametrize("pattern", ["~A a", "SEQ(~A a)", "SEQ(~A a, !B b)", "AND(~(A a))"])
def test_pattern_needs_a_positive_variable(pattern):
    invalid(f"PATTERN {pattern} WITHIN 5 s", "no positive")


def test_duplicate_variable_names():
    err = invalid("PATTERN SEQ(A a, B b,\n  C a) WITHIN 5 s",
                  "variable 'a' is declared twice in the PATTERN")
    assert (err.line, err.column) == (2, 3)


def test_negated_kleene_variable():
    invalid("PATTERN SEQ(A a, ~B+ b[], C c) WITHIN 5 s",
            "negated variable 'b' cannot be a Kleene variable")


@pytest.mark.parametrize("pattern, branch", [
    ("OR(~A a, B b)", "~A a"),
    ("SEQ(A a, OR(B b, !C c))", "~C c"),
    ("OR(AND(~A a, ~B b), C c)", "AND(~A a, ~B b)"),
    ("SEQ(X x, OR(SEQ(~A a), C c))", "SEQ(~A a)"),
])
def test_negation_that_is_a_whole_or_branch(pattern, branch):
    err = invalid(f"PATTERN {pattern} WITHIN 5 s", "has only negated variables")
    assert f"OR branch '{branch}'" in err.reason
    assert "nothing bounds the negation" in err.reason


def test_bounded_negations_are_fine():
    for p in ("SEQ(A a, ~B b, C c)", "SEQ(A a, ~B b)", "AND(A a, ~B b)",
              "OR(SEQ(A a, ~B b), C c)", "SEQ(~A a, OR(B b, C c))"):
        parse_query(f"PATTERN {p} WITHIN 5 s")


# --------------------------------------------------------------------------- variables

@pytest.mark.parametrize("cond", ["x.price > 1", "a.x > x.y", "x.LEN > 1", "avg(x.v) > 1",
                                  "FIRST(x.v) > 1", "x[i].v > 1", "count(x) > 1"])
def test_unknown_variable(cond):
    invalid(f"PATTERN SEQ(A a, B+ b[]) WHERE {cond} WITHIN 5 s",
            "variable 'x' is not declared in the PATTERN")


def test_unknown_variable_position_and_caret():
    text = "PATTERN SEQ(A a, B b)\nWHERE a.x > 1\n  AND zz.y < b.y\nWITHIN 5 s"
    err = invalid(text, "variable 'zz' is not declared")
    assert (err.line, err.column) == (3, 7)
    assert err.excerpt == "    AND zz.y < b.y\n        ^"


def test_unknown_variable_in_strategy_arguments():
    err = invalid("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(a, b, c) { a.x = b.x } "
                  "WITHIN 5 s", "variable 'c' in the strategy argument list is not declared")
    assert err.column == 56


@pytest.mark.parametrize("cond, index", [
    ("a[i-1].x > 1", "[i-1]"), ("a[i].x > 1", "[i]"), ("a[i+1].x > 1", "[i+1]"),
    ("a[1].x > 1", "[1]"), ("a[2].x > 1", "[2]"), ("a[a.LEN].x > 1", "[a.LEN]"),
    ("a[a.LEN-1].x > 1", "[a.LEN-1]"), ("FIRST(a.x) > 1", "[1]"), ("LAST(a).x > 1", "[a.LEN]"),
    ("NEXT(a.x) > 1", "[i+1]"),
])
def test_index_on_non_kleene_variable(cond, index):
    err = invalid(f"PATTERN SEQ(A a, B+ b[]) WHERE {cond} WITHIN 5 s",
                  "which is not a Kleene variable")
    assert err.reason == (f"index {index} used on 'a', which is not a Kleene variable "
                          "(declare it as A+ a[])")


def test_len_and_aggregate_on_non_kleene_variable():
    invalid("PATTERN SEQ(A a, B+ b[]) WHERE a.LEN > 1 WITHIN 5 s",
            r"a\.LEN used on 'a', which is not a Kleene variable \(declare it as A\+ a\[\]\)")
    invalid("PATTERN SEQ(a, b+) WHERE avg(a.x) > 1 WITHIN 5 s",
            r"aggregate avg\(\.\.\.\) used on 'a', which is not a Kleene variable "
            r"\(declare it as a\+\)")
    invalid("PATTERN SEQ(A a, ~N n) WHERE a.x = n[1].x WITHIN 5 s",
            "index \\[1\\] used on 'n', which is not a Kleene variable")


def test_aggregate_function_and_attribute():
    invalid("PATTERN SEQ(A a, B+ b[]) WHERE median(b.x) > 1 WITHIN 5 s",
            "unknown aggregate function 'median'")
    invalid("PATTERN SEQ(A a, B+ b[]) WHERE avg(b) > 1 WITHIN 5 s",
            r"aggregate avg\(b\) needs an attribute.*only count may omit it")
    parse_query("PATTERN SEQ(A a, B+ b[]) WHERE count(b) > 1 AND count(b.x) > 1 WITHIN 5 s")


# --------------------------------------------------------------------------- windows

def test_missing_within():
    err = invalid("PATTERN SEQ(A a, B b) WHERE a.x < b.x",
                  "missing WITHIN: every query needs a time window")
    assert err.line is None


@pytest.mark.parametrize("clauses, message", [
    ("WITHIN 0 seconds", "WITHIN must be positive"),
    ("WITHIN -5 minutes", "WITHIN must be positive"),
    ("WITHIN 5 s SLIDE 0 s", "SLIDE must be positive"),
    ("WITHIN 60 seconds SLIDE 2 minutes", r"SLIDE \(120 seconds\) is larger than WITHIN "
                                          r"\(60 seconds\)"),
])
def test_window_rules(clauses, message):
    invalid(f"PATTERN SEQ(A a, B b) {clauses}", message)


BIG = "1" + "0" * 400                     # an int, but not a finite float


@pytest.mark.parametrize("clauses, message, at", [
    ("WITHIN 1e999 seconds", "WITHIN must be a finite number of seconds, got inf", "1e999"),
    ("WITHIN 1E400", "WITHIN must be a finite number of seconds, got inf", "1E400"),
    ("WITHIN -1e999 s", "WITHIN must be a finite number of seconds, got -inf", "-1e999"),
    ("WITHIN inf", "WITHIN must be a finite number of seconds, not inf", "inf"),
    ("WITHIN NaN seconds", "WITHIN must be a finite number of seconds, not NaN", "NaN"),
    ("WITHIN Infinity", "WITHIN must be a finite number of seconds, not Infinity", "Infinity"),
    pytest.param(f"WITHIN {BIG} ms", "WITHIN must be a finite number of seconds, got 1000000",
                 BIG, id="WITHIN-huge-int"),
    ("WITHIN 1e305 days", r"WITHIN must be a finite number of seconds, got 1e\+305 x 86400",
     "1e305"),
    ("WITHIN 5 s SLIDE 1e999 s", "SLIDE must be a finite number of seconds, got inf", "1e999"),
    ("WITHIN 5 s SLIDE inf", "SLIDE must be a finite number of seconds, not inf", "inf"),
    ("WHERE a.x > 1e999 WITHIN 5 s", "number inf is not a finite number", "1e999"),
    ("WHERE a.x < -1e999 WITHIN 5 s", "number -inf is not a finite number", "-1e999"),
    ("WHERE a.x = 1e999% WITHIN 5 s", "number inf is not a finite number", "1e999%"),
    pytest.param(f"WHERE a.x * 2 < {BIG} WITHIN 5 s", "number 1000000.* is not a finite number",
                 BIG, id="literal-huge-int"),
])
def test_non_finite_numbers_are_rejected_where_they_are_written(clauses, message, at):
    text = f"PATTERN SEQ(A a, B b) {clauses}"
    err = invalid(text, message)
    assert (err.line, err.column) == (1, text.index(at) + 1)
    assert len(str(err).splitlines()[0]) < 200        # a huge number is abbreviated


def test_numbers_too_long_to_read_are_a_syntax_error():
    from raycep.cep.errors import QuerySyntaxError
    text = "PATTERN SEQ(A a, B b) WHERE a.x > 1" + "0" * 5000 + " WITHIN 5 s"
    with pytest.raises(QuerySyntaxError, match="number 10000000000000000000... is out of "
                                               "range") as info:
        parse_query(text)
    assert (info.value.line, info.value.column) == (1, text.index("10") + 1)


def test_non_finite_literals_in_built_queries():
    from raycep.cep.lang.builder import attr, query, seq, var
    for bad in (float("nan"), float("inf"), 10 ** 400):
        with pytest.raises(QueryValidationError, match="not a finite number"):
            query(seq(var("A", "a"), var("B", "b")), where=attr("a", "x") > bad, within=5)
        with pytest.raises(QueryValidationError, match="WITHIN must be a finite number"):
            query(seq(var("A", "a"), var("B", "b")), within=bad)


@pytest.mark.parametrize("text, params, message, at", [
    ("WITHIN W", {"W": float("nan")}, "parameter 'W' of WITHIN must be a positive finite "
     r"number \(seconds\), got nan \(float\)", "W"),
    ("WITHIN W", {"W": float("inf")}, "parameter 'W' of WITHIN .* got inf", "W"),
    ("WITHIN W minutes", {"W": 1e307}, "parameter 'W' of WITHIN .* got 1e\\+307", "W"),
    ("WITHIN W", {"W": "10"}, r"parameter 'W' of WITHIN .* got '10' \(str\)", "W"),
    ("WITHIN W", {"W": True}, r"parameter 'W' of WITHIN .* got True \(bool\)", "W"),
    ("WITHIN 9 SLIDE S", {"S": float("-inf")}, "parameter 'S' of SLIDE .* got -inf", "S"),
    ("WHERE a.x > T WITHIN 5", {"T": float("nan")}, "parameter 'T' must be a finite number, "
     r"a string or a boolean, got nan \(float\)", "T"),
    ("WHERE a.x > T WITHIN 5", {"T": float("inf")}, "parameter 'T' .* got inf", "T"),
    ("WHERE a.x > T WITHIN 5", {"T": 10 ** 400}, r"parameter 'T' .* got 1000000.*\.\.\. "
     r"\(int\)", "T"),
    ("WHERE a.x > T WITHIN 5", {"T": {"a": 1}}, r"parameter 'T' .* \(dict\)", "T"),
    ("WHERE a.x > T WITHIN 5", {"T": [1]}, r"parameter 'T' .* \(list\)", "T"),
    ("WHERE a.x > T WITHIN 5", {"T": None}, r"parameter 'T' .* \(NoneType\)", "T"),
])
def test_parameters_must_be_finite_and_of_a_known_kind(text, params, message, at):
    from raycep.cep.lang.compiler import compile_query
    from raycep.cep.runtime.engine import Engine
    query = f"PATTERN SEQ(A a, B b) {text}"
    with pytest.raises(QueryValidationError, match=message) as info:
        compile_query(query, params)
    assert (info.value.line, info.value.column) == (1, query.rindex(f" {at}") + 2)
    engine = Engine()
    with pytest.raises(QueryValidationError, match=message):
        engine.add_query(query, name="q", params=params)
    assert not engine.managers                      # nothing registered
    # good values of the same parameters compile
    compile_query(query, {k: 3 for k in params})


def test_window_edge_cases_that_are_fine():
    parse_query("PATTERN A a WITHIN 1 minute SLIDE 60 seconds")
    parse_query("PATTERN A a WITHIN W SLIDE 1 hour")    # a parameter cannot be checked yet
    parse_query("PATTERN A a WITHIN 500 ms")


def test_slide_error_points_at_slide():
    err = invalid("PATTERN A a WITHIN 1 s\nSLIDE 2 s", "larger than WITHIN")
    assert (err.line, err.column) == (2, 7)


# --------------------------------------------------------------------------- conjunct rules

HEAD = "PATTERN SEQ(A+ a[], B+ b[], C c, ~N n, ~M m)"


@pytest.mark.parametrize("cond", [
    "a[i].x < b[i].x", "a.x < b.x", "a[i-1].x < b[i+1].x", "a[i].x > avg(b[..i-1].x)",
    "NEXT(a.x) < b.x", "(a.x < 1 OR b.x < 1)",
])
def test_conjunct_uses_index_i_of_two_kleene_variables(cond):
    err = invalid(f"{HEAD} WHERE c.x > 0 AND {cond} WITHIN 5 s",
                  "index i of two Kleene variables 'a' and 'b'")
    # the conjunct's first token (a parenthesised conjunct starts inside the parenthesis)
    assert err.column == len(f"{HEAD} WHERE c.x > 0 AND ") + 1 + cond.startswith("(")


@pytest.mark.parametrize("cond", [
    "a[1].x < b[i].x", "LAST(a.x) < b.x", "avg(a.x) < b[i].x", "a.LEN < b.LEN",
    "a[i].x < a[i-1].x",
])
def test_one_kleene_index_per_conjunct_is_fine(cond):
    parse_query(f"{HEAD} WHERE {cond} WITHIN 5 s")


def test_two_negated_variables_in_one_conjunct():
    invalid(f"{HEAD} WHERE n.x = m.x WITHIN 5 s", "two negated variables 'n' and 'm'")
    parse_query(f"{HEAD} WHERE n.x = c.x AND m.x = c.x WITHIN 5 s")


@pytest.mark.parametrize("cond", ["n.x = a.x", "n.x = a[i].x", "n.x > avg(a[..i-1].x)",
                                  "n.x = NEXT(a.x)"])
def test_negated_variable_with_kleene_current_index(cond):
    invalid(f"{HEAD} WHERE {cond} WITHIN 5 s",
            "negated variable 'n' together with the current index i of the Kleene variable 'a'")


@pytest.mark.parametrize("cond", ["n.x = FIRST(a.x)", "n.x = a[a.LEN].x", "n.x > avg(a.x)",
                                  "n.x < a.LEN", "n.x = a[2].x"])
def test_negated_variable_with_first_last_aggregate_is_fine(cond):
    parse_query(f"{HEAD} WHERE {cond} WITHIN 5 s")


# --------------------------------------------------------------------------- built queries

def built(**changes):
    base = Query(Seq((EventVar("A", "a"), EventVar("B", "b", kleene=True))),
                 within=Duration(Literal(5), 1.0))
    return dataclasses.replace(base, **changes)


def test_unknown_strategy_in_built_query():
    with pytest.raises(QueryValidationError, match="unknown selection strategy 'fast'"):
        validate(built(strategy="fast"))


def test_bad_index_offsets_in_built_query():
    with pytest.raises(QueryValidationError, match="before the first event of 'b'"):
        validate(built(where=Compare(">", Attr("b", "x", KIndex("first", -1)), Literal(0))))
    with pytest.raises(QueryValidationError, match="past the last event of 'b'"):
        validate(built(where=Compare(">", Aggregate("sum", "b", "x", KIndex("last", 1)),
                                     Literal(0))))


def test_malformed_built_queries():
    with pytest.raises(QueryValidationError, match="expected a Query"):
        validate("PATTERN A a WITHIN 5 s")
    with pytest.raises(QueryValidationError, match="unexpected expression node"):
        validate(built(where=Compare(">", Attr("a", "x"), 5)))
    with pytest.raises(QueryValidationError, match="unknown comparison '=='"):
        validate(built(where=Compare("==", Attr("a", "x"), Literal(5))))
    with pytest.raises(QueryValidationError, match="SEQ"):
        validate(built(pattern=Seq(())))
    with pytest.raises(QueryValidationError, match="equivalence must be a tuple"):
        validate(built(equivalence="symbol"))
    with pytest.raises(QueryValidationError, match="WITHIN must be positive"):
        validate(built(within=Duration(Literal(0.0), 60.0)))
    with pytest.raises(QueryValidationError, match="WITHIN must be a number"):
        validate(built(within=Duration(Literal("long"), 1.0)))
    validate(built(within=Duration(Param("W"), 1.0)))


# --------------------------------------------------------------------------- conjuncts()

def test_conjuncts_flattens_top_level_and():
    x, y, z = (Compare(">", Attr(v, "x"), Literal(0)) for v in "abc")
    assert conjuncts(None) == []
    assert conjuncts(x) == [x]
    assert conjuncts(BoolAnd((x, BoolAnd((y, z))))) == [x, y, z]
    assert conjuncts(BoolOr((x, y))) == [BoolOr((x, y))]
