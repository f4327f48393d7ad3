"""``raycep ingest`` into a running ``raycep serve``, as a user runs them (issue 36).

    python3 -m benchmarks.bench_serve_ingest [--events 1000000] [--seed 42] [--repeat 3]
                                             [--cold 1] [--partitions 2]

Starts ``raycep serve --port 0 --key symbol --partitions P --spark --registry TMP/r.sqlite``
(a subprocess: checkpoints and write-ahead log on, as by default; a warm Spark for ingest) and
waits until its warm Spark is ready (``ready`` of the actor ``raycep-ingest``: start-up and
warm-up seconds reported). Then, one after the other, each on a file of its own (the ticks of
``examples/make_ticks.py --rows N --seed S``, the k-th copy's times shifted by k x 10^7 s: new
events, in order, never late nor duplicates; written before the runs, untimed):

* ``--repeat`` runs of ``raycep ingest FILE --key symbol`` (the cluster's warm Spark: the
  default where the cluster keeps one);
* ``--cold`` runs of ``raycep ingest FILE --key symbol --own-spark`` (a Spark of the
  command's own: what ``raycep ingest`` does against a cluster without ``--spark``).

Per run, the command's own summary (stdout JSON: ``events_per_s``, ``seconds`` after Spark
start-up, ``spark_startup_seconds``, ``wall_seconds``), the command's wall time as measured
here, and the CPU seconds each process used during the run (/proc: the partition actors,
Spark's JVMs and Python workers, Ray, the rest; the command and what it started and reaped,
from getrusage). No query is registered (issue 36's first
target: >= 200,000 events/s as the summary reports it, Spark start-up <= 10 s).

``--queries``: ``examples/queries.cep`` registered first (the actors evaluate them: issue 36's
second target, the cluster >= 1.0x ``raycep local`` with default settings on the same file);
``raycep local --key symbol`` then runs on the first file and the matches the gateway stored
over all runs are compared with its count (each file holds the same ticks); ``raycep local
--workers 1`` too, for the events per actor CPU second against its events per CPU second.

Figures to stdout, progress to stderr; results: benchmarks/INGEST_RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_register import start_serve, stop_serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIFT = 10_000_000.0                 # seconds between two copies of the file


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_copies(directory: str, events: int, seed: int, count: int) -> list:
    """``count`` tick files: the first made by examples/make_ticks.py, the others its copies
    with times shifted by k x SHIFT."""
    first = os.path.join(directory, "ticks0.csv")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_ticks.py"),
                    "--rows", str(events), "--seed", str(seed), "--out", first],
                   check=True, capture_output=True)
    with open(first, encoding="utf-8") as f:
        header, *lines = f.read().splitlines()
    at = header.split(",").index("ts")
    paths = [first]
    for k in range(1, count):
        out = [header]
        for line in lines:
            cells = line.split(",")
            cells[at] = repr(float(cells[at]) + k * SHIFT)
            out.append(",".join(cells))
        path = os.path.join(directory, f"ticks{k}.csv")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
        paths.append(path)
    return paths


def warm_ready() -> dict:
    """The warm Spark's ``ready()`` (waits for its start-up), from a subprocess on the Ray
    of that serve."""
    code = ("import json, ray; ray.init(address='auto', namespace='raycep-bench', "
            "log_to_driver=False); a = ray.get_actor('raycep-ingest', namespace='raycep'); "
            "print(json.dumps(ray.get(a.ready.remote())))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    if done.returncode:
        raise RuntimeError(f"the warm Spark is not ready: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_by_process() -> dict:
    """{pid: (CPU seconds so far, what it is)} of every process (/proc)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", encoding="utf-8") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        out[pid] = ((int(fields[11]) + int(fields[12])) / hz, _kind(cmd))
    return out


def _kind(cmd: str) -> str:
    for key, label in (("ray::PartitionWorker", "partition actors"),
                       ("ray::IngestService", "warm Spark's driver (actor)"),
                       ("pyspark.daemon", "Spark Python workers"),
                       ("pyspark/worker", "Spark Python workers"), ("java", "Spark JVMs"),
                       ("raylet", "Ray"), ("gcs_server", "Ray"), ("ray::", "other actors")):
        if key in cmd:
            return label
    return "other"


def ingest(path: str, tmp: str, url: str, own: bool) -> dict:
    """One ``raycep ingest``: its summary, the wall time measured here, CPU by process."""
    before = cpu_by_process()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "raycep", "ingest", path, "--key", "symbol",
                           "--gateway", url] + (["--own-spark"] if own else []), cwd=tmp, capture_output=True,
                          text=True, timeout=1800)
    wall = time.perf_counter() - t
    after = cpu_by_process()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"raycep ingest failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    cpu: dict = {"raycep ingest (command)": reaped.ru_utime - children.ru_utime
                 + reaped.ru_stime - children.ru_stime}
    for pid, (secs, kind) in after.items():
        used = secs - before.get(pid, (0.0,))[0]
        if used > 0:
            cpu[kind] = cpu.get(kind, 0.0) + used
    return {"summary": summary, "wall": wall, "cpu": cpu}


QUERIES = os.path.join(ROOT, "examples", "queries.cep")


def matches_stored(url: str, timeout: float = 600.0) -> int:
    """The matches the gateway has stored over every query, once the actors' outboxes are
    drained (the totals stop changing)."""
    from raycep.gateway.client import connect
    client = connect(url)
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        stats = client.stats()
        total = sum(q["matches"]["total"] for q in (client.query(x["id"])
                                                     for x in client.queries()))
        if not any(a["outbox"] for a in stats["actors"].values()) and total == last:
            return total
        last = total
        time.sleep(1.0)
    return last


def run_local(path: str, tmp: str, workers: int | None = None) -> dict:
    """``raycep local`` with the sample queries on ``path`` (default settings, or
    ``--workers``): its summary, plus ``cpu``, the CPU seconds it and its children used."""
    extra = ["--workers", str(workers)] if workers else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "raycep", "local", "--query", QUERIES,
                           "--events", path, "--key", "symbol", "--out",
                           os.path.join(tmp, "local.jsonl"), *extra], capture_output=True,
                          text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"raycep local failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return summary


def table(runs: list, events: int) -> list:
    lines = [f"{'run':>12} {'spark':>5} {'events/s':>10} {'seconds':>8} {'start-up':>8} "
             f"{'wall':>7} {'actors CPU':>10} {'all CPU':>8}"]
    for label, r in runs:
        s = r["summary"]
        lines.append(f"{label:>12} {s['spark']:>5} {s['events_per_s']:>10,.0f} "
                     f"{s['seconds']:>8.3f} {s['spark_startup_seconds']:>8.3f} "
                     f"{r['wall']:>7.2f} {r['cpu'].get('partition actors', 0):>10.2f} "
                     f"{sum(r['cpu'].values()):>8.2f}")
    for spark in ("warm", "own"):
        got = [r["summary"]["events_per_s"] for _, r in runs if r["summary"]["spark"] == spark]
        if got:
            lines.append(f"median events/s, {spark} Spark: {statistics.median(got):,.0f} "
                         f"({len(got)} run(s); issue 36 target >= 200,000)")
    lines.append(f"{events:,} events per run, no query; seconds: the summary's (the job after "
                 f"Spark start-up); start-up: joining Ray and starting Spark, or waiting for "
                 f"the warm one; wall: the command, measured here")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--repeat", type=int, default=3, help="runs on the warm Spark")
    ap.add_argument("--cold", type=int, default=1, help="runs with --own-spark")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--queries", action="store_true",
                    help="register examples/queries.cep first, and compare with raycep "
                         "local (default settings) on the first file")
    args = ap.parse_args(argv)
    print("raycep ingest into raycep serve (issue 36)")
    with tempfile.TemporaryDirectory(prefix="bench_serve_ingest_") as tmp:
        log(f"writing {args.repeat + args.cold} files of {args.events:,} ticks ...")
        paths = write_copies(tmp, args.events, args.seed, args.repeat + args.cold)
        log(f"starting raycep serve --partitions {args.partitions} --spark ...")
        t = time.perf_counter()
        proc, url = start_serve(tmp, args.partitions, ("--spark",))
        listening = time.perf_counter() - t
        try:
            ready = warm_ready()
            print(f"raycep serve --spark: gateway listening after {listening:.1f} s; warm "
                  f"Spark ready after {time.perf_counter() - t:.1f} s (its start-up "
                  f"{ready['startup_seconds']:.1f} s, of which warm-up "
                  f"{ready['warm_up_seconds']:.1f} s)")
            if args.queries:
                from raycep.gateway.client import connect
                with open(QUERIES, encoding="utf-8") as f:
                    connect(url).register_many(f.read())
            runs = []
            for k, path in enumerate(paths):
                own = k >= args.repeat
                label = f"cold {k - args.repeat + 1}" if own else f"warm {k + 1}"
                log(f"[{label}] raycep ingest {os.path.basename(path)}"
                    f"{' --own-spark' if own else ''} ...")
                runs.append((label, ingest(path, tmp, url, own)))
                log(f"[{label}] {runs[-1][1]['summary']['events_per_s']:,.0f} events/s")
            stored = matches_stored(url) if args.queries else None
        finally:
            stop_serve(proc)
        local = run_local(paths[0], tmp) if args.queries else None
        single = run_local(paths[0], tmp, workers=1) if args.queries else None
    print("\n".join(table(runs, args.events)))
    if local is not None:
        first = runs[0][1]["summary"]
        print(f"\nwith the sample queries: raycep local (default settings) on the first file "
              f"{local['seconds']:.3f} s ({local['events_per_s']:,.0f} events/s, "
              f"{local['matches']:,} matches); the cluster's first run {first['seconds']:.3f} "
              f"s: {local['seconds'] / first['seconds']:.2f}x raycep local (issue 36 target "
              f">= 1.0x); matches stored at the gateway over all {len(runs)} runs: {stored:,} "
              f"(= {len(runs)} x raycep local's: {stored == len(runs) * local['matches']})")
        warm = [r for _, r in runs if r["summary"]["spark"] == "warm"]
        if warm:
            ratio = statistics.median(local["seconds"] / r["summary"]["seconds"] for r in warm)
            print(f"the warm runs: {ratio:.2f}x raycep local (median of {len(warm)})")
        print(f"per actor CPU second against raycep local --workers 1 per CPU second "
              f"({single['cpu']:.2f} CPU s, {single['seconds']:.3f} s): " + ", ".join(
                  f"{label} {single['cpu'] / r['cpu']['partition actors']:.2f}x"
                  for label, r in runs if r["cpu"].get("partition actors"))
              + " (issue 36 target >= 0.8x)")
    print("\nCPU seconds by process during each run:")
    for label, r in runs:
        print(f"{label:>12}: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                           sorted(r["cpu"].items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
