"""Fault injection through the real Ray runtime (marked ``ray``): a partition actor's process
and then the gateway's process are killed with SIGKILL while the client sends the sample
ticks; the cluster comes back by itself (Ray restarts the partition actor, which restores its
checkpoint and replays its log; ``RayCluster.heal`` starts a new gateway, as ``raycep serve``
does every second) and the JSONL sink ends with exactly ``raycep local``'s matches, each once.
"""
import os
import signal
import time

import pytest
import ray

from raycep.actors.recovery import CheckpointSettings
from raycep.gateway.client import connect
from raycep.gateway.runtime import RayCluster
from raycep.gateway.server.service import GatewaySettings

from test_recovery import QUERIES, local_ids, sink_ids, sink_records, tick_rows

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_session():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="raycep")
    yield
    ray.shutdown()


def durable_cluster(tmp_path, address=None):
    """(a 2-partition RayCluster keyed by symbol with checkpoints and a JSONL sink, the sink's
    path): the set-up of every fault-injection test."""
    sink = tmp_path / "matches.jsonl"
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "registry.sqlite"),
                               plan_every=0.5, matches_jsonl=str(sink))
    return RayCluster(2, "symbol", settings, address=address, checkpoint=CheckpointSettings(
        str(tmp_path / "checkpoints"), every_events=2_000)), sink


def test_killed_partition_actor_and_gateway_come_back_without_losing_or_doubling(
        ray_session, tmp_path):
    rows, events = tick_rows()
    cluster, sink = durable_cluster(tmp_path)
    recovery = {}
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        batches = [rows[i:i + 500] for i in range(0, len(rows), 500)]
        for n, batch in enumerate(batches, start=1):
            started = time.monotonic()
            ack = client.send(batch)
            if n == 16:
                recovery["partition"] = time.monotonic() - started
            assert ack["events"] == len(batch) and not ack["bad_rows"]
            if n == 15:
                pid = client.stats()["actors"]["0"]["pid"]
                os.kill(pid, signal.SIGKILL)
            if n == 25:
                os.kill(client.stats()["gateway"]["pid"], signal.SIGKILL)
                killed = time.monotonic()
                while not cluster.heal():                 # raycep serve's loop
                    time.sleep(0.2)
                    assert time.monotonic() - killed < 60, "no new gateway"
                client = connect(cluster.url)
                recovery["gateway"] = time.monotonic() - killed
        client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        client.drained()
        stats = client.stats()["actors"]
    finally:
        cluster.stop()
    print(f"recovery: {recovery}")
    assert stats["0"]["recoveries"] == 1 and stats["0"]["recovery"]["from_checkpoint"]
    assert stats["0"]["pid"] != pid
    assert sink_ids(sink_records(sink)) == local_ids(events)     # == raycep local, each once


def test_a_batch_an_actor_does_not_answer_in_time_raises_unavailable(ray_session):
    """The bulk producers' deadline (actors/producer.py Lane ``wait_for``): an actor that
    does not answer (down and not back) is named as unavailable, not waited for forever."""
    from raycep.actors.handles import RayHandle, actor_class
    from raycep.actors.producer import Lane
    from raycep.cep.errors import UnavailableError

    class Stuck:
        def ingest(self, data, after=None, clock=None):
            time.sleep(30)

    actor = actor_class(Stuck, num_cpus=0).remote()
    try:
        lane = Lane(RayHandle(actor), wait_for=0.5)
        lane.push(b"batch", "b1")
        started = time.monotonic()
        with pytest.raises(UnavailableError, match="did not answer within 0.5 s"):
            lane.flush()
        assert time.monotonic() - started < 20
    finally:
        ray.kill(actor)


def test_the_bulk_producer_rides_over_a_killed_partition_actor(ray_session, tmp_path):
    """The Spark path's producer (actors/producer.py, the demo's and Spark jobs' pusher) calls
    the actors directly: when partition actor 0's process is killed mid-stream, Ray restarts
    the actor and retries the calls made meanwhile on it; batch ids make the retries
    idempotent. The sink ends with exactly raycep local's matches, each once."""
    from raycep.actors.handles import named_handles
    from raycep.actors.producer import Producer
    from raycep.actors.routing import RoutingTable

    _, events = tick_rows()
    cluster, sink = durable_cluster(tmp_path)
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        routing = lambda: RoutingTable.from_dict(client.routing())   # noqa: E731
        producer = Producer(named_handles(routing()), routing, source="spark-kill",
                            max_in_flight=4)
        for n, start in enumerate(range(0, len(events), 500), start=1):
            producer.send(events[start:start + 500])
            if n == 15:
                os.kill(client.stats()["actors"]["0"]["pid"], signal.SIGKILL)
        summary = producer.flush()
        client.advance(max(e.ts for e in events) + 100.0, force=True)
        client.drained()
        stats = client.stats()["actors"]
    finally:
        cluster.stop()
    assert summary["events"] == len(events) and not summary["bad_rows"]
    assert stats["0"]["recoveries"] == 1
    assert sink_ids(sink_records(sink)) == local_ids(events)
