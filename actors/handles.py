"""Actors and how raycep calls them: the one module (with ``gateway/runtime.py``, which starts
and stops a cluster) that uses Ray's API, behind a small handle interface with an in-process
twin, as Ray Serve keeps Ray behind its own handle and tests its controller without Ray.

A handle (``RayHandle`` for a Ray actor, ``LocalHandle`` for a plain object in this process):

- ``await handle.call(method, *args)``: the result (an actor's exception is raised);
- ``handle.get(method, *args)``: the same, blocking (driver code, tests);
- ``handle.submit(method, *args)``: start a call, read its outcome later with ``result(p)``
  (pipelining: the bulk producer keeps several batches in flight);
- ``handle.tell(method, *args)``: fire and forget (the planner pushing plans).

``as_handle(x)`` wraps a Ray actor handle or a plain object. The names and the Ray namespace
of the cluster's actors are here too (``NAMESPACE``, ``actor_name``, ``PLANNER``,
``GATEWAY``, ``INGEST``), and the Ray actor class of a service (``actor_class``).
"""
from __future__ import annotations

from raycep.actors.routing import GLOBAL, RoutingTable
from raycep.cep.errors import UnavailableError

#: the Ray namespace of a raycep cluster's named actors
NAMESPACE = "raycep"
PLANNER = "raycep-planner"
GATEWAY = "raycep-gateway"
INGEST = "raycep-ingest"            # the warm Spark of ``raycep serve --spark`` (optional)


def actor_name(target) -> str:
    """The Ray actor name of a routing target (a partition number or GLOBAL)."""
    return "raycep-global" if target == GLOBAL else f"raycep-p{int(target)}"


class Done:
    """The outcome of a local call: awaited (like an ObjectRef inside an async actor) or read
    with ``result()`` (like ``ray.get``)."""
    __slots__ = ("value", "error")

    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value

    def done(self) -> bool:
        return True

    def __await__(self):
        if self.error is not None:
            raise self.error
        return self.value
        yield  # pragma: no cover  (makes this a generator)


class LocalHandle:
    """A plain object called as an actor is: at once, in this thread."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def submit(self, method: str, *args) -> Done:
        try:
            return Done(getattr(self.obj, method)(*args))
        except Exception as exc:      # delivered when read, as Ray does
            return Done(error=exc)

    async def call(self, method: str, *args):
        return self.submit(method, *args).result()

    def get(self, method: str, *args, timeout: float | None = None):
        return self.submit(method, *args).result()

    def tell(self, method: str, *args) -> None:
        getattr(self.obj, method)(*args)


class RayHandle:
    """A Ray actor (``ray.actor.ActorHandle``); picklable, so it can be handed to other actors."""
    __slots__ = ("actor",)

    def __init__(self, actor):
        self.actor = actor

    def submit(self, method: str, *args):
        return getattr(self.actor, method).remote(*args)

    async def call(self, method: str, *args):
        return await getattr(self.actor, method).remote(*args)

    def get(self, method: str, *args, timeout: float | None = None):
        import ray
        return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout)

    def tell(self, method: str, *args) -> None:
        getattr(self.actor, method).remote(*args)

    def kill(self) -> None:
        import ray
        ray.kill(self.actor)

    def alive(self, method: str, timeout: float = 5.0) -> bool | None:
        """True when ``method`` (a cheap one) answers, False when the actor is dead for good
        (killed, crashed and not restarted), None when it is busy or restarting."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError
        try:
            ray.get(getattr(self.actor, method).remote(), timeout=timeout)
            return True
        except GetTimeoutError:
            return None
        except ActorDiedError:
            return False
        except RayActorError:             # unavailable: being restarted
            return None

    def __getstate__(self):
        return self.actor

    def __setstate__(self, actor):
        self.actor = actor


def as_handle(x):
    """``x`` as a handle: a handle as it is, a Ray actor handle as a RayHandle, any other
    object as a LocalHandle."""
    if isinstance(x, (LocalHandle, RayHandle)):
        return x
    if type(x).__module__.startswith("ray."):
        return RayHandle(x)
    return LocalHandle(x)


def ready(pending) -> bool:
    """Whether a submitted call has finished (its ``result`` will not wait)."""
    if isinstance(pending, Done):
        return pending.done()
    import ray
    return bool(ray.wait([pending], timeout=0)[0])


def result(pending, timeout: float | None = None):
    """The value of a submitted call (``ray.get`` for a Ray ObjectRef); UnavailableError
    when it has not come within ``timeout`` seconds (an actor down and not back, or
    restarting for longer)."""
    if isinstance(pending, Done):
        return pending.result()
    import ray
    from ray.exceptions import GetTimeoutError
    try:
        return ray.get(pending, timeout=timeout)
    except GetTimeoutError:
        raise UnavailableError(f"an actor did not answer within {timeout:g} s (down, or "
                               f"restarting for longer)") from None


def actor_class(cls, **options):
    """The Ray actor class of ``cls`` (``actor_class(PartitionWorker).remote(...)``)."""
    import ray
    return ray.remote(**options)(cls) if options else ray.remote(cls)


def connect_ray(address: str | None = None, namespace: str = NAMESPACE, **kwargs) -> bool:
    """Join (``address``) or start Ray unless this process already has; True when it did."""
    import ray
    if ray.is_initialized():
        return False
    ray.init(address=address, namespace=namespace, **kwargs)
    return True


def node_id() -> str | None:
    """The Ray node this process runs on (an actor's stats name it), None outside Ray. Ray is
    imported only when it already is: a process that never used Ray does not pay for it."""
    import sys
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def ray_metric_types():
    """``(Counter, Gauge)`` of ``ray.util.metrics`` in a process connected to Ray (an actor:
    Ray's metrics agent exports them to Prometheus, and its dashboard shows them), None
    elsewhere (Ray is not imported for it)."""
    import sys
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    from ray.util.metrics import Counter, Gauge
    return Counter, Gauge


def connected_address() -> str | None:
    """The address of the Ray this process is connected to (None: not connected)."""
    import ray
    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def named_handle(name: str):
    """The RayHandle of a named actor of the cluster (requires Ray to be connected)."""
    import ray
    return RayHandle(ray.get_actor(name, namespace=NAMESPACE))


def optional_handle(name: str):
    """``named_handle(name)``, or None where the cluster has no such actor."""
    try:
        return named_handle(name)
    except ValueError:
        return None


def wait_for(pending, timeout: float):
    """``(done, value)`` of a submitted call within ``timeout`` seconds: ``(False, None)``
    while it runs. The call's own exception is raised as it is (Ray's error is an instance
    of it); an actor that died (its constructor failed, its process ended) is
    UnavailableError naming why."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
    try:
        return True, ray.get(pending, timeout=timeout)
    except GetTimeoutError:
        return False, None
    except RayActorError as exc:
        first = str(exc).strip().splitlines()
        raise UnavailableError(first[-1] if first else type(exc).__name__) from None


def named_handles(routing: RoutingTable) -> dict:
    """The RayHandles of every routing target (requires Ray to be connected)."""
    targets = list(range(routing.partitions)) + [GLOBAL]
    return {t: named_handle(actor_name(t)) for t in targets}
