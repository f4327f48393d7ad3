"""Is an idle cluster idle? Start ``raycep serve`` (a subprocess: its own local Ray, 2
partition actors keyed by symbol, checkpoints on), send generated ticks with the Python
client (no query registered unless ``--queries``), wait ``--quiet`` seconds, then read each
Ray worker process's CPU time from ``/proc/<pid>/stat`` (utime + stime) over ``--measure``
seconds, and the actors' ``buffered``/``evicted`` and checkpoint figures from
``GET /v1/stats``.

    python3 -m benchmarks.idle_cpu [--rows 200000] [--quiet 15] [--measure 20] [--queries]
                                   [--retain S] [--profile]

Only the processes descended from this ``raycep serve`` are measured (the Ray of other runs
on the same machine is not), so the figure is what this cluster costs while nothing arrives.
``--profile`` also samples the partition actors with py-spy (when installed) during the
measurement and prints the top functions.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_recovery import serve, stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def ticks(n: int, symbols: int = 200, seed: int = 7) -> list:
    """``n`` Stock ticks over ``symbols`` symbols, 100 a second of event time."""
    rnd = random.Random(seed)
    price = [100.0 + 5 * k for k in range(symbols)]
    rows = []
    for i in range(n):
        k = rnd.randrange(symbols)
        price[k] = round(price[k] * (1 + rnd.uniform(-0.01, 0.01)), 2)
        rows.append({"type": "Stock", "ts": i / 100.0, "symbol": f"S{k}", "price": price[k],
                     "volume": rnd.randrange(100, 10_000)})
    return rows


def processes() -> dict:
    """pid -> (ppid, name, cmdline, cpu seconds) of every process we can read."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), name, cmd,
                           (int(fields[11]) + int(fields[12])) / TICK)
    return out


def descendants(root: int) -> dict:
    procs = processes()
    children: dict = {}
    for pid, (ppid, *_rest) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, ()):
            found[c] = procs[c]
            todo.append(c)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--quiet", type=float, default=15.0)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--queries", action="store_true",
                        help="register the three sample queries first")
    parser.add_argument("--retain", type=float, default=None)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from raycep.gateway.client import connect
    workdir = tempfile.mkdtemp(prefix="raycep-idle-")
    extra = ["--retain", str(args.retain)] if args.retain is not None else []
    proc, url = serve(workdir, extra)
    try:
        client = connect(url)
        if args.queries:
            from raycep.cep.lang.parser import parse_queries
            for q in parse_queries(open(os.path.join(ROOT, "examples", "queries.cep")).read()):
                client.register(q.text, name=q.name)
        rows = ticks(args.rows)
        started = time.perf_counter()
        for i in range(0, len(rows), args.batch):
            client.send(rows[i:i + args.batch])
        sent = time.perf_counter() - started
        print(f"sent {len(rows):,} rows in {sent:.1f} s; quiet {args.quiet:g} s ...",
              flush=True)
        time.sleep(args.quiet)
        before = descendants(proc.pid)
        spies = []
        if args.profile and shutil.which("py-spy"):
            for pid, (_, name, cmd, _) in before.items():
                if "PartitionWorker" in cmd or "GatewayServer" in cmd:
                    out = os.path.join(workdir, f"spy-{pid}.txt")
                    spies.append((pid, cmd, out, subprocess.Popen(
                        ["py-spy", "record", "-p", str(pid), "-d", str(int(args.measure)),
                         "-f", "raw", "-o", out, "--nonblocking"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        t0 = time.monotonic()
        time.sleep(args.measure)
        after = descendants(proc.pid)
        span = time.monotonic() - t0
        stats = client.stats()
        rows_out = []
        for pid, (_, name, cmd, cpu) in sorted(after.items()):
            if pid in before:
                used = (cpu - before[pid][3]) / span
                rows_out.append((used, pid, (cmd or name)[:60]))
        workers = sum(u for u, _, c in rows_out if c.startswith("ray::"))
        everything = sum(u for u, _, _ in rows_out)
        print(f"CPU over {span:.1f} s of quiet (cores):")
        for used, pid, cmd in sorted(rows_out, reverse=True)[:12]:
            print(f"  {used:6.3f}  {pid:>7}  {cmd}")
        print(f"Ray worker processes (ray::*): {workers:.3f} cores; all processes of this "
              f"raycep serve: {everything:.3f} cores")
        for t, st in sorted(stats["actors"].items()):
            ck = st.get("checkpoint") or {}
            print(f"  actor {t}: buffered {st['buffered']:,} evicted {st['evicted']:,} "
                  f"events {st['events']:,} checkpoint "
                  f"{json.dumps({k: ck.get(k) for k in ('checkpoints', 'last_checkpoint', 'totals') if k in ck})}")
        for pid, cmd, out, spy in spies:
            spy.wait(args.measure + 30)
            if os.path.exists(out):
                counts: dict = {}
                for line in open(out):
                    stack, _, n = line.rstrip().rpartition(" ")
                    top = stack.split(";")[-1] if stack else "?"
                    counts[top] = counts.get(top, 0) + int(n)
                print(f"py-spy {pid} {cmd[:40]}: samples {sum(counts.values())}")
                for top, n in sorted(counts.items(), key=lambda kv: -kv[1])[:8]:
                    print(f"    {n:6d}  {top[:110]}")
    finally:
        stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
