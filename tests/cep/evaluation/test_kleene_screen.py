"""The bulk screen of skip-till-next-match Kleene runs (raycep.cep.evaluation.kleene_screen):
which shapes it takes, and that the triggers it rules out have no match.

The property is differential, as in test_bulk_shapes: ``Engine.process_columns`` in chunks
with the bulk path on for every chunk (``BULK_TRIGGERS = 1``) against the same events given
one by one (``Engine.process``): the same Match objects in the same order, for every plan
order, keyed or not, with ties and odd values; on small streams also the oracle's match set.
Condition counters are not compared: the screen counts none for the triggers it rules out.
A spy checks that the screen did rule out triggers, so the property cannot hold vacuously."""
from __future__ import annotations

import operator
from unittest import mock

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import raycep.cep.evaluation.kleene_screen as kleene
from raycep.cep.lang.compiler import compile_query
from raycep.cep.lang.parser import parse_query

from oracle import oracle_matches
from test_bulk import patched
from test_bulk_shapes import SLOW, by_columns, by_event, net_keys, stream
from strategies import limit_kleene

RALLY = ("PATTERN SEQ(Stock a, Stock+ b[], Stock c) WHERE skip_till_next_match(a, b, c) {{ "
         "{where} }} WITHIN {w} seconds")


def shape(m) -> tuple:
    """An output as its kind, query and match key (its events, by variable)."""
    return m.__class__.__name__, m.query, m.key()


def screen_of(text: str):
    cq = compile_query(parse_query(text))
    return kleene.kleene_screen([cq], 0, cq.branches[0].positives[-1].name)


@pytest.mark.parametrize("where, want", [
    ("b[1].price > a.price AND b[i].price > b[i-1].price AND b.LEN >= 4 AND "
     "c.price < LAST(b.price)", ("price", operator.gt, 4)),
    ("b[i].price <= b[i-1].price AND b.LEN > 2", ("price", operator.le, 3)),
    ("b[i-1].price > b[i].price AND c.volume > 2 * a.volume", ("price", operator.lt, 1)),
    ("b[i].price > b[i-1].price AND b[i].volume > 100", None),      # another take condition
    ("b[i].price > b[i-1].volume", None),                           # two attributes
    ("b[i].price > b[i-1].price AND b[1].volume > b[2].volume", None),  # a fixed element
    ("SUM(b[..i].price) > 5 AND b[i].price > b[i-1].price", None),  # an element-wise sum
])
def test_which_shapes_are_screened(where, want):
    got = screen_of(RALLY.format(where=where, w=10))
    assert (None if got is None else (got.attr, got.op, got.min_len)) == want


@pytest.mark.parametrize("text", [
    # another strategy, a negation, four variables, no Kleene variable
    "PATTERN SEQ(Stock a, Stock+ b[], Stock c) WHERE b[i].price > b[i-1].price WITHIN 5 seconds",
    "PATTERN SEQ(Stock a, Stock+ b[], ~Stock n, Stock c) WHERE skip_till_next_match(a, b, c) "
    "{ b[i].price > b[i-1].price } WITHIN 5 seconds",
    "PATTERN SEQ(Stock a, Stock+ b[], Stock c, Stock d) WHERE skip_till_next_match(a, b, c, d) "
    "{ b[i].price > b[i-1].price } WITHIN 5 seconds",
    "PATTERN SEQ(Stock a, Stock b, Stock c) WHERE skip_till_next_match(a, b, c) "
    "{ b.price > a.price } WITHIN 5 seconds",
])
def test_other_shapes_are_not_screened(text):
    assert screen_of(text) is None


def test_a_group_is_screened_with_its_loosest_length_and_window():
    short = compile_query(parse_query(RALLY.format(
        where="b[i].price > b[i-1].price AND b.LEN >= 2", w=5)))
    long = compile_query(parse_query(RALLY.format(
        where="b[i].price > b[i-1].price AND b.LEN >= 5", w=20)))
    got = kleene.kleene_screen([long, short], 0, "c")
    assert (got.min_len, got.window) == (2, 20.0)
    other = compile_query(parse_query(RALLY.format(where="b[i].price < b[i-1].price", w=5)))
    assert kleene.kleene_screen([long, other], 0, "c") is None


# --------------------------------------------------------------------------- the property

TAKES = ("b[i].price > b[i-1].price", "b[i].price >= b[i-1].price",
         "b[i-1].price > b[i].price", "b[i+1].v <= b[i].v")


@st.composite
def queries(draw) -> tuple:
    """A query the screen takes, or one near it: ``(text, types of the stream)``."""
    one_type = draw(st.booleans(), label="one type")
    a, b, c = ("Stock", "Stock", "Stock") if one_type else ("A", "B", "C")
    take = draw(st.sampled_from(TAKES), label="take")
    rest = [take]
    if draw(st.booleans()):
        rest.append(f"b.LEN >= {draw(st.sampled_from([2, 3, 4]), label='length')}")
    if draw(st.booleans()):
        rest.append("b[1].price > a.price")
    if draw(st.booleans()):
        rest.append(draw(st.sampled_from(["c.price < LAST(b.price)",
                                          "c.price > LAST(b.price) * 0.995",
                                          "c.volume >= a.volume"]), label="c"))
    if draw(st.booleans()):
        rest.insert(0, "[symbol]")
    w = draw(st.sampled_from([2.0, 4.0, 9.0]), label="window")
    text = (f"PATTERN SEQ({a} a, {b}+ b[], {c} c) WHERE skip_till_next_match(a, b, c) {{ "
            f"{' AND '.join(rest)} }} WITHIN {w!r} seconds")
    types = {"Stock": 6, "Z": 1} if one_type else {"A": 3, "B": 5, "C": 3, "Z": 1}
    return text, types, w


class _Spy:
    def __init__(self):
        self.ruled_out = 0
        self.calls = 0

    def __call__(self, *args):
        got = _real(*args)
        self.calls += 1
        self.ruled_out += sum(got)
        return got


_real = kleene.screen_triggers


def run_both(text: str, events: list, order, key, bounds) -> tuple:
    setup = [("q", text, order)]
    spy = _Spy()
    with patched(), mock.patch.object(kleene, "screen_triggers", spy):
        got = by_columns(setup, events, bounds, key=key)
    want = by_event(setup, events, key=key)
    return got[0], want[0], spy


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(q=queries(), data=st.data(), seed=st.integers(0, 2 ** 20))
def test_screened_triggers_have_no_match(q, data, seed):
    """For every plan order: the same outputs in the same order as event by event, and on a
    short stream the oracle's match set."""
    text, types, w = q
    n = data.draw(st.sampled_from([40, 200, 600]), label="events")
    kind = data.draw(st.sampled_from(["clean", "clean", "ties", "odd"]), label="stream")
    keyed = data.draw(st.booleans(), label="keyed")
    events = stream(seed, n, types, ties=kind == "ties", odd=kind == "odd", keyed=keyed,
                    step=0.5)
    if n <= 40:
        events = limit_kleene(events, ("Stock", "B"), w)
    largest = data.draw(st.sampled_from([8, 64, 512]), label="largest chunk")
    cuts, at = [], 0
    while at < len(events):
        step = data.draw(st.integers(1, largest), label="chunk")
        cuts.append((at, min(len(events), at + step)))
        at += step
    order = data.draw(st.sampled_from([None, ("c", "b", "a"), ("a", "b", "c"), ("b", "a", "c")]),
                      label="order")
    key = "symbol" if keyed else None
    got, want, spy = run_both(text, events, order, key, cuts)
    note(f"{len(events)} events, {len(want)} outputs, {spy.ruled_out} triggers ruled out")
    if spy.ruled_out:
        event("triggers ruled out")
    assert [shape(m) for m in got] == [shape(m) for m in want]
    if n <= 40:
        assert net_keys(got, "q") == oracle_matches(parse_query(text), events)


def test_the_sample_rally_is_screened_and_keeps_its_matches():
    """A deterministic example: the sample rally over 3,000 ticks of three symbols, partitioned
    by symbol: most triggers are ruled out, and the matches are those event by event."""
    text = RALLY.format(where="[symbol] AND b[1].price > a.price AND b[i].price > "
                              "b[i-1].price AND b.LEN >= 4 AND c.price < LAST(b.price)", w=15)
    events = stream(7, 3000, {"Stock": 1}, keyed=True)
    got, want, spy = run_both(text, events, ("c", "b", "a"), "symbol", [(0, 1000), (1000, 3000)])
    assert len(want) > 20
    assert [shape(m) for m in got] == [shape(m) for m in want]
    assert spy.calls and spy.ruled_out > len(events) // 3
