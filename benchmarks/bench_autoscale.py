"""Autoscaling under a stepped input rate (issue 38): ``raycep serve --autoscale MIN..MAX`` fed by
the Python client at a rate that steps up and down; the number of partition actors over time.

    python3 -m benchmarks.bench_autoscale [--steps 10:5000,30:60000,50:3000] [--autoscale 1..2]
                                          [--interval 1] [--seed 42] [--plot FILE.png]

``raycep serve --key symbol --partitions MIN --autoscale MIN..MAX --autoscale-interval S`` (a
subprocess, checkpoints on as by default), the sample queries registered with the client; then
the ticks of ``examples/make_ticks.py`` sent with ``Client.send`` in slices every 0.1 s at the
rate of each step (``SECONDS:EVENTS_PER_S``, one after the other). When the actors cannot keep
up, a send takes longer and the rate reached falls below the asked one. Every 0.5 s: the time,
the asked and reached rates, the number of partition actors (``GET /v1/routing``). At the end:
every autoscaling decision with its reason (``GET /v1/scale``), and the matches stored at the
gateway against ``raycep local`` on the same events. ``--plot``: the three series over time as
a PNG (matplotlib: ``pip install -e '.[bench]'``).
Figures to stdout, progress to stderr; results: benchmarks/SCALE_RESULTS.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_multiquery import log
from benchmarks.bench_recovery import stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = os.path.join(ROOT, "examples", "queries.cep")
SLICE = 0.1                                   # seconds between two sends


def parse_steps(text: str) -> list:
    """``"10:5000,30:60000"`` -> ``[(10.0, 5000.0), (30.0, 60000.0)]``."""
    out = []
    for part in text.split(","):
        seconds, _, rate = part.partition(":")
        try:
            out.append((float(seconds), float(rate)))
        except ValueError:
            raise SystemExit(f"--steps: SECONDS:EVENTS_PER_S,..., got {part!r}") from None
        if not (out[-1][0] > 0 and out[-1][1] > 0):
            raise SystemExit(f"--steps: positive seconds and rates, got {part!r}")
    return out


def start_serve(workdir: str, low: int, autoscale: str, interval: float):
    cmd = [sys.executable, "-m", "raycep", "serve", "--port", "0", "--key", "symbol",
           "--partitions", str(low), "--autoscale", autoscale, "--autoscale-interval",
           str(interval), "--registry", os.path.join(workdir, "registry.sqlite"),
           "--checkpoint-dir", os.path.join(workdir, "checkpoints")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(workdir, "serve.log"), "w"), text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"raycep serve did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].split()[0]


def run(steps: list, table, client) -> tuple:
    """Send ``table``'s rows at the stepped rates; ``(samples, rows sent)``."""
    samples, sent = [], 0
    ends = list(itertools.accumulate(seconds for seconds, _ in steps))   # (from the start)
    t0 = time.perf_counter()
    last_sample, last_sent = t0, 0
    tick = 0
    while True:
        now = time.perf_counter() - t0
        rate = next((r for end, (_, r) in zip(ends, steps) if now < end), None)
        if rate is None or sent >= table.num_rows:
            break
        want = min(table.num_rows, sent + int(rate * SLICE))
        if want > sent:
            client.send(table.slice(sent, want - sent))
            sent = want
        tick += 1
        target = t0 + tick * SLICE
        pause = target - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        at = time.perf_counter()
        if at - last_sample >= 0.5:
            samples.append({"t": round(at - t0, 2), "asked": rate,
                            "reached": (sent - last_sent) / (at - last_sample),
                            "partitions": client.routing()["partitions"]})
            last_sample, last_sent = at, sent
    return samples, sent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="10:5000,30:60000,50:3000",
                    help="SECONDS:EVENTS_PER_S steps, one after the other")
    ap.add_argument("--autoscale", default="1..2", help="MIN..MAX partition actors")
    ap.add_argument("--interval", type=float, default=1.0,
                    help="raycep serve --autoscale-interval")
    ap.add_argument("--seed", type=int, default=42, help="the ticks")
    ap.add_argument("--plot", default=None, metavar="FILE.png")
    args = ap.parse_args(argv)
    steps = parse_steps(args.steps)
    if args.plot:
        try:
            import matplotlib
        except ImportError:
            raise SystemExit("--plot needs matplotlib: pip install -e '.[bench]'") from None
        matplotlib.use("Agg")
    low = int(args.autoscale.split("..")[0])
    import pyarrow.csv as pacsv
    from raycep.gateway.client import connect
    rows = int(sum(s * r for s, r in steps)) + 1
    with tempfile.TemporaryDirectory(prefix="bench_autoscale_") as tmp:
        ticks = os.path.join(tmp, "ticks.csv")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_ticks.py"),
                        "--rows", str(rows), "--seed", str(args.seed), "--out", ticks],
                       check=True, capture_output=True)
        table = pacsv.read_csv(ticks)
        log(f"raycep serve --autoscale {args.autoscale} --autoscale-interval {args.interval}")
        proc, url = start_serve(tmp, low, args.autoscale, args.interval)
        try:
            client = connect(url)
            with open(QUERIES, encoding="utf-8") as f:
                client.register_many(f.read())
            log(f"sending at {args.steps} (seconds:events/s) ...")
            samples, sent = run(steps, table, client)
            client.advance(float(table.column("ts")[sent - 1].as_py()) + 3600.0, force=True)
            client.drained(300)
            stored = sum(q["matches"].get("total", 0) for q in client.queries())
            decisions = client.scaling()["autoscale"]["decisions"]
            client.close()
        finally:
            stop(proc)
        part = os.path.join(tmp, "sent.csv")
        with open(ticks) as f, open(part, "w") as g:
            for i, line in enumerate(f):
                if i > sent:
                    break
                g.write(line)
        done = subprocess.run([sys.executable, "-m", "raycep", "local", "--query", QUERIES,
                               "--events", part, "--key", "symbol", "--out", os.devnull],
                              capture_output=True, text=True, check=True, cwd=ROOT)
        local = json.loads(done.stdout.strip().splitlines()[-1])["matches"]
    print(f"raycep serve --autoscale {args.autoscale} --autoscale-interval {args.interval:g}, "
          f"steps {args.steps} (seconds:events/s), {sent:,} ticks sent (seed {args.seed})")
    print(f"{'t s':>6} {'asked ev/s':>10} {'reached ev/s':>12} {'actors':>6}")
    for s in samples:
        print(f"{s['t']:>6.1f} {s['asked']:>10,.0f} {s['reached']:>12,.0f} {s['partitions']:>6}")
    print("decisions:")
    for d in decisions:
        print(f"  {d['from']} -> {d['to']} ({d.get('seconds', float('nan')):.2f} s): "
              f"{d['reason']}")
    print(f"matches stored at the gateway: {stored:,}; raycep local on the same ticks: "
          f"{local:,} ({'equal' if stored == local else 'DIFFERENT'})")
    if args.plot:
        _plot(samples, args, args.plot)
        print(f"plot: {args.plot}")
    return 0 if stored == local else 1


def _plot(samples: list, args, path: str) -> None:
    import matplotlib.pyplot as plt
    t = [s["t"] for s in samples]
    fig, rate = plt.subplots(figsize=(8, 3.6))
    rate.plot(t, [s["asked"] for s in samples], "--", color="grey", label="asked events/s")
    rate.plot(t, [s["reached"] for s in samples], color="tab:blue", label="reached events/s")
    rate.set_xlabel("seconds")
    rate.set_ylabel("events/s")
    actors = rate.twinx()
    actors.step(t, [s["partitions"] for s in samples], where="post", color="tab:red",
                label="partition actors")
    actors.set_ylabel("partition actors")
    actors.set_yticks(range(1, max(s["partitions"] for s in samples) + 2))
    lines = rate.get_legend_handles_labels()
    more = actors.get_legend_handles_labels()
    rate.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right", fontsize=8)
    rate.set_title(f"raycep serve --autoscale {args.autoscale} (sample queries)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
