"""``raycep scale`` / ``Client.scale`` / ``POST /v1/scale`` on an in-process cluster (issue
38): the partition actors re-partitioned mid-stream (2 -> 3 -> 1), also while a producer
sends, with checkpoints; the matches equal one engine's and every match id is read once;
the state of the keys moved with their key groups; bad requests are 400s."""
from __future__ import annotations

import asyncio
import math
import random
import threading
import time

import pytest

from raycep.actors.handles import Done, LocalHandle
from raycep.actors.recovery import CheckpointSettings
from raycep.actors.rescale import moved_groups
from raycep.actors.routing import partition_of
from raycep.cep.errors import IngestError
from raycep.cep.runtime.engine import Engine
from raycep.cep.match import match_id
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import NEG, PAIR, SEQ3, http, make_stream, read_all, while_it_runs

QUERIES = {"pair": PAIR, "neg": NEG, "seq3": SEQ3}


def engine_ids(events) -> dict:
    eng = Engine(key_attr="k")
    for name, text in QUERIES.items():
        eng.add_query(text, name=name)
    found = eng.process_many(list(events)) + eng.advance(math.inf)
    return {name: sorted(match_id(m) for m in found if m.query == name) for name in QUERIES}


def read_ids(client) -> dict:
    out = {}
    for name in QUERIES:
        records = read_all(client, name)
        assert not any(r.get("retracted") for r in records)
        out[name] = sorted(r["id"] for r in records)
    return out


@pytest.fixture
def scaled(tmp_path):
    clusters = []

    def start(partitions=2, checkpoints=False, key_groups=16):
        settings = GatewaySettings(port=0, registry_path=None, plan_every=0,
                                   key_groups=key_groups)
        checkpoint = CheckpointSettings(str(tmp_path / "ckpt"), every_events=50) \
            if checkpoints else None
        cluster = InProcessCluster(partitions, "k", settings, checkpoint=checkpoint)
        clusters.append(cluster)
        cluster.start()
        return cluster
    yield start
    for c in clusters:
        c.stop()


@pytest.mark.parametrize("checkpoints", [False, True])
def test_scale_mid_stream_gives_one_engines_matches(scaled, checkpoints):
    cluster = scaled(checkpoints=checkpoints)
    client = connect(cluster.url)
    for name, text in QUERIES.items():
        client.register(text, name=name)
    events = make_stream(1500, 7, 12, 0.0, gaps=(0.1, 0.2, 0.5))
    thirds = [events[:500], events[500:1000], events[1000:]]

    def send(part):
        for i in range(0, len(part), 50):
            assert client.send(part[i:i + 50])["events"] == len(part[i:i + 50])
    send(thirds[0])
    held = sum(w.engine.events for w in cluster.workers.values())
    up = client.scale(3)
    assert (up["before"], up["partitions"]) == (2, 3) and up["buffered"] > 0
    assert up["moved_key_groups"] == moved_groups(2, 3, 16) > 0
    assert set(up["phases"]) == {"start_actors", "seal", "give", "take", "finish"}
    assert 0 <= up["held_seconds"] <= up["seconds"]     # (new actors start before the hold)
    assert client.routing()["partitions"] == 3 and len(cluster.workers) == 4
    # the keys are where the routing sends them, with their events
    for target in range(3):
        keys = {e.key for e in cluster.workers[target].engine.index.events()}
        assert all(partition_of(k, 3, 16) == target for k in keys)
    assert sum(w.engine.events for w in cluster.workers.values()) == held
    send(thirds[1])
    down = client.scale(1)
    assert (down["before"], down["partitions"]) == (3, 1) and len(cluster.workers) == 2
    send(thirds[2])
    client.advance(1e6, force=True)
    assert client.drained()
    want = engine_ids(events)
    assert read_ids(client) == want and all(len(ids) > 10 for ids in want.values())
    history = client.scaling()
    assert [(r["before"], r["partitions"]) for r in history["history"]] == [(2, 3), (3, 1)]
    if checkpoints:        # a restarted actor comes back with the state it adopted
        before = cluster.workers[0].stats()["queries"]["pair"]["matches"]
        worker = cluster.restart_partition(0)
        assert worker.stats()["queries"]["pair"]["matches"] == before


def test_scale_while_a_producer_sends(scaled):
    cluster = scaled()
    client = connect(cluster.url)
    for name, text in QUERIES.items():
        client.register(text, name=name)
    events = make_stream(2000, 3, 10, 0.0, gaps=(0.1, 0.2, 0.5))
    errors = []

    def produce():
        sender = connect(cluster.url)
        try:
            for i in range(0, len(events), 40):
                sender.send(events[i:i + 40])
        except Exception as exc:           # noqa: BLE001 (reported below)
            errors.append(exc)
    producer = threading.Thread(target=produce)
    producer.start()
    for n in (3, 1, 2):
        client.scale(n)
    producer.join(120)
    assert not errors and not producer.is_alive()
    client.advance(1e6, force=True)
    assert client.drained()
    assert read_ids(client) == engine_ids(events)
    assert client.routing()["partitions"] == 2


def test_queries_changed_during_a_rescale_reach_every_actor(scaled, monkeypatch):
    """A query registered and one removed while the actors are re-partitioned wait for the
    move and then reach every actor, the new ones included."""
    from raycep.actors.routing import GLOBAL
    from raycep.gateway.server.scaling import Scaling
    cluster = scaled()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    client.register(SEQ3, name="seq3")
    events = make_stream(1500, 17, 8, 0.0, gaps=(0.1, 0.2, 0.5))
    client.send(events[:700])
    shares = Scaling._shares
    moving = threading.Event()

    async def slow_shares(self, before, partitions):    # a move that takes a while
        moving.set()
        await asyncio.sleep(0.4)
        return await shares(self, before, partitions)
    monkeypatch.setattr(Scaling, "_shares", slow_shares)
    scaled_to = []
    thread = threading.Thread(target=lambda: scaled_to.append(connect(cluster.url).scale(4)))
    thread.start()
    assert moving.wait(30)
    began = time.perf_counter()
    assert client.register(NEG, name="neg") == "neg"    # held until the move is done
    assert client.remove("seq3")["id"] == "seq3"
    assert time.perf_counter() - began > 0.2
    thread.join(60)
    assert scaled_to[0]["partitions"] == 4
    assert len(cluster.workers) == 5                    # 4 partitions and the global actor
    for target, worker in cluster.workers.items():       # (keyed queries: not on the global)
        assert set(worker.engine.managers) == (set() if target == GLOBAL else {"pair", "neg"})
    client.send(events[700:])
    client.advance(1e6, force=True)
    assert client.drained()
    got = read_all(client, "neg")
    eng = Engine(key_attr="k")
    eng.add_query(NEG, name="neg", since=max(e.ts for e in events[:700]))
    want = eng.process_many(events) + eng.advance(math.inf)
    assert sorted(r["id"] for r in got) == sorted(match_id(m) for m in want)


def test_bad_scale_requests_are_400s(scaled):
    cluster = scaled(key_groups=4)
    client = connect(cluster.url)
    for bad in (0, 5, -1, "2", 2.5, True):
        with pytest.raises(IngestError, match="partitions"):
            client.scale(bad)
    status, _, body = http("POST", cluster.url + "/v1/scale", b'{"partitions": 9}',
                           {"Content-Type": "application/json"})
    assert status == 400 and "at least as many key groups" in body["error"]["message"]
    assert client.scale(2)["moved_key_groups"] == 0          # the same: nothing moves
    assert client.routing()["partitions"] == 2


def test_a_producer_that_routed_for_the_old_layout_is_refused_not_misrouted(scaled):
    """Producers that push to the actors themselves (Spark jobs, ``Producer``) route with
    the table they read; after a rescale an actor refuses a batch routed for another
    layout, and a producer that sees the new table stops with a clear error."""
    from raycep.actors.handles import LocalHandle
    from raycep.actors.producer import Producer
    from raycep.actors.routing import GLOBAL, RoutingTable
    from raycep.cep.errors import ConflictError
    from raycep.cep.io.codec import encode_batch
    cluster = scaled()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    events = make_stream(300, 5, 6, 0.0, gaps=(0.1, 0.5))
    handles = {t: LocalHandle(w) for t, w in cluster.workers.items()}
    producer = Producer(handles, lambda: RoutingTable.from_dict(client.routing()), "spark")
    producer.send(events[:100])
    producer.flush()
    assert client.scale(3)["partitions"] == 3
    assert client.routing()["epoch"] == 1
    with pytest.raises(ConflictError, match="re-partitioned .2 -> 3"):
        producer.send(events[100:200])
    stale = encode_batch(events[100:110], "spark", "late-1")
    with pytest.raises(ConflictError, match="routed for partition layout 0"):
        cluster.workers[0].ingest(stale, None, None, 0)
    assert cluster.workers[0].ingest(stale, None, None, 1)["events"] == 10   # the layout now
    assert set(cluster.workers) == {0, 1, 2, GLOBAL}


class Later(Done):
    """A call started on the gateway's loop from another thread, read later (as a Ray
    ObjectRef is): ``actors.handles.result`` reads it as a Done."""
    __slots__ = ("future",)

    def __init__(self, future):
        self.future = future

    def result(self):
        return self.future.result(60).result()

    def done(self) -> bool:
        return self.future.done()


class LoopHandle(LocalHandle):
    """A worker called as a Ray actor is, from any thread: each call runs on the gateway's
    loop, one at a time and in order per worker, after a random delay (actors far apart
    take a producer's batches at different times), between the gateway's own calls (a
    rescale's steps included); a worker that re-partitioning removed stays reachable, as a
    stopped actor's calls still come."""
    __slots__ = ("cluster", "lock", "rng")
    locks: dict = {}

    def __init__(self, cluster, worker, rng):
        super().__init__(worker)
        self.cluster, self.rng = cluster, rng

    def submit(self, method: str, *args):
        # partition 0 far away: the actors do not take a producer's batches in step
        delay = self.rng.uniform(0.0, 0.008 if self.obj.partition == "p0" else 0.001)

        async def call():
            lock = self.locks.setdefault(id(self.obj), asyncio.Lock())
            async with lock:
                await asyncio.sleep(delay)
                try:
                    return Done(getattr(self.obj, method)(*args))
                except Exception as exc:       # noqa: BLE001 (delivered when read)
                    return Done(error=exc)
        return Later(asyncio.run_coroutine_threadsafe(call(), self.cluster.loop))


@pytest.mark.parametrize("seed, steps, in_flight", [(5, (3, 1, 4, 2), 8), (6, (4, 3, 1), 2),
                                                  (7, (1, 3), 16)])
def test_a_producer_follows_re_partitionings_while_it_sends(scaled, seed, steps, in_flight):
    """A producer pushing straight to the actors (as Spark jobs do) while the cluster is
    re-partitioned from 2 actors through ``steps``: the actors are sealed at a common event time, refuse
    what comes after it until they hold the new layout, and the producer sends what they
    refused again, routed for the new layout: every event once, in order per key, none late;
    the matches equal one engine's."""
    from raycep.actors.producer import Producer
    from raycep.actors.routing import GLOBAL, RoutingTable
    cluster = scaled()
    client = connect(cluster.url)
    for name, text in QUERIES.items():
        client.register(text, name=name)
    events = make_stream(6000, 11, 10, 0.0, gaps=(0.1, 0.2, 0.5))
    reader = connect(cluster.url)

    def handles_for(routing):
        async def workers():
            return dict(cluster.workers)
        found = cluster._run(workers())
        return {t: LoopHandle(cluster, found[t], rng)
                for t in [*range(routing.partitions), GLOBAL]}
    rng = random.Random(seed)
    producer = Producer(handles_for, lambda: RoutingTable.from_dict(reader.routing()),
                        "spark", max_in_flight=in_flight)

    def produce(started):
        for i in range(0, len(events), 20):
            producer.send(events[i:i + 20])
            if i >= len(events) // 5:
                started.set()
        producer.flush()

    def rescale():
        for n in steps:
            assert client.scale(n)["partitions"] == n
    while_it_runs(produce, rescale, 120)
    assert producer.events == len(events)
    assert producer.rerouted > 0                   # (refused by a layout, sent again)
    client.advance(1e6, force=True)
    assert client.drained()
    actors = client.stats()["actors"]
    assert sum(a.get("late_events", 0) for a in actors.values()) == 0
    assert sum(a["events"] for t, a in actors.items() if t != "global") == len(events)
    assert read_ids(client) == engine_ids(events)
    assert [r["partitions"] for r in client.scaling()["history"]] == list(steps)


def test_raycep_scale_command(scaled, capsys):
    from raycep.gateway import cli
    cluster = scaled()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    client.send(make_stream(200, 9, 6, 0.0, gaps=(0.1, 0.5)))
    gw = ["--gateway", cluster.url]
    assert cli.main(["scale", "--partitions", "3", *gw]) == 0
    captured = capsys.readouterr()
    assert "re-partitioning to 3" in captured.err
    assert captured.out.startswith(f"2 -> 3 partition actors: {moved_groups(2, 3, 16)} of 16 "
                                   f"key groups moved with ")
    assert cli.main(["scale", *gw]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "3 partition actors, 16 key groups, routing version 3"
    assert out[1].split() == ["FROM", "TO", "GROUPS", "MOVED", "EVENTS", "MOVED", "SECONDS"]
    assert out[2].split()[:3] == ["2", "3", str(moved_groups(2, 3, 16))]
    assert cli.main(["scale", "--partitions", "17", *gw]) == 2
    assert "at least as many key groups" in capsys.readouterr().err
    assert cli.main(["scale", "--partitions", "0", *gw]) == 2
    err = capsys.readouterr().err
    assert "--partitions must be at least 1, got 0" in err and "re-partitioning" not in err
    assert client.routing()["partitions"] == 3
