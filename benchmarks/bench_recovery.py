"""What fault tolerance costs and how fast a killed actor serves again, through the public
path: ``raycep serve`` (a subprocess: local Ray, 2 partition actors keyed by symbol, JSONL sink)
and the Python client sending generated ticks with the three sample queries.

    python3 -m benchmarks.bench_recovery [--rows 100000] [--batch 2000] [--repeat 2]

* Throughput: the same run without checkpoints (``--no-checkpoints``), with the default
  interval (20,000 events or 10 s per actor) and with a checkpoint every 5,000 events,
  alternated ``--repeat`` times; events/s is rows / wall time of the sends (each send returns
  when its matches are stored). The actors' checkpoint pauses come from their stats.
* Recovery: partition actor 0's process is killed with SIGKILL after half the batches; the
  figure is the time from the kill until the next batch is acknowledged (Ray restarts the
  actor, which loads its checkpoint and replays its log), with the actor's own restore time.
  The sink is then compared with an in-process Engine (``raycep local``'s evaluation).

Targets (issue 17): serving again within 10 s of a kill; checkpointing at the default
interval costs under 10 % of the throughput.

    python3 -m benchmarks.bench_recovery --checkpoint-cost [--buffered 100000 1000000]

* Checkpoint cost (issue 33): one PartitionWorker in this process (no Ray), ``retain`` set so
  that every event stays buffered, ``--buffered`` events ingested in batches of 2,000 and a
  first checkpoint (the base); then, for each change size, that many more events and a
  checkpoint: its seconds and bytes (from ``stats()``), next to what the state costs in
  full (the base, and a pickle of the whole snapshot: what a checkpoint wrote before), and
  a checkpoint with nothing changed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = (("no checkpoints", ["--no-checkpoints"]),
           ("default (20k events / 10 s)", []),
           ("every 5k events", ["--checkpoint-every", "5000"]))


def serve(workdir: str, extra: list):
    """Start ``raycep serve`` (any free port); returns (process, url) once it listens."""
    cmd = [sys.executable, "-m", "raycep", "serve", "--port", "0", "--partitions",
           "2", "--key", "symbol", "--registry", os.path.join(workdir, "registry.sqlite"),
           "--checkpoint-dir", os.path.join(workdir, "checkpoints"),
           "--matches-jsonl", os.path.join(workdir, "matches.jsonl"), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"raycep serve did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].split()[0]


def stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def run(rows: list, batch: int, queries: list, extra: list, kill_at: int | None = None):
    from raycep.gateway.client import connect
    workdir = tempfile.mkdtemp(prefix="raycep-bench-recovery-")
    proc, url = serve(workdir, extra)
    out: dict = {}
    try:
        client = connect(url)
        for q in queries:
            client.register(q.text, name=q.name)
        batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
        started = time.perf_counter()
        for n, part in enumerate(batches):
            if n == kill_at:
                os.kill(client.stats()["actors"]["0"]["pid"], signal.SIGKILL)
                killed = time.perf_counter()
                client.send(part)
                out["serving_again_s"] = round(time.perf_counter() - killed, 2)
                continue
            client.send(part)
        wall = time.perf_counter() - started
        client.advance(max(r["ts"] for r in rows) + 100.0, force=True)
        client.drained(60.0)
        actors = client.stats()["actors"]
        out.update(events_per_s=round(len(rows) / wall), wall_s=round(wall, 2))
        cps = [a["checkpoint"] for a in actors.values() if a.get("checkpoint")]
        out["checkpoints"] = sum(c["checkpoints"] for c in cps)
        pauses = [c["last_checkpoint"]["seconds"] for c in cps
                  if c.get("last_checkpoint") and c["last_checkpoint"].get("seconds")]
        out["last_pause_s"] = max(pauses) if pauses else None
        if kill_at is not None:
            out["restore_s"] = actors["0"]["recovery"]["seconds"]
            out["replayed"] = actors["0"]["recovery"]["replayed"]
    finally:
        stop(proc)
    with open(os.path.join(workdir, "matches.jsonl"), encoding="utf-8") as f:
        out["sink"] = [json.loads(line) for line in f]
    return out


def checkpoint_cost(buffered: int, changes=(1_000, 10_000, 50_000)) -> list:
    """``[(label, events saved, seconds, bytes)]`` of a worker holding ``buffered`` events."""
    import pickle
    import shutil
    from raycep.actors.partition import PartitionWorker, WorkerSettings
    from raycep.actors.recovery import CheckpointSettings
    from raycep.cep.event import Event
    from raycep.cep.io.codec import encode_batch

    def ticks(n: int, start: int) -> list:
        return [Event("Stock", (start + i) / 100.0,
                      {"symbol": f"S{i % 200}", "price": 100.0 + (i * 7919) % 1000 / 100.0,
                       "volume": 100 + (i * 31) % 9900}, key=f"S{i % 200}")
                for i in range(n)]

    workdir = tempfile.mkdtemp(prefix="raycep-bench-checkpoint-")
    try:
        w = PartitionWorker("p0", "symbol", worker=WorkerSettings(outbox=True, retain=10**9),
                            checkpoint=CheckpointSettings(workdir, every_events=10**9,
                                                          every_seconds=10**9))
        w.add_query("dip", "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND "
                           "b.price < a.price * 0.5 WITHIN 10 seconds")
        for i in range(0, buffered, 2000):
            w.ingest(encode_batch(ticks(min(2000, buffered - i), i), "bench", f"b{i}"))
        out = []
        started = time.perf_counter()
        old = pickle.dumps(w.snapshot(evicted=False), protocol=5)
        out.append(("whole state as one pickle (before issue 33)", buffered,
                    round(time.perf_counter() - started, 3), len(old)))
        del old
        base = w.checkpoint()
        out.append(("first checkpoint (base: every buffered event)", base["events"],
                    base["seconds"], base["bytes"]))
        at = buffered
        for n in changes:
            for i in range(at, at + n, 2000):
                w.ingest(encode_batch(ticks(min(2000, at + n - i), i), "bench", f"b{i}"))
            at += n
            cp = w.checkpoint()
            out.append((f"checkpoint after {n:,} new events"
                        f"{' (compaction)' if cp['compacted'] else ''}", cp["events"],
                        cp["seconds"], cp["bytes"]))
        started = time.perf_counter()
        none = w.checkpoint()
        out.append(("checkpoint with nothing changed", 0,
                    round(time.perf_counter() - started, 4), 0 if none is None else -1))
        assert w.stats()["buffered"] == at
        return out
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--checkpoint-cost", action="store_true",
                        help="measure checkpoint time and bytes against buffered events")
    parser.add_argument("--buffered", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args(argv)
    if args.checkpoint_cost:
        print("| buffered events | checkpoint | events saved | seconds | bytes |\n"
              "|---|---|---|---|---|")
        for n in args.buffered:
            for label, saved, seconds, size in checkpoint_cost(n):
                print(f"| {n:,} | {label} | {saved:,} | {seconds} | {size:,} |", flush=True)
        return 0
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from make_ticks import write_csv
    from raycep.cep.io.sources import read_events
    from raycep.cep.lang.parser import parse_queries
    from raycep.cep.runtime.engine import reference_match_ids
    path = os.path.join(tempfile.mkdtemp(), "ticks.csv")
    write_csv(path, args.rows)
    events = list(read_events(path, key_attr="symbol"))
    rows = [{"type": e.type, "ts": e.ts, **e.attrs} for e in events]
    with open(os.path.join(ROOT, "examples", "queries.cep"), encoding="utf-8") as f:
        queries = parse_queries(f.read())
    print(f"{args.rows:,} ticks, batches of {args.batch}, 3 sample queries, raycep serve with "
          f"2 partition actors; {args.repeat} alternating rounds", file=sys.stderr)
    results: dict = {name: [] for name, _ in CONFIGS}
    for r in range(args.repeat):
        for name, extra in CONFIGS:
            res = run(rows, args.batch, queries, extra)
            results[name].append(res)
            print(f"  round {r + 1}: {name}: {res['events_per_s']:,} events/s, "
                  f"{res['checkpoints']} checkpoints", file=sys.stderr)
    print("| configuration | events/s (best; all) | vs no checkpoints | checkpoints | "
          "longest last pause (s) |\n|---|---|---|---|---|")
    base = max(r["events_per_s"] for r in results["no checkpoints"])
    for name, runs in results.items():
        best = max(r["events_per_s"] for r in runs)
        pauses = [r["last_pause_s"] for r in runs if r["last_pause_s"] is not None]
        each = ", ".join(f"{r['events_per_s']:,}" for r in runs)
        print(f"| {name} | {best:,} ({each}) | "
              f"{best / base:.2f}x | {runs[-1]['checkpoints']} | "
              f"{max(pauses) if pauses else '-'} |")
    res = run(rows, args.batch, queries, [], kill_at=len(rows) // args.batch // 2)
    expected = reference_match_ids(queries, events, "symbol")
    got = {q.name: set() for q in queries}
    for rec in res["sink"]:
        got[rec["query"]].add(rec["id"])
    once = len(res["sink"]) == len({(r["id"], bool(r.get("retracted"))) for r in res["sink"]})
    print(f"\nSIGKILL of partition actor 0 after {len(rows) // 2:,} events: serving again "
          f"after {res['serving_again_s']} s (target <= 10 s); the actor restored its "
          f"checkpoint and replayed {res['replayed']} logged changes in {res['restore_s']} s; "
          f"sink == in-process engine: {got == expected}; every match id once: {once}; "
          f"{res['events_per_s']:,} events/s over the run")
    return 0 if got == expected and once else 1


if __name__ == "__main__":
    raise SystemExit(main())
