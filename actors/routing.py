"""Routing: which partition actor receives an event. One function, used by every producer
(gateway, Spark jobs, tests) alike, so an event key always lands on the same actor.

The hash is blake2b of a canonical msgpack encoding of the key, not Python's ``hash()``,
which is salted per process (PYTHONHASHSEED) and would send a key to different actors from
different producers. Integral floats are encoded as integers (``3.0`` routes like ``3``, as the
equivalence test ``[k]`` treats them alike); strings and integers otherwise never collide by
construction (``"3"`` and ``3`` are different keys).

Keys go to actors through key groups, as Flink's keyed state does ("key groups"): a key's
group is its hash modulo ``key_groups`` (``KEY_GROUPS`` by default, fixed for a cluster's
life), and the ``n`` partition actors own contiguous ranges of groups (group ``g`` ->
actor ``g * n // key_groups``). Changing the number of actors moves whole groups, with the
state of their keys (``raycep scale``), and few of them: from ``n`` to ``n + 1`` actors,
about ``key_groups / (n + 1)`` groups change owner.

Events without a partition key go to the designated global partition ``GLOBAL_PARTITION``
(0). A query without a key equivalence (no ``[key]`` test) sees only the events of the actor it
runs on, so for such a query producers must route the events of its types to the global
partition as well; that actor then carries the whole stream of those types (the cost of a
global query: no parallelism for it).
"""
from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from itertools import islice
from operator import le

import msgpack

from raycep.cep.errors import IngestError

#: the partition that receives events without a key (and runs the global queries)
GLOBAL_PARTITION = 0
#: the default number of key groups of a cluster: the most partition actors it can have
KEY_GROUPS = 256
#: the most key groups a cluster may have (Flink's limit on max parallelism: 2**15)
MAX_KEY_GROUPS = 32_768


def _canonical(key):
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, (list, tuple)):
        return [_canonical(k) for k in key]
    return key


def key_group(key, key_groups: int = KEY_GROUPS) -> int:
    """The key group (0 .. key_groups-1) of a non-None ``key``; stable across processes,
    hosts and Python runs."""
    try:
        body = msgpack.packb(_canonical(key), use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        raise IngestError(f"partition key {key!r} ({type(key).__name__}) cannot be encoded; "
                          f"use a string, number, boolean or a list of those",
                          field="key") from None
    digest = hashlib.blake2b(body, digest_size=8).digest()
    return int.from_bytes(digest, "big") % key_groups


def group_owner(group: int, n_partitions: int, key_groups: int = KEY_GROUPS) -> int:
    """The partition (0 .. n_partitions-1) that owns key group ``group``: the groups are
    split into ``n_partitions`` contiguous ranges."""
    return group * n_partitions // key_groups


def check_partitions(n_partitions, key_groups: int = KEY_GROUPS) -> None:
    """ValueError unless 1 <= n_partitions <= key_groups (integers)."""
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, int) or n_partitions < 1:
        raise ValueError(f"n_partitions must be a positive integer, got {n_partitions!r}")
    if isinstance(key_groups, bool) or not isinstance(key_groups, int) or key_groups < 1:
        raise ValueError(f"key_groups must be a positive integer, got {key_groups!r}")
    if n_partitions > key_groups:
        raise ValueError(f"{n_partitions} partitions need at least as many key groups; this "
                         f"cluster has {key_groups}")


def partition_of(key, n_partitions: int, key_groups: int = KEY_GROUPS) -> int:
    """The partition index (0 .. n_partitions-1) of ``key``: the owner of its key group;
    stable across processes, hosts and Python runs. ``None`` (no key) maps to
    GLOBAL_PARTITION."""
    check_partitions(n_partitions, key_groups)
    if key is None:
        return GLOBAL_PARTITION
    return key_group(key, key_groups) * n_partitions // key_groups


def event_key(event, key_attr: str | None = None):
    """The routing key of ``event``: its ``key``, or its ``key_attr`` attribute when given
    (``key_attr="key"`` without such an attribute: the event's ``key``, as ``make_event``
    takes a row's ``key`` field as the partition key)."""
    return routing_key(event.attrs, event.key, key_attr)


def routing_key(attrs, key, key_attr: str | None):
    """``event_key`` of an event given as its attributes (a map or None) and key."""
    if key_attr is None:
        return key
    value = attrs.get(key_attr) if attrs else None
    if value is None and key_attr == "key":
        return key
    return value


def split_by_partition(events, n: int, key_attr: str | None = None,
                       key_groups: int = KEY_GROUPS) -> dict:
    """Group ``events`` by partition index, keeping their order within each group.

    The key is ``event.key`` (or the attribute ``key_attr`` when given); events without one go
    to GLOBAL_PARTITION. Only non-empty groups appear in the result.
    """
    out: dict = {}
    for ev in events:
        out.setdefault(partition_of(event_key(ev, key_attr), n, key_groups), []).append(ev)
    return out


#: the target name of the global actor in a routing result
GLOBAL = "global"


@dataclass(frozen=True)
class RoutingTable:
    """Where each event goes: the actor of its key (``partition_of``), and also the global
    actor when a query without the key equivalence needs its type (``global_types``; ``None``
    means every type). Producers fetch the table from the gateway and re-fetch it when
    queries change (its ``version`` grows)."""
    partitions: int
    key_attr: str | None = None
    global_types: frozenset | None = frozenset()
    version: int = 0
    key_groups: int = KEY_GROUPS
    #: the partition layout's number: it grows with each rescale (a partition actor refuses
    #: a batch routed for another layout)
    epoch: int = 0

    def __post_init__(self):
        check_partitions(self.partitions, self.key_groups)

    def route(self, events) -> dict:
        """``{target: [events]}`` with targets partition indexes and ``GLOBAL``; event order
        is kept within each target."""
        out: dict = {}
        n, key_attr, wanted = self.partitions, self.key_attr, self.global_types
        groups = self.key_groups
        for ev in events:
            out.setdefault(partition_of(event_key(ev, key_attr), n, groups), []).append(ev)
            if wanted is None or ev.type in wanted:
                out.setdefault(GLOBAL, []).append(ev)
        return out

    def route_rows(self, rows: list) -> dict | None:
        """``route`` of wire rows ``[type, ts, attrs, key, id]`` (cep.io.codec) without building
        events: ``{target: (rows, their indexes in rows)}``; None when a row is not such an
        array with a string type and a map (or no) attrs, or its key cannot be hashed (the
        caller then decodes the rows, which names the problem)."""
        out: dict = {}
        n, key_attr, wanted = self.partitions, self.key_attr, self.global_types
        places: dict = {}                  # string key -> partition (hashed once per key)
        for i, row in enumerate(rows):
            if row.__class__ is not list or not 2 <= len(row) <= 5:
                return None
            etype = row[0]
            attrs = row[2] if len(row) > 2 else None
            if etype.__class__ is not str or (attrs is not None and attrs.__class__ is not dict):
                return None
            key = routing_key(attrs, row[3] if len(row) > 3 else None, key_attr)
            target = places.get(key) if key.__class__ is str else None
            if target is None:
                try:
                    target = partition_of(key, n, self.key_groups)
                except (IngestError, TypeError):
                    return None
                if key.__class__ is str:
                    places[key] = target
            for t in (target, GLOBAL) if wanted is None or etype in wanted else (target,):
                entry = out.get(t)
                if entry is None:
                    entry = out[t] = ([], [])
                entry[0].append(row)
                entry[1].append(i)
        return out

    def route_table(self, table) -> dict | None:
        """``route`` of the rows of a pyarrow Table (a schema-2 batch's columns, cep.io.codec)
        without building events: ``{target: row indexes}`` (numpy, ascending); None when the
        table cannot be routed this way (a ``type`` column that is not text without nulls, a
        key column with nulls, a key that cannot be hashed: the caller then decodes the rows,
        which names the problem). Each distinct key is hashed once."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        names = table.schema.names
        if "type" not in names or not pa.types.is_string(table.schema.field("type").type) \
                or table.column("type").null_count:
            return None
        column = self.key_attr if self.key_attr is not None else "key"
        n, wanted, rows = self.partitions, self.global_types, table.num_rows
        if column in names:
            keys = table.column(column).combine_chunks()
            if keys.null_count:          # (a row without its key attribute: the key column
                return None              # may stand in; decoded rows say which)
            codes = pc.dictionary_encode(keys)
            try:
                places = np.array([partition_of(k, n, self.key_groups)
                                   for k in codes.dictionary.to_pylist()],
                                  dtype=np.int64)
            except (IngestError, TypeError):
                return None
            target = places[codes.indices.to_numpy(zero_copy_only=False)] \
                if len(places) else np.zeros(0, dtype=np.int64)
            out: dict = {int(t): np.flatnonzero(target == t) for t in np.unique(target)}
        else:
            out = {GLOBAL_PARTITION: np.arange(rows)} if rows else {}
        if wanted is None:
            every = np.arange(rows)
        elif wanted:
            mask = pc.is_in(table.column("type"), value_set=pa.array(sorted(wanted)))
            every = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        else:
            every = np.zeros(0, dtype=np.int64)
        if len(every):
            out[GLOBAL] = every
        return out

    def to_dict(self) -> dict:
        return {"partitions": self.partitions, "key_attr": self.key_attr,
                "global_types": None if self.global_types is None else sorted(self.global_types),
                "version": self.version, "key_groups": self.key_groups, "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: dict) -> "RoutingTable":
        types = data.get("global_types", [])
        return cls(int(data["partitions"]), data.get("key_attr"),
                   None if types is None else frozenset(types), int(data.get("version", 0)),
                   int(data.get("key_groups", KEY_GROUPS)), int(data.get("epoch", 0)))


def behind_steps(times, origins: dict) -> dict:
    """``{target: [[row, clock], ...]}``: the rows of each target's batch (by their index in
    it) whose event time is before that of an earlier row of the request (or slice), with
    the latest event time of the rows before it (what one engine fed the request had as its
    clock there: ``PartitionWorker.ingest`` observes it before the row). ``times``: the
    request's event times in its order (a value that is not a finite number neither counts
    nor is behind: its row is refused later); ``origins``: per target, the indexes of its
    rows in the request, ascending. Empty for a request in time order (checked first: the
    usual case costs one pass)."""
    import numpy as np
    if isinstance(times, np.ndarray):
        t = times.astype(np.float64)
    else:
        try:                                    # a request in time order: nothing to do
            if all(map(le, times, islice(times, 1, None))):
                return {}
        except TypeError:                       # (values that do not compare: see below)
            pass
        t = np.array([x if (x.__class__ is float or x.__class__ is int) else math.nan
                      for x in times], dtype=np.float64)
    if len(t) < 2:
        return {}
    t[~np.isfinite(t)] = math.nan
    before = np.empty_like(t)
    before[0] = -math.inf
    before[1:] = np.fmax.accumulate(t)[:-1]
    behind = t < before                         # (NaN compares False)
    if not behind.any():
        return {}
    out = {}
    for target, rows in origins.items():
        rows = np.asarray(rows, dtype=np.int64)
        k = np.flatnonzero(behind[rows])
        if len(k):
            out[target] = [[int(i), float(before[rows[i]])] for i in k]
    return out


def event_steps(events: list, routed: dict) -> dict:
    """``behind_steps`` of ``events`` (a request or slice) routed by ``RoutingTable.route``
    (each target's events, all or some, in their order in ``events``)."""
    times = [e.ts for e in events]
    if all(map(le, times, islice(times, 1, None))):
        return {}
    where = {id(e): i for i, e in enumerate(events)}
    return behind_steps(times, {t: [where[id(e)] for e in evs] for t, evs in routed.items()})


def good_row_steps(steps: list, bad_rows: list) -> list:
    """``steps`` (``behind_steps``: ``[[row, time], ...]`` by row of a batch) by row among the
    batch's good rows: the bad ones (``bad_rows``, indexes; None for a batch-level problem)
    are not processed."""
    bad = sorted(r for r in bad_rows if r is not None)
    skip = set(bad)
    return [[row - bisect.bisect_left(bad, row), at] for row, at in steps if row not in skip]
