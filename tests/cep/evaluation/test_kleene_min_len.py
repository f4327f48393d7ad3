"""A skip-till-next-match Kleene step whose first conjunct is a lower bound on the sequence's
length (``b.LEN >= 4``) does not yield the shorter runs
(``raycep.cep.evaluation.steps.Step.min_len``): the matches, their order and every conjunct's
counters are those of yielding and failing them."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import raycep.cep.evaluation.steps
from raycep.cep.evaluation.steps import build_steps
from raycep.cep.event import Event
from raycep.cep.io.sources import read_events
from raycep.cep.lang import ast as A
from raycep.cep.lang.compiler import compile_query
from raycep.cep.lang.parser import parse_query
from raycep.cep.runtime.engine import Engine

from strategies import query_and_stream, query_text
from test_engine_vs_oracle import SLOW, feed, plan_orders

RALLY = """PATTERN SEQ(Stock a, Stock+ b[], Stock c)
WHERE skip_till_next_match(a, b, c) {
    [symbol] AND b[1].price > a.price AND b[i].price > b[i-1].price AND %s
    AND LAST(b.price) > a.price * 1.01 AND c.price < LAST(b.price)
} WITHIN 15 seconds"""


@contextmanager
def without_shortcut(name: str, plain):
    """Steps built while inside use ``plain`` as ``raycep.cep.evaluation.steps.<name>``."""
    saved = getattr(raycep.cep.evaluation.steps, name)
    setattr(raycep.cep.evaluation.steps, name, plain)
    try:
        yield
    finally:
        setattr(raycep.cep.evaluation.steps, name, saved)


def without_min_len():
    """Steps built while inside have ``min_len`` 1 (every run prefix is yielded and checked)."""
    return without_shortcut("_min_len", lambda c, name: 1)


def kleene_step(text: str, order=("c", "b", "a")):
    cq = compile_query(parse_query(text))
    (branch,) = cq.branches
    return next(s for s in build_steps(branch, order) if s.var.kleene)


@pytest.mark.parametrize("bound, want", [
    ("b.LEN >= 4", 4), ("b.LEN > 2.5", 3), ("b.LEN > 3", 4), ("4 <= b.LEN", 4),
    ("3 < b.LEN", 4), ("b.LEN = 3", 3), ("b.LEN >= 0", 1), ("b.LEN <= 3", 1),
    ("b.LEN != 3", 1), ("b.LEN >= 2.2", 3)])
def test_min_len_of_the_first_conjunct(bound, want):
    assert kleene_step(RALLY % bound).min_len == want


def test_min_len_only_from_the_first_conjunct_of_the_step():
    """A length bound after another conjunct of the step: that one is checked first."""
    text = RALLY.replace("AND %s", "").replace(
        "c.price < LAST(b.price)", "c.price < LAST(b.price) AND b.LEN >= 4")
    assert kleene_step(text).min_len == 1
    for order in (("a", "b", "c"), ("c", "b", "a"), ("b", "a", "c")):
        step = kleene_step(RALLY % "b.LEN >= 4", order=order)
        first = step.conjuncts[0].expr if step.conjuncts else None
        assert (step.min_len == 4) == (isinstance(first, A.Compare) and
                                       isinstance(first.left, A.Len)), order


def run(text: str, events: list, order=None, key="symbol"):
    eng = Engine(key_attr=key)
    eng.add_query(parse_query(text), name="q", order=order)
    out = eng.process_many(list(events)) + eng.advance(float("inf"))
    conj = [(c["text"], c["tested"], c["passed"], c["failed"])
            for c in eng.stats()["queries"]["q"]["conjuncts"]]
    return [(m.query, m.bindings, m.order) for m in out], conj


@pytest.mark.parametrize("order", [("c", "b", "a"), None])
def test_sample_rally_same_matches_and_counters(order):
    events = list(read_events("examples/ticks.csv", key_attr="symbol"))[:6000]
    text = RALLY % "b.LEN >= 4"
    assert kleene_step(text).min_len == 4
    got = run(text, events, order)
    with without_min_len():
        want = run(text, events, order)
    assert got[0] and got == want


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(), data=st.data())
def test_random_queries_same_matches_and_counters(qpe, data):
    """Random queries (Kleene variables with ``LEN`` bounds among them), every strategy and
    plan order: the same outputs in the same order and the same conjunct counters."""
    query, params, events = qpe
    plan = [e for e in feed(data, events) if isinstance(e, Event)]
    for strategy in A.STRATEGIES:
        q = dataclasses.replace(query, strategy=strategy)
        for order in plan_orders(data, query)[:4]:
            note(f"{query_text(q)} order={order}")
            got = _run_query(q, params, plan, order)
            with without_min_len():
                want = _run_query(q, params, plan, order)
            assert got == want


def _run_query(query, params, plan, order):
    eng = Engine()
    eng.add_query(query, name="q", params=params or None, order=order)
    out = eng.process_many(plan) + eng.advance(float("inf"))
    conj = [(c["text"], c["tested"], c["passed"], c["failed"])
            for c in eng.stats()["queries"]["q"]["conjuncts"]]
    return [(m.bindings, m.order) for m in out], conj


@st.composite
def length_bound_queries(draw):
    """A skip-till-next-match Kleene query whose step for ``b`` checks a length bound first
    (``b.LEN OP K`` written before the step's other whole-sequence conjuncts)."""
    lead = draw(st.booleans())
    trail = draw(st.booleans()) or not lead
    names = (["A a"] if lead else []) + ["B+ b[]"] + (["C c"] if trail else [])
    take = draw(st.sampled_from(["b[i].x > b[i-1].x", "b[i].x >= b[i-1].x",
                                 "b[i].x < b[i-1].x", "b[i].y != b[i-1].y"]))
    bound = draw(st.sampled_from([">=", ">", "="]))
    k = draw(st.sampled_from(["1", "2", "3", "2.5", "4"]))
    if draw(st.booleans()):
        length = f"b.LEN {bound} {k}"
    else:
        length = f"{k} {dict(zip('>=,>,='.split(','), '<=,<,='.split(',')))[bound]} b.LEN"
    rest = []
    if trail and draw(st.booleans()):
        rest.append(f"c.x {draw(st.sampled_from(['<', '>', '<=']))} LAST(b.x)")
    if lead and draw(st.booleans()):
        rest.append("b[1].x > a.x")
    if draw(st.booleans()):
        rest.append(f"SUM(b.x) >= {draw(st.integers(0, 8))}")
    where = " AND ".join([take, length, *rest])
    window = draw(st.sampled_from([3, 5, 8]))
    return (f"PATTERN SEQ({', '.join(names)}) WHERE skip_till_next_match("
            f"{', '.join(n.split()[1].rstrip('[]') for n in names)}) {{ {where} }} "
            f"WITHIN {window} seconds"), float(window)


@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(qw=length_bound_queries(), data=st.data())
def test_length_bounds_same_matches_counters_and_oracle(qw, data):
    """Queries that use the shortcut: the same outputs (order included) and counters as
    without it, for every plan order, and the oracle's match set."""
    from strategies import streams

    text, window = qw
    events = data.draw(streams(limit_types={"B"}, window=window, max_events=30),
                       label="events")
    if same_as_without(data, text, events, without_min_len, lambda s: s.min_len > 1):
        from hypothesis import event
        event("length shortcut used")


def same_as_without(data, text: str, events: list, without, uses) -> bool:
    """For every plan order of the query ``text``: the same outputs (order included) and
    counters as inside ``without()``, and the oracle's match set; whether a step built for
    one of the orders ``uses`` the shortcut."""
    from oracle import oracle_matches
    query = parse_query(text)
    note(text)
    expected = oracle_matches(query, events)
    used = False
    for order in plan_orders(data, query):
        got = _run_query(query, {}, events, order)
        with without():
            want = _run_query(query, {}, events, order)
        assert got == want, order
        keys = {frozenset((v, e.id if isinstance(e, Event) else tuple(x.id for x in e))
                          for v, e in b.items()) for b, _ in got[0]}
        assert keys == expected, order
        used |= any(uses(s) for s in _steps_of(query, order))
    return used


def _steps_of(query, order):
    cq = compile_query(query)
    if order is None:
        return ()
    return [s for branch in cq.branches for s in build_steps(branch, order)]
