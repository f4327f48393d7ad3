"""The cluster equals the engine for the queries the Kleene-run screen takes
(raycep.cep.evaluation.kleene_screen): rally-shaped skip-till-next-match variants registered
through the client of an in-process cluster, the events sent as tables (each actor evaluates
its rows in bulk, the screen among them) with a rescale in between, give what one Engine fed
event by event gives, each query on its own; and the actors did screen triggers."""
from __future__ import annotations

import math
import random

from raycep.cep.event import Event
from raycep.cep.match import match_id
from raycep.cep.runtime.engine import Engine
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import read_all

RALLY = ("PATTERN SEQ(A a, A+ b[], A c) WHERE skip_till_next_match(a, b, c) {{ [k] AND "
         "{begin}b[i].x > b[i-1].x AND b.LEN >= {n} AND c.x < LAST(b.x) * {f} }} "
         "WITHIN 1 seconds")


def _stream(seed: int, n: int) -> list:
    rng = random.Random(seed)
    price = {k: 100.0 for k in range(4)}
    events = []
    for i in range(n):
        k = rng.randrange(4)
        price[k] = round(price[k] * (1 + rng.gauss(0, 0.01)), 2)
        events.append(Event("A", i * 0.05, {"x": price[k], "k": k}, id=f"e{i}"))
    return events


def _table(events: list):
    import pyarrow as pa
    return pa.table({"type": [e.type for e in events], "ts": [e.ts for e in events],
                     "id": [e.id for e in events], "x": [e.attrs["x"] for e in events],
                     "k": [e.attrs["k"] for e in events]})


def test_screened_kleene_variants_through_the_client_equal_the_engine():
    events = _stream(11, 1200)
    queries = {f"r{j}": RALLY.format(n=n, f=f, begin=begin) for j, (n, f, begin) in enumerate(
        [(2, 1.0, ""), (3, 1.0, "b[1].x > a.x AND "), (3, 0.998, ""), (4, 1.0, "")])}
    cluster = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None,
                                                       plan_every=0))
    cluster.start()
    eng = Engine(key_attr="k", sharing=False)
    want: dict = {name: [] for name in queries}
    try:
        client = connect(cluster.url)
        for name, text in queries.items():
            client.register(text, name=name)
            eng.add_query(text, name=name)
        for lo in range(0, len(events), 200):
            if lo == 600:
                client.scale(3)
            chunk = events[lo:lo + 200]
            client.send(_table(chunk))
            for m in eng.process_many(chunk):
                want[m.query].append(match_id(m))
        client.advance(1e6, force=True)
        assert client.drained(timeout=60)
        got = {name: sorted(r["id"] for r in read_all(client, name)) for name in queries}
        screened = sum(path["bulk"] for a in client.stats()["actors"].values()
                       for name, path in a.get("paths", {}).items() if name in queries)
    finally:
        cluster.stop()
    for m in eng.advance(math.inf):
        want[m.query].append(match_id(m))
    assert got == {name: sorted(ids) for name, ids in want.items()}
    assert sum(map(len, got.values())) > 20
    assert screened > len(events) // 2
