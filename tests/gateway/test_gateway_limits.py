"""Client mistakes at the gateway's HTTP API (issue 13): every one is a 4xx with the JSON
error body, never a 5xx: body size and depth limits, fields of the wrong type, the maximum
window, the bearer scheme, strict JSON replies, clean error messages, the advance guard, and
the CLI's ``raycep advance`` and all-or-nothing ``query add``. Random malformed requests are
thrown at it in test_gateway_http_fuzz.py."""
import json
import math
import urllib.error
import urllib.request
from http.client import HTTPConnection

import msgpack
import pytest

from raycep.cep import Event
from raycep.cep.errors import GatewayError, IngestError, QueryValidationError
from raycep.gateway import cli
from raycep.gateway.client import connect

from cluster_helpers import NEG, PAIR, SEQ3, read_all


def strict(payload: bytes):
    """Parse a reply as strict JSON (NaN / Infinity tokens fail)."""
    def refuse(token):
        raise AssertionError(f"non-JSON token {token} in {payload[:200]!r}")
    return json.loads(payload, parse_constant=refuse)


def raw(method, url, body=None, headers=None):
    """(status, headers, body bytes) of a raw request."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def post_json(url, body: bytes):
    status, _, payload = raw("POST", url, body, {"Content-Type": "application/json"})
    return status, strict(payload)


def test_a_body_over_the_size_limit_gets_413_naming_the_limit(make_cluster):
    cluster = make_cluster(max_body_bytes=2000)
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    big = json.dumps([{"type": "A", "ts": i, "k": "x"} for i in range(100)]).encode()
    assert len(big) > 2000
    status, headers, payload = raw("POST", cluster.url + "/v1/events", big,
                                   {"Content-Type": "application/json"})
    err = strict(payload)["error"]
    assert status == 413 and headers.get_content_type() == "application/json"
    assert "2000 bytes" in err["message"] and "--max-body-bytes" in err["message"]
    # without a Content-Length (chunked): aiohttp's own limit, answered the same way
    host, port = cluster.url.rsplit("/", 1)[1].split(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/events", body=iter([big[:1500], big[1500:]]),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    assert resp.status == 413 and "2000 bytes" in strict(resp.read())["error"]["message"]
    conn.close()
    # the client gets the error with its status; nothing was ingested
    with pytest.raises(GatewayError, match="2000 bytes") as exc:
        client.send([Event("A", float(i), {"k": "x", "pad": "y" * 50}, key="x")
                     for i in range(100)])
    assert exc.value.status == 413
    assert client.stats()["gateway"]["events"] == 0
    ack = client.send([Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"},
                                                                   key="x")])
    assert ack["matches"] == 1


def test_a_body_nested_deeper_than_the_limit_gets_400_naming_it(make_cluster):
    cluster = make_cluster(max_depth=6)
    url = cluster.url

    def nested(depth):                  # a list nested ``depth`` deep
        value = []
        for _ in range(depth - 1):
            value = [value]
        return value

    # {"events": [{..., "v": <depth 3>}]}: 3 + 3 = 6 levels is the limit
    row = {"type": "A", "ts": 1.0, "k": "x"}
    ok = json.dumps({"events": [dict(row, v=nested(3))]}).encode()
    status, body = post_json(url + "/v1/events", ok)
    assert status == 200 and body["events"] == 1
    for deep in (json.dumps({"events": [dict(row, ts=2.0, v=nested(4))]}).encode(),
                 b"[" * 100_000 + b"]" * 100_000):        # beyond the decoder's own stack
        status, body = post_json(url + "/v1/events", deep)
        assert status == 400
        assert "6 levels" in body["error"]["message"]
        assert "--max-depth" in body["error"]["message"]
    for deep in (msgpack.packb({"text": PAIR, "params": {"W": nested(6)}}),
                 b"\x91" * 100_000 + b"\x90"):
        status, _, payload = raw("POST", url + "/v1/queries", deep,
                                 {"Content-Type": "application/msgpack"})
        assert status == 400 and "6 levels" in strict(payload)["error"]["message"]
    # a msgpack event batch is checked before it is handed on
    batch = msgpack.packb({"schema_version": 1, "source": "s", "batch_id": "b",
                           "rows": [["A", 3.0, {"k": "x", "v": nested(4)}, "x"]]})
    status, _, payload = raw("POST", url + "/v1/events", batch,
                             {"Content-Type": "application/msgpack"})
    assert status == 400 and "6 levels" in strict(payload)["error"]["message"]
    status, _, payload = raw("POST", url + "/v1/events", b"\xc1\xc1",
                             {"Content-Type": "application/msgpack"})
    assert status == 400 and "msgpack" in strict(payload)["error"]["message"]
    assert connect(url).stats()["gateway"]["events"] == 1


def test_fields_of_the_wrong_json_type_are_named(client, cluster):
    url = cluster.url + "/v1/queries"
    cases = [
        ({"text": 5}, "text must be a string, got int"),
        ({"text": ["PATTERN"]}, "text must be a string, got array"),
        ({"text": PAIR, "name": 5}, "name must be a string, got int"),
        ({"text": PAIR, "mode": True}, "mode must be a string"),
        ({"text": PAIR, "params": [1]}, "params must be a mapping"),
        ({"text": PAIR, "params": {"W": [1]}},
         "parameter 'W' must be a number, a string or a boolean, got array"),
        ({"text": PAIR, "params": {"W": None}}, "parameter 'W'"),
        ({"text": PAIR, "params": {"W": 10**400}}, "parameter 'W' must be a finite number"),
        ({"txt": PAIR}, "unknown field 'txt'"),
        ({}, "missing field 'text'"),
        ([PAIR], "expected a JSON object"),
    ]
    cases.append((b'{"text": "PATTERN SEQ(A a, B b) WITHIN W", "params": {"W": 1e999}}',
                  "parameter 'W' must be a finite number"))
    for body, message in cases:
        status, reply = post_json(url, body if isinstance(body, bytes) else
                                  json.dumps(body).encode())
        assert status == 400, body
        assert message in reply["error"]["message"], (body, reply)
    for token in (b"NaN", b"Infinity", b"-Infinity"):
        status, reply = post_json(url, b'{"text": "%s", "params": {"W": %s}}'
                                  % (PAIR.encode(), token))
        assert status == 400 and token.decode() in reply["error"]["message"]
    # the Python client (msgpack) gets the same errors
    with pytest.raises(QueryValidationError, match="parameter 'lim' must be a finite"):
        client.register("PATTERN SEQ(A a, B b) WHERE a.x > lim WITHIN 5 seconds",
                        params={"lim": math.nan})
    with pytest.raises(TypeError, match="got bytes"):     # refused before it is sent
        client.register(PAIR.encode())
    assert client.queries() == []
    # bad query-string arguments
    for args in ("since=abc", "limit=-1", "since=99999999999999999999999", "limit=1.5"):
        status, _, payload = raw("GET", cluster.url + "/v1/late?" + args)
        assert status == 400 and "must be an integer" in strict(payload)["error"]["message"]
    # unknown routes and methods: JSON too
    status, headers, payload = raw("PUT", cluster.url + "/v1/health")
    assert status == 405 and "PUT" in strict(payload)["error"]["message"]
    assert "GET" in headers["Allow"]
    status, _, payload = raw("GET", cluster.url + "/v2/nothing")
    assert status == 404 and strict(payload)["error"]["type"] == "NotFoundError"


def test_a_window_above_the_maximum_is_refused_naming_it(make_cluster):
    client = connect(make_cluster(max_window=120).url)
    client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 2 minutes", name="ok")
    for text, params in (("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 121 seconds", None),
                         ("PATTERN SEQ(A a, B b) WHERE [k] WITHIN W", {"W": 1e300}),
                         ("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 10000 days", None)):
        with pytest.raises(QueryValidationError, match="maximum of 120 seconds") as exc:
            client.register(text, params=params)
        assert "--max-window" in str(exc.value)
    assert [q["id"] for q in client.queries()] == ["ok"]


def test_the_bearer_scheme_is_case_insensitive(make_cluster):
    url = make_cluster(token="s3cret").url
    for header in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"):
        status, _, payload = raw("GET", url + "/v1/health", headers={"Authorization": header})
        assert status == 200 and strict(payload)["status"] == "ok", header
    for header in ("Bearer s3cre", "Bearer s3cretx", "Basic s3cret", "s3cret", "Bearer",
                   "Bearers3cret", "bearer S3CRET"):
        status, headers, payload = raw("GET", url + "/v1/health",
                                       headers={"Authorization": header})
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer", header
        assert strict(payload)["error"]["type"] == "AuthenticationError"


def test_replies_are_strict_json_non_finite_floats_are_null(client, cluster):
    status, _, payload = raw("GET", cluster.url + "/v1/stats")
    actors = strict(payload)["actors"]
    assert status == 200 and b"Infinity" not in payload
    # no event yet: every actor's watermark is -inf, written as null (msgpack keeps the float)
    assert all(a["disorder"]["watermark"] is None for a in actors.values())
    assert all(a["disorder"]["watermark"] == -math.inf
               for a in client.stats()["actors"].values())
    client.register(NEG, name="neg")
    client.send([Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x")])
    client.advance(50.0)
    status, _, payload = raw("GET", cluster.url + "/v1/stats")
    assert status == 200 and b"Infinity" not in payload and b"NaN" not in payload
    assert strict(payload)["actors"]["0"]["disorder"]["watermark"] > 50.0
    status, _, payload = raw("GET", cluster.url + "/v1/queries/neg")
    assert status == 200 and strict(payload)["matches"]["total"] == 1


def test_errors_carry_no_colour_codes_or_tracebacks(cluster, client, monkeypatch):
    from raycep.gateway.server.messages import short_reason
    ray_text = ("\x1b[36mray::PartitionWorker.ingest()\x1b[39m (pid=1, ip=10.0.0.1)\n"
                '  File "actors/partition.py", line 3, in ingest\n'
                "TypeError: unhashable type: 'dict'")

    def broken(*args):
        raise RuntimeError(ray_text)
    monkeypatch.setattr(cluster.workers[0], "stats", broken)
    status, _, payload = raw("GET", cluster.url + "/v1/stats")
    err = strict(payload)["error"]
    assert status == 503 and err["type"] == "UnavailableError"
    assert err["message"] == ("partition actor 0 is unreachable (stats): RuntimeError: "
                              "TypeError: unhashable type: 'dict'")

    class RayLike(Exception):             # Ray's RayTaskError keeps the remote error as cause
        def __init__(self, cause):
            super().__init__(ray_text)
            self.cause = cause
    assert short_reason(RayLike(KeyError("k1"))) == "KeyError: 'k1'"
    assert short_reason(RuntimeError("\x1b[31mThe actor died\x1b[0m\n\tpid: 7")) == \
        "RuntimeError: The actor died"
    # anything else that escapes a handler: a 500 JSON body with a generic message
    monkeypatch.setattr(cluster.server.service, "health", broken)
    status, headers, payload = raw("GET", cluster.url + "/v1/health")
    err = strict(payload)["error"]
    assert status == 500 and headers.get_content_type() == "application/json"
    assert "internal error" in err["message"] and "Traceback" not in err["message"]
    assert "unhashable" not in err["message"]


def test_advance_refuses_non_finite_and_far_future_watermarks(make_cluster):
    cluster = make_cluster(max_advance_ahead=1000)
    url = cluster.url
    client = connect(url)
    client.register(NEG, name="neg")
    with pytest.raises(IngestError, match="no event seen yet"):
        client.advance(5.0)
    base = 20_000.0
    client.send([Event("A", base + 1, {"k": "x"}, key="x"),
                 Event("B", base + 2, {"k": "x"}, key="x")])
    # non-finite: refused by the client before sending, and by the gateway
    for w in (math.inf, -math.inf, math.nan, "5", None, True):
        with pytest.raises(IngestError, match="finite number"):
            client.advance(w)
    for body in (b'{"watermark": Infinity}', b'{"watermark": NaN}', b'{"watermark": 1e999}',
                 b'{"watermark": -1e999}', b'{"watermark": "5"}', b'{"watermark": null}',
                 b'{"watermark": 10%s}' % (b"0" * 400), b"{}", b'{"w": 1}',
                 b'{"watermark": 1, "force": "yes"}'):
        status, reply = post_json(url + "/v1/advance", body)
        assert status == 400 and reply["error"]["type"] == "IngestError", body
    status, _, payload = raw("POST", url + "/v1/advance",
                             msgpack.packb({"watermark": math.inf}),
                             {"Content-Type": "application/msgpack"})
    assert status == 400 and "finite" in strict(payload)["error"]["message"]
    # far ahead of the latest event time (20002): refused, naming the bound; nothing changes
    with pytest.raises(IngestError, match="more than 1000 seconds ahead") as exc:
        client.advance(10**9)
    assert "--max-advance-ahead" in str(exc.value) and "20002" in str(exc.value)
    client.send([Event("A", base + 3, {"k": "y"}, key="y"),
                 Event("B", base + 4, {"k": "y"}, key="y")])
    assert client.stats()["gateway"]["events"] == 4
    assert sum(a["late_events"] for a in client.stats()["actors"].values()) == 0
    # within the bound: accepted, and releases both deferred matches
    out = client.advance(base + 4 + 999)
    assert out["matches"] == 2 and len(read_all(client, "neg")) == 2
    # forced: accepted; later events are then late
    assert client.advance(10**9, force=True)["watermark"] == 1e9
    ack = client.send([Event("A", base + 5, {"k": "z"}, key="z")])
    assert ack["late"] == 1


def test_cli_advance(cluster, client, capsys, monkeypatch):
    monkeypatch.setenv("RAYCEP_GATEWAY", cluster.url)
    client.register(NEG, name="neg")
    client.send([Event("A", 1.0, {"k": "x"}, key="x"), Event("B", 2.0, {"k": "x"}, key="x")])
    assert cli.main(["advance", "100"]) == 0
    assert "1 deferred matches released" in capsys.readouterr().out
    assert len(read_all(client, "neg")) == 1
    assert cli.main(["advance", "1e9"]) == 2
    err = capsys.readouterr().err
    assert "--max-advance-ahead" in err and "--force" in err and "Traceback" not in err
    for bad in ("inf", "nan", "1e999", "soon"):
        assert cli.main(["advance", bad]) == 2
        assert "finite number" in capsys.readouterr().err
    assert cli.main(["advance", "1e9", "--force"]) == 0
    assert "advanced the watermark to 1e+09" in capsys.readouterr().out


def test_cli_query_add_is_all_or_nothing(make_cluster, tmp_path, capsys):
    cluster = make_cluster(max_window=60)
    client = connect(cluster.url)
    client.register(PAIR, name="pair")
    gw = ["--gateway", cluster.url]

    def add(text):
        path = tmp_path / "q.cep"
        path.write_text(text, encoding="utf-8")
        status = cli.main(["query", "add", str(path), *gw])
        return status, capsys.readouterr()

    def ids():
        return [q["id"] for q in client.queries()]

    # a name already registered: nothing registered, the query named by its NAME
    status, out = add(f"NAME a\n{SEQ3};\nNAME pair\n{PAIR};\n{NEG}\n")
    assert status == 2 and out.out == ""
    assert "query 'pair' (#2, line 5): a query named 'pair' is already registered" in out.err
    assert "nothing was registered" in out.err and ids() == ["pair"]
    # a query that is not valid: named; an unnamed one is "query #k"
    status, out = add(f"NAME a\n{SEQ3};\nNAME b\nPATTERN SEQ(A a) WHERE z.x > 1 "
                      f"WITHIN 5 seconds;\nPATTERN SEQ(A a) WHERE y.x > 1 WITHIN 5 seconds")
    assert status == 2 and "query 'b': " in out.err and "'z'" in out.err
    assert ids() == ["pair"]
    status, out = add(f"NAME a\n{SEQ3};\nPATTERN SEQ(A a) WHERE y.x > 1 WITHIN 5 seconds")
    assert status == 2 and "query #2: " in out.err and "'y'" in out.err
    # one that parses but does not compile (a parameter without a value)
    status, out = add(f"NAME a\n{SEQ3};\nNAME c\nPATTERN SEQ(A a, B b) WITHIN W")
    assert status == 2 and "query 'c' (#2, line 5): " in out.err and "'W'" in out.err
    assert "nothing was registered" in out.err and ids() == ["pair"]
    # the same name twice in the file
    status, out = add(f"NAME a\n{SEQ3};\nNAME a\n{NEG}")
    assert status == 2 and "'a' is used twice" in out.err and ids() == ["pair"]
    # the gateway refuses the second (its window is above --max-window): the set is
    # checked whole before any query is registered (one request)
    status, out = add(f"NAME a\n{SEQ3};\nNAME big\nPATTERN SEQ(A a, B b) WHERE [k] "
                      f"WITHIN 10 minutes")
    assert status == 2 and "query 'big' (#2, line 5): " in out.err
    assert "maximum of 60 seconds" in out.err and "nothing was registered" in out.err
    assert ids() == ["pair"]
    # all good: all registered
    status, out = add(f"NAME a\n{SEQ3};\n{NEG}")
    assert status == 0 and "registered a" in out.out and ids()[:2] == ["pair", "a"]
    assert len(ids()) == 3


def test_a_control_character_in_a_path_is_escaped_in_the_error(cluster):
    """Found by the fuzz test: a stray ESC in the path was echoed into the 404 message (it
    is not a whole ANSI sequence, so stripping those let it through)."""
    status, _, payload = raw("GET", cluster.url + "/v1/queries/%1B%7B")
    err = strict(payload)["error"]
    assert status == 404 and "\x1b" not in err["message"]
    assert "/v1/queries/\\x1b{" in err["message"]
