"""A PartitionWorker fed column batches evaluates in bulk and makes its records in bulk
(issue 36): its records are, in order and byte for byte, ``match_json`` of each match (and
``late_record`` of each late event) of one Engine fed the same events one by one.

Without a plan from the planner a query runs a provisional plan (default statistics) from
its registration and one from the worker's own statistics after ``WorkerSettings.first_plan``
rows (planner.local); the reference engine runs the same orders from the same rows, so even
the order of the matches within a trigger is the same. A plan the planner installs
(``set_plan``) replaces the worker's; a query registered with an order, or given one by the
planner before, keeps it.
"""
from __future__ import annotations

import math
import random
from unittest import mock

import orjson
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
from raycep.actors.partition import PartitionWorker, WorkerSettings, late_record
from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch
from raycep.cep.io.output import match_json
from raycep.cep.runtime.engine import Engine
from raycep.planner.local import first_plan, provisional_plan

from test_groups_bulk import SLOW, groups
from test_groups_bulk import stream as group_stream

pytestmark = pytest.mark.filterwarnings("ignore::raycep.cep.runtime.unseen.QueryWarning")
SOURCE = "spark"
DIP = ("PATTERN SEQ(Stock a, Stock b, Stock c) WHERE [symbol] AND b.price < a.price * {d} "
       "AND c.price > b.price * {u} WITHIN 20 seconds")
NEG = ("PATTERN SEQ(Stock a, ~Stock n, Stock b) WHERE [symbol] AND b.price > a.price * {u} "
       "AND n.price > b.price WITHIN 10 seconds")
PAIR = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price * {u} WITHIN {w} seconds"


def variants(n: int, seed: int) -> list:
    """``n`` rules of three shapes differing in constants (benchmarks/bench_variants.py)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        u = round(rng.uniform(1.0, 1.01), 4)
        out.append((f"r{i}", [DIP.format(d=round(rng.uniform(0.985, 0.997), 4), u=u),
                              NEG.format(u=u), PAIR.format(u=u, w=rng.choice([10, 15]))][i % 3]))
    return out


def ticks(n: int, seed: int, symbols: int = 3) -> list:
    rng = random.Random(seed)
    prices = [100.0] * symbols
    out, ts = [], 0.0
    for i in range(n):
        ts = round(ts + rng.choice((0.1, 0.2, 0.5)), 2)
        s = rng.randrange(symbols)
        prices[s] *= 1 + rng.gauss(0, 0.006)
        out.append(Event("Stock", ts, {"symbol": f"S{s}", "price": round(prices[s], 2)},
                         key=f"S{s}", id=f"t{i}"))
    return out


def run_worker(queries: list, batches: list, key, first_plan: int, outbox: bool) -> tuple:
    """``(records as JSON bytes in order, the worker, its provisional orders)``; ``queries``:
    ``(name, text, order)``."""
    w = PartitionWorker("p0", key, worker=WorkerSettings(outbox=outbox, first_plan=first_plan,
                                                         outbox_capacity=10 ** 9))
    for name, text, order in queries:
        w.add_query(name, text, order=order)
    provisional = {name: w.engine.evaluators[name].order for name in w.own_plans}
    got = []
    for k, events in enumerate(batches):
        ack = w.ingest(encode_batch(events, SOURCE, f"b{k}", 2))
        got += [orjson.dumps(r) for r in ack["matches"]]
    got += [orjson.dumps(r) for r in w.advance(math.inf)]
    if outbox:
        got = w.drain(0, 10 ** 9)["records"]
    return got, w, provisional


def run_engine(queries: list, batches: list, key, provisional: dict, plan_at: int | None,
               orders: dict) -> list:
    """What the worker should give: each event processed on its own, the worker's
    ``provisional`` orders (evaluator -> order) from the start and its ``orders`` after
    ``plan_at`` events, an eviction and the late events after each batch."""
    eng = Engine(key)
    for name, text, order in queries:
        eng.add_query(text, name=name, order=order)
    for name, order in provisional.items():
        eng.evaluators[name].set_order(order)
    out, seen, evicted_at = [], 0, None
    for events in batches:
        for ev in events:
            if seen == plan_at:
                for name, order in orders.items():
                    eng.evaluators[name].set_order(order)
            out += [match_json(m) for m in eng.process(ev, SOURCE)]
            seen += 1
        if eng.clock != evicted_at:
            eng.evict()
            evicted_at = eng.clock
        out += [orjson.dumps(late_record(x), default=str) for x in eng.take_late()]
    return out + [match_json(m) for m in eng.advance(math.inf)]


def check(queries: list, events: list, cuts: list, key, first_plan: int, outbox: bool):
    """The worker's records against the reference engine's; returns the worker and its
    records."""
    batches = [events[a:b] for a, b in zip(cuts, cuts[1:])]
    got, w, provisional = run_worker(queries, batches, key, first_plan, outbox)
    orders = {name: w.engine.evaluators[name].order for name in w.own_plans}
    plan_at = first_plan if first_plan and w.own_plans else None
    want = run_engine(queries, batches, key, provisional, plan_at, orders)
    if outbox:
        assert got == want
    else:                     # returned as dicts (made from the records), same content
        assert [orjson.loads(r) for r in got] == [orjson.loads(r) for r in want]
    return w, got


def shuffled(events: list, rng: random.Random, share: float) -> list:
    """``events`` with a ``share`` of them moved back a few places (out of order), now and
    then far back (late)."""
    out = list(events)
    for i in range(len(out)):
        if rng.random() < share:
            j = max(0, i - rng.choice((1, 2, 3, 40)))
            out.insert(j, out.pop(i))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(case=groups(), seed=st.integers(0, 2 ** 16), n=st.integers(20, 160),
       forced=st.booleans(), first_plan=st.sampled_from([0, 1, 7, 30, 200]),
       outbox=st.booleans(), disorder=st.sampled_from([0, 0, 0.05]), data=st.data())
def test_worker_records_equal_the_engine_event_by_event(case, seed, n, forced, first_plan,
                                                        outbox, disorder, data):
    """Random query groups next to an unrelated query, in a given order or planned by the
    worker, over a stream (in order or not) in random column batches."""
    queries, order, keyed = case
    setup = [(name, text, (order if name != "other" else ("q", "p")) if forced else None)
             for name, text in queries]
    events = shuffled(group_stream(seed, n, keyed, 0.1, 0.0), random.Random(seed), disorder)
    cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=5), label="cuts")})
    note("\n".join(f"{name}: {text}" for name, text, _ in setup) + f"\norder={order}")
    with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
        w, _ = check(setup, events, cuts, "k" if keyed else None, first_plan, outbox)
    assert bool(w.own_plans) == (not forced and first_plan > 0)
    assert not w._unplanned or n < first_plan


def test_variant_rules_in_bulk_equal_the_engine():
    """Twelve rules of the benchmark's three shapes (three groups, a negation) over 3,000
    ticks in batches of 500: the first plan after 200 rows, then bulk evaluation and bulk
    records; the same records as one engine event by event."""
    queries = [(name, text, None) for name, text in variants(12, 3)]
    w, _ = check(queries, ticks(3000, 5), list(range(0, 3001, 500)), "symbol", 200, True)
    assert w.own_plans == set(w.engine.evaluators)
    assert all(m.order is not None for m in w.engine.evaluators.values())
    paths = w.engine.paths()
    assert all(p["bulk"] > p["per_trigger"] for p in paths.values())
    assert w.stats()["own_plans"] == sorted(w.engine.evaluators)


def test_variant_rules_out_of_order_give_retractions_and_late_records():
    """The same rules over ticks partly out of order: retractions (a negated event that
    arrives late) and late records come out as the engine gives them, among bulk records
    (of the batches in order: one with a row behind the row before goes row by row)."""
    queries = [(name, text, None) for name, text in variants(12, 3)]
    events = ticks(3000, 5)
    events[1000:1500] = shuffled(events[1000:1500], random.Random(1), 0.05)
    w, got = check(queries, events, list(range(0, 3001, 500)), "symbol", 200, True)
    assert sum(b'"retracted":true' in r for r in got) > 0
    assert sum(b'"late":true' in r for r in got) > 0
    assert sum(p["bulk"] for p in w.engine.paths().values()) > 0


def stock_worker(first_plan: int = 200, **kw) -> PartitionWorker:
    w = PartitionWorker("p0", "symbol", worker=WorkerSettings(first_plan=first_plan, **kw))
    for name, text in variants(3, 1):
        w.add_query(name, text)
    return w


def feed(w: PartitionWorker, events: list, size: int = 100, tag: str = "b") -> None:
    for k in range(0, len(events), size):
        w.ingest(encode_batch(events[k:k + size], SOURCE, f"{tag}{k}", 2))


def test_first_plan_after_its_rows_and_the_planner_replaces_it():
    """A provisional plan (default statistics) from the registration, one from the measured
    statistics when 200 rows were seen (in the middle of a batch), at the version the query
    had; the planner's first plan (version 1) replaces it; a plan older than the current
    one is ignored as before."""
    w = stock_worker()
    events = ticks(400, 2)
    assert w.own_plans == {"r0", "r1", "r2"} and set(w._unplanned) == w.own_plans
    assert all(m.order == provisional_plan(m).order for m in w.engine.managers.values())
    feed(w, events[:150], 150)
    assert set(w._unplanned) == {"r0", "r1", "r2"}
    with mock.patch("raycep.actors.partition.first_plan", wraps=first_plan) as measured:
        feed(w, events[150:300], 150, "c")
    assert measured.call_count == 3 and not w._unplanned
    assert measured.call_args.args[1]["Stock"] > 0                # the measured rates
    assert w.own_plans == {"r0", "r1", "r2"}
    manager = w.engine.managers["r0"]
    own = manager.order
    assert own is not None and manager.version == 1
    other = tuple(reversed(own))
    assert w.set_plan("r0", list(other), 1)
    assert manager.order == other and w.own_plans == {"r1", "r2"}
    assert w.set_plan("r1", None, 2)                    # the planner's Tree-NFA is kept
    feed(w, events[300:], 50, "d")
    assert w.engine.managers["r1"].order is None and w.own_plans == {"r2"}
    assert not w.set_plan("r0", list(own), 0)


def test_no_first_plan_when_off_given_or_decided_by_the_planner():
    """``first_plan=0``: the old behaviour (no plan until the planner's); a query registered
    with an order keeps it; a query the planner planned before its first look is not
    planned again (its provisional plan is replaced)."""
    events = ticks(500, 3)
    off = stock_worker(first_plan=0)
    feed(off, events)
    assert all(m.order is None for m in off.engine.managers.values()) and not off.own_plans
    w = PartitionWorker("p0", "symbol", worker=WorkerSettings())
    w.add_query("given", PAIR.format(u=1.001, w=10), order=("b", "a"))
    w.add_query("planned", DIP.format(d=0.99, u=1.001))
    w.add_query("later", NEG.format(u=1.001))
    assert w.set_plan("planned", None, 1)
    feed(w, events)
    assert w.engine.managers["given"].order == ("b", "a")
    assert w.engine.managers["planned"].order is None
    assert w.own_plans == {"later"} and not w._unplanned


def test_a_query_added_midstream_is_planned_after_its_own_rows():
    """Each query waits ``first_plan`` rows from its registration; a member that joins a
    planned group takes the group's plan; removing a query forgets its wait."""
    events = ticks(900, 4)
    w = stock_worker()
    feed(w, events[:300])
    w.add_query("late", "PATTERN SEQ(Stock a, Stock b, Stock c) WHERE [symbol] AND "
                        "a.price < b.price AND b.price < c.price WITHIN 5 seconds")
    w.add_query("gone", "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND a.price = b.price "
                        "WITHIN 5 seconds")
    w.add_query("member", PAIR.format(u=1.02, w=10))            # joins r2's group
    assert w.engine.managers["member"] is w.engine.managers["r2"]
    w.remove_query("gone")
    assert "late" in w.own_plans and "gone" not in {*w._unplanned, *w.own_plans}
    feed(w, events[300:450], 50, "c")
    assert "late" in w._unplanned
    feed(w, events[450:], 50, "d")
    assert "late" in w.own_plans and not w._unplanned
    assert w.engine.managers["late"].order is not None


def test_the_wait_for_a_first_plan_survives_a_snapshot():
    """``snapshot`` / ``restore`` keep the rows seen, the queries waiting and those planned by
    the worker: the restored worker plans at the same row."""
    events = ticks(400, 6)
    w = stock_worker()
    feed(w, events[:100])
    again = PartitionWorker.restore(w.snapshot())
    assert again._unplanned == w._unplanned and again.own_plans == w.own_plans
    feed(again, events[100:300], 100, "c")
    feed(w, events[100:300], 100, "c")
    assert again.own_plans == w.own_plans == {"r0", "r1", "r2"}
    assert again._unplanned == w._unplanned == {}
    assert {n: m.order for n, m in again.engine.managers.items()} == \
        {n: m.order for n, m in w.engine.managers.items()}
    assert PartitionWorker.restore(again.snapshot()).own_plans == again.own_plans


def test_a_batch_without_a_key_column_is_keyed_by_its_attribute_and_evaluated_in_bulk():
    """A producer's column batch that leaves the key out (the partition key is the
    ``symbol`` attribute): the worker keys the rows by it, evaluates them in bulk per key and
    gives the records of the batch that carries the keys."""
    import pyarrow as pa
    from raycep.cep.io.codec import encode_columns
    events = ticks(3000, 11, symbols=4)
    queries = [(name, text, None) for name, text in variants(3, 5)]

    def run(with_key: bool):
        w = PartitionWorker("p0", "symbol", worker=WorkerSettings(outbox=True,
                                                                  outbox_capacity=10 ** 9))
        for name, text, order in queries:
            w.add_query(name, text, order=order)
        for k in range(0, len(events), 1000):
            part = events[k:k + 1000]
            columns = {"type": [e.type for e in part], "ts": [e.ts for e in part],
                       "id": [e.id for e in part],
                       "symbol": [e.attrs["symbol"] for e in part],
                       "price": [e.attrs["price"] for e in part]}
            if with_key:
                columns["key"] = columns["symbol"]
            w.ingest(encode_columns(pa.table(columns), SOURCE, f"b{k}"))
        w.advance(math.inf)
        return w.drain(0, 10 ** 9)["records"], w.engine.paths()
    keyed, keyed_paths = run(True)
    got, paths = run(False)
    assert got == keyed and len(got) > 10
    assert paths == keyed_paths
    assert all(p["bulk"] > 0 for p in paths.values())
