"""Statistics for planning: arrival rates per event type over a sliding horizon of event time,
and predicate selectivities from the counters the evaluator keeps anyway (Kolchinsky & Schuster,
VLDB 2018, section 5: "the arrival rates ... and the predicate selectivities are rarely obtained
in advance").

Both are cheap enough to stay on: a rate costs two C-level list appends per event; a selectivity is the
difference of two counter snapshots (``Conjunct.tested`` / ``passed``) between two checks.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import accumulate, islice
from operator import attrgetter, le

_TYPE, _TS = attrgetter("type"), attrgetter("ts")


class RateTracker:
    """Events per second of event time, per type, over the last ``horizon`` seconds.

    Counts go into buckets of ``horizon / buckets`` seconds; the rate is the count of the full
    buckets in the horizon divided by their span. An event counts in the bucket that holds the
    latest event time seen when it arrives (one behind it joins the current bucket).

    Events are logged with C-level extends (their types, and that running maximum) and counted
    per bucket only when the rates are asked for or the log grows: only the last ``buckets``
    closed buckets are ever counted, so the cost per event does not depend on how many
    buckets a run spans.
    """

    def __init__(self, horizon: float = 60.0, buckets: int = 12, fold_every: int = 8192):
        self.horizon = float(horizon)
        self.width = self.horizon / buckets
        self.buckets = buckets
        self.fold_every = fold_every
        self._origin: float | None = None   # where bucket 0 starts
        self._max = -math.inf
        self._types: list = []              # the log: event types ...
        self._times: list = []              # ... and the running maximum of event times
        self._closed: deque = deque(maxlen=buckets)   # (bucket number, counts), oldest first

    def observe(self, etype: str, ts: float):
        if self._origin is None:
            self._origin = math.floor(ts / self.width) * self.width
        if ts > self._max:
            self._max = ts
        self._types.append(etype)
        self._times.append(self._max)
        if len(self._types) >= self.fold_every:
            self._fold()

    def observe_many(self, events):
        """``observe`` each event in turn."""
        self.observe_runs(list(map(_TYPE, events)), list(map(_TS, events)))

    def observe_runs(self, types: list, times: list):
        """``observe`` of the events with these ``types`` and ``times``, in turn."""
        if not types:
            return
        if self._origin is None:
            self._origin = math.floor(times[0] / self.width) * self.width
        self._types.extend(types)
        if times[0] >= self._max and all(map(le, times, islice(times, 1, None))):
            self._times.extend(times)           # in order: the running maximum is the time
        else:
            running = accumulate(times, max, initial=self._max)
            next(running)
            self._times.extend(running)
        self._max = self._times[-1]
        if len(self._types) >= self.fold_every:
            self._fold()

    def _bound(self, k: int) -> float:
        return self._origin + k * self.width

    def _current(self) -> int:
        """The number of the bucket the latest event time is in."""
        k = max(0, math.floor((self._max - self._origin) / self.width))
        while self._bound(k + 1) <= self._max:
            k += 1
        while k > 0 and self._bound(k) > self._max:
            k -= 1
        return k

    def _fold(self) -> int:
        """Count the logged closed buckets that are still in the horizon, forget the rest of
        the closed part of the log; returns the current bucket's number."""
        now = self._current()
        times, types = self._times, self._types
        first = max(now - self.buckets, self._closed[-1][0] + 1 if self._closed else 0)
        i = bisect_left(times, self._bound(first))
        for k in range(first, now):
            j = bisect_left(times, self._bound(k + 1), i)
            self._closed.append((k, Counter(types[i:j])))
            i = j
        del times[:i], types[:i]
        return now

    def rates(self) -> dict:
        """type -> events/s over the closed buckets (the current one too if none closed yet)."""
        if self._origin is None:
            return {}
        now = self._fold()
        closed = min(self.buckets, now)
        if not closed:
            counts, span = Counter(self._types), self.width
        else:
            counts, span = Counter(), self.width * closed
            for k, c in self._closed:
                if k >= now - closed:
                    counts.update(c)
        return {t: n / span for t, n in counts.items()}


def per_key(rates: dict, keys: int) -> dict:
    """Rates of a query evaluated per partition key: the stream's rates over ``keys`` keys
    (the cost model counts one key's events per window); the one rule of ``raycep local``
    (keys in its index) and the cluster's planner (keys summed over the actors' reports)."""
    keys = max(1, int(keys))
    return {t: r / keys for t, r in rates.items()}


class SelectivityEstimator:
    """Selectivity of each conjunct (by index) from tested/passed counts as they arrive, the
    one estimate ``raycep local`` (``SelectivityTracker``) and the cluster's planner
    (``PlannerService``, summing the partitions' reports) both use.

    ``add`` accumulates counts; each ``sample()`` turns the counts since the previous one into
    an estimate where there are at least ``min_tested`` (else they wait for more): Laplace-
    smoothed ``(passed + 1) / (tested + 2)``, so a short run of failures never reads as
    selectivity 0 (which would zero every cost term with the conjunct), averaged with the
    previous estimate (weight ``1 - smoothing``)."""

    def __init__(self, min_tested: int = 50, smoothing: float = 0.5):
        self.min_tested = min_tested
        self.smoothing = smoothing
        self._pending: dict = {}        # conjunct index -> [tested, passed] not yet sampled
        self.estimates: dict = {}

    def add(self, tested: dict, passed: dict) -> None:
        """Counts since the previous ``add``, per conjunct index (int or its string, as
        msgpack may deliver it)."""
        for k, n in tested.items():
            if n:
                entry = self._pending.setdefault(int(k), [0, 0])
                entry[0] += n
                entry[1] += passed.get(k, 0)

    def sample(self) -> dict:
        """conjunct index -> selectivity (only conjuncts measured so far)."""
        for k, entry in self._pending.items():
            dt, dp = entry
            if dt >= self.min_tested:
                new = (dp + 1) / (dt + 2)
                old = self.estimates.get(k)
                self.estimates[k] = new if old is None else \
                    self.smoothing * old + (1 - self.smoothing) * new
                entry[0] = entry[1] = 0
        return dict(self.estimates)


class SelectivityTracker:
    """The ``SelectivityEstimator`` of one compiled query in this process, fed from its
    conjuncts' tested/passed counters."""

    def __init__(self, cq, min_tested: int = 50, smoothing: float = 0.5):
        self.cq = cq
        self.estimator = SelectivityEstimator(min_tested, smoothing)
        self._last = [(c.tested, c.passed) for c in cq.conjuncts]

    @property
    def estimates(self) -> dict:
        return self.estimator.estimates

    def sample(self) -> dict:
        """index in cq.conjuncts -> selectivity (only conjuncts measured so far)."""
        tested, passed = {}, {}
        for k, (c, (t0, p0)) in enumerate(zip(self.cq.conjuncts, self._last)):
            tested[k], passed[k] = c.tested - t0, c.passed - p0
        self._last = [(c.tested, c.passed) for c in self.cq.conjuncts]
        self.estimator.add(tested, passed)
        return self.estimator.sample()


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
