"""The cluster on a local Ray (marked ``ray``): RayCluster + Client + the Producer push path
against the in-process ``cep.Engine`` (match ids), runtime query changes, a malformed batch,
a gateway restart, the bearer token and ``raycep demo`` end to end.

One Ray instance serves the whole module (starting Ray takes seconds); each test starts its
own RayCluster, which joins it, and stops it (killing the named actors) before the next.
"""
import json
import math
import pathlib
import threading
import time

import msgpack
import pytest
import ray

from raycep.actors.handles import NAMESPACE, actor_name, named_handles
from raycep.actors.producer import Producer
from raycep.actors.routing import RoutingTable, partition_of
from raycep.cep import Engine, Event
from raycep.cep.errors import AuthenticationError, IngestError, NotFoundError
from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id
from raycep.cep.store.disorder import DisorderSettings
from raycep.gateway import cli
from raycep.gateway.client import Client, connect
from raycep.gateway.runtime import RayCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import (SEQ3, check_concurrent_sends, http, ids_of, make_stream, read_all,
                             send_in_slices, while_it_runs)

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]
WAIT = 90.0

PAIR = "PATTERN SEQ(A a, B b) WHERE [k] AND a.x > b.x WITHIN 5 seconds"
NEG = "PATTERN SEQ(A a, B b, ~C c) WHERE [k] AND a.x < b.x WITHIN 5 seconds"
# no [k]: runs on the global actor, pairs events across keys
GLOBAL_AC = "PATTERN SEQ(A a, C c) WHERE a.x + c.x > 16 WITHIN 2 seconds"
QUERIES = (("seq3", SEQ3), ("neg", NEG), ("glob", GLOBAL_AC))
GLOBAL = {"glob"}


# --------------------------------------------------------------------------- helpers

def stream(n=3000, seed=1, keys=8, t0=0.0):
    return make_stream(n, seed, keys, t0, gaps=(0.1, 0.2, 0.5))


def engine_ids(events, queries, late=()) -> dict:
    """{query: set of match ids} from in-process Engines (keyed queries partitioned by ``k``,
    global ones not); ``late`` holds ``(position, name, text)`` queries added before event
    number ``position``."""
    keyed = Engine(key_attr="k")
    unkeyed = Engine()
    out = {}
    for name, text in queries:
        (unkeyed if name in GLOBAL else keyed).add_query(text, name=name)
        out[name] = set()
    for _, name, _ in late:
        out[name] = set()
    for i, ev in enumerate(events):
        for pos, name, text in late:
            if pos == i:
                keyed.add_query(text, name=name)
        for eng in (keyed, unkeyed):
            for m in eng.process(ev):
                out[m.query].add(match_id(m))
    for eng in (keyed, unkeyed):
        for m in eng.advance(math.inf):
            out[m.query].add(match_id(m))
    return out


def settle(client, expected_counts: dict, timeout=60.0):
    """Wait until every actor outbox is drained into the gateway's store and each query has
    stored at least its expected number of matches (the gateway drains asynchronously).
    Gives up quietly after ``timeout``: the caller's comparison of match ids then shows what
    is missing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(a["outbox"] for a in client.stats()["actors"].values()) and all(
                client.query(q)["matches"]["total"] >= n for q, n in expected_counts.items()):
            return
        time.sleep(0.05)


def producer_for(client, source) -> Producer:
    rt = RoutingTable.from_dict(client.routing())
    return Producer(named_handles(rt), rt, source)


def push(producer, events, size=250) -> dict:
    for i in range(0, len(events), size):
        producer.send(events[i:i + size])
    return producer.flush()


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: where this module's Ray exports its metrics (the actors' ray.util.metrics among them)
METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def ray_session():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             namespace="raycep", _metrics_export_port=METRICS_PORT)
    yield
    ray.shutdown()


@pytest.fixture
def make_cluster(ray_session, tmp_path):
    """Start RayClusters (key attribute ``k``, registry in tmp_path); stopped at teardown,
    after which their actor names are free again."""
    started = []

    def start(partitions=2, disorder=None, **kw):
        kw.setdefault("port", 0)
        kw.setdefault("registry_path", str(tmp_path / "registry.sqlite"))
        kw.setdefault("plan_every", 0.5)
        cluster = RayCluster(partitions, "k", GatewaySettings(**kw), disorder=disorder)
        started.append(cluster)
        cluster.start()
        return cluster
    yield start
    for cluster in started:
        cluster.stop()
    names = [actor_name(t) for t in range(4)] + [actor_name("global"), "raycep-gateway",
                                                  "raycep-planner"]
    for name in names:
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=NAMESPACE)


# --------------------------------------------------------------------------- tests

@pytest.mark.parametrize("partitions", [1, 4])
def test_same_matches_as_the_engine(make_cluster, partitions):
    """First half through the Client (gateway routing), second half through the Producer
    (the Spark push path); every query's match ids equal the in-process engine's."""
    events = stream(3000, seed=7)
    expected = engine_ids(events, QUERIES)
    assert all(len(ids) > 10 for ids in expected.values())
    cluster = make_cluster(partitions)
    client = connect(cluster.url)
    for name, text in QUERIES:
        client.register(text, name=name)
    scopes = {q["id"]: q["scope"] for q in client.queries()}
    assert scopes == {"seq3": "keyed", "neg": "keyed", "glob": "global"}
    half = len(events) // 2
    send_in_slices(client, events[:half])
    producer = producer_for(client, f"test-{partitions}")
    assert producer.routing.global_types == frozenset({"A", "C"})
    ack = push(producer, events[half:])
    assert ack["events"] == len(events) - half and ack["bad_rows"] == []
    assert ack["duplicates"] == 0
    client.advance(max(e.ts for e in events) + 100.0)       # past every window
    settle(client, {q: len(ids) for q, ids in expected.items()})
    for name, ids in expected.items():
        got = ids_of(read_all(client, name))
        assert len(got) == len(set(got)), name
        assert set(got) == ids, name
    actors = client.stats()["actors"]
    per_partition = [actors[str(i)]["events"] for i in range(partitions)]
    assert sum(per_partition) == len(events)
    assert partitions == 1 or sum(n > 0 for n in per_partition) >= 2
    assert actors["global"]["events"] == sum(e.type in "AC" for e in events)
    counts = {}
    for e in events:
        p = partition_of(e.key, partitions)
        counts[p] = counts.get(p, 0) + 1
    assert per_partition == [counts.get(i, 0) for i in range(partitions)]


def test_concurrent_sends_are_answered_after_their_own_matches_are_stored(make_cluster):
    """Through Ray the actors' ingest and drain calls overlap (cluster_helpers)."""
    cluster = make_cluster(disorder=DisorderSettings(min_slack=1e6))
    check_concurrent_sends(connect(cluster.url), PAIR)


def test_add_and_remove_at_runtime_while_events_flow(make_cluster):
    events = stream(3000, seed=11)
    p1, p2 = 1000, 2000
    cluster = make_cluster(2)
    client = connect(cluster.url)
    client.register(SEQ3, name="keep")
    client.register(PAIR, name="gone")
    send_in_slices(client, events[:p1])

    # a query registered midway sees the events that arrive after it
    client.register(NEG, name="late")
    assert push(producer_for(client, "phase2"), events[p1:p2])["events"] == p2 - p1

    # remove "gone" while a producer thread is pushing the last third
    producer = producer_for(client, "phase3")
    pushed, failures = threading.Event(), []

    def run():
        try:
            for i in range(p2, len(events), 100):
                producer.send(events[i:i + 100])
                if i >= p2 + 300:
                    pushed.set()
            producer.flush()
        except Exception as exc:           # reported by the main thread
            failures.append(exc)
            pushed.set()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert pushed.wait(WAIT)
    gone_before = ids_of(read_all(client, "gone"))
    out = client.remove("gone")
    assert out["removed"] is True
    thread.join(WAIT)
    assert not thread.is_alive() and failures == []
    client.advance(max(e.ts for e in events) + 100.0)       # past every window

    expected = engine_ids(events, (("keep", SEQ3), ("gone", PAIR)),
                          late=((p1, "late", NEG),))
    settle(client, {"keep": len(expected["keep"]), "late": len(expected["late"])})
    keep = ids_of(read_all(client, "keep"))
    assert len(keep) == len(set(keep)) and set(keep) == expected["keep"]
    late = ids_of(read_all(client, "late"))
    assert late and len(late) == len(set(late)) and set(late) == expected["late"]
    # every late match was completed by an event that arrived after the registration
    assert all(max(ev["ts"] for ev in m["events"].values()) > events[p1 - 1].ts
               for m in read_all(client, "late"))
    assert gone_before and set(gone_before) <= expected["gone"]
    assert [q["id"] for q in client.queries()] == ["keep", "late"]
    with pytest.raises(NotFoundError):
        client.matches("gone")
    for actor in client.stats()["actors"].values():
        assert "gone" not in actor["plans"]


def ray_samples(name: str) -> dict:
    """``{labels without Ray's own: value}`` of the samples named ``name`` that Ray's
    metrics agent exports now (an empty dict while it has none or does not answer)."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics",
                                    timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                      if k in ("query", "actor")))
                out[labels] = out.get(labels, 0) + sample.value
    return out


def test_actors_publish_ray_metrics(make_cluster):
    """The partition actors' counts reach Ray's own Prometheus export (ray.util.metrics):
    per query and actor, summing to what the client reads."""
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    events = stream(1500, seed=4)
    send_in_slices(client, events, size=300)
    want = len(read_all(client, "pair"))
    assert want > 10
    deadline = time.monotonic() + WAIT
    while True:
        client.stats()                     # each actor publishes when due (every 5 s)
        got = ray_samples("ray_raycep_query_matches_total")
        pairs = {labels: v for labels, v in got.items() if ("query", "pair") in labels}
        if sum(pairs.values()) == want:
            break
        assert time.monotonic() < deadline, f"Ray's export has {pairs}, the client read {want}"
        time.sleep(1.0)
    assert len(pairs) == 2                 # one series per partition actor
    events_seen = ray_samples("ray_raycep_actor_events_total")
    assert sum(v for labels, v in events_seen.items()
               if dict(labels)["actor"] in ("p0", "p1")) >= len(events) - 300


def test_scale_through_ray_moves_the_keys_state_and_keeps_the_matches(make_cluster):
    """2 -> 3 -> 1 partition actors mid-stream, a producer sending through the gateway
    meanwhile: new Ray actors are started and surplus ones stopped; every query's matches
    equal the engine's, each id once (issue 38)."""
    events = stream(3000, seed=21)
    expected = engine_ids(events, QUERIES)
    cluster = make_cluster(2)
    client = connect(cluster.url)
    for name, text in QUERIES:
        client.register(text, name=name)
    send_in_slices(client, events[:1000])
    errors = []

    def produce():
        try:
            send_in_slices(connect(cluster.url), events[1000:2000], size=50)
        except Exception as exc:           # noqa: BLE001 (asserted below)
            errors.append(exc)
    producer = threading.Thread(target=produce)
    producer.start()
    up = client.scale(3)
    producer.join(WAIT)
    assert not errors and up["partitions"] == 3 and up["buffered"] > 0
    assert ray.get_actor(actor_name(2), namespace=NAMESPACE) is not None
    down = client.scale(1)
    assert down["before"] == 3
    for target in (1, 2):                  # stopped
        with pytest.raises(ValueError):
            ray.get_actor(actor_name(target), namespace=NAMESPACE)
    send_in_slices(client, events[2000:])
    client.advance(max(e.ts for e in events) + 100.0)
    settle(client, {q: len(ids) for q, ids in expected.items()})
    for name, ids in expected.items():
        got = ids_of(read_all(client, name))
        assert len(got) == len(set(got)) and set(got) == ids, name
    assert client.routing()["partitions"] == 1


def rescale(client, *steps) -> None:
    for n in steps:
        assert client.scale(n)["partitions"] == n


def same_matches_none_late(client, events, expected: dict) -> dict:
    """After the stream's end: every query's match ids equal ``expected`` (the engine's),
    each once, and no actor counted a late event; the actors' stats."""
    client.advance(max(e.ts for e in events) + 100.0)
    settle(client, {q: len(ids) for q, ids in expected.items()})
    for name, ids in expected.items():
        got = ids_of(read_all(client, name))
        assert len(got) == len(set(got)) and set(got) == ids, name
    actors = client.stats()["actors"]
    assert sum(a.get("late_events", 0) for a in actors.values()) == 0
    return actors


def test_a_direct_producer_follows_re_partitionings_through_ray(make_cluster):
    """A producer pushing straight to the Ray actors (``Producer(named_handles, ...)``, as
    Spark jobs push) while the cluster goes 2 -> 3 -> 1: the actors are sealed at a common
    event time, and what they refuse is routed again for the new layout; every query's
    matches equal the engine's, each id once, no event late (issue 38)."""
    events = stream(4000, seed=23)
    expected = engine_ids(events, QUERIES)
    cluster = make_cluster(2)
    client = connect(cluster.url)
    for name, text in QUERIES:
        client.register(text, name=name)
    reader = connect(cluster.url)
    producer = Producer(named_handles, lambda: RoutingTable.from_dict(reader.routing()),
                        "spark-scale")

    def produce(started):
        for i in range(0, len(events), 40):
            producer.send(events[i:i + 40])
            if i >= 800:
                started.set()
        producer.flush()
    while_it_runs(produce, lambda: rescale(client, 3, 1), WAIT)
    assert producer.events == len(events)
    same_matches_none_late(client, events, expected)


@pytest.mark.parametrize("seed", [29, 31])
def test_a_spark_push_task_follows_re_partitionings_through_ray(make_cluster, seed):
    """The push side of a ``raycep ingest`` task (``spark_ingest.job._pusher``: what each
    Spark task runs on its prepared, time-ordered rows; here without Spark) while the
    cluster goes 2 -> 3 -> 1: the chunks the actors refuse, the rows held and every later
    row are routed for the new layout; every query's matches equal the engine's, each id
    once, no event late (issue 38)."""
    import pyarrow as pa
    from raycep.spark_ingest.columnar import Plan, category_of
    from raycep.spark_ingest.job import IngestSettings, _pusher
    from raycep.spark_ingest.mapping import EventMapping
    events = stream(4000, seed=seed)
    expected = engine_ids(events, QUERIES)
    cluster = make_cluster(2)
    client = connect(cluster.url)
    for name, text in QUERIES:
        client.register(text, name=name)
    table = pa.table({"type": [e.type for e in events], "ts": [e.ts for e in events],
                      "k": [e.attrs["k"] for e in events], "x": [e.attrs["x"] for e in events],
                      "id": [e.id for e in events]})
    rt = RoutingTable.from_dict(client.routing())
    plan = Plan(EventMapping(key_column="k"), {f.name: category_of(f.type)
                                               for f in table.schema},
                rt.partitions, rt.global_types, key_groups=rt.key_groups, epoch=rt.epoch)
    out = []

    def push(started):
        def batches():
            for i, batch in enumerate(table.to_batches(max_chunksize=100)):
                if i == 4:
                    started.set()
                time.sleep(0.06)               # (a task that outlasts the rescales)
                yield plan.prepare(batch)
        out.extend(_pusher("job-s", plan, IngestSettings(batch_size=50, max_in_flight=4,
                                                          source="spark-s"))(batches()))
    while_it_runs(push, lambda: rescale(client, 3, 1), WAIT)
    counts = json.loads(out[-1].column("text")[0].as_py())
    assert counts["rows"] == len(events) and counts["dead"] == 0
    actors = same_matches_none_late(client, events, expected)
    assert sum(a["events"] for t, a in actors.items() if t != "global") == len(events)


def test_malformed_batch_is_rejected_and_the_next_is_processed(make_cluster):
    cluster = make_cluster(2)
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    rt = RoutingTable.from_dict(client.routing())
    handles = named_handles(rt)
    target = partition_of("x", rt.partitions)
    with pytest.raises(IngestError, match="not a msgpack batch"):
        handles[target].get("ingest", b"garbage")
    with pytest.raises(IngestError, match="schema version"):
        handles[target].get("ingest", msgpack.packb(
            {"schema_version": 99, "source": "s", "batch_id": "b0", "rows": []}))
    good = [Event("A", 1.0, {"k": "x", "x": 5}, key="x"),
            Event("B", 2.0, {"k": "x", "x": 1}, key="x")]
    ack = handles[target].get("ingest", encode_batch(good, "s", "b1"))
    assert ack["events"] == 2 and ack["queued"] == 1 and ack["bad_rows"] == []
    settle(client, {"pair": 1})
    got = read_all(client, "pair")
    assert len(got) == 1 and got[0]["events"]["a"]["x"] == 5
    assert client.stats()["actors"][str(target)]["batches"] == 1
    # through the gateway: HTTP 400 naming the problem, then a good batch
    status, _, body = http("POST", cluster.url + "/v1/events", b"garbage",
                               {"Content-Type": "application/msgpack"})
    assert status == 400 and body["error"]["type"] == "IngestError"
    assert "msgpack" in body["error"]["message"]
    ack = client.send([Event("A", 3.0, {"k": "x", "x": 7}, key="x"),
                       Event("B", 4.0, {"k": "x", "x": 2}, key="x")])
    assert ack["events"] == 2 and ack["matches"] >= 1
    assert len(read_all(client, "pair")) > 1


def test_gateway_restart_keeps_queries_and_matching_continues(make_cluster):
    events = stream(2000, seed=13)
    half = len(events) // 2
    queries = (("seq3", SEQ3), ("glob", GLOBAL_AC))
    expected = engine_ids(events, queries)
    cluster = make_cluster(2)
    client = connect(cluster.url)
    for name, text in queries:
        client.register(text, name=name)
    send_in_slices(client, events[:half])
    before = {q: ids_of(read_all(client, q)) for q, _ in queries}
    heads = {q: client.matches(q).head for q, _ in queries}
    assert all(before.values())
    url = cluster.url
    cluster.restart_gateway()
    assert cluster.url == url
    client = connect(cluster.url)
    rows = {q["id"]: q for q in client.queries()}
    assert list(rows) == ["seq3", "glob"]
    assert [rows[q]["scope"] for q in rows] == ["keyed", "global"]
    assert all(q["status"] == "running" for q in rows.values())
    ack = push(producer_for(client, "after-restart"), events[half:])
    assert ack["events"] == len(events) - half
    client.advance(max(e.ts for e in events) + 100.0)       # past every window
    # the actors kept their buffered events, so matches spanning the restart are found
    settle(client, {q: len(expected[q]) - len(before[q]) for q, _ in queries})
    for q, _ in queries:
        after = read_all(client, q)
        assert all(m["cursor"] > heads[q] for m in after)
        assert set(before[q]) | set(ids_of(after)) == expected[q], q
    actors = client.stats()["actors"]
    assert sum(actors[str(i)]["events"] for i in range(2)) == len(events)


def test_bad_token_gets_401(make_cluster):
    cluster = make_cluster(1, token="s3cret")
    url = cluster.url
    status, _, body = http("GET", url + "/v1/queries")
    assert status == 401 and body["error"]["type"] == "AuthenticationError"
    status, _, body = http("POST", url + "/v1/queries",
                               json.dumps({"text": PAIR, "name": "pair"}).encode(),
                               {"Content-Type": "application/json",
                                "Authorization": "Bearer wrong"})
    assert status == 401
    with pytest.raises(AuthenticationError):
        Client(url, token="wrong").register(PAIR, name="pair")
    with pytest.raises(AuthenticationError):
        connect(url)
    good = connect(url, token="s3cret")
    assert good.queries() == []
    assert good.register(PAIR, name="pair") == "pair"
    assert [q["id"] for q in good.queries()] == ["pair"]


def test_demo_end_to_end(ray_session, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "matches.jsonl"
    status = cli.main(["demo", "--out", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    lines = captured.out.splitlines()
    summary = json.loads(lines[-1])
    assert summary["verified"] is True
    assert summary["events"] == 20000 and summary["partitions"] == 2
    assert summary["removed"] == "rally"
    assert set(summary["matches"]) == {"dip_recovery", "rally", "clean_breakout"}
    assert all(n > 0 for n in summary["matches"].values())
    table = [line for line in lines if line.startswith("rally")]
    assert table and "removed" in table[0]
    assert any(line.startswith("match dip_recovery") for line in lines)
    assert "[demo] removed query rally" in captured.err
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {m["query"] for m in written} == {"dip_recovery", "rally", "clean_breakout"}
    assert len(written) == sum(summary["matches"].values())
    # the demo joined this module's Ray and left it running; its actors are gone
    assert ray.is_initialized()
    with pytest.raises(ValueError):
        ray.get_actor("raycep-gateway", namespace=NAMESPACE)


def test_match_flood_and_backpressure_through_ray_reach_the_sink(make_cluster, tmp_path):
    """The whole path on Ray, JSONL sink included: one request completing 122,500 matches
    (more than an outbox's 100,000 limit); then an actor with a small outbox, filled by a
    direct push, refuses the gateway's batch (the gateway drains it and retries) and a
    Producer's (OverloadedError through Ray). Every match reaches the sink exactly once."""
    from raycep.cep.errors import OverloadedError
    sink = tmp_path / "matches.jsonl"
    # drain_every: the background drain stays idle, only requests drain (no race)
    cluster = make_cluster(2, matches_jsonl=str(sink), match_capacity=1000,
                           drain_every=1000.0, plan_every=0)
    client = connect(cluster.url)
    flood_q = "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 1000 seconds"
    client.register(flood_q, name="flood")

    def flood(n, key, t0=0.0):
        return [Event("A", t0 + i, {"k": key}, key=key) for i in range(n)] + \
            [Event("B", t0 + n + i, {"k": key}, key=key) for i in range(n)]

    big = flood(350, "x")
    assert client.send(big)["matches"] == 350 * 350
    assert client.query("flood")["matches"]["total"] == 350 * 350

    rt = RoutingTable.from_dict(client.routing())
    handles = named_handles(rt)
    target = partition_of("y", rt.partitions)
    handles[target].get("set_outbox", True, 5)
    pushed = flood(3, "y", t0=1000.0)    # after x's: event time is the stream's
    assert handles[target].get("ingest", encode_batch(pushed, "spark", "s1"))[
        "outbox"] == 9
    sent = flood(4, "y", t0=1100.0)
    assert client.send(sent)["matches"] == 16 + 12
    assert client.stats()["actors"][str(target)]["refused_batches"] == 1

    more = flood(3, "y", t0=1300.0)
    handles[target].get("ingest", encode_batch(more, "spark", "s2"))
    producer = Producer(handles, rt, "spark-3", retry_for=0.0)
    producer.send(flood(1, "y", t0=1400.0))
    with pytest.raises(OverloadedError, match=r"limit 5\).*still refused after 0 s") as info:
        producer.flush()
    assert "Traceback" not in str(info.value)
    last = flood(1, "y", t0=1500.0)
    client.send(last)                         # refused once, drained, retried
    assert client.stats()["actors"][str(target)]["refused_batches"] == 3

    eng = Engine(key_attr="k")
    eng.add_query(flood_q, name="flood")
    expected = {match_id(m) for ev in big + pushed + sent + more + last
                for m in eng.process(ev)}
    written = [json.loads(line)["id"] for line in sink.read_text().splitlines()]
    assert len(written) == len(set(written)) == len(expected)
    assert set(written) == expected
    assert client.query("flood")["matches"]["total"] == len(expected)


def test_cluster_equals_engine_through_real_ray(ray_session, tmp_path):
    """The standing guard (tests/test_cluster_equals_engine.py) once through real Ray actors
    with planner rounds: variants registered strictest first, other structures (negation,
    global, Kleene), queries added and removed mid-stream, batches of several sizes from two
    concurrent producers, the cluster re-partitioned twice; every query's final matches equal
    one Engine's (each query alone)."""
    from types import SimpleNamespace
    from raycep.cep.lang.parser import parse_query
    from test_cluster_equals_engine import _through, check, engine_outputs
    from test_sharing import Member
    events = make_stream(900, 11, 6, 0.0, gaps=(0.1, 0.25, 0.5))
    texts = [(f"v{j}", f"PATTERN SEQ(A a, B b) WHERE [k] AND b.x > a.x * {c} WITHIN 4 seconds")
             for j, c in enumerate((1.5, 1.2, 1.0, 0.8, 0.6))]
    texts += [("neg", NEG), ("glob", GLOBAL_AC),
              ("kl", "PATTERN SEQ(A a, B+ b[], C c) WHERE [k] AND b[i].x >= a.x "
                     "WITHIN 2 seconds")]
    members = [Member(name, parse_query(text), {}, None, "optimistic") for name, text in texts]
    for m, (added, removed) in zip(members, [(0, None), (0, 600), (300, None), (0, None),
                                             (450, None), (0, None), (150, 750), (0, None)]):
        m.added, m.removed = added, removed
    case = SimpleNamespace(events=events, arrivals=events, keyed=True, members=members,
                           cuts=[], slack=max(e.ts for e in events) + 1.0,
                           order=list(range(len(members))), batches=[7, 50, 1, 23],
                           producers=2, partitions=2, seed=3, restore_at=None, retain=0.0,
                           tables=True,   # batches as Arrow tables: columns to the actors
                           # re-partitioned during phase 1 (to 3 actors) and before phase 4
                           # (to 1), planner rounds going on (issue 38)
                           rescales=[(1, 3, True), (4, 1, False)])
    from raycep.cep.store.disorder import DisorderSettings
    cluster = RayCluster(2, "k", GatewaySettings(port=0, plan_every=0.5,
                                                 registry_path=str(tmp_path / "r.sqlite")),
                         disorder=DisorderSettings(min_slack=case.slack))
    try:
        cluster.start()
        got = _through(cluster, case)
    finally:
        cluster.stop()
    want = engine_outputs(case)
    check(case, got, want)
    assert sum(len(v) for v in got.values()) > 100
