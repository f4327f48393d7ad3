"""A lost node, through the real Ray runtime (marked ``ray``): a Ray cluster of a head and two
worker nodes on this machine (``ray.cluster_utils.Cluster``, each node its own raylet and
processes); the partition actors are spread over the nodes; the worker node running a partition
actor is removed without grace (its raylet and workers killed, as when a pod's node is lost)
while the client sends the sample ticks. Ray restarts the actor on a node that is alive, where
it restores its checkpoint from the shared directory and replays its log; the JSONL sink ends
with exactly ``raycep local``'s matches, each once."""
import json
import time

import pytest
import ray
from ray.cluster_utils import Cluster

from actors.recovery import CheckpointSettings
from gateway.client import connect
from gateway.runtime import RayCluster
from gateway.server.service import GatewaySettings

from test_recovery import QUERIES, local_ids, tick_rows
from test_recovery_ray import settle

pytestmark = pytest.mark.ray


@pytest.fixture()
def nodes():
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="raycep", log_to_driver=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def partition_nodes(client) -> dict:
    """{routing target: Ray node id} of the partition actors, as their stats name it."""
    return {t: a["node"] for t, a in client.stats()["actors"].items()}


def test_actors_are_spread_and_a_lost_node_loses_no_match(nodes, tmp_path):
    cluster, workers = nodes
    rows, events = tick_rows()
    sink = tmp_path / "matches.jsonl"
    settings = GatewaySettings(port=0, registry_path=str(tmp_path / "registry.sqlite"),
                               plan_every=0.5, matches_jsonl=str(sink))
    raycep = RayCluster(2, "symbol", settings, address=cluster.address, checkpoint=
                        CheckpointSettings(str(tmp_path / "checkpoints"), every_events=2_000))
    try:
        client = connect(raycep.start(), retry_for=120.0)
        placed = partition_nodes(client)
        assert len(placed) == 3                               # p0, p1 and the global actor
        assert len(set(placed.values())) >= 2, placed          # spread over the nodes
        worker_ids = {w.node_id: w for w in workers}
        on_workers = {name: node for name, node in placed.items() if node in worker_ids}
        assert on_workers, placed
        victim_actor, victim_node = sorted(on_workers.items())[0]
        for q in QUERIES:
            client.register(q.text, name=q.name)
        batches = [rows[i:i + 500] for i in range(0, len(rows), 500)]
        for n, batch in enumerate(batches, start=1):
            ack = client.send(batch)
            assert ack["events"] == len(batch) and not ack["bad_rows"]
            if n == 15:
                cluster.remove_node(worker_ids[victim_node], allow_graceful=False)
        client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        settle(client)
        stats = client.stats()["actors"]
        after = partition_nodes(client)
    finally:
        raycep.stop()
    assert after[victim_actor] != victim_node                 # restarted on a node alive
    assert stats[victim_actor]["recoveries"] >= 1
    records = [json.loads(line) for line in sink.read_text().splitlines()]
    identities = [(r["id"], bool(r.get("retracted"))) for r in records]
    assert len(identities) == len(set(identities))          # every match id once in the sink
    got = {q.name: set() for q in QUERIES}
    for r in records:
        got[r["query"]].add(r["id"])
    assert got == local_ids(events)                          # == raycep local: nothing lost
