"""The gateway in one process (no Ray): InProcessCluster + Client over real HTTP on 127.0.0.1.

Everything goes through the public interfaces (Client, raw HTTP, the ``raycep`` CLI); the match
sets are compared with an in-process ``cep.Engine`` run of the same events by match id.
"""
import json
import math
import socket
import threading

import msgpack
import pytest

from raycep.cep import Engine, Event, parse_query
from raycep.cep.errors import (AuthenticationError, ConflictError,
                        NotFoundError, QuerySyntaxError, QueryValidationError,
                        UnavailableError)
from raycep.cep.event import make_event
from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id
from raycep.cep.store.disorder import DisorderSettings
from raycep.gateway import cli
from raycep.gateway.client import Client, connect

from cluster_helpers import (GLOBAL_AC, NEG, PAIR, SEQ3, check_concurrent_sends, http, ids_of,
                             make_stream, read_all, send_in_slices, wait_for)

WAIT = 30.0


# --------------------------------------------------------------------------- helpers

def stream(n=400, seed=1, keys=5, t0=0.0):
    return make_stream(n, seed, keys, t0, gaps=(0.25, 0.5, 1.0))


def engine_ids(events, queries, key_attr="k", late=()) -> dict:
    """{query name: [match ids]} of an in-process Engine over ``events``; ``late`` holds
    ``(position, name, text)`` queries added before event number ``position``."""
    eng = Engine(key_attr=key_attr)
    for name, text in queries:
        eng.add_query(text, name=name)
    out = {name: [] for name, _ in list(queries) + [(n, t) for _, n, t in late]}
    for i, ev in enumerate(events):
        for pos, name, text in late:
            if pos == i:
                eng.add_query(text, name=name)
        for m in eng.process(ev):
            out[m.query].append(match_id(m))
    for m in eng.advance(math.inf):
        out[m.query].append(match_id(m))
    return out


def end_of(events) -> float:
    """A finite end-of-stream watermark: past every window of these tests' queries."""
    return max(e.ts for e in events) + 100.0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- queries

def test_register_ids_list_and_plan(client):
    assert client.register(PAIR, name="pair") == "pair"
    assert client.register("NAME seq3\n" + SEQ3) == "seq3"
    generated = client.register(GLOBAL_AC)
    assert generated.startswith("q") and generated[1:].isdigit()
    rows = {q["id"]: q for q in client.queries()}
    assert list(rows) == ["pair", "seq3", generated]          # registration order
    for qid, scope in (("pair", "keyed"), ("seq3", "keyed"), (generated, "global")):
        q = rows[qid]
        assert q["status"] == "running" and q["scope"] == scope
        assert isinstance(q["plan"]["version"], int) and q["plan"]["version"] >= 1
        assert "order" in q["plan"]
    assert rows["pair"]["text"] == PAIR
    one = client.query("seq3")
    assert one["id"] == "seq3" and one["scope"] == "keyed" and one["status"] == "running"
    # a second generated id is new
    other = client.register(PAIR)
    assert other != generated and other.startswith("q")


def test_plan_version_is_not_summed_over_partitions(make_cluster):
    cluster = make_cluster(partitions=3)
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    q = client.query("pair")
    assert q["stats"]["plan_version"] == q["plan"]["version"] == 1


def test_remove_stops_its_matches_and_leaves_the_other_untouched(client):
    events = stream(600, seed=3)
    half = 300
    client.register(SEQ3, name="keep")
    client.register(PAIR, name="gone")
    send_in_slices(client, events[:half])
    before_gone = ids_of(read_all(client, "gone"))
    assert before_gone
    out = client.remove("gone")
    assert out["removed"] is True and out["matches"] == len(before_gone)
    assert [q["id"] for q in client.queries()] == ["keep"]
    with pytest.raises(NotFoundError):
        client.query("gone")
    with pytest.raises(NotFoundError):
        client.matches("gone")
    with pytest.raises(NotFoundError):
        client.remove("gone")
    send_in_slices(client, events[half:])
    client.advance(end_of(events))
    keep = ids_of(read_all(client, "keep"))
    expected = engine_ids(events, [("keep", SEQ3)])["keep"]
    assert len(keep) == len(set(keep))
    assert set(keep) == set(expected) and len(keep) == len(expected)
    # the removed query produced exactly the engine's matches of the first half
    assert set(before_gone) == set(engine_ids(events[:half], [("gone", PAIR)])["gone"])
    stats = client.stats()
    assert stats["gateway"]["orphan_matches"] == 0
    for actor in stats["actors"].values():
        assert "gone" not in actor["plans"]
    # re-registering the name starts from scratch: it sees only the events sent afterwards
    client.register(PAIR, name="gone")
    assert read_all(client, "gone") == []


def test_global_query_runs_on_the_global_actor(client):
    events = stream(500, seed=5)
    r0 = client.routing()
    assert r0["global_types"] == [] and r0["partitions"] == 2 and r0["key_attr"] == "k"
    client.register(PAIR, name="keyed")
    r1 = client.routing()
    assert r1["global_types"] == [] and r1["version"] > r0["version"]
    client.register(GLOBAL_AC, name="glob")
    r2 = client.routing()
    assert r2["global_types"] == ["A", "C"] and r2["version"] > r1["version"]
    send_in_slices(client, events)
    client.advance(end_of(events))

    glob = ids_of(read_all(client, "glob"))
    unpartitioned = engine_ids(events, [("glob", GLOBAL_AC)], key_attr=None)["glob"]
    assert glob and set(glob) == set(unpartitioned) and len(glob) == len(unpartitioned)
    # the matches really pair events of different keys (only the global actor sees both)
    cross = [m for m in read_all(client, "glob") if m["events"]["a"]["k"] != m["events"]["c"]["k"]]
    assert cross
    keyed = ids_of(read_all(client, "keyed"))
    assert set(keyed) == set(engine_ids(events, [("keyed", PAIR)])["keyed"])

    actors = client.stats()["actors"]
    assert set(actors["global"]["plans"]) == {"glob"}
    assert set(actors["0"]["plans"]) == set(actors["1"]["plans"]) == {"keyed"}
    # each keyed event went to exactly one partition actor; the global actor got A and C only
    assert actors["0"]["events"] + actors["1"]["events"] == len(events)
    assert actors["0"]["events"] > 0 and actors["1"]["events"] > 0
    assert actors["global"]["events"] == sum(e.type in ("A", "C") for e in events)

    client.remove("glob")
    r3 = client.routing()
    assert r3["global_types"] == [] and r3["version"] > r2["version"]
    assert "glob" not in client.stats()["actors"]["global"]["plans"]


# --------------------------------------------------------------------------- events

def test_send_dicts_and_events(client):
    client.register(PAIR, name="pair")
    rows = [{"type": e.type, "ts": e.ts, "x": e.attrs["x"], "k": e.attrs["k"]}
            for e in stream(200, seed=8)]
    objs = stream(200, seed=9, t0=rows[-1]["ts"])
    ack = client.send(rows)
    assert ack["events"] == len(rows) and ack["bad_rows"] == [] and ack["duplicates"] == 0
    assert sum(ack["partitions"].values()) == len(rows)
    ack = client.send(objs)
    assert ack["events"] == len(objs) and ack["bad_rows"] == []
    # mappings get their key from the gateway's key attribute, like on every other path
    sent = [make_event(r, i, "k") for i, r in enumerate(rows)] + objs
    got = ids_of(read_all(client, "pair"))
    assert got and set(got) == set(engine_ids(sent, [("pair", PAIR)])["pair"])
    # the same events again are recognised as duplicates and give no new matches
    again = client.send(objs)
    assert again["duplicates"] == len(objs) and again["matches"] == 0
    assert ids_of(read_all(client, "pair")) == got


def test_client_skips_and_reports_malformed_mappings_as_the_http_api_does(client, caplog):
    """client.send and POST /v1/events: bad rows are skipped and named in ``bad_rows``; the
    good rows of the batch are sent (one behaviour, see docs/cluster.md)."""
    ack = client.send([{"type": "A", "ts": 1, "k": "x"}, {"ts": 2, "k": "x"}])
    assert ack["events"] == 1 and len(ack["bad_rows"]) == 1
    assert ack["bad_rows"][0].startswith("row 1") and "'type'" in ack["bad_rows"][0]
    assert "skipped 1 bad row(s) of 2" in caplog.text
    ack = client.send([{"type": "A", "ts": 1}])                 # no key attribute
    assert ack["events"] == 0 and ack["bad_rows"][0].startswith("row 0, field 'k'")
    assert client.stats()["gateway"]["events"] == 1
    status, _, body = http("POST", client.address + "/v1/events",
                           json.dumps([{"type": "A", "ts": 3, "k": "x"}, {"ts": 4}]).encode(),
                           {"Content-Type": "application/json"})
    assert status == 200 and body["events"] == 1 and body["bad_rows"][0].startswith("row 1")


def test_the_same_rows_by_client_and_by_json_are_duplicates(cluster):
    client = Client(cluster.url)            # not connect(): the client learns the key itself
    client.register(PAIR, name="pair")
    rows = [{"type": "A", "ts": 1.0, "k": "x"}, {"type": "B", "ts": 2.0, "k": "x"}]
    assert client.send(rows)["matches"] == 1
    status, _, body = http("POST", cluster.url + "/v1/events", json.dumps(rows).encode(),
                           {"Content-Type": "application/json"})
    assert status == 200 and body["duplicates"] == 2 and body["matches"] == 0
    assert client.send([make_event(r, i, "k") for i, r in enumerate(rows)])["duplicates"] == 2
    assert len(read_all(client, "pair")) == 1


def test_bad_rows_are_reported_and_the_rest_processed(cluster, client):
    client.register(PAIR, name="pair")
    rows = [{"type": "A", "ts": 1.0, "k": "x"}, {"type": "B", "ts": "soon", "k": "x"},
            {"type": "B", "ts": 2.0, "k": "x"}, {"ts": 3.0, "k": "x"}]
    status, _, body = http("POST", cluster.url + "/v1/events", json.dumps(rows).encode(),
                           {"Content-Type": "application/json"})
    assert status == 200
    assert body["events"] == 2 and body["matches"] == 1
    assert len(body["bad_rows"]) == 2
    assert "row 1" in body["bad_rows"][0] and "'ts'" in body["bad_rows"][0]
    assert "row 3" in body["bad_rows"][1] and "'type'" in body["bad_rows"][1]
    # the same in a msgpack batch: a row with a bad time among good ones
    good = [Event("A", 5.0, {"k": "y"}, key="y"), Event("B", 6.0, {"k": "y"}, key="y")]
    data = msgpack.unpackb(encode_batch(good, "raw", "b1"), raw=False)
    data["rows"].insert(1, ["A", "late", {"k": "y"}, "y", None])
    status, _, body = http("POST", cluster.url + "/v1/events",
                           msgpack.packb(data, use_bin_type=True),
                           {"Content-Type": "application/msgpack"})
    assert status == 200 and body["events"] == 2 and body["matches"] == 1
    assert len(body["bad_rows"]) == 1 and "row 1" in body["bad_rows"][0]
    assert len(read_all(client, "pair")) == 2
    assert client.stats()["gateway"]["bad_rows"] == 3


def test_malformed_msgpack_batch_gets_400_and_the_next_batch_is_processed(cluster, client):
    client.register(PAIR, name="pair")
    status, _, body = http("POST", cluster.url + "/v1/events", b"garbage",
                           {"Content-Type": "application/msgpack"})
    assert status == 400
    assert body["error"]["type"] == "IngestError"
    assert "msgpack" in body["error"]["message"]
    # a map without the header fields
    status, _, body = http("POST", cluster.url + "/v1/events",
                           msgpack.packb({"rows": []}), {"Content-Type": "application/msgpack"})
    assert status == 400 and body["error"]["field"] == "schema_version"
    assert client.stats()["gateway"]["events"] == 0
    batch = encode_batch([Event("A", 1.0, {"k": "x"}, key="x"),
                          Event("B", 2.0, {"k": "x"}, key="x")], "raw", "b1")
    status, _, body = http("POST", cluster.url + "/v1/events", batch,
                           {"Content-Type": "application/msgpack"})
    assert status == 200 and body["events"] == 2 and body["matches"] == 1
    assert len(read_all(client, "pair")) == 1


def test_advance_releases_a_trailing_negation_match(client):
    client.register(NEG, name="neg")
    client.send([Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x"),
                 Event("A", 1.0, {"k": "y"}, key="y"), Event("B", 2.0, {"k": "y"}, key="y"),
                 Event("C", 3.0, {"k": "y"}, key="y")])
    assert read_all(client, "neg") == []          # the window is still open
    out = client.advance(100.0)
    assert out["matches"] == 1
    got = read_all(client, "neg")
    assert len(got) == 1 and got[0]["events"]["a"]["k"] == "x"
    eng = Engine(key_attr="k")
    eng.add_query(NEG, name="neg")
    for e in [Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x")]:
        assert eng.process(e) == []
    assert ids_of(got) == [match_id(m) for m in eng.advance(100.0)]


# --------------------------------------------------------------------------- errors

def test_syntax_error_reaches_the_client_with_its_location(client):
    text = "PATTERN SEQ(A a, B b)\nWHERE a.x <\nWITHIN 5 seconds"
    with pytest.raises(QuerySyntaxError) as local:
        parse_query(text)
    with pytest.raises(QuerySyntaxError) as remote:
        client.register(text)
    err = remote.value
    assert (err.line, err.column) == (local.value.line, local.value.column) == (3, 1)
    assert err.excerpt == local.value.excerpt and "^" in err.excerpt
    assert "WITHIN" in err.excerpt and "line 3, column 1" in str(err)
    assert client.queries() == []


def test_validation_conflict_and_not_found(client):
    with pytest.raises(QueryValidationError, match="'c' is not declared") as exc:
        client.register("PATTERN SEQ(A a, B b) WHERE c.x > 1 WITHIN 5 seconds")
    assert exc.value.line == 1 and exc.value.column == 29
    with pytest.raises(QueryValidationError, match="one query at a time"):
        client.register(PAIR + ";\n" + SEQ3)
    with pytest.raises(QueryValidationError, match="invalid query name"):
        client.register(PAIR, name="bad name!")
    client.register(PAIR, name="pair")
    with pytest.raises(ConflictError, match="'pair'"):
        client.register(SEQ3, name="pair")
    with pytest.raises(ConflictError):
        client.register("NAME pair\n" + SEQ3)
    assert [q["id"] for q in client.queries()] == ["pair"]
    assert client.query("pair")["text"] == PAIR               # the original kept
    for call in (client.remove, client.query, client.matches):
        with pytest.raises(NotFoundError, match="nope"):
            call("nope")


def test_unavailable_when_nothing_listens():
    address = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(UnavailableError, match="cannot reach the raycep gateway"):
        connect(address)
    client = Client(address)
    with pytest.raises(UnavailableError):
        client.register(PAIR)
    with pytest.raises(UnavailableError):
        client.send([Event("A", 1.0, {"k": "x"}, key="x")])


def test_token_required_and_wrong_token_changes_nothing(make_cluster):
    cluster = make_cluster(token="s3cret")
    url = cluster.url
    with pytest.raises(AuthenticationError):
        connect(url)
    with pytest.raises(AuthenticationError):
        connect(url, token="wrong")
    bad = Client(url, token="wrong")
    with pytest.raises(AuthenticationError):
        bad.register(PAIR, name="pair")
    with pytest.raises(AuthenticationError):
        bad.send([Event("A", 1.0, {"k": "x"}, key="x")])
    good = connect(url, token="s3cret")
    assert good.queries() == []
    assert good.stats()["gateway"]["events"] == 0
    # raw HTTP: 401 with a JSON error, for reads and writes alike
    status, headers, body = http("GET", url + "/v1/queries")
    assert status == 401 and body["error"]["type"] == "AuthenticationError"
    assert headers.get("WWW-Authenticate") == "Bearer"
    status, _, body = http("POST", url + "/v1/queries", json.dumps({"text": PAIR}).encode(),
                           {"Content-Type": "application/json",
                            "Authorization": "Bearer wrong"})
    assert status == 401 and "token" in body["error"]["message"]
    assert good.queries() == []
    status, _, body = http("POST", url + "/v1/queries", json.dumps({"text": PAIR}).encode(),
                           {"Content-Type": "application/json",
                            "Authorization": "Bearer s3cret"})
    assert status == 201 and body["status"] == "running"
    assert [q["id"] for q in good.queries()] == [body["id"]]


# --------------------------------------------------------------------------- matches

def test_paging_by_cursor_gives_each_match_once_in_order(client):
    client.register(PAIR, name="pair")
    events = stream(400, seed=11)
    send_in_slices(client, events[:200])
    full = client.matches("pair", since=0, limit=100_000).matches
    assert len(full) > 20
    paged = read_all(client, "pair", limit=7)
    assert paged == full
    cursors = [m["cursor"] for m in paged]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors)))   # contiguous
    assert len(set(ids_of(paged))) == len(paged)
    last = client.matches("pair", since=cursors[-1])
    assert last.matches == [] and last.next == cursors[-1] and last.head == cursors[-1]
    # a reader that continues from its cursor gets exactly the newer matches
    send_in_slices(client, events[200:])
    newer = read_all(client, "pair", since=cursors[-1], limit=5)
    assert newer and all(m["cursor"] > cursors[-1] for m in newer)
    every = ids_of(paged) + ids_of(newer)
    assert len(set(every)) == len(every)
    assert set(every) == set(engine_ids(events, [("pair", PAIR)])["pair"])


def test_matches_of_several_queries_in_one_request(cluster, client):
    client.register(PAIR, name="pair")
    client.register("NAME seq3\n" + SEQ3)
    events = stream(400, seed=12)
    send_in_slices(client, events)
    one = {q: client.matches(q, since=3, limit=9) for q in ("pair", "seq3")}
    assert all(len(p.matches) == 9 for p in one.values())             # not vacuous
    assert client.matches_many({"pair": 3, "seq3": 3}, limit=9) == one
    # paging with the cursors of each page reads every match once
    cursors, seen = {"pair": 0, "seq3": 0}, {"pair": [], "seq3": []}
    while True:
        pages = client.matches_many(cursors, limit=50)
        if not any(p.matches for p in pages.values()):
            break
        for q, page in pages.items():
            seen[q] += ids_of(page.matches)
            cursors[q] = page.next
    assert seen["pair"] == ids_of(read_all(client, "pair"))
    assert seen["seq3"] == ids_of(read_all(client, "seq3"))
    # all or nothing: an unknown query is a 404 naming it
    with pytest.raises(NotFoundError, match="nope"):
        client.matches_many({"pair": 0, "nope": 0})
    for body, field in (({"queries": ["pair"]}, "queries"), ({"queries": {"pair": -1}}, "queries"),
                        ({"queries": {"pair": 0}, "limit": "x"}, "limit"),
                        ({"queries": {"pair": 0}, "wait": 61}, "wait"),
                        ({"queries": {"pair": 0}, "wait": True}, "wait"),
                        ({"queries": {"pair": 0}, "since": 0}, "since"), ({}, "queries")):
        status, _, answer = http("POST", cluster.url + "/v1/matches", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
        assert status == 400 and field in answer["error"]["message"], (body, answer)


def test_a_long_poll_answers_when_a_match_is_stored(client):
    """``wait``: the answer comes once one of the queries has a new match (it would come
    after 60 s with empty pages otherwise), or after the wait with empty pages."""
    client.register(PAIR, name="pair")
    client.register("NAME seq3\n" + SEQ3)
    heads = {q: client.matches(q).head for q in ("pair", "seq3")}
    pages = client.matches_many(heads, wait=0.2)
    assert [p.matches for p in pages.values()] == [[], []]
    got = {}

    def reader():
        got.update(client.matches_many(heads, wait=60))

    t = threading.Thread(target=reader)
    t.start()
    send_in_slices(client, stream(200, seed=13))
    t.join(90)
    assert not t.is_alive()
    assert got["pair"].matches and got["pair"].matches[0]["cursor"] == heads["pair"] + 1


def test_subscribe_yields_matches_as_they_arrive_and_ends_on_remove(client):
    client.register(PAIR, name="pair")
    events = stream(300, seed=13)
    expected = set(engine_ids(events, [("pair", PAIR)])["pair"])
    got, done = [], threading.Event()
    sub = Client(client.address)

    def run():
        for m in sub.subscribe("pair"):
            got.append(m)
        done.set()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    send_in_slices(client, events[:150])
    wait_for(lambda: len(got) >= len(engine_ids(events[:150], [("pair", PAIR)])["pair"]),
             what="the first matches on the subscription")
    send_in_slices(client, events[150:])
    wait_for(lambda: len(got) >= len(expected), what="every match on the subscription")
    assert not done.is_set()
    client.remove("pair")
    assert done.wait(WAIT), "the subscription did not end when the query was removed"
    thread.join(WAIT)
    assert set(ids_of(got)) == expected and len(got) == len(expected)
    cursors = [m["cursor"] for m in got]
    assert cursors == sorted(cursors)


def test_subscribe_from_a_cursor_and_unknown_query(client):
    client.register(PAIR, name="pair")
    client.send([Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x")])
    first = client.matches("pair").matches
    assert len(first) == 1
    with pytest.raises(NotFoundError):
        next(iter(client.subscribe("nope")))
    got = []
    thread = threading.Thread(target=lambda: got.extend(client.subscribe(
        "pair", since=first[0]["cursor"])), daemon=True)
    thread.start()
    client.send([Event("B", 3.0, {"k": "x"}, key="x")])
    wait_for(lambda: got, what="the match after the cursor")
    client.remove("pair")
    thread.join(WAIT)
    assert not thread.is_alive()
    assert len(got) == 1 and got[0]["cursor"] > first[0]["cursor"]
    assert got[0]["events"]["b"]["ts"] == 3.0


def test_listen_calls_back_for_every_match(client):
    client.register(SEQ3, name="seq3")
    events = stream(300, seed=17)
    expected = engine_ids(events, [("seq3", SEQ3)])["seq3"]
    seen = []
    thread = client.listen("seq3", seen.append)
    send_in_slices(client, events)
    wait_for(lambda: len(seen) >= len(expected), what="the callbacks")
    client.remove("seq3")
    thread.join(WAIT)
    assert not thread.is_alive()
    assert sorted(ids_of(seen)) == sorted(expected)


def test_slow_reader_misses_the_oldest_and_jsonl_keeps_everything(make_cluster, tmp_path):
    sink = tmp_path / "out" / "matches.jsonl"
    cluster = make_cluster(match_capacity=5, matches_jsonl=str(sink))
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    events = stream(300, seed=19)
    expected = engine_ids(events, [("pair", PAIR)])["pair"]
    assert len(expected) > 20
    send_in_slices(client, events)
    page = client.matches("pair", since=0)
    assert len(page.matches) == 5
    assert page.missed == len(expected) - 5 > 0
    assert [m["cursor"] for m in page.matches] == list(range(page.head - 4, page.head + 1))
    q = client.query("pair")["matches"]
    assert q["stored"] == 5 and q["dropped"] == len(expected) - 5
    assert q["total"] == len(expected)
    lines = [json.loads(line) for line in sink.read_text(encoding="utf-8").splitlines()]
    assert sorted(ids_of(lines)) == sorted(expected)
    newest = sorted(lines, key=lambda m: m["cursor"])[-5:]
    assert ids_of(newest) == ids_of(page.matches)
    # a subscription from the start is told about the gap, then gets the retained matches
    sub, got = Client(cluster.url), []
    thread = threading.Thread(target=lambda: got.extend(sub.subscribe("pair")), daemon=True)
    thread.start()
    wait_for(lambda: len(got) == 5, what="the retained matches on the subscription")
    assert sub.missed == page.missed
    assert ids_of(got) == ids_of(page.matches)
    # a reader that kept up loses nothing: it reads from its last cursor
    t = events[-1].ts + 100
    client.send([Event("A", t, {"k": "z"}, key="z"), Event("B", t + 1, {"k": "z"}, key="z")])
    page2 = client.matches("pair", since=page.next)
    assert page2.missed == 0 and len(page2.matches) == 1
    wait_for(lambda: len(got) == 6, what="the new match on the subscription")
    client.remove("pair")
    thread.join(WAIT)
    assert not thread.is_alive()


def test_gateway_restart_keeps_queries_and_they_keep_matching(make_cluster, tmp_path):
    registry = tmp_path / "registry.sqlite"
    cluster = make_cluster(registry_path=str(registry))
    client = connect(cluster.url)
    client.register(SEQ3, name="seq3")
    client.register(GLOBAL_AC, name="glob")
    events = stream(600, seed=23)
    half = 300
    send_in_slices(client, events[:half])
    before = {q: read_all(client, q) for q in ("seq3", "glob")}
    heads = {q: client.matches(q).head for q in before}
    old_url = cluster.url
    cluster.restart_gateway()
    assert cluster.url == old_url
    # the old client's kept-alive connection died with the gateway: it connects again
    assert [q["id"] for q in client.queries()] == ["seq3", "glob"]
    client = connect(cluster.url)
    rows = {q["id"]: q for q in client.queries()}
    assert list(rows) == ["seq3", "glob"]
    assert rows["seq3"]["scope"] == "keyed" and rows["glob"]["scope"] == "global"
    assert all(q["status"] == "running" for q in rows.values())
    assert client.routing()["global_types"] == ["A", "C"]
    send_in_slices(client, events[half:])
    client.advance(end_of(events))
    expected = engine_ids(events, [("seq3", SEQ3)])
    expected.update(engine_ids(events, [("glob", GLOBAL_AC)], key_attr=None))
    for q in ("seq3", "glob"):
        after = read_all(client, q)
        assert after, q
        assert all(m["cursor"] > heads[q] for m in after)
        assert set(ids_of(before[q])) | set(ids_of(after)) == set(expected[q])
    # a generated id after the restart does not reuse an old one
    assert client.register(PAIR) not in ("seq3", "glob")


def test_concurrent_sends_are_answered_after_their_own_matches_are_stored(make_cluster):
    """(Through Ray, where the actors' calls overlap: test_cluster_ray.py.) The keys
    interleave in time: a slack keeps no event late."""
    cluster = make_cluster(disorder=DisorderSettings(min_slack=1e6))
    check_concurrent_sends(connect(cluster.url), PAIR)


def test_explain_gives_the_plan_and_the_statistics_it_came_from(make_cluster, capsys):
    from raycep.cep.lang.compiler import compile_query
    from raycep.planner.plan import make_plan, order_cost
    cluster = make_cluster(plan_every=0.2)
    client = connect(cluster.url)
    client.register(SEQ3, name="seq3")
    events = stream(3000, seed=41)
    send_in_slices(client, events[:1500])
    wait_for(lambda: any(c["measured"] for c in client.explain("seq3")["conditions"]),
             what="a planner round with measured selectivities")
    send_in_slices(client, events[1500:])
    info = client.explain("seq3")
    assert info["query"] == "seq3" and info["partition_by"] == ["k"]
    assert [(v["name"], v["type"]) for v in info["branches"][0]["variables"]] == \
        [("a", "A"), ("b", "B"), ("c", "C")]
    assert info["rates_measured"] and set(info["rates"]) == {"A", "B", "C"}
    plan = client.query("seq3")["plan"]
    assert info["plan"]["order"] == plan["order"] and info["plan"]["version"] == plan["version"]
    # the costs are the planner's under exactly the statistics shown
    cq = compile_query(SEQ3)
    stats = {"rates": info["rates"], "selectivities": {
        i: c["selectivity"] for i, c in enumerate(info["conditions"]) if c["measured"]}}
    assert info["plan"]["cost"] == order_cost(cq, stats, tuple(plan["order"]))
    best = make_plan(cq, stats, info["best"]["algorithm"])
    assert info["best"]["order"] == list(best.order) and info["best"]["cost"] == best.cost
    for c in info["conditions"]:
        got = info["counters"][c["text"]]
        assert 0 < got["passed"] < got["tested"], c
    assert info["path"]["bulk"] + info["path"]["per_trigger"] > 0
    with pytest.raises(NotFoundError, match="nope"):
        client.explain("nope")
    assert cli.main(["explain", "seq3", "--gateway", cluster.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("query seq3: skip-till-any-match, within 10 s, per k")
    assert f"plan in use: {','.join(plan['order'])} (version {plan['version']})" in out
    assert "a.x < b.x: " in out and "(measured; passed " in out


# --------------------------------------------------------------------------- CLI

def test_cli_against_a_running_gateway(cluster, client, tmp_path, capsys):
    qfile = tmp_path / "two.cep"
    qfile.write_text(f"NAME pair\n{PAIR};\n\nNAME seq3\n{SEQ3}\n", encoding="utf-8")
    gw = ["--gateway", cluster.url]

    assert cli.main(["query", "add", str(qfile), *gw]) == 0
    out = capsys.readouterr().out
    assert "registered pair" in out and "registered seq3" in out

    assert cli.main(["query", "ls", *gw]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["QUERY", "SCOPE", "STATUS"]
    assert [line.split()[0] for line in table[1:]] == ["pair", "seq3"]
    assert all("keyed" in line and "running" in line for line in table[1:])

    events = stream(200, seed=29)
    send_in_slices(client, events)
    assert cli.main(["query", "ls", "--json", *gw]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == ["pair", "seq3"]
    expected = engine_ids(events, [("pair", PAIR)])["pair"]
    assert rows[0]["matches"]["total"] == len(expected)
    assert cli.main(["query", "ls", *gw]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert table[0] == ["QUERY", "SCOPE", "STATUS", "MODE", "MATCHES", "RETRACTED", "LATE",
                        "PLAN", "VERSION"]
    assert table[1][:7] == ["pair", "keyed", "running", "optimistic", str(len(expected)),
                            "0", "0"]

    # raycep stats: the gateway, each actor, each query
    assert cli.main(["stats", *gw]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"gateway: {len(events)} events in, 0 bad rows")
    assert f"{len(events) // 100} sends, p50 " in out
    actors = client.stats()["actors"]
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["ACTOR"][:3] == ["ACTOR", "EVENTS", "BUFFERED"]
    for label, a in actors.items():
        assert lines[label][1] == f"{a['events']:,}"
    assert sum(a["events"] for a in actors.values()) == len(events)
    assert lines["pair"][4] == str(len(expected))
    assert cli.main(["stats", "--json", *gw]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["gateway"]["events"] == len(events)
    assert [q["id"] for q in whole["queries"]] == ["pair", "seq3"]

    assert cli.main(["matches", "pair", *gw]) == 0
    captured = capsys.readouterr()
    printed = [json.loads(line) for line in captured.out.splitlines()]
    assert sorted(ids_of(printed)) == sorted(expected)
    assert f"{len(expected)} matches" in captured.err

    assert cli.main(["query", "rm", "pair", *gw]) == 0
    assert "removed pair" in capsys.readouterr().out
    assert [q["id"] for q in client.queries()] == ["seq3"]

    # errors: an unknown id, then a gateway that is down
    assert cli.main(["query", "rm", "pair", *gw]) != 0
    assert "pair" in capsys.readouterr().err
    down = f"http://127.0.0.1:{closed_port()}"
    assert cli.main(["query", "ls", "--gateway", down]) != 0
    err = capsys.readouterr().err
    assert "cannot reach the raycep gateway" in err and down in err
    assert "Traceback" not in err


def test_cli_token(make_cluster, capsys):
    cluster = make_cluster(token="s3cret")
    assert cli.main(["query", "ls", "--gateway", cluster.url]) != 0
    assert "token" in capsys.readouterr().err
    assert cli.main(["query", "add", PAIR, "--name", "pair", "--gateway", cluster.url,
                     "--token", "s3cret"]) == 0
    assert "registered pair" in capsys.readouterr().out


def test_a_registration_one_actor_refuses_leaves_nothing_registered(cluster, client):
    """The gateway parses the query once and installs it on every actor at once; when one
    actor fails, the others and the planner drop it again and the registry does not keep it."""
    from unittest import mock
    workers = list(cluster.workers.values())
    broken = workers[1]
    with mock.patch.object(broken, "add_query", side_effect=QueryValidationError("refused")):
        with pytest.raises(QueryValidationError, match="refused"):
            client.register(PAIR, name="pair")
    assert [q["id"] for q in client.queries()] == []
    assert all("pair" not in w.queries() for w in workers)
    assert client.register(PAIR, name="pair") == "pair"          # the name is free again
    keyed = [w for w in workers if "pair" in w.queries()]
    assert len(keyed) == len(workers) - 1                        # partitions, not the global


def test_forwarded_rows_report_bad_rows_by_request_index_once(cluster, client):
    """A msgpack batch of array rows is routed by type and key and forwarded as it came; the
    actors validate it; a bad row is named by its index in the request, once, also when it
    went to a partition and to the global actor; the other rows are evaluated as if decoded
    at the gateway (same ids, same matches as an in-process engine)."""
    client.register(PAIR, name="pair")
    client.register(GLOBAL_AC, name="ac")             # A and C also go to the global actor
    good = stream(60, seed=5)
    rows = [[e.type, e.ts, e.attrs, e.key, e.id] for e in good]
    bad = {3: ["A", "soon", {"k": "x", "x": 1}, "x", "bad-ts"],
           17: ["C", float("nan"), {"k": "y", "x": 2}, "y", "bad-nan"],
           31: ["A", 40.0, {"k": "x", "x": float("inf")}, "x", "bad-attr"]}
    for index in sorted(bad):
        rows.insert(index, bad[index])
    body = msgpack.packb({"schema_version": 1, "source": "raw", "batch_id": "r1",
                          "rows": rows}, use_bin_type=True)
    from unittest import mock
    with mock.patch("raycep.gateway.server.ingest.decode_batch",
                    side_effect=AssertionError("decoded at the gateway")):
        status, _, ack = http("POST", client.address + "/v1/events", body,
                              {"Content-Type": "application/msgpack"})
    assert status == 200, ack
    assert ack["events"] == len(good)
    assert [r.split(",")[0] for r in ack["bad_rows"]] == ["row 3", "row 17", "row 31"]
    assert "'ts'" in ack["bad_rows"][0] and "'ts'" in ack["bad_rows"][1]
    client.advance(end_of(good))
    want = engine_ids(good, [("pair", PAIR), ("ac", GLOBAL_AC)])
    for qid in ("pair", "ac"):
        assert sorted(ids_of(read_all(client, qid))) == sorted(want[qid])
    assert client.stats()["gateway"]["bad_rows"] == 3
