"""Scale-out of the cluster as a user feeds it (issues 36 and 38): ``raycep serve`` with 1, 2,
4, ... partition actors and the Python client, beside ``raycep local`` on the same file.

    python3 -m benchmarks.bench_scale_out [--events 1000000] [--seed 42] [--symbols 64]
                                          [--actors 1,2] [--repeat 1]

The ticks: ``examples/make_ticks.py --rows N --seed S --symbols K`` (K symbols, each at the
sample's rate of ticks; written before the runs, untimed). The queries: the sample's
``examples/queries.cep``. In one run, interleaved per repetition:

* ``raycep local`` with default settings, and with ``--workers 1`` (subprocesses; the
  summary's ``seconds``: reading the file, evaluating, writing every match);
* per actor count P, a fresh ``raycep serve --key symbol --partitions P`` (as a user starts
  it: registry, checkpoints and a JSON-lines match sink in a temporary folder), the queries
  registered with ``Client.register_many``, then timed: the file read with pyarrow and sent
  as one Arrow table (``Client.send``), ``advance`` past its end and ``drained`` -- until
  every match is stored at the gateway (their count must equal raycep local's). CPU seconds
  of the partition actors (``/proc``), and each actor's share of the events (hash
  partitioning of the keys: the largest share bounds the speed-up).

Printed: seconds, events/s, speed-up over one actor, against raycep local (default), and
the largest actor's share. Figures to stdout, progress to stderr; results with the machine
that gave them: benchmarks/SCALE_RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_multiquery import log
from benchmarks.bench_recovery import serve, stop
from benchmarks.idle_cpu import descendants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = os.path.join(ROOT, "examples", "queries.cep")


def make_ticks(path: str, rows: int, seed: int, symbols: int) -> str:
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_ticks.py"), "--rows",
                    str(rows), "--seed", str(seed), "--symbols", str(symbols), "--out", path],
                   check=True, capture_output=True, text=True)
    return path


def run_local(ticks: str, out: str, workers: int | None) -> dict:
    """One ``raycep local`` (default settings, or ``--workers``); its JSON summary."""
    cmd = [sys.executable, "-m", "raycep", "local", "--query", QUERIES, "--events", ticks,
           "--key", "symbol", "--out", out] + (["--workers", str(workers)] if workers else [])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_serve(ticks: str, partitions: int, timeout: float = 900.0) -> dict:
    """One fresh ``raycep serve --partitions P`` fed ``ticks`` by the client (docstring)."""
    import pyarrow.csv as pacsv
    from raycep.gateway.client import connect
    workdir = tempfile.mkdtemp(prefix="raycep-bench-scale-out-")
    proc, url = serve(workdir, ["--partitions", str(partitions)])
    try:
        client = connect(url)
        with open(QUERIES, encoding="utf-8") as f:
            client.register_many(f.read())
        before = descendants(proc.pid)
        t0 = time.perf_counter()
        table = pacsv.read_csv(ticks)
        client.send(table)
        client.advance(float(max(table.column("ts").to_pylist())) + 3600.0, force=True)
        if not client.drained(timeout):
            raise RuntimeError(f"raycep serve --partitions {partitions} did not drain in "
                               f"{timeout} s")
        seconds = time.perf_counter() - t0
        after = descendants(proc.pid)
        stored = sum(q["matches"].get("total", 0) for q in client.queries())
        actors = client.stats()["actors"]
        counts = [a.get("events", 0) for name, a in actors.items() if name != "global"]
        cpu = sum(after[p][3] - before.get(p, (0, "", "", 0.0))[3] for p in after
                  if "PartitionWorker" in after[p][2])
        client.close()
    finally:
        stop(proc)
    return {"seconds": seconds, "matches": stored, "events": table.num_rows,
            "actors_cpu": cpu, "largest_share": max(counts) / max(1, sum(counts)),
            "per_actor": counts}


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model or platform.processor()}), Python " \
           f"{platform.python_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--symbols", type=int, default=64)
    ap.add_argument("--actors", default="1,2", help="actor counts, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds one serve run may take to drain")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.actors.split(",")]
    if not counts or min(counts) < 1:
        ap.error("--actors: positive actor counts, e.g. 1,2,4")
    runs: dict = {"local": [], "local1": [], **{p: [] for p in counts}}
    with tempfile.TemporaryDirectory(prefix="bench_scale_out_") as tmp:
        log(f"writing {args.events:,} ticks of {args.symbols} symbols (seed {args.seed}) ...")
        ticks = make_ticks(os.path.join(tmp, "ticks.csv"), args.events, args.seed,
                           args.symbols)
        out = os.path.join(tmp, "local.jsonl")
        cells = [("local", lambda: run_local(ticks, out, None)),
                 ("local1", lambda: run_local(ticks, out, 1))] + \
            [(p, (lambda p=p: run_serve(ticks, p, args.timeout))) for p in counts]
        for rep in range(args.repeat):
            for name, cell in (cells if rep % 2 == 0 else list(reversed(cells))):
                r = cell()
                label = name if isinstance(name, str) else f"serve --partitions {name}"
                log(f"round {rep + 1}/{args.repeat}: {label}: {r['seconds']:.2f} s, "
                    f"{r['matches']:,} matches")
                runs[name].append(r)
    want = runs["local"][0]["matches"]
    for name, found in runs.items():
        for r in found:
            if r["matches"] != want:
                raise AssertionError(f"{name}: {r['matches']} matches, raycep local found "
                                     f"{want}")
    med = {name: statistics.median(r["seconds"] for r in found) for name, found in runs.items()}
    print(f"{args.events:,} ticks of {args.symbols} symbols (seed {args.seed}), "
          f"examples/queries.cep, {want:,} matches everywhere; {machine()}; median of "
          f"{args.repeat}")
    print(f"{'run':>36} {'seconds':>8} {'events/s':>9} {'vs 1 actor':>10} {'vs local':>8} "
          f"{'actors CPU s':>12} {'largest share':>13}")
    print(f"{'raycep local (default)':>36} {med['local']:>8.2f} "
          f"{args.events / med['local']:>9,.0f} {'':>10} {1.0:>8.2f}")
    print(f"{'raycep local --workers 1':>36} {med['local1']:>8.2f} "
          f"{args.events / med['local1']:>9,.0f} {'':>10} {med['local'] / med['local1']:>8.2f}")
    for p in counts:
        found = runs[p]
        cpu = statistics.median(r["actors_cpu"] for r in found)
        share = statistics.median(r["largest_share"] for r in found)
        speed = med[1] / med[p] if 1 in med else float("nan")
        print(f"{f'raycep serve --partitions {p} + client':>36} {med[p]:>8.2f} "
              f"{args.events / med[p]:>9,.0f} {speed:>10.2f} {med['local'] / med[p]:>8.2f} "
              f"{cpu:>12.2f} {share:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
