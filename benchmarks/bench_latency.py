"""Latency from a producer's send to the match being readable by a client (issue 4).

    python3 -m benchmarks.bench_latency [--quick]

Starts a RayCluster (2 partition actors, planner, gateway on Ray), registers
``SEQ(Ping a, Pong b) WHERE [k] AND b.n = a.n WITHIN 10 seconds`` and, for each probe, sends a
Ping then a Pong for a fresh key and measures, with ``time.perf_counter``:

* gateway path: ``client.send([pong])`` until a ``client.matches`` read returns the match
  (the gateway drains the actors' outboxes before acknowledging a send, so this is one send
  plus one read);
* subscription: the same send until a ``client.subscribe`` iterator (SSE, on a thread) yields it;
* bulk path: ``Producer.send`` straight to the partition actors (how Spark pushes) until the
  subscriber yields it (includes the gateway's outbox drain interval, 20 ms when idle).

Each probe is repeated ``--probes`` times, idle and under a background load of stock ticks
pushed through the bulk path, and the p50/p99/max are printed.
"""
from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time

QUERY = "PATTERN SEQ(Ping a, Pong b) WHERE [k] AND b.n = a.n WITHIN 10 seconds"
LOAD_QUERY = ("PATTERN SEQ(Stock a, Stock b) WHERE [k] AND b.price > a.price * 1.02 "
              "WITHIN 5 seconds")


def percentiles(samples: list) -> dict:
    xs = sorted(samples)

    def pct(p):
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
    return {"n": len(xs), "p50_ms": pct(50) * 1e3, "p99_ms": pct(99) * 1e3,
            "max_ms": xs[-1] * 1e3, "mean_ms": statistics.fmean(xs) * 1e3}


class Probe:
    """Sends Ping/Pong pairs with increasing event time; ``arrivals`` gets (match n, t)."""

    def __init__(self, client, producer):
        self.client, self.producer = client, producer
        self.n = 0
        self.ts = 0.0
        self.arrivals: queue.Queue = queue.Queue()

    def pair(self):
        self.n += 1
        self.ts += 1.0
        key = f"probe-{self.n}"
        ping = {"type": "Ping", "ts": self.ts, "k": key, "n": self.n}
        pong = {"type": "Pong", "ts": self.ts + 0.5, "k": key, "n": self.n}
        return ping, pong

    def listen(self, qid: str):
        def run():
            for m in self.client.subscribe(qid):
                self.arrivals.put((m["events"]["a"]["n"], time.perf_counter()))
        threading.Thread(target=run, daemon=True).start()

    def wait_for(self, n: int, timeout: float = 30.0) -> float:
        deadline = time.monotonic() + timeout
        while True:
            got, t = self.arrivals.get(timeout=max(0.01, deadline - time.monotonic()))
            if got == n:
                return t


def run(probes: int, load_rate: float) -> dict:
    from raycep.actors.handles import named_handles
    from raycep.actors.producer import Producer
    from raycep.actors.routing import RoutingTable
    from raycep.cep.event import make_event
    from raycep.gateway.client import connect
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings

    settings = GatewaySettings(port=0, registry_path=None, plan_every=1.0)
    cluster = RayCluster(2, "k", settings, num_cpus=2)
    results: dict = {}
    try:
        cluster.start()
        client = connect(cluster.url)
        qid = client.register(QUERY, name="pingpong")
        client.register(LOAD_QUERY, name="load")
        rt = lambda: RoutingTable.from_dict(client.routing())   # noqa: E731
        producer = Producer(named_handles(rt()), rt, source="latency")
        probe = Probe(client, producer)
        probe.listen(qid)
        time.sleep(0.5)
        for phase in ("idle", "loaded"):
            stop = threading.Event()
            loader = None
            if phase == "loaded":
                loader = threading.Thread(target=_load, args=(rt, load_rate, stop), daemon=True)
                loader.start()
                time.sleep(1.0)
            gw, sub, bulk = [], [], []
            cursor = client.matches(qid, since=0, limit=0).head
            for _ in range(probes):
                ping, pong = probe.pair()
                client.send([ping])
                t0 = time.perf_counter()
                client.send([pong])
                found = False
                while not found:
                    page = client.matches(qid, since=cursor)
                    cursor = page.next
                    found = any(m["events"]["a"]["n"] == probe.n for m in page.matches)
                gw.append(time.perf_counter() - t0)
                sub.append(probe.wait_for(probe.n) - t0)
            for _ in range(probes):
                ping, pong = probe.pair()
                producer.send([make_event(ping)])
                producer.flush()
                t0 = time.perf_counter()
                producer.send([make_event(pong)])
                bulk.append(probe.wait_for(probe.n) - t0)
            stop.set()
            if loader is not None:
                loader.join()
            results[phase] = {"gateway send -> matches() read": percentiles(gw),
                              "gateway send -> subscribe() yields": percentiles(sub),
                              "bulk push -> subscribe() yields": percentiles(bulk)}
            print(f"[latency] {phase} done", file=sys.stderr, flush=True)
    finally:
        cluster.stop()
    return results


def _load(routing, rate: float, stop: threading.Event):
    """Push stock ticks (64 keys) through the bulk path at about ``rate`` events/s."""
    import random

    from raycep.actors.handles import named_handles
    from raycep.actors.producer import Producer
    from raycep.cep.event import Event
    rng = random.Random(1)
    producer = Producer(named_handles(routing()), routing, source="load")
    ts, batch = 0.0, 200
    while not stop.is_set():
        t = time.perf_counter()
        evs = []
        for _ in range(batch):
            ts += 0.01
            k = f"s{rng.randrange(64)}"
            evs.append(Event("Stock", ts, {"k": k, "price": 100 + rng.random() * 5}, key=k))
        producer.send(evs)
        time.sleep(max(0.0, batch / rate - (time.perf_counter() - t)))
    producer.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50 probes instead of 300")
    ap.add_argument("--probes", type=int, default=None)
    ap.add_argument("--load-rate", type=float, default=5000.0,
                    help="background events/s in the loaded phase (default 5000)")
    args = ap.parse_args(argv)
    probes = args.probes or (50 if args.quick else 300)
    print(f"raycep latency benchmark: {probes} probes per path and phase; background load "
          f"{args.load_rate:,.0f} events/s over 64 keys in the loaded phase; "
          f"2 partition actors; {os.cpu_count()} CPUs")
    results = run(probes, args.load_rate)
    print(f"{'phase':8} {'path':36} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for phase, paths in results.items():
        for path, r in paths.items():
            print(f"{phase:8} {path:36} {r['n']:5d} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
                  f"{r['max_ms']:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
