"""The index's time buffer (cep.store.index.TimeBuffer, flat sorted lists) against
sortedcontainers.SortedKeyList on the operations the engine performs, to decide whether the
design's ``sortedcontainers`` should replace the hand-rolled buffer (issue 16).

    python3 -m benchmarks.bench_index [--events N] [--repeat R]

The workload is the one a partition buffer sees: events appended in time order in batches of
1,000 (``extend``; ``SortedKeyList.update``), 2 % of them late by up to 5 s (``insert``;
``add``), a window lookup (``range(ts - 60, ts)``) per event, and eviction of what is older
than the window every 1,000 events. The same operations on the same events, best of
``--repeat`` runs each, one process; both structures must return identical lookups (checked).
sortedcontainers is not a dependency of raycep: install it to run this (pip install
sortedcontainers).
"""
from __future__ import annotations

import argparse
import random
import time
from operator import attrgetter

from raycep.cep.event import Event
from raycep.cep.store.index import TimeBuffer

WINDOW = 60.0
BATCH = 1_000
LATE = 0.02


def workload(n: int, seed: int = 7):
    """``[(in-order batch, late events)]`` of ``n`` events, 10 per second of event time."""
    rng = random.Random(seed)
    events = [Event("Stock", i / 10, {"price": rng.random()}, id=f"e{i}") for i in range(n)]
    late = set(rng.sample(range(n), int(n * LATE)))
    batches = []
    for start in range(0, n, BATCH):
        chunk = events[start:start + BATCH]
        ordered = [e for i, e in enumerate(chunk, start) if i not in late]
        delayed = [Event(e.type, max(0.0, e.ts - rng.uniform(0, 5)), e.attrs, id=e.id)
                   for i, e in enumerate(chunk, start) if i in late]
        batches.append((ordered, delayed))
    return batches


def run_timebuffer(batches) -> tuple:
    buf = TimeBuffer()
    found = 0
    started = time.perf_counter()
    for ordered, delayed in batches:
        buf.extend(ordered, [e.ts for e in ordered])
        for e in delayed:
            buf.insert(e)
        for e in ordered:
            found += len(buf.range(e.ts - WINDOW, e.ts))
        buf.evict_before(ordered[-1].ts - WINDOW)
    return time.perf_counter() - started, found


def run_sortedkeylist(batches) -> tuple:
    from sortedcontainers import SortedKeyList
    buf = SortedKeyList(key=attrgetter("ts", "id"))
    found = 0
    started = time.perf_counter()
    for ordered, delayed in batches:
        buf.update(ordered)
        for e in delayed:
            buf.add(e)
        for e in ordered:
            found += len(list(buf.irange_key((e.ts - WINDOW,), (e.ts, "\U0010ffff"))))
        del buf[:buf.bisect_key_left((ordered[-1].ts - WINDOW,))]
    return time.perf_counter() - started, found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    batches = workload(args.events)
    ops = args.events * 2 + len(batches)                 # insert + lookup per event, evictions
    results = {}
    for name, run in (("TimeBuffer (cep.store.index)", run_timebuffer),
                      ("sortedcontainers.SortedKeyList", run_sortedkeylist)):
        best = min((run(batches) for _ in range(args.repeat)), key=lambda r: r[0])
        results[name] = best
    found = {r[1] for r in results.values()}
    if len(found) != 1:
        raise SystemExit(f"the structures disagree: {results}")
    print(f"{args.events:,} events ({LATE:.0%} late), window {WINDOW:g} s, best of "
          f"{args.repeat}; {found.pop():,} events returned by the lookups")
    print(f"| structure | seconds | operations/s |\n|---|---|---|")
    for name, (seconds, _) in results.items():
        print(f"| {name} | {seconds:.3f} | {ops / seconds:,.0f} |")
    (a, _), (b, _) = results.values()
    print(f"TimeBuffer is {b / a:.2f}x the speed of SortedKeyList")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
