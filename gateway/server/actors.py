"""The actors as the gateway sees them: their handles (the partition actors, the global actor,
the planner), one way to call them (an unreachable actor is an UnavailableError), where each
registered query runs (its scope) and the routing table that sends events there."""
from __future__ import annotations

import asyncio
import math

from raycep.actors.handles import as_handle
from raycep.actors.routing import GLOBAL, KEY_GROUPS, RoutingTable
from raycep.cep.errors import CepError, UnavailableError
from raycep.gateway.server.messages import short_reason

#: the actor argument of ``Actors.call`` that names the planner
PLANNER = "planner"


class Actors:
    """The handles (``targets``: partition index or GLOBAL -> handle; ``planner``: None
    without one), ``scopes`` (query id -> ``"keyed"``: every partition actor, ``"global"``:
    the global actor) and ``routing`` (replaced, never changed, when the queries change)."""

    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 key_groups: int = KEY_GROUPS):
        self.targets = {i: as_handle(h) for i, h in enumerate(partitions)}
        self.targets[GLOBAL] = as_handle(global_actor)
        self.planner = as_handle(planner) if planner is not None else None
        self.scopes: dict = {}
        self.routing = RoutingTable(len(partitions), key_attr, key_groups=key_groups)

    async def call(self, target, method: str, *args):
        """``await handle.call(method, *args)``; an unreachable actor -> UnavailableError,
        raycep errors pass through."""
        handle = self.targets[target] if target != PLANNER else self.planner
        try:
            return await handle.call(method, *args)
        except CepError as exc:
            cause = getattr(exc, "cause", None)        # Ray's wrapper: its text is a traceback
            if isinstance(cause, CepError):
                raise cause from None
            raise
        except Exception as exc:
            raise UnavailableError(f"{actor_name(target)} is unreachable ({method}): "
                                   f"{short_reason(exc)}") from exc

    async def clock(self) -> float:
        """The stream's latest event time: the largest of the actors' clocks (each moves
        with the events it receives and with ``advance``)."""
        return max(await asyncio.gather(*(self.call(t, "clock") for t in self.targets)))

    async def stats(self, targets=None) -> list:
        """The ``stats()`` of ``targets`` (None: every actor), concurrently, in order."""
        targets = list(self.targets) if targets is None else targets
        return list(await asyncio.gather(*(self.call(t, "stats") for t in targets)))

    def of_scope(self, scope: str) -> list:
        """The actors a query of ``scope`` runs on."""
        return [GLOBAL] if scope == "global" else [t for t in self.targets if t != GLOBAL]

    def busy(self) -> list:
        """The actors some registered query runs on."""
        scopes = set(self.scopes.values())
        return [t for t in self.targets
                if ("global" if t == GLOBAL else "keyed") in scopes]


def actor_name(target) -> str:
    """How an error message names an actor."""
    return "the planner" if target == PLANNER else \
        "the global actor" if target == GLOBAL else f"partition actor {target}"


def event_clock(actor_stats: list) -> float:
    """The latest event time the actors have seen (-inf: none), from their ``stats()``: the
    largest ``max_ts`` of their (source, type) streams; a watermark given with ``advance``
    does not move it (so repeated advances cannot creep ahead)."""
    clock = -math.inf
    for st in actor_stats:
        for s in st.get("disorder", {}).get("streams", {}).values():
            ts = s["max_ts"]
            if ts > clock:
                clock = ts
    return clock
