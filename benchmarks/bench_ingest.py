"""Ingestion benchmark (issues 5, 14): events/s from files to the partition actors through Spark.

    python3 -m benchmarks.bench_ingest [--quick] [--events N] [--symbols N]
                                       [--executor-cores N] [--parquet] [--skip-queries]
                                       [--skip-cli] [--verify]

Generates stock ticks like ``examples/make_ticks.py`` (a multiplicative random walk per symbol,
round-lot volumes with 2% spikes) over 256 symbols, the gaps scaled by 8/256 so that each
symbol ticks as often as in the 8-symbol sample; writes them once as CSV (and, with
``--parquet``, as Parquet) to a temporary directory (not timed). Then, on a local Ray
(``num_cpus=2``) with Spark through RayDP (``spark_ingest.session.start_spark``; 1 executor):

1. Spark start-up: ``ray.init`` + ``start_spark``, reported separately, then one small
   warm-up job (Spark's Python workers start and join Ray; also reported, not in the runs).
2. The Spark side alone as ``run_job`` runs it, drained by a task that only counts (no
   push): the generated file is in time order (``spark_ingest.job.in_time_order``), so read
   + map (``mapInArrow``) in one task, no sort; for a file out of order, read, map, arrange
   and sort (``spark_ingest.job.arrange``).
3. ``run_job`` into a fresh 2-actor RayCluster with no query registered (the push and the
   actors' decode + index insert), and with the three sample queries of
   ``examples/queries.cep`` (the actors' query evaluation on top).
4. ``raycep ingest`` as a user runs it (a subprocess: its own Spark start-up included) into a
   fresh 2-actor cluster: ``examples/ticks.csv``, a 4-row file and the generated file, no
   query; wall time of the command and the figures of its summary.

``run_job`` is timed as a whole (wall clock, ``time.perf_counter``): the order check, reading,
mapping, sorting (when needed), pushing with backpressure until every batch is acknowledged by
its actor, writing dead letters.
CPU seconds: each actor process (``__ray_call__`` + ``time.process_time``), this driver, this
benchmark's whole process tree (Ray and everything it runs are children of this driver;
/proc/<pid>/stat) and the whole machine (/proc/stat); the difference is what other processes
used (the machine may be shared: a step where they used more than 0.25 cores is flagged).
Before each step the script waits (up to 60 s) for the machine to be quiet. A thread samples
each actor's event count every 0.5 s to show when each actor received its events.
``--verify`` counts the matches of ``raycep local`` on the same file (one in-process Engine)
and checks the cluster found as many per query.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace

from benchmarks.bench_cluster import (actor_cpu, cpu_busy, machine, sample_queries,
                                      wait_quiet)
from benchmarks.bench_cluster import tick_rows as cluster_tick_rows

GAPS = (0.1, 0.2, 0.3, 0.5, 1.0)       # examples/make_ticks.py: gap between ticks, 8 symbols
DRIVER_NAMESPACE = "raycep-bench-ingest"   # RayDP's app master lives here; actors in raycep


@dataclass(frozen=True)
class Config:
    events: int = 1_000_000
    symbols: int = 256
    seed: int = 42
    batch_size: int = 10_000             # events per wire batch (IngestSettings default)
    max_in_flight: int = 4               # unacknowledged batches per Spark partition
    executors: int = 1
    executor_cores: int = 1
    executor_memory: str = "1GB"          # raycep ingest default
    parquet: bool = False                # also run_job from Parquet (no queries)
    queries: bool = True                 # also the run with the three sample queries
    quiet_wait: float = 60.0             # wait up to this long for other processes to go idle
    cli: bool = True                     # also time raycep ingest (subprocesses)
    verify: bool = False                 # count the matches of raycep local (in-process) too


QUICK = Config(events=100_000, quiet_wait=20.0)

_T0 = time.perf_counter()


def log(msg: str):
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data

def tick_rows(n: int, symbols: int = 256, seed: int = 42):
    """``(ts, symbol, price, volume)`` like examples/make_ticks.py over ``symbols`` symbols
    ``S000``..; gaps scaled by 8/symbols (per-symbol density of the sample)."""
    return cluster_tick_rows(n, [f"S{i:03d}" for i in range(symbols)], seed)


def write_data(cfg: Config, directory: str) -> dict:
    paths = {"csv": os.path.join(directory, "ticks.csv")}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(["type", "ts", "symbol", "price", "volume"])
        for ts, symbol, price, volume in tick_rows(cfg.events, cfg.symbols, cfg.seed):
            out.writerow(["Stock", f"{ts:.4f}", symbol, f"{price:.2f}", volume])
    if cfg.parquet:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
        paths["parquet"] = os.path.join(directory, "ticks.parquet")
        pq.write_table(pacsv.read_csv(paths["csv"]), paths["parquet"])
    return paths


def write_small(path: str, n: int = 1000):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(["type", "ts", "symbol", "price", "volume"])
        for ts, symbol, price, volume in tick_rows(n, 16, seed=7):
            out.writerow(["Warm", f"{ts - 1e6:.4f}", symbol, f"{price:.2f}", volume])


# --------------------------------------------------------------------------- CPU accounting

QUIET = 0.4          # cores: this benchmark's own idle stack keeps ~0.25 busy (Spark JVMs,
                     # the gateway's outbox polling, Ray), so bench_cluster's 0.15 is too low
DISTURBED = 0.25     # cores used by processes outside this benchmark that flag a step


def tree_cpu() -> dict:
    """{pid: CPU seconds} of this process and all its descendants (Ray, started by this
    driver, and everything it runs: actors, the RayDP JVMs, Spark's Python workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12]) + int(fields[13])
                          + int(fields[14])) / tick
    mine, frontier = {os.getpid()}, [os.getpid()]
    children: dict = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in mine:
                mine.add(child)
                frontier.append(child)
    return {pid: cpu[pid] for pid in mine if pid in cpu}


class Meter:
    """Wall clock, machine-wide busy CPU and this benchmark's own CPU (its process tree)
    over a step; ``foreign`` = busy cores outside the benchmark (other sessions on a shared
    machine). Processes of the tree that exit during the step are not counted as own, so
    ``foreign`` may be slightly overstated."""

    def __init__(self):
        self.tree0, self.busy0, self.t0 = tree_cpu(), cpu_busy(), time.perf_counter()

    def stop(self) -> dict:
        seconds = time.perf_counter() - self.t0
        busy = cpu_busy() - self.busy0
        tree1 = tree_cpu()
        own = sum(c - self.tree0.get(pid, 0.0) for pid, c in tree1.items())
        return {"seconds": seconds, "busy": busy, "own": own,
                "foreign": max(0.0, busy - own) / seconds if seconds > 0 else math.nan}


# --------------------------------------------------------------------------- runs

class ArrivalWatch:
    """Samples each actor's processed-event count every ``every`` s (a driver thread)."""

    def __init__(self, handles: dict, every: float = 0.5):
        import ray
        self.ray, self.handles, self.every = ray, handles, every
        self.samples: list = []             # (seconds since start, {target: events})
        self._stop = threading.Event()
        self.t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self):
        stats = self.ray.get([h.stats.remote() for h in self.handles.values()])
        self.samples.append((time.perf_counter() - self.t0,
                             {t: s["events"] for t, s in zip(self.handles, stats)}))

    def stop(self):
        """Stop sampling; one last sample (the job has returned: every event arrived)."""
        self._stop.set()
        self._thread.join(10)
        self._sample()

    def windows(self, totals: dict) -> dict:
        """{target: (first sample with events, first sample at its final count)} seconds."""
        out = {}
        for t, total in totals.items():
            if not total:
                continue
            first = next((s for s, c in self.samples if c[t] > 0), math.nan)
            last = next((s for s, c in self.samples if c[t] >= total), math.nan)
            out[t] = (first, last)
        return out


def spark_side(spark, path: str, fmt: str, routing, mapping,
               quiet_wait: float = 60.0) -> dict:
    """Wall time of the Spark side alone, as ``run_job`` runs it, drained by a task that
    counts the rows (no push): for a file in time order (``in_time_order``, included) read
    + map in the one task that would push; else read, map, arrange and sort."""
    from raycep.spark_ingest.job import (ARROW_BATCH, ARROW_ROWS, _preparer, arrange,
                                  in_time_order, planned, read_table)

    def count(batches):
        import pyarrow as pa
        n = 0
        for batch in batches:
            n += batch.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    out = {"before": wait_quiet(limit=QUIET, patience=quiet_wait)}
    spark.conf.set(ARROW_BATCH, str(ARROW_ROWS))         # as ingest_dataframe sets it
    meter = Meter()
    out["in_order"] = in_time_order(path, fmt, mapping)
    df = read_table(spark, path, fmt)
    if out["in_order"]:
        plan, ready, _, _ = planned(spark, df, mapping, routing, located=False)
        prepare = _preparer(plan, fmt, False, df.inputFiles()[0])
        counts = ready.mapInArrow(lambda batches: count(prepare(batches)), "n long").collect()
    else:
        _, arranged = arrange(spark, df, mapping, routing, fmt)
        counts = arranged.mapInArrow(count, "n long").collect()
    out["sort"] = meter.stop()
    spark.conf.unset(ARROW_BATCH)
    out["rows"] = sum(r.n for r in counts)
    out["partitions"] = len(counts)
    out["splits"] = df.rdd.getNumPartitions()
    return out


def _reaped_cpu() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_run(path: str, workdir: str, cfg: Config, timeout: float = 1800.0) -> dict:
    """``raycep ingest PATH`` in a subprocess into a fresh 2-actor RayCluster on this Ray (no
    query): the command's wall time and its JSON summary."""
    import subprocess

    import ray

    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings
    registry = os.path.join(workdir, f"registry-{time.monotonic_ns()}.sqlite")
    cluster = RayCluster(2, "symbol", GatewaySettings(port=0, registry_path=registry,
                                                      plan_every=1.0))
    cluster.start()
    try:
        background = wait_quiet(limit=QUIET, patience=cfg.quiet_wait)
        reaped0 = _reaped_cpu()
        meter = Meter()
        proc = subprocess.run(
            [sys.executable, "-m", "raycep", "ingest", path, "--gateway", cluster.url,
             "--ray-address", ray.get_runtime_context().gcs_address,
             "--dead-letters", os.path.join(workdir, "dead"),
             "--executor-cores", str(cfg.executor_cores)],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        measured = meter.stop()
        # the command and the processes it waited for (its Spark driver) have exited: their
        # CPU is in the children's rusage, not in the process tree the meter reads
        own = measured["own"] + _reaped_cpu() - reaped0
        measured["foreign"] = max(0.0, measured["busy"] - own) / measured["seconds"]
    finally:
        cluster.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"raycep ingest failed: {proc.stderr[-2000:]}")
    return {"wall": measured["seconds"], "foreign": measured["foreign"],
            "background": background, "summary": json.loads(proc.stdout),
            "stdout_lines": len(proc.stdout.splitlines()),
            "stderr_lines": len(proc.stderr.splitlines())}


def ingest_run(spark, path: str, fmt: str, queries: list, cfg: Config, workdir: str) -> dict:
    """One timed ``run_job`` into a fresh 2-actor RayCluster with ``queries`` registered."""
    import ray

    from raycep.actors.routing import RoutingTable
    from raycep.gateway.client import connect
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings
    from raycep.spark_ingest.job import IngestSettings, run_job
    from raycep.spark_ingest.mapping import EventMapping

    registry = os.path.join(workdir, f"registry-{time.monotonic_ns()}.sqlite")
    cluster = RayCluster(2, "symbol", GatewaySettings(port=0, registry_path=registry,
                                                      plan_every=1.0))
    cluster.start()
    try:
        client = connect(cluster.url)
        for name, text in queries:
            client.register(text, name=name)
        routing = RoutingTable.from_dict(client.routing())
        settings = IngestSettings(batch_size=cfg.batch_size, max_in_flight=cfg.max_in_flight,
                                  dead_letters=os.path.join(workdir, "dead"))
        handles = {str(t): h.actor for t, h in cluster.handles.items()}   # the Ray actors
        background = wait_quiet(limit=QUIET, patience=cfg.quiet_wait)
        cpu0 = actor_cpu(ray, list(handles.values()))
        drv0 = time.process_time()
        watch = ArrivalWatch(handles)
        meter = Meter()
        result = run_job(spark, path, fmt, EventMapping(key_column="symbol"), routing,
                         settings)
        measured = meter.stop()
        seconds = measured["seconds"]
        watch.stop()
        drv = time.process_time() - drv0
        busy = measured["busy"]
        cpu = [b - a for a, b in zip(cpu0, actor_cpu(ray, list(handles.values())))]
        stats = ray.get([h.stats.remote() for h in handles.values()])
        totals = {t: s["events"] for t, s in zip(handles, stats)}
        # not timed: release the deferred matches and count every match found
        ray.get([h.advance.remote(math.inf) for h in handles.values()])
        stats = ray.get([h.stats.remote() for h in handles.values()])
        matches = {q: sum(s["queries"][q]["matches"] for s in stats if q in s["queries"])
                   for q, _ in queries}
    finally:
        cluster.stop()
    return {"seconds": seconds, "result": result, "actor_cpu": dict(zip(handles, cpu)),
            "driver_cpu": drv, "busy": busy, "background": background, "totals": totals,
            "own": measured["own"], "foreign": measured["foreign"],
            "windows": watch.windows(totals), "matches": matches}


# --------------------------------------------------------------------------- report

def print_run(label: str, r: dict, n: int):
    res = r["result"]
    actor_cpu_total = sum(r["actor_cpu"].values())
    print(f"\n--- {label}")
    print(f"run_job wall {r['seconds']:.2f} s -> {n / r['seconds']:,.0f} events/s; rows "
          f"{res['rows']:,}, events sent {res['events_sent']:,}, dead letters "
          f"{res['dead_letters']}, duplicates {res['duplicates']}, rejected by actors "
          f"{res['rejected_by_actors']}, refused (backpressure, sent again) "
          f"{res['refused_batches']}")
    for t, (first, last) in r["windows"].items():
        print(f"  actor {t:>6}: {r['totals'][t]:>9,} events, received from {first:6.1f} s to "
              f"{last:6.1f} s (0.5 s samples), process CPU {r['actor_cpu'][t]:6.1f} s, "
              f"{r['totals'][t] / r['actor_cpu'][t] if r['actor_cpu'][t] else math.nan:,.0f} "
              f"events per actor CPU s")
    if r["windows"]:
        first = min(f for f, _ in r["windows"].values())
        last = max(x for _, x in r["windows"].values())
        busy_push = sum(x - f for f, x in r["windows"].values())
        print(f"  phases: before the first event reached an actor {first:.1f} s (the Spark "
              f"job's start, the first batches read and mapped, the sort if the file is out of "
              f"order; counted when an actor answers, i.e. after the batches queued before "
              f"it); events arriving {last - first:.1f} s (sum of the per-actor intervals "
              f"{busy_push:.1f} s: larger than that when the actors are fed at once); after "
              f"the last event arrived {r['seconds'] - last:.1f} s (+-0.5 s sampling)")
    spark_etc = r["own"] - actor_cpu_total - r["driver_cpu"]
    print(f"  CPU seconds: actors {actor_cpu_total:.1f}, driver {r['driver_cpu']:.1f}, rest of "
          f"this benchmark (Spark JVMs + Python workers, gateway, planner, Ray) "
          f"{spark_etc:.1f}; machine busy {r['busy'] / r['seconds']:.2f} cores on average, "
          f"of which other processes {r['foreign']:.2f}; before the run {r['background']:.2f} "
          f"cores busy (this benchmark's idle stack included)")
    if r["matches"]:
        total = sum(r["matches"].values())
        print(f"  matches: {total:,} ({', '.join(f'{q} {m:,}' for q, m in r['matches'].items())})")


def run(cfg: Config) -> dict:
    import ray
    import pyspark
    import raydp

    from raycep.actors.routing import RoutingTable
    from raycep.spark_ingest.mapping import EventMapping
    from raycep.spark_ingest.session import start_spark, stop_spark

    print("raycep ingestion benchmark (issues 5, 14)")
    print(f"python {platform.python_version()}, ray {ray.__version__}, pyspark "
          f"{pyspark.__version__}, raydp {raydp.__version__}; machine: {machine()}")
    print(f"config: {asdict(cfg)}")
    workdir = tempfile.mkdtemp(prefix="raycep-bench-ingest-")
    out: dict = {}
    try:
        log(f"writing {cfg.events:,} ticks ({cfg.symbols} symbols) to {workdir}")
        t0 = time.perf_counter()
        paths = write_data(cfg, workdir)
        size = os.path.getsize(paths["csv"])
        log(f"  written in {time.perf_counter() - t0:.1f} s (not measured)")
        print(f"data   : {cfg.events:,} Stock ticks, {cfg.symbols} symbols, CSV "
              f"{size / 2**20:.1f} MiB" + (f", Parquet "
                                            f"{os.path.getsize(paths['parquet']) / 2**20:.1f} "
                                            f"MiB" if "parquet" in paths else ""))

        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 namespace=DRIVER_NAMESPACE)
        t_ray = time.perf_counter() - t0
        spark = start_spark(executors=cfg.executors, cores=cfg.executor_cores,
                            memory=cfg.executor_memory,
                            log=os.path.join(workdir, "spark.log"))
        startup = time.perf_counter() - t0
        out["startup"] = startup
        print(f"\nSpark start-up: {startup:.1f} s (ray.init {t_ray:.1f} s + raydp.init_spark "
              f"{startup - t_ray:.1f} s; {cfg.executors} executor x {cfg.executor_cores} "
              f"core(s), {cfg.executor_memory})")
        try:
            mapping = EventMapping(key_column="symbol")
            small = os.path.join(workdir, "warm.csv")
            write_small(small)
            t0 = time.perf_counter()
            warm = _warm_up(spark, small, cfg, workdir)
            out["warm"] = time.perf_counter() - t0
            print(f"warm-up job (1,000 rows into a throwaway cluster; Spark's Python workers "
                  f"start and join Ray): {out['warm']:.1f} s, {warm['events_sent']} events")

            routing = RoutingTable(2, "symbol")
            log("Spark side: read + map + sort (no push)")
            st = spark_side(spark, paths["csv"], "csv", routing, mapping, cfg.quiet_wait)
            out["stages"] = st
            what = ("read + map, no sort (the file is in time order; the check included)"
                    if st["in_order"] else "read + map + sort")
            print(f"\nSpark side only (CSV, {st['splits']} input split(s) -> {st['partitions']} "
                  f"push partition(s), no push): {what} "
                  f"{st['sort']['seconds']:.2f} s ({st['rows'] / st['sort']['seconds']:,.0f} "
                  f"rows/s; other processes {st['sort']['foreign']:.2f} cores)")

            log("run_job: CSV, no queries")
            out["none"] = ingest_run(spark, paths["csv"], "csv", [], cfg, workdir)
            print_run("run_job, CSV -> 2 actors, no query registered (push + decode + index)",
                      out["none"], cfg.events)
            if cfg.parquet:
                log("run_job: Parquet, no queries")
                out["parquet"] = ingest_run(spark, paths["parquet"], "parquet", [], cfg,
                                            workdir)
                print_run("run_job, Parquet -> 2 actors, no query registered",
                          out["parquet"], cfg.events)
            if cfg.queries:
                log("run_job: CSV, the three sample queries")
                out["queries"] = ingest_run(spark, paths["csv"], "csv", sample_queries(), cfg,
                                            workdir)
                print_run("run_job, CSV -> 2 actors, dip_recovery + rally + clean_breakout "
                          "(examples/queries.cep)", out["queries"], cfg.events)
            if cfg.queries and cfg.verify:
                log("verify: the same CSV through one in-process Engine (raycep local)")
                t0 = time.perf_counter()
                local = local_matches(paths["csv"], sample_queries())
                got = out["queries"]["matches"]
                took = time.perf_counter() - t0
                print(f"\nverify: raycep local (one in-process Engine, {took:.0f} s) finds "
                      f"{', '.join(f'{q} {m:,}' for q, m in local.items())}; identical to "
                      f"the cluster's counts: {'yes' if local == got else 'NO'}")
                if local != got:
                    raise AssertionError(f"match counts differ: local {local}, cluster {got}")
        finally:
            stop_spark(spark)
        if cfg.cli:
            small = os.path.join(workdir, "four.csv")
            write_small(small, 4)
            examples = os.path.join(os.path.dirname(os.path.dirname(
                os.path.abspath(__file__))), "examples", "ticks.csv")
            for key, label, path in (("cli_sample", "examples/ticks.csv", examples),
                                     ("cli_four", "a 4-row file", small),
                                     ("cli_big", f"the {cfg.events:,}-tick file",
                                      paths["csv"])):
                log(f"raycep ingest {label}")
                r = out[key] = cli_run(path, workdir, cfg)
                sm = r["summary"]
                print(f"\nraycep ingest {label} (subprocess, 2 actors, no query): wall "
                      f"{r['wall']:.1f} s (other processes {r['foreign']:.2f} cores); Spark "
                      f"start-up {sm['spark_startup_seconds']:.1f} s, then {sm['rows']:,} rows "
                      f"in {sm['seconds']:.2f} s = {sm['events_per_s']:,} events/s; stdout "
                      f"{r['stdout_lines']} line(s), stderr {r['stderr_lines']} line(s)")
        _summary(cfg, out)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"total wall time {time.perf_counter() - _T0:.0f} s")
    return out


def local_matches(path: str, queries: list) -> dict:
    """{query: matches} of ``raycep local --key symbol`` on ``path`` (one Engine)."""
    from raycep.cep import Engine
    from raycep.cep.io.sources import iter_events
    engine = Engine(key_attr="symbol")
    counts = {}
    for name, text in queries:
        engine.add_query(text, name=name)
        counts[name] = 0
    for ev in iter_events(path, key_attr="symbol"):
        for m in engine.process(ev):
            counts[m.query] += 1
    for m in engine.advance(math.inf):
        counts[m.query] += 1
    return counts


def _warm_up(spark, path, cfg, workdir) -> dict:
    from raycep.actors.routing import RoutingTable
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings
    from raycep.spark_ingest.job import IngestSettings, run_job
    from raycep.spark_ingest.mapping import EventMapping
    cluster = RayCluster(2, "symbol", GatewaySettings(
        port=0, registry_path=os.path.join(workdir, "warm.sqlite"), plan_every=0))
    cluster.start()
    try:
        return run_job(spark, path, "csv", EventMapping(key_column="symbol"),
                       RoutingTable(2, "symbol"),
                       IngestSettings(dead_letters=os.path.join(workdir, "dead")))
    finally:
        cluster.stop()


def _summary(cfg: Config, out: dict):
    n = cfg.events
    print("\n=== summary")
    print(f"{'step':<52}{'seconds':>9}{'events/s':>11}{'others':>8}")
    print(f"{'Spark start-up (ray.init + raydp.init_spark)':<52}{out['startup']:>9.1f}")
    print(f"{'warm-up job (1,000 rows)':<52}{out['warm']:>9.1f}")
    steps = [("CSV read + map" + ("" if out["stages"]["in_order"] else " + sort") +
              " (no push)", out["stages"]["sort"])]
    steps += [(label, out[key]) for key, label in (
        ("none", "run_job CSV -> actors, no query"),
        ("parquet", "run_job Parquet -> actors, no query"),
        ("queries", "run_job CSV -> actors, 3 sample queries")) if key in out]
    for label, r in steps:
        flag = "*" if r["foreign"] > DISTURBED else " "
        print(f"{label:<52}{r['seconds']:>9.2f}{n / r['seconds']:>11,.0f}"
              f"{r['foreign']:>7.2f}{flag}")
    print(f"others: cores used by processes outside this benchmark during the step; "
          f"* more than {DISTURBED} (the machine is shared)")
    for key, label in (("cli_sample", "raycep ingest examples/ticks.csv, wall"),
                       ("cli_four", "raycep ingest 4-row file, wall"),
                       ("cli_big", f"raycep ingest {n:,} rows, wall")):
        if key in out:
            r, sm = out[key], out[key]["summary"]
            flag = "*" if r["foreign"] > DISTURBED else " "
            print(f"{label:<52}{r['wall']:>9.1f}{sm['events_per_s']:>11,.1f}"
                  f"{r['foreign']:>7.2f}{flag}")
            print(f"{'  of which Spark start-up / job after start-up':<52}"
                  f"{sm['spark_startup_seconds']:>9.1f} / {sm['seconds']:.2f}")
    if "queries" in out:
        print(f"matches (3 sample queries): {sum(out['queries']['matches'].values()):,}")
    print("events/s = events in the file / wall seconds of the step; Spark start-up and the "
          "warm-up job are not in any step; for raycep ingest: its summary's events_per_s "
          "(events sent / seconds after Spark start-up)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events")
    parser.add_argument("--events", type=int)
    parser.add_argument("--symbols", type=int)
    parser.add_argument("--executor-cores", type=int)
    parser.add_argument("--executor-memory")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--parquet", action="store_true", help="also ingest from Parquet")
    parser.add_argument("--skip-queries", action="store_true",
                        help="leave out the run with the sample queries")
    parser.add_argument("--skip-cli", action="store_true",
                        help="leave out the raycep ingest subprocess runs")
    parser.add_argument("--verify", action="store_true",
                        help="also count the matches of raycep local (in-process) on the file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    over = {k: v for k, v in (("events", args.events), ("symbols", args.symbols),
                              ("executor_cores", args.executor_cores),
                              ("executor_memory", args.executor_memory),
                              ("batch_size", args.batch_size)) if v is not None}
    if args.parquet:
        over["parquet"] = True
    if args.skip_queries:
        over["queries"] = False
    if args.verify:
        over["verify"] = True
    if args.skip_cli:
        over["cli"] = False
    os.environ["PYSPARK_PYTHON"] = sys.executable
    run(replace(cfg, **over))
    return 0


if __name__ == "__main__":
    sys.exit(main())
