"""Conditions and events that used to give wrong matches without a word (issue 33, section 4):
a WHERE term that is not a boolean, builder arguments taken the wrong way, events that the
engine accepted unchecked, comparisons that can never hold, misspelt parameters. Each case
gives the documented result (checked against the brute-force oracle where it is about
matches) or a clear error."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from raycep.cep import Engine, Event
from raycep.cep.errors import QueryValidationError
from raycep.cep.lang.parser import parse_query

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
    from raycep.cep.lang import ast as A
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

from raycep.cep.errors import QuerySyntaxError                           # noqa: E402
from raycep.cep.lang import builder as b                                      # noqa: E402
from raycep.cep.lang.ast import Duration, Literal, Param                      # noqa: E402

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


# --------------------------------------------------------------------------- events

import math                                                        # noqa: E402
from datetime import datetime, timezone                            # noqa: E402

from raycep.cep.errors import IngestError                                 # noqa: E402
from raycep.cep.event import make_event, trusted_event                    # noqa: E402


@pytest.mark.parametrize("ts, what", [
    (math.nan, "event time must be finite"), (math.inf, "event time must be finite"),
    ("soon", "event time must be a number"), (True, "event time must be a number"),
    (None, "missing event time"),
    (datetime(2024, 1, 1, tzinfo=timezone.utc), "convert it with .timestamp()"),
])
def test_an_event_time_that_is_no_finite_number_is_refused_at_construction(ts, what):
    with pytest.raises(IngestError, match=what) as info:
        Event("Stock", ts, {"price": 1.0})
    assert info.value.field == "ts"


def test_a_pandas_timestamp_is_refused_with_a_hint():
    with pytest.raises(IngestError, match=r"Timestamp.*convert it with \.timestamp\(\)"):
        Event("Stock", pd.Timestamp("2024-01-01"), {"price": 1.0})
    ts = pd.Timestamp("2024-01-01", tz="UTC").timestamp()
    assert Event("Stock", ts, {}).ts == ts


def test_a_nan_time_no_longer_gives_a_match_with_nan_times():
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WITHIN 10 seconds", name="q")
    eng.process(Event("Stock", 1.0, {}))
    with pytest.raises(IngestError):
        eng.process(Event("Stock", math.nan, {}))
    assert eng.advance(math.inf) == []


@pytest.mark.parametrize("kwargs, field, what", [
    (dict(type="", ts=1.0), "type", "missing event type"),
    (dict(type=5, ts=1.0), "type", "event type must be a string"),
    (dict(type="A", ts=1.0, attrs={"x": math.nan}), "x", "must be finite"),
    (dict(type="A", ts=1.0, attrs={"x": 2 ** 70}), "x", "integer out of range"),
    (dict(type="A", ts=1.0, attrs={"x": object()}), "x", "value must be"),
    (dict(type="A", ts=1.0, attrs={1: 2}), "attrs", "attribute names must be strings"),
    (dict(type="A", ts=1.0, attrs=[("x", 1)]), "attrs", "attrs must be a mapping"),
    (dict(type="A", ts=1.0, key={"a": 1}), "key", "partition key must be"),
    (dict(type="A", ts=1.0, key=math.inf), "key", "must be finite"),
    (dict(type="A", ts=1.0, id=[1]), "id", "event id must be"),
])
def test_event_applies_the_rules_of_make_event(kwargs, field, what):
    with pytest.raises(IngestError, match=what) as info:
        Event(**kwargs)
    assert info.value.field == field


def test_event_and_make_event_give_the_same_event():
    ev = Event("Stock", 3, {"price": np.float64(1.5), "n": np.int64(2), "s": "x"}, key=7,
               id=12)
    assert (ev.ts, ev.attrs, ev.key, ev.id) == (3.0, {"price": 1.5, "n": 2, "s": "x"}, 7, "12")
    assert type(ev.attrs["price"]) is float and type(ev.attrs["n"]) is int
    row = make_event({"type": "Stock", "ts": 3, "price": 1.5, "n": 2, "s": "x", "key": 7,
                      "id": 12})
    assert (row.type, row.ts, row.attrs, row.key, row.id) == \
        (ev.type, ev.ts, ev.attrs, ev.key, ev.id)
    plain = {"price": 1.5}
    assert Event("Stock", 1.0, plain).attrs is plain         # checked, not copied
    import pickle
    again = pickle.loads(pickle.dumps(ev))
    assert (again.type, again.ts, again.attrs, again.key, again.id) == \
        (ev.type, ev.ts, ev.attrs, ev.key, ev.id)
    assert trusted_event("A", 1.0, {"x": math.nan}).attrs["x"] != 0    # no check there


# --------------------------------------------------------------------------- the key

KEYED = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price WITHIN 100 seconds"


def test_the_key_attribute_is_the_one_source_of_the_partition_key():
    events = sample()
    want = oracle_matches(parse_query(KEYED), events)
    assert want
    # no key given: the engine takes it from the attribute, alone or mixed with keyed events
    assert engine_keys(KEYED, events, key_attr="symbol") == want
    assert engine_keys(KEYED, events, key_attr="symbol", many=True) == want
    mixed = [Event(e.type, e.ts, e.attrs, key=e.attrs["symbol"] if k % 3 else None)
             for k, e in enumerate(events)]
    want = oracle_matches(parse_query(KEYED), mixed)      # (a given key is part of the id)
    assert engine_keys(KEYED, mixed, key_attr="symbol") == want
    assert engine_keys(KEYED, mixed, key_attr="symbol", many=True) == want
    # a key that contradicts the attribute is refused (it paired AAPL with MSFT: 45 matches)
    wrong = [Event(e.type, e.ts, e.attrs, key="X") for e in events]
    for many in (False, True):
        eng = Engine(key_attr="symbol")
        eng.add_query(KEYED, name="q")
        with pytest.raises(IngestError, match=r"partition key 'X' differs from the attribute "
                                              r"symbol='AAPL'") as info:
            eng.process_many(wrong) if many else eng.process(wrong[0])
        assert info.value.field == "symbol"
        assert eng.events == 0                   # nothing of the batch was taken
    # a key without the attribute is refused too
    eng = Engine(key_attr="symbol")
    with pytest.raises(IngestError, match="no attribute 'symbol'"):
        eng.process(Event("Stock", 1.0, {"price": 1.0}, key="AAPL"))
    # without key_attr the key is the event's own: nothing to reconcile
    assert engine_keys(KEYED, wrong) == oracle_matches(parse_query(KEYED), wrong)


# --------------------------------------------------------------------------- warnings

import logging                                                     # noqa: E402
import warnings                                                    # noqa: E402

from raycep.cep.runtime.unseen import QueryWarning                                # noqa: E402


def told(record) -> list:
    return [str(w.message) for w in record if issubclass(w.category, QueryWarning)]


def test_a_comparison_that_never_holds_is_a_warning_told_once(caplog):
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE a.price < 'high' WITHIN 10 seconds",
                  name="hi")
    eng.add_query("PATTERN SEQ(Stock a, Stock b) WHERE b.price > a.price WITHIN 10 seconds",
                  name="fine")
    caplog.set_level(logging.INFO, logger="raycep")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert eng.process_many(sample()) and not any(m.query == "hi" for m in
                                                      eng.process_many(sample(40)[20:]))
        eng.advance(math.inf)
    found = eng.warnings()
    assert list(found) == ["hi"]
    assert "condition `a.price < 'high'` never held" in found["hi"][0]
    assert "'high'" in found["hi"][0].split("(")[-1]            # the reason
    assert len(told(record)) == 1                               # once, not per event/batch
    assert told(record)[0].startswith("query 'hi': condition `a.price < 'high'` never held")
    assert record[0].filename == __file__                       # points at the user's call
    assert any("never held" in r.getMessage() for r in caplog.records)


def test_a_type_never_seen_is_told_once_a_window_has_passed_or_at_the_end():
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Trade b) WITHIN 10 seconds", name="q")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for ev in sample(5):                 # 4 seconds of input: no evidence yet
            eng.process(ev)
        assert told(record) == []
        assert "'Trade'" in eng.warnings()["q"][0]              # asked for: listed
        for ev in sample(30)[5:]:            # a whole window without a Trade
            eng.process(ev)
        assert told(record) == ["query 'q': no event of type 'Trade' seen in the input so far "
                                "(misspelt event type?)"]
    eng = Engine()
    eng.add_query("PATTERN SEQ(Stock a, Trade b) WITHIN 10 seconds", name="q")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        eng.process_many(sample(3))
        assert told(record) == []
        eng.advance(math.inf)                # the end of the stream: all there is
        assert len(told(record)) == 1 and "'Trade'" in told(record)[0]
