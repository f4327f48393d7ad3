"""Property tests: the engine agrees with the brute-force oracle on random queries and streams,
for every selection strategy and for every forced plan order of the positive variables."""
from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from raycep.cep.event import Event, trusted_event
from raycep.cep.lang import ast as A
from raycep.cep.lang.validate import validate
from raycep.cep.runtime.engine import Engine

from oracle import oracle_matches
from strategies import events_text, kleene_types, queries, query_and_stream, query_text, \
    streams, window_of

MAX_PERMUTATIONS = 24
SAMPLED_ORDERS = 8
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def positive_names(query: A.Query) -> list:
    return [v.name for v in A.event_vars(query.pattern) if not v.negated]


def plan_orders(data, query: A.Query) -> list:
    """None (ad hoc Tree-NFA order) plus every permutation of the positive variables, or a
    sample of 8 permutations when there are more than 24."""
    names = positive_names(query)
    perms = list(itertools.permutations(names))
    if len(perms) > MAX_PERMUTATIONS:
        perms = [tuple(data.draw(st.permutations(names), label="order"))
                 for _ in range(SAMPLED_ORDERS)]
    return [None] + perms


def feed(data, events: list) -> list:
    """What the engine is given: the events in (ts, id) order, sometimes with duplicates (a
    copy right after the original: same id, must be dropped) and sometimes with watermarks
    (``advance(ts - 0.5)`` before each event, so deferred matches come out mid-stream)."""
    dupes = data.draw(st.integers(0, 3), label="dupes") == 0
    marks = data.draw(st.booleans(), label="watermarks")
    plan = []
    for e in events:
        if marks:
            plan.append(e.ts - 0.5)
        plan.append(e)
        if dupes and data.draw(st.integers(0, 2), label="dupe") == 0:
            plan.append(Event(e.type, e.ts, dict(e.attrs), key=e.key, id=e.id))
    return plan


def engine_keys(queries_: list, plan: list, key_attr=None) -> dict:
    """Run one Engine with every (name, query, params, order) registered over ``plan`` (events
    and watermarks); the match keys per query name. Asserts no match is reported twice."""
    eng = Engine(key_attr=key_attr)
    for name, query, params, order in queries_:
        eng.add_query(query, name=name, params=params or None, order=order)
    out = []
    for item in plan:
        out += eng.process(item) if isinstance(item, Event) else eng.advance(item)
    out += eng.advance(float("inf"))
    result = {name: [] for name, *_ in queries_}
    for match in out:
        result[match.query].append(match.key())
    for name, keys in result.items():
        dupes = [k for k in keys if keys.count(k) > 1]
        assert not dupes, f"{name}: reported more than once: {show(dupes)[:3]}"
    return {name: set(keys) for name, keys in result.items()}


def describe(query, params, events, strategy=None, order=None) -> str:
    if strategy is not None:
        query = dataclasses.replace(query, strategy=strategy)
    return (f"{query_text(query)}\nparams={params} order={order}\n{query!r}\n"
            f"events:\n{events_text(events)}")


def show(keys) -> list:
    return sorted(sorted((var, ids) for var, ids in k) for k in keys)


def check(query, params, events, plan, order=None, key_attr=None):
    expected = oracle_matches(query, events, params)
    got = engine_keys([("q", query, params, order)], plan, key_attr)["q"]
    if got != expected:
        note(describe(query, params, events, order=order))
        note(f"missing (oracle only): {show(expected - got)}")
        note(f"extra (engine only):   {show(got - expected)}")
    assert got == expected, describe(query, params, events, order=order)


# --------------------------------------------------------------------------- examples

def test_equivalence_on_type_compares_x_type():
    """``[type]`` compares ``x.type`` of every variable: the attribute 'type' if the event has
    one, else the event type (docs/semantics.md: "[attr] ... the same value of attr", "x.type ...")."""
    a1, b2 = Event("A", 1.0, {}, id="1"), Event("B", 2.0, {"type": "A"}, id="2")
    a3, c4 = Event("A", 3.0, {}, id="3"), Event("C", 4.0, {}, id="4")
    query = A.Query(A.Seq((A.EventVar(None, "a"), A.EventVar(None, "b"))), equivalence=("type",),
                    within=A.Duration(A.Literal(10)))
    events = [a1, b2, a3, c4]
    expected = {frozenset({("a", "1"), ("b", "2")}), frozenset({("a", "1"), ("b", "3")}),
                frozenset({("a", "2"), ("b", "3")})}
    assert oracle_matches(query, events) == expected
    assert engine_keys([("q", query, {}, None)], events)["q"] == expected


def test_nan_in_a_negation_range_is_no_witness():
    """A NaN attribute (made past the input checks: Event and files refuse it) compares false: it is no
    witness of ``n.v < a.v``, and it does not hide the witness after it (the suffix minimum
    of Evaluation._extreme_table skipped it only by luck of min's argument order)."""
    from raycep.cep.lang.parser import parse_query
    query = parse_query("PATTERN SEQ(A a, ~N n, B b) WHERE n.v < a.v WITHIN 10 seconds")
    for values, witness in (((float("nan"), 1.0), True), ((1.0, float("nan")), True),
                            ((float("nan"),), False)):
        events = [Event("A", 1.0, {"v": 5}, id="a")]
        events += [trusted_event("N", 2.0 + k, {"v": v}, id=f"n{k}")    # Event refuses NaN
                   for k, v in enumerate(values)]
        events.append(Event("B", 9.0, {"v": 0}, id="b"))
        expected = oracle_matches(query, events)
        assert (expected == set()) is witness
        for order in (None, ("a", "b"), ("b", "a")):
            assert engine_keys([("q", query, {}, order)], events)["q"] == expected, (values,
                                                                                   order)


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream())
def test_generated_queries_are_valid(qpe):
    """The generator obeys the validation rules (cep.lang.validate), so engine failures are real."""
    query, params, _ = qpe
    note(query_text(query))
    assert validate(query) is query


# --------------------------------------------------------------------------- properties

@settings(max_examples=800, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(), data=st.data())
def test_engine_matches_oracle_every_strategy_and_order(qpe, data):
    query, params, events = qpe
    note(describe(query, params, events))
    orders = plan_orders(data, query)
    plan = feed(data, events)
    for strategy in A.STRATEGIES:
        q = dataclasses.replace(query, strategy=strategy)
        for order in orders:
            check(q, params, events, plan, order=order)


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(keyed=True, equivalence=True), data=st.data())
def test_engine_with_partition_key_matches_oracle(qpe, data):
    """Events carry key = attribute k and the query has [k]: the engine may evaluate inside
    the trigger's partition, but the match set must not change (strict contiguity included:
    events of other partitions still break contiguity, per the README's query stream)."""
    query, params, events = qpe
    note(describe(query, params, events))
    orders = plan_orders(data, query)
    orders = [orders[0]] + [data.draw(st.sampled_from(orders[1:]), label="order")]
    plan = feed(data, events)
    for strategy in A.STRATEGIES:
        q = dataclasses.replace(query, strategy=strategy)
        for order in orders:
            check(q, params, events, plan, order=order, key_attr="k")


@st.composite
def many_queries_and_stream(draw):
    """2-4 random queries (random strategies) and one stream; keyed or not."""
    keyed = draw(st.booleans())
    n = draw(st.integers(2, 4))
    qs = []
    for _ in range(n):
        q, p = draw(queries(max_vars=4))
        qs.append((dataclasses.replace(q, strategy=draw(st.sampled_from(A.STRATEGIES))), p))
    window = max(window_of(q, p) for q, p in qs)
    limit = set().union(*(kleene_types(q) for q, _ in qs))
    return qs, draw(streams(limit_types=limit, window=window, keyed=keyed)), keyed


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(qsk=many_queries_and_stream(), data=st.data())
def test_many_queries_on_one_engine(qsk, data):
    """Several queries share one Engine (one index); each agrees with the oracle alone."""
    qs, events, keyed = qsk
    registered = [(f"q{j}", q, p, None) for j, (q, p) in enumerate(qs)]
    for name, q, p, _ in registered:
        note(f"--- {name}\n{query_text(q)}\nparams={p}")
    note(f"keyed={keyed} events:\n{events_text(events)}")
    got = engine_keys(registered, feed(data, events), key_attr="k" if keyed else None)
    for name, q, p, _ in registered:
        expected = oracle_matches(q, events, p)
        if got[name] != expected:
            note(f"{name}: missing {show(expected - got[name])}\n"
                 f"{name}: extra {show(got[name] - expected)}")
        assert got[name] == expected, f"{name}\n{describe(q, p, events)}"
