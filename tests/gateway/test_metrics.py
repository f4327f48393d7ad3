"""GET /metrics (Prometheus text exposition), /healthz and /readyz through real HTTP on an
in-process cluster: the families parsed with prometheus-client's own parser, the counters
against what the client reads and what an Engine finds (issue 37)."""
import math
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from raycep.actors.routing import partition_of
from raycep.cep import Engine
from raycep.cep.match import match_id
from raycep.gateway.client import connect
from raycep.gateway.server.metrics import ACTOR_SERIES, QUERY_COUNTERS

from cluster_helpers import GLOBAL_AC, PAIR, ids_of, make_stream, read_all, send_in_slices

TOKEN = "s3cret"


def _get(url: str, token: str | None = None) -> tuple:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def _samples(text: str) -> dict:
    """{(sample name, sorted label items): value} and the family names."""
    out, families = {}, set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out, families


def test_probes_answer_without_a_token_and_metrics_need_one(make_cluster):
    cluster = make_cluster(token=TOKEN)
    assert _get(cluster.url + "/healthz")[::2] == (200, "ok\n")
    assert _get(cluster.url + "/readyz")[::2] == (200, "ready\n")
    status, _, body = _get(cluster.url + "/metrics")
    assert status == 401 and "token" in body
    assert _get(cluster.url + "/v1/stats")[0] == 401            # the rest still needs it
    status, ctype, _ = _get(cluster.url + "/metrics", TOKEN)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")


def test_health_counts_the_actors_events_and_which_answer(make_cluster, monkeypatch):
    from raycep.cep.io.codec import encode_batch
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    events = make_stream(300, 3, 5, 0.0, gaps=(0.25, 0.5))
    send_in_slices(client, events[:200])
    # a producer (a Spark job) pushes straight to an actor: not through the gateway
    pushed = [e for e in events[200:] if partition_of(e.key, 2) == 0]
    ack = cluster.workers[0].ingest(encode_batch(pushed, "spark", "b1"))
    assert ack["events"] == len(pushed) > 0
    health = client.health()
    assert health["status"] == "ok" and health["actors"] == {"alive": 3, "total": 3}
    assert health["gateway_events"] == 200
    assert health["events"] == 200 + len(pushed)

    def unreachable():
        raise RuntimeError("actor died")
    monkeypatch.setattr(cluster.workers[1], "health", unreachable)
    health = client.health()
    assert health["status"] == "degraded" and health["actors"] == {"alive": 2, "total": 3}


def test_pending_bindings_are_the_partial_work_held(make_cluster):
    """A trailing negation holds bindings until the clock passes their window."""
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register("PATTERN SEQ(A a, B b, ~C c) WHERE [k] WITHIN 5 seconds", name="neg")
    send_in_slices(client, make_stream(200, 8, 5, 0.0, gaps=(0.25, 0.5)))
    held = client.query("neg")["stats"]["pending"]
    got, _ = _samples(_get(cluster.url + "/metrics")[2])
    assert got[("raycep_query_pending_bindings", (("query", "neg"),))] == held > 0
    client.advance(10_000.0)
    got, _ = _samples(_get(cluster.url + "/metrics")[2])
    assert got[("raycep_query_pending_bindings", (("query", "neg"),))] == 0


def test_live_stream_readers_are_counted(make_cluster):
    import threading
    import time
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    stop = threading.Event()

    def follow():
        for _ in connect(cluster.url).subscribe("pair"):
            if stop.is_set():
                return
    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    key = ("raycep_sse_subscribers", (("query", "pair"),))
    deadline = time.monotonic() + 20
    while _samples(_get(cluster.url + "/metrics")[2])[0].get(key) != 1:
        assert time.monotonic() < deadline, "the reader was not counted"
        time.sleep(0.05)
    stop.set()
    client.remove("pair")                 # the stream ends ("end"), the reader leaves
    reader.join(20)
    deadline = time.monotonic() + 20
    while _samples(_get(cluster.url + "/metrics")[2])[0].get(key) != 0:
        assert time.monotonic() < deadline, "the reader was not let go"
        time.sleep(0.05)


def test_metrics_count_what_the_cluster_did(make_cluster):
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    client.register(GLOBAL_AC, name="glob")
    events = make_stream(600, 5, 5, 0.0, gaps=(0.25, 0.5, 1.0))
    send_in_slices(client, events, size=50)
    eng = Engine(key_attr="k")
    eng.add_query(PAIR, name="pair")
    expected = [match_id(m) for ev in events for m in eng.process(ev)]
    read = ids_of(read_all(client, "pair"))
    assert sorted(read) == sorted(expected) and len(read) > 20        # not vacuous
    status, _, text = _get(cluster.url + "/metrics")
    assert status == 200
    got, families = _samples(text)
    # every family the module declares is exposed
    for metric, _, _ in QUERY_COUNTERS:
        assert metric in families, metric
    for metric, _, _, _ in ACTOR_SERIES:
        assert metric in families, metric
    for name in ("raycep_send_stage_seconds", "raycep_http_request_seconds",
                 "raycep_gateway_events", "raycep_store_matches",
                 "raycep_query_evaluated_triggers", "raycep_query_plan_version",
                 "raycep_query_pending_bindings"):
        assert name in families, name
    q = (("query", "pair"),)
    assert got[("raycep_query_matches_total", q)] == len(expected)
    assert got[("raycep_store_matches", q)] == len(read)
    assert got[("raycep_gateway_events_total", ())] == len(events)
    stats = client.stats()
    for label, actor in stats["actors"].items():
        assert got[("raycep_actor_events_total", (("actor", label),))] == actor["events"]
        assert got[("raycep_actor_buffered_events", (("actor", label),))] == actor["buffered"]
    assert sum(v for (name, _), v in got.items() if name == "raycep_actor_events_total") == \
        sum(a["events"] for a in stats["actors"].values()) > 0
    triggers = got[("raycep_query_triggers_total", q)]
    paths = [got[("raycep_query_evaluated_triggers_total", (("path", p), ("query", "pair")))]
             for p in ("bulk", "per_trigger")]
    assert triggers > 0 and sum(paths) == triggers
    # the evaluation-time histogram: cumulative buckets up to +Inf, which holds every call
    buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in got.items()
                     if name == "raycep_query_evaluation_seconds_bucket"
                     and dict(labels)["query"] == "pair")
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and buckets[-1][0] == math.inf
    assert buckets[-1][1] == got[("raycep_query_evaluation_seconds_count", q)] >= 1
    assert got[("raycep_query_evaluation_seconds_sum", q)] > 0
    # events considered and events held in the window: as one engine counts them
    mine = eng.stats()["queries"]["pair"]
    assert got[("raycep_query_events_total", q)] == mine["events"] == sum(
        e.type in ("A", "B") for e in events)
    assert got[("raycep_query_window_events", q)] == mine["window_events"] > 0
    assert got[("raycep_query_plan_switches_total", q)] >= 1       # at least its first plan
    assert got[("raycep_query_info", (("group", "pair"), ("mode", "optimistic"),
                                      ("query", "pair")))] == 1
    sends = math.ceil(len(events) / 50)
    assert 0 < got[("raycep_send_to_readable_seconds_count", ())] <= sends
    assert got[("raycep_send_stage_seconds_count", (("stage", "total"),))] == sends
    assert got[("raycep_http_request_seconds_count",
                (("method", "POST"), ("route", "/v1/events")))] == sends
    # a query with no match yet is there with zero
    assert got[("raycep_query_matches_total", (("query", "glob"),))] >= 0
