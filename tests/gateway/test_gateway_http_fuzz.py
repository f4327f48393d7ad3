"""Random malformed requests against every route of the gateway's HTTP API (issue 13).

An in-process cluster (token auth, small body limit) gets bodies of the wrong JSON types,
missing and unknown fields, huge and deeply nested values, non-finite numbers (JSON's
non-standard ``NaN``/``Infinity`` tokens, ``1e999``), bad msgpack, bad ``Content-Type`` and
``Authorization`` headers and bad query-string arguments. Every answer must be a 4xx (or a
2xx) with a JSON body, every error ``{"error": {"type", "message"}}`` without colour codes or
tracebacks; afterwards a good batch gives exactly the matches an in-process ``cep.Engine``
finds in it.

The fuzzed events stay before ``GOOD_T0`` and use no key of the good batch (a random row with
``ts`` 1e300 would be a *valid* event that moves the clock past the good batch, which is not
what this test is about); a fuzzed advance is never forced.
"""
import json
import math
import urllib.error
import urllib.parse
import urllib.request

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raycep.cep import Engine, Event
from raycep.cep.match import match_id
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.http import OPEN_PATHS
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import GLOBAL_AC, NEG, PAIR

TOKEN = "t0ken"
MAX_BODY = 64 * 1024
MAX_DEPTH = 16
QUERIES = (("pair", PAIR), ("glob", GLOBAL_AC), ("neg", NEG))
GOOD_T0 = 2e6
JSON_T = "application/json"
MSGPACK_T = "application/msgpack"


@pytest.fixture(scope="module")
def cluster():
    c = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None, plan_every=0,
                                                 token=TOKEN, max_body_bytes=MAX_BODY,
                                                 max_depth=MAX_DEPTH))
    c.start()
    client = connect(c.url, token=TOKEN)
    for name, text in QUERIES:
        client.register(text, name=name)
    yield c
    c.stop()


# --------------------------------------------------------------------------- strategies

text = st.text(max_size=12)
ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | text | st.just(10**400))
# no "ts" key: a random mapping must not become an event with a random time
keys = text.filter(lambda k: k != "ts")
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(keys, inner, max_size=4), max_leaves=12)
fuzz_ts = (st.floats(0, 1e6) | st.integers(0, 10**6) | st.sampled_from(
    [math.nan, math.inf, -math.inf, "nan", "Infinity", "12", "x", None, True, [1], {"a": 1}]))
fuzz_key = (st.sampled_from(["f0", "f1", "f2"]) | st.integers(0, 5) | st.floats()
            | st.lists(st.integers(), max_size=2) | st.dictionaries(text, st.integers(),
                                                                    max_size=2))
rows = st.fixed_dictionaries(
    {"type": st.sampled_from(["A", "B", "C", "", None, 5, ["A"]]), "ts": fuzz_ts},
    optional={"k": fuzz_key, "x": json_values, "attrs": json_values, "id": json_values})
query_texts = st.sampled_from([PAIR, NEG, "PATTERN SEQ(A a, B b) WHERE a.x > lim WITHIN W",
                               "PATTERN SEQ(A a, B b) WITHIN 100000000 seconds",
                               "PATTERN SEQ(A a", "", "   ", "NAME pair\n" + PAIR]) | text
query_bodies = st.fixed_dictionaries({}, optional={
    "text": query_texts | json_values,
    "name": st.sampled_from(["pair", "bad name!", "", "x" * 100]) | json_values,
    "params": st.dictionaries(st.sampled_from(["W", "lim", "z"]), scalars | json_values,
                              max_size=3) | json_values,
    "mode": st.sampled_from(["optimistic", "pessimistic", "OPTIMISTIC"]) | json_values,
    "extra": json_values})
advance_bodies = st.fixed_dictionaries({}, optional={
    "watermark": st.sampled_from([math.nan, math.inf, -math.inf, 1e999, 1e300, 10**400])
    | scalars | json_values,
    "force": st.sampled_from([0, 1, "true", None, False]) | json_values,
    "other": json_values})
event_bodies = (st.lists(rows, max_size=6) | st.fixed_dictionaries(
    {"events": st.lists(rows, max_size=6) | json_values},
    optional={"source": json_values}) | json_values)
batches = st.fixed_dictionaries({}, optional={
    "schema_version": st.sampled_from([1, 2, "1", None]), "source": text | json_values,
    "batch_id": text | json_values,
    "rows": st.lists(st.lists(st.sampled_from(["A", "B", None, 1.5, math.nan, {}, []]),
                              max_size=6) | rows, max_size=5) | json_values})


def deep(n: int, kind: str) -> bytes:
    return (b"[" * n + b"]" * n) if kind == "json" else (b"\x91" * n + b"\x90")


@st.composite
def payloads(draw, structured):
    """(content type, body bytes): the route's structured value or anything, as JSON (with
    NaN/Infinity tokens), msgpack or raw garbage."""
    choice = draw(st.sampled_from(["json", "json", "msgpack", "deep", "huge", "garbage",
                                   "empty"]))
    if choice in ("json", "msgpack"):
        value = draw(structured | json_values)
        if choice == "json":
            return JSON_T, json.dumps(value, allow_nan=True).encode()
        try:
            return MSGPACK_T, msgpack.packb(value, use_bin_type=True)
        except (OverflowError, TypeError, ValueError):    # ints beyond 64 bits
            return MSGPACK_T, b"\xc1"
    if choice == "deep":
        kind = draw(st.sampled_from(["json", "msgpack"]))
        return (JSON_T if kind == "json" else MSGPACK_T), deep(
            draw(st.integers(MAX_DEPTH + 1, 5000)), kind)
    if choice == "huge":
        return JSON_T, b'{"text": "' + b"x" * MAX_BODY + b'"}'
    if choice == "garbage":
        return draw(st.sampled_from([JSON_T, MSGPACK_T, "text/plain", "",
                                     "application/x-www-form-urlencoded"])), draw(
            st.binary(max_size=64))
    return draw(st.sampled_from([JSON_T, MSGPACK_T, ""])), b""


good_auth = st.sampled_from([f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}",
                             f"bEaReR   {TOKEN}", f"  Bearer {TOKEN}  "])
bad_auth = st.sampled_from([None, "", "Bearer", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN,
                            f"Bearer{TOKEN}", "Bearer wrong", f"Token {TOKEN}"]) | ascii_text
query_args = st.dictionaries(st.sampled_from(["since", "limit", "x"]), st.integers(
    -10, 10**20).map(str) | st.sampled_from(["", "abc", "1.5", "0x10", "-0", " 3", "١"])
    | ascii_text, max_size=3)
ids = st.sampled_from(["pair", "glob", "neg", "nope", ":late", "..", "q1"]) | text


@st.composite
def requests(draw):
    """(method, path, headers, body, auth is valid)"""
    route = draw(st.sampled_from(["events", "add", "advance", "health", "queries", "add",
                                  "get", "delete", "matches", "stream", "late", "events",
                                  "advance", "routing", "stats", "unknown", "open",
                                  "metrics"]))
    qid = draw(ids)
    q = urllib.parse.quote(qid, safe="")
    args = draw(query_args)
    qs = ("?" + urllib.parse.urlencode(args)) if args else ""
    method, path, body, ctype = "GET", None, None, None
    if route in ("health", "routing", "stats", "queries"):
        path = f"/v1/{route}" + qs
        method = draw(st.sampled_from(["GET", "GET", "POST", "PUT"]))
    elif route == "add":
        method, path = "POST", "/v1/queries"
        ctype, body = draw(payloads(query_bodies))
    elif route == "get":
        path = f"/v1/queries/{q}"
    elif route == "delete":
        # the three queries stay: the last check needs them
        method, path = "DELETE", f"/v1/queries/{q}"
        if qid in ("pair", "glob", "neg"):
            method = "PATCH"
    elif route in ("matches", "stream"):
        path = f"/v1/queries/{q}/{route}" + qs
    elif route == "late":
        path = "/v1/late" + qs
    elif route == "events":
        method, path = "POST", "/v1/events"
        kind = draw(st.sampled_from(["json", "batch"]))
        ctype, body = draw(payloads(event_bodies if kind == "json" else batches))
    elif route == "advance":
        method, path = "POST", "/v1/advance"
        ctype, body = draw(payloads(advance_bodies))
    elif route == "open":                    # the probes and the console: no token needed
        method = draw(st.sampled_from(["GET", "GET", "POST"]))
        path = draw(st.sampled_from(sorted(OPEN_PATHS))) + qs
    elif route == "metrics":
        method = draw(st.sampled_from(["GET", "GET", "POST"]))
        path = "/metrics" + qs
    else:
        method = draw(st.sampled_from(["GET", "POST", "DELETE"]))
        path = draw(st.sampled_from(["/v2", "/v1", "/v2/health", "/v1/queries/a/b/c",
                                     "/v1/events/x"]))
    headers = {}
    valid = draw(st.sampled_from([True, True, True, False]))
    auth = draw(good_auth if valid else bad_auth)
    if auth is not None:
        headers["Authorization"] = auth
    if ctype:
        headers["Content-Type"] = ctype
    if draw(st.booleans()):
        headers["Accept"] = draw(st.sampled_from([MSGPACK_T, JSON_T, "*/*", "text/html"]))
    if body is not None and draw(st.integers(0, 9)) == 9:
        headers["Content-Length"] = str(10**12)        # a lie: more than the limit
    return method, path, headers, body, valid


def send(url, method, path, headers, body):
    """(status, content type, body bytes, open response or None); a stream's response is
    returned unread."""
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers)
    try:
        resp = urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_content_type(), exc.read(), None
    if resp.headers.get_content_type() == "text/event-stream":
        return resp.status, "text/event-stream", b"", resp
    with resp:
        return resp.status, resp.headers.get_content_type(), resp.read(), None


def decode(ctype, payload):
    if ctype == MSGPACK_T:
        return msgpack.unpackb(payload, raw=False)
    assert ctype == JSON_T, ctype
    return json.loads(payload, parse_constant=lambda t: pytest.fail(f"non-JSON token {t}"))


# --------------------------------------------------------------------------- the test

def test_malformed_requests_get_a_4xx_json_error_and_the_cluster_keeps_working(cluster):
    url = cluster.url

    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(requests())
    def one(request):
        method, path, headers, body, valid = request
        try:
            status, ctype, payload, stream = send(url, method, path, headers, body)
        except (ConnectionResetError, BrokenPipeError):
            # the server may close the connection on a lying Content-Length after answering
            assert headers.get("Content-Length") == str(10**12)
            return
        assert status < 500, (status, payload[:300])
        if stream is not None:
            stream.close()
            assert valid and status == 200
            return
        bare = path.split("?")[0]
        if bare in OPEN_PATHS and method == "GET":    # no token asked, no details given
            assert status in (200, 503) and ctype in ("text/html", "text/plain"), status
            return
        if bare == "/metrics" and method == "GET" and valid:
            assert status == 200 and ctype == "text/plain" and b"raycep_" in payload
            return
        if not valid and bare not in OPEN_PATHS:
            assert status == 401, (status, payload[:200])
        data = decode(ctype, payload)
        if status >= 400:
            err = data["error"]
            assert isinstance(err["type"], str) and isinstance(err["message"], str)
            assert "\x1b" not in err["message"] and "Traceback" not in err["message"]
        else:
            assert valid and status in (200, 201)

    one()

    # the cluster still works: a good batch gives exactly the Engine's matches
    client = connect(url, token=TOKEN)
    assert {"pair", "glob", "neg"} <= {q["id"] for q in client.queries()}
    events, ts = [], GOOD_T0
    for i in range(240):
        ts += (0.25, 0.5, 1.0)[i * 7 % 3]
        k = f"g{i * 5 % 4}"
        events.append(Event("ABC"[i * 11 % 3], ts, {"x": i * 3 % 10, "k": k}, key=k))
    for i in range(0, len(events), 60):
        ack = client.send(events[i:i + 60])
        assert ack["bad_rows"] == [] and ack["late"] == 0
    client.advance(events[-1].ts + 100.0)
    engine = Engine(key_attr="k")
    for name, text in QUERIES:
        engine.add_query(text, name=name)
    expected = {name: [] for name, _ in QUERIES}
    for ev in events:
        for m in engine.process(ev):
            expected[m.query].append(match_id(m))
    for m in engine.advance(math.inf):
        expected[m.query].append(match_id(m))
    assert all(expected.values())
    for name, _ in QUERIES:
        got, since = [], 0
        while True:
            page = client.matches(name, since=since)
            got.extend(page.matches)
            if not page.matches:
                break
            since = page.next

        def good(m):
            evs = [e for v in m["events"].values() for e in (v if isinstance(v, list) else [v])]
            return all(e["ts"] >= GOOD_T0 for e in evs)
        mine = [m for m in got if good(m)]
        assert not any(m.get("retracted") for m in mine)
        assert sorted(m["id"] for m in mine) == sorted(expected[name]), name
    status, ctype, payload, _ = send(url, "GET", "/v1/stats", {"Authorization":
                                                               f"bearer {TOKEN}"}, None)
    assert status == 200 and decode(ctype, payload)["gateway"]["events"] >= len(events)
