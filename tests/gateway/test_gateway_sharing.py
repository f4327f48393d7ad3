"""Query groups through the cluster's public interface (in-process cluster, real HTTP): variants
registered and removed while events flow share one evaluator on each partition actor, and every
query gets exactly the matches of an in-process engine that evaluates it alone."""
from __future__ import annotations

import math

from raycep.cep import Engine
from raycep.cep.match import match_id

from cluster_helpers import ids_of, make_stream, read_all, send_in_slices


def variant(c: float, w: int = 5) -> str:
    return f"PATTERN SEQ(A a, B b) WHERE [k] AND a.x < b.x * {c} WITHIN {w} seconds"


def each_alone(events, first: dict, late: tuple, removed: tuple) -> dict:
    """Match ids per query of an in-process engine that evaluates every query on its own:
    ``first`` registered before the first event, ``late = (position, name, text)`` added and
    ``removed = (position, name)`` removed before the event at that position."""
    eng = Engine(key_attr="k", sharing=False)
    for name, text in first.items():
        eng.add_query(text, name=name)
    out: dict = {}
    for i, ev in enumerate(events):
        if i == late[0]:
            eng.add_query(late[2], name=late[1])
        if i == removed[0]:
            eng.remove_query(removed[1])
        for m in eng.process(ev):
            out.setdefault(m.query, []).append(match_id(m))
    for m in eng.advance(math.inf):
        out.setdefault(m.query, []).append(match_id(m))
    return out


def test_variants_share_an_evaluator_and_each_gets_its_own_matches(client):
    events = make_stream(600, 7, 4, 0.0, gaps=(0.25, 0.5, 1.0))
    third = len(events) // 3
    first = {f"v{k}": variant(c, w) for k, (c, w) in enumerate(((0.5, 5), (1.0, 5), (2.0, 3)))}
    for name, text in first.items():
        client.register(text, name=name)
    send_in_slices(client, events[:third])
    client.register(variant(1.5, 4), name="late")          # joins the group mid-stream
    send_in_slices(client, events[third:2 * third])
    removed = ids_of(read_all(client, "v2"))
    client.remove("v2")                                    # leaves it mid-stream
    send_in_slices(client, events[2 * third:])
    client.advance(max(e.ts for e in events) + 100.0)
    expected = each_alone(events, first, (third, "late", variant(1.5, 4)), (2 * third, "v2"))
    for name in ("v0", "v1", "late"):
        got = ids_of(read_all(client, name))
        assert sorted(got) == sorted(expected[name]), name
    assert sorted(removed) == sorted(expected["v2"])
    shared = [[g for g in actor["groups"] if len(g["queries"]) > 1]
              for actor in client.stats()["actors"].values()]
    assert any(shared)                           # the partition actors run the group
    for groups in filter(None, shared):
        assert len(groups) == 1 and groups[0]["queries"] == ["v0", "v1", "late"]
        assert any(v.startswith("WITHIN") for v in groups[0]["varying"])
