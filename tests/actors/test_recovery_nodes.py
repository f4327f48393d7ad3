"""A lost node, through the real Ray runtime (marked ``ray``): a Ray cluster of a head and two
worker nodes on this machine (``ray.cluster_utils.Cluster``, each node its own raylet and
processes), the second joining while raycep starts (it waits for it); the partition actors are
spread over the workers; the worker node running partition actor 0 is removed without grace
(its raylet and workers killed, as when a pod's node is lost)
while the client sends the sample ticks. Ray restarts the actor on a node that is alive, where
it restores its checkpoint from the shared directory and replays its log; the JSONL sink ends
with exactly ``raycep local``'s matches, each once."""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
from ray.cluster_utils import Cluster

from raycep.gateway.client import connect

from test_recovery import QUERIES, local_ids, sink_ids, sink_records, tick_rows
from test_recovery_ray import durable_cluster

pytestmark = pytest.mark.ray

STORE = 128 * 2**20              # object store per node: three on one machine


@pytest.fixture()
def nodes():
    """A head and one worker node; the test adds the second worker while raycep starts."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": STORE})
    workers = [cluster.add_node(num_cpus=1, object_store_memory=STORE)]
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
    raycep, sink = durable_cluster(tmp_path, address=cluster.address)
    told = []
    try:
        with ThreadPoolExecutor(1) as pool:
            starting = pool.submit(raycep.start, min_nodes=3, nodes_timeout=120,
                                   progress=told.append)
            time.sleep(2.0)
            workers.append(cluster.add_node(num_cpus=1, object_store_memory=STORE))  # joins late
            client = connect(starting.result(), retry_for=120.0)
        assert told and told[0] == "waiting for Ray nodes: 2 of 3"
        placed = partition_nodes(client)
        worker_ids = {w.node_id: w for w in workers}
        assert len(worker_ids) == 2
        # p0, p1 and the global actor: on the two workers (round robin), none on the head
        assert set(placed) == {"0", "1", "global"} and set(placed.values()) == set(worker_ids)
        victim_actor, victim_node = "0", placed["0"]
        for q in QUERIES:
            client.register(q.text, name=q.name)
        batches = [rows[i:i + 500] for i in range(0, len(rows), 500)]
        for n, batch in enumerate(batches, start=1):
            ack = client.send(batch)
            assert ack["events"] == len(batch) and not ack["bad_rows"]
            if n == 15:
                cluster.remove_node(worker_ids[victim_node], allow_graceful=False)
        client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        client.drained()
        stats = client.stats()["actors"]
        after = partition_nodes(client)
    finally:
        raycep.stop()
    assert after[victim_actor] != victim_node                 # restarted on a node alive
    assert stats[victim_actor]["recoveries"] >= 1
    assert sink_ids(sink_records(sink)) == local_ids(events)     # == raycep local, each once
