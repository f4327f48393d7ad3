"""Out-of-order input through the public interfaces: the gateway (InProcessCluster + Client
over HTTP), its JSONL sink, the CLI (``raycep local --disorder-mode``, ``raycep late``)."""
import json
import math

import pytest

from raycep.cep import Engine, Event
from raycep.cep.errors import QueryValidationError
from raycep.cep.match import match_id
from raycep.cep.store.disorder import DisorderSettings
from raycep.gateway import cli
from raycep.gateway.client import connect

from cluster_helpers import http, ids_of, read_all, wait_for

#: a match of a and b holds only while no C of the same key lies between them
GUARD = "PATTERN SEQ(A a, ~C c, B b) WHERE [k] WITHIN 10 seconds"


def ev(t, ts, k=1, **attrs):
    return Event(t, float(ts), {"k": k, **attrs}, key=k, id=f"{t}{ts:g}-{k}")


@pytest.fixture
def make_cluster(make_cluster):
    """The shared factory (conftest) with a minimum slack of 5 by default."""
    def start(registry=None, slack=5.0, mode=None, max_slack=None, **kw):
        return make_cluster(registry_path=registry, mode=mode,
                            disorder=DisorderSettings(min_slack=slack, max_slack=max_slack), **kw)
    return start


def test_late_negated_event_reaches_the_client_as_a_retraction(make_cluster, tmp_path):
    sink = tmp_path / "matches.jsonl"
    cluster = make_cluster(matches_jsonl=str(sink))
    client = connect(cluster.url)
    client.register(GUARD, name="guard")
    stream = client.subscribe("guard")
    client.send([ev("A", 1), ev("B", 4)])
    first = next(stream)
    assert "retracted" not in first and set(first["events"]) == {"a", "b"}
    ack = client.send([ev("C", 2)])                 # 2 behind the clock, slack 5: used
    assert ack["late"] == 0
    retraction = next(stream)
    assert retraction["retracted"] is True and retraction["id"] == first["id"]
    assert retraction["events"] == first["events"]
    page = read_all(client, "guard")
    assert [(m["id"], m.get("retracted", False)) for m in page] == \
        [(first["id"], False), (first["id"], True)]
    assert client.query("guard")["stats"]["retractions"] == 1
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [line.get("retracted", False) for line in lines] == [False, True]
    # the same retraction delivered again (at-least-once) is stored once
    cluster.server.service.put_matches([dict(lines[1])])
    assert len(read_all(client, "guard")) == 2


def test_pessimistic_query_waits_for_the_watermark_and_never_retracts(make_cluster):
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(GUARD, name="opt")
    client.register(GUARD.replace("[k]", "[k] AND a.v >= 0"), name="pes", mode="pessimistic")
    assert client.query("pes")["stats"]["mode"] == "pessimistic"
    assert client.query("opt")["stats"]["mode"] == "optimistic"
    client.send([ev("A", 1, v=1), ev("B", 4, v=1), ev("A", 5, v=1)])
    wait_for(lambda: read_all(client, "opt"), what="the optimistic match")
    assert read_all(client, "pes") == []            # watermark 5 - 5 = 0: b (4) is held
    client.send([ev("C", 2, v=0), ev("B", 8, v=0), ev("X", 20)])   # watermark 15
    wait_for(lambda: read_all(client, "pes"), what="the pessimistic match")
    pes = read_all(client, "pes")
    assert not any(m.get("retracted") for m in pes)
    assert [sorted(e["id"] for e in m["events"].values()) for m in pes] == [["A5-1", "B8-1"]]
    opt = read_all(client, "opt")
    assert [m.get("retracted", False) for m in opt] == [False, True, False]


def test_events_later_than_the_threshold_are_readable_as_late_events(make_cluster, capsys):
    cluster = make_cluster(slack=1.0, max_slack=2.0)
    client = connect(cluster.url)
    client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 10 seconds", name="pair")
    client.send([ev("A", 10), ev("B", 12)])
    ack = client.send([ev("A", 3)])
    assert ack["late"] == 1 and ack["events"] == 1
    page = client.late_events()
    assert len(page.matches) == 1
    late = page.matches[0]
    assert late["late"] is True and late["event"]["id"] == "A3-1"
    assert late["source"] == "client" or late["source"]
    # the actor evicts after each batch (issue 33), so the index floor (the watermark then)
    # may be named first: an event behind it is above its threshold too
    assert "above the threshold 2" in late["reason"] or \
        "older than the events the index still keeps (11)" in late["reason"]
    assert client.stats()["gateway"]["late_events"] == 1
    assert client.late_events(since=page.next).matches == []
    assert [m["events"]["a"]["id"] for m in read_all(client, "pair")] == ["A10-1"]
    assert cli.main(["late", "--gateway", cluster.url]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out.splitlines()[0])["event"]["id"] == "A3-1"
    assert "1 late events" in out.err
    status, _, body = http("GET", cluster.url + "/v1/late?since=0")
    assert status == 200 and body["matches"][0]["id"] == late["id"]


def test_unknown_mode_is_rejected_and_mode_survives_a_restart(make_cluster, tmp_path):
    registry = str(tmp_path / "reg.sqlite")
    cluster = make_cluster(registry=registry)
    client = connect(cluster.url)
    with pytest.raises(QueryValidationError, match="unknown disorder mode 'eager'"):
        client.register(GUARD, name="x", mode="eager")
    assert client.queries() == []
    client.register(GUARD, name="guard", mode="pessimistic")
    cluster.stop()
    again = make_cluster(registry=registry)          # new actors, same registry
    assert connect(again.url).query("guard")["stats"]["mode"] == "pessimistic"


def test_resending_events_is_recognised_after_they_left_the_index(make_cluster):
    cluster = make_cluster(slack=0.0)
    client = connect(cluster.url)
    client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 1 seconds", name="pair")
    events = [ev("AB"[i % 2], i, k=i % 2) for i in range(20_000)]
    for i in range(0, len(events), 2000):
        client.send(events[i:i + 2000])
    before = client.stats()["actors"]
    assert all(a["evicted"] > 1000 for t, a in before.items() if t != "global")
    ack = client.send(events[:1000])
    assert ack["duplicates"] == 1000 and ack["late"] == 0
    after = client.stats()["actors"]
    assert [a["events"] for a in after.values()] == [a["events"] for a in before.values()]


# --------------------------------------------------------------------------- raycep local

def write_events(path, events):
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in events), encoding="utf-8")


def local(tmp_path, capsys, *extra):
    out = tmp_path / "out.jsonl"
    code = cli.main(["local", "--query", GUARD, "--events", str(tmp_path / "ev.jsonl"),
                     "--key", "k", "--out", str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return lines, json.loads(captured.out.splitlines()[-1]), captured.err


def final(lines) -> set:
    live = set()
    for line in lines:
        key = json.dumps(line["events"], sort_keys=True)
        (live.discard if line.get("retracted") else live.add)(key)
    return live


def test_raycep_local_disorder_modes(tmp_path, capsys):
    in_order = [ev("A", 1), ev("B", 3), ev("C", 4), ev("A", 5), ev("C", 6), ev("B", 7),
                ev("A", 8), ev("B", 9)]
    arrival = [in_order[i] for i in (0, 1, 3, 5, 2, 6, 7, 4)]      # C4, C6 arrive late
    write_events(tmp_path / "ev.jsonl", in_order)
    ordered, _, _ = local(tmp_path, capsys)
    write_events(tmp_path / "ev.jsonl", arrival)
    opt, summary, err = local(tmp_path, capsys, "--slack", "5")
    assert any(line.get("retracted") for line in opt)
    retraction = next(line for line in opt if line.get("retracted"))
    assert {k: v for k, v in retraction.items() if k != "retracted"} in opt
    assert summary["retractions"] == sum(1 for line in opt if line.get("retracted"))
    assert final(opt) == final(ordered)
    pes, summary, _ = local(tmp_path, capsys, "--slack", "5", "--disorder-mode", "pessimistic")
    assert summary["retractions"] == 0 and not any(line.get("retracted") for line in pes)
    assert final(pes) == final(ordered) and len(pes) == len(final(ordered))
    assert "out of order" in err


def test_raycep_local_late_out_and_bad_options(tmp_path, capsys):
    write_events(tmp_path / "ev.jsonl", [ev("A", 10), ev("B", 12), ev("A", 1)])
    late_file = tmp_path / "late.jsonl"
    _, summary, err = local(tmp_path, capsys, "--late-out", str(late_file), "--max-slack", "5")
    assert summary["late_events"] == 1
    [late] = [json.loads(line) for line in late_file.read_text().splitlines()]
    assert late["event"]["id"] == "A1-1" and late["late"] is True
    write_events(tmp_path / "ev.jsonl", [ev("A", 10), ev("A", 1)])
    _, _, err = local(tmp_path, capsys, "--max-slack", "5")
    assert '"late": true' in err                      # default: late events on stderr
    code = cli.main(["local", "--query", GUARD, "--events", str(tmp_path / "ev.jsonl"),
                     "--alpha", "0"])
    assert code == 2 and "alpha" in capsys.readouterr().err
    assert cli.main(["local", "--query", GUARD, "--events", str(tmp_path / "ev.jsonl"),
                     "--disorder-mode", "eager"]) == 2


def test_engine_ids_match_gateway_ids_for_retractions():
    """A retraction's id is its match's id (actors.partition.match_id)."""
    eng = Engine(key_attr="k", disorder=DisorderSettings(min_slack=5))
    eng.add_query(GUARD, name="guard")
    out = eng.process(ev("A", 1)) + eng.process(ev("B", 4)) + eng.process(ev("C", 2))
    assert [m.retracted for m in out] == [False, True]
    assert match_id(out[0]) == match_id(out[1])
    assert ids_of([{"id": match_id(m)} for m in out]) == [match_id(out[0])] * 2
    assert eng.advance(math.inf) == []


#: issue 13: a trailing negation, and a trigger that arrives far behind the clock
FAR_NEG = ("PATTERN SEQ(S a, ~S n) WHERE a.vol > 5000 AND n.vol > 5000 "
           "WITHIN 5 seconds")
FAR_ROWS = "type,ts,vol\nS,100,1\nS,1,9000\nS,2,1\nS,200,1\n"


def test_raycep_local_keeps_a_trailing_negation_match_of_a_far_out_of_order_trigger(
        tmp_path, capsys):
    """The report's four rows: the same match unsorted (default optimistic mode) as sorted."""
    (tmp_path / "far.csv").write_text(FAR_ROWS)
    head, *rows = FAR_ROWS.splitlines()
    (tmp_path / "sorted.csv").write_text("\n".join(
        [head] + sorted(rows, key=lambda r: float(r.split(",")[1]))) + "\n")
    outputs = {}
    for name in ("far.csv", "sorted.csv"):
        assert cli.main(["local", "--query", FAR_NEG, "--events", str(tmp_path / name)]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        outputs[name] = lines
    for lines in outputs.values():
        assert [m["events"]["a"]["ts"] for m in lines[:-1]] == [1.0]
        assert lines[-1]["matches"] == 1 and lines[-1]["retractions"] == 0


def test_cluster_keeps_a_trailing_negation_match_of_a_far_out_of_order_trigger(make_cluster):
    cluster = make_cluster(slack=250.0)
    client = connect(cluster.url)
    client.register(FAR_NEG, name="far")
    client.send([Event("S", 100.0, {"vol": 1}, id="r1")])
    client.send([Event("S", 1.0, {"vol": 9000}, id="r2")])
    client.send([Event("S", 2.0, {"vol": 1}, id="r3")])
    client.send([Event("S", 200.0, {"vol": 1}, id="r4")])
    page = read_all(client, "far")
    assert [(m["events"]["a"]["id"], m.get("retracted", False)) for m in page] == \
        [("r2", False)]


@pytest.mark.parametrize("form", ["events", "table", "json", "rows with a bad one"])
def test_an_actor_scores_an_event_behind_another_actors_row_as_one_engine_does(
        make_cluster, form):
    """Rows of one request that come after a later event sent to another actor are out of
    order in one engine fed the request, and their scores set their stream's lateness
    threshold: the gateway tells the actor the stream's time before each such row. Here the
    two small scores of X (one would not do) make the next request's X late in one engine;
    an actor that did not see them (they were in order there) took it. (The minimum slack keeps the watermark,
    hence what the index keeps, behind it: only X's threshold decides.)"""
    import pyarrow as pa
    from raycep.actors.routing import partition_of
    from raycep.cep.io.codec import encode_rows
    k0 = 0
    k1 = next(k for k in range(1, 64) if partition_of(k, 2) != partition_of(k0, 2))

    def e(t, ts, k, i):
        return Event(t, float(ts), {"k": k}, id=f"{t}{i}")
    requests = [[e("Y", 10, k0, 0), e("Y", 2, k0, 1)],
                [e("X", 12, k1, 2), e("X", 11.9, k0, 3), e("X", 11.95, k0, 4)],
                [e("X", 7, k0, 5)]]
    query = "PATTERN SEQ(X a, X b) WHERE [k] WITHIN 100 seconds"
    engine = Engine(key_attr="k", disorder=DisorderSettings(min_slack=4.5))
    engine.add_query(query, name="q")
    for request in requests:
        engine.process_many(request)
    assert [x.event.id for x in engine.late] == ["X5"]          # what one engine does
    cluster = make_cluster(slack=4.5)
    client = connect(cluster.url)
    client.register(query, name="q")
    late = []
    for request in requests:
        columns = {"type": [x.type for x in request], "ts": [x.ts for x in request],
                   "id": [x.id for x in request], "k": [x.attrs["k"] for x in request]}
        if form == "json":                      # POST /v1/events with JSON rows
            rows = [dict(zip(columns, row)) for row in zip(*columns.values())]
            status, _, ack = http("POST", cluster.url + "/v1/events", json.dumps(rows).encode(),
                                  {"Content-Type": "application/json"})
            assert status == 200
        elif form == "rows with a bad one":      # wire rows; the actor refuses the bad one
            rows = [[x.type, x.ts, x.attrs, None, x.id] for x in request]   # (rows after it
            rows.insert(1, ["X", "soon", {"k": k0}, None, "bad"])          # move up)
            status, _, ack = http("POST", cluster.url + "/v1/events",
                                  encode_rows(rows, "wire", f"w{len(late)}"),
                                  {"Content-Type": "application/msgpack"})
            assert status == 200 and len(ack["bad_rows"]) == 1 \
                and ack["bad_rows"][0].startswith("row 1"), ack
        else:
            ack = client.send(pa.table(columns) if form == "table" else request)
        late.append(ack["late"])
    assert late == [0, 0, 1]
