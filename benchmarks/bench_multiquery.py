"""Many variants of a few query shapes (issue 15: shared multi-query evaluation).

    python3 -m benchmarks.bench_multiquery [--rows 20000] [--counts 1,10,100,1000] [--repeat 3]
                                           [--full] [--part e2e|worker|prefix|both|hetero]
                                           [--cluster] [--quick]

Query sets: N variants (N in --counts) over type Stock, all ``[symbol]``, mixing four shapes
that differ only in constants (deterministic; ``query_variants``):

1. ``dip``: SEQ of 3 (dip_recovery-like) ``b.price < a.price * D AND c.price > a.price AND
   c.volume >= V * a.volume``, WITHIN 30 s;
2. ``breakout``: SEQ with a negation (clean_breakout-like) ``SEQ(Stock a, ~Stock n, Stock b)
   ... b.price > a.price * R AND n.price < a.price``, WITHIN 10 s (the same window for all:
   windows may not differ within a group whose pattern has a negation);
3. ``pair``: SEQ of 2 ``b.price > a.price * R`` (R from 1.02), WITHIN 10, 15 or 20 s;
4. ``symbol``: SEQ of 2 with an equality constant ``a.symbol = 'AAPL'`` (the 8 symbols of
   examples/make_ticks.py) and ``b.price > a.price * R`` (R from 1.01), WITHIN 10 s.

Constants rise with the variant number, so a query of a large set matches less than the
first ones (tens of thousands of matches in all at N = 100 on 20,000 ticks, not millions).

The i-th query of a set is of shape ``i % 4``, so the 1-query set is the sample dip_recovery
(examples/queries.cep) and a set of N is a prefix of the set of 1000.

Part ``e2e`` (what a user waits for): ticks from examples/make_ticks.py (``--rows``, seed
``--seed``) in a temporary directory; per N, ``raycep local --query SET.cep --events TICKS
--key symbol --out OUT`` as a subprocess (``python -m gateway.cli``), with sharing on and with
``--no-sharing`` (N = 1000 off only with ``--full``: N = 100 off took 87 s on 20,000 ticks
here, N = 1000 off would take ~15 min per run), ``--repeat`` times each, the best (min
``seconds``) kept per cell, after one untimed warm-up run. The figures are those of the JSON
summary line (``seconds``: reading, evaluating, writing; start-up excluded); the match files
of sharing on and off must hold the same lines (compared sorted).

Part ``worker``: one ``actors.partition.PartitionWorker`` in-process (no Ray), as
bench_cluster's part 2: the same ticks as msgpack batches, ``ingest`` of every batch plus
``advance(inf)``, N = 1, 10, 100, sharing on and off (after an untimed warm-up on one batch).

Part ``prefix``: shared sub-patterns (``cep/evaluation/prefixes.py``) end to end: 8 queries of 4
structures that share no group but begin (in plan order, trigger first) with the same core
``SEQ(B b, C c, D d)`` and its conditions (``prefix_queries``), over 20,000 events of types A-G
with D rare (``make_prefix_events``), ``raycep local`` with sharing on and ``--no-sharing``;
the default planner (each query planned on its own) and ``--planner tree-nfa``; the match
files must hold the same lines.

Part ``hetero`` (only when named; benchmarks/bench_hetero.py, issue 35): a heterogeneous
set of 12 rule structures x 20 constants over a 6-type keyed stream (benchmarks/hetero_rules.py;
``--seed`` picks the stream and the constants: tune with seed A = 42, report with seed B = 7),
against its first rule alone and each structure's first rule alone, with each rule's
evaluation path where the engine reports it.

``--cluster``: the 1- and 100-query sets (``--quick``: 10) on 2 Ray partition actors (sharing
on, the actors' default), twice: fed msgpack batches directly (bench_cluster's
``run_actors``), and through what ``raycep serve`` runs (gateway + actors: queries registered
and events sent with the Client over HTTP, timed until every match is stored).

Figures go to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import hetero_rules as hr
from benchmarks.bench_cluster import run_worker   # PartitionWorker ingest + advance, timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKE_TICKS = os.path.join(ROOT, "examples", "make_ticks.py")
KEY = "symbol"
SYMBOLS = ("AAPL", "AMZN", "GOOG", "IBM", "INTC", "META", "MSFT", "NVDA")  # make_ticks.py
SHAPES = ("dip", "breakout", "pair", "symbol")
MODES = ("on", "off")
#: N -> the least events/s ratio to the 1-query run issue 15 asks for (end to end, sharing on)
TARGETS = {100: 0.3, 1000: 0.05}
SLOW_OFF = 1000                   # sharing off from this N only with --full
BATCH = 2_000                     # events per msgpack batch (worker and cluster parts)
QUICK = {"rows": 2_000, "counts": (1, 10), "repeat": 1, "worker_counts": (1, 10)}

_T0 = time.perf_counter()


def log(msg: str):
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- queries

def _g(x: float) -> str:
    return f"{round(x, 6):g}"


def shape_query(shape: str, j: int) -> tuple:
    """The ``j``-th variant of ``shape``: ``(name suffix, text without NAME)``. Distinct ``j``
    give distinct constants."""
    if shape == "dip":                 # dip 1%..1.45%, volume factor 2, 2.25, ...
        d, v = 1 - (0.01 + 0.0005 * (j % 10)), 2.0 + 0.25 * (j // 10)
        return (f"{_g(d)}_{_g(v)}",
                f"PATTERN SEQ(Stock a, Stock b, Stock c)\n"
                f"WHERE [symbol] AND b.price < a.price * {_g(d)} AND c.price > a.price"
                f" AND c.volume >= {_g(v)} * a.volume\nWITHIN 30 seconds")
    if shape == "breakout":            # rise 1.5% upwards, one window
        r = 1 + 0.015 + 0.0005 * (j % 10) + 0.005 * (j // 10)
        return (_g(r),
                f"PATTERN SEQ(Stock a, ~Stock n, Stock b)\n"
                f"WHERE [symbol] AND b.price > a.price * {_g(r)} AND n.price < a.price\n"
                f"WITHIN 10 seconds")
    if shape == "pair":                # rise 2% upwards, windows 10 / 15 / 20 s
        w, r = (10, 15, 20)[j % 3], 1 + 0.02 + 0.002 * (j // 3)
        return (f"{_g(r)}_{w}",
                f"PATTERN SEQ(Stock a, Stock b)\n"
                f"WHERE [symbol] AND b.price > a.price * {_g(r)}\nWITHIN {w} seconds")
    if shape == "symbol":              # one symbol each, rise 1% upwards
        s, r = SYMBOLS[j % len(SYMBOLS)], 1 + 0.01 + 0.001 * (j // len(SYMBOLS))
        return (f"{s}_{_g(r)}",
                f"PATTERN SEQ(Stock a, Stock b)\n"
                f"WHERE [symbol] AND a.symbol = '{s}' AND b.price > a.price * {_g(r)}\n"
                f"WITHIN 10 seconds")
    raise ValueError(f"unknown shape {shape!r} (shapes: {', '.join(SHAPES)})")


def query_variants(n: int, shapes: tuple = SHAPES) -> list:
    """``n`` queries ``[(name, text)]``: the i-th of shape ``shapes[i % len(shapes)]``, its
    ``i // len(shapes)``-th variant. Names ``<shape>_<i>_<constants>``, unique."""
    out = []
    for i in range(n):
        shape = shapes[i % len(shapes)]
        suffix, text = shape_query(shape, i // len(shapes))
        out.append((f"{shape}_{i:04d}_{suffix}".replace(".", "p"), text))
    return out


def query_file_text(queries: list) -> str:
    """A .cep file: each query ``NAME <name>`` + text, separated by ``;``."""
    return ";\n\n".join(f"NAME {name}\n{text}" for name, text in queries) + "\n"


def write_queries(path: str, queries: list) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(query_file_text(queries))
    return path


def make_ticks(path: str, rows: int, seed: int) -> str:
    """examples/make_ticks.py ``--rows --seed --out`` (a subprocess, as a user would run it)."""
    subprocess.run([sys.executable, MAKE_TICKS, "--rows", str(rows), "--seed", str(seed),
                    "--out", path], check=True, capture_output=True, text=True, cwd=ROOT)
    return path


# --------------------------------------------------------------------------- end to end

def local_supports_no_sharing() -> bool:
    """Whether ``raycep local`` has ``--no-sharing`` (the issue-15 engine side)."""
    done = subprocess.run([sys.executable, "-m", "raycep", "local", "--help"],
                          capture_output=True, text=True, cwd=ROOT)
    return "--no-sharing" in done.stdout


def run_local(query_file: str, ticks: str, out: str, sharing: bool = True,
              key: str | None = KEY, planner: str | None = None, workers: int | None = None,
              query_stats: bool = False) -> dict:
    """One ``raycep local`` run; its JSON summary (the last stdout line). ``query_stats``:
    through benchmarks.local_paths, whose summary adds each query's stats (its path).
    ``out`` left by an earlier run is removed first, untimed: opening it for writing
    truncates it inside raycep local's timed ``seconds`` (~0.07 s for the 370 MB of 1,000
    variants, and ~0.1 s more of page reclaim while writing), an artifact of repeating runs
    into one path that a run writing a new file does not pay."""
    if os.path.isfile(out):
        os.remove(out)
    cmd = [sys.executable, "-m", "benchmarks.local_paths" if query_stats else "raycep",
           "local", "--query", query_file, "--events", ticks, "--out", out] \
        + (["--key", key] if key else []) + ([] if sharing else ["--no-sharing"]) \
        + (["--planner", planner] if planner else []) \
        + (["--workers", str(workers)] if workers else [])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} exited with status {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def run_local_cpu(query_file: str, ticks: str, out: str, idle: float = 0.0) -> dict:
    """``raycep local --workers 1``: its summary plus ``cpu`` (its CPU seconds less
    ``idle``: the same command's CPU on one row, its start-up); ``out`` removed first, as
    ``run_local`` does."""
    if os.path.isfile(out):
        os.remove(out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "raycep", "local", "--query", query_file,
                           "--events", ticks, "--out", out, "--key", "symbol", "--workers",
                           "1"], capture_output=True, text=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"raycep local exited with status {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary["cpu"] = cpu - idle
    return summary


def local_startup_cpu(query_file: str, ticks: str, out: str, tmp: str) -> float:
    """``raycep local --workers 1``'s CPU seconds on the first row of ``ticks`` alone (its
    start-up and imports; median of 3), to subtract from ``run_local_cpu``'s."""
    one = os.path.join(tmp, "one.csv")
    with open(ticks) as f, open(one, "w") as g:
        g.write(f.readline() + f.readline())
    return statistics.median(run_local_cpu(query_file, one, out)["cpu"] for _ in range(3))


def same_lines(a: str, b: str) -> bool:
    """Whether two match files hold the same lines (as multisets: compared sorted)."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return sorted(fa) == sorted(fb)


def bench_e2e(tmp: str, ticks: str, counts: tuple, repeat: int, full: bool,
              sharing_off: bool = True) -> dict:
    """Every (N, mode) cell ``repeat`` times (cells interleaved, the order reversed every other
    repetition); the best run per cell. -> ``{"rows": [...], "identical": {N: bool},
    "skipped": [(N, mode, why)]}``."""
    cells = []
    skipped = []
    for n in counts:
        write_queries(os.path.join(tmp, f"q{n}.cep"), query_variants(n))
        for mode in MODES:
            if mode == "off" and not sharing_off:
                skipped.append((n, mode, "raycep local has no --no-sharing"))
            elif mode == "off" and n >= SLOW_OFF and not full:
                skipped.append((n, mode, "slow: run with --full"))
            else:
                cells.append((n, mode))
    with open(ticks, "rb") as handle:
        events = sum(1 for _ in handle) - 1           # the header
    log(f"[e2e] warm-up run ({counts[0]} queries, not counted) ...")
    run_local(os.path.join(tmp, f"q{counts[0]}.cep"), ticks, os.path.join(tmp, "warm.jsonl"))
    best: dict = {}
    matches: dict = {}
    for rep in range(repeat):
        for n, mode in (cells if rep % 2 == 0 else list(reversed(cells))):
            log(f"[e2e] run {rep + 1}/{repeat}: {n} queries, sharing {mode} ...")
            s = run_local(os.path.join(tmp, f"q{n}.cep"), ticks,
                          os.path.join(tmp, f"m{n}_{mode}.jsonl"), sharing=mode == "on")
            log(f"[e2e]   {s['events_per_s']:,.0f} events/s, {s['matches']:,} matches, "
                f"{s['seconds']:.2f} s, groups {s.get('groups')}")
            if s.get("queries", n) != n or s["events"] != events:
                raise AssertionError(f"{n} queries, sharing {mode}: raycep local reported "
                                     f"{s.get('queries')} queries, {s['events']} events")
            matches.setdefault((n, mode), set()).add(s["matches"])
            if (n, mode) not in best or s["seconds"] < best[(n, mode)]["seconds"]:
                best[(n, mode)] = s
    for cell, found in matches.items():
        if len(found) != 1:
            raise AssertionError(f"{cell}: match counts differ between runs: {sorted(found)}")
    rows = []
    for n, mode in cells:
        s = best[(n, mode)]
        base = best.get((1, mode))
        rows.append({"queries": n, "mode": mode, "groups": s.get("groups"),
                     "reported_queries": s.get("queries"), "events": s["events"],
                     "seconds": s["seconds"], "rate": s["events_per_s"],
                     "ratio": s["events_per_s"] / base["events_per_s"] if base else None,
                     "matches": s["matches"], "peak_rss_mb": s["peak_rss_mb"]})
    identical = {}
    for n in counts:
        if (n, "on") in best and (n, "off") in best:
            identical[n] = (best[(n, "on")]["matches"] == best[(n, "off")]["matches"]
                            and same_lines(os.path.join(tmp, f"m{n}_on.jsonl"),
                                           os.path.join(tmp, f"m{n}_off.jsonl")))
    return {"rows": rows, "identical": identical, "skipped": skipped}


def targets(rows: list) -> list:
    """``[(N, target, ratio or None, "met" / "not met" / "not run")]`` of TARGETS."""
    out = []
    for n, target in sorted(TARGETS.items()):
        row = next((r for r in rows if r["queries"] == n and r["mode"] == "on"), None)
        ratio = row["ratio"] if row else None
        verdict = "not run" if ratio is None else ("met" if ratio >= target else "not met")
        out.append((n, target, ratio, verdict))
    return out


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def rows_table(rows: list, rss: bool = False) -> list:
    """The header and one line per (N, mode) row; ``rss``: with the peak RSS column."""
    lines = [f"{'N':>5} {'mode':>4} {'groups':>6} {'events/s':>10} {'ratio':>7} "
             f"{'matches':>10} {'seconds':>8}" + (f" {'peak RSS MB':>11}" if rss else "")]
    for r in rows:
        lines.append(f"{r['queries']:>5} {r['mode']:>4} {_cell(r['groups'], 'd'):>6} "
                     f"{r['rate']:>10,.0f} {_cell(r['ratio'], '.3f'):>7} {r['matches']:>10,} "
                     f"{r['seconds']:>8.3f}"
                     + (f" {_cell(r['peak_rss_mb'], '.1f'):>11}" if rss else ""))
    return lines


def e2e_table(result: dict) -> list:
    lines = rows_table(result["rows"], rss=True)
    lines.append("ratio: events/s / events/s of the 1-query set with the same mode; groups: "
                 "evaluators (the summary's \"groups\"; - when raycep local does not report it)")
    for n in sorted(result["identical"]):
        lines.append(f"N={n}: matches of sharing on and off identical: "
                     f"{'yes' if result['identical'][n] else 'no'}")
    for n, mode, why in result["skipped"]:
        lines.append(f"N={n}: sharing {mode} not run ({why})")
    for n, target, ratio, verdict in targets(result["rows"]):
        lines.append(f"target: {n} variants >= {target:g}x of 1 query, end to end, sharing on: "
                     f"{verdict}" + (f" ({ratio:.3f}x)" if ratio is not None else ""))
    return lines


# --------------------------------------------------------------------------- worker

def read_ticks(path: str) -> list:
    """The tick file as Events (``key=symbol``, explicit ids ``t<i>``), as a producer sends."""
    from raycep.cep.event import Event
    with open(path, newline="", encoding="utf-8") as handle:
        return [Event(row["type"], float(row["ts"]),
                      {"symbol": row["symbol"], "price": float(row["price"]),
                       "volume": int(row["volume"])}, key=row["symbol"], id=f"t{i}")
                for i, row in enumerate(csv.DictReader(handle))]


def bench_worker(events: list, counts: tuple, repeat: int) -> dict:
    from benchmarks.bench_cluster import encode_partitions
    batches = encode_partitions(events, 1, BATCH)[0]
    modes = MODES
    run_worker(batches[:1], query_variants(1))      # warm-up (imports, first calls): untimed
    best: dict = {}
    cells = [(n, mode) for n in counts for mode in modes]
    for rep in range(repeat):
        for n, mode in (cells if rep % 2 == 0 else list(reversed(cells))):
            log(f"[worker] run {rep + 1}/{repeat}: {n} queries, sharing {mode} ...")
            r = run_worker(batches, query_variants(n), sharing=mode == "on")
            log(f"[worker]   {len(events) / r['seconds']:,.0f} events/s, {r['matches']:,} "
                f"matches, groups {r['groups']}")
            old = best.get((n, mode))
            if old is not None and old["matches"] != r["matches"]:
                raise AssertionError(f"worker {n} queries, sharing {mode}: match counts "
                                     f"differ between runs")
            if old is None or r["seconds"] < old["seconds"]:
                best[(n, mode)] = r
    rows = []
    for n, mode in cells:
        r = best[(n, mode)]
        base = best[(1, mode)] if (1, mode) in best else None
        rows.append({"queries": n, "mode": mode, "groups": r["groups"],
                     "rate": len(events) / r["seconds"], "seconds": r["seconds"],
                     "matches": r["matches"],
                     "ratio": base["seconds"] / r["seconds"] if base else None})
    same = {n: best[(n, "on")]["matches"] == best[(n, "off")]["matches"]
            for n in counts if (n, "off") in best}
    return {"rows": rows, "same_counts": same, "batches": len(batches)}


def worker_table(result: dict) -> list:
    lines = rows_table(result["rows"])
    for n, same in sorted(result["same_counts"].items()):
        lines.append(f"N={n}: match counts of sharing on and off equal: "
                     f"{'yes' if same else 'no'}")
    return lines


# --------------------------------------------------------------------------- cluster

def bench_cluster_actors(events: list, counts: tuple) -> list:
    """The sets of ``counts`` on 2 Ray partition actors (bench_cluster.run_actors); lines."""
    import ray

    from benchmarks import bench_cluster as bc
    plan = bc.encode_partitions(events, 2, BATCH)
    sizes = [sum(bc._rows(b) for b in bs) for bs in plan]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        plan = [[ray.put(b) for b in bs] for bs in plan]
        for n in counts:
            log(f"[cluster] {n} queries on 2 actors ...")
            r = bc.run_actors(ray, plan, query_variants(n), bc.warm_events(100), 30.0)
            if sum(r["processed"]) != len(events):
                raise AssertionError(f"cluster: {sum(r['processed'])} events processed, "
                                     f"expected {len(events)}")
            rows.append((n, len(events) / r["seconds"], r["seconds"], sum(r["matches"]),
                         r["background"]))
    finally:
        ray.shutdown()
    lines = [f"split: {sizes[0]:,} / {sizes[1]:,} events (8 symbols routed by "
             f"raycep.actors.routing)",
             f"{'N':>5} {'events/s':>10} {'ratio':>7} {'matches':>10} {'seconds':>8} "
             f"{'before':>6}"]
    base = rows[0][1] if rows and rows[0][0] == 1 else None
    for n, rate, secs, found, before in rows:
        lines.append(f"{n:>5} {rate:>10,.0f} {_cell(rate / base if base else None, '.3f'):>7}"
                     f" {found:>10,} {secs:>8.3f} {before:>6.2f}")
    return lines


def expected_matches(events: list, n: int) -> int:
    """The matches of the n-query set over ``events`` (an in-process engine)."""
    from raycep.cep.runtime.engine import Engine
    eng = Engine(KEY)
    for name, text in query_variants(n):
        eng.add_query(text, name=name)
    return len(eng.process_many(events)) + len(eng.advance(math.inf))


def bench_serve(events: list, counts: tuple, timeout: float = 600.0) -> list:
    """The sets of ``counts`` through what ``raycep serve`` runs (gateway + 2 Ray partition
    actors, sharing on): queries registered with the Client, events sent with
    ``Client.send`` (HTTP, msgpack batches of BATCH), then ``advance``; timed from the first
    send until every match is stored in the gateway (readable by clients); lines."""
    from raycep.gateway.client import connect
    from raycep.gateway.runtime import RayCluster
    from raycep.gateway.server.service import GatewaySettings
    end = max(e.ts for e in events) + 3600.0
    rows = []
    for n in counts:
        want = expected_matches(events, n)
        log(f"[serve] {n} queries: starting the cluster ...")
        cluster = RayCluster(2, KEY, GatewaySettings(port=0, registry_path=None), num_cpus=2)
        url = cluster.start()
        try:
            client = connect(url)
            t = time.perf_counter()
            for name, text in query_variants(n):
                client.register(text, name=name)
            registered = time.perf_counter() - t
            log(f"[serve]   registered in {registered:.2f} s; sending {len(events):,} events "
                f"...")
            t0 = time.perf_counter()
            for i in range(0, len(events), BATCH):
                client.send(events[i:i + BATCH])
            client.advance(end)
            stored = 0
            while time.perf_counter() - t0 < timeout:
                stored = sum(q["matches"].get("total", 0) for q in client.queries())
                if stored >= want:
                    break
                time.sleep(0.05)
            seconds = time.perf_counter() - t0
        finally:
            cluster.stop()
        if stored != want:
            raise AssertionError(f"serve {n} queries: {stored} matches stored, the engine "
                                 f"finds {want}")
        log(f"[serve]   {len(events) / seconds:,.0f} events/s, {stored:,} matches")
        rows.append((n, len(events) / seconds, seconds, stored, registered))
    lines = [f"{'N':>5} {'events/s':>10} {'ratio':>7} {'matches':>10} {'seconds':>8} "
             f"{'register s':>10}"]
    base = rows[0][1] if rows and rows[0][0] == 1 else None
    for n, rate, secs, found, registered in rows:
        lines.append(f"{n:>5} {rate:>10,.0f} {_cell(rate / base if base else None, '.3f'):>7}"
                     f" {found:>10,} {secs:>8.3f} {registered:>10.2f}")
    lines.append("matches: equal to an in-process engine's count for every N (checked)")
    return lines


# --------------------------------------------------------------------------- prefixes

PREFIX_TYPES = "AAAABBBBCCCCEEEEFFFFGGGGD"      # D rare: the trigger of every query
PREFIX_CORE = "b.p < c.p AND c.p < d.p AND b.v + c.v > 9"


def prefix_queries() -> list:
    """8 queries of 4 structures ``SEQ(X x, B b, C c, D d)`` (X in A, E, F, G), each with
    one of two conditions on x: no two in one group (their conditions differ in shape, not
    only constants), all with the core ``SEQ(B b, C c, D d)`` and its conditions; D (rare) is
    every query's trigger, and the plans the planner picks for each query on its own begin
    alike for some of them (``d, c, ...`` or ``d, b, ...``)."""
    out = []
    for x in "AEFG":
        out.append((f"{x.lower()}_lt", f"PATTERN SEQ({x} x, B b, C c, D d) WHERE {PREFIX_CORE} "
                    f"AND x.p < b.p - 60 WITHIN 20 seconds"))
        out.append((f"{x.lower()}_v", f"PATTERN SEQ({x} x, B b, C c, D d) WHERE {PREFIX_CORE} "
                    f"AND x.v > c.v + 5 WITHIN 20 seconds"))
    return out


def make_prefix_events(path: str, rows: int, seed: int) -> str:
    """``rows`` events one each 0.1 s, types from PREFIX_TYPES, p uniform in [0, 100), v an
    integer 0-9 (random.Random(seed)); CSV ``type,ts,p,v``."""
    import random
    rnd = random.Random(seed)
    with open(path, "w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["type", "ts", "p", "v"])
        for i in range(rows):
            w.writerow([rnd.choice(PREFIX_TYPES), f"{i * 0.1:.1f}",
                        f"{rnd.random() * 100:.4f}", rnd.randint(0, 9)])
    return path


PREFIX_PLANNERS = (None, "tree-nfa")


def bench_prefix(tmp: str, rows: int, seed: int, repeat: int,
                 planners: tuple = PREFIX_PLANNERS) -> list:
    """``raycep local`` on prefix_queries() over make_prefix_events, sharing on and
    --no-sharing (no groups form here, so the difference is the shared plan prefixes), with
    each of ``planners`` (None: the default, adaptive DP-LD per query; ``tree-nfa``: an order
    per trigger), interleaved, best of ``repeat``; lines."""
    events = make_prefix_events(os.path.join(tmp, "prefix.csv"), rows, seed)
    qfile = write_queries(os.path.join(tmp, "prefix.cep"), prefix_queries())
    cells = [(planner, mode) for planner in planners for mode in MODES]
    best: dict = {}
    for rep in range(repeat):
        for planner, mode in (cells if rep % 2 == 0 else cells[::-1]):
            name = planner or "default"
            log(f"[prefix] run {rep + 1}/{repeat}: planner {name}, sharing {mode} ...")
            s = run_local(qfile, events, os.path.join(tmp, f"prefix_{name}_{mode}.jsonl"),
                          sharing=mode == "on", key=None, planner=planner)
            log(f"[prefix]   {s['events_per_s']:,.0f} events/s, {s['matches']:,} matches, "
                f"prefixes reused {s.get('prefixes_reused')}")
            if (planner, mode) not in best or s["seconds"] < best[(planner, mode)]["seconds"]:
                best[(planner, mode)] = s
    lines = [f"{'planner':>8} {'mode':>4} {'groups':>6} {'events/s':>10} {'matches':>8} "
             f"{'seconds':>8} {'prefixes reused':>15}"]
    verdicts = []
    for planner in planners:
        name = planner or "default"
        for mode in MODES:
            s = best[(planner, mode)]
            lines.append(f"{name:>8} {mode:>4} {s['groups']:>6} {s['events_per_s']:>10,.0f} "
                         f"{s['matches']:>8,} {s['seconds']:>8.3f} "
                         f"{s.get('prefixes_reused', 0):>15,}")
        same = same_lines(os.path.join(tmp, f"prefix_{name}_on.jsonl"),
                          os.path.join(tmp, f"prefix_{name}_off.jsonl"))
        if not same:
            raise AssertionError(f"planner {name}: shared prefixes changed the matches")
        on, off = best[(planner, "on")], best[(planner, "off")]
        verdicts.append(f"planner {name}: on / off {on['events_per_s'] / off['events_per_s']:.2f}x,"
                        f" matches of sharing on and off identical: yes")
    return lines + verdicts


# --------------------------------------------------------------------------- main

def parse_counts(text: str) -> tuple:
    counts = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"bad counts {text!r}: positive integers, e.g. 1,10")
    return counts


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=None,
                    help="ticks (default 20,000); hetero: events (default 40,000)")
    ap.add_argument("--seed", type=int, default=42,
                    help="hetero: the stream and the rules' constants; tune with seed A = "
                         f"{hr.SEED_A}, report with seed B = {hr.SEED_B}")
    ap.add_argument("--counts", type=parse_counts, default=None,
                    help="query counts end to end (default 1,10,100,1000)")
    ap.add_argument("--worker-counts", type=parse_counts, default=None,
                    help="query counts in one worker (default 1,10,100)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per cell, best kept "
                                                             "(default 3)")
    ap.add_argument("--full", action="store_true",
                    help=f"also sharing off for N >= {SLOW_OFF} end to end (slow)")
    ap.add_argument("--part", choices=("e2e", "worker", "prefix", "both", "hetero"),
                    default="both", help="both: e2e, worker and prefix; hetero: the "
                    "heterogeneous rule set (issue 35), only when named")
    ap.add_argument("--by-structure", action="store_true",
                    help="hetero: also each structure's rules as a set of their own")
    ap.add_argument("--per", type=int, default=hr.PER,
                    help=f"hetero: constants per structure (default {hr.PER}: "
                         f"{len(hr.STRUCTURES) * hr.PER} rules)")
    ap.add_argument("--cluster", action="store_true",
                    help="also 1 and 100 queries on 2 Ray partition actors")
    ap.add_argument("--quick", action="store_true",
                    help=f"tiny sizes: {QUICK['rows']:,} rows, counts 1,10, one run")
    return ap


def run(args) -> dict:
    quick = QUICK if args.quick else {}
    rows = args.rows or quick.get("rows", 20_000)
    counts = args.counts or quick.get("counts", (1, 10, 100, 1000))
    worker_counts = args.worker_counts or quick.get("worker_counts", (1, 10, 100))
    repeat = args.repeat or quick.get("repeat", 3)
    from benchmarks.bench_cluster import machine
    if args.part == "hetero":                      # its own module (benchmarks/bench_hetero.py)
        from benchmarks.bench_hetero import run_hetero
        return run_hetero(args, machine())
    print("raycep multi-query benchmark (issue 15)")
    print(f"python {platform.python_version()}; machine: {machine()}")
    print(f"ticks: examples/make_ticks.py --rows {rows} --seed {args.seed}; queries: "
          f"{len(SHAPES)} shapes ({', '.join(SHAPES)}) over Stock, [symbol], variants "
          f"differing in constants; best of {repeat} run(s) per cell")
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_multiquery_") as tmp:
        ticks = make_ticks(os.path.join(tmp, "ticks.csv"), rows, args.seed)
        log(f"wrote {rows:,} ticks to {ticks}")
        if args.part in ("e2e", "both"):
            print(f"\n=== end to end: raycep local --key symbol, N = "
                  f"{', '.join(map(str, counts))}, sharing on / --no-sharing")
            sharing_off = local_supports_no_sharing()
            if not sharing_off:
                print("raycep local has no --no-sharing: sharing on only")
            e2e = bench_e2e(tmp, ticks, counts, repeat, args.full, sharing_off)
            print("\n".join(e2e_table(e2e)))
            result["e2e"] = e2e
        if args.part in ("worker", "both") or args.cluster:
            events = read_ticks(ticks)
        if args.part in ("worker", "both"):
            print(f"\n=== one PartitionWorker in-process (no Ray): {len(events):,} events in "
                  f"batches of {BATCH:,}, ingest + advance(inf), N = "
                  f"{', '.join(map(str, worker_counts))}")
            worker = bench_worker(events, worker_counts, repeat)
            print("\n".join(worker_table(worker)))
            result["worker"] = worker
        if args.part in ("prefix", "both"):
            prefix_rows = rows if args.rows or args.quick else 20_000
            print(f"\n=== shared plan prefixes end to end: raycep local, "
                  f"{len(prefix_queries())} queries SEQ(X x, B b, C c, D d) (X in A, E, F, G; "
                  f"two conditions on x each) sharing SEQ(B b, C c, D d) WHERE {PREFIX_CORE}, "
                  f"WITHIN 20 s; {prefix_rows:,} events of types A-G (D rare), seed "
                  f"{args.seed}; sharing on / --no-sharing, best of {repeat}")
            print("\n".join(bench_prefix(tmp, prefix_rows, args.seed, repeat)))
        if args.cluster:
            cluster_counts = (1, 10) if args.quick else (1, 100)
            print(f"\n=== 2 Ray partition actors fed msgpack batches directly "
                  f"(bench_cluster.run_actors), sharing on: N = "
                  f"{', '.join(map(str, cluster_counts))}")
            print("\n".join(bench_cluster_actors(events, cluster_counts)))
            print(f"\n=== raycep serve's runtime (gateway + 2 Ray partition actors), Client "
                  f"register/send/advance, until every match is stored: N = "
                  f"{', '.join(map(str, cluster_counts))}")
            print("\n".join(bench_serve(events, cluster_counts)))
            result["cluster"] = True
    return result


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    run(args)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
