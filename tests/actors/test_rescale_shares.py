"""raycep.actors.rescale: each partition actor cuts its own state (``PartitionWorker.give``)
and each new actor merges the shares it is given (``take``), as ``raycep scale`` does it
(issue 38). The result is what splitting every actor's snapshot at once gives
(cep.runtime.rescale.split); the shares travel as msgpack bytes, and a merged state refers to
one object per event, as the live state did; the matches after equal one engine's."""
from __future__ import annotations

import itertools
import math
import random

import msgpack
import pytest

from raycep.actors.partition import PartitionWorker
from raycep.actors.recovery import CheckpointSettings
from raycep.actors.rescale import pack_share, share_worker, unpack_share
from raycep.actors.routing import partition_of
from raycep.cep import Engine, Event
from raycep.cep.errors import ConflictError, OverloadedError
from raycep.cep.io.codec import encode_batch
from raycep.cep.match import match_id
from raycep.cep.runtime.rescale import split

from cluster_helpers import NEG, PAIR

GROUPS = 16
BATCH = itertools.count()                      # batch ids: never one twice
QUERIES = (("pair", PAIR), ("neg", NEG))


def stream(n: int, seed: int, keys: int = 12) -> list:
    """In-order events of 12 keys; some with an id of their own, most with a derived one."""
    rng = random.Random(seed)
    out, ts = [], 0.0
    for j in range(n):
        ts += rng.choice([0.0, 0.5, 1.0, 1.5])
        k = f"k{rng.randrange(keys)}"
        out.append(Event(rng.choice("ABC"), ts, {"x": rng.randint(0, 9), "k": k}, key=k,
                         id=f"e{j}" if rng.random() < 0.3 else None))
    return out


def pending(w) -> bool:
    """Whether a binding of ``w`` waits for the clock (a trailing negation)."""
    return any(g["state"]["deferred"] for g in w.engine.snapshot()["evaluators"])


def workers(n: int) -> list:
    out = []
    for i in range(n):
        w = PartitionWorker(f"p{i}", key_attr="k")
        for name, text in QUERIES:
            w.add_query(name, text)
        out.append(w)
    return out


def feed(ws: list, events: list, found: list, size: int = 20) -> int:
    """Batches to each actor of its key group (as the gateway routes), every actor told the
    stream's clock after each batch; returns how many batches."""
    sent = 0
    for i in range(0, len(events), size):
        part = events[i:i + size]
        for j, w in enumerate(ws):
            mine = [e for e in part if partition_of(e.key, len(ws), GROUPS) == j]
            if mine:
                found += w.ingest(encode_batch(mine, "test", f"b{next(BATCH)}"))["matches"]
                sent += 1
            found += w.observe(part[-1].ts)
    return sent


@pytest.mark.parametrize("before,after,seed", [(2, 3, 1), (3, 1, 2), (1, 2, 3), (2, 4, 4)])
def test_shares_merged_are_the_whole_split_and_continue_as_one_engine(before, after, seed):
    events = stream(600, seed)
    old = workers(before)
    found: list = []
    sent, cut = feed(old, events[:300], found), 300
    while not any(pending(w) for w in old):     # a cut while a binding waits (trailing ~C)
        sent += feed(old, events[cut:cut + 5], found)
        cut += 5
    assert cut < 500
    snaps = [w.snapshot() for w in old]
    owner = (lambda key: partition_of(key, after, GROUPS))
    whole = split([s["engine"] for s in snaps], owner, after)
    given = [w.give(i, after, GROUPS) for i, w in enumerate(old)]
    for i, shares in enumerate(given):           # bytes for the others, msgpack, no pickle
        assert set(shares) == set(range(after)) - {i}
        for data in shares.values():
            assert isinstance(data, bytes) and isinstance(
                msgpack.unpackb(data, raw=False, strict_map_key=False,
                                ext_hook=lambda code, payload: None), dict)
    new = [old[j] if j < before else PartitionWorker(f"p{j}", key_attr="k")
           for j in range(after)]
    for j, w in enumerate(new):
        found += w.take([given[i].get(j) for i in range(before)], j, 1, after, GROUPS)["records"]
    for j, w in enumerate(new):
        merged = w.engine.snapshot()
        assert sorted(merged["events"], key=lambda e: (e.ts, e.id)) == \
            sorted(whole[j]["events"], key=lambda e: (e.ts, e.id))
        assert w.partition == f"p{j}" and w.epoch == 1
        # a pending binding refers to the events the index holds, not to copies of them
        held = {id(e) for e in w.engine.index.events()}
        for group in merged["evaluators"]:
            for item in group["state"]["deferred"]:
                env = item[3]
                assert all(id(v) in held for v in env.values()), "a copy of an event"
    assert any(pending(w) for w in new)
    # the memory of evicted events moved with the keys: a late copy of an early event is
    # still recognised by the actor its key moved to
    early = [e for e in events[:100] if partition_of(e.key, after, GROUPS)
             != partition_of(e.key, before, GROUPS) or before != after]
    assert early
    for e in early[:5]:
        w = new[partition_of(e.key, after, GROUPS)]
        assert w.engine.index.seen_before(e), e
    sent += feed(new, events[cut:], found)
    for w in new:
        found += w.advance(math.inf)
    one = Engine(key_attr="k")
    for name, text in QUERIES:
        one.add_query(text, name=name)
    want = one.process_many(events) + one.advance(math.inf)
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(match_id(m) for m in want)
    # what counts the past is neither lost nor counted twice
    assert sum(w.engine.events for w in new) == len(events)
    assert sum(w.batches for w in new) == sent


def test_an_actor_that_stays_keeps_its_index_after_a_query_of_any_type_left():
    """A query with a variable of any type makes the index keep every-type buffers, and a
    live index keeps them after the query is removed; the engine a staying actor rebuilds
    from its snapshot does not need them. The move takes the index over in the new layout
    (it used to refuse it, and the rescale failed); the matches after equal one engine's."""
    events = stream(400, 6)
    untyped = "PATTERN SEQ(a, B b) WHERE [k] AND b.x > a.x WITHIN 2 seconds"
    old = workers(2)
    one = Engine(key_attr="k")
    for name, text in QUERIES:
        one.add_query(text, name=name)
    found: list = []
    for w in old:
        w.add_query("any", untyped)
    one.add_query(untyped, name="any")
    feed(old, events[:150], found)
    want = one.process_many(events[:150])
    for w in old:
        w.remove_query("any")
    one.remove_query("any")
    assert all(w.engine.index.keep_any for w in old)
    given = [w.give(i, 3, GROUPS) for i, w in enumerate(old)]
    new = old + [PartitionWorker("p2", key_attr="k")]
    for j, w in enumerate(new):
        found += w.take([given[i].get(j) for i in range(2)], j, 1, 3, GROUPS)["records"]
    feed(new, events[150:], found)
    for w in new:
        found += w.advance(math.inf)
    want += one.process_many(events[150:]) + one.advance(math.inf)
    assert sorted(r["id"] for r in found) == sorted(match_id(m) for m in want)
    assert any(r["query"] == "any" for r in found) and len(found) > 20


def test_what_waits_for_the_clock_is_released_at_the_merged_clock_on_take():
    """Actors whose clocks differ (nothing told the one behind the stream's time): the merge
    takes the latest clock, and a match that waited for a time it has passed is released by
    ``take`` itself, as one engine released it when its clock passed there; it is not held
    until a later event (a query removed before that would lose it)."""
    events = [Event("A", 1.0, {"x": 1, "k": "k1"}, key="k1", id="a1"),
              Event("B", 2.0, {"x": 1, "k": "k1"}, key="k1", id="b1"),
              Event("A", 20.0, {"x": 1, "k": "k2"}, key="k2", id="a2")]
    owner = {e.key: partition_of(e.key, 2, GROUPS) for e in events}
    assert owner["k1"] != owner["k2"]
    old = workers(2)
    found: list = []
    for e in events:                        # each actor sent its keys' events, no observe
        found += old[owner[e.key]].ingest(encode_batch([e], "test", f"b{next(BATCH)}"))[
            "matches"]
    assert pending(old[owner["k1"]]) and not any(r["query"] == "neg" for r in found)
    given = [w.give(i, 1, GROUPS) for i, w in enumerate(old)]
    got = old[0].take([given[i].get(0) for i in range(2)], 0, 1, 1, GROUPS)
    assert [r["query"] for r in got["records"]] == ["neg"]
    one = Engine(key_attr="k")
    for name, text in QUERIES:
        one.add_query(text, name=name)
    want = [match_id(m) for m in one.process_many(events) if m.query == "neg"]
    assert [r["id"] for r in got["records"]] == want
    old[0].remove_query("neg")              # nothing of it was left waiting


def test_take_with_its_own_share_elsewhere_and_give_with_records_undelivered_are_refused():
    w = workers(1)[0]
    with pytest.raises(ConflictError, match="no share of its own at place 0"):
        w.take([b"", None], 0, 1, 2, GROUPS)
    box = PartitionWorker("p0", key_attr="k")
    box.set_outbox(True)
    box.add_query("pair", PAIR)
    box.ingest(encode_batch(stream(50, 5), "test", "b1"))
    assert box.outbox.records
    with pytest.raises(OverloadedError, match="undelivered match records"):
        box.give(0, 2, GROUPS)


def test_a_share_keeps_ids_of_their_own_and_derived_ones_as_they_were():
    w = workers(1)[0]
    events = stream(120, 9)
    feed([w], events, [])
    share = share_worker(w.snapshot(), 0, 2, GROUPS)[1]
    again = unpack_share(pack_share(share))
    got = {(e.type, e.ts, e.id, e._id is None) for e in again["engine"]["events"]}
    assert got == {(e.type, e.ts, e.id, e._id is None) for e in share["engine"]["events"]}
    assert got


def durable_workers(tmp_path, n: int, every: int = 10**9) -> list:
    out = []
    for i in range(n):
        w = PartitionWorker(f"p{i}", key_attr="k",
                            checkpoint=CheckpointSettings(str(tmp_path), every_events=every))
        for name, text in QUERIES:
            w.add_query(name, text)
        out.append(w)
    return out


def restarted(tmp_path, j: int):
    """Partition actor ``j`` after a crash: a new worker on the same directory."""
    return PartitionWorker(f"p{j}", key_attr="k",
                           checkpoint=CheckpointSettings(str(tmp_path), every_events=10**9))


def state(w) -> tuple:
    snap = w.engine.snapshot()
    return (sorted((e.ts, e.id) for e in snap["events"]),
            [(g["name"], sorted((d[0], d[4].id) for d in g["state"]["deferred"]))
             for g in snap["evaluators"]], snap["clock"], w.engine.events, w.batches)


@pytest.mark.parametrize("before,after", [(2, 3), (3, 1)])
def test_a_move_is_logged_and_a_restarted_actor_replays_it_then_compacts(tmp_path, before,
                                                                       after):
    """The move is not checkpointed inside the hold: ``take`` is logged (with the shares it
    was given); an actor restarted before its next checkpoint replays it, its own share cut
    again from its state (even where a checkpoint fell between give and take); that
    checkpoint is a compaction
    (the segments saved before still hold the keys that left), after which a restart loads
    the same state again. The matches after equal one engine's."""
    events = stream(600, 11)
    old = durable_workers(tmp_path, before, every=30)        # checkpoints before the move
    found: list = []
    sent = feed(old, events[:350], found)
    assert all(w.durable.checkpoints for w in old)
    given = [w.give(i, after, GROUPS) for i, w in enumerate(old)]
    for w in old:                           # a checkpoint due between give and take (the
        w.checkpoint(force=True)            # replayed take then cuts its own share again)
    new = []
    for j in range(after):
        if j < before:
            w = old[j]
        else:                               # as RaySpawner.spawn: a fresh directory
            w = restarted(tmp_path, j)
        found += w.take([given[i].get(j) for i in range(before)], j, 1, after, GROUPS)["records"]
        new.append(w)
    assert all(w.durable.compact_next for w in new)     # (no checkpoint inside the hold)
    want = [state(w) for w in new]
    again = [restarted(tmp_path, j) for j in range(after)]      # crash: replay the take
    assert [state(w) for w in again] == want
    assert all(w.recovery["replayed"] >= 1 for w in again)
    # the restart's checkpoint was a compaction: the keys that left are not saved any more
    assert all(w.durable.last_checkpoint["compacted"] for w in again)
    third = [restarted(tmp_path, j) for j in range(after)]
    assert [state(w) for w in third] == want
    assert [len(w.engine.index) for w in third] == [len(w.engine.index) for w in new]
    sent += feed(third, events[350:], found)
    for w in third:
        found += w.advance(math.inf)
    one = Engine(key_attr="k")
    for name, text in QUERIES:
        one.add_query(text, name=name)
    want_ids = sorted(match_id(m) for m in one.process_many(events) + one.advance(math.inf))
    assert sorted(r["id"] for r in found) == want_ids
