"""The state of the partition actors re-partitioned for another number of them (``raycep
scale``): their snapshots (``PartitionWorker.snapshot``, taken while no batch is in flight
and their outboxes are empty) split by the new owners of the key groups
(``actors.routing``): the engine state per key (cep/runtime/rescale.py), the remembered batch
ids to every actor (a batch delivered again is still recognised), the counters kept with the
actor of the same number (or the last one).

Each actor cuts its own snapshot (``share_worker``: one share per new actor) and each new
actor merges the shares it is given (``merge_worker``): the result is what splitting all the
snapshots at once gives (cep.runtime.rescale.split). An actor that stays gives only the
events of the keys that leave it (``moving_state``) and keeps its event index for the rest
(``PartitionWorker.take``). Shares travel as bytes (``pack_share``: msgpack in raycep's
state format, the events as rows; never pickle), so the gateway that passes them on decodes
nothing.
"""
from __future__ import annotations

import contextlib
import gc
from bisect import bisect_left

from raycep.actors.routing import group_owner, key_group
from raycep.actors.state_format import event_rows, intern, pack, unpack
from raycep.cep.event import trusted_event
from raycep.cep.errors import OverloadedError
from raycep.cep.runtime.rescale import merge, share


def moved_groups(before: int, after: int, key_groups: int) -> int:
    """How many key groups change owner from ``before`` to ``after`` partitions."""
    return sum(group_owner(g, before, key_groups) != group_owner(g, after, key_groups)
               for g in range(key_groups))


def _owner(parts: int, key_groups: int):
    return lambda key: group_owner(key_group(key, key_groups), parts, key_groups)


def _drained(snap: dict) -> None:
    box = snap["outbox"]
    if box is not None and box["records"]:
        raise OverloadedError(f"partition {snap['partition']} still holds "
                              f"{len(box['records'])} undelivered match records: drain it "
                              f"before re-partitioning")


def share_worker(snap: dict, number: int, parts: int, key_groups: int) -> list:
    """Partition actor ``number``'s snapshot cut into ``parts`` shares, one per new actor
    (``merge_worker``); its counters in share ``min(number, parts - 1)``. Refused while its
    outbox still holds records (OverloadedError: drain it and try again)."""
    _drained(snap)
    engines = share(snap["engine"], number, _owner(parts, key_groups), parts)
    counted = min(number, parts - 1)
    out = []
    for j, engine in enumerate(engines):
        mine = j == counted
        out.append({
            "engine": engine, "recent": list(snap["recent"] or ()),
            "counters": {f: snap.get(f, 0) if mine else 0 for f in _SUMMED},
            "rows": snap.get("rows", 0), "own_plans": list(snap.get("own_plans", ())),
            "outbox": snap["outbox"] is not None,
            "outbox_capacity": snap["outbox_capacity"]})
    return out


def moving_state(worker, number: int, parts: int, key_groups: int) -> tuple:
    """``(moving keys, snapshot)``: the keys of partition actor ``number`` (``worker``) that
    go to another of ``parts`` actors, and its snapshot with only their buffered and
    remembered evicted events (what ``share_worker`` gives away: the others stay in its
    index, ``PartitionWorker.take``)."""
    owner = _owner(parts, key_groups)
    index = worker.engine.index

    def leaves(key) -> bool:
        return (0 if key is None else owner(key)) != number
    moving = {key for key in index.keys() if leaves(key)}
    snap = worker.snapshot(evicted=False, events=False)
    first, lists = index.evicted_events()
    snap["engine"].update(events=index.key_events(moving), evicted=(
        first, [[e for e in lst if leaves(e.key)] for lst in lists]))
    return moving, snap


def cut_worker(worker, number: int, parts: int, key_groups: int) -> tuple:
    """``(moving keys, shares)``: partition actor ``number`` (``worker``) cut for ``parts``
    actors (``moving_state``, ``share_worker``)."""
    with no_cyclic_gc():
        moving, snap = moving_state(worker, number, parts, key_groups)
        return moving, share_worker(snap, number, parts, key_groups)


def merge_worker(shares: list, j: int, epoch: int, own_seq: int | None) -> dict:
    """New partition actor ``j``'s snapshot (layout number ``epoch``) from the shares every
    current actor gave it (``share_worker``), in their order; ``own_seq``: the last outbox
    sequence number of the actor that was partition ``j`` (None: a new one starts at 0)."""
    seq = own_seq or 0
    return {
        "partition": f"p{j}", "engine": merge([s["engine"] for s in shares]),
        "recent": list(dict.fromkeys(tuple(i) for s in shares for i in s["recent"])),
        "epoch": epoch,
        **{f: sum(s["counters"][f] for s in shares) for f in _SUMMED},
        "outbox": {"first": seq + 1, "records": []} if shares[0]["outbox"] else None,
        "outbox_seq": seq, "outbox_capacity": shares[0]["outbox_capacity"],
        "rows": max(s["rows"] for s in shares), "unplanned": {},
        "own_plans": sorted({p for s in shares for p in s["own_plans"]}),
    }


#: the worker counters a re-partitioning adds up (each source's kept by one new actor)
_SUMMED = ("batches", "redelivered", "bad_rows", "refused", "recoveries")


def pack_share(value: dict) -> bytes:
    """A share (``share_worker``) as bytes: its buffered and remembered evicted events as
    rows, the rest in raycep's state format (actors/state_format.py)."""
    engine = dict(value["engine"])
    events = engine.pop("events") or ()
    first, lists = engine.pop("evicted") or (0, [])
    return pack({**value, "engine": engine, "events": event_rows(events),
                 "evicted": [first, [event_rows(lst) for lst in lists]]})


def unpack_share(data: bytes) -> dict:
    """``pack_share``'s share again, each event one object wherever the state refers to it
    (as pickling kept them: state_format.intern). The rows are events an actor of this
    cluster checked when they arrived, sent through Ray as Ray sends pickled ones: made as
    unpickling makes them (trusted_event), not checked again."""
    with no_cyclic_gc():
        value = unpack(data)
        events = [trusted_event(t, ts, attrs, key, eid)
                  for t, ts, key, attrs, eid in value.pop("events")]
        first, lists = value.pop("evicted")
        gone = [[trusted_event(t, ts, attrs, key, eid) for t, ts, key, attrs, eid in lst]
                for lst in lists]
        value = intern(value, _Buffered(events))
        value["engine"].update(events=events, evicted=(first, gone))
        return value


class _Buffered(dict):
    """``intern``'s table over ``events`` (in time order): an event the rest of a share
    refers to is found among them by its time, so only those events' ids are computed
    (an id derived from the content costs a hash)."""

    def __init__(self, events: list):
        super().__init__()
        self._events = events
        self._times = [e.ts for e in events]

    def setdefault(self, key, value):
        got = self.get(key)
        if got is None:
            etype, ts, eid = key
            at = bisect_left(self._times, ts)
            while at < len(self._times) and self._times[at] == ts:
                ev = self._events[at]
                if ev.type == etype and ev.id == eid:
                    got = ev
                    break
                at += 1
            got = self[key] = value if got is None else got
        return got


@contextlib.contextmanager
def no_cyclic_gc():
    """Within: no cyclic garbage collection (a share is tens of thousands of containers,
    none of them cyclic; each collection would walk them all again)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
