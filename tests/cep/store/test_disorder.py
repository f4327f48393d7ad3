"""Out-of-order, late and duplicate input (cep.store.disorder; LimeCEP): against the oracle, the
final result after corrections equals the in-order result for every mode, strategy and
bounded delay; pessimistic queries never retract; late events and duplicates are reported."""
from __future__ import annotations

import dataclasses
import math

import pytest
import hypothesis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from raycep.cep.errors import CepError, QueryValidationError
from raycep.cep.event import Event
from raycep.cep.lang import ast as A
from raycep.cep.match import Retraction
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.disorder import DisorderSettings

from oracle import oracle_matches
from strategies import (events_text, query_and_stream, query_text,
                        trailing_negation_query_and_stream, window_of)

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
MODES = ("optimistic", "pessimistic")


def disorder(data, events: list, max_delay: float) -> list:
    """The arrival order: each event delayed by a random amount in [0, max_delay] of event
    time (sorted by arrival time; ties keep a random order), some sent twice (the copy later
    by up to max_delay as well). Sometimes a *burst*: a run of consecutive events delayed
    together by one large delay (a source that lags), so that several events arrive one
    after another far behind the clock, beyond a whole window (issue 13: what the old
    generator never produced, and what lost trailing-negation matches)."""
    delays = [0.0] * len(events)
    if events and max_delay > 0 and data.draw(st.integers(0, 2), label="burst?") == 0:
        start = data.draw(st.integers(0, len(events) - 1), label="burst start")
        end = data.draw(st.integers(start + 1, len(events)), label="burst end")
        lag = data.draw(st.floats(0, max_delay), label="burst delay")
        delays[start:end] = [lag] * (end - start)
    arrivals = []
    for n, e in enumerate(events):
        late = data.draw(st.integers(0, 3), label="late?") == 0
        delay = data.draw(st.floats(0, max_delay), label="delay") if late else 0.0
        arrivals.append((e.ts + max(delay, delays[n]), data.draw(st.integers(0, 9),
                                                                 label="tie"), n, e))
        if data.draw(st.integers(0, 6), label="dup?") == 0:
            again = data.draw(st.floats(0, max_delay), label="dup delay")
            copy = Event(e.type, e.ts, dict(e.attrs), key=e.key, id=e.id)
            arrivals.append((e.ts + again, data.draw(st.integers(0, 9)), n, copy))
    arrivals.sort(key=lambda a: a[:3])
    return [a[3] for a in arrivals]


def max_delay_of(data, query, params) -> float:
    """Small delays, or delays of up to three windows (events far behind the clock)."""
    if data.draw(st.booleans(), label="far?"):
        return window_of(query, params) * data.draw(st.sampled_from([1.5, 2, 3]),
                                                    label="windows of delay") + 1.0
    return float(data.draw(st.integers(0, 8), label="max delay"))


def final_keys(outputs: list) -> tuple:
    """Apply retractions in order: (the final set of match keys, retractions, problems)."""
    live: dict = {}
    retractions, problems = 0, []
    for m in outputs:
        k = m.key()
        if isinstance(m, Retraction):
            retractions += 1
            if k not in live:
                problems.append(f"retraction of a match never reported: {sorted(k)}")
            live.pop(k, None)
        else:
            if k in live:
                problems.append(f"reported twice without retraction: {sorted(k)}")
            live[k] = m
    return set(live), retractions, problems


def run(query, params, arrivals, mode, slack, key_attr=None, order=None, marks=False):
    """Feed ``arrivals``; with ``marks``, before each event ``advance()`` to just below the
    earliest event still to come (a watermark that is never wrong)."""
    eng = Engine(key_attr=key_attr, disorder=DisorderSettings(min_slack=slack))
    eng.add_query(query, name="q", params=params or None, order=order, mode=mode)
    out = []
    rest = [e.ts for e in arrivals]
    for n, e in enumerate(arrivals):
        if marks:
            out += eng.advance(min(rest[n:]) - 0.5)
        out += eng.process(e)
    out += eng.advance(math.inf)
    return eng, out


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(), data=st.data())
def test_final_result_after_corrections_equals_in_order_result(qpe, data):
    query, params, events = qpe
    strategy = data.draw(st.sampled_from(A.STRATEGIES), label="strategy")
    query = dataclasses.replace(query, strategy=strategy)
    max_delay = max_delay_of(data, query, params)
    arrivals = disorder(data, events, max_delay)
    marks = data.draw(st.booleans(), label="watermarks")
    note(f"{query_text(query)}\nparams={params}\nin order:\n{events_text(events)}\n"
         f"arrivals: {[e.id for e in arrivals]}")
    expected = oracle_matches(query, events, params)
    for mode in MODES:
        eng, out = run(query, params, arrivals, mode, max_delay, marks=marks)
        got, retractions, problems = final_keys(out)
        assert not problems, (mode, problems)
        assert eng.late_events == 0, (mode, [(x.event.id, x.reason) for x in eng.take_late()])
        assert got == expected, (mode, sorted(map(sorted, expected - got)),
                                 sorted(map(sorted, got - expected)))
        if mode == "pessimistic":
            assert retractions == 0


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(keyed=True, equivalence=True), data=st.data())
def test_corrections_with_partition_key_and_forced_orders(qpe, data):
    """Keyed events ([k] equivalence, evaluated per partition) and a forced plan order."""
    query, params, events = qpe
    strategy = data.draw(st.sampled_from(A.STRATEGIES), label="strategy")
    query = dataclasses.replace(query, strategy=strategy)
    names = [v.name for v in A.event_vars(query.pattern) if not v.negated]
    order = tuple(data.draw(st.permutations(names), label="order"))
    max_delay = max_delay_of(data, query, params)
    arrivals = disorder(data, events, max_delay)
    note(f"{query_text(query)}\norder={order}\n{events_text(events)}")
    expected = oracle_matches(query, events, params)
    for mode in MODES:
        _, out = run(query, params, arrivals, mode, max_delay, key_attr="k", order=order)
        got, retractions, problems = final_keys(out)
        assert not problems and got == expected, (mode, problems)
        assert mode == "optimistic" or retractions == 0


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(qpe=trailing_negation_query_and_stream(), data=st.data())
def test_trailing_negation_with_events_far_behind_the_clock(qpe, data):
    """Issue 13: a trigger of a query with a trailing negation arriving more than a window
    behind the clock, then other events behind it before the clock moves (a lagging burst):
    the match must be reported once, never lost or retracted without being reported."""
    query, params, events = qpe
    query = dataclasses.replace(query, strategy=data.draw(st.sampled_from(A.STRATEGIES)))
    max_delay = window_of(query, params) * 3 + 1.0
    arrivals = disorder(data, events, max_delay)
    note(f"{query_text(query)}\nparams={params}\nin order:\n{events_text(events)}\n"
         f"arrivals: {[e.id for e in arrivals]}")
    expected = oracle_matches(query, events, params)
    for mode in MODES:
        eng, out = run(query, params, arrivals, mode, max_delay)
        got, retractions, problems = final_keys(out)
        assert not problems, (mode, problems)
        assert got == expected, (mode, sorted(map(sorted, expected - got)),
                                 sorted(map(sorted, got - expected)))
        assert mode == "optimistic" or retractions == 0


def test_issue_13_trailing_negation_example():
    """The four rows of the report: S@100, S@1 (vol 9000), S@2, S@200."""
    q = ("PATTERN SEQ(S a, ~S n) WHERE a.vol > 5000 AND n.vol > 5000 WITHIN 5 seconds")
    rows = [("S", 100, 1, "r1"), ("S", 1, 9000, "r2"), ("S", 2, 1, "r3"), ("S", 200, 1, "r4")]
    for mode in MODES:
        eng = Engine(disorder=DisorderSettings(min_slack=250))
        eng.add_query(q, name="q", mode=mode)
        out = [m for t, ts, vol, i in rows for m in eng.process(ev(t, ts, i, vol=vol))]
        out += eng.advance(math.inf)
        got, retractions, problems = final_keys(out)
        assert not problems and retractions == 0, (mode, problems)
        assert got == {frozenset({("a", "r2")})}, mode
    # a negated event, also far behind: the match is reported, then retracted (and the
    # negated event, a valid `a` itself whose window closed, is a match at once)
    eng = Engine(disorder=DisorderSettings(min_slack=250))
    eng.add_query(q, name="q")
    out = [m for e in (ev("S", 100, "r1", vol=1), ev("S", 1, "r2", vol=9000),
                       ev("S", 2, "r3", vol=1), ev("S", 3, "r5", vol=6000))
           for m in eng.process(e)]
    assert [(type(m).__name__, sorted(m.key())) for m in out] == \
        [("Match", [("a", "r2")]), ("Retraction", [("a", "r2")]), ("Match", [("a", "r5")])]


# --------------------------------------------------------------------------- examples

def ev(t, ts, eid, **attrs):
    return Event(t, float(ts), attrs, id=eid)


def test_late_negated_event_retracts_optimistic_match_and_pessimistic_waits():
    q = "PATTERN SEQ(A a, ~N n, B b) WITHIN 10"
    a, b, n = ev("A", 1, "a1"), ev("B", 5, "b5"), ev("N", 3, "n3")
    opt = Engine(disorder=DisorderSettings(min_slack=4))
    opt.add_query(q, name="q", mode="optimistic")
    first = opt.process(a) + opt.process(b)
    assert [m.key() for m in first] == [frozenset({("a", "a1"), ("b", "b5")})]
    fix = opt.process(n)
    assert len(fix) == 1 and isinstance(fix[0], Retraction)
    assert fix[0].to_dict()["retracted"] is True
    assert fix[0].to_dict()["events"] == first[0].to_dict()["events"]
    assert opt.stats()["queries"]["q"]["retractions"] == 1

    pes = Engine(disorder=DisorderSettings(min_slack=4))
    pes.add_query(q, name="q", mode="pessimistic")
    assert pes.process(a) + pes.process(b) + pes.process(n) == []
    assert pes.process(ev("C", 9.5, "c")) == []        # watermark 5.5 passed b: no match
    assert pes.advance(math.inf) == []


def test_pessimistic_holds_a_trigger_until_the_watermark_passes_it():
    eng = Engine(disorder=DisorderSettings(min_slack=2))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 10", name="q", mode="pessimistic")
    assert eng.process(ev("A", 1, "a")) + eng.process(ev("B", 2, "b")) == []
    assert eng.process(ev("C", 4, "c")) == []            # watermark 2: not past b yet
    out = eng.process(ev("C", 4.5, "d"))                 # watermark 2.5 > 2
    assert [m.key() for m in out] == [frozenset({("a", "a"), ("b", "b")})]


def test_late_positive_event_adds_matches_without_retraction():
    eng = Engine(disorder=DisorderSettings(min_slack=5))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 10", name="q")
    assert eng.process(ev("B", 4, "b")) == []
    out = eng.process(ev("A", 2, "a"))
    assert [(type(m).__name__, m.key()) for m in out] == \
        [("Match", frozenset({("a", "a"), ("b", "b")}))]
    assert eng.stats()["out_of_order"] == 1


def test_events_later_than_the_threshold_go_to_the_late_output():
    eng = Engine(disorder=DisorderSettings(max_slack=3))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 10", name="q")
    eng.process(ev("B", 10, "b"))
    assert eng.process(ev("A", 5, "a")) == []
    late = eng.take_late()
    assert [(x.event.id, x.source) for x in late] == [("a", "default")]
    assert "above the threshold 3" in late[0].reason and late[0].score == 5
    record = late[0].to_dict()
    assert record["late"] is True and record["event"]["id"] == "a"
    assert eng.stats()["late_events"] == 1 and eng.take_late() == []


def test_threshold_adapts_to_the_average_out_of_order_score():
    """theta = alpha x average score of the stream's out-of-order events (alpha 2.5)."""
    eng = Engine(disorder=DisorderSettings(alpha=2.5))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 100", name="q")
    ts = 0
    for k in range(40):                       # every 4th event 2 behind the clock
        ts += 1
        eng.process(ev("A", ts, f"x{k}"))
        if k % 4 == 3:
            eng.process(ev("A", ts - 2, f"y{k}"))
    s = eng.stats()["disorder"]
    stream = s["streams"]["default/A"]
    assert stream["average_score"] == pytest.approx(2.0)
    assert stream["threshold"] == pytest.approx(5.0) and s["slack"] == pytest.approx(5.0)
    assert eng.late_events == 0 and stream["out_of_order"] == 10
    eng.process(ev("A", ts - 4, "ok"))        # 4 <= theta 2.5 x 24/11: used
    eng.process(ev("A", ts - 9, "too-late"))  # 9 > theta 2.5 x 33/12: late output
    assert [x.event.id for x in eng.take_late()] == ["too-late"]
    assert eng.late_events == 1


def test_pessimistic_queries_make_events_behind_their_watermark_late():
    """Once a pessimistic query was released up to the watermark, an event before it cannot
    be used exactly any more: it is late, even while the learnt threshold would allow it."""
    eng = Engine()
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 10", name="q", mode="pessimistic")
    eng.process(ev("A", 1, "a"))
    eng.process(ev("B", 5, "b"))
    assert eng.process(ev("A", 3, "late")) == []
    [late] = eng.take_late()
    assert "pessimistic queries reached" in late.reason
    assert eng.stats()["disorder"]["slack"] == pytest.approx(5.0)   # learnt from it
    assert eng.process(ev("A", 5.5, "a2")) == []                     # held (the watermark stays 5)
    out = eng.advance(math.inf)
    assert {m.key() for m in out} == {frozenset({("a", "a"), ("b", "b")})}


def test_sources_have_their_own_statistics():
    eng = Engine(disorder=DisorderSettings(min_slack=3))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 100", name="q")
    eng.process(ev("A", 10, "a"), source="s1")
    eng.process(ev("B", 8, "b"), source="s2")
    streams = eng.stats()["disorder"]["streams"]
    assert streams["s1/A"]["out_of_order"] == 0 and streams["s2/B"]["out_of_order"] == 1
    assert streams["s2/B"]["max_score"] == 2


def test_duplicates_never_produce_a_second_match_or_retraction():
    eng = Engine(disorder=DisorderSettings(min_slack=3, remember_ids=10_000))
    eng.add_query("PATTERN SEQ(A a, ~N n, B b) WITHIN 5", name="q")
    evs = [ev("A", 1, "a"), ev("B", 2, "b"), ev("A", 1, "a"), ev("B", 2, "b")]
    out = [m for e in evs for m in eng.process(e)]
    assert len(out) == 1 and eng.stats()["duplicates"] == 2
    for k in range(3, 5000):                  # far ahead: a and b are evicted
        eng.process(ev("C", k, f"c{k}"))
    assert eng.index.evicted > 0
    assert eng.process(ev("A", 1, "a")) == [] and eng.process(ev("N", 1.5, "n0")) == []
    assert eng.stats()["duplicates"] == 3     # a: remembered; n0: new and late
    assert [x.event.id for x in eng.take_late()] == ["n0"]


def test_mode_is_checked_and_reported():
    eng = Engine()
    with pytest.raises(QueryValidationError, match="unknown disorder mode 'eager'"):
        eng.add_query("PATTERN SEQ(A a, B b) WITHIN 1", mode="eager")
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 1", name="p", mode="pessimistic")
    assert eng.stats()["queries"]["p"]["mode"] == "pessimistic"
    assert Engine().add_query("PATTERN SEQ(A a, B b) WITHIN 1") == "q1"
    with pytest.raises(CepError, match="alpha"):
        DisorderSettings(alpha=0)


def test_snapshot_keeps_held_triggers_and_disorder_state():
    eng = Engine(disorder=DisorderSettings(min_slack=2))
    eng.add_query("PATTERN SEQ(A a, B b) WITHIN 10", name="q", mode="pessimistic")
    eng.process(ev("A", 1, "a"))
    eng.process(ev("B", 2, "b"))
    copy = Engine.restore(eng.snapshot())
    assert copy.stats()["disorder"]["watermark"] == 0.0
    assert [m.key() for m in copy.process(ev("C", 5, "c"))] == \
        [frozenset({("a", "a"), ("b", "b")})]


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(qpe=query_and_stream(), data=st.data())
def test_adaptive_threshold_result_equals_in_order_result_of_the_events_used(qpe, data):
    """No minimum slack: the threshold is learnt and some events are late. The final result
    equals the in-order result over the events that were not late (precision = recall = 1
    for the events within the threshold); late events are all reported."""
    query, params, events = qpe
    query = dataclasses.replace(query, strategy=data.draw(st.sampled_from(A.STRATEGIES)))
    arrivals = disorder(data, events, 6.0)
    note(f"{query_text(query)}\n{events_text(events)}\narrivals: {[e.id for e in arrivals]}")
    for mode in MODES:
        eng = Engine(disorder=DisorderSettings(alpha=data.draw(st.sampled_from([1.0, 2.5]))))
        eng.add_query(query, name="q", params=params or None, mode=mode)
        out, late = [], []
        for e in arrivals:
            out += eng.process(e)
            late += eng.take_late()
        out += eng.advance(math.inf)
        late_ids = {x.event.id for x in late}
        assert len(late) == eng.late_events      # (a late event sent twice is reported twice)
        hypothesis.event("late events" if late else "no late event")
        used = [e for e in events if e.id not in late_ids]
        got, retractions, problems = final_keys(out)
        assert not problems, (mode, problems)
        assert got == oracle_matches(query, used, params), mode
        assert mode == "optimistic" or retractions == 0


def test_watermarks_and_settings_must_be_numbers():
    """Issue 13: non-finite and non-numeric values are refused where they enter the engine;
    ``inf`` stays the end of the stream."""
    eng = Engine()
    eng.add_query("PATTERN SEQ(A a, ~N n) WITHIN 5", name="q")
    eng.process(ev("A", 1, "a"))
    before = eng.stats()["disorder"]["watermark"]
    for bad in (math.nan, "10", None, True):
        with pytest.raises(CepError, match="watermark must be a number"):
            eng.advance(bad)
    assert eng.stats()["disorder"]["watermark"] == before           # unchanged
    assert [m.key() for m in eng.advance(math.inf)] == [frozenset({("a", "a")})]
    for bad in (dict(alpha="2"), dict(alpha=math.inf), dict(min_slack=math.inf),
                dict(min_slack=True), dict(max_slack=math.nan), dict(remember_ids=None)):
        with pytest.raises(CepError, match=next(iter(bad))):
            DisorderSettings(**bad)
