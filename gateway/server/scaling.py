"""Changing the number of partition actors while the cluster runs (``raycep scale``, issue 38).

The keys' state moves with their key groups (actors.routing, actors.rescale): the gateway
holds new sends, advances and query changes (``Gate``) and lets those under way finish;
seals the partition actors at a common event time (``cut``, for the producers that push to
them directly: Spark jobs, ``Producer``), drains every outbox, has every partition actor
cut its state into one share per new actor (``give``: the shares for the others as bytes,
its own kept), has each new actor merge the shares it is given (``take``; logged with
a checkpoint directory), stops the surplus ones, and routes by the new
table (its version grows). Events held meanwhile are sent after: none is lost or
processed twice. The global actor does not change.

The cut. A producer that pushes to the actors itself sends each actor its part of the
stream in time order, but the actors are not at the same place in it: one may have taken
events up to 500 s while another has taken them up to 300 s. Merged into one new actor, the
second's keys would then get their next events behind the new actor's clock (out of order,
possibly late). So the actors are first sealed (``PartitionWorker.seal``): they refuse routed
batches (MovingError: the producer tries again shortly), then take again those that start no
later than the largest clock of all actors, the cut, until for ``settle`` seconds no actor
took any: every actor then holds its keys' events up to about the cut, and what comes after
starts after it (skipped where no producer of its own sent any actor a batch in the last
10 s: sends through the gateway are held instead). Then they refuse every routed batch until
they adopt the new layout, after which a batch routed for the old one is a ConflictError
(``Producer`` then routes it again).
A batch that starts before the cut and comes later than that (a producer stalled for the
whole move) is handled as any out-of-order input.

New actors are started before anything is held. Only the state of the key groups that
change actors travels (through the gateway, which passes its bytes on without decoding it);
an actor that stays keeps its event index and merges what it is given into it, and logs
the move (its next checkpoint is a compaction); sends wait until all of that is done.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time

from raycep.actors.handles import as_handle
from raycep.actors.rescale import moved_groups
from raycep.actors.routing import GLOBAL, check_partitions
from raycep.cep.errors import ConflictError, IngestError, OverloadedError
from raycep.gateway.server.actors import Actors

log = logging.getLogger("raycep.gateway")


class Gate:
    """Many ``shared`` holders at once (sends, advances, query changes), or one
    ``exclusive`` (a rescale), which waits for the shared ones under way and holds new ones
    until it is done."""

    def __init__(self):
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._users = 0

    @contextlib.asynccontextmanager
    async def shared(self):
        while not self._open.is_set():
            await self._open.wait()
        self._users += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._users -= 1
            if not self._users:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        while not self._open.is_set():          # one at a time
            await self._open.wait()
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()


class Scaling:
    """``spawner``: ``spawn(j) -> handle`` of a new partition actor ``j``, ``retire(j,
    handle)`` to stop one, ``claim(n)`` to mark the checkpoint directory as holding ``n``
    partitions, ``reserve(n)`` to ask the platform for room for ``n`` (None: this cluster
    cannot change its number of partitions)."""

    #: seconds without a routed batch taken before the cut is final (``_seal``); more than
    #: a producer's pause between two tries of a refused batch (actors.producer.Lane)
    settle = 0.25
    #: at most this many seconds are spent catching the actors up to the cut
    catch_up = 10.0
    #: no catching up where no producer's lane has sent an actor a batch for this long
    direct_quiet = 10.0

    def __init__(self, actors: Actors, outboxes, gate: Gate, settings, spawner=None):
        self.actors, self.outboxes, self.gate = actors, outboxes, gate
        self.settings = settings
        self.spawner = spawner
        self.history: list = []
        self._one_at_a_time = asyncio.Lock()

    async def scale(self, partitions) -> dict:
        """Re-partition to ``partitions`` actors; ``{"partitions", "before", "moved_key_groups",
        "key_groups", "buffered", "seconds", "held_seconds", "phases", "version", "cut"}``:
        ``held_seconds`` while sends were held, ``phases`` the seconds of each step
        (``start_actors`` before anything is held; ``seal``, ``give``, ``take``, ``finish``
        while held)."""
        groups = self.settings.key_groups
        try:
            check_partitions(partitions, groups)
        except ValueError as exc:
            raise IngestError(str(exc).replace("n_partitions", "partitions"),
                              field="partitions") from None
        if self.spawner is None:
            raise ConflictError("this cluster cannot change its number of partition actors "
                                "(it runs without a runtime that starts actors)")
        async with self._one_at_a_time:
            before = self.actors.routing.partitions
            if partitions == before:
                return self._report(before, before, 0, 0, 0.0)
            began = time.perf_counter()
            phases: dict = {}
            self._reserve(partitions)
            fresh = await self._start(before, partitions)      # (sends still flow)
            phases["start_actors"] = time.perf_counter() - began
            try:
                async with self.gate.exclusive():
                    held = time.perf_counter()
                    report = await self._move(before, partitions, fresh, phases)
                    report["held_seconds"] = round(time.perf_counter() - held, 4)
            except BaseException:
                for j, handle in fresh.items():
                    self.spawner.retire(j, handle)
                raise
            report["seconds"] = round(time.perf_counter() - began, 4)
            report["phases"] = {k: round(v, 4) for k, v in phases.items()}
            log.warning("re-partitioned from %d to %d actors: %d of %d key groups moved, "
                        "%d buffered events, %.3f s (sends held %.3f s)", before, partitions,
                        report["moved_key_groups"], groups, report["buffered"],
                        report["seconds"], report["held_seconds"])
            self.history.append(report)
            return report

    def _reserve(self, partitions: int) -> None:
        """Tell the runtime how many partition actors there will be (Ray's autoscaler: a CPU
        each, RaySpawner.reserve); a failure is logged, not raised."""
        reserve = getattr(self.spawner, "reserve", None)
        if reserve is None:
            return
        try:
            reserve(partitions)
        except Exception as exc:              # noqa: BLE001 (the rescale goes on)
            log.warning("could not ask Ray's autoscaler for %d CPUs: %s", partitions, exc)

    async def _start(self, before: int, partitions: int) -> dict:
        """Start the new partition actors and wait until they answer (before anything is
        held: a Ray actor takes a while to start)."""
        fresh = {j: as_handle(self.spawner.spawn(j)) for j in range(before, partitions)}
        try:
            await asyncio.gather(*(h.call("health") for h in fresh.values()))
        except BaseException:
            for j, handle in fresh.items():
                self.spawner.retire(j, handle)
            raise
        return fresh

    async def _move(self, before: int, partitions: int, fresh: dict, phases: dict) -> dict:
        """The keys' state to ``partitions`` actors (sends held: the gate is ours)."""
        groups = self.settings.key_groups
        mark = time.perf_counter()

        def lap(name):
            nonlocal mark
            now = time.perf_counter()
            phases[name] = now - mark
            mark = now
        cut = await self._seal(before)
        lap("seal")
        try:
            given = await self._shares(before, partitions)
            lap("give")
            epoch = self.actors.routing.epoch + 1
            targets = {j: self.actors.targets[j] for j in range(min(before, partitions))}
            targets.update(fresh)
            targets[GLOBAL] = self.actors.targets[GLOBAL]
        except BaseException:
            await self._unseal(before)
            raise
        done = await asyncio.gather(*(
            targets[j].call("take", [given[i].get(j) for i in range(before)], j, epoch,
                            partitions, groups)
            for j in range(partitions)))
        lap("take")
        for j in range(partitions, before):
            await self.actors.targets[j].call("leave", partitions)
            self.spawner.retire(j, self.actors.targets[j])
        self.actors.targets = targets
        self.actors.routing = dataclasses.replace(
            self.actors.routing, partitions=partitions, epoch=epoch,
            version=self.actors.routing.version + 1)
        await self.outboxes.retarget()
        self.spawner.claim(partitions)
        lap("finish")
        report = self._report(before, partitions, moved_groups(before, partitions, groups),
                              sum(d["buffered"] for d in done), 0.0)
        report["cut"] = cut
        return report

    async def _seal(self, before: int) -> float | None:
        """Seal the partition actors at a common event time (module docstring); returns it
        (None: no actor has seen an event). On return every actor refuses routed batches."""
        async def seal(cut):
            return await asyncio.gather(*(self.actors.call(j, "seal", cut)
                                          for j in range(before)))
        first = await seal(-math.inf)
        cut = max(s["clock"] for s in first)
        if min(s["direct_age"] for s in first) > self.direct_quiet:
            return cut if math.isfinite(cut) else None    # (no producer of its own sends)
        deadline = time.monotonic() + self.catch_up
        while math.isfinite(cut):
            quiet_since = time.monotonic()
            await seal(cut)
            while time.monotonic() < deadline:
                await asyncio.sleep(self.settle / 5)
                got = await seal(cut)
                later = max(s["clock"] for s in got)
                if any(s["taken"] for s in got) or later > cut:
                    quiet_since, cut = time.monotonic(), max(cut, later)
                elif time.monotonic() - quiet_since >= self.settle:
                    break
            got = await seal(-math.inf)            # (taken since the last look: once more)
            later = max(s["clock"] for s in got)
            if not any(s["taken"] for s in got) and later <= cut or \
                    time.monotonic() >= deadline:
                break
            cut = max(cut, later)
        return cut if math.isfinite(cut) else None

    async def _unseal(self, before: int) -> None:
        """A re-partitioning that failed: the actors take routed batches again."""
        await asyncio.gather(*(self.actors.call(j, "seal", None) for j in range(before)),
                             return_exceptions=True)

    async def _shares(self, before: int, partitions: int) -> list:
        """Per partition actor, ``{new actor: its share as bytes}`` (PartitionWorker.give),
        once their outboxes are empty (nothing flows: the gate holds every send and
        advance)."""
        groups = self.settings.key_groups
        for _ in range(100):
            await self.outboxes.drain_all()
            try:
                return await asyncio.gather(*(self.actors.call(j, "give", j, partitions,
                                                               groups)
                                              for j in range(before)))
            except OverloadedError:         # records made before the seal: drain again
                pass
        raise ConflictError("the partition actors' outboxes do not empty; try again")

    def _report(self, before: int, after: int, moved: int, buffered: int,
                seconds: float) -> dict:
        return {"partitions": after, "before": before, "moved_key_groups": moved,
                "key_groups": self.settings.key_groups, "buffered": buffered,
                "seconds": round(seconds, 4), "version": self.actors.routing.version}
