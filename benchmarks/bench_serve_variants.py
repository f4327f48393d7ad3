"""Issue 35's variant rules through ``raycep serve`` and the Python client, per core, against
``raycep local --workers 1`` (the issue's target: within 0.8x per core).

    python3 -m benchmarks.bench_serve_variants [--rows 20000] [--seed 7] [--rule-seed 99]
                                               [--rules 100] [--repeat 3]

Rules: ``bench_variants.variants`` (three shapes, constants from ``--rule-seed``); ticks:
examples/make_ticks.py (``--rows``, ``--seed``). Per repetition, interleaved:

* ``raycep local --workers 1 --key symbol`` on the tick file (a subprocess): its wall seconds
  (the JSON summary's, start-up excluded) and its CPU seconds (the child's user + system time
  less that of the same command on the file's first row alone: start-up and imports).
* ``raycep serve --partitions 2 --key symbol`` as a user starts it (registry, checkpoints and a
  JSON-lines match sink in a temporary directory), a new one per repetition; the rules
  registered at once (``Client.register_many``); the tick file read with pyarrow and sent as
  one Arrow table (``Client.send``: columnar batches); then ``advance`` past the end and
  ``drained``; timed from the send until every match is stored at the gateway (counted
  through ``Client.queries``, checked equal to raycep local's). CPU: every process of that
  ``raycep serve`` (gateway, partition and planner actors, Ray's own) over the same span, read
  from ``/proc``; the client's own CPU (reading and encoding the table) separately.

Per-core ratio: local's CPU seconds over serve's (events per CPU-second of serve over local's).
Serve's CPU is also printed by process (the gateway, the partition actors, the planner, Ray's
own processes), medians over the runs.
Figures to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_multiquery import (local_startup_cpu, log, make_ticks, run_local_cpu,
                                         write_queries)
from benchmarks.bench_recovery import serve, stop
from benchmarks.bench_variants import variants
from benchmarks.idle_cpu import descendants

TARGET = 0.8                            # issue 35: serve's events per core / local's


def _cpu(tree: dict) -> float:
    return sum(cpu for _, _, _, cpu in tree.values())


def _spies(tree: dict, folder: str) -> list:
    """py-spy recording the partition actors and the gateway (``--profile``)."""
    out = []
    for pid, (_, _, cmd, _) in tree.items():
        if "PartitionWorker" in cmd or "GatewayServer" in cmd:
            path = os.path.join(folder, f"{cmd.split()[0].strip(':')}-{pid}.txt")
            out.append(subprocess.Popen(["py-spy", "record", "-p", str(pid), "-f", "raw", "-o",
                                         path, "--nonblocking", "-r", "200"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)
    return out


def run_serve(rules: list, ticks: str, timeout: float = 600.0, profile: str | None = None
              ) -> dict:
    """One fresh ``raycep serve`` fed ``ticks`` with ``rules`` registered (module docstring);
    ``profile``: a folder for py-spy's raw stacks of the actors and the gateway."""
    import pyarrow.csv as pacsv
    from raycep.gateway.client import connect
    workdir = tempfile.mkdtemp(prefix="raycep-bench-serve-")
    proc, url = serve(workdir, [])
    try:
        client = connect(url)
        client.register_many([(text, name) for name, text in rules])
        table = pacsv.read_csv(ticks)
        end = float(max(table.column("ts").to_pylist())) + 3600.0
        spies = _spies(descendants(proc.pid), profile) if profile else []
        before, mine = descendants(proc.pid), time.process_time()
        t0 = time.perf_counter()
        client.send(table)
        client.advance(end, force=True)
        if not client.drained(timeout):
            raise RuntimeError("raycep serve did not drain in time")
        stored = sum(q["matches"].get("total", 0) for q in client.queries())
        seconds = time.perf_counter() - t0
        after, mine = descendants(proc.pid), time.process_time() - mine
        cpu = sum(after[p][3] - before[p][3] for p in after if p in before) + \
            sum(after[p][3] for p in after if p not in before)
        actors = sum(after[p][3] - before.get(p, (0, "", "", 0.0))[3] for p in after
                     if "PartitionWorker" in after[p][2])
        split: dict = {}
        for p in after:
            kind = _kind(after[p][2])
            split[kind] = split.get(kind, 0.0) + after[p][3] - \
                before.get(p, (0, "", "", 0.0))[3]
        client.close()
        for spy in spies:
            spy.send_signal(2)
            spy.wait(30)
    finally:
        stop(proc)
    return {"seconds": seconds, "cpu": cpu, "actors_cpu": actors, "client_cpu": mine,
            "matches": stored, "events": table.num_rows, "split": split}


#: the processes of a raycep serve, by what their command line names
KINDS = ("PartitionWorker", "GatewayServer", "Planner", "raylet", "gcs_server", "dashboard",
         "log_monitor", "monitor")


def _kind(cmd: str) -> str:
    return next((k for k in KINDS if k in cmd), "other")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7, help="the ticks")
    ap.add_argument("--rule-seed", type=int, default=99, help="the rules' constants")
    ap.add_argument("--rules", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy raw stacks of the actors and the gateway in DIR (serve runs)")
    args = ap.parse_args(argv)
    rules = variants(args.rules, args.rule_seed)
    with tempfile.TemporaryDirectory(prefix="bench_serve_variants_") as tmp:
        ticks = make_ticks(os.path.join(tmp, "ticks.csv"), args.rows, args.seed)
        query_file = write_queries(os.path.join(tmp, "rules.cep"), rules)
        out = os.path.join(tmp, "local.jsonl")
        log("warm-up, and raycep local's CPU on one row (start-up, not counted) ...")
        idle = local_startup_cpu(query_file, ticks, out, tmp)
        run_local_cpu(query_file, ticks, out)
        runs: dict = {"local": [], "serve": []}
        cells = {"local": lambda: run_local_cpu(query_file, ticks, out, idle),
                 "serve": lambda: run_serve(rules, ticks, profile=args.profile)}
        for rep in range(args.repeat):
            for name in (cells if rep % 2 == 0 else tuple(reversed(cells))):
                r = cells[name]()
                log(f"round {rep + 1}/{args.repeat}: {name}: {r['seconds']:.3f} s wall, "
                    f"{r['cpu']:.3f} s CPU, {r['matches']:,} matches")
                runs[name].append(r)
    want = runs["local"][0]["matches"]
    for r in runs["serve"]:
        if r["matches"] != want:
            raise AssertionError(f"raycep serve stored {r['matches']} matches, raycep local "
                                 f"found {want}")
    med = {name: {k: statistics.median(r[k] for r in found) for k in ("seconds", "cpu")}
           for name, found in runs.items()}
    events = runs["local"][0]["events"]
    print(f"{args.rules} rules (--rule-seed {args.rule_seed}), {events:,} ticks (seed "
          f"{args.seed}); median of {args.repeat} runs, interleaved; raycep local's start-up "
          f"CPU {idle:.3f} s subtracted")
    print(f"{'run':>34} {'wall s':>7} {'events/s':>9} {'CPU s':>7} {'ev/CPU-s':>9} "
          f"{'per core':>8} {'target':>6} {'matches':>9}")
    for name, label in (("local", "raycep local --workers 1"),
                        ("serve", "raycep serve (2 actors) + client")):
        m = med[name]
        ratio = med["local"]["cpu"] / m["cpu"]
        print(f"{label:>34} {m['seconds']:>7.3f} {events / m['seconds']:>9,.0f} "
              f"{m['cpu']:>7.3f} {events / m['cpu']:>9,.0f} {ratio:>8.3f} "
              f"{'' if name == 'local' else TARGET:>6} {want:>9,}")
    s = runs["serve"]
    print(f"serve CPU split (median): partition actors "
          f"{statistics.median(r['actors_cpu'] for r in s):.3f} s, the rest of raycep serve "
          f"{statistics.median(r['cpu'] - r['actors_cpu'] for r in s):.3f} s; the client "
          f"(reading and sending the table) {statistics.median(r['client_cpu'] for r in s):.3f}"
          f" s, not counted")
    kinds = sorted({k for r in s for k in r["split"]})
    print("serve CPU by process (median s): " + ", ".join(
        f"{k} {statistics.median(r['split'].get(k, 0.0) for r in s):.3f}" for k in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
