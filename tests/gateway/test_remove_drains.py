"""A query removed while matches it made are still in an actor's outbox (a producer that
writes to the actors itself, drained only every so often): the removal drains every outbox
before it closes the query's stream, so those matches are stored (counted in the removal's
answer, written to the sink), not dropped as records of an unknown query. Found by the
cluster-equals-engine property test with new draws (a query removed during a rescale)."""
from __future__ import annotations

import orjson
import pytest

from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id
from raycep.cep.runtime.engine import Engine
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import PAIR, make_stream


@pytest.mark.parametrize("many", [False, True])
def test_matches_in_an_outbox_when_their_query_is_removed_are_stored(tmp_path, many):
    sink = tmp_path / "matches.jsonl"
    settings = GatewaySettings(port=0, registry_path=None, plan_every=0, drain_every=30.0,
                               drain_idle=30.0, matches_jsonl=str(sink))
    cluster = InProcessCluster(1, "k", settings)
    cluster.start()
    try:
        client = connect(cluster.url)
        client.register(PAIR, name="pair")
        events = make_stream(200, 3, 5, 0.0, gaps=(0.1, 0.5))
        worker = cluster.workers[0]
        worker.ingest(encode_batch(events, "direct", "b1"))    # not through the gateway
        assert worker.outbox_seq > 0                            # waiting to be drained
        answer = client.remove_many(["pair"]) if many else client.remove("pair")
    finally:
        cluster.stop()
    engine = Engine(key_attr="k")
    engine.add_query(PAIR, name="pair")
    want = sorted(match_id(m) for m in engine.process_many(events))
    counted = answer[0]["matches"] if many else answer["matches"]
    written = sorted(orjson.loads(line)["id"] for line in sink.read_bytes().splitlines())
    assert counted == len(want) and written == want
    assert len(want) > 10
