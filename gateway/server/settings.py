"""GatewaySettings: the gateway's address, token, stores and limits (``raycep serve``'s
options), validated when made."""
from __future__ import annotations

import math
from dataclasses import dataclass

from raycep.actors.routing import KEY_GROUPS, MAX_KEY_GROUPS
from raycep.cep.errors import CepError
from raycep.gateway.server.autoscale import AutoscaleSettings


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8470
    token: str | None = None
    #: the persisted query registry (None: in memory, lost when the gateway stops); raycep
    #: serve's default is gateway.server.registry.default_registry_path()
    registry_path: str | None = None
    match_capacity: int = 10_000
    matches_jsonl: str | None = None
    #: key groups of the cluster (actors.routing): fixed for its life, the most partition
    #: actors it can be scaled to (--key-groups)
    key_groups: int = KEY_GROUPS
    drain_every: float = 0.02          # seconds between outbox drains while matches move
    #: the longest pause between two drains while nothing moves (the pause doubles from
    #: drain_every up to this): how late matches caused by producers that write to the actors
    #: directly reach the store after a quiet spell; the gateway's own ingest drains at once
    drain_idle: float = 1.0
    plan_every: float = 2.0            # seconds between planner rounds (0: never)
    drain_limit: int = 10_000
    #: the largest request body (bytes); a larger one is answered 413 (--max-body-bytes)
    max_body_bytes: int = 16 * 2**20
    #: the deepest nesting of arrays/maps in a JSON or msgpack body (--max-depth)
    max_depth: int = 32
    #: the largest query window (WITHIN) accepted at registration, seconds (--max-window)
    max_window: float = 7 * 86400.0
    #: how far ``advance`` may move the watermark past the latest event time the actors have
    #: seen, seconds, unless forced (--max-advance-ahead)
    max_advance_ahead: float = 86400.0
    #: seconds the gateway drains and retries an actor that refuses a batch (its match outbox
    #: is over its limit) before answering 503 OverloadedError
    overload_wait: float = 30.0
    #: undelivered match records an actor's outbox may hold before it refuses new batches
    #: (backpressure; --outbox-capacity)
    outbox_capacity: int = 100_000
    #: scale the partition actors from their load (gateway/server/autoscale.py;
    #: --autoscale MIN..MAX); None: only ``raycep scale`` changes their number
    autoscale: AutoscaleSettings | None = None

    def __post_init__(self):
        if isinstance(self.key_groups, bool) or not isinstance(self.key_groups, int) \
                or not 1 <= self.key_groups <= MAX_KEY_GROUPS:
            raise CepError(f"key_groups must be an integer from 1 to {MAX_KEY_GROUPS}, got "
                           f"{self.key_groups!r}")
        if isinstance(self.outbox_capacity, bool) or not isinstance(self.outbox_capacity, int) \
                or self.outbox_capacity < 1:
            raise CepError(f"outbox_capacity must be an integer >= 1, got "
                           f"{self.outbox_capacity!r}")
        if self.autoscale is not None and self.autoscale.maximum > self.key_groups:
            raise CepError(f"autoscale: at most {self.key_groups} partition actors (one per key "
                           f"group, --key-groups), got a maximum of {self.autoscale.maximum}")
        for name in ("max_body_bytes", "max_depth", "max_window", "max_advance_ahead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not (0 < value < math.inf):
                raise CepError(f"{name} must be a positive finite number, got {value!r}")
