"""Re-partitioning a running cluster, as a user does it (issue 38): ``raycep serve --key
symbol --partitions 2 --retain 10000000`` (a subprocess, checkpoints on as by default; the
retention keeps every tick buffered: the state a rescale moves), the sample queries
registered with the client, ``--events`` ticks sent with the client, then ``raycep scale --partitions N`` (the command,
a subprocess) to 3, 1 and 2 actors. Printed per rescale: the groups moved, the buffered
events, the seconds the gateway spent (its answer), of which sends were held, and the
command's wall time, and the gateway's seconds per step; then the
matches read at the gateway against ``raycep local`` on the same ticks.

    python3 -m benchmarks.bench_scale --events 100000 --seed 5
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_register import start_serve, stop_serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: seconds of events the actors keep (raycep serve --retain): every tick of the run
RETAIN = "10000000"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def local_matches(queries: str, ticks: str) -> int:
    out = subprocess.run([sys.executable, "-m", "raycep", "local", "--query", queries,
                          "--events", ticks, "--key", "symbol", "--out", os.devnull],
                         capture_output=True, text=True, check=True)
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])["matches"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--steps", default="3,1,2", help="partition counts to scale to, in turn")
    args = ap.parse_args(argv)
    import pyarrow.csv as pcsv
    from raycep.gateway.client import connect
    with tempfile.TemporaryDirectory() as tmp:
        ticks = os.path.join(tmp, "ticks.csv")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_ticks.py"),
                        "--rows", str(args.events), "--seed", str(args.seed), "--out", ticks],
                       check=True, capture_output=True)
        queries = os.path.join(ROOT, "examples", "queries.cep")
        log("starting raycep serve --partitions 2 ...")
        proc, url = start_serve(tmp, 2, ("--retain", RETAIN))
        try:
            client = connect(url)
            client.register_many(open(queries, encoding="utf-8").read())
            table = pcsv.read_csv(ticks)
            log(f"sending {table.num_rows:,} ticks ...")
            for i in range(0, table.num_rows, 20_000):
                client.send(table.slice(i, 20_000), type="type")
            rows = []
            for n in [int(x) for x in args.steps.split(",")]:
                t = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "raycep", "scale", "--partitions",
                                      str(n), "--gateway", url], capture_output=True,
                                     text=True, check=True)
                wall = time.perf_counter() - t
                answer = client.scaling()["history"][-1]
                rows.append((answer, wall, out.stdout.strip()))
            client.advance(float(table.column("ts")[-1].as_py()) + 2e6, force=True)
            client.drained(timeout=300)
            stored = sum(q["matches"]["total"] for q in client.queries())
        finally:
            stop_serve(proc)
        want = local_matches(queries, ticks)
    print(f"raycep scale on raycep serve --key symbol --retain {RETAIN} (checkpoints on), "
          f"{args.events:,} ticks of seed {args.seed} buffered")
    print(f"{'from':>5} {'to':>4} {'groups moved':>13} {'buffered':>10} {'gateway s':>10} "
          f"{'held s':>7} {'command s':>10}  phases (s)")
    for answer, wall, _ in rows:
        phases = " ".join(f"{k} {v:.3f}" for k, v in answer.get("phases", {}).items())
        print(f"{answer['before']:>5} {answer['partitions']:>4} "
              f"{answer['moved_key_groups']:>13} {answer['buffered']:>10,} "
              f"{answer['seconds']:>10.3f} {answer.get('held_seconds', answer['seconds']):>7.3f}"
              f" {wall:>10.3f}  {phases}")
    print(f"matches stored at the gateway: {stored:,}; raycep local on the same ticks: "
          f"{want:,} ({'equal' if stored == want else 'DIFFERENT'})")
    return 0 if stored == want else 1


if __name__ == "__main__":
    sys.exit(main())
