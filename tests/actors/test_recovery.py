"""A crashed partition actor comes back with its state (actors/recovery.py): checkpoint plus
write-ahead log, through the public interfaces (InProcessCluster + Client over HTTP, the JSONL
sink), and the checkpoint store's own guarantees (torn log record, another cluster's state)."""
import json
import os
import pathlib
import shutil

import pytest

from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.actors.recovery import CheckpointSettings, DurableLog, claim
from raycep.actors.state_format import WAL_KIND, header, read_records, record
from raycep.cep.errors import RecoveryError
from raycep.cep.io.codec import encode_batch
from raycep.cep.io.sources import read_events
from raycep.cep.lang.parser import parse_queries
from raycep.cep.runtime.engine import reference_match_ids
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
TICKS = ROOT / "examples" / "ticks.csv"
QUERIES = parse_queries((ROOT / "examples" / "queries.cep").read_text())


def local_ids(events) -> dict:
    """{query: match ids} of the sample queries over ``events``, as raycep local finds them."""
    return reference_match_ids(QUERIES, events, "symbol")


def sink_records(path) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def sink_ids(records) -> dict:
    """{query: match ids} of the sink's records, having checked that every match id (and every
    retraction) is there once."""
    identities = [(r["id"], bool(r.get("retracted"))) for r in records]
    assert len(identities) == len(set(identities))      # every match id once in the sink
    got = {q.name: set() for q in QUERIES}
    for r in records:
        got[r["query"]].add(r["id"])
    return got


def run_cluster(tmp_path, rows, crash_after=(), checkpoint_every=1_000, restart_gateway=()):
    """The sample queries on a 2-partition InProcessCluster with checkpoints and a JSONL sink;
    ``rows`` sent with the client in batches of 500; partition 0 crashes (and is restarted
    as Ray restarts it) after each batch number in ``crash_after``. Returns (sink records,
    the actors' stats)."""
    sink = tmp_path / "matches.jsonl"
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "registry.sqlite"),
                               plan_every=0, matches_jsonl=str(sink))
    cluster = InProcessCluster(2, "symbol", settings, checkpoint=CheckpointSettings(
        str(tmp_path / "checkpoints"), every_events=checkpoint_every))
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        for n, start in enumerate(range(0, len(rows), 500), start=1):
            ack = client.send(rows[start:start + 500])
            assert ack["events"] == len(rows[start:start + 500]) and not ack["bad_rows"]
            if n in crash_after:
                cluster.restart_partition(0)
            if n in restart_gateway:
                client = connect(cluster.restart_gateway())
        client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        stats = client.stats()["actors"]
    finally:
        cluster.stop()
    return sink_records(sink), stats


def tick_rows(limit=None) -> list:
    events = list(read_events(TICKS, key_attr="symbol"))[:limit]
    return [{"type": e.type, "ts": e.ts, **e.attrs} for e in events], events


def test_a_crashed_partition_comes_back_and_no_match_is_lost_or_doubled(tmp_path):
    rows, events = tick_rows()
    records, stats = run_cluster(tmp_path, rows, crash_after=(15, 16, 31))
    got = sink_ids(records)
    expected = local_ids(events)
    assert sum(map(len, expected.values())) > 100
    assert got == expected                               # == raycep local, nothing lost
    assert stats["0"]["recoveries"] == 3 and stats["1"]["recoveries"] == 0
    assert stats["0"]["recovery"]["from_checkpoint"]
    assert stats["0"]["checkpoint"]["last_checkpoint"]["seq"] > 0
    assert stats["0"]["events"] + stats["1"]["events"] == len(events)


def test_a_restarted_whole_cluster_continues_from_its_checkpoints(tmp_path):
    """The same checkpoint directory and registry: a new cluster (all actors new) continues
    with the events and pending matches of the first one."""
    rows, events = tick_rows(8_000)
    half = 4_000
    settings = dict(port=0, registry_path=str(tmp_path / "registry.sqlite"), plan_every=0,
                    matches_jsonl=str(tmp_path / "matches.jsonl"))
    checkpoint = CheckpointSettings(str(tmp_path / "checkpoints"), every_events=700)
    for part, start in ((rows[:half], True), (rows[half:], False)):
        cluster = InProcessCluster(2, "symbol", GatewaySettings(**settings),
                                   checkpoint=checkpoint)
        try:
            client = connect(cluster.start())
            if start:
                for q in QUERIES:
                    client.register(q.text, name=q.name)
            for i in range(0, len(part), 500):
                client.send(part[i:i + 500])
            if not start:
                client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        finally:
            cluster.stop()
    assert sink_ids(sink_records(tmp_path / "matches.jsonl")) == local_ids(events)


def test_a_torn_last_log_record_is_cut_off_and_the_rest_replayed(tmp_path):
    _, events = tick_rows(3_000)
    batches = [encode_batch(events[i:i + 500], "s", f"b{i}") for i in range(0, 3_000, 500)]
    options = dict(worker=WorkerSettings(outbox=True),
                   checkpoint=CheckpointSettings(str(tmp_path), every_events=10**9))
    worker = PartitionWorker("p0", "symbol", **options)
    for q in QUERIES:
        worker.add_query(q.name, q)
    for b in batches[:4]:
        worker.ingest(b)
    wal = tmp_path / "p0" / "wal"
    size = wal.stat().st_size
    with open(wal, "ab") as f:                     # a record cut short by the crash
        f.write(b"\x40\x00\x00\x00\x01\x02\x03\x04partial")
    again = PartitionWorker("p0", "symbol", **options)
    assert again.recovery["replayed"] == 4 + len(QUERIES)
    assert not again.recovery["from_checkpoint"]
    assert again.queries() == [q.name for q in QUERIES]
    assert again.stats()["events"] == 2_000
    assert again.ingest(batches[3])["redelivered"]          # remembered: not applied twice
    assert list(again.outbox) == list(worker.outbox)
    assert wal.stat().st_size == 0 or wal.stat().st_size <= size   # cut, then checkpointed


def test_another_clusters_state_is_refused_with_a_clear_error(tmp_path):
    claim(str(tmp_path), 2, "symbol")
    claim(str(tmp_path), 2, "symbol")                    # the same cluster again: fine
    with pytest.raises(RecoveryError, match=r"2 partitions keyed by 'symbol' \(256 key groups\); "
                                            r"this one has 3"):
        claim(str(tmp_path), 3, "symbol")
    with pytest.raises(RecoveryError, match=r"\(256 key groups\); this one has 2 keyed by "
                                            r"'symbol' \(64 key groups\)"):
        claim(str(tmp_path), 2, "symbol", 64)
    # a directory of before key groups (its manifest names none) routes keys elsewhere
    (tmp_path / "cluster.json").write_text('{"partitions": 2, "key": "symbol"}')
    with pytest.raises(RecoveryError, match=r"\(no key groups\)"):
        claim(str(tmp_path), 2, "symbol")
    claim(str(tmp_path), 3, "symbol", force=True)          # a rescale marks it
    claim(str(tmp_path), 3, "symbol")
    log = DurableLog(str(tmp_path), "p1")
    log.checkpoint({"x": 1})
    os.rename(tmp_path / "p1", tmp_path / "p0")
    with pytest.raises(RecoveryError, match="holds the state of partition 'p1', not 'p0'"):
        DurableLog(str(tmp_path), "p0").load()


def test_serve_refuses_a_checkpoint_dir_of_another_shape(tmp_path, capsys):
    from raycep.gateway import cli
    claim(str(tmp_path / "ck"), 3, "symbol")           # keyed otherwise: routes elsewhere
    status = cli.main(["serve", "--registry", str(tmp_path / "r.sqlite"), "--checkpoint-dir",
                       str(tmp_path / "ck"), "--partitions", "2", "--port", "0"])
    assert status == 2
    assert "--checkpoint-dir" in capsys.readouterr().err


def test_a_batch_sent_again_after_a_gateway_and_actor_restart_is_not_applied_twice(tmp_path):
    """What Client.send does when its request failed: the same batch (same id) again; the
    actors recognise it, also after the gateway and a partition actor were restarted."""
    from cluster_helpers import http
    _, events = tick_rows(2_000)
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "registry.sqlite"),
                               plan_every=0)
    cluster = InProcessCluster(2, "symbol", settings, checkpoint=CheckpointSettings(
        str(tmp_path / "checkpoints"), every_events=500))
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        batch = encode_batch(events, "producer-1", "batch-7")
        post = {"Content-Type": "application/msgpack"}
        status, _, first = http("POST", cluster.url + "/v1/events", batch, post)
        assert status == 200 and first["redelivered"] == 0
        cluster.restart_partition(0)
        client = connect(cluster.restart_gateway())
        status, _, again = http("POST", cluster.url + "/v1/events", batch, post)
        assert status == 200 and again["redelivered"] == len(first["partitions"]) == 2
        assert sum(again["partitions"].values()) == 0 and again["matches"] == 0
        actors = client.stats()["actors"]
        assert actors["0"]["events"] + actors["1"]["events"] == 2_000
        assert actors["0"]["recoveries"] == 1
    finally:
        cluster.stop()


def test_a_restarted_planner_gets_the_queries_again_and_its_plans_are_installed(tmp_path):
    from raycep.planner.service import PlannerService
    rows, _ = tick_rows(3_000)
    cluster = InProcessCluster(2, "symbol", GatewaySettings(port=0, registry_path=None,
                                                            plan_every=0))
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        client.send(rows[:1_500])
        service = cluster.server.service
        cluster._run(service.plan_round())
        before = {q["id"]: q["plan"]["version"] for q in client.queries()}
        assert all(v >= 1 for v in before.values())
        service.planner.obj = PlannerService()          # the planner restarted: no state
        client.send(rows[1_500:])
        installed = cluster._run(service.plan_round())   # registers again, then plans
        assert set(service.planner.obj.queries()) == {q.name for q in QUERIES}
        assert installed and all(p["version"] > before[q] for q, p in installed.items())
        after = {q["id"]: q["plan"]["version"] for q in client.queries()}
        assert all(after[q] == installed[q]["version"] for q in installed)
    finally:
        cluster.stop()


def test_client_drained_waits_until_the_actors_handed_over_their_matches(tmp_path):
    """Client.drained: True once every actor's outbox is empty, i.e. each match the actors
    found is in the gateway's store (read back through the API)."""
    _, events = tick_rows(3_000)
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "registry.sqlite"),
                               plan_every=0)
    cluster = InProcessCluster(2, "symbol", settings)
    try:
        client = connect(cluster.start())
        for q in QUERIES:
            client.register(q.text, name=q.name)
        client.send(events)
        client.advance(max(e.ts for e in events) + 100.0, force=True)
        assert client.drained(30.0)
        assert all(not a.get("outbox") for a in client.stats()["actors"].values())
        stored = {q.name: {m["id"] for m in client.matches(q.name, limit=10_000).matches}
                  for q in QUERIES}
    finally:
        cluster.stop()
    assert stored == local_ids(events)


def test_the_log_keeps_bulk_matches_by_identity_and_a_replay_restores_them_in_order(tmp_path):
    """The write-ahead log keeps a record that replaying gives again (a match found in bulk)
    as its identity, not its text: the log is a fraction of the records' size, and a
    restarted worker's outbox holds the same records in the same order; a log naming a
    record the replay does not give is refused with a RecoveryError."""
    _, events = tick_rows(3_000)
    batches = [encode_batch(events[i:i + 500], "s", f"b{i}", 2) for i in range(0, 3_000, 500)]
    options = dict(worker=WorkerSettings(outbox=True),
                   checkpoint=CheckpointSettings(str(tmp_path), every_events=10**9))
    worker = PartitionWorker("p0", "symbol", **options)
    bulk = [q for q in QUERIES if q.name != "rally"]    # (Kleene: evaluated per trigger)
    for q in bulk:
        worker.add_query(q.name, q)
    for b in batches:
        worker.ingest(b)
    records = list(worker.outbox)
    assert len(records) > 100
    wal = tmp_path / "p0" / "wal"
    logged, _ = read_records(str(wal), WAL_KIND)
    outputs = [x for r in logged if r[1] == "ingest" for x in r[3]]
    assert len(outputs) == len(records)
    assert all(isinstance(x, str) for x in outputs)             # column batches: all in bulk
    assert sum(map(len, outputs)) < sum(map(len, records)) / 5
    # a copy whose log names a match its replay does not give: refused, not guessed
    shutil.copytree(tmp_path / "p0", tmp_path / "bad" / "p0")
    change = next(r for r in logged if r[1] == "ingest" and r[3])
    change[3][0] = "0" * 24
    (tmp_path / "bad" / "p0" / "wal").write_bytes(header(WAL_KIND) +
                                                   b"".join(map(record, logged)))
    again = PartitionWorker("p0", "symbol", **options)
    assert again.recovery["replayed"] == len(batches) + len(bulk)
    assert list(again.outbox) == records
    with pytest.raises(RecoveryError, match="did not give record '0+'"):
        PartitionWorker("p0", "symbol", worker=WorkerSettings(outbox=True),
                        checkpoint=CheckpointSettings(str(tmp_path / "bad")))
