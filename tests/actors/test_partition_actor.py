"""raycep.actors.partition: PartitionWorker in-process, and (marked ray) two partition actors against
the in-process engine."""
import pickle
import random

import msgpack
import orjson
import pytest

from raycep.actors.partition import PartitionWorker, WorkerSettings, partition_actor
from raycep.actors.routing import split_by_partition
from raycep.cep import Engine, Event
from raycep.cep.errors import CepError, IngestError, OverloadedError
from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id

SEQ3 = """PATTERN SEQ(A a, B b, C c)
          WHERE [k] AND a.x < b.x AND b.x > c.x
          WITHIN 10 seconds"""
PAIR = "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 seconds"


def records(page: dict) -> list:
    """The records of a drained page (each a JSON text) as dicts."""
    return [orjson.loads(r) for r in page["records"]]


def stream(n=300, seed=1, keys=4):
    rng = random.Random(seed)
    out, ts = [], 0.0
    for _ in range(n):
        ts += rng.choice([0.5, 1.0, 1.5])
        k = f"k{rng.randrange(keys)}"
        out.append(Event(rng.choice("ABC"), ts, {"x": rng.randint(0, 9), "k": k}, key=k))
    return out


def worker(*queries):
    w = PartitionWorker("p0", key_attr="k")
    for name, text in queries:
        w.add_query(name, text)
    return w


def expected_ids(events, *queries):
    eng = Engine(key_attr="k")
    for name, text in queries:
        eng.add_query(text, name=name)
    out = []
    for e in events:
        out += eng.process(e)
    out += eng.advance(float("inf"))
    return {match_id(m) for m in out}


def test_ingest_returns_matches_with_stable_ids():
    events = stream()
    w = worker(("seq", SEQ3))
    ack = w.ingest(encode_batch(events, "test", "b1"))
    assert ack["batch_id"] == "b1" and ack["events"] == len(events)
    assert ack["bad_rows"] == [] and ack["duplicates"] == 0 and not ack["redelivered"]
    ids = [m["id"] for m in ack["matches"]] + [m["id"] for m in w.advance(float("inf"))]
    assert ids and len(ids) == len(set(ids))
    assert set(ids) == expected_ids(events, ("seq", SEQ3))
    m = ack["matches"][0]
    assert m["query"] == "seq" and list(m["events"]) == ["a", "b", "c"]


def test_column_batches_give_the_records_of_row_batches():
    """Schema 2 (what the Spark job sends) is evaluated from the column batch
    (Engine.process_columns, Events made only for the rows read): the same records, in the
    same order, as the same events sent as rows; batch after batch, with a late row."""
    events = stream(600, seed=4)
    events.insert(400, Event("A", events[390].ts - 0.25, {"x": 9, "k": "k1"}, key="k1"))
    queries = (("seq", SEQ3), ("pair", PAIR))
    got = []
    for version in (1, 2):
        w = worker(*queries)
        out = []
        for b, k in enumerate(range(0, len(events), 150)):
            ack = w.ingest(encode_batch(events[k:k + 150], "t", f"b{b}", schema_version=version))
            assert ack["events"] == len(events[k:k + 150]) and ack["bad_rows"] == []
            out += ack["matches"]
        out += w.advance(float("inf"))
        got.append(out)
    assert len(got[0]) > 50
    assert got[0] == got[1]


def test_malformed_row_is_reported_and_the_rest_processed():
    good = [Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x")]
    rows = [[e.type, e.ts, e.attrs, e.key, e.id] for e in good]
    rows.insert(1, ["A", "not a time", {}, None, None])
    data = msgpack.packb({"schema_version": 1, "source": "s", "batch_id": "b",
                          "rows": rows}, use_bin_type=True)
    w = worker(("pair", PAIR))
    ack = w.ingest(data)
    assert ack["events"] == 2 and len(ack["matches"]) == 1
    assert len(ack["bad_rows"]) == 1 and "row 1" in ack["bad_rows"][0] \
        and "'ts'" in ack["bad_rows"][0]
    assert w.stats()["bad_rows"] == 1


def test_bad_header_raises_and_changes_nothing():
    w = worker(("pair", PAIR))
    with pytest.raises(IngestError):
        w.ingest(b"\xc1 not msgpack")
    with pytest.raises(IngestError):
        w.ingest(msgpack.packb({"schema_version": 99, "source": "s", "batch_id": "b",
                                "rows": []}))
    assert w.stats()["events"] == 0 and w.stats()["batches"] == 0
    ack = w.ingest(encode_batch([Event("A", 1.0, {"k": 1}, key=1),
                                 Event("B", 2.0, {"k": 1}, key=1)], "s", "b"))
    assert ack["events"] == 2 and len(ack["matches"]) == 1


def test_redelivered_batch_gives_no_duplicate_matches():
    events = stream(100)
    w = worker(("seq", SEQ3))
    data = encode_batch(events, "src", "b1")
    first = w.ingest(data)
    again = w.ingest(data)
    assert first["matches"] and again["redelivered"] and again["matches"] == []
    assert w.stats()["events"] == len(events)
    # the same events under a new batch id: the index drops them as duplicates
    other = w.ingest(encode_batch(events, "src", "b2"))
    assert other["matches"] == [] and other["duplicates"] == len(events)


def test_forgotten_batch_ids_are_bounded():
    w = PartitionWorker(worker=WorkerSettings(remember_batches=3))
    for i in range(10):
        w.ingest(encode_batch([], "s", f"b{i}"))
    assert len(w._recent) == 3


def test_set_plan_changes_order_and_version():
    w = worker(("seq", SEQ3))
    assert w.set_plan("seq", ["c", "a", "b"], 5) is True
    manager = w.engine.managers["seq"]
    assert manager.order == ("c", "a", "b") and manager.version == 5
    assert w.stats()["plans"]["seq"] == {"order": ["c", "a", "b"], "version": 5}
    assert w.set_plan("seq", ["a", "b", "c"], 4) is False        # stale plan ignored
    assert manager.order == ("c", "a", "b")
    with pytest.raises(CepError, match="no query named 'nope'"):
        w.set_plan("nope", ["a"], 1)
    # the plan changes the work, never the matches
    events = stream()
    ack = w.ingest(encode_batch(events, "s", "b"))
    got = {m["id"] for m in ack["matches"] + w.advance(float("inf"))}
    assert got == expected_ids(events, ("seq", SEQ3))


def test_remove_query_stops_its_matches_and_keeps_the_others():
    events = stream(200)
    w = worker(("seq", SEQ3), ("pair", PAIR))
    ack = w.ingest(encode_batch(events[:100], "s", "b1"))
    assert {m["query"] for m in ack["matches"]} == {"seq", "pair"}
    w.remove_query("pair")
    ack = w.ingest(encode_batch(events[100:], "s", "b2"))
    assert ack["matches"] and {m["query"] for m in ack["matches"]} == {"seq"}
    assert w.queries() == ["seq"]
    with pytest.raises(CepError):
        w.remove_query("pair")


def test_report_has_the_shape_planner_service_takes():
    from raycep.planner.service import PlannerService
    w = worker(("seq", SEQ3))
    w.ingest(encode_batch(stream(300), "s", "b"))
    rep = w.report()
    entry = rep["seq"]
    assert set(entry) == {"rates", "tested", "passed", "keys"}
    # keys: those with events in the window (the actor evicts after each batch, issue 33)
    assert set(entry["rates"]) == {"A", "B", "C"}
    assert 1 <= entry["keys"] == w.engine.index.partitions() <= 4
    assert entry["tested"][0] > 0 and 0 <= entry["passed"][0] <= entry["tested"][0]
    service = PlannerService()
    service.register("seq", SEQ3, partitioned=True)
    service.report(w.partition, "seq", **entry)
    assert set(service.statistics("seq").rates) == {"A", "B", "C"}
    # counters are deltas since the previous report
    assert all(n == 0 for n in w.report()["seq"]["tested"].values())


@pytest.mark.ray
def test_two_partition_actors_find_the_engine_matches():
    import ray
    events = stream(600, seed=7, keys=6)
    queries = (("seq", SEQ3), ("pair", PAIR))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        Actor = partition_actor(num_cpus=0)
        actors = [Actor.remote(f"p{i}", "k") for i in range(2)]
        ray.get([a.add_query.remote(n, t) for a in actors for n, t in queries])
        got = []
        for b in range(0, len(events), 100):
            parts = split_by_partition(events[b:b + 100], len(actors))
            acks = ray.get([actors[p].ingest.remote(encode_batch(evs, "test", f"{b}-{p}"))
                            for p, evs in parts.items()])
            for ack in acks:
                assert ack["bad_rows"] == []
                got += [m["id"] for m in ack["matches"]]
        for tail in ray.get([a.advance.remote(float("inf")) for a in actors]):
            got += [m["id"] for m in tail]
        stats = ray.get([a.stats.remote() for a in actors])
    finally:
        ray.shutdown()
    assert len(got) == len(set(got))
    assert set(got) == expected_ids(events, *queries)
    assert all(s["events"] > 0 for s in stats)
    assert sum(s["events"] for s in stats) == len(events)


def test_outbox_keeps_matches_until_acknowledged():
    events = stream(300)
    w = PartitionWorker("p0", key_attr="k", worker=WorkerSettings(outbox=True))
    w.add_query("seq", SEQ3)
    ack = w.ingest(encode_batch(events, "s", "b"))
    assert ack["matches"] == [] and ack["queued"] > 0
    first = w.drain(0, limit=5)
    assert len(first["records"]) == 5 and first["pending"] == ack["queued"] - 5
    again = w.drain(0, limit=5)                 # not acknowledged: delivered again
    assert [r["id"] for r in records(again)] == [r["id"] for r in records(first)]
    rest = w.drain(first["last"], limit=10_000)
    ids = [r["id"] for r in records(first) + records(rest)]
    ids += [r["id"] for r in records(w.drain(rest["last"]))]
    w.advance(float("inf"))
    ids += [r["id"] for r in records(w.drain(rest["last"]))]
    assert len(ids) == len(set(ids)) and set(ids) == expected_ids(events, ("seq", SEQ3))


def test_outbox_pages_carry_the_query_and_identity_of_records_made_in_bulk():
    """A drained page names each record's query and identity where the worker made the
    record in bulk (the gateway stores those without reading them), None elsewhere; both
    are what reading the record gives, also for a group's members and after a restore."""
    events = stream(400, seed=3)
    w = PartitionWorker("p0", key_attr="k", worker=WorkerSettings(outbox=True, first_plan=1))
    w.add_query("seq", SEQ3)
    for x in (2, 5, 7):                         # variants: one group, matches in one block
        w.add_query(f"v{x}", PAIR.replace("WITHIN", f"AND a.x < {x} WITHIN"))
    for k in range(0, len(events), 100):
        w.ingest(encode_batch(events[k:k + 100], "s", f"b{k}", 2))
    w.advance(float("inf"))
    page = w.drain(0, limit=100_000)
    assert len(page["records"]) == len(page["queries"]) == len(page["ids"]) > 0
    queries = [page["names"][k] for k in page["queries"]]
    known = 0
    for data, query, ident in zip(page["records"], queries, page["ids"]):
        record = orjson.loads(data)
        if query is not None:
            assert (query, ident) == (record["query"], record["id"])
            known += 1
    assert set(page["names"]) == {"seq", "v2", "v5", "v7"}
    assert known == len(page["records"])       # column batches: every match in bulk
    again = PartitionWorker.restore(w.snapshot())
    restored = again.drain(0, limit=100_000)     # a restored outbox: read at the gateway
    assert restored["records"] == page["records"]
    assert restored["names"] == [None] and set(restored["queries"]) == {0}


def _drain_ids(w, ack=0) -> tuple:
    """(every record id in the outbox after ``ack``, the last sequence number), acknowledged."""
    ids = []
    while True:
        page = w.drain(ack, limit=7)
        ids += [r["id"] for r in records(page)]
        ack = page["last"]
        if not page["pending"]:
            return ids, w.drain(ack, limit=0)["last"]


def test_outbox_never_drops_and_a_full_one_refuses_batches_unchanged(caplog):
    """A batch that arrives below the limit is taken whole (here 4x the limit); the next one
    is refused before anything changes; after a drain the same batch is processed, and every
    match reaches the reader exactly once."""
    events = [Event(t, float(i), {"k": "x"}, key="x") for i, t in enumerate("AAAABBBB")]
    more = [Event("B", 8.0 + i, {"k": "x"}, key="x") for i in range(3)]
    w = PartitionWorker("p0", key_attr="k",
                        worker=WorkerSettings(outbox=True, outbox_capacity=4))
    w.add_query("pair", "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 100 seconds")
    ack = w.ingest(encode_batch(events, "s", "b1"))
    assert ack["queued"] == 16 and ack["outbox"] == 16       # 4 x 4 pairs, none dropped
    before = w.stats()
    batch = encode_batch(more, "s", "b2")
    with pytest.raises(OverloadedError, match=r"partition p0: .*16 undelivered .*limit 4"):
        w.ingest(batch)
    after = w.stats()
    assert after.pop("refused_batches") == before.pop("refused_batches") + 1
    assert after == before                  # events, batches, outbox, query counters ...
    assert "refusing batches" in caplog.text
    ids, last = _drain_ids(w)
    assert len(ids) == 16
    ack = w.ingest(batch)                   # not remembered as seen: processed now
    assert not ack["redelivered"] and ack["events"] == 3 and ack["queued"] == 12
    ids += _drain_ids(w, last)[0]
    assert len(ids) == len(set(ids)) == 28
    assert set(ids) == expected_ids(events + more, ("pair", "PATTERN SEQ(A a, B b) "
                                                            "WHERE [k] WITHIN 100 seconds"))


def test_a_batch_whose_predecessor_was_refused_is_refused_too():
    """``after`` keeps a pipelining sender's order: once batch 2 is refused, batch 3 (sent
    behind it) is refused even when the outbox has room again."""
    w = PartitionWorker("p0", key_attr="k",
                        worker=WorkerSettings(outbox=True, outbox_capacity=1))
    w.add_query("pair", PAIR)
    b = [encode_batch([Event(t, float(i), {"k": "x"}, key="x")], "s", f"b{i}")
         for i, t in enumerate("ABAB")]
    w.ingest(b[0])
    w.ingest(b[1], "b0")                   # A,B: one match queued -> outbox at its limit
    with pytest.raises(OverloadedError, match="limit 1"):
        w.ingest(b[2], "b1")
    _drain_ids(w)
    with pytest.raises(OverloadedError, match="follows batch 'b2', which this actor has "
                                              "not accepted"):
        w.ingest(b[3], "b2")
    assert w.stats()["events"] == 2 and w.stats()["refused_batches"] == 2
    assert w.ingest(b[2], "b1")["events"] == 1
    assert w.ingest(b[3], "b2")["queued"] == 2
    assert w.ingest(b[3], "b2")["redelivered"]


def test_ack_reports_triggers_that_hit_the_match_cap():
    from raycep.cep.evaluation.manager import ManagerSettings
    w = PartitionWorker("p0", key_attr="k", settings=ManagerSettings(max_matches_per_trigger=5))
    w.add_query("pair", "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 100 seconds")
    evs = [Event(t, float(i), {"k": "x"}, key="x") for i, t in enumerate("AAAAAAABB")]
    ack = w.ingest(encode_batch(evs, "s", "b1"))
    assert ack["truncated"] == 2 and len(ack["matches"]) == 10
    assert w.stats()["queries"]["pair"]["truncated_triggers"] == 2


def test_snapshot_restore_continues_with_the_same_matches():
    events = stream(400, seed=5)
    w = PartitionWorker("p0", key_attr="k", worker=WorkerSettings(outbox=True))
    w.add_query("seq", SEQ3)
    w.ingest(encode_batch(events[:200], "s", "b1"))
    snap = w.snapshot()
    clone = PartitionWorker.restore(pickle.loads(pickle.dumps(snap)))
    for x in (w, clone):
        assert x.ingest(encode_batch(events[:200], "s", "b1"))["redelivered"]
        x.ingest(encode_batch(events[200:], "s", "b2"))
        x.advance(float("inf"))
    ids = [{r["id"] for r in records(x.drain(0))} for x in (w, clone)]
    assert ids[0] == ids[1] == expected_ids(events, ("seq", SEQ3))
    assert clone.stats()["events"] == w.stats()["events"] == len(events)


def test_a_snapshot_keeps_the_outbox_and_one_with_sequence_pairs_restores_too():
    """The outbox is saved as its first sequence number and its records (packed natively,
    no pair per record); a snapshot from before, with (seq, record) pairs, restores alike."""
    w = PartitionWorker("p0", key_attr="k", worker=WorkerSettings(outbox=True))
    w.add_query("seq", SEQ3)
    w.ingest(encode_batch(stream(300, seed=3), "s", "b1"))
    assert len(w.drain(0)["records"]) > 5
    w.drain(5)                                    # the first 5 acknowledged
    snap = w.snapshot()
    first, held = snap["outbox"]["first"], snap["outbox"]["records"]
    assert first == 6 and held and len(held) == w.stats()["outbox"]
    pairs = dict(snap, outbox=[(first + k, r) for k, r in enumerate(held)])
    for state in (snap, pairs):
        clone = PartitionWorker.restore(state)
        page = clone.drain(5)
        assert page["records"] == held[:len(page["records"])] and page["last"] == \
            5 + len(page["records"])
