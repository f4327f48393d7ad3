"""Lazy (raycep Engine) vs eager (benchmarks.eager_nfa) on seeded synthetic workloads.

    python3 -m benchmarks.bench_lazy_vs_eager [--quick] [--only NAME] [--gc]

One process, one core, ``time.perf_counter``. Both evaluators get the same pre-built Event
objects (building them is timed separately and not counted), the lazy one through
``Engine.process``. The cyclic garbage collector is off during the timed loops (``--gc`` keeps
it on): the eager baseline keeps up to millions of tracked tuples alive and collections over
them cost it ~25% of its throughput, which would tilt the comparison against it. Memory is
measured in separate runs under tracemalloc (which slows everything down), with the events
built on the fly inside the traced region, so what either evaluator retains -- events
included -- is counted.
When the eager baseline exceeds its time budget it stops; its events/s and the speed-up then
refer to the prefix it processed, and the output says so.
"""
from __future__ import annotations

import argparse
import gc
import math
import platform
import sys
import time
import tracemalloc
from dataclasses import replace

from benchmarks.eager_nfa import EagerNFA
from benchmarks.workloads import SKEWED, StreamSpec, Workload, generate, stream, workloads
from raycep.cep import Engine

MARK = 512                 # events between two clock readings (checkpoints)
SAMPLE = 1024              # events between two state-size samples in memory runs
TARGET_SPEEDUP = 50.0      # lazy >= 50x eager on skewed SEQ-3, 600 s window
TARGET_RATE = 100_000.0    # lazy >= 100,000 events/s on one core, 60 s window
LAZY_RUNS = 5              # the lazy engine is timed this many times; the fastest run counts


# --------------------------------------------------------------------------- runs

def run_lazy(w: Workload, events: list) -> dict:
    """Time ``Engine.process`` over ``events``; checkpoints (n, seconds, matches) every MARK."""
    engine = Engine(key_attr="k")
    engine.add_query(w.text, name=w.eager.name)
    process, size = engine.process, engine.index.__len__
    marks = [(0, 0.0, 0)]
    matches = peak = 0
    skip = 0.0                  # time spent sampling the state size, not counted
    t0 = time.perf_counter()
    for i, e in enumerate(events, 1):
        out = process(e)
        if out:
            matches += len(out)
        if not i % MARK:
            now = time.perf_counter()
            marks.append((i, now - t0 - skip, matches))
            if not i % SAMPLE:
                peak = max(peak, size())
                skip += time.perf_counter() - now
    matches += len(engine.advance(math.inf))
    seconds = time.perf_counter() - t0 - skip
    marks.append((len(events), seconds, matches))
    return {"events": len(events), "seconds": seconds, "matches": matches, "marks": marks,
            "peak_state": max(peak, size())}


def run_eager(w: Workload, events: list, budget: float) -> dict:
    """Time ``EagerNFA.process``; stop after ``budget`` seconds (checked every MARK events)."""
    nfa = EagerNFA(w.eager)
    process, size = nfa.process, nfa.stored_runs
    marks = [(0, 0.0, 0)]
    matches = peak = 0
    skip = 0.0
    stopped = False
    t0 = time.perf_counter()
    for i, e in enumerate(events, 1):
        out = process(e)
        if out:
            matches += len(out)
        if not i % MARK:
            now = time.perf_counter()
            marks.append((i, now - t0 - skip, matches))
            if not i % SAMPLE:
                peak = max(peak, size())
                skip += time.perf_counter() - now
            if now - t0 - skip > budget and i < len(events):
                stopped = True
                break
    if not stopped:
        matches += len(nfa.advance(math.inf))
        marks.append((len(events), time.perf_counter() - t0 - skip, matches))
    n, seconds, matches = marks[-1]
    return {"events": n, "seconds": seconds, "matches": matches, "marks": marks,
            "stopped": stopped, "peak_state": max(peak, size())}


def at(marks: list, n: int) -> tuple:
    """The checkpoint at event count ``n`` (which must be a checkpoint)."""
    for m in marks:
        if m[0] == n:
            return m
    raise KeyError(n)


def segment(marks: list, n1: int, n2: int) -> tuple:
    """(events, seconds, matches) between two checkpoints."""
    a, b = at(marks, n1), at(marks, n2)
    return b[0] - a[0], b[1] - a[1], b[2] - a[2]


def memory_run(w: Workload, n_events: int, kind: str, budget: float | None = None) -> dict:
    """Peak traced memory and peak state size; events are built inside the traced region."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    if kind == "lazy":
        engine = Engine(key_attr="k")
        engine.add_query(w.text, name=w.eager.name)
        process, size = engine.process, (lambda: len(engine.index))
    else:
        nfa = EagerNFA(w.eager)
        process, size = nfa.process, nfa.stored_runs
    peak_state, n, stopped = 0, 0, False
    t0 = time.perf_counter()
    for n, e in enumerate(stream(w.spec, n_events), 1):
        process(e)
        if not n % SAMPLE:
            peak_state = max(peak_state, size())
            if budget is not None and time.perf_counter() - t0 > budget:
                stopped = True
                break
    peak_state = max(peak_state, size())
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {"events": n, "peak_state": peak_state, "peak_bytes": peak, "stopped": stopped}


# --------------------------------------------------------------------------- reporting

def rate(n, s) -> str:
    return f"{n / s:,.0f}" if s > 0 else "-"


def mb(b) -> str:
    return f"{b / 1e6:,.1f} MB"


def describe_stream(spec: StreamSpec) -> str:
    rates = ":".join(f"{r:g}" for r in spec.rates.values())
    types = ":".join(spec.rates)
    vals = ", ".join(f"{t}.v~U({lo:g},{hi:g})" for t, (lo, hi) in spec.values.items())
    return f"{types} = {rates} events/s, {spec.keys} keys, {vals}, seed {spec.seed}"


def bench_workload(w: Workload, quick: bool) -> dict:
    n = w.quick_events if quick else w.events
    budget = w.eager_budget / 4 if quick else w.eager_budget
    print(f"\n=== {w.name}: {w.note}")
    print(f"query : {w.text}")
    print(f"stream: {describe_stream(w.spec)}")
    t = time.perf_counter()
    events = generate(w.spec, n)
    build = time.perf_counter() - t
    span = events[-1].ts - events[0].ts
    print(f"        {n:,} events over {span:,.0f} s of event time ({span / w.window:.1f} windows);"
          f" building the Event objects took {build:.2f} s ({rate(n, build)} events/s, not"
          f" counted below)")
    # the lazy run is short (well under a second), so timer noise matters: best of LAZY_RUNS
    lazy = min((run_lazy(w, events) for _ in range(LAZY_RUNS)), key=lambda r: r["seconds"])
    eager = run_eager(w, events, budget)
    common = eager["events"]
    lz = segment(lazy["marks"], 0, common) if common != lazy["events"] else \
        (lazy["events"], lazy["seconds"], lazy["matches"])
    eg = (eager["events"], eager["seconds"], eager["matches"])
    agree = lz[2] == eg[2]
    print(f"{'':14}{'events':>10}{'matches':>10}{'seconds':>9}{'events/s':>11}")
    print(f"{'lazy':14}{lazy['events']:>10,}{lazy['matches']:>10,}{lazy['seconds']:>9.2f}"
          f"{rate(lazy['events'], lazy['seconds']):>11}")
    if common != lazy["events"]:
        print(f"{'lazy (prefix)':14}{lz[0]:>10,}{lz[2]:>10,}{lz[1]:>9.2f}{rate(lz[0], lz[1]):>11}")
    note = f"   <- stopped at its {budget:g} s budget: first {common:,} events only" \
        if eager["stopped"] else ""
    print(f"{'eager':14}{eg[0]:>10,}{eg[2]:>10,}{eg[1]:>9.2f}{rate(eg[0], eg[1]):>11}{note}")
    speedup = (eg[1] / eg[0]) / (lz[1] / lz[0])
    print(f"matches equal on the common {common:,} events: {'yes' if agree else 'NO'}"
          f" (lazy {lz[2]:,}, eager {eg[2]:,})")
    print(f"speed-up (lazy events/s / eager events/s, same events): {speedup:.1f}x")
    # steady state: skip the first window (the eager state is still growing there)
    warm = int(w.spec.rate * w.window)
    warm = -(-warm // MARK) * MARK
    steady = None
    if warm + 10 * MARK <= common:
        end = common if common % MARK == 0 else common // MARK * MARK
        ls = segment(lazy["marks"], warm, end)
        es = segment(eager["marks"], warm, end)
        steady = (es[1] / es[0]) / (ls[1] / ls[0])
        print(f"steady state (events {warm:,}..{end:,}, after the first window): lazy "
              f"{rate(ls[0], ls[1])} events/s, eager {rate(es[0], es[1])} events/s, speed-up "
              f"{steady:.1f}x")
    else:
        print("steady state: the eager run did not get far enough past the first window")
    expect = w.spec.rate * w.window
    print(f"state in the timed runs (peak): lazy {lazy['peak_state']:,} buffered events "
          f"(one window holds ~{expect:,.0f}); eager {eager['peak_state']:,} stored partial "
          f"matches")
    # memory: separate traced runs, events built on the fly
    mem_n = min(n, max(int(1.25 * warm), 50_000))
    ml = memory_run(w, mem_n, "lazy")
    me = memory_run(w, mem_n, "eager", budget=budget)
    print(f"memory (tracemalloc peak incl. retained events; separate runs, first {mem_n:,} "
          f"events):")
    print(f"  lazy : {mb(ml['peak_bytes']):>10}  ({ml['peak_state']:,} buffered events at most)")
    enote = f"; stopped at its {budget:g} s budget after {me['events']:,} events" \
        if me["stopped"] else ""
    print(f"  eager: {mb(me['peak_bytes']):>10}  ({me['peak_state']:,} stored partial matches "
          f"at most{enote})")
    eager_mb = me["peak_bytes"] / 1e6
    if me["stopped"] and me["peak_state"]:
        per = me["peak_bytes"] / me["peak_state"]
        eager_mb = per * eager["peak_state"] / 1e6
        print(f"         ~{eager_mb:,.0f} MB extrapolated to the timed run's peak of "
              f"{eager['peak_state']:,} partial matches at {per:,.0f} B each (traced bytes per "
              f"stored partial match, events included)")
    return {"name": w.name, "lazy_rate": lazy["events"] / lazy["seconds"],
            "eager_rate": eg[0] / eg[1], "speedup": speedup, "steady": steady,
            "agree": agree, "eager_stopped": eager["stopped"], "lazy_mb": ml["peak_bytes"] / 1e6,
            "eager_mb": eager_mb, "eager_mb_est": me["stopped"]}


def memory_table(quick: bool) -> list:
    """Lazy engine on SEQ-3: peak buffered events and traced memory vs window and rate."""
    base = next(w for w in workloads() if w.name == "seq3-60s")
    windows = (15, 60, 240) if quick else (15, 30, 60, 120, 300, 600)
    scales = (1, 2) if quick else (1, 2, 4)
    print("\n=== lazy engine memory vs window and rate (SEQ-3, C.v~U(99,100), 50 keys)")
    print(f"{'window s':>9}{'rate ev/s':>10}{'events':>9}{'in window':>10}{'peak buf':>10}"
          f"{'peak MB':>9}{'bytes/buf ev':>13}")
    rows = []
    for scale in scales:
        for window in windows:
            if scale > 1 and window > (120 if quick else 300):
                continue
            spec = replace(SKEWED, rates={t: r * scale for t, r in SKEWED.rates.items()},
                           seed=SKEWED.seed + scale - 1)
            w = replace(base.with_window(window), spec=spec)
            expect = spec.rate * window
            n = int(expect * 1.5) + 4 * 4096
            r = memory_run(w, n, "lazy")
            per = r["peak_bytes"] / r["peak_state"]
            rows.append((window, spec.rate, n, expect, r["peak_state"], r["peak_bytes"], per))
            print(f"{window:>9g}{spec.rate:>10g}{n:>9,}{expect:>10,.0f}{r['peak_state']:>10,}"
                  f"{r['peak_bytes'] / 1e6:>9.1f}{per:>13,.0f}")
    # least-squares line: peak bytes = fixed + per_event * peak buffered events
    xs = [r[4] for r in rows]
    ys = [r[5] for r in rows]
    k = len(xs)
    mx, my = sum(xs) / k, sum(ys) / k
    per_event = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / \
        sum((x - mx) ** 2 for x in xs)
    fixed = my - per_event * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - fixed - per_event * x) ** 2 for x, y in zip(xs, ys)) / ss
    worst = max(abs(y - fixed - per_event * x) / y for x, y in zip(xs, ys))
    print(f"least-squares fit: peak traced bytes = {fixed / 1e6:.2f} MB + {per_event:,.0f} B x "
          f"peak buffered events; R^2 = {r2:.4f}, largest deviation {worst:.1%}")
    print("(peak buffered = events of one window + up to EVICT_EVERY=4096 not yet evicted)")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short streams, smaller budgets")
    ap.add_argument("--only", help="run one workload by name (and skip the memory table)")
    ap.add_argument("--gc", action="store_true", help="keep the cyclic GC on in timed loops")
    args = ap.parse_args(argv)
    print(f"raycep lazy vs eager benchmark{' (--quick)' if args.quick else ''}")
    print(f"python {platform.python_version()} ({platform.python_implementation()}), "
          f"{platform.machine()}, {platform.system()}; one process, one core; cyclic GC "
          f"{'on' if args.gc else 'off'} in the timed loops")
    t_all = time.perf_counter()
    results = []
    for w in workloads():
        if args.only and w.name != args.only:
            continue
        if not args.gc:
            gc.disable()
        try:
            results.append(bench_workload(w, args.quick))
        finally:
            gc.enable()
            gc.collect()
    if not args.only:
        memory_table(args.quick)
    print("\n=== summary")
    print(f"{'workload':14}{'lazy ev/s':>11}{'eager ev/s':>11}{'speed-up':>9}{'steady':>8}"
          f"{'lazy MB':>9}{'eager MB':>9}   matches")
    for r in results:
        st = f"{r['steady']:.1f}x" if r["steady"] else "-"
        star = "*" if r["eager_stopped"] else ""
        print(f"{r['name']:14}{r['lazy_rate']:>11,.0f}{r['eager_rate']:>10,.0f}{star:1}"
              f"{r['speedup']:>8.1f}x{st:>8}{r['lazy_mb']:>9.1f}{r['eager_mb']:>9.1f}"
              f"{'~' if r['eager_mb_est'] else ' '} {'equal' if r['agree'] else 'DIFFER'}")
    print("* eager stopped at its time budget; its rate is over the events it processed")
    print("~ extrapolated from a traced run that stopped at its time budget")
    by = {r["name"]: r for r in results}
    if "seq3-60s" in by:
        r = by["seq3-60s"]["lazy_rate"]
        print(f"target lazy >= {TARGET_RATE:,.0f} events/s (SEQ-3, 60 s): {r:,.0f} -> "
              f"{'met' if r >= TARGET_RATE else 'MISSED'}")
    if "seq3-600s" in by:
        r = by["seq3-600s"]
        s = r["steady"] or r["speedup"]
        print(f"target speed-up >= {TARGET_SPEEDUP:g}x (SEQ-3, 600 s): {r['speedup']:.1f}x "
              f"overall, {s:.1f}x steady state -> "
              f"{'met' if min(r['speedup'], s) >= TARGET_SPEEDUP else 'MISSED'}")
    print(f"total wall time {time.perf_counter() - t_all:.0f} s")
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
