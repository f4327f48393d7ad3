"""``Engine.process_many`` / ``PlannedEngine.process_many`` (what ``raycep local`` and the
partition actors call) give exactly what ``process`` of each event in turn gives: the same
matches, retractions and late events in the same order, the same statistics and the same
buffered events, for random sets of queries together, every strategy and disorder mode,
keyed or not, out-of-order and duplicate input, watermarks, and eviction at any point."""
from __future__ import annotations

import dataclasses
import math
from unittest import mock

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
from raycep.cep.event import Event
from raycep.cep.lang import ast as A
from raycep.cep.match import Retraction
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.disorder import DisorderSettings
from raycep.planner.local import PlannedEngine

from strategies import events_text, queries, query_and_stream, query_text
from test_disorder import disorder, max_delay_of

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def record(out) -> tuple:
    return ("retract" if isinstance(out, Retraction) else "match", out.to_dict())


def state(eng: Engine) -> tuple:
    stats = eng.stats()
    return (stats, sorted((e.type, e.ts, e.id, str(e.key)) for e in eng.index.events()),
            eng.clock, eng.disorder.watermark,
            [(x.event.id, x.reason, x.score) for x in eng.take_late()])


def draw_setup(data, keyed: bool):
    query, params, events = data.draw(query_and_stream(keyed=keyed), label="query, stream")
    setup = [(dataclasses.replace(query, strategy=data.draw(st.sampled_from(A.STRATEGIES),
                                                          label="strategy")),
              params, data.draw(st.sampled_from(["optimistic", "pessimistic"]), label="mode"))]
    if data.draw(st.booleans(), label="second query?"):
        q2, p2 = data.draw(queries(allow_kleene=False), label="second query")
        setup.append((q2, p2, data.draw(st.sampled_from(["optimistic", "pessimistic"]),
                                        label="mode 2")))
    max_delay = max_delay_of(data, query, params)
    arrivals = disorder(data, events, max_delay)
    n = len(arrivals)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6), label="cuts")))
    marks = set(data.draw(st.lists(st.integers(0, len(cuts)), max_size=3), label="marks"))
    evict_every = data.draw(st.sampled_from([2, 3, 5, 4096]), label="EVICT_EVERY")
    note(f"{[query_text(q) for q, _, _ in setup]}\nmodes={[m for _, _, m in setup]}\n"
         f"arrivals:\n{events_text(arrivals)}\ncuts={cuts} marks={marks} "
         f"evict_every={evict_every}")
    return setup, arrivals, cuts, marks, max_delay, evict_every


def chunks(arrivals, cuts):
    bounds = [0, *cuts, len(arrivals)]
    return [arrivals[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), keyed=st.booleans())
def test_process_many_equals_process_of_each_event(data, keyed):
    setup, arrivals, cuts, marks, max_delay, evict_every = draw_setup(data, keyed)
    results = []
    with mock.patch.object(raycep.cep.runtime.engine, "EVICT_EVERY", evict_every):
        for many in (False, True, "columns"):
            eng = Engine(key_attr="k" if keyed else None,
                         disorder=DisorderSettings(min_slack=max_delay))
            for k, (q, p, mode) in enumerate(setup):
                eng.add_query(q, name=f"q{k}", params=p or None, mode=mode)
            out = []
            for c, chunk in enumerate(chunks(arrivals, cuts)):
                if c in marks and chunk:
                    out += eng.advance(min(e.ts for e in chunk) - 0.5)
                if many == "columns":
                    out += eng.process_columns(ColumnBatch.from_events(chunk))
                elif many:
                    out += eng.process_many(tuple(chunk) if c % 2 else chunk)
                else:
                    for ev in chunk:
                        out += eng.process(ev)
            mid = state(eng)
            out += eng.advance(math.inf)
            results.append(([record(x) for x in out], mid, state(eng)))
    for other in results[1:]:
        assert results[0][1] == other[1]
        assert results[0][2] == other[2]
        assert results[0][0] == other[0]


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_planned_process_many_replans_at_the_same_events(data):
    setup, arrivals, cuts, _, _, _ = draw_setup(data, keyed=False)
    check_every = data.draw(st.integers(1, 7), label="check_every")
    results = []
    for many in (False, True, "columns"):
        eng = PlannedEngine(Engine(), check_every=check_every)
        for k, (q, p, _) in enumerate(setup):
            eng.add_query(q, name=f"q{k}", params=p or None, planner="adaptive:GREEDY")
        out = []
        for chunk in chunks(arrivals, cuts):
            if many == "columns":
                out += eng.process_columns(ColumnBatch.from_events(chunk))
            elif many:
                out += eng.process_many(chunk)
            else:
                for ev in chunk:
                    out += eng.process(ev)
        out += eng.advance(math.inf)
        results.append(([record(x) for x in out], eng.history, eng.rates.rates(),
                         eng._seen))
    assert results[0] == results[1] == results[2]


def test_a_run_of_non_trigger_events_is_indexed_in_bulk_and_triggers_still_match():
    eng = Engine()
    eng.add_query("PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 10 seconds")
    events = [Event("A", float(t), {"x": t}, id=f"a{t}") for t in range(1, 6)]
    events.append(Event("B", 6.0, {"x": 3}, id="b6"))
    out = eng.process_many(events)
    assert sorted(m.bindings["a"].id for m in out) == ["a1", "a2"]
    assert eng.clock == 6.0 and eng.events == 6
    assert eng.disorder.streams[("default", "A")].events == 5
    assert eng.disorder.streams[("default", "A")].max_ts == 5.0


class _NaiveRates:
    """The rate buckets closed one at a time (the reference for RateTracker)."""

    def __init__(self, horizon=60.0, buckets=12):
        self.width, self.buckets = horizon / buckets, buckets
        self.start, self.current, self.closed = None, {}, []

    def observe(self, etype, ts):
        if self.start is None:
            self.start = math.floor(ts / self.width) * self.width
        while ts >= self.start + self.width:
            self.closed = (self.closed + [self.current])[-self.buckets:]
            self.current = {}
            self.start += self.width
        self.current[etype] = self.current.get(etype, 0) + 1

    def rates(self):
        counts = self.closed or ([self.current] if self.start is not None else [])
        total: dict = {}
        for c in counts:
            for t, n in c.items():
                total[t] = total.get(t, 0) + n
        return {t: n / (self.width * len(counts)) for t, n in total.items()}


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from("ABC"),
                                st.sampled_from([0, 0.5, 1, 4.9, 5, 7, 60, 65, 1000, -3])),
                      max_size=60),
       cut=st.integers(0, 60), fold_every=st.integers(1, 70))
def test_rates_in_bulk_and_across_long_gaps_equal_bucket_by_bucket(steps, cut, fold_every):
    from raycep.planner.stats import RateTracker
    events, ts = [], 100.0
    for etype, step in steps:
        ts += step
        events.append(Event(etype, ts, {}))
    naive, one = _NaiveRates(), RateTracker(60.0, fold_every=fold_every)
    bulk = RateTracker(60.0, fold_every=fold_every)
    for k, ev in enumerate(events):
        naive.observe(ev.type, ev.ts)
        one.observe(ev.type, ev.ts)
        if k == cut:                     # asking in between changes nothing
            assert one.rates() == naive.rates()
    bulk.observe_many(events[:cut])
    bulk.observe_many(events[cut:])
    assert one.rates() == naive.rates()
    assert bulk.rates() == naive.rates()


def test_the_rate_log_is_folded_into_bucket_counts():
    from raycep.planner.stats import RateTracker
    rates = RateTracker(60.0, fold_every=100)
    rates.observe_many([Event("AB"[i % 2], i * 0.5, {}) for i in range(100_000)])
    assert rates.rates() == {"A": 1.0, "B": 1.0}
    assert len(rates._types) < 100 and len(rates._closed) == 12
