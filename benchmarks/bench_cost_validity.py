"""Does the cost model rank plans as the engine runs them? (VLDB 2018, Figure 6: plan cost
against measured performance.)

    python3 -m benchmarks.bench_cost_validity [--quick]

Plans: every distinct executed order of a few queries (SEQ of 3 and 4 variables, AND of 3,
a nested SEQ/AND) under several rate settings: for a SEQ, orders that differ only in where the
trigger (its last variable) stands run the same join and have the same executed cost, so only
the orders that start with the trigger are taken; for AND every permutation is distinct.

For each (query, rates) one stream is generated with exactly those rates (benchmarks.workloads:
Poisson arrivals; ``v`` uniform in [0, 100), ``k`` uniform over ``KEYS`` values), so the
selectivities are known: ``x.v < y.v`` 0.5 and ``x.k = y.k`` 1/keys (``KEYS``, or 1000 for
``seq3-sel``, the very selective shape of benchmarks.bench_adaptive). The estimated cost is
``planner.plan.order_cost(cq, {"rates", "selectivities"}, order)`` (executed model, alpha 0),
the expected work per window. Measured, per window of event time (stream duration / W):

* time: seconds of ``Engine.process`` over the stream with ``order=`` forced (fastest of
  ``REPEATS`` runs); net time: the same minus the time the engine takes for the same stream
  with a query that never triggers (index inserts and dispatch, which no order changes);
* predicate evaluations: the sum of the conjuncts' ``tested`` counters.

The Spearman rank correlation (average ranks for ties; implemented here) between the estimated
cost and each measure is printed over all plans, and averaged within each (query, rates) group
(where the planner actually has to choose), with the share of concordant plan pairs within the
groups. For comparison the same figures are given for a diagnostic model that is not the
planner's (``examined_candidates``: the candidates the evaluator scans).
"""
from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks.workloads import StreamSpec, stream
from raycep.cep import Engine, Event
from raycep.cep.lang.compiler import compile_query
from raycep.cep.lang.parser import parse_query
from raycep.planner.cost import seq_probability, window_count
from raycep.planner.plan import order_cost
from raycep.planner.problem import problem_from_query

KEYS = 10                 # x.k = y.k holds with probability 1 / KEYS
WINDOW = 5.0
REPEATS = 3               # runs per plan; the fastest counts (1 when a run is slow)
SLOW = 1.0


@dataclass(frozen=True)
class Case:
    name: str
    pattern: str
    preds: tuple              # (x, op, y): "x.v < y.v" or "x.k = y.k"
    rates: tuple              # several rate settings: dicts type -> events/s
    keys: int = KEYS          # values of k: x.k = y.k holds with probability 1 / keys

    def text(self) -> str:
        where = " AND ".join(f"{x}.{'v' if op == '<' else 'k'} {op} {y}.{'v' if op == '<' else 'k'}"
                             for x, op, y in self.preds)
        return f"PATTERN {self.pattern} WHERE {where} WITHIN {WINDOW:g} seconds"


CASES = (
    Case("seq3", "SEQ(A a, B b, C c)", (("a", "<", "b"), ("b", "=", "c")),
         ({"A": 20, "B": 5, "C": 2}, {"A": 2, "B": 20, "C": 5}, {"A": 5, "B": 2, "C": 20})),
    Case("seq4", "SEQ(A a, B b, C c, D d)", (("a", "=", "b"), ("b", "<", "c"), ("c", "=", "d")),
         ({"A": 10, "B": 2, "C": 10, "D": 3}, {"A": 2, "B": 10, "C": 3, "D": 6},
          {"A": 6, "B": 6, "C": 1, "D": 4})),
    Case("and3", "AND(A a, B b, C c)", (("a", "=", "b"), ("b", "<", "c")),
         ({"A": 8, "B": 2, "C": 1}, {"A": 1, "B": 4, "C": 8})),
    Case("nested", "SEQ(A a, AND(B b, C c), D d)", (("a", "<", "b"), ("c", "=", "d")),
         ({"A": 6, "B": 2, "C": 8, "D": 3},)),
    # the shape of benchmarks.bench_adaptive: very selective predicates with the trigger
    Case("seq3-sel", "SEQ(A a, B b, C c)", (("a", "=", "c"), ("b", "=", "c"), ("a", "<", "b")),
         ({"A": 2, "B": 60, "C": 10}, {"A": 60, "B": 2, "C": 10}), keys=1000),
)


def executed_orders(cq) -> list:
    """Distinct executed orders: for a query whose branches all have one trigger ``t`` (SEQ),
    ``t`` first and the others permuted; otherwise every permutation."""
    names = cq.positive_names
    triggers = {t for b in cq.branches for t in b.triggers}
    if len(triggers) == 1:
        (t,) = triggers
        rest = [n for n in names if n != t]
        return [(t, *p) for p in itertools.permutations(rest)]
    return list(itertools.permutations(names))


def make_stream(rates: dict, duration: float, seed: int, keys: int = KEYS) -> list:
    spec = StreamSpec(rates=dict(rates), keys=keys, seed=seed)
    n = int(spec.rate * duration)
    return [Event(e.type, e.ts, e.attrs, id=e.id) for e in stream(spec, n)]


def run(text: str, order, events: list) -> tuple:
    """(seconds, predicate evaluations, match keys) of one run with a forced order."""
    eng = Engine()
    eng.add_query(text, name="q", order=order)
    process = eng.process
    found = []
    gc.disable()
    try:
        t = time.perf_counter()
        for e in events:
            out = process(e)
            if out:
                found.extend(out)
        found.extend(eng.advance(math.inf))
        seconds = time.perf_counter() - t
    finally:
        gc.enable()
    evals = sum(c["tested"] for c in eng.stats()["queries"]["q"]["conjuncts"])
    return seconds, evals, {m.key() for m in found}


def best_run(text, order, events) -> tuple:
    best = run(text, order, events)
    for _ in range(REPEATS - 1):
        if best[0] > SLOW:
            break
        again = run(text, order, events)
        best = (min(best[0], again[0]), best[1], best[2])
    return best


def examined_candidates(problem, order) -> float:
    """Diagnostic, not the planner's model: candidates the lazy evaluator examines per window.

    For each trigger ``t`` the engine binds ``(t,) + rest`` and, at step ``k``, scans every
    buffered event of ``v_k`` in the time range left by the variables already bound, for each
    partial match over ``S_{k-1}``: ``PM(S_{k-1}) * w_k * P_seq(S_k) / P_seq(S_{k-1})``. The
    step's own predicates do not reduce this work (they decide which candidates survive), while
    Cost_ord counts ``PM(S_k)``, after them. Pairwise predicates only (all the cases here).
    """
    total = 0.0
    for br in problem.branches:
        for t in br.triggers:
            run = (t,) + tuple(n for n in order if n != t and n in br.index)
            mask, bound, pm, prev = 0, [], 1.0, 1.0
            for k, name in enumerate(run):
                v = br.index[name]
                w = window_count(br.rates[v], br.kleene[v], problem.window)
                mask |= 1 << v
                seq = seq_probability(br.pred_masks, mask)
                cands = pm * w * seq / prev
                if k:
                    total += cands
                f = br.sel[v][v]
                for u in bound:
                    f *= br.sel[v][u]
                pm, prev = cands * f, seq
                bound.append(v)
    return total


def ranks(xs: list) -> list:
    """1-based ranks, ties get the average of their positions."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(x: list, y: list) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else float("nan")


def spearman(x: list, y: list) -> float:
    """Spearman's rank correlation: Pearson's correlation of the (average) ranks."""
    return pearson(ranks(x), ranks(y))


def collect(windows: float, cases=CASES, log=print) -> list:
    """Run every plan of ``cases`` on streams of ``windows`` windows; one row per plan."""
    duration = windows * WINDOW
    rows = []
    log(f"\n{'plan':34}{'est. cost':>12}{'ms/window':>11}{'net ms/w':>10}{'evals/window':>14}"
        f"{'matches':>9}")
    for ci, case in enumerate(cases):
        text = case.text()
        cq = compile_query(parse_query(text))
        sels = {i: 0.5 if "<" in c.text else 1.0 / case.keys for i, c in enumerate(cq.conjuncts)}
        log(f"-- {case.name}: {text}")
        for ri, rates in enumerate(case.rates):
            events = make_stream(rates, duration, seed=100 * ci + ri + 1, keys=case.keys)
            base = min(run(f"PATTERN SEQ(A a, Z z) WITHIN {WINDOW:g} seconds", None, events)[0]
                       for _ in range(REPEATS))
            stats = {"rates": dict(rates), "selectivities": sels}
            problem = problem_from_query(cq, dict(rates), sels)
            reference = None
            for order in executed_orders(cq):
                seconds, evals, keys = best_run(text, order, events)
                if reference is None:
                    reference = keys
                row = {"case": case.name, "group": (ci, ri), "order": "".join(order),
                       "cost": order_cost(cq, stats, order),
                       "scan": examined_candidates(problem, order),
                       "time": seconds / windows, "net": max(seconds - base, 0.0) / windows,
                       "evals": evals / windows, "matches": len(keys),
                       "same": keys == reference}
                rows.append(row)
                label = f"{case.name} {':'.join(f'{r:g}' for r in rates.values())} {row['order']}"
                log(f"{label:34}{row['cost']:>12.4g}{row['time'] * 1e3:>11.2f}"
                    f"{row['net'] * 1e3:>10.2f}{row['evals']:>14,.0f}{len(keys):>9,}"
                    f"{'' if row['same'] else '  MATCHES DIFFER'}")
    return rows


def correlations(rows: list, model: str, measure: str) -> tuple:
    """(rho over all plans, mean rho within settings with > 2 orders, min of those)."""
    overall = spearman([r[model] for r in rows], [r[measure] for r in rows])
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    within = [spearman([r[model] for r in g], [r[measure] for r in g])
              for g in groups.values() if len(g) > 2]
    return overall, statistics.mean(within), min(within)


def concordance(rows: list, model: str, measure: str) -> tuple:
    """(concordant pairs, pairs) of plans of one setting: ordered alike by the model and the
    measure; a tie in the model counts one half."""
    good, total = 0.0, 0
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["group"] != b["group"]:
                continue
            total += 1
            dm, dx = a[model] - b[model], a[measure] - b[measure]
            good += 0.5 if dm == 0 else 1.0 if (dm > 0) == (dx > 0) else 0.0
    return good, total


def report(rows: list, log=print) -> dict:
    groups = len({r["group"] for r in rows})
    multi = sum(1 for g in {r["group"] for r in rows}
                if sum(1 for r in rows if r["group"] == g) > 2)
    log(f"\n{len(rows)} plans over {groups} query/rate settings. Spearman rank correlation: "
        f"over all plans / mean within the {multi} settings with > 2 orders / lowest of those")
    measures = (("time", "time/window"), ("net", "net time/window"), ("evals", "evaluations"))
    log(f"{'model':34}" + "".join(f"{m:>26}" for _, m in measures))
    out = {}
    for model, name in (("cost", "order_cost (planner, Cost_ord)"),
                        ("scan", "examined candidates (diagnostic)")):
        cells = []
        for key, _ in measures:
            c = correlations(rows, model, key)
            out[(model, key)] = c
            cells.append(f"{c[0]:+.3f} / {c[1]:+.3f} / {c[2]:+.3f}")
        log(f"{name:34}" + "".join(f"{c:>26}" for c in cells))
    for model, name in (("cost", "order_cost"), ("scan", "examined candidates")):
        cells = []
        for key in ("time", "evals"):
            good, total = concordance(rows, model, key)
            cells.append(f"{key} {good:g}/{total} ({good / total:.0%})")
        log(f"concordant pairs within settings, {name}: " + ", ".join(cells))
    lc = [math.log(r["cost"]) for r in rows]
    le = [math.log(max(r["evals"], 1e-9)) for r in rows]
    log(f"Pearson correlation of log(cost) and log(evaluations): {pearson(lc, le):+.3f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short streams")
    ap.add_argument("--windows", type=float, help="stream length in windows (default 100; 8 "
                    "with --quick)")
    args = ap.parse_args(argv)
    windows = args.windows or (8.0 if args.quick else 100.0)
    print(f"raycep cost-model validity benchmark{' (--quick)' if args.quick else ''}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores; "
          f"one process; cyclic GC off in the timed loops")
    print(f"streams: {windows * WINDOW:g} s of event time ({windows:g} windows of {WINDOW:g} s) "
          f"per rate setting; k uniform over {KEYS} values (x.k = y.k: selectivity "
          f"{1 / KEYS:g}; seq3-sel: 1000 values), v ~ U(0,100) (x.v < y.v: 0.5)")
    t_all = time.perf_counter()
    rows = collect(windows)
    report(rows)
    ok = all(r["same"] for r in rows)
    print(f"matches: {'equal across the orders of every setting' if ok else 'DIFFER'}")
    print(f"total wall time {time.perf_counter() - t_all:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
