"""Re-partitioning engine state by key (elastic scale-out, ``raycep scale``).

Several engines each hold the events of some partition keys (the partition actors); their
snapshots (``Engine.snapshot``) are merged and split again by a new owner function, so that
each new engine holds what it would hold had it received the events of its keys from the
start. A query that partitions by the key reads the events of one key only, so moving a
key's state whole keeps every result ("key groups", as Flink's keyed state is moved on a
rescale).

What moves with a key: its buffered events, its remembered evicted events (duplicate
detection), the pending work of its triggers (deferred bindings, held triggers, SLIDE
buffers). What belongs to the stream: the clock, the watermark, the floors, the disorder
statistics' scores, every query's plan: each new engine takes the largest (the newest) of
the sources'. What counts the past (a query's triggers and matches so far, events seen, late
events): source ``i`` is added to new engine ``min(i, parts - 1)``, so the sums stay.
"""
from __future__ import annotations

import heapq
import math
import operator

from raycep.cep.errors import CepError

_TS = operator.attrgetter("ts")


def split(snaps: list, owner, parts: int, counted: list | None = None,
          weights: bool = False) -> list:
    """``parts`` snapshots from the engine snapshots ``snaps`` (taken at one moment, the
    same queries on each): the state of key ``k`` goes to snapshot ``owner(k)``, that of no
    key (None) to 0; what counts the past of source ``i`` to ``counted[i]`` (default ``min(i,
    parts - 1)``); ``weights``: each stream's disorder statistics keep the weight of their
    mean (``share``: a ``merge`` averages as one ``split`` does). CepError when the
    snapshots disagree on their queries."""
    if not snaps or parts < 1:
        raise CepError(f"cannot split {len(snaps)} snapshot(s) into {parts}")
    if counted is None:
        counted = [min(i, parts - 1) for i in range(len(snaps))]
    base = snaps[0]
    _check_same(snaps)
    place = _placer(owner, parts)
    events = _by_owner((ev for s in snaps for ev in s["events"] or ()), place, parts)
    gone = _by_owner((ev for s in snaps if s.get("evicted") is not None
                      for lst in s["evicted"][1] for ev in lst), place, parts)
    out = []
    for j in range(parts):
        mine = [s for i, s in enumerate(snaps) if counted[i] == j]
        out.append(_one(base, snaps, mine, j, place, events[j], gone[j], weights))
    return out


def share(snap: dict, number: int, owner, parts: int) -> list:
    """One engine's part of ``split``: its snapshot ``snap`` (source ``number``) cut into
    ``parts`` shares by ``owner``, what counts its past in share ``min(number, parts - 1)``;
    ``merge`` of the shares every source gave new engine ``j`` is ``split``'s snapshot
    ``j``. So each engine cuts its own state, and only the shares that change engines
    travel."""
    return split([snap], owner, parts, [min(number, parts - 1)], weights=True)


def merge(shares: list) -> dict:
    """One engine's snapshot from the ``share`` each source gave it, in source order."""
    return split(shares, _first, 1, [0] * len(shares))[0]


def _first(key) -> int:
    return 0


def _placer(owner, parts: int):
    """``owner`` checked, and asked once per key (keys repeat across events)."""
    placed: dict = {None: 0}

    def place(key) -> int:
        j = placed.get(key)
        if j is None:
            j = placed[key] = owner(key)
            if not 0 <= j < parts:
                raise CepError(f"key {key!r} was placed on partition {j} of {parts}")
        return j
    return place


def _by_owner(events, place, parts: int) -> list:
    """``events`` per new owner, each list in time order, events of one time in the order
    given (a restored index orders them by id: their ids, derived from the content where
    none was given, are not computed here)."""
    if parts == 1:                      # (a merge: every event stays)
        out: list = [list(events)]
    else:
        out = [[] for _ in range(parts)]
        for ev in events:
            out[place(ev.key)].append(ev)
    for part in out:
        part.sort(key=_TS)
    return out


def _check_same(snaps: list) -> None:
    first = snaps[0]
    names = set(first["queries"])
    groups = [(g["name"], tuple(g["queries"])) for g in first["evaluators"]]
    for s in snaps[1:]:
        if set(s["queries"]) != names or \
                [(g["name"], tuple(g["queries"])) for g in s["evaluators"]] != groups:
            raise CepError("the engines to re-partition do not hold the same queries")
        if s["key_attr"] != first["key_attr"]:
            raise CepError("the engines to re-partition are keyed by different attributes")


def _one(base: dict, snaps: list, mine: list, j: int, place, events: list,
         gone: list, weights: bool) -> dict:
    """New snapshot ``j``: ``mine`` are the sources whose counters it takes, ``events`` and
    ``gone`` the buffered and remembered evicted events of its keys."""
    fronts = [s["front"] for s in snaps if s["front"] is not None]
    front = max(fronts, key=lambda ev: (ev.ts, ev.id)) if fronts else None
    # the clock moved past every event without one (observe): an event at it is in order;
    # not where an event at that time is held, which decides ties by id
    open_at = max(s.get("open_at", -math.inf) for s in snaps)
    if front is not None and front.ts >= open_at:
        open_at = -math.inf
    out = dict(base)
    out.update(
        clock=max(s["clock"] for s in snaps),
        events_seen=sum(s["events_seen"] for s in mine),
        index_floor=max(s.get("index_floor", -math.inf) for s in snaps),
        events=events,
        evicted=(0, [gone]) if gone else (0, []),
        front=front, open_at=open_at,
        disorder=_disorder(snaps, mine, weights),
        floors=tuple(max(f) for f in zip(*(s["floors"] for s in snaps))),
        counters=tuple(sum(c) for c in zip(*(s["counters"] for s in mine)))
        if mine else tuple(0 for _ in base["counters"]),
        late=[x for s in mine for x in s["late"]],
        evaluators=[_evaluator(g, [s["evaluators"][k] for s in snaps],
                               [s["evaluators"][k] for s in mine], j, place)
                    for k, g in enumerate(base["evaluators"])],
    )
    return out


def _disorder(snaps: list, mine: list, weights: bool) -> dict:
    """The stream's watermark and slack (the largest), each stream's scores over every
    source and its counts over ``mine``; ``weights``: each stream keeps its mean's weight
    (``_weight``, the out-of-order events it averages: a share's count may be 0)."""
    streams: dict = {}
    for s in snaps:
        for key, st in s["disorder"]["streams"].items():
            got = streams.get(key)
            if got is None:
                streams[key] = got = dict(st, events=0, out_of_order=0, late=0, mean=0.0)
                got["_weight"] = 0
            got["max_score"] = max(got["max_score"], st["max_score"])
            got["max_ts"] = max(got["max_ts"], st["max_ts"])
            own = st.get("_weight", st["out_of_order"])
            weight = got["_weight"] + own
            if weight:
                got["mean"] = (got["mean"] * got["_weight"] + st["mean"] * own) / weight
            got["_weight"] = weight
    for s in mine:
        for key, st in s["disorder"]["streams"].items():
            for f in ("events", "out_of_order", "late"):
                streams[key][f] += st[f]
    if not weights:
        for st in streams.values():
            del st["_weight"]
    return {"slack": max(s["disorder"]["slack"] for s in snaps),
            "watermark": max(s["disorder"]["watermark"] for s in snaps),
            "streams": streams}


def _evaluator(group: dict, states: list, mine: list, j: int, place) -> dict:
    """One evaluator's state for new engine ``j``: the pending items of its keys (numbered
    anew in the order of their deadlines, so the heaps of several sources merge), the
    newest plan, the counters of ``mine``."""
    parts = [g["state"] for g in states]
    newest = max(parts, key=lambda p: p["version"])
    state = dict(newest)
    items = []                      # (deadline, source, old seq, kind, item)
    for k, p in enumerate(parts):
        for item in p["deferred"]:
            if place(item[4].key) == j:
                items.append((item[0], k, item[1], "deferred", item))
        for item in p["held"]:
            if place(item[2].key) == j:
                items.append((item[0], k, item[1], "held", item))
    items.sort(key=lambda x: (x[0], x[1], x[2]))
    renumber: dict = {}             # (source, old seq) -> new seq
    deferred, held = [], []
    for seq, (_, k, old, kind, item) in enumerate(items):
        renumber[(k, old)] = seq
        if kind == "deferred":
            deferred.append((item[0], seq, *item[2:]))
        else:
            held.append((item[0], seq, *item[2:]))
    heapq.heapify(deferred)
    heapq.heapify(held)
    state.update(
        clock=max(p["clock"] for p in parts),
        deferred=deferred, held=held, seq=len(items),
        slide=sorted((ev for p in parts for ev in p["slide"] if place(ev.key) == j),
                     key=lambda ev: (ev.ts, ev.id)),
        counters=tuple(sum(c) for c in zip(*(g["state"]["counters"] for g in mine)))
        if mine else tuple(0 for _ in newest["counters"]),
    )
    if "restricted" in newest:      # a query group (cep.runtime.groups.GroupManager)
        state["restricted"] = {renumber[(k, old)]: names for k, p in enumerate(parts)
                               for old, names in p["restricted"].items()
                               if (k, old) in renumber}
        state["recheck"] = {renumber[(k, old)] for k, p in enumerate(parts)
                            for old in p["recheck"] if (k, old) in renumber}
        matches: dict = {}
        for g in mine:
            for name, count in g["state"]["member_matches"].items():
                matches[name] = matches.get(name, 0) + count
        state["member_matches"] = matches
    return {"name": group["name"], "queries": group["queries"], "state": state}
