"""A batch that completes a six-figure number of matches, and backpressure (no Ray).

Every match a batch completes reaches the gateway's store and its JSONL sink exactly once; an
actor whose match outbox is over its limit refuses new batches before changing anything, the
gateway drains it and asks again (or answers 503 OverloadedError naming the limit), and a
Producer sends refused batches again in their order. The Ray version of the flood is in
test_cluster_ray.py.
"""
import json
import math

import orjson
import pytest

from raycep.actors.handles import LocalHandle
from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.actors.producer import Producer
from raycep.actors.routing import GLOBAL, RoutingTable
from raycep.cep import Engine, Event
from raycep.cep.errors import OverloadedError
from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id
from raycep.gateway.client import connect

from cluster_helpers import http, make_stream

FLOOD = "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 1000 seconds"
PAIR = "PATTERN SEQ(A a, B b) WHERE [k] AND a.x > b.x WITHIN 5 seconds"


def flood(n: int, key: str = "x", t0: float = 0.0) -> list:
    """``n`` A events then ``n`` B events of one key: n * n matches of FLOOD."""
    return [Event("A", t0 + i, {"k": key}, key=key) for i in range(n)] + \
        [Event("B", t0 + n + i, {"k": key}, key=key) for i in range(n)]


def engine_ids(events, text) -> list:
    eng = Engine(key_attr="k")
    eng.add_query(text, name="q")
    out = [match_id(m) for ev in events for m in eng.process(ev)]
    return out + [match_id(m) for m in eng.advance(math.inf)]


def sink_ids(path) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["id"] for line in f]


def test_a_flood_batch_reaches_the_store_and_the_sink_exactly_once(make_cluster, tmp_path):
    """350 A then 350 B in one request: 122,500 matches, more than an outbox's limit
    (100,000); all of them are acknowledged, stored (counted) and in the sink once."""
    sink = tmp_path / "matches.jsonl"
    cluster = make_cluster(2, matches_jsonl=str(sink), match_capacity=1000)
    client = connect(cluster.url)
    client.register(FLOOD, name="q")
    events = flood(350)
    expected = engine_ids(events, FLOOD)
    assert len(expected) == 122_500
    ack = client.send(events)
    assert ack["matches"] == len(expected) and ack["truncated_triggers"] == 0
    # the reply comes when every match is in the store and the sink
    store = client.query("q")["matches"]
    assert store["total"] == len(expected) and store["stored"] == 1000
    got = sink_ids(sink)
    assert len(got) == len(set(got)) == len(expected) and set(got) == set(expected)
    actors = client.stats()["actors"].values()
    assert all(a["outbox"] == 0 and a["refused_batches"] == 0 for a in actors)


def _fill_outbox(worker, n=3, t0=0.0, batch="spark-1"):
    """Push a batch straight to an actor (as a Spark job does): n * n matches queued."""
    return worker.ingest(encode_batch(flood(n, t0=t0), "spark", batch))


def test_the_gateway_drains_a_refusing_actor_and_retries(make_cluster, tmp_path):
    sink = tmp_path / "matches.jsonl"
    # drain_every: the background drain sleeps, only the gateway's ingest drains
    cluster = make_cluster(1, matches_jsonl=str(sink), drain_every=1000.0)
    client = connect(cluster.url)
    client.register(FLOOD, name="q")
    worker = cluster.workers[0]
    worker.set_outbox(True, capacity=5)
    pushed = flood(3)
    assert _fill_outbox(worker)["outbox"] == 9
    sent = flood(4, t0=100.0)
    ack = client.send(sent)
    assert ack["events"] == 8 and ack["matches"] == 16 + 12   # 4 x 4, and 4 B x 3 old A
    stats = client.stats()["actors"]["0"]
    assert stats["refused_batches"] == 1 and stats["outbox"] == 0
    expected = engine_ids(pushed + sent, FLOOD)
    got = sink_ids(sink)
    assert len(got) == len(set(got)) == len(expected) == 9 + 28
    assert set(got) == set(expected)


def test_a_refused_request_gets_503_naming_the_limit_and_changes_nothing(make_cluster,
                                                                         tmp_path):
    cluster = make_cluster(1, drain_every=1000.0, overload_wait=0.0)
    client = connect(cluster.url)
    client.register(FLOOD, name="q")
    worker = cluster.workers[0]
    worker.set_outbox(True, capacity=5)
    _fill_outbox(worker)
    before = client.stats()["actors"]["0"]
    with pytest.raises(OverloadedError, match=r"partition p0: .*9 undelivered .*limit 5"):
        client.send(flood(2, t0=100.0))
    status, _, body = http("POST", cluster.url + "/v1/events",
                           json.dumps({"events": [{"type": "A", "ts": 200.0, "k": "x"}]})
                           .encode(), {"Content-Type": "application/json"})
    assert status == 503 and body["error"]["type"] == "OverloadedError"
    assert "limit 5" in body["error"]["message"] and "again" in body["error"]["message"]
    after = client.stats()["actors"]["0"]
    assert after.pop("refused_batches") == before.pop("refused_batches") + 2
    assert after == before
    # once the outbox is drained (any drain: here the one of advance) the same events go in
    client.advance(50.0)
    ack = client.send(flood(2, t0=100.0))
    assert ack["events"] == 4 and ack["matches"] == 4 + 6
    assert client.query("q")["matches"]["total"] == 9 + 10


class DrainedActor:
    """A partition actor whose outbox a gateway drains whenever it refuses a batch (so the
    producer's next try finds room), keeping what it drained like the gateway's store."""

    def __init__(self, worker):
        self.worker, self.records, self.ack, self.refusals = worker, [], 0, []

    def ingest(self, data, after=None, clock=None, epoch=None):
        try:
            return self.worker.ingest(data, after, clock, epoch)
        except OverloadedError as exc:
            self.refusals.append(str(exc))
            self.drain()
            raise

    def drain(self):
        while True:
            page = self.worker.drain(self.ack)
            self.records += [orjson.loads(r) for r in page["records"]]
            self.ack = page["last"]
            if not page["pending"]:
                return


def test_the_producer_sends_refused_batches_again_in_order():
    """A small outbox refuses often; the batches in flight behind a refused one are refused
    too (``after``) and sent again in order: no event arrives out of order, every match
    reaches the reader once."""
    events = make_stream(600, seed=3, keys=4, t0=0.0, gaps=(0.25, 0.5))
    worker = PartitionWorker("p0", key_attr="k",
                             worker=WorkerSettings(outbox=True, outbox_capacity=4))
    worker.add_query("q", PAIR)
    actor = DrainedActor(worker)
    handles = {0: LocalHandle(actor),
               GLOBAL: LocalHandle(PartitionWorker(GLOBAL, "k",
                                                   worker=WorkerSettings(outbox=True)))}
    producer = Producer(handles, RoutingTable(1, "k"), "spark", max_in_flight=4)
    for i in range(0, len(events), 20):
        producer.send(events[i:i + 20])
    out = producer.flush()
    actor.drain()
    assert out["events"] == len(events) and out["refused_batches"] == len(actor.refusals)
    full = [r for r in actor.refusals if "(limit 4)" in r]
    behind = [r for r in actor.refusals if "which this actor has not accepted" in r]
    assert full and behind and len(full) + len(behind) == len(actor.refusals)
    stats = worker.stats()
    assert stats["events"] == len(events) and stats["batches"] == len(events) // 20
    assert stats["out_of_order"] == 0 and stats["late_events"] == 0
    got = [r["id"] for r in actor.records]
    expected = engine_ids(events, PAIR)
    assert len(got) == len(set(got)) and set(got) == set(expected)
    assert out["matches"] == len(expected)


def test_the_producer_gives_up_after_retry_for_with_the_overloaded_error():
    worker = PartitionWorker("p0", key_attr="k",
                             worker=WorkerSettings(outbox=True, outbox_capacity=2))
    worker.add_query("q", FLOOD)
    handles = {0: LocalHandle(worker),
               GLOBAL: LocalHandle(PartitionWorker(GLOBAL, "k",
                                                   worker=WorkerSettings(outbox=True)))}
    producer = Producer(handles, RoutingTable(1, "k"), "spark", retry_for=0.0)
    producer.send(flood(2))                             # 4 matches: accepted, never drained
    producer.send(flood(1, t0=10.0))
    with pytest.raises(OverloadedError, match=r"limit 2.*still refused after 0 s"):
        producer.flush()
    assert worker.stats()["events"] == 4


def test_the_gateway_sets_the_actors_outbox_capacity(make_cluster):
    """``raycep serve --outbox-capacity`` -> GatewaySettings.outbox_capacity -> every actor."""
    cluster = make_cluster(outbox_capacity=7)
    actors = connect(cluster.url).stats()["actors"]
    assert {a["outbox_capacity"] for a in actors.values()} == {7}
    assert len(actors) == 3                       # two partitions and the global actor
