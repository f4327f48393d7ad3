"""Cluster benchmark (issue 4): partition actors on Ray, and many queries on one shared index.

    python3 -m benchmarks.bench_cluster [--quick] [--part actors|queries|both] [--by-value]

Part 1 (Ray): events/s of 1 and 2 ``actors.partition`` actors on the same seeded stock-tick
stream (64 symbols, routed by ``actors.routing.split_by_partition`` on ``symbol``) with the
three sample queries of ``examples/queries.cep`` registered on every actor. The msgpack batches
are encoded (and ``ray.put``) before the clock starts: the producer side (Spark, the gateway)
is not measured. The clock runs from the first ``ingest`` dispatch until the driver has read
the last ack of every actor; the total number of matches must be identical for 1 and 2 actors.

Part 2 (in-process, no Ray): one ``PartitionWorker`` with 1, 10 and 100 registered queries
(variants of ``dip_recovery`` and ``clean_breakout`` with other thresholds, all WITHIN 30 s),
same events: events/s, and the memory the shared index retains (tracemalloc, by allocating
file: the index's buffers, the Event objects and their decoded values), which must not grow
with the number of queries.

Figures go to stdout, progress to stderr. Wall clock is ``time.perf_counter``; CPU seconds are
``time.process_time`` of each process (the actors' via ``__ray_call__``) and the machine-wide
busy time from /proc/stat.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, replace

import msgpack

from raycep.actors.partition import PartitionWorker, WorkerSettings, partition_actor
from raycep.actors.routing import split_by_partition
from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch
from raycep.cep.lang.parser import parse_queries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_FILE = os.path.join(ROOT, "examples", "queries.cep")
TARGET_SPEEDUP = 1.6            # 2 actors >= 1.6x one on 2 cores (issue 4)
KEY = "symbol"
GAPS = (0.1, 0.2, 0.3, 0.5, 1.0)  # examples/make_ticks.py: gap between two ticks, 8 symbols


@dataclass(frozen=True)
class Config:
    events: int = 300_000        # part 1 stream length
    symbols: int = 64
    batch: int = 2_000           # events per msgpack batch
    reps: int = 5                # timed repetitions per actor count (fresh actors each time)
    actors: tuple = (1, 2)
    warm: int = 100              # events of the warm-up batch (no matches possible)
    query_events: int = 20_000   # part 2 stream length (a prefix of the same stream)
    query_counts: tuple = (1, 10, 100)
    query_reps: int = 2          # part 2 timed repetitions (the 100-query run: once)
    seed: int = 42
    put: bool = True             # ray.put the batches before timing (else pass bytes by value)
    quiet_wait: float = 120.0    # wait up to this long for other processes to go idle


QUICK = Config(events=40_000, reps=2, query_events=6_000, query_reps=1, quiet_wait=30.0)
DISTURBED = 0.25                # cores used by other processes that flag a run as disturbed


_T0 = time.perf_counter()


def log(msg: str):
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- workload

def symbol_names(n: int) -> list:
    return [f"S{i:02d}" for i in range(n)]


def tick_rows(n: int, names: list, seed: int = 42):
    """``(ts, symbol, price, volume)`` as examples/make_ticks.py makes them (a multiplicative
    random walk per symbol, round-lot volumes with 2% spikes) over the symbols ``names``. The
    gaps are scaled by 8/len(names) so each symbol ticks as often as in the 8-symbol sample."""
    rng = random.Random(seed)
    prices = {s: round(rng.uniform(20.0, 900.0), 2) for s in names}
    scale = 8 / len(names)
    ts = 0.0
    for _ in range(n):
        ts = round(ts + rng.choice(GAPS) * scale, 4)
        symbol = rng.choice(names)
        prices[symbol] = max(1.0, prices[symbol] * (1.0 + rng.gauss(0.0, 0.004)))
        volume = 100 * rng.randint(1, 50)
        if rng.random() < 0.02:
            volume *= 10
        yield ts, symbol, round(prices[symbol], 2), volume


def ticks(n: int, symbols: int = 64, seed: int = 42) -> list:
    """``n`` Stock events of ``tick_rows`` over ``symbols`` symbols (~9 ticks per symbol per
    30 s window). Events carry ``key=symbol`` and an explicit id (``t<i>``), like a
    producer's."""
    return [Event("Stock", ts, {"symbol": symbol, "price": price, "volume": volume},
                  key=symbol, id=f"t{i}")
            for i, (ts, symbol, price, volume) in
            enumerate(tick_rows(n, symbol_names(symbols), seed))]


def warm_events(n: int) -> list:
    """Constant-price ticks of a symbol of their own, 60 s apart (more than any window) and
    before the stream: they run the ingest and evaluation code but can match nothing (every
    query needs a price move). Spaced out on purpose: ``rally`` on many equal prices inside one
    window costs time of the order of (events in the window)^4 (see CLUSTER_RESULTS.md)."""
    return [Event("Stock", -100_000.0 + 60.0 * i,
                  {"symbol": "WARM", "price": 100.0, "volume": 100}, key="WARM", id=f"w{i}")
            for i in range(n)]


def sample_queries() -> list:
    """``[(name, text)]`` of examples/queries.cep."""
    with open(QUERY_FILE, encoding="utf-8") as handle:
        return [(q.name, q.text) for q in parse_queries(handle.read())]


def dip_recovery(dip: float = 0.01, vol: float = 2.0) -> str:
    return (f"PATTERN SEQ(Stock a, Stock b, Stock c)\n"
            f"WHERE [symbol] AND b.price < a.price * {round(1 - dip, 6):g} AND c.price > a.price"
            f" AND c.volume >= {vol:g} * a.volume\nWITHIN 30 seconds")


def clean_breakout(rise: float = 0.015) -> str:
    return (f"PATTERN SEQ(Stock a, ~Stock n, Stock b)\n"
            f"WHERE [symbol] AND b.price > a.price * {round(1 + rise, 6):g} AND n.price < a.price\n"
            f"WITHIN 30 seconds")


def query_variants(n: int) -> list:
    """``n`` queries ``[(name, text)]``: alternately dip_recovery (dip 1%..1.45%, volume
    factor 2, 2.25, ...) and clean_breakout (rise 1.5% upwards) variants, all over Stock,
    partitioned by [symbol], WITHIN 30 s. The first is the sample dip_recovery itself."""
    out = []
    for i in range(n):
        j = i // 2
        if i % 2 == 0:
            dip, vol = 0.01 + 0.0005 * (j % 10), 2.0 + 0.25 * (j // 10)
            out.append((f"dip_{dip * 100:.2f}_{vol:g}", dip_recovery(dip, vol)))
        else:
            rise = 0.015 + 0.0005 * (j % 10) + 0.005 * (j // 10)
            out.append((f"breakout_{rise * 100:.2f}", clean_breakout(rise)))
    return out


def encode_partitions(events: list, n: int, batch: int) -> list:
    """Route ``events`` to ``n`` partitions; per partition, its msgpack batches in order."""
    parts = split_by_partition(events, n, key_attr=KEY)
    return [[encode_batch(evs[k:k + batch], f"bench-p{p}", f"p{p}-{k // batch}")
             for k in range(0, len(evs), batch)]
            for p, evs in ((p, parts.get(p, [])) for p in range(n))]


# --------------------------------------------------------------------------- part 1: actors

def cpu_busy() -> float:
    """Machine-wide busy CPU seconds (all cores) from /proc/stat; nan if unavailable."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [float(x) for x in handle.readline().split()[1:]]
    except OSError:
        return math.nan
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return (sum(fields[:8]) - idle) / ticks_per_s


def background_load(seconds: float = 1.0) -> float:
    """Busy cores of the whole machine over ``seconds`` while this benchmark is idle."""
    b0 = cpu_busy()
    time.sleep(seconds)
    return (cpu_busy() - b0) / seconds


def wait_quiet(limit: float = 0.15, patience: float = 60.0) -> float:
    """Wait (up to ``patience`` s) until other processes use less than ``limit`` cores; the
    last background load measured. The machine may be shared: the load is reported per run."""
    t0 = time.perf_counter()
    load = background_load()
    while load > limit and time.perf_counter() - t0 < patience:
        log(f"    machine busy ({load:.2f} cores used by other processes), waiting ...")
        load = background_load(2.0)
    return load


def actor_cpu(ray, actors: list) -> list:
    """CPU seconds used so far by each actor's process (``__ray_call__`` runs the function in
    the actor; a lambda, so it is pickled by value and the actor needs no benchmark module)."""
    return ray.get([a.__ray_call__.remote(lambda _self: time.process_time()) for a in actors])


def run_actors(ray, batches: list, queries: list, warm: list, quiet_wait: float = 60.0) -> dict:
    """One timed run: fresh actors (one per entry of ``batches``), queries registered, a warm-up
    batch, then every batch dispatched without waiting (round-robin over the actors; Ray keeps
    each caller's order per actor) and the acks read as they complete."""
    Actor = partition_actor()
    actors = [Actor.remote(f"p{i}", KEY) for i in range(len(batches))]
    try:
        ray.get([a.add_query.remote(name, text) for a in actors for name, text in queries])
        acks = ray.get([a.ingest.remote(encode_batch(warm, f"warm-p{i}", "warm"))
                        for i, a in enumerate(actors)])
        if any(ack["matches"] for ack in acks):
            raise AssertionError("the warm-up batch produced matches")
        background = wait_quiet(patience=quiet_wait)
        cpu0 = actor_cpu(ray, actors)
        owner, pending = {}, []
        busy0, drv0 = cpu_busy(), time.process_time()
        t0 = time.perf_counter()
        for k in range(max(len(bs) for bs in batches)):
            for i, bs in enumerate(batches):
                if k < len(bs):
                    ref = actors[i].ingest.remote(bs[k])
                    owner[ref] = i
                    pending.append(ref)
        dispatched = time.perf_counter() - t0
        done = [0.0] * len(actors)
        matches = [0] * len(actors)
        events = [0] * len(actors)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref, ack in zip(ready, ray.get(ready)):
                i = owner[ref]
                matches[i] += len(ack["matches"])
                events[i] += ack["events"]
                done[i] = time.perf_counter() - t0
        seconds = time.perf_counter() - t0
        drv = time.process_time() - drv0
        busy = cpu_busy() - busy0
        cpu1 = actor_cpu(ray, actors)
        tails = ray.get([a.advance.remote(math.inf) for a in actors])
        stats = ray.get([a.stats.remote() for a in actors])
    finally:
        for a in actors:
            ray.kill(a)
    return {"seconds": seconds, "dispatch": dispatched, "done": done, "events": events,
            "matches": [m + len(t) for m, t in zip(matches, tails)],
            "tail": [len(t) for t in tails], "actor_cpu": [b - a for a, b in zip(cpu0, cpu1)],
            "driver_cpu": drv, "busy": busy, "background": background,
            "buffered": [s["buffered"] for s in stats],
            "processed": [s["events"] - len(warm) for s in stats]}


def bench_actors(cfg: Config, ray) -> dict:
    log(f"[actors] generating {cfg.events:,} ticks over {cfg.symbols} symbols")
    events = ticks(cfg.events, cfg.symbols, cfg.seed)
    queries = sample_queries()
    warm = warm_events(cfg.warm)
    span = events[-1].ts - events[0].ts
    print(f"\n=== part 1: partition actors on Ray, {cfg.events:,} events, "
          f"{len(queries)} queries on every actor")
    print(f"stream : {cfg.events:,} Stock ticks, {cfg.symbols} symbols, {span:,.0f} s of event "
          f"time (~{cfg.events / cfg.symbols / span * 30:.1f} ticks per symbol per 30 s), "
          f"seed {cfg.seed}")
    print(f"queries: {', '.join(n for n, _ in queries)} (examples/queries.cep, unchanged)")
    print(f"batches: {cfg.batch:,} events, msgpack (cep.io.codec.encode_batch), encoded"
          f"{' and ray.put' if cfg.put else ''} before timing: the producer side is NOT measured;"
          f" {'ObjectRefs' if cfg.put else 'bytes by value'} passed to ingest")
    print(f"timing : first ingest dispatch -> last ack of every actor read by the driver; "
          f"best and median of {cfg.reps} runs, fresh actors each run, warmed with one "
          f"{cfg.warm}-event batch")
    t = time.perf_counter()
    plans = {n: encode_partitions(events, n, cfg.batch) for n in cfg.actors}
    log(f"[actors] routed and encoded in {time.perf_counter() - t:.1f} s (not measured)")
    for n, plan in plans.items():
        sizes = [sum(_rows(b) for b in bs) for bs in plan]
        share = ", ".join(f"p{i} {s:,} ({s / cfg.events:.1%}, {len(bs)} batches)"
                          for i, (s, bs) in enumerate(zip(sizes, plan)))
        print(f"split  : {n} actor{'s' if n > 1 else ''}: {share}; ideal speed-up "
              f"{cfg.events / max(sizes):.2f}x")
    if cfg.put:
        plans = {n: [[ray.put(b) for b in bs] for bs in plan] for n, plan in plans.items()}
    runs = {n: [] for n in cfg.actors}
    order = []
    for rep in range(cfg.reps):
        for n in (cfg.actors if rep % 2 == 0 else tuple(reversed(cfg.actors))):
            log(f"[actors] run {rep + 1}/{cfg.reps}: {n} actor(s) ...")
            r = run_actors(ray, plans[n], queries, warm, cfg.quiet_wait)
            if sum(r["events"]) != cfg.events or sum(r["processed"]) != cfg.events:
                raise AssertionError(f"{n} actors processed {sum(r['processed']):,} events, "
                                     f"acked {sum(r['events']):,}, expected {cfg.events:,}")
            runs[n].append(r)
            order.append((n, r))
            log(f"[actors]   {sum(r['events']) / r['seconds']:,.0f} events/s, "
                f"{sum(r['matches']):,} matches, {r['seconds']:.2f} s")
    totals = {n: {sum(r["matches"]) for r in rs} for n, rs in runs.items()}
    ref = totals[cfg.actors[0]]
    if len(ref) != 1 or any(t != ref for t in totals.values()):
        raise AssertionError(f"match totals differ between runs: {totals}")
    total = next(iter(ref))
    print("\nper run, in order. busy: machine-wide busy cores during the run; rest: busy cores"
          " outside the actors and the driver (Ray's own processes, anything else running);"
          " before: cores busy just before the run (other processes). Per actor: events,"
          " last ack at, actor process CPU seconds, events per actor CPU second")
    print(f"{'run':>4}{'actors':>7}{'events/s':>10}{'seconds':>9}{'matches':>9}{'drv CPU':>8}"
          f"{'busy':>6}{'rest':>6}{'before':>7}   per actor")
    for k, (n, r) in enumerate(order, 1):
        per = "; ".join(f"{e:,}, {d:.1f} s, {c:.1f} s CPU, {per_s(e, c):,.0f}/CPU s"
                        for e, d, c in zip(r["events"], r["done"], r["actor_cpu"]))
        rest = (r["busy"] - sum(r["actor_cpu"]) - r["driver_cpu"]) / r["seconds"]
        flag = "*" if max(rest, r["background"]) > DISTURBED else " "
        print(f"{k:>3}{flag}{n:>7}{cfg.events / r['seconds']:>10,.0f}{r['seconds']:>9.2f}"
              f"{sum(r['matches']):>9,}{r['driver_cpu']:>8.2f}{r['busy'] / r['seconds']:>6.2f}"
              f"{rest:>6.2f}{r['background']:>7.2f}   {per}")
    print(f"* disturbed: other processes used more than {DISTURBED} cores before or during the "
          f"run (the machine is shared; such runs are kept in the median)")
    print(f"\n{'actors':>6}{'best ev/s':>11}{'median ev/s':>12}{'CPU-side ev/s per actor':>25}")
    out = {"matches": total, "runs": runs, "rates": {}}
    for n, rs in runs.items():
        rates = [cfg.events / r["seconds"] for r in rs]
        cpu_rates = [per_s(e, c) for r in rs for e, c in zip(r["events"], r["actor_cpu"])]
        print(f"{n:>6}{max(rates):>11,.0f}{statistics.median(rates):>12,.0f}"
              f"{statistics.median(cpu_rates):>25,.0f}")
        out["rates"][n] = {"best": max(rates), "median": statistics.median(rates),
                           "all": rates, "cpu_side": statistics.median(cpu_rates)}
    print("(CPU-side ev/s per actor: median over runs and actors of events / CPU seconds of "
          "the actor process)")
    dispatch = max(r["dispatch"] for rs in runs.values() for r in rs)
    print(f"matches: {total:,} in every run with 1 and 2 actors (identical: yes); "
          f"dispatching all batches took {dispatch:.3f} s at most")
    if 1 in runs and 2 in runs:
        best = out["rates"][2]["best"] / out["rates"][1]["best"]
        med = out["rates"][2]["median"] / out["rates"][1]["median"]
        out["ratio"], out["ratio_median"] = best, med
        print(f"speed-up 2 vs 1 actors: {best:.2f}x (best), {med:.2f}x (median); "
              f"target >= {TARGET_SPEEDUP}x -> {'met' if best >= TARGET_SPEEDUP else 'MISSED'}")
    return out


def _rows(batch: bytes) -> int:
    return len(msgpack.unpackb(batch, raw=False)["rows"])


def per_s(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else math.nan


# --------------------------------------------------------------------------- part 2: queries

INDEX_FILES = ("cep/store/index.py", "cep/event.py", "cep/io/codec.py")


def make_worker(queries: list, sharing: bool = True) -> PartitionWorker:
    worker = PartitionWorker("p0", KEY, worker=WorkerSettings(sharing=sharing))
    for name, text in queries:
        worker.add_query(name, text)
    return worker


def run_worker(batches: list, queries: list, sharing: bool = True) -> dict:
    """Time ``ingest`` of every batch plus the final ``advance(inf)`` on a fresh worker
    (``sharing``: query groups, see cep/runtime/groups.py)."""
    worker = make_worker(queries, sharing)
    matches = 0
    t0 = time.perf_counter()
    for b in batches:
        matches += len(worker.ingest(b)["matches"])
    matches += len(worker.advance(math.inf))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "matches": matches, "groups": len(worker.engine.groups())}


def index_memory(batches: list, queries: list) -> dict:
    """Memory retained after ingesting ``batches`` (acks dropped, no ``advance``), measured by
    tracemalloc from a baseline taken once the worker is built and its queries registered.
    Split by allocating file: the index (its buffers, the Event objects and their decoded
    attribute values) and everything else (pattern managers, rate tracker, batch ids)."""
    gc.collect()
    tracemalloc.start()
    worker = make_worker(queries)
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    before = tracemalloc.take_snapshot()
    for b in batches:
        worker.ingest(b)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - base
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    by_file = {}
    for stat in after.compare_to(before, "filename"):
        name = stat.traceback[0].filename
        by_file[name] = by_file.get(name, 0) + stat.size_diff
    index = sum(v for f, v in by_file.items() if f.replace(os.sep, "/").endswith(INDEX_FILES))
    # the JSON of events that took part in a match, cached on the event for output
    # (cep.io.output): counted apart, it grows with the matches, not with the index
    cache = sum(sys.getsizeof(e._json) for e in worker.engine.index.events()
                if e._json is not None)
    index -= cache
    stats = worker.stats()
    return {"retained": retained, "index": index, "json_cache": cache,
            "other": retained - index - cache,
            "buffered": stats["buffered"], "events": stats["events"],
            "evicted": stats["evicted"], "partitions": worker.engine.index.partitions()}


def bench_queries(cfg: Config) -> dict:
    log(f"[queries] generating {cfg.query_events:,} ticks")
    events = ticks(cfg.query_events, cfg.symbols, cfg.seed)
    batches = encode_partitions(events, 1, cfg.batch)[0]
    counts = " / ".join(map(str, cfg.query_counts))
    print(f"\n=== part 2: one PartitionWorker in-process (no Ray), {counts} queries, "
          f"{cfg.query_events:,} events")
    print(f"stream : the first {cfg.query_events:,} events of the part 1 stream, "
          f"{len(batches)} batches of {cfg.batch:,}, decoded by ingest (counted)")
    print("queries: variants of dip_recovery and clean_breakout (other thresholds), all Stock,"
          " [symbol], WITHIN 30 s; the 1-query run is dip_recovery as in examples/queries.cep")
    print(f"timing : ingest of every batch + advance(inf); best of {cfg.query_reps} runs "
          f"(100 queries: 1 run); memory in a separate tracemalloc run, baseline after the "
          f"queries are registered, retained after the last batch (gc.collect() before reading)")
    rows = []
    for n in cfg.query_counts:
        queries = query_variants(n)
        reps = 1 if n >= 100 else cfg.query_reps
        log(f"[queries] {n} queries: timing ({reps} run(s)) ...")
        background = wait_quiet(patience=cfg.quiet_wait)
        timed = [run_worker(batches, queries) for _ in range(reps)]
        if len({r["matches"] for r in timed}) != 1:
            raise AssertionError(f"{n} queries: match counts differ between runs")
        best = min(timed, key=lambda r: r["seconds"])
        log(f"[queries] {n} queries: {cfg.query_events / best['seconds']:,.0f} events/s; "
            f"memory run ...")
        mem = index_memory(batches, queries)
        rows.append({"queries": n, "rate": cfg.query_events / best["seconds"],
                     "seconds": best["seconds"], "matches": best["matches"],
                     "background": background, **mem})
    print(f"\n{'queries':>7}{'events/s':>10}{'matches':>10}{'buffered':>9}{'evicted':>9}"
          f"{'index bytes':>13}{'B/buffered':>11}{'other bytes':>13}{'retained':>12}"
          f"{'before':>7}")
    for r in rows:
        print(f"{r['queries']:>7}{r['rate']:>10,.0f}{r['matches']:>10,}{r['buffered']:>9,}"
              f"{r['evicted']:>9,}{r['index']:>13,}{per_s(r['index'], r['buffered']):>11,.0f}"
              f"{r['other']:>13,}{r['retained']:>12,}{r['background']:>7.2f}")
    print("buffered / evicted = events in / evicted from the shared index after the last batch "
          "(worker.stats()); index bytes = retained allocations of cep/store/index.py, "
          "cep/event.py, cep/io/codec.py (buffers, Event objects, decoded values); other = the "
          "rest (pattern managers, rate tracker, remembered batch ids); retained = index + other; "
          "before = cores busy in other processes just before the timed runs")
    out = {"rows": rows}
    first, last = rows[0], rows[-1]
    if len({r["buffered"] for r in rows}) != 1:
        raise AssertionError(f"index event counts differ: {[r['buffered'] for r in rows]}")
    out["mem_ratio"] = last["index"] / first["index"]
    out["rate_ratio"] = last["rate"] / first["rate"]
    print(f"index events: {first['buffered']:,} with every query count (identical: yes); "
          f"index bytes {last['queries']} vs {first['queries']} queries: "
          f"{out['mem_ratio']:.3f}x; events/s {last['queries']} vs {first['queries']} "
          f"queries: {out['rate_ratio']:.3f}x")
    return out


# --------------------------------------------------------------------------- main

def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            kb = int(next(line.split()[1] for line in handle if line.startswith("MemTotal")))
            mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{os.cpu_count()} CPUs ({model}){mem}, {platform.system()} {platform.release()}"


def build_config(args) -> Config:
    cfg = QUICK if args.quick else Config()
    over = {k: v for k, v in (("events", args.events), ("symbols", args.symbols),
                              ("batch", args.batch), ("reps", args.reps),
                              ("query_events", args.query_events),
                              ("quiet_wait", args.quiet_wait)) if v is not None}
    if args.query_counts:
        over["query_counts"] = tuple(int(x) for x in args.query_counts.split(","))
    if args.by_value:
        over["put"] = False
    return replace(cfg, **over)


def run(cfg: Config, part: str = "both") -> dict:
    """Run part 1 (``actors``), part 2 (``queries``) or both; print; return the figures."""
    t_all = time.perf_counter()
    import ray
    print("raycep cluster benchmark (issue 4)")
    print(f"python {platform.python_version()} ({platform.python_implementation()}), ray "
          f"{ray.__version__}; machine: {machine()}")
    print(f"config: {asdict(cfg)}")
    result = {}
    if part in ("actors", "both"):
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        print("ray.init(address='local', num_cpus=2, include_dashboard=False, log_to_driver=False); actors: "
              "partition_actor() (default resources)")
        try:
            result["actors"] = bench_actors(cfg, ray)
        finally:
            ray.shutdown()
    if part in ("queries", "both"):
        result["queries"] = bench_queries(cfg)
    print("\n=== summary")
    if "actors" in result and "ratio" in result["actors"]:
        a = result["actors"]
        print(f"events/s: 1 actor {a['rates'][1]['best']:,.0f}, 2 actors "
              f"{a['rates'][2]['best']:,.0f} (best of {cfg.reps}); ratio {a['ratio']:.2f}x "
              f"(medians: {a['ratio_median']:.2f}x), target >= {TARGET_SPEEDUP}x; "
              f"matches {a['matches']:,} with both")
    if "queries" in result:
        q = result["queries"]
        figures = ", ".join(f"{r['queries']}: {r['rate']:,.0f} ev/s, {r['index']:,} B"
                            for r in q["rows"])
        print(f"queries -> events/s, index bytes: {figures}; index memory ratio "
              f"{q['mem_ratio']:.3f}x")
    print(f"total wall time {time.perf_counter() - t_all:.0f} s")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter streams, fewer runs")
    parser.add_argument("--part", choices=("actors", "queries", "both"), default="both")
    parser.add_argument("--by-value", action="store_true",
                        help="pass the batches' bytes to ingest instead of ray.put refs")
    parser.add_argument("--events", type=int)
    parser.add_argument("--symbols", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--reps", type=int)
    parser.add_argument("--query-events", type=int)
    parser.add_argument("--query-counts", help="comma-separated, e.g. 1,10,100")
    parser.add_argument("--quiet-wait", type=float,
                        help="seconds to wait for other processes to go idle before a run")
    args = parser.parse_args(argv)
    run(build_config(args), args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
