"""Starting a raycep cluster: on Ray (``RayCluster``) or in one process (``InProcessCluster``).

RayCluster creates, in the Ray namespace ``raycep``: partition actors ``raycep-p0`` ..
``raycep-p<n-1>`` and the global actor ``raycep-global`` (PartitionWorker, one shared index
each), the planner ``raycep-planner`` (PlannerService) and the gateway ``raycep-gateway``
(GatewayServer, an async actor serving HTTP), and with ``spark`` settings ``raycep-ingest``
(spark_ingest.service.IngestService: a warm Spark for ``raycep ingest``). The partition
actors are created by the driver,
not by the gateway, so a gateway restart keeps them and their buffered events; the new
gateway re-attaches and converges them to its persisted registry.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from dataclasses import dataclass, replace

from raycep.actors.handles import (GATEWAY, INGEST, NAMESPACE, PLANNER, LocalHandle, RayHandle,
                                   actor_class, actor_name, connect_ray, node_id,
                                   optional_handle)
from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.actors.recovery import CheckpointSettings, claim
from raycep.actors.routing import GLOBAL
from raycep.cep.runtime.engine import check_retain
from raycep.cep.store.disorder import DisorderSettings, check_mode
from raycep.gateway.server.http import GatewayServer
from raycep.gateway.server.service import GatewaySettings
from raycep.planner.service import PlannerService


def alive_nodes() -> list:
    import ray
    return [n for n in ray.nodes() if n.get("Alive")]


def wait_for_nodes(count: int, timeout: float, progress) -> int:
    """Wait until the Ray cluster has ``count`` alive nodes (worker pods join after the head)
    or ``timeout`` s passed; the number of nodes there are."""
    deadline = time.monotonic() + timeout
    told = None
    while (have := len(alive_nodes())) < count:
        now = time.monotonic()
        if now >= deadline:
            progress(f"only {have} of {count} Ray nodes after {timeout:g} s: starting on them")
            return have
        if told is None or now - told >= 10.0:
            progress(f"waiting for Ray nodes: {have} of {count}")
            told = now
        time.sleep(0.5)
    if told is not None:
        # a node the GCS calls alive is not yet known to every scheduler, which would put an
        # actor with a soft affinity to it elsewhere: a task pinned to each node tells when
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        probe = ray.remote(num_cpus=0)(node_id)
        ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote() for n in alive_nodes()],
            timeout=max(deadline - time.monotonic(), 10.0))
    return have


def spread(count: int) -> list:
    """Where ``count`` actors go: round robin over the alive nodes other than this one (the
    worker pods on Kubernetes; this node, the head, keeps the gateway), those with CPUs when
    there are any (a node started with no CPUs is meant to stay idle), this node only when it
    is alone. Soft: an actor restarted after its node was lost goes to any node alive. (Ray's
    "SPREAD" leaves CPU-less actors on one node: ray#27577.) The actors must ask for some
    resource, else Ray ignores the affinity."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    here = ray.get_runtime_context().get_node_id()
    nodes = sorted((n for n in alive_nodes() if n["NodeID"] != here), key=lambda n: n["NodeID"])
    busy = [n["NodeID"] for n in nodes if n.get("Resources", {}).get("CPU", 0) > 0]
    others = busy or [n["NodeID"] for n in nodes] or [here]
    return [NodeAffinitySchedulingStrategy(others[i % len(others)], soft=True)
            for i in range(count)]


def remove_partition_state(checkpoint: CheckpointSettings | None, target) -> None:
    """Delete the saved state of a partition actor that a rescale stopped."""
    if checkpoint is not None:
        shutil.rmtree(os.path.join(checkpoint.directory, f"p{target}"), ignore_errors=True)


@dataclass
class RaySpawner:
    """Starts and stops partition actors for a rescale (gateway/server/scaling.py), as
    ``RayCluster.start`` does; handed to the gateway actor (picklable)."""
    key_attr: str | None
    worker: WorkerSettings
    disorder: DisorderSettings | None
    checkpoint: CheckpointSettings | None
    key_groups: int

    def spawn(self, target: int):
        """A new partition actor; not waited for (the gateway's ``adopt`` call on it awaits
        its construction, without blocking the gateway's loop)."""
        restarts = {"max_restarts": -1, "max_task_retries": -1} \
            if self.checkpoint is not None else {}
        remove_partition_state(self.checkpoint, target)     # (a stopped actor's, if any)
        worker = actor_class(PartitionWorker, num_cpus=0, memory=2**20)
        # a soft affinity as start() spreads them: round robin over the other nodes
        place = spread(target + 1)[target]
        # detached: it outlives the gateway actor that started it (a restarted gateway finds
        # it by name); RayCluster.stop stops it by name
        with_name = dict(name=actor_name(target), namespace=NAMESPACE, lifetime="detached",
                         scheduling_strategy=place, **restarts)
        return RayHandle(worker.options(**with_name).remote(
            f"p{target}", self.key_attr, worker=self.worker, disorder=self.disorder,
            checkpoint=self.checkpoint))

    def retire(self, target: int, handle) -> None:
        handle.kill()
        remove_partition_state(self.checkpoint, target)

    def reserve(self, partitions: int) -> None:
        """Ask Ray's autoscaler for a CPU per partition actor (``ray.autoscaler.sdk.
        request_resources``; it replaces the previous request): on KubeRay with the
        autoscaler on, worker pods are added until the cluster has them, or removed when
        idle after a scale-down. Without an autoscaler it changes nothing."""
        from ray.autoscaler.sdk import request_resources
        request_resources(bundles=[{"CPU": 1}] * partitions)

    def claim(self, partitions: int) -> None:
        if self.checkpoint is not None:
            claim(self.checkpoint.directory, partitions, self.key_attr, self.key_groups,
                  force=True)


class LocalSpawner:
    """``RaySpawner`` for an ``InProcessCluster``: PartitionWorkers in this process."""

    def __init__(self, cluster: "InProcessCluster"):
        self.cluster = cluster

    def spawn(self, target: int):
        c = self.cluster
        remove_partition_state(c._worker_args["checkpoint"], target)
        worker = PartitionWorker(f"p{target}", c.key_attr, **c._worker_args)
        c.workers[target] = worker
        c.workers = {t: c.workers[t] for t in sorted(k for k in c.workers if k != GLOBAL)
                     + [GLOBAL]}
        return LocalHandle(worker)

    def reserve(self, partitions: int) -> None:
        """(One process: nothing to ask for.)"""

    def retire(self, target: int, handle) -> None:
        c = self.cluster
        worker = c.workers.pop(target)
        if worker.durable is not None:
            worker.durable.close()
        remove_partition_state(c._worker_args["checkpoint"], target)

    def claim(self, partitions: int) -> None:
        c = self.cluster
        checkpoint = c._worker_args["checkpoint"]
        if checkpoint is not None:
            claim(checkpoint.directory, partitions, c.key_attr, c.settings.key_groups,
                  force=True)


def named_partitions() -> dict:
    """The partition actors of the cluster Ray runs now, by number (0, 1, ... as long as
    they exist: a rescale keeps them numbered from 0)."""
    out, target = {}, 0
    while True:
        handle = optional_handle(actor_name(target))
        if handle is None:
            return out
        out[target] = handle
        target += 1


class RayCluster:
    def __init__(self, partitions: int = 2, key_attr: str | None = None,
                 settings: GatewaySettings = GatewaySettings(), address: str | None = None,
                 num_cpus: int | None = None, disorder: DisorderSettings | None = None,
                 mode: str | None = None, checkpoint: CheckpointSettings | None = None,
                 retain: float = 0.0, spark=None, spark_log: str | None = None,
                 metrics_port: int | None = None):
        """``spark``: a spark_ingest.service.SparkSettings: keep a warm Spark for ``raycep
        ingest`` (the actor INGEST, started in the background; its JVM logs to
        ``spark_log``); ``metrics_port``: where the Ray this starts (no ``address``) exports
        its metrics, the actors' ones among them (None: a port Ray picks)."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self.disorder, self.mode = disorder, check_mode(mode)
        self.key_attr = key_attr
        self.settings = settings
        self.address = address
        self.num_cpus = num_cpus
        self.checkpoint = checkpoint
        self.retain = check_retain(retain)
        self.spark, self.spark_log = spark, spark_log
        self.metrics_port = metrics_port
        self.ingest = None                # RayHandle of the warm Spark (spark settings given)
        self.handles: dict = {}           # routing target -> RayHandle of its actor
        self.planner = None               # RayHandle
        self.gateway = None               # RayHandle
        self.url = None
        self._owns_ray = False

    def start(self, min_nodes: int = 1, nodes_timeout: float = 300.0, progress=None) -> str:
        """Start (or join) Ray, create the actors, start the gateway; returns its URL. With
        ``min_nodes``, first wait (up to ``nodes_timeout`` s, ``progress(text)`` told every
        10 s) until the cluster has that many nodes, so the actors are spread over them."""
        # no address: start a Ray of our own even where another runs on this machine (Ray
        # would otherwise join the latest one it finds, and refuse num_cpus)
        own = {} if self.address else {"num_cpus": self.num_cpus}
        if self.metrics_port is not None and not self.address:
            own["_metrics_export_port"] = self.metrics_port
        self._owns_ray = connect_ray(
            self.address or "local", include_dashboard=False, log_to_driver=False,
            configure_logging=False, **own)
        wait_for_nodes(min_nodes, nodes_timeout, progress or (lambda text: None))
        if self.checkpoint is not None:
            claim(self.checkpoint.directory, self.partitions, self.key_attr,
                  self.settings.key_groups)
        # with saved state an actor that dies comes back (Ray re-runs its constructor, which
        # restores the checkpoint and replays the log) and the calls made meanwhile are
        # retried on it (batch ids make them idempotent); without, it stays dead and callers
        # get UnavailableError rather than an actor that silently lost its queries and events
        restarts = {"max_restarts": -1, "max_task_retries": -1} \
            if self.checkpoint is not None else {}
        # no CPU (Spark executors and tasks keep every core), but 1 MiB of memory: Ray places
        # an actor that asks for nothing at all on a random node, ignoring a soft affinity
        Worker = actor_class(PartitionWorker, num_cpus=0, memory=2**20)
        targets = list(range(self.partitions)) + [GLOBAL]
        for t, place in zip(targets, spread(len(targets))):
            self.handles[t] = RayHandle(Worker.options(
                name=actor_name(t), namespace=NAMESPACE, get_if_exists=True,
                scheduling_strategy=place, **restarts).remote(
                f"p{t}" if t != GLOBAL else GLOBAL, self.key_attr,
                worker=self._worker_settings(), disorder=self.disorder,
                checkpoint=self.checkpoint))
        # the planner's state is soft (statistics, current plans): a restarted planner is
        # given the queries again by the gateway (gateway.server.planning: Planning.converge)
        self.planner = RayHandle(actor_class(PlannerService, num_cpus=0).options(
            name=PLANNER, namespace=NAMESPACE, get_if_exists=True, max_restarts=-1,
            max_task_retries=-1).remote())
        if self.spark is not None:
            self.start_ingest()
        return self.start_gateway()

    def _worker_settings(self) -> WorkerSettings:
        return WorkerSettings(outbox=True, mode=self.mode, retain=self.retain)

    def start_ingest(self) -> None:
        """Start the warm Spark (spark_ingest.service): its constructor starts Spark in the
        background; ``raycep ingest`` waits for it when it comes early. Not restarted when
        it fails: ``raycep ingest`` then starts a Spark of its own, saying why. Several
        calls at once: progress and cancellation reach it while a job runs."""
        from raycep.spark_ingest.service import IngestService
        self.ingest = RayHandle(actor_class(IngestService, num_cpus=0, max_concurrency=4)
                                .options(name=INGEST, namespace=NAMESPACE,
                                         get_if_exists=True)
                                .remote(self.spark, self.spark_log))

    def start_gateway(self) -> str:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        found = named_partitions()          # (a rescale may have changed them; the handles
        if found:                           # this process made keep its actors alive)
            self.handles = {**{t: self.handles.get(t, h) for t, h in found.items()},
                            GLOBAL: self.handles[GLOBAL]}
            self.partitions = len(found)
        parts = [self.handles[i] for i in range(self.partitions)]
        # on this node (the head pod in the Helm chart): its port is what the Service exposes
        # and its registry file is on this node's volume; Ray would otherwise pick any node
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                              soft=False)
        self.gateway = RayHandle(actor_class(GatewayServer, num_cpus=0).options(
            name=GATEWAY, namespace=NAMESPACE, scheduling_strategy=here).remote(
            parts, self.handles[GLOBAL], self.planner, self.key_attr, self.settings,
            RaySpawner(self.key_attr, self._worker_settings(), self.disorder, self.checkpoint,
                       self.settings.key_groups)))
        self.url = self.gateway.get("start")
        return self.url

    def heal(self) -> bool:
        """Start a new gateway if the gateway actor died (its process was killed, its node
        lost): on the same registry, port and sink; it re-attaches to the actors and drains
        what they hold. ``raycep serve`` calls this every second. True when it restarted."""
        if self.gateway is None or self.gateway.alive("address") is not False:
            return False
        self.restart_gateway()
        return True

    def restart_gateway(self) -> str:
        """Kill the gateway actor and start a new one on the same registry (and port, when a
        fixed one is configured)."""
        import ray
        port = int(self.url.rsplit(":", 1)[1]) if self.url else self.settings.port
        self.gateway.kill()
        self.settings = replace(self.settings, port=port)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:           # Ray frees a dead actor's name soon after
            try:
                ray.get_actor(GATEWAY, namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.1)
        _wait_until_free(self.settings.host, port)
        return self.start_gateway()

    def stop(self):
        if self.gateway is not None:
            try:
                self.gateway.get("stop", timeout=10)
            except Exception:
                pass
        if self.ingest is not None:        # Spark's executors and master with it
            try:
                self.ingest.get("stop", timeout=30)
            except Exception:
                pass
        handles = dict(self.handles)
        if self.handles:
            handles.update(named_partitions())      # (those a rescale started)
        for h in [self.gateway, self.planner, self.ingest, *handles.values()]:
            if h is not None:
                h.kill()
        self.handles, self.gateway, self.planner, self.ingest = {}, None, None, None
        if self._owns_ray:
            import ray
            ray.shutdown()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class InProcessCluster:
    """The same services in this process: PartitionWorkers behind LocalHandles, the gateway
    on an asyncio loop in a daemon thread. For tests and small single-machine use."""

    def __init__(self, partitions: int = 2, key_attr: str | None = None,
                 settings: GatewaySettings = GatewaySettings(),
                 disorder: DisorderSettings | None = None, mode: str | None = None,
                 checkpoint: CheckpointSettings | None = None, retain: float = 0.0):
        self.key_attr = key_attr
        self.settings = settings
        if checkpoint is not None:
            claim(checkpoint.directory, partitions, key_attr, settings.key_groups)
        self._worker_args = dict(
            worker=WorkerSettings(outbox=True, mode=mode, retain=check_retain(retain)),
            disorder=disorder, checkpoint=checkpoint)
        self.workers = {t: PartitionWorker(f"p{t}" if t != GLOBAL else GLOBAL, key_attr,
                                           **self._worker_args)
                        for t in list(range(partitions)) + [GLOBAL]}
        self.planner = PlannerService()
        self.server = None
        self.url = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="raycep-gateway")
        self._thread.start()

    def _run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> str:
        parts = [LocalHandle(self.workers[i]) for i in range(len(self.workers) - 1)]
        self.server = GatewayServer(parts, LocalHandle(self.workers[GLOBAL]),
                                    LocalHandle(self.planner), self.key_attr, self.settings,
                                    LocalSpawner(self))
        self.url = self._run(self.server.start())
        return self.url

    def restart_partition(self, target) -> PartitionWorker:
        """A partition actor crashes and is restarted as Ray restarts it: a new worker from the
        same arguments (its state from the checkpoint directory) behind the same handle."""
        async def restart():                 # on the gateway's loop: between two calls
            worker = PartitionWorker(f"p{target}" if target != GLOBAL else GLOBAL,
                                     self.key_attr, **self._worker_args)
            self.workers[target] = worker
            if self.server is not None:
                self.server.service.targets[target].obj = worker
            return worker
        return self._run(restart())

    def restart_gateway(self) -> str:
        port = int(self.url.rsplit(":", 1)[1])
        self._run(self.server.stop())
        self.settings = replace(self.settings, port=port)
        self.planner = PlannerService()          # the planner restarts with the gateway here
        return self.start()

    def stop(self):
        if self.server is not None:
            self._run(self.server.stop())
            self.server = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _wait_until_free(host: str, port: int, timeout: float = 10.0):
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return
            except OSError:
                time.sleep(0.1)
