"""Out-of-order, late and duplicate input (issue 6): precision, recall, retractions and
detection latency of the optimistic and pessimistic modes.

    python3 -m benchmarks.bench_disorder [--quick] [--events N] [--seed S] [--slack S]

Workload: ``--events`` seeded stock ticks (``benchmarks.bench_cluster.ticks``, 8 symbols,
``key_attr="symbol"``) and four queries, all ``[symbol]``: the three of
``examples/queries.cep`` (``dip_recovery`` SEQ-3, ``rally`` skip-till-next-match Kleene,
``clean_breakout`` with a negation, 10 s) and ``no_dip_rise``, a negation over 30 s with many
matches, so that late negated events retract matches.

1. Reference: one Engine over the stream in ``(ts, id)`` order: the in-order match set.
2. Each row perturbs the arrival order: a fraction ``disorder`` of the events is delayed by a
   uniform random delay in (0, k x S] of event time (S = ``--slack``), and a fraction ``dup`` is
   sent a second time, later than the first copy by a uniform delay in (0, k x S]. Arrival
   order = sorted by arrival time. Each mode (a fresh Engine, every query in that mode) is fed
   the arrivals, then ``advance(inf)``; retractions are applied to get the final match set.
   Settings per row: ``min`` = ``DisorderSettings(min_slack=S)`` (the grid), ``adaptive`` =
   ``min_slack=0`` (the slack is learnt, warm-up loses events), ``fixed`` =
   ``min_slack=max_slack=S`` (events more than S behind the clock go to the late output).
3. Per row and mode: late events (late output), duplicates dropped, retractions, precision
   and recall of the final set vs the in-order result (``all``) and vs the in-order result over
   the stream without the events that went to the late output (``thr``, within threshold: the
   target is 1.0 / 1.0), detection latency (for each final match: the engine's clock, i.e. the
   largest event time seen, when it was last reported, minus the match's last event time;
   p50 / p99 / max in event-time seconds), wall time and arrivals/s.

Exit status 1 if the target is missed in any row or mode, a pessimistic query retracted, the
output was inconsistent (a match reported twice without a retraction in between, a retraction
of a match that was not live), or the two modes sent the same events to the late output but
ended with different match sets (which events are late may depend on the mode). Table on
stdout, progress on stderr, a JSON summary last.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, field

from benchmarks.bench_cluster import ticks
from raycep.cep.event import Event
from raycep.cep.match import Retraction
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.disorder import DisorderSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_FILE = os.path.join(ROOT, "examples", "queries.cep")
KEY = "symbol"
MODES = ("optimistic", "pessimistic")
#: a negation with many matches (the sample clean_breakout has ~1 per 25 ticks)
NO_DIP_RISE = ("PATTERN SEQ(Stock a, ~Stock n, Stock b)\n"
               "WHERE [symbol] AND n.price < a.price AND b.price > a.price * 1.005\n"
               "WITHIN 30 seconds")
NEGATION_QUERIES = ("clean_breakout", "no_dip_rise")


@dataclass(frozen=True)
class Row:
    disorder: float          # fraction of events delayed
    delay: float             # maximum delay, in multiples of the slack S
    dup: float               # fraction of events sent twice
    setting: str = "min"     # min: min_slack=S; adaptive: min_slack=0; fixed: min=max=S

    @property
    def label(self) -> str:
        if not self.disorder and not self.dup:
            return f"in order {self.setting}"
        return (f"{self.disorder:.0%} x{self.delay:g} dup {self.dup:.0%} {self.setting}")


def grid(disorders, delays, dups) -> tuple:
    return tuple(Row(d, k, p) for d in disorders for k in delays for p in dups)


FULL_ROWS = ((Row(0.0, 0.0, 0.0),)                       # no disorder: the cost of holding
             + grid((0.05, 0.10, 0.20, 0.40), (1, 2, 5), (0.0, 0.10, 0.20))
             + (Row(0.10, 2, 0.10, "adaptive"), Row(0.40, 5, 0.20, "adaptive"),
                Row(0.10, 5, 0.10, "fixed"), Row(0.40, 5, 0.20, "fixed")))
QUICK_ROWS = (Row(0.10, 1, 0.10), Row(0.40, 5, 0.20), Row(0.20, 2, 0.10, "adaptive"),
              Row(0.40, 5, 0.20, "fixed"))


@dataclass(frozen=True)
class Config:
    events: int = 20_000
    symbols: int = 8
    seed: int = 42
    slack: float = 2.0       # S, event-time seconds (windows: 10, 15, 30 s)
    rows: tuple = FULL_ROWS


QUICK = Config(events=3_000, rows=QUICK_ROWS)


@dataclass
class Run:
    """One mode fed one arrival order."""
    final: dict              # (query, match key) -> (clock when last reported, Match)
    retractions: dict        # query -> Retractions emitted
    late_ids: set            # ids that went to the late output and were never used
    late_events: int
    duplicates: int
    arrivals: int
    seconds: float           # wall
    cpu_seconds: float       # this process (the machine is shared)
    slack: float             # the engine's slack at the end
    late_last_ts: float | None   # the largest event time of a late event
    problems: list = field(default_factory=list)


_T0 = time.perf_counter()


def log(msg: str):
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- workload

def queries() -> list:
    """``[(name, Query)]``: examples/queries.cep plus no_dip_rise."""
    from raycep.cep.lang.parser import parse_query
    from raycep.gateway.cli import load_queries

    out = [(q.name, q) for _, q in load_queries([QUERY_FILE])]
    return out + [("no_dip_rise", parse_query(NO_DIP_RISE))]


def stream(cfg: Config) -> list:
    """The events in (ts, id) order."""
    return sorted(ticks(cfg.events, cfg.symbols, cfg.seed), key=lambda e: e.order)


def arrivals(events: list, row: Row, slack: float, seed: int) -> list:
    """The arrival order of ``events`` under ``row`` (a copy of an Event for a duplicate)."""
    rng = random.Random(f"{seed}:{row.disorder}:{row.delay}:{row.dup}")
    span = row.delay * slack
    out = []
    for n, e in enumerate(events):
        at = e.ts
        if rng.random() < row.disorder:
            at += span * (1.0 - rng.random())                # (0, span]
        out.append((at, n, e))
        if rng.random() < row.dup:
            again = at + span * (1.0 - rng.random()) if span else at
            out.append((again, n, Event(e.type, e.ts, dict(e.attrs), key=e.key, id=e.id)))
    out.sort(key=lambda a: a[:2])
    return [a[2] for a in out]


def settings_for(row: Row, slack: float) -> DisorderSettings:
    if row.setting == "adaptive":
        return DisorderSettings(min_slack=0.0)
    if row.setting == "fixed":
        return DisorderSettings(min_slack=slack, max_slack=slack)
    return DisorderSettings(min_slack=slack)


# --------------------------------------------------------------------------- runs

def reference(qs: list, events: list) -> dict:
    """The in-order result over ``events``: ``{(query, match key): key of its events}``."""
    eng = Engine(key_attr=KEY)
    for name, q in qs:
        eng.add_query(q, name=name)
    out = {}
    for e in events:
        for m in eng.process(e):
            out[(m.query, m.key())] = e.key
    for m in eng.advance(math.inf):
        out[(m.query, m.key())] = next(m.events()).key
    return out


def reference_without(qs: list, events: list, ref_all: dict, drop: frozenset) -> set:
    """The in-order result over ``events`` without the ids ``drop``. Every query has the
    equivalence ``[symbol]`` (checked by ``check_partitioned``), so only the symbols of the
    dropped events are evaluated again; the other symbols keep their matches of ``ref_all``."""
    if not drop:
        return set(ref_all)
    touched = {e.key for e in events if e.id in drop}
    redo = reference(qs, [e for e in events if e.key in touched and e.id not in drop])
    return {k for k, key in ref_all.items() if key not in touched} | set(redo)


def check_partitioned(qs: list):
    from raycep.cep.lang.compiler import compile_query

    for name, q in qs:
        if KEY not in compile_query(q).equivalence:
            raise SystemExit(f"query {name} has no [{KEY}] equivalence: reference_without "
                             f"would be wrong")


def feed(qs: list, arrived: list, mode: str, settings: DisorderSettings) -> Run:
    """Feed ``arrived`` to a fresh Engine with every query in ``mode``; apply retractions."""
    eng = Engine(key_attr=KEY, disorder=settings, mode=mode)
    for name, q in qs:
        eng.add_query(q, name=name, mode=mode)
    live: dict = {}
    retractions = {name: 0 for name, _ in qs}
    problems: list = []
    accepted: set = set()
    index = eng.index

    def apply(out, clock):
        for m in out:
            k = (m.query, m.key())
            if isinstance(m, Retraction):
                retractions[m.query] += 1
                if live.pop(k, None) is None and len(problems) < 20:
                    problems.append(f"{mode}: retraction of a match that is not live: "
                                    f"{m.query} {sorted(k[1])}")
            else:
                if k in live and len(problems) < 20:
                    problems.append(f"{mode}: reported twice without retraction: "
                                    f"{m.query} {sorted(k[1])}")
                live[k] = (clock, m)

    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    for e in arrived:
        before = index.inserted
        out = eng.process(e)
        if index.inserted != before:
            accepted.add(e.id)
        if out:
            apply(out, eng.clock)
    end_clock = eng.clock
    apply(eng.advance(math.inf), end_clock)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    late = eng.take_late()
    return Run(final=live, retractions=retractions,
               late_ids={x.event.id for x in late} - accepted,
               late_last_ts=max((x.event.ts for x in late), default=None),
               late_events=eng.late_events, duplicates=eng.stats()["duplicates"],
               arrivals=len(arrived), seconds=seconds, cpu_seconds=cpu, slack=eng.disorder.slack,
               problems=problems)


def precision_recall(got: set, expected: set) -> tuple:
    hit = len(got & expected)
    return (hit / len(got) if got else 1.0, hit / len(expected) if expected else 1.0)


def percentile(sorted_xs: list, p: float) -> float:
    if not sorted_xs:
        return math.nan
    return sorted_xs[min(len(sorted_xs) - 1, max(0, math.ceil(p * len(sorted_xs)) - 1))]


def measure(run: Run, ref_all: dict, ref_thr: set) -> dict:
    got = set(run.final)
    p_all, r_all = precision_recall(got, set(ref_all))
    p_thr, r_thr = precision_recall(got, ref_thr)
    lat = sorted(max(0.0, clock - m.last_ts) for clock, m in run.final.values())
    return {"late": run.late_events, "late_unused": len(run.late_ids),
            "late_last_ts": run.late_last_ts,
            "duplicates": run.duplicates, "retractions": sum(run.retractions.values()),
            "retractions_by_query": dict(run.retractions),
            "matches": len(got), "expected_all": len(ref_all), "expected_thr": len(ref_thr),
            "precision_all": p_all, "recall_all": r_all,
            "precision_thr": p_thr, "recall_thr": r_thr,
            "latency_p50": percentile(lat, 0.50), "latency_p99": percentile(lat, 0.99),
            "latency_max": lat[-1] if lat else math.nan,
            "seconds": run.seconds, "cpu_seconds": run.cpu_seconds, "arrivals": run.arrivals,
            "events_per_s": run.arrivals / run.seconds if run.seconds else math.inf,
            "events_per_cpu_s": run.arrivals / run.cpu_seconds if run.cpu_seconds else math.inf,
            "slack_end": run.slack, "problems": run.problems}


def run_row(qs: list, events: list, ref_all: dict, row: Row, cfg: Config, cache: dict) -> dict:
    """Both modes on one row: ``{mode: measure(...)}``."""
    arrived = arrivals(events, row, cfg.slack, cfg.seed)
    out, finals, drops = {}, [], []
    for mode in MODES:
        run = feed(qs, arrived, mode, settings_for(row, cfg.slack))
        drop = frozenset(run.late_ids)
        if drop not in cache:
            cache[drop] = reference_without(qs, events, ref_all, drop)
        out[mode] = measure(run, ref_all, cache[drop])
        finals.append(set(run.final))
        drops.append(drop)
    for r in out.values():
        # the final match sets of the modes are equal; they must be when both modes sent the
        # same events to the late output (which events are late may depend on the mode)
        r["modes_agree"] = all(f == finals[0] for f in finals)
        r["same_late"] = all(d == drops[0] for d in drops)
    return out


def target_met(result: dict) -> list:
    """What misses the target in one row's result (empty: met)."""
    bad = []
    for mode, r in result.items():
        if r["precision_thr"] != 1.0 or r["recall_thr"] != 1.0:
            bad.append(f"{mode}: within threshold precision {r['precision_thr']:.6f} "
                       f"recall {r['recall_thr']:.6f}")
        if r["same_late"] and not r["modes_agree"]:
            bad.append(f"{mode}: the modes lost the same events but their final sets differ")
        if mode == "pessimistic" and r["retractions"]:
            bad.append(f"pessimistic retracted {r['retractions']} matches")
        bad.extend(r["problems"])
    return bad


# --------------------------------------------------------------------------- output

HEADER = (f"{'row':<26} {'mode':<11} {'late':>5} {'dups':>5} {'retr':>5} "
          f"{'P all':>7} {'R all':>7} {'P thr':>6} {'R thr':>6} "
          f"{'lat p50':>7} {'p99':>6} {'max':>6} {'wall s':>6} {'cpu s':>6} {'ev/s':>6}")


def table_lines(results: list) -> list:
    lines = [HEADER, "-" * len(HEADER)]
    for row, result in results:
        for mode, r in result.items():
            lines.append(
                f"{row.label if mode == MODES[0] else '':<26} {mode:<11} {r['late']:>5} "
                f"{r['duplicates']:>5} {r['retractions']:>5} {r['precision_all']:>7.4f} "
                f"{r['recall_all']:>7.4f} {r['precision_thr']:>6.3f} {r['recall_thr']:>6.3f} "
                f"{r['latency_p50']:>7.2f} {r['latency_p99']:>6.2f} {r['latency_max']:>6.2f} "
                f"{r['seconds']:>6.2f} {r['cpu_seconds']:>6.2f} {r['events_per_cpu_s']:>6.0f}")
    return lines


def conclusion(results: list, misses: list) -> str:
    def total(mode, f):
        return sum(r[mode][f] for _, r in results)
    rate = {m: total(m, "arrivals") / total(m, "cpu_seconds") for m in MODES}
    p50 = {m: sorted(r[m]["latency_p50"] for _, r in results) for m in MODES}
    worst_recall = min(r[m]["recall_all"] for _, r in results for m in MODES)
    verdict = "target met" if not misses else f"TARGET MISSED ({len(misses)} problems)"
    return (f"{verdict} (precision = recall = 1.0 within the threshold, {len(results)} rows x "
            f"2 modes); optimistic: {total('optimistic', 'retractions')} retractions, median "
            f"p50 latency {percentile(p50['optimistic'], 0.5):.2f} s, "
            f"{rate['optimistic']:,.0f} arrivals per CPU s over all rows; pessimistic: "
            f"{total('pessimistic', 'retractions')} retractions, median p50 latency "
            f"{percentile(p50['pessimistic'], 0.5):.2f} s, {rate['pessimistic']:,.0f} arrivals "
            f"per CPU s; lowest recall over all events {worst_recall:.4f}")


def run_all(cfg: Config, progress=log) -> tuple:
    """``(reference size per query, [(Row, result)], misses)``."""
    qs = queries()
    check_partitioned(qs)
    events = stream(cfg)
    start, cpu = time.perf_counter(), time.process_time()
    ref_all = reference(qs, events)
    ref_seconds, ref_cpu = time.perf_counter() - start, time.process_time() - cpu
    per_query = {name: sum(1 for q, _ in ref_all if q == name) for name, _ in qs}
    progress(f"reference: {len(events)} events in order, {ref_seconds:.2f} s wall, "
             f"{ref_cpu:.2f} s CPU, matches {per_query}")
    cache: dict = {}
    results, misses = [], []
    for n, row in enumerate(cfg.rows, start=1):
        result = run_row(qs, events, ref_all, row, cfg, cache)
        results.append((row, result))
        bad = target_met(result)
        misses.extend(f"{row.label}: {b}" for b in bad)
        o, p = result["optimistic"], result["pessimistic"]
        progress(f"row {n}/{len(cfg.rows)} {row.label}: late {o['late']}, retractions "
                 f"{o['retractions']}/{p['retractions']}, thr P/R {o['precision_thr']:.3f}/"
                 f"{o['recall_thr']:.3f} {p['precision_thr']:.3f}/{p['recall_thr']:.3f}"
                 + (f"  MISSED: {bad}" if bad else ""))
    return ({"events": len(events), "span": events[-1].ts - events[0].ts,
             "seconds": ref_seconds, "cpu_seconds": ref_cpu,
             "matches": per_query}, results, misses)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3,000 events, 4 rows (for tests)")
    ap.add_argument("--events", type=int, help="stream length (default 20,000)")
    ap.add_argument("--seed", type=int, help="stream and disorder seed (default 42)")
    ap.add_argument("--slack", type=float, help="S, event-time seconds (default 2)")
    ap.add_argument("--symbols", type=int, help="symbols (default 8)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    changes = {k: v for k, v in (("events", args.events), ("seed", args.seed),
                                 ("slack", args.slack), ("symbols", args.symbols))
               if v is not None}
    if changes:
        from dataclasses import replace
        cfg = replace(cfg, **changes)
    log(f"python {platform.python_version()}, {os.cpu_count()} cores; {cfg.events} events, "
        f"{cfg.symbols} symbols, seed {cfg.seed}, S = {cfg.slack:g} s, {len(cfg.rows)} rows")
    wall = time.perf_counter()
    ref, results, misses = run_all(cfg)
    print(f"in-order reference: {ref['events']} events, matches {ref['matches']}, "
          f"{ref['events'] / ref['cpu_seconds']:,.0f} events per CPU s")
    print(f"S = {cfg.slack:g} s; late = events sent to the late output; dups = duplicates "
          f"dropped; retr = retractions; P/R all = vs the in-order result; P/R thr = vs the "
          f"in-order result without the late events; latency in event-time seconds; "
          f"ev/s = arrivals (duplicates included) per CPU second of this process")
    print("\n".join(table_lines(results)))
    negation = {q: sum(r["optimistic"]["retractions_by_query"][q] for _, r in results)
                for q in ref["matches"]}
    print(f"optimistic retractions by query (all rows): {negation}")
    agree = sum(r[MODES[0]]["modes_agree"] for _, r in results)
    same = [r[MODES[0]]["modes_agree"] for _, r in results if r[MODES[0]]["same_late"]]
    print(f"optimistic and pessimistic final match sets identical in {agree} of "
          f"{len(results)} rows; in {sum(same)} of the {len(same)} rows where both modes sent "
          f"the same events to the late output")
    warm = [r[m]["late_last_ts"] for row, r in results for m in MODES
            if row.setting != "fixed" and r[m]["late_last_ts"] is not None]
    if warm:
        print(f"late events outside the fixed-slack rows: all at event time <= {max(warm):g} s "
              f"(warm-up of the threshold; the stream spans {ref['span']:,.0f} s)")
    for m in misses:
        print(f"MISSED: {m}")
    print(conclusion(results, misses))
    import json
    print(json.dumps({
        "events": cfg.events, "symbols": cfg.symbols, "seed": cfg.seed, "slack": cfg.slack,
        "reference": ref, "target_met": not misses, "misses": misses[:50],
        "total_seconds": round(time.perf_counter() - wall, 1),
        "rows": [{"disorder": row.disorder, "delay": row.delay, "dup": row.dup,
                  "setting": row.setting,
                  **{mode: {k: (round(v, 6) if isinstance(v, float) else v)
                            for k, v in r.items() if k != "problems"}
                     for mode, r in result.items()}}
                 for row, result in results]}))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
