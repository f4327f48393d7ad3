"""Statistics for planning: arrival rates per event type over a sliding horizon of event time,
and predicate selectivities from the counters the evaluator keeps anyway (seed 001 section 5:
"the arrival rates ... and the predicate selectivities are rarely obtained in advance").

Both are cheap enough to stay on: a rate is one dict increment per event; a selectivity is the
difference of two counter snapshots (``Conjunct.tested`` / ``passed``) between two checks.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


class RateTracker:
    """Events per second of event time, per type, over the last ``horizon`` seconds.

    Counts go into buckets of ``horizon / buckets`` seconds; the rate is the count of the full
    buckets in the horizon divided by their span.
    """

    def __init__(self, horizon: float = 60.0, buckets: int = 12):
        self.horizon = float(horizon)
        self.width = self.horizon / buckets
        self.buckets = buckets
        self._current: dict = {}
        self._start: float | None = None
        self._closed: deque = deque(maxlen=buckets)   # (start, counts) of finished buckets

    def observe(self, etype: str, ts: float):
        if self._start is None:
            self._start = math.floor(ts / self.width) * self.width
        if ts >= self._start + self.width:
            self._roll(ts)
        self._current[etype] = self._current.get(etype, 0) + 1

    def observe_many(self, events):
        """``observe`` each event in turn."""
        if not events:
            return
        if self._start is None:
            self._start = math.floor(events[0].ts / self.width) * self.width
        end = self._start + self.width
        current = self._current
        for ev in events:
            if ev.ts >= end:
                self._roll(ev.ts)
                end, current = self._start + self.width, self._current
            current[ev.type] = current.get(ev.type, 0) + 1

    def _roll(self, ts: float):
        """Close buckets until ``ts`` falls into the current one (a gap longer than the
        horizon leaves only empty buckets: skipped in one step)."""
        width = self.width
        skip = math.floor((ts - self._start) / width) - self.buckets - 1
        if skip > 0:
            self._closed.clear()
            self._current = {}
            self._start += skip * width
        while ts >= self._start + width:
            self._closed.append((self._start, self._current))
            self._current = {}
            self._start += width

    def rates(self) -> dict:
        """type -> events/s over the closed buckets (the current one too if none closed yet)."""
        buckets = list(self._closed) or ([(self._start, self._current)] if self._start is not None
                                         else [])
        if not buckets:
            return {}
        span = self.width * len(buckets)
        total: dict = {}
        for _, counts in buckets:
            for t, n in counts.items():
                total[t] = total.get(t, 0) + n
        return {t: n / span for t, n in total.items()}


class SelectivityTracker:
    """Selectivity of each conjunct of a compiled query from its tested/passed counters.

    Each ``sample()`` takes the evaluations since the previous one (at least ``min_tested``,
    else the last estimate stays), Laplace-smoothed ``(passed + 1) / (tested + 2)`` so a short
    run of failures never reads as selectivity 0 (which would zero every cost term with the
    conjunct), and averaged with the previous estimate (weight ``1 - smoothing``)."""

    def __init__(self, cq, min_tested: int = 50, smoothing: float = 0.5):
        self.cq = cq
        self.min_tested = min_tested
        self.smoothing = smoothing
        self._last = [(c.tested, c.passed) for c in cq.conjuncts]
        self.estimates: dict = {}

    def sample(self) -> dict:
        """index in cq.conjuncts -> selectivity (only conjuncts measured so far)."""
        for k, c in enumerate(self.cq.conjuncts):
            t0, p0 = self._last[k]
            dt, dp = c.tested - t0, c.passed - p0
            if dt >= self.min_tested:
                new = (dp + 1) / (dt + 2)
                old = self.estimates.get(k)
                self.estimates[k] = new if old is None else \
                    self.smoothing * old + (1 - self.smoothing) * new
                self._last[k] = (c.tested, c.passed)
        return dict(self.estimates)


@dataclass(frozen=True)
class Statistics:
    """What a plan was built from: rates by type and selectivities by conjunct index."""
    rates: dict = field(default_factory=dict)
    selectivities: dict = field(default_factory=dict)

    def deviation(self, other: "Statistics", floor_rate: float = 1e-3,
                  floor_sel: float = 1e-3) -> float:
        """The largest factor by which any statistic of ``other`` differs from this one
        (OpenCEP's deviation-aware re-optimisation compares each statistic with a threshold)."""
        worst = 1.0
        for mine, theirs, floor in ((self.rates, other.rates, floor_rate),
                                    (self.selectivities, other.selectivities, floor_sel)):
            for k in set(mine) | set(theirs):
                a = max(mine.get(k, 0.0), floor)
                b = max(theirs.get(k, 0.0), floor)
                worst = max(worst, a / b, b / a)
        return worst


def merge_statistics(parts: list) -> Statistics:
    """Combine statistics reported by several partitions: rates add up, selectivities are
    averaged (weighted equally)."""
    rates: dict = {}
    sels: dict = {}
    for s in parts:
        for t, r in s.rates.items():
            rates[t] = rates.get(t, 0.0) + r
        for k, v in s.selectivities.items():
            sels.setdefault(k, []).append(v)
    return Statistics(rates, {k: sum(v) / len(v) for k, v in sels.items()})
