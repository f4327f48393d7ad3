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
