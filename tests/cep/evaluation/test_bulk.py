"""Bulk evaluation of a chunk's triggers (raycep.cep.evaluation.bulk, issue 14):
``Engine.process_columns`` with the bulk path on gives exactly what ``Engine.process`` of each event
in turn gives: the same matches in the same order, the same conjunct counters, triggers, matches and
truncated triggers, the same state after; the triggers the columns cannot reproduce exactly (odd
attribute values, ties at a range bound, the per-trigger match cap) are left to the
evaluator. A spy on ``raycep.cep.evaluation.bulk.evaluate`` checks that the bulk path did the work,
so none of these tests can pass with the bulk path switched off or skipped."""
from __future__ import annotations

import inspect
import itertools
import math
import pickle
import random
from unittest import mock

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import raycep.cep.evaluation.bulk
import raycep.cep.runtime.engine
from raycep.cep.evaluation.manager import ManagerSettings
from raycep.cep.event import Event, trusted_event
from raycep.cep.lang import ast as A
from raycep.cep.lang.parser import parse_query
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.index import ALL
from raycep.planner.local import PlannedEngine

from oracle import oracle_matches
from strategies import queries, query_text
from test_columnar_engine import read_as_events, summary_counts
from test_process_many import record, state

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
_evaluate = raycep.cep.evaluation.bulk.evaluate
_SIGNATURE = inspect.signature(_evaluate)
BIG = 2 ** 53 + 1                  # the smallest int float64 does not hold exactly


# --------------------------------------------------------------------------- instruments

class Spy:
    """Wraps ``raycep.cep.evaluation.bulk.evaluate``: per call the query label, partition, triggers
    and per trigger whether bulk evaluation gave its result (False: left to the evaluator). A result
    may still go unused (the engine stops a chunk's bulk run early): ``bulk`` counts what
    evaluate produced."""

    def __init__(self):
        self.calls: list = []

    def __call__(self, *args, **kw):
        got = _evaluate(*args, **kw)
        call = _SIGNATURE.bind(*args, **kw).arguments
        good = [bool(g) for g in got[2]]         # (matches, bounds, good, tallies)
        assert len(good) == len(call["triggers"])
        self.calls.append((call["label"], call["partitions"], list(call["triggers"]), good))
        return got

    def results(self, label: str | None = None) -> list:
        """``[(trigger, produced)]`` of every call (of query ``label``)."""
        return [(t, r) for lab, _, ts, good in self.calls if label in (None, lab)
                for t, r in zip(ts, good)]

    def bulk(self, label: str | None = None) -> int:
        return sum(r for _, r in self.results(label))

    def left(self, label: str | None = None) -> list:
        """The triggers left to the evaluator."""
        return [t for t, r in self.results(label) if not r]

    def good(self, label: str | None = None) -> list:
        """Per trigger (of query ``label``): whether bulk evaluation gave its result."""
        return [r for _, r in self.results(label)]


class patched:
    """BULK_TRIGGERS (1: every chunk with a trigger goes bulk), EVICT_EVERY, and the spy."""

    def __init__(self, bulk_triggers: int = 1, evict_every: int | None = None):
        self.spy = Spy()
        engine = raycep.cep.runtime.engine
        self._patches = [mock.patch.object(engine, "BULK_TRIGGERS", bulk_triggers),
                         mock.patch.object(raycep.cep.evaluation.bulk, "evaluate", self.spy)]
        if evict_every is not None:
            self._patches.append(mock.patch.object(engine, "EVICT_EVERY", evict_every))

    def __enter__(self) -> Spy:
        for p in self._patches:
            p.start()
        return self.spy

    def __exit__(self, *exc):
        for p in reversed(self._patches):
            p.stop()


def make_engine(setup: list, **kw) -> Engine:
    """An Engine with ``setup``: ``[(name, query text, order)]``."""
    eng = Engine(**kw)
    for name, text, order in setup:
        eng.add_query(text, name=name, order=order)
    return eng


def pieces(events: list, size: int) -> list:
    return [events[k:k + size] for k in range(0, len(events), size)]


def by_event(eng, events: list) -> list:
    out = []
    for ev in events:
        out += eng.process(ev)
    return out


def by_columns(eng, chunks: list) -> list:
    out = []
    for chunk in chunks:
        out += eng.process_columns(ColumnBatch.from_events(chunk))
    return out


def outcome(eng, out: list) -> tuple:
    """Everything compared: the matches (records, keys, query names) in order, the state
    (stats with every query's conjunct counters, triggers, matches, truncated triggers;
    buffered events, clock, watermark, late events) and what closing the stream gives.
    Not the shared-prefix learner's counters (``stats()["prefixes"]``): a trigger evaluated
    in bulk does not ask for prefixes (raycep.cep.evaluation.bulk), so which prefixes it comes to
    share and materialise differs; the results and condition counters do not. Nor which path
    each trigger took (``stats()["paths"]``)."""
    mid = _without_prefixes(state(eng))
    end = eng.advance(math.inf)
    return ([record(m) for m in out], [(m.query, m.key()) for m in out], mid,
            [record(m) for m in end], _without_prefixes(state(eng)))


def _without_prefixes(state: tuple) -> tuple:
    stats = dict(state[0])
    del stats["prefixes"], stats["paths"]
    return (stats, *state[1:])


def assert_same(got: tuple, want: tuple):
    assert got[1] == want[1], "matches differ (keys / order)"
    assert got[0] == want[0], "match records differ"
    assert got[2][0]["queries"] == want[2][0]["queries"], "query statistics differ"
    assert got[2] == want[2], "state differs"
    assert got[3:] == want[3:], "closing the stream differs"


def counters(eng) -> dict:
    """``{query: [(conjunct, tested, passed, failed)], ...}`` and triggers / matches."""
    return {name: ([(c["text"], c["tested"], c["passed"], c["failed"])
                    for c in q["conjuncts"]], q["triggers"], q["matches"],
                   q["truncated_triggers"])
            for name, q in eng.stats()["queries"].items()}


def cycle_stream(n: int, types: str = "ABCE", seed: int = 0, start: float = 1.0,
                 keys: int | None = None) -> list:
    """In-order events of ``types`` in turn, one a second, random small attributes."""
    rng = random.Random(seed)
    out = []
    for j in range(n):
        attrs = {"x": rng.randint(0, 5), "y": rng.randint(0, 3),
                 "z": rng.choice([0.5, 1.25, 2.0])}
        key = None
        if keys:
            attrs["k"] = key = rng.randrange(keys)
        out.append(Event(types[j % len(types)], start + j, attrs, key=key, id=f"e{j:05d}"))
    return out


# --------------------------------------------------------------------------- property

VARS = "abcd"
ATTRS = ("x", "y", "z")
OPS = ("<", "<=", ">", ">=")
EXOTIC = (math.inf, -math.inf, 2 ** 53, -2 ** 53, 1e300, -0.0, 0.1)     # exact numbers
ODD = ("p", "", True, False, BIG, -BIG, 2 ** 60, None)                  # None: missing


@st.composite
def bulk_queries(draw):
    """``(text, n_vars, trigger type, eligible)``: SEQ of 2-4 variables of distinct types,
    under any selection strategy (skip-till-any-match more often), with 0-3 order comparisons (variable against variable, or against an int or float
    literal on either side), sometimes a condition checked once its variables are bound
    (``a.x + b.y < 3``, ``a.z * c.x >= b.x``: no filter of one variable) and an optional
    ``[k]``; ``eligible``: no literal beyond 2**53
    (not a float64 number: such a condition is not bulk-evaluable)."""
    n = draw(st.integers(2, 4), label="variables")
    types = draw(st.permutations("ABCD"), label="types")[:n]
    names = VARS[:n]
    eligible = True
    conds = []
    for _ in range(draw(st.integers(0, 3), label="conjuncts")):
        op = draw(st.sampled_from(OPS))
        i = draw(st.sampled_from([n - 1, *range(n)]))         # the trigger's: more often
        left = f"{names[i]}.{draw(st.sampled_from(ATTRS))}"
        if draw(st.booleans()):
            j = draw(st.integers(0, n - 2))
            j += j >= i
            right = f"{names[j]}.{draw(st.sampled_from(ATTRS))}"
        else:
            value = draw(st.one_of(st.integers(-1, 6),
                                   st.sampled_from([-0.5, 0.5, 1.25, 2.5, 3.75, 5.5]),
                                   st.just(BIG)))
            eligible &= value != BIG
            right = repr(value)
            if draw(st.booleans()):
                left, right = right, left
        conds.append(f"{left} {op} {right}")
    if draw(st.integers(0, 2), label="a check?") == 0:   # no filter of one variable: checked
        i, j = draw(st.permutations(range(n)), label="check's variables")[:2]   # once bound
        terms = [f"{names[i]}.{draw(st.sampled_from(ATTRS))}",
                 f"{names[j]}.{draw(st.sampled_from(ATTRS))}"]
        arith = draw(st.sampled_from(["+", "-", "*"]), label="check's arithmetic")
        other = draw(st.one_of(st.integers(-2, 8).map(str),
                               st.sampled_from(VARS[:n]).map(lambda v: f"{v}.x")))
        conds.append(f"{terms[0]} {arith} {terms[1]} {draw(st.sampled_from(OPS))} {other}")
    if draw(st.integers(0, 3)) == 0:
        conds.insert(0, "[k]")
    window = draw(st.sampled_from([0.5, 1, 2, 3, 4.5, 8]), label="window")
    strategy = draw(st.sampled_from(("skip_till_any_match",) * 3 + A.STRATEGIES[1:]),
                    label="strategy")
    text = f"PATTERN SEQ({', '.join(f'{t} {v}' for t, v in zip(types, names))})"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    text += f" WITHIN {window} seconds"
    if strategy != "skip_till_any_match":       # the join's bindings that accepts keeps
        text += f" STRATEGY {strategy}"
    return text, n, types[-1], eligible


def random_stream(seed: int, n: int, ties: float, odd: float, keyed: bool) -> list:
    """``n`` in-order events (ids ascending), a share ``ties`` at the time of the one
    before, each attribute odd (``ODD``) with probability ``odd``, keyed by ``k`` or not."""
    rng = random.Random(seed)
    events, ts = [], 0.0
    for j in range(n):
        ts += 0 if rng.random() < ties else rng.choice([0.5, 1, 1, 1.5, 2])
        attrs = {"x": rng.randint(0, 5), "y": rng.randint(0, 5),
                 "z": rng.choice([0.0, 0.5, 1.25, 2.5, 3.75, 5.0]), "k": rng.randint(0, 2),
                 "s": rng.choice(["p", "q", 1])}
        for a in ATTRS:
            roll = rng.random()
            if roll < odd:
                value = rng.choice(ODD)
                if value is None:
                    del attrs[a]
                else:
                    attrs[a] = value
            elif roll < 0.04:
                attrs[a] = rng.choice(EXOTIC)
        # infinities are no input (Event refuses them): made past the checks
        events.append(trusted_event(rng.choice("AAABBBCCDDE"), ts, attrs,
                                    key=attrs["k"] if keyed else None, id=f"e{j:05d}"))
    return events


def cut(rng: random.Random, events: list) -> list:
    """``events`` in chunks of random sizes, most ties cut out in a chunk of their own (a
    chunk with a tie is processed row by row; the next, in order, in bulk over the tied
    events)."""
    bounds, k = {len(events)}, 0
    while k < len(events):
        bounds.add(k)
        k += rng.choice([1, 3, 8, 20, 20, 50, 200])
    for j in range(1, len(events)):
        if events[j].ts == events[j - 1].ts and rng.random() < 0.8:
            bounds |= {j - 1, j + 1}
    bounds = sorted(b for b in bounds if b <= len(events))
    return [events[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=250, deadline=None, suppress_health_check=SLOW)
@given(query=bulk_queries(), order_seed=st.randoms(use_true_random=False),
       seed=st.integers(0, 2 ** 20), n=st.integers(10, 160),
       ties=st.sampled_from([0, 0, 0.03, 0.15]),
       odd=st.sampled_from([0.0, 0.0, 0.03, 0.15, 0.3]), keyed=st.booleans(),
       cap=st.sampled_from([None, None, None, 1, 2, 5]),
       evict_every=st.sampled_from([3, 17, 4096]))
def test_bulk_equals_process_of_each_event_and_the_oracle(query, order_seed, seed, n, ties,
                                                          odd, keyed, cap, evict_every):
    """Random plain SEQ queries with any static order over random in-order streams (odd
    values, ties, keys, match caps, evictions), in random chunks: the same as event by
    event, and as the brute-force oracle when no trigger is capped."""
    text, n_vars, trigger_type, eligible = query
    order = tuple(order_seed.sample(VARS[:n_vars], n_vars))     # any permutation
    events = random_stream(seed, n, ties, odd, keyed)
    chunks = cut(random.Random(seed + 1), events)
    note(f"{text}\norder={order} keyed={keyed} cap={cap} chunks={[len(c) for c in chunks]}")
    kw = dict(key_attr="k" if keyed else None,
              settings=ManagerSettings(max_matches_per_trigger=cap))
    setup = [("q", text, order)]
    with patched(evict_every=evict_every) as spy:
        ref = make_engine(setup, **kw)
        want = outcome(ref, by_event(ref, events))
        assert not spy.calls                       # process() never goes bulk
        eng = make_engine(setup, **kw)
        got = outcome(eng, by_columns(eng, chunks))
    note(f"bulk results: {spy.bulk()}, left to the evaluator: {len(spy.left())}")
    assert_same(got, want)

    # not vacuous: on a clean stream every trigger of a chunk with rows indexed ahead goes
    # bulk (at least those: the engine may take more chunks in bulk), none is left over
    # (an exotic value, an infinity or a number near 2**53, may make an arithmetic result
    # float64 cannot promise: with arithmetic in the query such a stream is not clean)
    exotic = any(f" {op} " in text for op in "+-*") and \
        any(e.attrs.get(a, 0) in EXOTIC[:5] for e in events for a in ATTRS)
    clean = eligible and not ties and not odd and not exotic and cap is None and \
        ("[k]" not in text or keyed)
    if clean:
        expected = sum(sum(ev.type == trigger_type for ev in c) for c in chunks
                       if any(ev.type != trigger_type for ev in c))
        assert spy.bulk() >= expected and not spy.left()
    if cap is None:                                 # no truncation: the oracle's matches
        keys = [k for _, k in got[1]]
        assert not got[3], "nothing waits for the end of the stream"
        assert len(set(keys)) == len(keys), "a match reported twice"
        assert set(keys) == oracle_matches(parse_query(text), events), "oracle disagrees"


@settings(max_examples=120, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), seed=st.integers(0, 2 ** 20), n=st.integers(10, 160),
       ties=st.sampled_from([0, 0.03, 0.15]), odd=st.sampled_from([0.0, 0.03, 0.15]),
       keyed=st.booleans(), cap=st.sampled_from([None, None, 2]),
       sharing=st.booleans())
def test_bulk_equals_process_for_any_query_with_static_orders(data, seed, n, ties, odd, keyed,
                                                              cap, sharing):
    """Beyond plain SEQ patterns: random queries of the shared generator (AND/OR, negation,
    variables of one type, arithmetic, strings, parameters, equivalences, SLIDE), one or
    two, each with a static order; whatever the bulk path takes must not change a thing."""
    setup = []
    for k in range(data.draw(st.integers(1, 2), label="queries")):
        q, p = data.draw(queries(allow_kleene=False), label=f"query {k}")
        names = [v.name for v in A.event_vars(q.pattern) if not v.negated]
        order = tuple(data.draw(st.permutations(names), label=f"order {k}"))
        setup.append((f"q{k}", q, p or None, order))
    events = random_stream(seed, n, ties, odd, keyed)
    chunks = cut(random.Random(seed + 1), events)
    note("\n".join(f"{query_text(q)} params={p} order={o}" for _, q, p, o in setup))
    outs = []
    with patched() as spy:
        for columns in (False, True):
            eng = Engine(key_attr="k" if keyed else None, sharing=sharing,
                         settings=ManagerSettings(max_matches_per_trigger=cap))
            for name, q, p, order in setup:
                eng.add_query(q, name=name, params=p, order=order)
            outs.append(outcome(eng, by_columns(eng, chunks) if columns
                                else by_event(eng, events)))
    note(f"bulk results: {spy.bulk()}, left to the evaluator: {len(spy.left())}")
    assert_same(outs[1], outs[0])


# --------------------------------------------------------------------------- examples

def test_every_trigger_of_a_clean_stream_is_evaluated_in_bulk():
    """Default BULK_TRIGGERS, chunks of 10, 50 rows or the whole stream: each trigger once in
    bulk, none left over; the same matches, order and counters as event by event."""
    events = cycle_stream(600, "ABCEB")
    setup = [("q", "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND c.y >= 1 AND b.z <= 1.25 "
                   "WITHIN 6 seconds", ("b", "c", "a"))]
    triggers = [ev for ev in events if ev.type == "C"]
    ref = make_engine(setup)
    want = outcome(ref, by_event(ref, events))
    assert len(want[0]) > 10
    assert want[2][0]["queries"]["q"]["triggers"] == len(triggers)
    assert all(c["tested"] > c["passed"] > 0 for c in want[2][0]["queries"]["q"]["conjuncts"])
    for size in (10, 50, len(events)):
        with patched(bulk_triggers=raycep.cep.runtime.engine.BULK_TRIGGERS) as spy:
            eng = make_engine(setup)
            got = outcome(eng, by_columns(eng, pieces(events, size)))
        assert_same(got, want)
        assert spy.bulk("q") == len(triggers) and not spy.left()
        assert [t for t, _ in spy.results()] == triggers


def test_a_step_type_without_events_yet():
    """A step whose type has no buffer yet (no such event so far, or none in the trigger's
    partition) and a condition on it: no match, the same counters, no error."""
    cases = [
        (None, [Event("E", 1.0, {"x": 1}, id="e1"), Event("B", 2.0, {"x": 1}, id="e2"),
                Event("B", 3.0, {"x": 1}, id="e3")], ""),
        ("k", [Event("A", 1.0, {"x": 1, "k": 1}, key=1, id="e1"),
               Event("B", 2.0, {"x": 1, "k": 0}, key=0, id="e2"),
               Event("B", 3.0, {"x": 1, "k": 1}, key=1, id="e3")], "[k] AND ")]
    for key_attr, events, equiv in cases:
        setup = [("q", f"PATTERN SEQ(A a, B b) WHERE {equiv}a.x < 3 WITHIN 5 seconds",
                  ("a", "b"))]
        with patched(bulk_triggers=2) as spy:
            ref = make_engine(setup, key_attr=key_attr)
            want = outcome(ref, by_event(ref, events))
            eng = make_engine(setup, key_attr=key_attr)
            got = outcome(eng, by_columns(eng, [events]))
        assert_same(got, want)
        assert spy.calls


def test_variables_of_one_type_count_like_the_evaluator():
    """SEQ(A a, A b, A c): the bulk path gives the evaluator's matches and its counters."""
    events = [Event("A", 1.0, {"x": 1}, id="e1"), Event("A", 1.5, {"x": 2}, id="e2"),
              Event("A", 2.0, {"x": 3}, id="e3"), Event("E", 2.2, {"x": 0}, id="e4"),
              Event("A", 2.5, {"x": 0}, id="e5")]
    setup = [("q", "PATTERN SEQ(A a, A b, A c) WHERE a.x < b.x WITHIN 1 seconds",
              ("a", "b", "c"))]
    with patched(bulk_triggers=2):
        ref = make_engine(setup)
        want = outcome(ref, by_event(ref, events))
        eng = make_engine(setup)
        got = outcome(eng, by_columns(eng, [events]))
    assert len(want[1]) == 2
    assert_same(got, want)


def test_bulk_path_off_below_bulk_triggers():
    """A chunk with fewer triggers than BULK_TRIGGERS is evaluated trigger by trigger."""
    events = cycle_stream(200, "ABCE")
    setup = [("q", "PATTERN SEQ(A a, C c) WHERE a.x <= c.x WITHIN 5 seconds", ("a", "c"))]
    with patched(bulk_triggers=3) as spy:
        ref = make_engine(setup)
        want = outcome(ref, by_event(ref, events))
        eng = make_engine(setup)
        got = outcome(eng, by_columns(eng, pieces(events, 8)))    # 2 triggers a chunk
    assert_same(got, want)
    assert not spy.calls
    with patched(bulk_triggers=2) as spy:
        eng = make_engine(setup)
        got = outcome(eng, by_columns(eng, pieces(events, 8)))
    assert_same(got, want)
    assert spy.bulk() == 50


def _odd_case(where: str, row: int, attr: str, value):
    """A clean cycle stream with row ``row``'s ``attr`` set to ``value`` (None: removed);
    its other attributes pass every condition, so the evaluator reaches ``attr``."""
    events = cycle_stream(120, "ABCE", seed=3)
    ev = events[row]
    attrs = {**ev.attrs, "x": 5, "y": 3, "z": 2.0}
    if value is None:
        del attrs[attr]
    else:
        attrs[attr] = value
    events[row] = trusted_event(ev.type, ev.ts, attrs, id=ev._id)
    setup = [("q", f"PATTERN SEQ(A a, B b, C c) WHERE {where} WITHIN 6 seconds",
              ("c", "b", "a"))]
    with patched() as spy:
        ref = make_engine(setup)
        want = outcome(ref, by_event(ref, events))
        eng = make_engine(setup)
        got = outcome(eng, by_columns(eng, pieces(events, 40)))
    assert_same(got, want)
    return events, spy, want


def test_odd_values_are_left_to_the_evaluator():
    """A string, a boolean, a missing attribute or an int beyond 2**53, in a candidate or in
    the trigger: those triggers go to the evaluator (which counts the failures), the others
    stay bulk; the failures reach the counters either way. (A boolean candidate counts as not
    passed rather than failed in the evaluator: that holds event by event too.)"""
    for value in ("p", True, False, None, BIG, -BIG):
        # row 41 is a B (candidate of the b step), row 42 a C (a trigger)
        for row, attr, where in ((41, "x", "a.x < b.x AND b.y >= c.y"),
                                 (41, "y", "a.x < b.x AND b.y >= c.y"),
                                 (42, "y", "a.x < b.x AND b.y >= c.y"),
                                 (42, "z", "c.z > 0.5 AND a.x < b.x")):
            events, spy, want = _odd_case(where, row, attr, value)
            left = spy.left()
            assert left, (value, row, attr)
            if row == 42:
                assert left == [events[42]]
            else:
                # the triggers whose window holds row 41 (and only those)
                assert set(t.id for t in left) <= {e.id for e in events
                                                   if e.type == "C" and 0 < e.ts - 42 <= 6}
            assert spy.bulk() == 30 - len(left)
            failed = sum(c["failed"] for c in want[2][0]["queries"]["q"]["conjuncts"])
            if value.__class__ is int:          # big ints compare exactly: no failure
                assert failed == 0
            elif value in ("p", None):
                assert failed >= 1


def test_exact_extremes_stay_in_bulk():
    """2**53, infinities and huge floats are exact numbers: still bulk, same results."""
    for value in (2 ** 53, -2 ** 53, math.inf, -math.inf, 1e300, -0.0):
        events, spy, _ = _odd_case("a.x < b.x AND b.y >= c.y", 41, "x", value)
        assert spy.bulk() == 30 and not spy.left()


def test_ties_at_range_bounds_are_left_to_the_evaluator():
    """Events at the same time (ordered by id there) before a chunk in order: a trigger
    whose candidate range has a candidate at a bound's time goes to the evaluator, for
    every plan order and either arrival order of the tied events; the matches that need the
    id order are found (A then B at one time), and only those (B then A)."""
    tail = [Event(t, ts, {"x": x}, id=f"e{k + 10:04d}") for k, (t, ts, x) in enumerate(
        [("C", 3.0, 5), ("E", 3.5, 0), ("C", 4.0, 5), ("A", 5.0, 1), ("B", 6.0, 3),
         ("C", 7.0, 9), ("E", 8.0, 0), ("A", 30.0, 1), ("B", 31.0, 2), ("C", 32.0, 3),
         ("C", 33.0, 4)])]
    tied = frozenset({("a", "e0001"), ("b", "e0002"), ("c", "e0010")})
    for first in ("A", "B"):
        a, b = Event("A", 1.0, {"x": 1}), Event("B", 1.0, {"x": 2})
        pair = [a, b] if first == "A" else [b, a]
        head = [Event(e.type, e.ts, e.attrs, id=f"e000{k + 1}") for k, e in enumerate(pair)]
        head.append(Event("A", 2.0, {"x": 0}, id="e0003"))
        for order in itertools.permutations("abc"):
            setup = [("q", "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x WITHIN 4 seconds",
                      order)]
            with patched() as spy:
                ref = make_engine(setup)
                want = outcome(ref, by_event(ref, head + tail))
                eng = make_engine(setup)
                got = outcome(eng, by_columns(eng, [head, tail]))
            assert_same(got, want)
            keys = {k for _, k in want[1]}
            assert (tied in keys) == (first == "A")
            assert keys == oracle_matches(parse_query(setup[0][1]), head + tail)
            left = {t.id for t in spy.left()}
            assert "e0010" in left, order       # B@1 at the bound A@1 (or A@1 at B@1)
            assert {"e0019", "e0020"} <= {t.id for t, r in spy.results() if r}


def test_match_cap_is_left_to_the_evaluator():
    """A trigger that reaches max_matches_per_trigger is evaluated (and counted truncated)
    by the evaluator; the others stay bulk."""
    events = cycle_stream(300, "AAABAE", seed=5)
    setup = [("q", "PATTERN SEQ(A a, B b) WHERE a.x >= b.x WITHIN 6 seconds", ("b", "a"))]
    for cap in (1, 2, 3, 5, 100):
        kw = dict(settings=ManagerSettings(max_matches_per_trigger=cap))
        with patched() as spy:
            ref = make_engine(setup, **kw)
            want = outcome(ref, by_event(ref, events))
            eng = make_engine(setup, **kw)
            got = outcome(eng, by_columns(eng, pieces(events, 25)))
        assert_same(got, want)
        truncated = want[2][0]["queries"]["q"]["truncated_triggers"]
        left = len(spy.left())
        assert left >= truncated
        assert spy.bulk() + left == 50
        if cap <= 3:
            assert truncated > 0 and spy.bulk() > 0
        if cap == 100:
            assert left == 0


def _many(setup: list, events: list, size: int, **kw):
    with patched() as spy:
        ref = make_engine(setup, **kw)
        want = outcome(ref, by_event(ref, events))
        eng = make_engine(setup, **kw)
        got = outcome(eng, by_columns(eng, pieces(events, size)))
    assert_same(got, want)
    return spy, want, eng


QUERY_SET = [
    ("abc", "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.y >= c.y WITHIN 5 seconds",
     ("b", "a", "c")),
    ("ad", "PATTERN SEQ(A a, D d) WHERE a.z > d.z WITHIN 3 seconds", ("d", "a")),
    ("bd", "PATTERN SEQ(B b, D d) WHERE d.x <= 3 AND b.y < 2.5 WITHIN 4 seconds", ("d", "b")),
    # C is another query's trigger type: its rows are not all indexed ahead of the triggers
    ("cd", "PATTERN SEQ(C c, D d) WHERE c.x > d.x WITHIN 2 seconds", ("c", "d")),
]


def test_several_queries_without_sharing():
    events = cycle_stream(800, "ABDCADBE", seed=8)
    spy, want, eng = _many(QUERY_SET, events, 64, sharing=False)
    for name in ("abc", "ad", "bd"):
        assert spy.bulk(name) > 0 and want[2][0]["queries"][name]["matches"] > 0
    assert spy.bulk("ad") == spy.bulk("bd") == sum(ev.type == "D" for ev in events)
    assert spy.bulk("abc") == sum(ev.type == "C" for ev in events)
    assert want[2][0]["queries"]["cd"]["matches"] > 0


def test_several_queries_with_sharing():
    """Sharing on, several evaluators (shared prefixes): the same results; the
    two-variable plans (no prefix to share) go bulk."""
    events = cycle_stream(800, "ABDCADBE", seed=8)
    spy, want, _ = _many(QUERY_SET, events, 64)
    assert spy.bulk("ad") == spy.bulk("bd") == sum(ev.type == "D" for ev in events)
    assert all(q["matches"] > 0 for q in want[2][0]["queries"].values())
    spy, want, _ = _many(QUERY_SET[:1], events, 64)         # alone: no sharing to do
    assert spy.bulk("abc") == sum(ev.type == "C" for ev in events)


def test_query_groups():
    """Sharing on: queries of one shape form a group. Different constants (the group's
    condition holds for the loosest constant, each member's checked after), the same
    constants with different windows, identical queries: per-member matches and statistics
    the same as event by event; the last two go bulk, fanned out to the members."""
    events = cycle_stream(600, "ABDE", seed=9)
    shape = "PATTERN SEQ(A a, B b) WHERE a.x < b.x AND b.y >= {} WITHIN {} seconds"
    constants = [(f"c{c}", shape.format(c, 4), ("b", "a")) for c in (0, 1, 2)]
    windows = [(f"w{w}", shape.replace("<", "<=", 1).format(1, w), ("b", "a"))
               for w in (1, 3, 6)]
    twins = [(f"t{k}", shape.format(2, 5), ("a", "b")) for k in range(2)]
    n_b = sum(ev.type == "B" for ev in events)
    for setup, bulk in ((constants, False), (windows, True), (twins, True)):
        for sharing in (True, False):
            spy, want, eng = _many(setup, events, 50, sharing=sharing)
            stats = want[2][0]["queries"]
            assert all(stats[name]["matches"] > 0 for name, _, _ in setup)
            if sharing:
                assert len(eng.evaluators) == 1
                if bulk:
                    assert spy.bulk() == n_b
            else:
                assert spy.bulk() == n_b * len(setup)
    # groups next to other queries
    spy, want, eng = _many(constants + windows + QUERY_SET[1:3], cycle_stream(600, "ABDCE"), 40)
    assert len(eng.evaluators) == 4 and spy.bulk() > 0


def test_partitioned_queries():
    """Engine(key_attr="k"): ``[k]`` partitions the evaluation (bulk: the keys' buffers
    together, each trigger in its own); a query without ``[k]`` reads all partitions; one with an equivalence on another attribute
    (not a partition) gives the same results too."""
    events = cycle_stream(900, "ABCDE", seed=10, keys=3)
    setup = [("abc", "PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.x < b.x WITHIN 12 seconds",
              ("c", "b", "a")),
             ("bd", "PATTERN SEQ(B b, D d) WHERE [k] AND b.y <= d.y WITHIN 8 seconds",
              ("b", "d")),
             ("ad", "PATTERN SEQ(A a, D d) WHERE a.x > d.x WITHIN 3 seconds", ("d", "a")),
             ("y", "PATTERN SEQ(A a, D d) WHERE [y] AND a.x > d.x WITHIN 6 seconds",
              ("d", "a"))]
    for sharing in (True, False):
        spy, want, _ = _many(setup, events, 45, key_attr="k", sharing=sharing)
        assert {p for lab, ps, _, _ in spy.calls if lab == "bd" for p in ps} == {0, 1, 2}
        assert any(len(ps) > 1 for lab, ps, _, _ in spy.calls if lab == "bd")
        assert {p for lab, ps, _, _ in spy.calls if lab == "ad" for p in ps} == {ALL}
        assert spy.bulk("bd") == spy.bulk("ad") == sum(ev.type == "D" for ev in events)
        if not sharing:             # (with sharing the prefix may be shared instead)
            assert {p for lab, ps, _, _ in spy.calls if lab == "abc" for p in ps} == {0, 1, 2}
            assert spy.bulk("abc") == sum(ev.type == "C" for ev in events)
        assert all(q["matches"] > 0 for q in want[2][0]["queries"].values())
    # only partitioned queries (no all-partitions buffers)
    spy, want, eng = _many(setup[:2], events, 45, key_attr="k", sharing=False)
    assert not eng.index.keep_all and spy.bulk("abc") > 0


def test_planned_engine_with_bulk_replans_at_the_same_events():
    """PlannedEngine: the adaptive planner sets static orders (then bulk applies); the
    conjunct counters it reads are the same, so the plans change at the same events."""
    events = cycle_stream(3000, "ABACBE", seed=12)
    outs = []
    for columns in (False, True):
        with patched() as spy:
            eng = PlannedEngine(Engine(sharing=False), check_every=97)
            eng.add_query("PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.y > c.y "
                          "WITHIN 5 seconds", name="q", planner="adaptive:GREEDY")
            eng.add_query("PATTERN SEQ(B b, E e) WHERE b.x >= e.x WITHIN 2 seconds", name="be",
                          order=("e", "b"))
            out = []
            for chunk in pieces(events, 60):
                out += eng.process_columns(ColumnBatch.from_events(chunk)) if columns \
                    else [m for ev in chunk for m in eng.process(ev)]
            out += eng.advance(math.inf)
        outs.append(([record(m) for m in out], eng.history, eng.engine.stats()["queries"]))
        if columns:
            assert spy.bulk("q") > 0 and spy.bulk("be") > 0
    assert outs[0][0] and outs[0][1]
    assert outs[0] == outs[1]


def test_restore_mid_stream_with_bulk():
    """A snapshot taken between two chunks and restored: the same matches as without the
    restore; the counters after the restore are those of the rest of the stream."""
    events = cycle_stream(700, "ABCDEB", seed=13, keys=2)
    setup = [("abc", "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND c.z >= 1.25 "
                     "WITHIN 6 seconds", ("c", "a", "b")),
             ("bd", "PATTERN SEQ(B b, D d) WHERE [k] AND b.y <= d.y WITHIN 5 seconds",
              ("d", "b"))]
    chunks = pieces(events, 35)
    half = len(chunks) // 2
    kw = dict(key_attr="k", sharing=False)
    with patched() as spy:
        ref = make_engine(setup, **kw)
        want = by_event(ref, [ev for c in chunks[:half] for ev in c])
        at_snapshot = counters(ref)
        want += by_event(ref, [ev for c in chunks[half:] for ev in c]) + ref.advance(math.inf)
        assert not spy.calls
        whole = make_engine(setup, **kw)                    # columns, not restored
        straight = by_columns(whole, chunks) + whole.advance(math.inf)
        eng = make_engine(setup, **kw)
        got = by_columns(eng, chunks[:half])
        assert counters(eng) == at_snapshot
        snap = pickle.loads(pickle.dumps(eng.snapshot()))
        eng = Engine.restore(snap)
        before = spy.bulk()
        got += by_columns(eng, chunks[half:]) + eng.advance(math.inf)
    assert spy.bulk() > before > 0
    assert [record(m) for m in got] == [record(m) for m in want] == \
        [record(m) for m in straight]
    assert counters(whole) == counters(ref)
    final, after = counters(ref), counters(eng)
    for name in final:
        assert after[name][1:] == final[name][1:]           # triggers, matches, truncated
        # conjunct counters are not part of a snapshot: they start at zero after a restore
        assert after[name][0] == [(t, a - a0, b - b0, c - c0) for (t, a, b, c), (_, a0, b0, c0)
                                  in zip(final[name][0], at_snapshot[name][0])]


def test_raycep_local_with_a_forced_order_writes_the_same_bytes(tmp_path, monkeypatch, capsys):
    """``raycep local --order``: a file read in bulk (column batches, bulk evaluation) gives
    byte for byte what the same file read as Events gives."""
    from raycep.cep.io import files
    from raycep.gateway import cli

    rows = ["type,ts,x,y,k"]
    for ev in cycle_stream(3000, "ABCDBE", seed=14):
        rows.append(f"{ev.type},{ev.ts!r},{ev.attrs['x']},{ev.attrs['y']},{ev.attrs['x'] % 2}")
    path = tmp_path / "events.csv"
    path.write_text("\n".join(rows) + "\n")
    queries = tmp_path / "q.sase"
    queries.write_text(
        "NAME abc\nPATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.y > c.y WITHIN 4 seconds;\n"
        "NAME bd\nPATTERN SEQ(B b, D d) WHERE b.x >= d.x AND d.y < 2 WITHIN 3 seconds\n")
    monkeypatch.setattr(files, "ROW_READ_BYTES", 0)                # read in bulk
    outs = []
    for columns in (True, False):
        if not columns:
            read_as_events(monkeypatch)
        out = tmp_path / f"m{columns}.jsonl"
        with patched(bulk_triggers=raycep.cep.runtime.engine.BULK_TRIGGERS) as spy:
            status = cli.main(["local", "--query", str(queries), "--events", str(path),
                               "--out", str(out), "--order", "abc=c,b,a",
                               "--order", "bd=d,b", "--no-sharing"])
        captured = capsys.readouterr()
        assert status == 0, captured.err
        outs.append((out.read_bytes(), summary_counts(captured.out)))
        if columns:
            assert spy.bulk("abc") > 0 and spy.bulk("bd") > 0
        else:
            assert not spy.calls
    assert outs[0][1]["matches"] > 100
    assert outs[0] == outs[1]
