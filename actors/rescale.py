"""The state of the partition actors re-partitioned for another number of them (``raycep
scale``): their snapshots (``PartitionWorker.snapshot``, taken while no batch is in flight
and their outboxes are empty) split by the new owners of the key groups
(``actors.routing``): the engine state per key (cep/runtime/rescale.py), the remembered batch
ids to every actor (a batch delivered again is still recognised), the counters kept with the
actor of the same number (or the last one).
"""
from __future__ import annotations

from raycep.actors.routing import group_owner, key_group
from raycep.cep.errors import CepError
from raycep.cep.runtime.rescale import split


def moved_groups(before: int, after: int, key_groups: int) -> int:
    """How many key groups change owner from ``before`` to ``after`` partitions."""
    return sum(group_owner(g, before, key_groups) != group_owner(g, after, key_groups)
               for g in range(key_groups))


def split_workers(snaps: list, parts: int, key_groups: int, epoch: int) -> list:
    """``parts`` worker snapshots (partitions ``p0`` ..) from those of the current partition
    actors, in partition order, for the partition layout number ``epoch``. CepError when an
    outbox still holds records."""
    for s in snaps:
        box = s["outbox"]
        if box is not None and box["records"]:
            raise CepError(f"partition {s['partition']} still holds {len(box['records'])} "
                           f"undelivered match records: drain it before re-partitioning")
    engines = split([s["engine"] for s in snaps],
                     lambda key: group_owner(key_group(key, key_groups), parts, key_groups),
                     parts)
    recent = list(dict.fromkeys(tuple(i) for s in snaps for i in s["recent"] or ()))
    out = []
    for j, engine in enumerate(engines):
        mine = [s for i, s in enumerate(snaps) if min(i, parts - 1) == j]
        own = snaps[j] if j < len(snaps) else None
        out.append({
            "partition": f"p{j}", "engine": engine, "recent": recent, "epoch": epoch,
            "batches": sum(s["batches"] for s in mine),
            "redelivered": sum(s["redelivered"] for s in mine),
            "bad_rows": sum(s["bad_rows"] for s in mine),
            # an actor that stays keeps its sequence numbers: the gateway's acknowledgements
            # go on from them; a new one starts at 0
            "outbox": {"first": (own["outbox_seq"] if own else 0) + 1, "records": []}
            if snaps[0]["outbox"] is not None else None,
            "outbox_seq": own["outbox_seq"] if own else 0,
            "outbox_capacity": snaps[0]["outbox_capacity"],
            "refused": sum(s.get("refused", 0) for s in mine),
            "recoveries": sum(s.get("recoveries", 0) for s in mine),
            "rows": max(s.get("rows", 0) for s in snaps), "unplanned": {},
            "own_plans": sorted({p for s in snaps for p in s.get("own_plans", ())}),
        })
    return out
