"""Autoscaling the partition actors from measured load (``raycep serve --autoscale MIN..MAX``,
issue 38), as Flink's autoscaler scales a job's parallelism from its operators' busy time.

Every ``interval`` seconds the gateway looks at the partition actors (``Look``): the share of
the time they were busy taking batches (each actor's ``busy`` seconds, PartitionWorker.health),
the fullest outbox, and the batches they refused (backpressure). ``decide`` (a pure function)
then says whether to change the number of actors, and why:

* **up** when, for ``up_after`` looks in a row, the busiest actor was busy at least ``high`` of
  the time, or an outbox was half full, or batches were refused: to the number that would
  bring the busy share to ``target`` (at least one more), at most ``maximum``;
* **down** when, for ``down_after`` looks in a row, every actor was busy at most ``low`` of the
  time with no refusal and outboxes nearly empty: one fewer, at least ``minimum``.

Up is quick and down is slow (hysteresis), and after a change the next decision waits
``cooldown`` seconds (the looks start again). Every decision is logged with its reason and
kept (``GET /v1/scale``: ``autoscale``). A decision re-partitions as ``raycep scale`` does
(gateway/server/scaling.py), which asks Ray's autoscaler for a CPU per partition actor: on
KubeRay with the autoscaler on, worker pods are added (docs/kubernetes.md).
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from raycep.cep.errors import CepError

log = logging.getLogger("raycep.gateway")


@dataclass(frozen=True)
class AutoscaleSettings:
    minimum: int
    maximum: int
    interval: float = 10.0        # seconds between two looks
    high: float = 0.7             # busy share (busiest actor) above which actors are added
    low: float = 0.2              # busy share (every actor) below which one is removed
    target: float = 0.5           # the busy share a scale-up aims at
    up_after: int = 2             # looks in a row before adding
    down_after: int = 6           # looks in a row before removing
    cooldown: float = 30.0        # seconds after a change before the next decision

    def __post_init__(self):
        for name in ("minimum", "maximum", "up_after", "down_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CepError(f"autoscale {name} must be a positive integer, got {value!r}")
        if self.minimum > self.maximum:
            raise CepError(f"autoscale: the minimum ({self.minimum}) is above the maximum "
                           f"({self.maximum})")
        for name in ("interval", "cooldown"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value < 0 or name == "interval" and value == 0:
                raise CepError(f"autoscale {name} must be a number of seconds "
                               f"{'> 0' if name == 'interval' else '>= 0'}, got {value!r}")
        if not 0 <= self.low < self.high <= 1 or not 0 < self.target <= 1:
            raise CepError(f"autoscale: need 0 <= low < high <= 1 and 0 < target <= 1, got "
                           f"low {self.low}, high {self.high}, target {self.target}")


def parse_range(text: str) -> tuple:
    """``"MIN..MAX"`` (or one number) -> ``(MIN, MAX)``; CepError naming the problem."""
    lo, sep, hi = str(text).partition("..")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise CepError(f"--autoscale takes MIN..MAX (numbers of partition actors, e.g. "
                       f"1..8), got {text!r}") from None
    if pair[0] < 1 or pair[0] > pair[1]:
        raise CepError(f"--autoscale {text}: need 1 <= MIN <= MAX")
    return pair


@dataclass(frozen=True)
class Look:
    """The partition actors over one interval: each one's busy share, the fullest outbox's
    share of its capacity, the batches refused."""
    busy: tuple
    outbox: float = 0.0
    refused: int = 0

    @property
    def peak(self) -> float:
        return max(self.busy, default=0.0)

    @property
    def mean(self) -> float:
        return sum(self.busy) / len(self.busy) if self.busy else 0.0


def decide(looks: list, current: int, s: AutoscaleSettings) -> tuple | None:
    """``(partitions, reason)``: where to go from ``current`` after ``looks`` (oldest first,
    since the last change), or None to stay (module docstring)."""
    if current < s.minimum:
        return s.minimum, f"{current} actors, below the minimum {s.minimum}"
    if current > s.maximum:
        return s.maximum, f"{current} actors, above the maximum {s.maximum}"
    hot = looks[-s.up_after:]
    if current < s.maximum and len(hot) == s.up_after and all(
            x.peak >= s.high or x.outbox >= 0.5 or x.refused for x in hot):
        peak = sum(x.peak for x in hot) / len(hot)
        want = min(s.maximum, max(current + 1, math.ceil(current * peak / s.target)))
        why = [f"busiest actor {peak:.0%} busy (>= {s.high:.0%})" if peak >= s.high else "",
               "an outbox half full" if any(x.outbox >= 0.5 for x in hot) else "",
               f"{sum(x.refused for x in hot)} batches refused"
               if any(x.refused for x in hot) else ""]
        return want, f"{', '.join(w for w in why if w)} over the last {len(hot)} looks"
    cold = looks[-s.down_after:]
    if current > s.minimum and len(cold) == s.down_after and all(
            x.peak <= s.low and x.outbox < 0.1 and not x.refused for x in cold):
        peak = max(x.peak for x in cold)
        return current - 1, (f"every actor at most {peak:.0%} busy (<= {s.low:.0%}) over the "
                             f"last {len(cold)} looks")
    return None


class Autoscaler:
    """The gateway's loop: look, decide, re-partition (``scale``: the gateway's
    re-partitioning), log and keep each decision."""

    def __init__(self, settings: AutoscaleSettings, actors, scale, clock=time.monotonic):
        self.settings, self.actors, self.scale = settings, actors, scale
        self.clock = clock
        self.looks: list = []
        self.decisions: list = []
        self._last: dict | None = None        # per actor: (time, busy, refused)
        self._changed = -math.inf
        self._task = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):    # noqa: BLE001 (stopping)
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval)
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:          # noqa: BLE001 (logged; the loop goes on)
                log.warning("autoscale: %s", exc)

    async def step(self) -> dict | None:
        """One look and, when due, one decision (carried out); the decision or None."""
        look = await self._look()
        if look is None:
            return None
        self.looks.append(look)
        del self.looks[:-max(self.settings.up_after, self.settings.down_after)]
        if self.clock() - self._changed < self.settings.cooldown:
            return None
        current = self.actors.routing.partitions
        got = decide(self.looks, current, self.settings)
        if got is None:
            return None
        want, why = got
        log.warning("autoscale: %d -> %d partition actors: %s", current, want, why)
        decision = {"at": time.time(), "from": current, "to": want, "reason": why}
        try:
            report = await self.scale(want)
            decision["seconds"] = report["seconds"]
        except CepError as exc:
            decision["error"] = str(exc)
            log.warning("autoscale: re-partitioning to %d failed: %s", want, exc)
        self.decisions.append(decision)
        del self.decisions[:-100]
        self.looks.clear()
        self._last = None
        self._changed = self.clock()
        return decision

    async def _look(self) -> Look | None:
        """The actors' busy shares since the previous look (None at the first look after a
        change: it only records where they are)."""
        n = self.actors.routing.partitions
        now = self.clock()
        health = await asyncio.gather(*(self.actors.call(j, "health") for j in range(n)))
        last, self._last = self._last, {j: (now, h.get("busy", 0.0), h.get("refused", 0))
                                        for j, h in enumerate(health)}
        if last is None or set(last) != set(self._last):
            return None
        busy, refused = [], 0
        for j, (t, b, r) in self._last.items():
            t0, b0, r0 = last[j]
            busy.append(min(1.0, max(0.0, (b - b0) / (t - t0))) if t > t0 else 0.0)
            refused += max(0, r - r0)
        fill = max(((h.get("outbox") or 0) / max(1, h.get("outbox_capacity") or 1)
                    for h in health), default=0.0)
        return Look(tuple(busy), fill, refused)

    def describe(self) -> dict:
        s = self.settings
        return {"minimum": s.minimum, "maximum": s.maximum, "interval": s.interval,
                "high": s.high, "low": s.low, "cooldown": s.cooldown,
                "decisions": list(self.decisions)}
