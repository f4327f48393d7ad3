"""A skip-till-next-match Kleene step whose take condition is one order comparison of
consecutive elements (``b[i].x > b[i-1].x``: ``raycep.cep.evaluation.steps.Step.ordered``)
finds every candidate's next element in one pass (``_Span.ordered_nexts``) and makes only the
runs long enough to yield: the matches, their order and every conjunct's counters are those
of looking for each next element one candidate at a time, and the oracle's."""
from __future__ import annotations

import operator

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from raycep.cep.event import Event
from raycep.cep.io.sources import read_events

from test_engine_vs_oracle import SLOW
from test_kleene_min_len import RALLY, kleene_step, run, same_as_without, without_shortcut


def without_ordered():
    """Steps built while inside have ``ordered`` None (each next element looked for one
    candidate at a time)."""
    return without_shortcut("_ordered", lambda incremental, name: None)


@pytest.mark.parametrize("take, want", [
    ("b[i].price > b[i-1].price", ("price", operator.gt)),
    ("b[i-1].price < b[i].price", ("price", operator.gt)),
    ("b[i+1].price >= b[i].price", ("price", operator.ge)),
    ("b[i].price <= b[i-1].price", ("price", operator.le)),
    ("b[i-1].price > b[i].price", ("price", operator.lt)),
    ("b[i].price > b[i-1].volume", None),           # two attributes
    ("b[i].price > b[i-1].price + 0", None),        # arithmetic
    ("b[i].price != b[i-1].price", None),           # not an order
    ("b[i].ts > b[i-1].ts", None),                  # a field, not an attribute
])
def test_which_take_conditions_are_one_order_comparison(take, want):
    text = RALLY.replace("b[i].price > b[i-1].price", take) % "b.LEN >= 4"
    assert kleene_step(text).ordered == want


@pytest.mark.parametrize("order", [("c", "b", "a"), ("a", "b", "c"), ("b", "a", "c"), None])
def test_sample_rally_same_matches_and_counters(order):
    events = list(read_events("examples/ticks.csv", key_attr="symbol"))[:6000]
    text = RALLY % "b.LEN >= 4"
    assert kleene_step(text).ordered == ("price", operator.gt)
    got = run(text, events, order)
    with without_ordered():
        want = run(text, events, order)
    assert got[0] and got == want


TAKES = ("b[i].x > b[i-1].x", "b[i].x >= b[i-1].x", "b[i-1].x > b[i].x",
         "b[i+1].x <= b[i].x", "b[i].y > b[i-1].y", "b[i].s < b[i-1].s",
         "b[i].w > b[i-1].w")


@st.composite
def ordered_queries(draw):
    """A skip-till-next-match Kleene query whose take condition is one order comparison: of
    numbers (``x``), of a sometimes missing attribute (``y``), of numbers and texts mixed
    (``s``), of floats, an int and a boolean (``w``)."""
    lead = draw(st.booleans())
    trail = draw(st.booleans()) or not lead
    names = (["A a"] if lead else []) + ["B+ b[]"] + (["C c"] if trail else [])
    rest = [draw(st.sampled_from(TAKES))]
    if draw(st.booleans()):
        rest.append(f"b.LEN >= {draw(st.sampled_from([2, 3]))}")
    if trail and draw(st.booleans()):
        rest.append(f"c.x {draw(st.sampled_from(['<', '>', '<=']))} LAST(b.x)")
    if lead and draw(st.booleans()):
        rest.append("b[1].x > a.x")
    window = draw(st.sampled_from([3, 5, 8]))
    return (f"PATTERN SEQ({', '.join(names)}) WHERE skip_till_next_match("
            f"{', '.join(n.split()[1].rstrip('[]') for n in names)}) {{ "
            f"{' AND '.join(rest)} }} WITHIN {window} seconds"), float(window)


@st.composite
def ordered_streams(draw, window: float):
    """Events A, B, C with x (small integers: ties), y (sometimes missing), s (a number or a
    text), w (a float, an int or a boolean), at most 7 B events in a window."""
    from strategies import limit_kleene
    n = draw(st.integers(4, 28))
    events, ts = [], 0.0
    for j in range(n):
        ts += draw(st.sampled_from([0, 1, 1, 2]))
        attrs = {"x": draw(st.integers(0, 4)), "s": draw(st.sampled_from([1, 2, "p", "q"])),
                 "w": draw(st.sampled_from([0.5, 1.5, 2.0, 2, True]))}
        if draw(st.integers(0, 3)):
            attrs["y"] = draw(st.integers(0, 3))
        events.append(Event(draw(st.sampled_from("ABBC")), ts, attrs, id=f"e{j:02d}"))
    return limit_kleene(events, ("B",), window)


@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(qw=ordered_queries(), data=st.data())
def test_ordered_runs_same_matches_counters_and_oracle(qw, data):
    """For every plan order: the same outputs (order included) and counters as without the
    one-pass next elements, and the oracle's match set."""
    text, window = qw
    events = data.draw(ordered_streams(window), label="events")
    if same_as_without(data, text, events, without_ordered, lambda s: s.ordered is not None):
        event("one-pass next elements used")
