"""Where a send's time goes (issue 36): per request to ``POST /v1/events``, the seconds of each
stage, the last ``SendStages.KEEP`` requests kept and summarised as percentiles in ``GET
/v1/stats`` (``gateway.send_stages``).

Stages: ``route`` (the gateway reads, routes and encodes the rows), ``wait`` (the actor call
of the slowest target, less that actor's own time: the Ray call and the queue of calls before
it), ``actor`` (that actor's time in its ``ingest``: decoding, evaluating, recording),
``checkpoint`` (the part of ``actor`` spent writing a checkpoint that fell due), ``drain``
(moving the request's matches to the store before the answer) and ``total``.
"""
from __future__ import annotations

import contextvars
import time
from collections import deque

#: when the current request began (perf_counter), set by Ingest.ingest_body
STARTED: contextvars.ContextVar = contextvars.ContextVar("raycep_send_started", default=None)

STAGES = ("route", "wait", "actor", "checkpoint", "drain", "total")


class SendStages:
    """The stage seconds of the last ``KEEP`` sends."""

    KEEP = 20_000

    def __init__(self, observe=None):
        self._rows: deque = deque(maxlen=self.KEEP)
        self.count = 0
        self._observe = observe             # called with each send's stage seconds and
        #                                     whether it found matches

    def add(self, started: float, dispatched: float, acked: float, drained: float,
            acks: list, calls: list) -> None:
        """One send: its perf_counter times at the start, when its batches left for the
        actors, when every actor had answered and when its matches were stored; ``acks``:
        the actors' answers (their ``seconds`` and ``checkpoint_seconds``), ``calls``: each
        call's seconds as the gateway saw it."""
        actor = checkpoint = wait = 0.0
        if acks:
            k = max(range(len(acks)), key=calls.__getitem__)
            actor = float(acks[k].get("seconds", 0.0))
            checkpoint = float(acks[k].get("checkpoint_seconds", 0.0))
            wait = max(0.0, calls[k] - actor)
        row = (dispatched - started, wait, actor, checkpoint, drained - acked, drained - started)
        self._rows.append(row)
        self.count += 1
        if self._observe is not None:
            self._observe(row, any(a.get("queued") or a.get("matches") for a in acks))

    def summary(self) -> dict:
        """Per stage: n, p50, p99, max and mean (seconds) of the sends kept."""
        rows = list(self._rows)
        out: dict = {"sends": self.count, "kept": len(rows)}
        for k, stage in enumerate(STAGES):
            xs = sorted(r[k] for r in rows)
            if not xs:
                out[stage] = {"n": 0}
                continue
            n = len(xs)
            out[stage] = {"n": n, "p50": xs[(n - 1) // 2], "p99": xs[min(n - 1, (99 * n) // 100)],
                          "max": xs[-1], "mean": sum(xs) / n}
        return out


#: the clock of the stages
now = time.perf_counter
