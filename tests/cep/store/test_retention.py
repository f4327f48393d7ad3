"""What the index keeps (issue 33 section 2): only what the registered queries' windows need,
nothing with no query, or the last ``retain`` seconds (``raycep serve --retain``), on every
ingest path: ``process``, ``process_many``, ``process_columns``, a partition actor's encoded
batches, and the cluster through the Python client."""
from __future__ import annotations

import math

import pytest

from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.cep.errors import CepError
from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.disorder import DisorderSettings
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

PAIR = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price WITHIN 2 seconds"


def ticks(n: int, start: float = 0.0, symbols: int = 7) -> list:
    return [Event("Stock", start + i / 100, {"symbol": f"S{i % symbols}",
                                             "price": float(i % 13)}, key=f"S{i % symbols}")
            for i in range(n)]


def feed(engine: Engine, events: list, path: str) -> list:
    if path == "process":
        out = []
        for ev in events:
            out += engine.process(ev)
        return out
    if path == "process_many":
        return engine.process_many(events)
    return engine.process_columns(ColumnBatch.from_events(events))


PATHS = ("process", "process_many", "process_columns")


@pytest.mark.parametrize("path", PATHS)
def test_with_no_query_the_engine_keeps_nothing(path):
    eng = Engine(key_attr="symbol")
    feed(eng, ticks(20_000), path)
    stats = eng.stats()
    # evicted as it goes (at most one eviction interval behind), and nothing after evict()
    assert stats["buffered"] < 4096 + 1 and stats["evicted"] >= 20_000 - 4096
    eng.evict()
    assert eng.stats()["buffered"] == 0 and eng.stats()["evicted"] == 20_000


@pytest.mark.parametrize("path", PATHS)
def test_a_small_window_keeps_about_one_window(path):
    eng = Engine(key_attr="symbol")
    eng.add_query(PAIR, name="pair")
    feed(eng, ticks(20_000), path)
    eng.evict()
    # 2 seconds at 100 events a second, the events at the cutoff included
    assert 200 <= eng.stats()["buffered"] <= 201


@pytest.mark.parametrize("path", PATHS)
def test_retain_keeps_that_much_history_with_no_query(path):
    eng = Engine(key_attr="symbol", retain=5.0)
    feed(eng, ticks(20_000), path)
    eng.evict()
    assert 500 <= eng.stats()["buffered"] <= 501
    # a query's window larger than the retention: the window wins
    eng.add_query(PAIR.replace("2 seconds", "10 seconds"), name="wide")
    feed(eng, ticks(3000, start=200.0), path)
    eng.evict()
    assert 1000 <= eng.stats()["buffered"] <= 1001


def test_retain_must_be_a_finite_number_of_seconds():
    for bad in (-1, math.inf, math.nan, "5", True):
        with pytest.raises(CepError, match="retain"):
            Engine(retain=bad)


def test_a_copy_of_an_evicted_event_is_still_a_duplicate_with_no_query():
    eng = Engine(key_attr="symbol")
    events = ticks(100)
    eng.process_many(events)
    eng.evict()
    assert eng.stats()["buffered"] == 0
    assert eng.process_many([events[-1], events[50]]) == []
    stats = eng.stats()
    assert stats["duplicates"] == 2 and stats["buffered"] == 0 and stats["events"] == 100


def test_the_actor_keeps_nothing_after_each_batch_with_no_query():
    w = PartitionWorker("p0", "symbol", worker=WorkerSettings(outbox=True))
    events = ticks(10_000)
    for i in range(0, len(events), 500):
        ack = w.ingest(encode_batch(events[i:i + 500], "s", f"b{i}"))
        assert ack["events"] == 500
        assert w.stats()["buffered"] == 0            # after every batch, not every 4096
    assert w.stats()["evicted"] == 10_000


def test_with_retention_a_new_query_matches_events_from_before_its_registration():
    """The documented consequence of ``retain``: a query registered later finds the retained
    history, so its first matches may pair events that arrived before it was registered;
    without retention it sees only what arrives after."""
    def first_matches(retain: float) -> list:
        w = PartitionWorker("p0", "symbol", worker=WorkerSettings(retain=retain))
        w.ingest(encode_batch([Event("Stock", 1.0, {"symbol": "X", "price": 1.0}, key="X")],
                              "s", "b1"))
        w.add_query("pair", PAIR)
        ack = w.ingest(encode_batch(
            [Event("Stock", 1.5, {"symbol": "X", "price": 2.0}, key="X")], "s", "b2"))
        return [[e["ts"] for e in m["events"].values()] if isinstance(m["events"], dict)
                else m for m in ack["matches"]]
    assert first_matches(0.0) == []
    found = first_matches(10.0)
    assert len(found) == 1 and sorted(found[0]) == [1.0, 1.5]


def test_the_cluster_with_no_query_buffers_nothing_after_the_stream(tmp_path):
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "r.sqlite"), plan_every=0)
    with InProcessCluster(2, "symbol", settings) as cluster:
        client = connect(cluster.url)
        rows = [{"type": "Stock", "ts": i / 100, "symbol": f"S{i % 50}", "price": 1.0}
                for i in range(20_000)]
        for i in range(0, len(rows), 500):
            client.send(rows[i:i + 500])
        actors = client.stats()["actors"]
        assert sum(a["events"] for a in actors.values()) == 20_000
        assert sum(a["buffered"] for a in actors.values()) == 0
        assert sum(a["evicted"] for a in actors.values()) == 20_000


def test_the_cluster_keeps_the_retention(tmp_path):
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "r.sqlite"), plan_every=0)
    with InProcessCluster(2, "symbol", settings, retain=3.0) as cluster:
        client = connect(cluster.url)
        rows = [{"type": "Stock", "ts": i / 100, "symbol": f"S{i % 50}", "price": 1.0}
                for i in range(5_000)]
        client.send(rows)
        actors = client.stats()["actors"]
        buffered = sum(a["buffered"] for name, a in actors.items() if name != "global")
        assert 300 <= buffered <= 302      # each actor keeps the events at its cutoff
        # a keyless query registered later sees the retention too: the global actor is sent
        # every event while the cluster retains
        assert 300 <= actors["global"]["buffered"] <= 301


# ------------------------------------------------------------ queries registered mid-stream

SEQ_AB = "PATTERN SEQ(A a, B b) WITHIN 10 seconds"


def pairs(out: list, query: str) -> set:
    return {(m.bindings["a"].id, m.bindings["b"].id) for m in out
            if m.query == query and not getattr(m, "retracted", False)}


@pytest.mark.parametrize("path", ["process", "process_many", "process_columns"])
def test_a_query_registered_mid_stream_sees_the_events_after_the_latest_one(path):
    """Whatever another query's window keeps in the index, a query registered when the latest
    event time was T reports only matches of events after T (one engine and a cluster, which
    hold different events, agree on it)."""
    eng = Engine()
    eng.add_query(SEQ_AB, name="old")           # keeps 10 s of A and B events
    early = [Event("A", 1.0, {}, id="a1"), Event("B", 2.0, {}, id="b2")]
    out = feed(eng, early, path)
    eng.add_query(SEQ_AB, name="new")
    late = [Event("A", 3.0, {}, id="a3"), Event("B", 4.0, {}, id="b4")]
    out += feed(eng, late, path) + eng.advance(math.inf)
    assert pairs(out, "old") == {("a1", "b2"), ("a1", "b4"), ("a3", "b4")}
    assert pairs(out, "new") == {("a3", "b4")}


@pytest.mark.parametrize("retain", [0.0, 1.5, 5.0])
def test_with_retention_its_first_matches_reach_back_that_far(retain):
    """``retain`` seconds before the registration are seen too, by matches completed after it
    (a trigger that came before the query is never evaluated for it)."""
    eng = Engine(retain=retain)
    eng.add_query(SEQ_AB, name="old")
    out = eng.process_many([Event("A", 1.0, {}, id="a1"), Event("A", 2.5, {}, id="a25"),
                            Event("B", 3.0, {}, id="b3")])
    eng.add_query(SEQ_AB, name="new")             # latest event time 3.0
    out += eng.process_many([Event("B", 4.0, {}, id="b4")]) + eng.advance(math.inf)
    reach = {"a1": 1.0, "a25": 2.5}
    assert pairs(out, "new") == {(a, "b4") for a, ts in reach.items() if ts > 3.0 - retain}


@pytest.mark.parametrize("sharing", [False, True])
def test_an_out_of_order_event_never_retracts_what_a_new_query_did_not_report(sharing):
    """Regression: a late negated event used to re-evaluate the triggers around it, those
    from before the query's registration included, and retract their matches from the new
    query although it never reported them (with a retention, that reaches back to them)."""
    eng = Engine(disorder=DisorderSettings(min_slack=5.0), sharing=sharing, retain=5.0)
    q = "PATTERN SEQ(A a, ~C c, B b) WITHIN 10 seconds"
    eng.add_query(q, name="old")
    out = eng.process_many([Event("A", 1.0, {}, id="a1"), Event("B", 3.0, {}, id="b3")])
    eng.add_query(q, name="new")
    out += eng.process_many([Event("C", 2.0, {}, id="c2"), Event("A", 3.5, {}, id="a35"),
                             Event("B", 4.0, {}, id="b4")])
    out += eng.advance(math.inf)
    new = [m for m in out if m.query == "new"]
    assert not any(getattr(m, "retracted", False) for m in new), new
    assert pairs(new, "new") == {("a35", "b4")}
    old = [m for m in out if m.query == "old"]
    assert sum(1 for m in old if getattr(m, "retracted", False)) == 1   # a1-b3 was reported


def test_a_producer_carries_the_streams_event_time_to_every_actor():
    """A Producer (the path of raycep demo, pushing to the actors directly) sends each actor
    its part of a slice with the slice's latest event time, and an empty batch to an actor
    none of the slice goes to: a trailing negation on a quiet key is confirmed when the
    stream's time passes its window, as in one engine, not only when that key speaks again."""
    from raycep.actors.handles import LocalHandle
    from raycep.actors.producer import Producer
    from raycep.actors.routing import RoutingTable, partition_of
    workers = [PartitionWorker(f"p{i}", "k") for i in range(2)]
    q = "PATTERN SEQ(A a, ~C c) WHERE [k] WITHIN 5 seconds"
    for w in workers:
        w.add_query("neg", q)
    quiet = next(k for k in "abcdefgh" if partition_of(k, 2) == 0)
    busy = next(k for k in "abcdefgh" if partition_of(k, 2) == 1)
    producer = Producer({i: LocalHandle(w) for i, w in enumerate(workers)},
                        RoutingTable(2, "k"), "test")
    producer.send([Event("A", 1.0, {"k": quiet}, key=quiet)])
    producer.send([Event("B", float(t), {"k": busy}, key=busy) for t in range(2, 10)])
    producer.flush()
    ref = Engine(key_attr="k")
    ref.add_query(q, name="neg")
    want = ref.process_many([Event("A", 1.0, {"k": quiet}, key=quiet)] +
                            [Event("B", float(t), {"k": busy}, key=busy) for t in range(2, 10)])
    assert len(want) == 1                            # released at t = 9 > 1 + 5
    got = workers[0].stats()["queries"]["neg"]["matches"]
    assert got == 1, workers[0].stats()["queries"]["neg"]


def test_groups_survive_a_snapshot_after_a_mid_stream_floor_expired():
    """Regression (hypothesis): a query with a leading negation registered mid-stream forms
    its own group (its floor is in the key); once its floor expired a snapshot restored it
    into the others' group. The snapshot keeps the registration's start: the same groups."""
    q = "PATTERN SEQ(~A n, A b, A c) WITHIN 1 seconds"
    eng = Engine()
    eng.add_query(q, name="v0")
    eng.process_many([Event("A", float(t), {}, id=f"a{t}") for t in range(3)])
    eng.add_query(q, name="v1")
    eng.process_many([Event("A", float(t) / 2, {}, id=f"b{t}") for t in range(6, 40)])
    eng.evict()
    before = sorted(g["queries"] for g in eng.groups())
    assert before == [["v0"], ["v1"]]
    again = Engine.restore(eng.snapshot())
    assert sorted(g["queries"] for g in again.groups()) == before
    late = [Event("A", 20.0 + t / 4, {}, id=f"c{t}") for t in range(8)]
    assert sorted(map(repr, again.process_many(late))) == \
        sorted(map(repr, eng.process_many(late)))
