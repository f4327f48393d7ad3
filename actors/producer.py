"""Producer: the bulk ingestion path shared by Spark jobs and ``raycep demo``.

Events are routed with the cluster's RoutingTable, packed into msgpack batches (cep.codec) and
pushed straight to the partition actors (named ``raycep-p<i>`` / ``raycep-global`` in the Ray
namespace ``raycep``), bypassing the gateway; the gateway drains the actors' match outboxes.
Batch ids are ``<producer run>:<sequence>:<target>`` (the run is a random token per Producer),
so a batch this producer sends twice is recognised, and two producers that share a source
name never mistake each other's batches for redeliveries.
"""
from __future__ import annotations

import itertools
import uuid

from actors.routing import RoutingTable, actor_name
from cep.codec import encode_batch

NAMESPACE = "raycep"


def named_handles(routing: RoutingTable) -> dict:
    """The Ray actor handles of every routing target (requires ``ray.init`` to have run)."""
    import ray
    from actors.routing import GLOBAL
    targets = list(range(routing.partitions)) + [GLOBAL]
    return {t: ray.get_actor(actor_name(t), namespace=NAMESPACE) for t in targets}


class Producer:
    """``send(events)`` routes, encodes and pushes; ``flush()`` waits for the acks.

    ``routing`` is a RoutingTable or a callable returning one (e.g. a GET of the gateway's
    ``/v1/routing``), re-read before every ``refresh_every``-th slice (default: every slice),
    so a global query registered while the stream flows gets its events from the next slice.
    Raise ``refresh_every`` for very small slices where one request per slice is too much."""

    def __init__(self, handles: dict, routing, source: str, max_in_flight: int = 8,
                 refresh_every: int = 1):
        self.handles = handles
        self._routing_source = routing if callable(routing) else (lambda: routing)
        self.routing = self._routing_source()
        self.source = source
        self.max_in_flight = max_in_flight
        self.refresh_every = refresh_every
        self._seq = itertools.count(1)
        self._run = uuid.uuid4().hex[:12]
        self.redelivered = 0
        self._pending: list = []
        self.events = 0
        self.bad_rows: list = []
        self.duplicates = 0
        self.matches = 0

    def send(self, events: list):
        """Push one slice of the stream (all its targets get one batch each)."""
        import ray
        seq = next(self._seq)
        if seq > 1 and (seq - 1) % self.refresh_every == 0:
            self.routing = self._routing_source()
        for target, evs in self.routing.route(events).items():
            data = encode_batch(evs, self.source, f"{self._run}:{seq}:{target}")
            self._pending.append(self.handles[target].ingest.remote(data))
        self.events += len(events)
        while len(self._pending) > self.max_in_flight * max(1, len(self.handles)):
            done, self._pending = ray.wait(self._pending, num_returns=1)
            self._account(ray.get(done))

    def flush(self) -> dict:
        import ray
        self._account(ray.get(self._pending))
        self._pending = []
        return {"events": self.events, "duplicates": self.duplicates,
                "redelivered_batches": self.redelivered,
                "bad_rows": self.bad_rows, "matches": self.matches}

    def _account(self, acks: list):
        for ack in acks:
            self.redelivered += ack["redelivered"]
            self.duplicates += ack["duplicates"]
            self.bad_rows.extend(ack["bad_rows"])
            self.matches += ack["queued"] + len(ack["matches"])
