"""Out-of-order, late and duplicate input (LimeCEP: Kyrama & Gounaris, "Handling out-of-order
input arrival in CEP engines on the edge combining optimistic, pessimistic and lazy evaluation",
section 4.3 "Event Manager", equations 1-2, and the result-correctness rules of section 4.4).

Per stream, i.e. per (source, event type), the tracker keeps:

- the out-of-order score of each event. raycep's variant of equation 1 keeps only its
  ``time_diff`` term, without the log: ``score(e) = clock - e.ts`` (0 for an in-order event),
  where ``clock`` is the latest event time this engine has seen from any source. The rate terms
  of equation 1 are left out because they are not in event-time units, and a score in time
  units can be compared with a window and configured by a user ("up to 30 s late").
- the average score of its out-of-order events (a running mean over the first 1000, then an
  exponential moving average with weight 1/1000, so the estimate follows drift) and the
  lateness threshold ``theta = alpha x average`` (equation 2; alpha = 2.5 by default).
- a watermark: the largest event time seen from the stream minus its slack (theta, at least
  the configured minimum).

Every threshold is kept between ``min_slack`` and ``max_slack``. The engine's watermark is
``clock - slack`` with ``slack`` the largest threshold of all streams; it never moves back.
An event is *late* (goes to the late-events output, counted, never used) when its score is
above its own stream's threshold, or when it is older than what the engine can still use
exactly (the engine's ``floor``: the watermark its pessimistic queries were released to, the
events its index already dropped, a watermark given with ``advance``). Every other event is
used: pessimistic queries hold a trigger until the watermark passes it, optimistic queries emit
at the trigger and correct (retract / add) when such an event changes a result.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from raycep.cep.errors import CepError, IngestError, QueryValidationError

#: how queries handle out-of-order input (see cep.evaluation.manager)
MODES = ("optimistic", "pessimistic")
DEFAULT_MODE = "optimistic"
DEFAULT_SOURCE = "default"
#: out-of-order events averaged exactly before the mean becomes a moving average
MEAN_WINDOW = 1000


def check_mode(mode: str | None) -> str:
    """``mode`` if it is one of MODES (None: the default); else QueryValidationError."""
    if mode is None:
        return DEFAULT_MODE
    if mode not in MODES:
        raise QueryValidationError(f"unknown disorder mode {mode!r} (known: {', '.join(MODES)})")
    return mode


@dataclass(frozen=True)
class DisorderSettings:
    #: theta = alpha x average out-of-order score (LimeCEP equation 2)
    alpha: float = 2.5
    #: the slack (and every stream's threshold) is at least this (event-time units); set it to
    #: the delay you know your sources have, so the first late events are not lost to warm-up
    min_slack: float = 0.0
    #: the slack is at most this (None: no bound); bounds retention memory and the latency of
    #: pessimistic queries
    max_slack: float | None = None
    #: ids of events evicted from the index remembered to recognise re-sent copies
    remember_ids: int = 100_000
    #: late events kept for the caller to take (beyond that they are counted, with a warning)
    late_capacity: int = 100_000

    def __post_init__(self):
        for name in ("alpha", "min_slack", "max_slack", "remember_ids", "late_capacity"):
            value = getattr(self, name)
            if not (value is None and name == "max_slack") and (
                    isinstance(value, bool) or not isinstance(value, (int, float))):
                raise CepError(f"{name} must be a number, got {value!r}")
        if math.isnan(self.max_slack or 0.0):
            raise CepError("max_slack must be a number, got nan")
        if not (self.alpha > 0 and math.isfinite(self.alpha)):
            raise CepError(f"alpha must be a positive number, got {self.alpha!r}")
        if not (self.min_slack >= 0 and math.isfinite(self.min_slack)):
            raise CepError(f"min_slack must be a finite number >= 0, got {self.min_slack!r}")
        if self.max_slack is not None and not self.max_slack >= self.min_slack:
            raise CepError(f"max_slack ({self.max_slack!r}) must be >= min_slack "
                             f"({self.min_slack!r})")
        if self.remember_ids < 0 or self.late_capacity < 0:
            raise CepError("remember_ids and late_capacity must be >= 0")


def check_watermark(watermark) -> float:
    """A watermark is a number, not NaN; ``inf`` means the end of the stream (every deferred
    match is released, every later event is late) and ``-inf`` changes nothing."""
    if isinstance(watermark, bool) or not isinstance(watermark, (int, float)) \
            or math.isnan(watermark):
        raise IngestError(f"the watermark must be a number (event time), got {watermark!r}",
                          field="watermark")
    return watermark


class StreamStats:
    """Statistics of one (source, type) stream."""

    __slots__ = ("events", "out_of_order", "late", "mean", "max_score", "max_ts")

    def __init__(self):
        self.events = 0
        self.out_of_order = 0        # events with a positive score
        self.late = 0                # of those, events sent to the late output
        self.mean = 0.0              # average score of the out-of-order events
        self.max_score = 0.0
        self.max_ts = -math.inf

    def observe(self, score: float):
        self.out_of_order += 1
        self.mean += (score - self.mean) / min(self.out_of_order, MEAN_WINDOW)
        if score > self.max_score:
            self.max_score = score

    def to_dict(self, theta: float) -> dict:
        return {"events": self.events, "out_of_order": self.out_of_order, "late": self.late,
                "average_score": self.mean, "max_score": self.max_score, "threshold": theta,
                "max_ts": self.max_ts, "watermark": self.max_ts - theta}


@dataclass(frozen=True)
class LateEvent:
    """An event that arrived later than the threshold allows: never used, reported."""
    event: object
    source: str
    reason: str
    score: float                 # how far behind the engine's clock it was (event time)
    threshold: float             # its stream's threshold then
    watermark: float             # the engine's watermark then

    def to_dict(self) -> dict:
        return {"late": True, "source": self.source, "reason": self.reason,
                "score": self.score, "threshold": self.threshold,
                "watermark": self.watermark, "event": self.event.to_dict()}


class DisorderTracker:
    """Scores, thresholds and the watermark of one engine (one index)."""

    def __init__(self, settings: DisorderSettings | None = None):
        self.settings = settings or DisorderSettings()
        self.streams: dict = {}          # (source, type) -> StreamStats
        self.slack = self.settings.min_slack
        self.watermark = -math.inf       # events with ts < watermark are late

    def _stream(self, source: str, etype: str) -> StreamStats:
        s = self.streams.get((source, etype))
        if s is None:
            s = self.streams[(source, etype)] = StreamStats()
        return s

    def on_time(self, ts: float, source: str, etype: str):
        """An event at or after the clock (``ts`` becomes the clock)."""
        s = self.streams.get((source, etype)) or self._stream(source, etype)
        s.events += 1
        if ts > s.max_ts:
            s.max_ts = ts
        wm = ts - self.slack
        if wm > self.watermark:
            self.watermark = wm

    def on_time_run(self, source: str, types: list, times: list):
        """``on_time`` for a run of in-order events (``times`` increasing)."""
        last = dict(zip(types, times))                    # the last ts of each type
        self._on_time_counts(source, ((t, n, last[t]) for t, n in Counter(types).items()),
                             times[-1])

    def on_time_groups(self, source: str, groups: dict, last: float):
        """``on_time_run`` for a run given as ``{type: (rows, times)}`` whose last event time
        is ``last``."""
        self._on_time_counts(source, ((t, len(rows), tm[-1]) for t, (rows, tm) in
                                      groups.items()), last)

    def _on_time_counts(self, source: str, counts, last: float):
        """``(type, events, last ts)`` of a run of in-order events ending at ``last``."""
        streams = self.streams
        for etype, n, ts in counts:
            s = streams.get((source, etype)) or self._stream(source, etype)
            s.events += n
            if ts > s.max_ts:
                s.max_ts = ts
        wm = last - self.slack
        if wm > self.watermark:
            self.watermark = wm

    def out_of_order(self, ts: float, source: str, etype: str, clock: float,
                     floor: float = -math.inf, why: str = ""):
        """Score an event behind the clock; returns None (use it) or a LateEvent's fields
        ``(reason, score, threshold)``. ``floor``: the engine cannot use events before it
        (``why`` says why)."""
        s = self._stream(source, etype)
        s.events += 1
        if ts > s.max_ts:
            s.max_ts = ts
        score = clock - ts
        if score > 0:
            s.observe(score)
            self._update_slack(clock)
        theta = self.threshold(s)
        if ts < floor:
            reason = f"{score:g} behind the clock, {why} ({floor:g})"
        elif score > theta:
            reason = f"score {score:g} above the threshold {theta:g} of {source}/{etype}"
        else:
            return None
        s.late += 1
        return reason, score, theta

    def threshold(self, s: StreamStats) -> float:
        """A stream's lateness threshold: alpha x its average score, within the bounds."""
        cfg = self.settings
        theta = max(cfg.alpha * s.mean, cfg.min_slack)
        return theta if cfg.max_slack is None or theta <= cfg.max_slack else cfg.max_slack

    def _update_slack(self, clock: float):
        cfg = self.settings
        slack = max([cfg.alpha * s.mean for s in self.streams.values()] + [cfg.min_slack])
        if cfg.max_slack is not None and slack > cfg.max_slack:
            slack = cfg.max_slack
        self.slack = slack
        wm = clock - slack
        if wm > self.watermark:
            self.watermark = wm

    def advance(self, watermark: float):
        """No event with ``ts <= watermark`` will arrive any more."""
        check_watermark(watermark)
        wm = math.nextafter(watermark, math.inf) if math.isfinite(watermark) else watermark
        if wm > self.watermark:
            self.watermark = wm

    def type_events(self) -> dict:
        """Events seen so far per type, over every source."""
        out: dict = {}
        for (_, t), s in self.streams.items():
            out[t] = out.get(t, 0) + s.events
        return out

    def stats(self) -> dict:
        cfg = self.settings
        return {"watermark": self.watermark, "slack": self.slack, "alpha": cfg.alpha,
                "streams": {f"{src}/{t}": s.to_dict(self.threshold(s))
                            for (src, t), s in self.streams.items()}}

    def snapshot(self) -> dict:
        return {"slack": self.slack, "watermark": self.watermark,
                "streams": {k: {f: getattr(s, f) for f in StreamStats.__slots__}
                            for k, s in self.streams.items()}}

    def restore(self, state: dict):
        self.slack, self.watermark = state["slack"], state["watermark"]
        for k, fields in state["streams"].items():
            s = self.streams[tuple(k)] = StreamStats()
            for f, v in fields.items():
                setattr(s, f, v)
