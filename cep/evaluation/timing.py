"""How long a query's evaluations take: the seconds of each call that evaluates it (one
trigger, or a chunk of triggers evaluated together in bulk), counted in fixed buckets as a
Prometheus histogram counts them (``le``: at most the bucket's bound), with their sum."""
from __future__ import annotations

from bisect import bisect_left

#: upper bounds of the buckets, in seconds (10 us .. 1 s); a last bucket holds the rest
BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)


class EvalTimes:
    """The histogram of one evaluator's call seconds."""
    __slots__ = ("seconds", "counts")

    def __init__(self):
        self.seconds = 0.0
        self.counts = [0] * (len(BUCKETS) + 1)

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        self.counts[bisect_left(BUCKETS, seconds)] += 1

    def as_dict(self) -> dict:
        """``{"seconds": sum, "count": calls, "buckets": [calls per bucket, the last one
        above BUCKETS[-1]]}`` (not cumulative)."""
        return {"seconds": self.seconds, "count": sum(self.counts),
                "buckets": list(self.counts)}


def merged(parts) -> dict:
    """The sum of several ``as_dict`` results (one query's, from several engines)."""
    out = {"seconds": 0.0, "count": 0, "buckets": [0] * (len(BUCKETS) + 1)}
    for part in parts:
        out["seconds"] += part["seconds"]
        out["count"] += part["count"]
        out["buckets"] = [a + b for a, b in zip(out["buckets"], part["buckets"])]
    return out
