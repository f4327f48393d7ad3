"""Batch registration (issue 35): a query set registered in one call, all or nothing, through
the Python client, the HTTP API and ``raycep query add``; removal in one call; the matches
equal those of the same queries registered one by one; a restarted actor replays the set
from its write-ahead log. In one process (InProcessCluster), over real HTTP."""
import json

import pytest

from raycep.actors.recovery import CheckpointSettings
from raycep.cep.errors import (ConflictError, NotFoundError, QuerySyntaxError,
                               QueryValidationError)
from raycep.gateway import cli
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import GLOBAL_AC, NEG, PAIR, SEQ3, http, ids_of, make_stream, read_all, \
    send_in_slices

SET = f"NAME pair\n{PAIR};\n\nNAME seq3\n{SEQ3};\n-- unnamed: a generated id\n{NEG}\n"
BAD_MIDDLE = [(PAIR, "pair"), ("PATTERN SEQ(A a, B b) WHERE [k] AND z.x > 1 WITHIN 5 s",
                               "broken"), (SEQ3, "seq3")]


def stream(n=300, seed=3):
    return make_stream(n, seed, 5, 0.0, gaps=(0.25, 0.5, 1.0))


def ids(client) -> list:
    return [q["id"] for q in client.queries()]


def test_a_query_file_registers_in_one_call(cluster, client):
    got = client.register_many(SET)
    assert got[:2] == ["pair", "seq3"] and got[2].startswith("q")
    rows = {q["id"]: q for q in client.queries()}
    assert list(rows) == got
    assert all(q["status"] == "running" and q["scope"] == "keyed" for q in rows.values())
    assert rows["seq3"]["text"] == "NAME seq3\n" + SEQ3
    for worker in cluster.workers.values():      # one call per actor, keyed on partitions
        assert set(worker.queries()) == (set(got) if worker.partition != "global" else set())


def test_a_list_with_params_modes_and_a_global_query(client):
    window = "PATTERN SEQ(A a, B b) WHERE [k] WITHIN W seconds"
    above = "PATTERN SEQ(A a, B b) WHERE [k] AND b.x > a.x + D WITHIN 5 seconds"
    got = client.register_many([above, ("NAME two\n" + SEQ3), (window, "w", {"W": 5}),
                                {"text": GLOBAL_AC, "name": "ac", "mode": "pessimistic"}],
                               params={"D": 1})
    assert got[1:] == ["two", "w", "ac"] and got[0].startswith("q")
    rows = {q["id"]: q for q in client.queries()}
    assert rows["w"]["params"] == {"W": 5}            # its own params, not the set's
    assert rows[got[0]]["params"] == {"D": 1}
    assert rows["ac"]["scope"] == "global" and rows["ac"]["stats"]["mode"] == "pessimistic"


def test_a_bad_query_in_the_middle_registers_nothing_and_is_named(client):
    client.register(PAIR, name="before")
    with pytest.raises(QueryValidationError) as info:
        client.register_many(BAD_MIDDLE)
    exc = info.value
    assert exc.index == 2 and exc.query == "broken"
    assert str(exc).startswith("query 'broken' (#2): ") and "'z'" in str(exc)
    assert (exc.line, exc.column) == (1, 37) and "^" in exc.excerpt
    assert ids(client) == ["before"]
    # in a file: the error's line and column are the file's
    text = f"NAME a\n{PAIR};\n\nNAME b\nPATTERN SEQ(A a) WHERE y.x > 1 WITHIN 5 s;\n{SEQ3}"
    with pytest.raises(QueryValidationError) as info:
        client.register_many(text)
    exc = info.value
    assert (exc.index, exc.query, exc.line, exc.column) == (2, "b", 5, 24)
    assert str(exc).startswith("query 'b' (#2, line 4): ")
    # a syntax error in a file: the query's position, unnamed
    with pytest.raises(QuerySyntaxError) as info:
        client.register_many(f"{PAIR};\n{SEQ3} WITHIN 3 s")
    exc = info.value
    assert exc.index == 2 and exc.query is None and exc.line == 4
    assert str(exc).startswith("query #2 (line 2): WITHIN is given twice")
    # a parameter without a value; an unknown mode
    with pytest.raises(QueryValidationError, match=r"^query #2: .*'W'"):
        client.register_many([PAIR, "PATTERN SEQ(A a, B b) WHERE [k] WITHIN W"])
    with pytest.raises(QueryValidationError, match=r"^query 'm' \(#1\): .*mode"):
        client.register_many([(PAIR, "m", None, "eventually")])
    assert ids(client) == ["before"]


def test_names_clashing_in_the_set_or_with_registered_queries(client):
    client.register(PAIR, name="pair")
    with pytest.raises(ConflictError) as info:
        client.register_many([(SEQ3, "seq3"), (NEG, "pair")])
    assert info.value.index == 2 and "'pair' is already registered" in str(info.value)
    with pytest.raises(QueryValidationError, match=r"query 'x' \(#3\): the name 'x' is used "
                                                   r"twice in the set \(also by query #1\)"):
        client.register_many([(SEQ3, "x"), NEG, (PAIR, "x")])
    with pytest.raises(QueryValidationError, match="invalid query name"):
        client.register_many([(SEQ3, "no spaces")])
    with pytest.raises(QueryValidationError, match="the query set is empty"):
        client.register_many([])
    assert ids(client) == ["pair"]


def test_an_actor_that_refuses_the_set_leaves_nothing_registered(cluster, client):
    from unittest import mock
    workers = [w for w in cluster.workers.values() if w.partition != "global"]
    with mock.patch.object(workers[1], "add_queries",
                           side_effect=QueryValidationError("refused")):
        with pytest.raises(QueryValidationError, match="refused"):
            client.register_many(SET)
    assert ids(client) == [] and all(w.queries() == [] for w in workers)
    assert cluster.planner.queries() == []
    assert client.register_many(SET)[:2] == ["pair", "seq3"]    # the names are free again


def test_batch_matches_equal_one_by_one(make_cluster):
    """The same queries, registered as a set in one cluster and one by one in another,
    mid-stream (``since``: both see the events after their registration), give the same
    match ids."""
    events = stream()
    queries = [(PAIR, "pair"), (SEQ3, "seq3"), (NEG, "neg"), (GLOBAL_AC, "ac")]
    found = []
    for batch in (True, False):
        client = connect(make_cluster().url)
        send_in_slices(client, events[:100])
        if batch:
            client.register_many(queries)
        else:
            for text, name in queries:
                client.register(text, name=name)
        send_in_slices(client, events[100:])
        client.advance(events[-1].ts + 100.0)
        found.append({name: sorted(ids_of(read_all(client, name))) for _, name in queries})
    assert found[0] == found[1] and all(found[0].values())


def test_remove_many_is_all_or_none(cluster, client):
    got = client.register_many(SET)
    with pytest.raises(NotFoundError, match="'nope'.*nothing was removed"):
        client.remove_many(["pair", "nope"])
    assert ids(client) == got
    out = client.remove_many(["pair", "seq3"])
    assert [o["id"] for o in out] == ["pair", "seq3"]
    assert ids(client) == got[2:]
    assert all(set(w.queries()) <= {got[2]} for w in cluster.workers.values())
    with pytest.raises(TypeError):
        client.remove_many("pair")


def test_http_query_set_errors_are_4xx_json(cluster):
    url = cluster.url + "/v1/query-set"

    def post(body, path=url):
        return http("POST", path, json.dumps(body).encode(),
                    {"Content-Type": "application/json"})

    status, _, out = post({"queries": [PAIR, {"text": SEQ3, "name": "s"}]})
    assert status == 201 and [r["id"] for r in out["registered"]][1] == "s"
    for body, code, words in [
            ({"text": SET, "queries": [PAIR]}, 400, "either 'text'"),
            ({}, 400, "either 'text'"),
            ({"queries": "PATTERN"}, 400, "must be an array"),
            ({"queries": [PAIR, 7]}, 400, "query #2: expected query text or an object"),
            ({"queries": [{"text": PAIR, "when": 1}]}, 400, "unknown field 'when'"),
            ({"queries": [{"name": "x"}]}, 400, "missing field 'text'"),
            ({"queries": [PAIR], "extra": 1}, 400, "unknown field 'extra'"),
            ({"text": "PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 s;\nPATTERN SEQ("}, 400,
             "query #2 (line 2)"),
            ({"queries": [{"text": PAIR, "name": "s"}]}, 409, "already registered")]:
        status, _, out = post(body)
        assert status == code and words in out["error"]["message"], (body, out)
    status, _, out = post({"queries": [BAD_MIDDLE[0][0], BAD_MIDDLE[1][0]]})
    assert status == 400 and out["error"]["index"] == 2 and out["error"]["line"] == 1
    status, _, out = post({"ids": ["s", "gone"]}, url + "/remove")
    assert status == 404 and "'gone'" in out["error"]["message"]
    status, _, out = post({"ids": ["s"]}, url + "/remove")
    assert status == 200 and out["removed"][0]["id"] == "s"
    assert len(connect(cluster.url).queries()) == 1


def test_cli_query_add_and_rm_use_one_call(cluster, client, tmp_path, capsys, monkeypatch):
    from unittest import mock
    path = tmp_path / "set.cep"
    path.write_text(SET, encoding="utf-8")
    gw = ["--gateway", cluster.url]
    with mock.patch("raycep.gateway.client.Client.register",
                    side_effect=AssertionError("one by one")):
        assert cli.main(["query", "add", str(path), *gw]) == 0
    out = capsys.readouterr().out
    assert "registered pair" in out and "registered seq3" in out and len(ids(client)) == 3
    path.write_text(f"NAME p2\n{PAIR};\nNAME bad\nPATTERN SEQ(A a, B b) WHERE [k] WITHIN W",
                    encoding="utf-8")
    assert cli.main(["query", "add", str(path), *gw]) == 2
    err = capsys.readouterr().err
    assert "query 'bad' (#2, line 3)" in err and "nothing was registered" in err
    assert len(ids(client)) == 3
    assert cli.main(["query", "rm", "pair", "nope", *gw]) != 0
    assert "'nope'" in capsys.readouterr().err and len(ids(client)) == 3
    assert cli.main(["query", "rm", "pair", "seq3", *gw]) == 0
    assert "removed pair" in capsys.readouterr().out and len(ids(client)) == 1


def test_a_restarted_actor_replays_the_set_from_its_log(tmp_path):
    """``add_queries`` is one logged change: an actor restarted from its checkpoint directory
    has the set again; removal in one call is logged too."""
    cluster = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None,
                                                       plan_every=0),
                               checkpoint=CheckpointSettings(str(tmp_path / "ck")))
    cluster.start()
    try:
        client = connect(cluster.url)
        send_in_slices(client, stream(100, seed=9))
        got = client.register_many(SET)
        worker = cluster.restart_partition(0)
        assert worker.queries() == got and worker.recovery["replayed"] >= 1
        client.remove_many(got[:2])
        worker = cluster.restart_partition(1)
        assert worker.queries() == got[2:]
    finally:
        cluster.stop()
