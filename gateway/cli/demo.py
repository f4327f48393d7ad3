"""``raycep demo``: the README's main job on an embedded local Ray."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time

from raycep.cep.errors import UnavailableError
from raycep.gateway.cli.common import err, load_queries, note
from raycep.gateway.cli.queries import query_table


def add_parser(commands) -> None:
    demo = commands.add_parser(
        "demo", help="start a local cluster, stream the sample ticks through it, show matches",
        description="Start an embedded local Ray with partition actors, the planner and the "
                    "gateway; register the sample queries; push the sample ticks through the "
                    "bulk path Spark jobs use; remove one query midway; print progress, "
                    "matches and a summary table (the last stdout line is a JSON summary).")
    demo.add_argument("--events", default="examples/ticks.csv", metavar="FILE")
    demo.add_argument("--queries", default="examples/queries.cep", metavar="FILE")
    demo.add_argument("--key", default="symbol", metavar="ATTR")
    demo.add_argument("--partitions", type=int, default=2, metavar="N")
    demo.add_argument("--batch", type=int, default=500, metavar="N",
                      help="events per pushed slice (default 500)")
    demo.add_argument("--remove", default=None, metavar="QUERY",
                      help="the query removed halfway (default: the second one)")
    demo.add_argument("--show", type=int, default=3, metavar="N",
                      help="matches printed per query as they arrive (default 3)")
    demo.add_argument("--out", default=None, metavar="FILE",
                      help="also write every match to this JSON-lines file")
    demo.add_argument("--no-verify", action="store_true",
                      help="skip re-running the kept queries in-process to compare matches")
    demo.set_defaults(func=run_demo)


def run_demo(args) -> int:
    """The README's main job: see the ``demo`` parser description."""
    from raycep.actors.handles import named_handles
    from raycep.actors.producer import Producer
    from raycep.actors.routing import RoutingTable
    from raycep.cep.io.sources import iter_events
    from raycep.cep.lang.compiler import compile_query
    from raycep.gateway.client import connect
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings

    for path in (args.events, args.queries):
        if not os.path.isfile(path):
            err(f"error: {path} not found (run `raycep demo` from the repository root, or "
                 f"pass --events/--queries)")
            return 2
    if args.partitions < 1 or args.batch < 1:
        err("error: --partitions and --batch must be at least 1")
        return 2
    queries = load_queries([args.queries])
    names = [q.name for _, q in queries]
    removed = args.remove or (names[1] if len(names) > 1 else None)
    if removed is not None and removed not in names:
        err(f"error: --remove {removed!r} is not one of the queries {names}")
        return 2
    events = list(iter_events(args.events, key_attr=args.key))
    workdir = tempfile.mkdtemp(prefix="raycep-demo-")
    settings = GatewaySettings(port=0, registry_path=os.path.join(workdir, "registry.sqlite"),
                               matches_jsonl=args.out, plan_every=1.0)
    t0 = time.monotonic()
    note(f"[demo] starting local Ray: {args.partitions} partition actors + global actor, "
         f"planner, gateway ...")
    cluster = RayCluster(args.partitions, args.key, settings, num_cpus=os.cpu_count() or 2)
    try:
        url = cluster.start()
        note(f"[demo] gateway at {url} (started in {time.monotonic() - t0:.1f} s)")
        client = connect(url)
        shown: dict = {}
        lock = threading.Lock()
        for _, q in queries:
            client.register(q.text, name=q.name)
            shown[q.name] = 0
            client.listen(q.name, _printer(q.name, shown, lock, args.show))
        note(f"[demo] registered {', '.join(names)}; streaming {len(events)} events from "
             f"{args.events} in slices of {args.batch} (the Spark push path)")
        routing = lambda: RoutingTable.from_dict(client.routing())   # noqa: E731
        producer = Producer(named_handles, routing, source="demo")   # (follows a rescale)
        t1 = time.monotonic()
        last = t1
        half = len(events) // 2
        for start in range(0, len(events), args.batch):
            producer.send(events[start:start + args.batch])
            if removed and start < half <= start + args.batch:
                producer.flush()
                out = client.remove(removed)
                note(f"[demo] removed query {removed} at event {start + args.batch} "
                     f"({out['matches']} matches so far); the others keep running")
            now = time.monotonic()
            if now - last >= 2.0:
                last = now
                note(f"[demo] {producer.events}/{len(events)} events, "
                     f"{producer.events / (now - t1):,.0f} events/s")
        producer.flush()
        # the end of the stream: past every window (a finite watermark; forced, since a
        # window may be longer than the gateway's --max-advance-ahead)
        client.advance(max(ev.ts for ev in events) + 1.0 + max(
            compile_query(q).window for _, q in queries), force=True)
        client.drained(30.0, every=0.05)
        wall = time.monotonic() - t1
        rows = client.queries()
        print()
        print(query_table(rows + [{"id": removed, "scope": "-", "status": "removed",
                                   "matches": {"total": out["matches"]}}] if removed else rows))
        summary = {"events": len(events), "seconds": round(wall, 3),
                   "events_per_s": round(len(events) / wall),
                   "partitions": args.partitions,
                   "matches": {r["id"]: r["matches"].get("total", 0) for r in rows},
                   "removed": removed}
        if removed:
            summary["matches"][removed] = out["matches"]
        if not args.no_verify:
            summary["verified"] = _verify(client, queries, removed, events, args.key)
            print(f"\nin-process engine agrees on the kept queries: "
                  f"{'yes' if summary['verified'] else 'NO'}")
        print(json.dumps(summary))
        return 0 if summary.get("verified", True) else 1
    except UnavailableError as exc:
        err(f"error: {exc}")
        return 1
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _printer(name: str, shown: dict, lock, limit: int):
    def show(match):
        with lock:
            shown[name] += 1
            if shown[name] > limit:
                return
            evs = match["events"]
            parts = []
            for var, ev in evs.items():
                ev = ev[-1] if isinstance(ev, list) else ev
                parts.append(f"{var}@{ev['ts']}:{ev.get('price', '')}")
            first = next(iter(evs.values()))
            first = first[0] if isinstance(first, list) else first
            print(f"match {name} {first.get('symbol', '')}: {' '.join(parts)}"
                  + (" (further matches counted, not printed)" if shown[name] == limit else ""),
                  flush=True)
    return show


def _verify(client, queries, removed, events, key) -> bool:
    """Run the kept queries over the same events in one in-process Engine and compare the
    match ids with what the cluster stored."""
    from raycep.cep.runtime.engine import reference_match_ids
    kept = [q for _, q in queries if q.name != removed]
    expected = reference_match_ids(kept, events, key)
    ok = True
    for q in kept:
        got, since = set(), 0
        while True:
            page = client.matches(q.name, since=since, limit=10_000)
            got.update(m["id"] for m in page.matches)
            if not page.matches:
                break
            since = page.next
        if got != expected[q.name]:
            note(f"[demo] {q.name}: cluster {len(got)} matches, in-process {len(expected[q.name])}")
            ok = False
    return ok
