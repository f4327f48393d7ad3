"""Conditions and events that used to give wrong matches without a word (issue 33, section 4):
a WHERE term that is not a boolean, builder arguments taken the wrong way, events that the
engine accepted unchecked, comparisons that can never hold, misspelt parameters. Each case
gives the documented result (checked against the brute-force oracle where it is about
matches) or a clear error."""
from __future__ import annotations

import pytest

from cep import Engine, Event
from cep.errors import QueryValidationError
from cep.parser import parse_query

from oracle import oracle_matches

SYMBOLS = ["AAPL", "MSFT"]


def sample(n: int = 20) -> list:
    """A notebook user's sample: ``n`` ticks alternating between two symbols; ``flag`` is a
    boolean attribute, ``price`` is 0 every third tick."""
    return [Event("Stock", float(t), {"symbol": SYMBOLS[t % 2], "price": float(t % 3 * 5),
                                      "flag": t % 4 == 0})
            for t in range(n)]


def engine_keys(text: str, events: list, params=None, key_attr=None, many=False) -> set:
    eng = Engine(key_attr=key_attr)
    eng.add_query(text, name="q", params=params)
    out = eng.process_many(events) if many else [m for e in events for m in eng.process(e)]
    out += eng.advance(float("inf"))
    return {m.key() for m in out}


def assert_like_oracle(text: str, events: list, params=None, key_attr=None) -> set:
    want = oracle_matches(parse_query(text), events, params)
    for many in (False, True):
        assert engine_keys(text, events, params, key_attr, many) == want
    return want


# --------------------------------------------------------------------------- WHERE terms

@pytest.mark.parametrize("where, column, what", [
    ("'abc'", 37, "'abc' is always a string"),
    ("a.price + 1", 37, "(a.price + 1) is always a number"),
    ("b.price > a.price AND 5", 59, "a WHERE condition must be true or false, but 5"),
    ("b.price > a.price OR 'x'", 58, "an operand of OR must be true or false"),
    ("(a.flag OR (b.flag AND 2))", 60, "an operand of AND must be true or false"),
    ("NOT 3", 41, "the operand of NOT must be true or false, but 3"),
    ("a.price = 'high' AND 1 = 'a'", 58, "compares a number with a string"),
    ("true < b.flag", 37, "booleans have no order"),
])
def test_a_condition_that_cannot_be_boolean_is_refused_with_its_position(where, column, what):
    text = f"PATTERN SEQ(Stock a, Stock b) WHERE {where} WITHIN 10 seconds"
    with pytest.raises(QueryValidationError) as info:
        Engine().add_query(text)
    assert what in str(info.value)
    assert (info.value.line, info.value.column) == (1, column)
    assert "^" in info.value.excerpt


def test_a_non_boolean_attribute_as_a_condition_is_false_not_truthiness():
    events = sample()
    # price 5 and 10 used to pass (Python truthiness) and price 0 fail
    text = "PATTERN SEQ(Stock a, Stock b) WHERE a.price WITHIN 100 seconds"
    assert assert_like_oracle(text, events) == set()
    # a boolean attribute is a condition: it holds where it is true
    text = "PATTERN SEQ(Stock a, Stock b) WHERE a.flag AND NOT b.flag WITHIN 100 seconds"
    assert len(assert_like_oracle(text, events)) > 0
    # a string attribute under NOT/OR fails the same way
    text = "PATTERN SEQ(Stock a, Stock b) WHERE NOT a.symbol OR a.flag WITHIN 100 seconds"
    assert_like_oracle(text, events)


def test_the_oracle_also_takes_only_true_as_true():
    """The oracle (tests/oracle.py) evaluates a conjunct with ``is True``: a number, a string
    or null is false there too (it never used truthiness)."""
    from cep import ast as A
    query = A.Query(A.Seq((A.EventVar("Stock", "a"), A.EventVar("Stock", "b"))),
                    where=A.Attr("a", "price"), within=A.Duration(A.Literal(100)))
    assert oracle_matches(query, sample()) == set()
    query = A.Query(query.pattern, where=A.Literal("abc"), within=query.within)
    assert oracle_matches(query, sample()) == set()


def test_a_parameter_used_as_a_condition_must_be_a_boolean():
    text = "PATTERN SEQ(Stock a, Stock b) WHERE on AND b.price > a.price WITHIN 100 seconds"
    events = sample()
    assert len(assert_like_oracle(text, events, {"on": True})) > 0
    assert assert_like_oracle(text, events, {"on": False}) == set()
    with pytest.raises(QueryValidationError) as info:
        Engine().add_query(text, params={"on": 1})
    assert "parameter 'on' is used as a condition" in str(info.value)
    assert (info.value.line, info.value.column) == (1, 37)


# --------------------------------------------------------------------------- parameters

def test_a_misspelt_parameter_is_named_with_the_close_name():
    text = "PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price + threshold WITHIN 10 seconds"
    with pytest.raises(QueryValidationError) as info:
        Engine().add_query(text, params={"treshold": 5})
    message = str(info.value)
    assert "parameter 'threshold' has no value" in message
    assert "no parameter 'treshold' (did you mean 'threshold'?)" in message
    assert (info.value.line, info.value.column) == (1, 57)


def test_every_missing_parameter_and_every_unknown_one_is_named():
    text = "PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price + lift WITHIN W"
    with pytest.raises(QueryValidationError) as info:
        Engine().add_query(text, params={"w": 5, "other": 1})
    message = str(info.value)
    assert "parameter 'W' of WITHIN has no value" in message
    assert "also without a value: 'lift'" in message
    assert "'w' (did you mean 'W'?)" in message and "'other'" in message


def test_unused_parameters_alone_are_no_error():
    """One ``--param`` set serves every query of ``raycep local``: a parameter one query does
    not use is fine as long as the query's own parameters have values."""
    text = "PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price + lift WITHIN 100 seconds"
    assert_like_oracle(text, sample(), {"lift": 1, "unused": 2})


# --------------------------------------------------------------------------- the builder

from datetime import timedelta                                   # noqa: E402

from cep import builder as b                                      # noqa: E402
from cep.ast import Duration, Literal, Param                      # noqa: E402
from cep.errors import QuerySyntaxError                           # noqa: E402

PAIR = "PATTERN SEQ(Stock a, Stock b) WHERE {} WITHIN 100 seconds"


def pair():
    return b.seq(b.var("Stock", "a"), b.var("Stock", "b"))


def test_a_where_text_is_parsed_as_the_condition_not_taken_as_a_string():
    built = b.query(pair(), where="b.price < a.price", within=100)
    assert built == b.query(pair(), where=b.attr("b", "price") < b.attr("a", "price"),
                            within=100)
    assert built == parse_query(PAIR.format("b.price < a.price"))
    events = sample()
    eng = Engine()
    eng.add_query(built, name="q")
    got = {m.key() for m in eng.process_many(events) + eng.advance(float("inf"))}
    assert got == oracle_matches(built, events) == assert_like_oracle(
        PAIR.format("b.price < a.price"), events)
    # equivalence tests and strategies of the WHERE clause work in the text too
    keyed = b.query(pair(), where="[symbol] AND b.price < a.price", within=100)
    assert keyed == parse_query(PAIR.format("[symbol] AND b.price < a.price"))
    nxt = b.query(pair(), where="skip_till_next_match(a, b) { b.price < a.price }", within=100)
    assert nxt.strategy == "skip_till_next_match" and nxt.where == built.where


def test_a_where_text_that_is_wrong_points_into_the_text():
    with pytest.raises(QuerySyntaxError) as info:
        b.query(pair(), where="b.price < < a.price", within=100)
    assert (info.value.line, info.value.column) == (1, 11)
    assert "b.price < < a.price" in info.value.excerpt
    with pytest.raises(QueryValidationError) as info:
        b.query(pair(), where="b.price < 1 AND 'abc'", within=100)
    assert (info.value.line, info.value.column) == (1, 17)
    assert "b.price < 1 AND 'abc'" in info.value.excerpt
    with pytest.raises(QueryValidationError, match="variable 'z' is not declared"):
        b.query(pair(), where="z.price > 1", within=100)


def test_var_needs_a_type_and_a_name():
    with pytest.raises(TypeError, match=r"var\('Stock'\) has one argument.*var\(None, 'Stock'\)"):
        b.var("Stock")
    with pytest.raises(TypeError, match=r"kleene\('b'\) has one argument"):
        b.kleene("b")
    with pytest.raises(TypeError, match="argument 'name' must be a string"):
        b.var("Stock", 1)
    with pytest.raises(TypeError, match="argument 'type' must be a string or None"):
        b.neg(3, "n")
    untyped = b.query(b.seq(b.var(None, "a"), b.var(None, "b")), within=100)
    assert untyped == parse_query("PATTERN SEQ(a, b) WITHIN 100 seconds")


def test_swapped_type_and_name_are_reported_as_such():
    swapped = b.seq(b.var("a", "Stock"), b.var("b", "Stock"))
    with pytest.raises(QueryValidationError,
                       match=r"declared 2 times.*did you mean var\('Stock', 'a'\)\?"):
        b.query(swapped, within=100)
    with pytest.raises(QueryValidationError,
                       match=r"WHERE reads variable 'a'.*did you mean var\('Stock', 'a'\)\?"):
        b.query(b.seq(b.var("a", "Stock"), b.var("Stock", "b")), where="a.price < b.price",
                within=100)


@pytest.mark.parametrize("given, text", [
    ("10 seconds", "10 seconds"), ("250 ms", "250 ms"), ("1.5 h", "1.5 hours"),
    ("10", "10 seconds"), ("W", "W"), ("W minutes", "W minutes"),
    (timedelta(seconds=10), "10 seconds"), (timedelta(milliseconds=1500), "1.5 seconds"),
])
def test_windows_from_text_and_timedelta(given, text):
    want = parse_query(f"PATTERN Stock a WITHIN {text}").within
    assert b.query(b.var("Stock", "a"), within=given).within == want


def test_a_duration_text_that_is_no_duration_is_refused():
    with pytest.raises(QuerySyntaxError, match="unknown time unit 'parsecs'"):
        b.query(b.var("Stock", "a"), within="10 parsecs")
    with pytest.raises(QuerySyntaxError, match="end of the duration"):
        b.query(b.var("Stock", "a"), within="10 seconds please")
    with pytest.raises(QuerySyntaxError, match="a duration after SLIDE"):
        b.query(b.var("Stock", "a"), within=10, slide="")
    assert b.query(b.var("Stock", "a"), within="W").within == Duration(Param("W"), 1.0)
    assert b.query(b.var("Stock", "a"), within=timedelta(minutes=1)).within == \
        Duration(Literal(60), 1.0)


@pytest.mark.parametrize("call, argument", [
    (lambda: b.query(pair(), within=[10]), "'within'"),
    (lambda: b.query(pair(), within=10, slide=object()), "'slide'"),
    (lambda: b.query(pair(), where=5, within=10), "'where'"),
    (lambda: b.query("PATTERN Stock a WITHIN 10", within=10), "'pattern'"),
    (lambda: b.query(pair(), within=10, equivalence=5), "'equivalence'"),
    (lambda: b.query(pair(), within=10, equivalence=["symbol", 1]), "'equivalence'"),
    (lambda: b.query(pair(), within=10, strategy=1), "'strategy'"),
    (lambda: b.query(pair(), within=10, name=5), "'name'"),
    (lambda: b.attr(1, "price"), "'var'"),
    (lambda: b.attr("a", None), "'name'"),
    (lambda: b.duration(5, 60), "'unit'"),
    (lambda: b.duration([5]), "'amount'"),
    (lambda: b.seq("a", b.var("Stock", "b")), "argument 1"),
])
def test_wrong_argument_types_raise_type_error_naming_the_argument(call, argument):
    with pytest.raises(TypeError, match=argument):
        call()
