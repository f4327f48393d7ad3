"""Re-partitioning engine state by key (cep/runtime/rescale.py; issue 38): random keyed
query sets (the queries a partition actor holds) (test_sharing.variant_sets: variants, every strategy, negation, Kleene, deferred
matches, both modes, out-of-order input) fed to N engines by key group, snapshotted
mid-stream, split into M engines by the new owners of the key groups and continued: the
final matches of every query equal one engine's, each reported once. Split in one step
(``split``) or as the partition actors do it (each engine cuts its own state, ``share``, and
each new engine ``merge``s what it was given): the same snapshots; or, as the actors do it,
an engine that stays keeping its index, the keys that leave dropped, the others merged in."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from raycep.actors.routing import partition_of
from raycep.cep.errors import CepError
from raycep.cep.runtime.engine import Engine
from raycep.cep.runtime.rescale import merge, share, split
from raycep.cep.store.disorder import DisorderSettings

from test_disorder import final_keys
from test_sharing import SLOW, describe, variant_sets

GROUPS = 8           # few key groups: keys share groups, and groups move whole


def engines(case, n: int) -> list:
    disorder = None if case.slack is None else DisorderSettings(min_slack=case.slack)
    out = []
    for _ in range(n):
        eng = Engine(key_attr="k", disorder=disorder)
        for m in case.members:
            eng.add_query(m.query, name=m.name, params=m.params or None, order=m.order,
                          mode=m.mode)
        out.append(eng)
    return out


def feed(parts: list, events: list, size: int, outputs: list) -> None:
    """``events`` in batches of ``size``, each event to the engine of its key group, every
    engine told the stream's clock after each batch (as the gateway does)."""
    n = len(parts)
    for i in range(0, len(events), size):
        batch = events[i:i + size]
        for ev in batch:
            outputs += parts[partition_of(ev.key, n, GROUPS)].process(ev)
        clock = max(e.ts for e in batch)
        for eng in parts:
            outputs += eng.observe(clock)


def in_place(parts: list, owner, after: int) -> list:
    """The engines after a re-partitioning as the partition actors make them
    (actors.rescale.moving_state, PartitionWorker.take): each gives the events of the keys
    that leave it; one that stays drops them and keeps its index, the events it is given
    merged in."""
    given, moving = [], []
    for i, eng in enumerate(parts):
        index = eng.index
        leaving = {k for k in index.keys() if (0 if k is None else owner(k)) != i}
        snap = eng.snapshot(evicted=False, events=False)
        first, lists = index.evicted_events()
        snap.update(events=index.key_events(leaving), evicted=(first, [
            [e for e in lst if (0 if e.key is None else owner(e.key)) != i] for lst in lists]))
        given.append(share(snap, i, owner, after))
        moving.append(leaving)
    out = []
    for j in range(after):
        merged = merge([shares[j] for shares in given])
        if j < len(parts):
            parts[j].index.drop_keys(moving[j])
            out.append(Engine.restore(merged, index=parts[j].index))
        else:
            out.append(Engine.restore(merged))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(case=variant_sets(keyed=True, out_of_order=True, allow_restore=False),
       before=st.integers(1, 3), after=st.integers(1, 3), at=st.floats(0, 1),
       size=st.integers(1, 7), how=st.sampled_from(["split", "shares", "in place"]))
def test_engines_split_anew_mid_stream_give_one_engines_matches(case, before, after, at,
                                                                 size, how):
    # strict contiguity is judged over the whole stream: such a query runs on the global
    # actor (gateway.server.checks.analyse), which is not re-partitioned
    case.members = [m for m in case.members if m.query.strategy != "strict_contiguity"]
    note(describe(case))
    arrivals = case.arrivals
    cut = int(at * len(arrivals))
    one = engines(case, 1)[0]
    want = one.process_many(list(arrivals)) + one.advance(math.inf)
    got: list = []
    parts = engines(case, before)
    feed(parts, arrivals[:cut], size, got)
    snaps = [eng.snapshot() for eng in parts]
    owner = (lambda key: partition_of(key, after, GROUPS))
    split_snaps = split(snaps, owner, after)
    if how == "shares":             # each engine cuts its own; each new one merges its shares
        cut_up = [share(snap, i, owner, after) for i, snap in enumerate(snaps)]
        merged = [merge([given[j] for given in cut_up]) for j in range(after)]
        assert merged == split_snaps
        split_snaps = merged
    if how == "in place":           # as a partition actor: an engine that stays keeps its index
        parts = in_place(parts, owner, after)
    else:
        parts = [Engine.restore(s) for s in split_snaps]
    feed(parts, arrivals[cut:], size, got)
    for eng in parts:
        got += eng.advance(math.inf)
    note(f"{before} -> {after} engines after {cut} of {len(arrivals)} events")
    for name in {m.name for m in case.members}:
        mine, _, problems = final_keys([m for m in got if m.query == name])
        theirs, _, _ = final_keys([m for m in want if m.query == name])
        assert not problems, problems
        assert mine == theirs, name
    # what counts the past is not lost or counted twice
    assert sum(e.events for e in parts) == one.events
    for name in {m.name for m in case.members}:
        assert sum(e.stats()["queries"][name]["matches"] for e in parts) == \
            one.stats()["queries"][name]["matches"]


def test_split_refuses_engines_with_other_queries():
    a, b = Engine(key_attr="k"), Engine(key_attr="k")
    a.add_query("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 s", name="q")
    with pytest.raises(CepError, match="do not hold the same queries"):
        split([a.snapshot(), b.snapshot()], lambda key: 0, 2)
