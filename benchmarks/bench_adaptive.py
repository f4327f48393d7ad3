"""Static orders vs Tree-NFA vs adaptive planning on a stream whose rates change (Lazy Chain
Automata paper, section 8.3: "the rarest event was switched after each 100,000 incoming events").

    python3 -m benchmarks.bench_adaptive [--quick] [--phase-events N] [--phases K] [--window W]
                                         [--check-every N] [--only RUN ...]

Query: ``SEQ(A a, B b, C c) WHERE a.k = c.k AND b.k = c.k AND a.v < b.v``. The engine binds the
trigger ``c`` first and then ``a`` and ``b`` in the plan's order, so of the six static orders only
two execute differently: ``a`` before ``b`` (``cab``, ``acb``, ``abc``) or ``b`` before ``a``
(``cba``, ``bca``, ``bac``). The equality predicates with ``c`` are selective (1 / keys), so the
work per trigger is about "all buffered events of the first type" plus a few scans of the
second: binding the rare type first is cheap, binding the frequent one first is expensive. The
stream alternates phases of ``--phase-events`` events in which A, then B, is the rare type
(C, the trigger, keeps its rate).

Runs (same events, one process, cyclic GC off in the timed loops):

* the six static orders, forced with ``Engine.add_query(order=...)`` (no planner);
* Tree-NFA: ``order=None``, the engine's ad hoc order from buffer counts at every trigger;
* EFREQ: ``PlannedEngine`` planner ``EFREQ`` (static: planned once, from the statistics of the
  first ``check_every`` events; until then the engine runs Tree-NFA);
* adaptive GREEDY and adaptive DP-LD: ``PlannedEngine`` planner ``adaptive:GREEDY`` /
  ``adaptive:DP-LD`` with the default AdaptationSettings (re-plan when a statistic moved by
  more than 2x, swap only if 10% cheaper). The rate horizon is the query window: the order
  that is cheapest for a trigger depends on the events buffered in its window, so rates over
  the last window are the natural statistic (the sensitivity runs at the end vary the horizon
  and ``check_every``; a horizon much longer than the window switches late).

Per phase and overall: events/s (the time of ``process`` over the phase's events) and predicate
evaluations (the sum of the ``tested`` counters of the conjuncts). Runs that take less than
``REPEAT_BELOW`` seconds are repeated (``REPEATS`` in all) and the fastest time of each phase is
kept, since their phases last well under a second; the slow static runs are timed once.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace

from benchmarks.workloads import StreamSpec, stream
from raycep.cep import Engine, Event
from raycep.planner.local import PlannedEngine

TARGET_PHASE = 0.8        # adaptive >= 0.8x the best static order in every phase
TARGET_OVERALL = 10.0     # adaptive >= 10x the worst static order overall
REPEAT_BELOW = 6.0        # runs faster than this (s) are repeated ...
REPEATS = 3               # ... this many times in all (2 with --quick); fastest per phase counts
SENSITIVITY = ({"check_every": 250}, {"check_every": 500}, {"check_every": 2000},
               {"horizon": 0.25}, {"horizon": 3.0})   # adaptive:DP-LD variants (horizon: x W)
ADAPTIVE = ("adaptive:GREEDY", "adaptive:DP-LD")


@dataclass(frozen=True)
class Config:
    phase_events: int = 100_000
    phases: int = 4
    window: float = 20.0
    keys: int = 3000          # a.k = c.k and b.k = c.k hold with probability 1/keys
    rare: float = 1.0         # events/s of the rare type of A/B in a phase
    common: float = 300.0     # events/s of the other one
    trigger: float = 50.0     # events/s of C
    check_every: int = 1000   # PlannedEngine: events between two statistics checks
    horizon: float | None = None   # PlannedEngine: rate horizon (s); None: the window
    seed: int = 1

    @property
    def rate_horizon(self) -> float:
        return self.window if self.horizon is None else self.horizon

    @property
    def query(self) -> str:
        return ("PATTERN SEQ(A a, B b, C c) WHERE a.k = c.k AND b.k = c.k AND a.v < b.v "
                f"WITHIN {self.window:g} seconds")

    def phase_rates(self, p: int) -> dict:
        """Phase 0, 2, ...: A rare; phase 1, 3, ...: B rare."""
        a, b = (self.rare, self.common) if p % 2 == 0 else (self.common, self.rare)
        return {"A": a, "B": b, "C": self.trigger}


FULL = Config()
QUICK = Config(phase_events=12_000, window=10.0)


def make_events(cfg: Config) -> list:
    """The phases back to back, built with workloads.stream (one seed per phase), time-shifted
    so that event time runs on; ids unique; no partition key (the query has no [k])."""
    out, offset = [], 0.0
    for p in range(cfg.phases):
        spec = StreamSpec(rates=cfg.phase_rates(p), keys=cfg.keys, seed=cfg.seed + p)
        last = offset
        for e in stream(spec, cfg.phase_events):
            last = e.ts + offset
            out.append(Event(e.type, last, {"k": e.attrs["k"], "v": e.attrs["v"]},
                             id=f"p{p}{e.id}"))
        offset = last
    return out


def static_runs() -> list:
    return ["".join(p) for p in itertools.permutations("abc")]


def new_engine(cfg: Config, run: str):
    """(object with process/advance, underlying Engine)."""
    if run == "tree-nfa":
        eng = Engine()
        eng.add_query(cfg.query, name="q")
        return eng, eng
    if run == "EFREQ" or run in ADAPTIVE:
        pe = PlannedEngine(check_every=cfg.check_every, horizon=cfg.rate_horizon)
        pe.add_query(cfg.query, name="q", planner=run)
        return pe, pe.engine
    eng = Engine()
    eng.add_query(cfg.query, name="q", order=tuple(run))
    return eng, eng


def tested(engine: Engine) -> int:
    return sum(c["tested"] for c in engine.stats()["queries"]["q"]["conjuncts"])


def run_once(cfg: Config, run: str, events: list) -> dict:
    """Time each phase of one run; the match keys; plan changes (planned runs)."""
    front, eng = new_engine(cfg, run)
    process = front.process
    n = cfg.phase_events
    seconds, evals, matches = [], [], set()
    gc.disable()
    try:
        for p in range(cfg.phases):
            before = tested(eng)
            chunk = events[p * n:(p + 1) * n]
            found = []
            t0 = time.perf_counter()
            for e in chunk:
                out = process(e)
                if out:
                    found.extend(out)
            if p == cfg.phases - 1:
                found.extend(front.advance(math.inf))
            seconds.append(time.perf_counter() - t0)
            evals.append(tested(eng) - before)
            matches.update(m.key() for m in found)
    finally:
        gc.enable()
    history = getattr(front, "history", [])
    return {"run": run, "seconds": seconds, "evals": evals, "matches": matches,
            "changes": [(c.events, "".join(c.order) if c.order else "tree-nfa")
                        for c in history]}


def run_all(cfg: Config, events: list, runs: list, repeats: int = REPEATS, log=print) -> list:
    results = []
    for run in runs:
        best = run_once(cfg, run, events)
        reps = 1
        while sum(best["seconds"]) < REPEAT_BELOW and reps < repeats:
            again = run_once(cfg, run, events)
            assert again["matches"] == best["matches"] and again["evals"] == best["evals"]
            best["seconds"] = [min(x, y) for x, y in zip(best["seconds"], again["seconds"])]
            reps += 1
        best["repeats"] = reps
        results.append(best)
        log(f"  ran {run:16} {sum(best['seconds']):7.2f} s"
            f"{f' (fastest of {reps} per phase)' if reps > 1 else ''}")
    return results


def label(run: str) -> str:
    if run in ADAPTIVE or run in ("EFREQ", "tree-nfa"):
        return run
    return f"static {run}"


def fmt_evals(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k"


def report(cfg: Config, results: list, log=print) -> dict:
    n, k = cfg.phase_events, cfg.phases
    head = "".join(f"{f'phase {p + 1}':>11}" for p in range(k)) + f"{'overall':>11}"
    log(f"\nthroughput, events/s (phase p: events {n:,}(p-1) .. {n:,}p)")
    log(f"{'run':20}{head}")
    for r in results:
        cells = "".join(f"{n / s:>11,.0f}" for s in r["seconds"])
        log(f"{label(r['run']):20}{cells}{n * k / sum(r['seconds']):>11,.0f}")
    log("\npredicate evaluations (sum of the conjuncts' tested counters)")
    log(f"{'run':20}{head}")
    for r in results:
        cells = "".join(f"{fmt_evals(x):>11}" for x in r["evals"])
        log(f"{label(r['run']):20}{cells}{fmt_evals(sum(r['evals'])):>11}")
    reference = results[0]["matches"]
    same = all(r["matches"] == reference for r in results)
    log(f"\nmatches: {len(reference):,} in every run" if same else
        "\nmatches DIFFER: " + ", ".join(f"{r['run']} {len(r['matches'])}" for r in results))
    for r in results:
        if r["changes"]:
            ch = r["changes"]
            shown = ", ".join(f"{o}@{e:,}" for e, o in ch[:14]) + (" ..." if len(ch) > 14 else "")
            log(f"plan installs, {r['run']}: {len(ch)} ({shown})")
    statics = [r for r in results if r["run"] in static_runs()]
    by = {r["run"]: r for r in results}
    verdict = {"matches_equal": same, "phase": {}, "overall": {}}
    log(f"\ncomparison (targets: adaptive >= {TARGET_PHASE:g}x the best static order in every "
        f"phase, >= {TARGET_OVERALL:g}x the worst static order overall)")
    for p in range(k):
        best = min(statics, key=lambda r: r["seconds"][p])
        worst = max(statics, key=lambda r: r["seconds"][p])
        parts = []
        for name in ADAPTIVE + ("tree-nfa", "EFREQ"):
            if name in by:
                ratio = best["seconds"][p] / by[name]["seconds"][p]
                parts.append(f"{name} {ratio:.2f}x")
                if name in ADAPTIVE:
                    verdict["phase"].setdefault(name, []).append(ratio)
        log(f"  phase {p + 1} ({'A' if p % 2 == 0 else 'B'} rare): best static {best['run']} "
            f"{n / best['seconds'][p]:,.0f}/s, worst {worst['run']} "
            f"{n / worst['seconds'][p]:,.0f}/s; vs best: " + ", ".join(parts))
    total = {r["run"]: sum(r["seconds"]) for r in results}
    worst = max(statics, key=lambda r: total[r["run"]])
    best = min(statics, key=lambda r: total[r["run"]])
    log(f"  overall: best static {best['run']} {n * k / total[best['run']]:,.0f}/s, worst "
        f"static {worst['run']} {n * k / total[worst['run']]:,.0f}/s")
    for name in ADAPTIVE + ("tree-nfa", "EFREQ"):
        if name in by:
            log(f"  {name:16} overall {n * k / total[name]:>9,.0f}/s = "
                f"{total[worst['run']] / total[name]:5.1f}x the worst static, "
                f"{total[best['run']] / total[name]:4.2f}x the best static")
            verdict["overall"][name] = total[worst["run"]] / total[name]
    for name in ADAPTIVE:
        if name not in by:
            continue
        lo = min(verdict["phase"][name])
        ov = verdict["overall"][name]
        log(f"  target {name}: worst phase {lo:.2f}x best static -> "
            f"{'met' if lo >= TARGET_PHASE else 'MISSED'}; overall {ov:.1f}x worst static -> "
            f"{'met' if ov >= TARGET_OVERALL else 'MISSED'}")
    return verdict


def sensitivity(cfg: Config, events: list, results: list, log=print) -> list:
    """adaptive:DP-LD with other check_every values and rate horizons (one run each): how
    often it re-plans and what that costs."""
    statics = [r for r in results if r["run"] in static_runs()]
    worst = max((sum(r["seconds"]) for r in statics), default=None)
    n = cfg.phase_events * cfg.phases
    rows = []
    log("\nsensitivity: adaptive:DP-LD with other settings (one run each; the first line is the "
        "run above)")
    variants = [{}] + list(SENSITIVITY)
    for change in variants:
        if "horizon" in change:
            change = {"horizon": change["horizon"] * cfg.window}
        r = next((x for x in results if x["run"] == "adaptive:DP-LD"), None) \
            if not change else None
        c = replace(cfg, **change)
        if r is None:
            r = run_once(c, "adaptive:DP-LD", events)
        total = sum(r["seconds"])
        vs = f"{worst / total:5.1f}x the worst static; " if worst else ""
        same = r["matches"] == results[0]["matches"]
        log(f"  check_every {c.check_every:>5}, horizon {c.rate_horizon:>5g} s: "
            f"{n / total:>9,.0f} events/s overall = {vs}{len(r['changes'])} plan installs; "
            f"{fmt_evals(sum(r['evals']))} predicate evaluations; matches "
            f"{'equal' if same else 'DIFFER'}")
        rows.append((change, total, len(r["changes"]), same))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK.phase_events:,} events per "
                    f"phase, {QUICK.window:g} s window")
    ap.add_argument("--phase-events", type=int, help="events per phase")
    ap.add_argument("--phases", type=int, help="number of phases")
    ap.add_argument("--window", type=float, help="query window (s)")
    ap.add_argument("--check-every", type=int, help="PlannedEngine check_every (events)")
    ap.add_argument("--only", action="append", help="run only these runs (repeatable): "
                    "cab, tree-nfa, EFREQ, adaptive:DP-LD, ...")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    over = {k: v for k, v in (("phase_events", args.phase_events), ("phases", args.phases),
                              ("window", args.window),
                                              ("check_every", args.check_every)) if v is not None}
    if over:
        cfg = replace(cfg, **over)
    runs = static_runs() + ["tree-nfa", "EFREQ", *ADAPTIVE]
    if args.only:
        runs = [r for r in runs if r in args.only]
    print(f"raycep adaptive planning benchmark{' (--quick)' if args.quick else ''}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores; "
          f"one process; cyclic GC off in the timed loops")
    print(f"query : {cfg.query}")
    rates = "; ".join(f"phase {p + 1}: " + ", ".join(f"{t}={r:g}" for t, r in
                                                       cfg.phase_rates(p).items())
                      for p in range(min(2, cfg.phases)))
    print(f"stream: {cfg.phases} phases x {cfg.phase_events:,} events, rates (events/s) {rates}"
          f"{' (alternating)' if cfg.phases > 2 else ''}; k uniform over {cfg.keys:,} values,"
          f" v ~ U(0,100)")
    per_window = cfg.window * (cfg.rare + cfg.common + cfg.trigger)
    phase_s = cfg.phase_events / (cfg.rare + cfg.common + cfg.trigger)
    print(f"        one window holds ~{per_window:,.0f} events; a phase lasts ~{phase_s:,.0f} s "
          f"of event time ({phase_s / cfg.window:.0f} windows)")
    print(f"planner: PlannedEngine(check_every={cfg.check_every}, horizon={cfg.rate_horizon:g} s"
          f"{' = the window' if cfg.horizon is None else ''}), AdaptationSettings defaults "
          f"(threshold 2.0, margin 0.1, alpha 0)")
    t = time.perf_counter()
    events = make_events(cfg)
    print(f"building {len(events):,} events took {time.perf_counter() - t:.1f} s (not counted)")
    t_all = time.perf_counter()
    results = run_all(cfg, events, runs, repeats=2 if args.quick else REPEATS)
    verdict = report(cfg, results)
    if args.quick:
        print("  (--quick: a phase lasts only a few windows, so the phase transitions dominate; "
              "the targets are meant for the full run)")
    same = verdict["matches_equal"]
    if not args.only:
        same = all(row[3] for row in sensitivity(cfg, events, results)) and same
    print(f"total wall time {time.perf_counter() - t_all:.0f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
