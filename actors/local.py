"""LocalHandle: call a plain object the way a Ray actor handle is called, so the gateway's
control code runs unchanged in one process (the tests run the gateway this way).

``handle.method.remote(*args)`` runs the method at once and returns an awaitable holding its
result or its exception, like an ``ObjectRef`` awaited inside an async actor.
"""
from __future__ import annotations


class Done:
    """The outcome of a call: awaited (like an ObjectRef inside an async actor) or read with
    ``result()`` (like ``ray.get``)."""
    __slots__ = ("value", "error")

    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value

    def __await__(self):
        if self.error is not None:
            raise self.error
        return self.value
        yield  # pragma: no cover  (makes this a generator)


class _Method:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs) -> Done:
        try:
            return Done(self.fn(*args, **kwargs))
        except Exception as exc:      # delivered when awaited, as Ray does
            return Done(error=exc)


class LocalHandle:
    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        return _Method(getattr(self.obj, name))
