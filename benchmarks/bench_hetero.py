"""The heterogeneous rule set end to end (issue 35): ``bench_multiquery --part hetero``.

    python3 -m benchmarks.bench_multiquery --part hetero [--rows 40000] [--seed 7] [--repeat 3]
                                           [--per 20] [--by-structure] [--quick]

Workload: benchmarks/hetero_rules.py (a 6-type keyed stream, 12 rule structures x ``--per``
constants; ``--seed`` picks the stream and the constants: tune with seed A = 42, report with
seed B = 7). Every run is ``raycep local --key symbol --workers 1`` as a subprocess through
benchmarks.local_paths (the summary then holds each query's stats, its evaluation path among
them where the engine reports one; "n/a" where it does not); ``--workers 1`` so that those
stats are the one engine's and the ratio is per core. Cells, ``--repeat`` times each,
interleaved (the order reversed every other repetition), the median run kept, after one
untimed warm-up run:

* ``set``: all rules; ``<first rule> alone``: the baseline, rule 0, a keyed SEQ-2 (the bulk
  path's shape: its path and plan are printed);
* the set and its first rule alone again with raycep local's default settings (its time
  slices; ratio of those two beside the per-core one);
* ``read``: one rule over a type the stream never has: reading, the loop and writing nothing,
  subtracted to give a rule's cost per event (``us/ev``);
* each structure's first rule alone (per-rule cost), its matches alone = its matches in the
  set (checked);
* ``--by-structure``: each structure's rules as a set of their own (where the time goes);
  a run that fails is reported (an engine bug), not fatal;
* once: the set with ``--no-sharing``; its match file must hold the set's lines (sorted).

Figures: events/s and ``seconds`` of the JSON summary (reading, evaluating, writing; start-up
excluded), the ratio set / first rule (issue 35 target >= 0.2x), and the spread of the runs
(the machine is shared: medians).
"""
from __future__ import annotations

import os
import platform
import tempfile

from benchmarks import hetero_rules as hr
from benchmarks.bench_multiquery import (_cell, local_supports_no_sharing, log, run_local,
                                         same_lines, write_queries)


DEFAULT = "@default"                    # a cell run with raycep local's default settings


def _path(qstats: dict | None) -> str:
    """A query's evaluation path as the engine reports it (``stats()["paths"][q]``,
    issue 35), or "n/a" where it does not."""
    path = (qstats or {}).get("path")
    if path is None:
        return "n/a"
    if isinstance(path, dict):
        return ", ".join(f"{k} {v}" for k, v in path.items())
    return str(path)


def _us(summary: dict, rows: int, read: float) -> float:
    """Microseconds per event of a run beyond ``read`` seconds (reading and the loop)."""
    return (summary["seconds"] - read) * 1e6 / rows


def _median_run(runs: list) -> dict:
    """The run of median ``seconds`` (the lower middle one of an even count)."""
    return sorted(runs, key=lambda s: s["seconds"])[(len(runs) - 1) // 2]


def bench_hetero(tmp: str, rows: int, seed: int, repeat: int, per: int = hr.PER,
                 sharing_off: bool = True, by_structure: bool = False) -> dict:
    """``raycep local --workers 1`` (through benchmarks.local_paths: the summary names each
    query's path) on the heterogeneous set of benchmarks.hetero_rules over its stream: the
    whole set, its first rule alone, each structure's first rule alone (per-rule cost), all
    ``repeat`` times, interleaved, the median run kept; then the set once with
    ``--no-sharing``, whose match file must hold the set's lines; ``by_structure``: also
    each structure's ``per`` rules as a set of their own. -> the runs and checks."""
    events = hr.make_stream(os.path.join(tmp, "hetero.csv"), rows, seed)
    rules = hr.rule_set(seed, per)
    singles = hr.first_of_each(rules)
    files = {"set": write_queries(os.path.join(tmp, "hetero.cep"), rules)}
    for name, text in singles:
        files[name] = write_queries(os.path.join(tmp, f"{name}.cep"), [(name, text)])
    # reading the file and the loop alone: a rule over a type the stream never has
    files["read"] = write_queries(os.path.join(tmp, "read.cep"), [(
        "read_only", "PATTERN SEQ(Z a, Z b)\nWITHIN 1 seconds")])
    first = rules[0][0]

    def one(cell: str, sharing: bool = True) -> dict:
        if cell.endswith(DEFAULT):          # raycep local's default settings (time slices)
            return run_local(files[cell[:-len(DEFAULT)]], events,
                             os.path.join(tmp, f"h_{cell}.jsonl"))
        return run_local(files[cell], events, os.path.join(tmp, f"h_{cell}_{sharing}.jsonl"),
                         sharing=sharing, workers=1, query_stats=True)

    log(f"[hetero] {len(rules)} rules, {rows:,} events, seed {seed}; warm-up run ...")
    one(first)
    cells = ["set", "read", "set" + DEFAULT, first + DEFAULT] + [name for name, _ in singles]
    if by_structure:
        for sname, *_ in hr.STRUCTURES:
            files["all_" + sname] = write_queries(
                os.path.join(tmp, f"all_{sname}.cep"),
                [(q, t) for q, t in rules if q.rsplit("_", 1)[0] == sname])
            cells.append("all_" + sname)
    runs: dict = {c: [] for c in cells}
    failed: dict = {}                               # cell -> the error's last line
    for rep in range(repeat):
        for cell in (cells if rep % 2 == 0 else cells[::-1]):
            if cell in failed:
                continue
            try:
                s = one(cell)
            except RuntimeError as exc:         # a structure's own set: reported, not fatal
                if not cell.startswith("all_"):
                    raise
                failed[cell] = str(exc).strip().splitlines()[-1]
                log(f"[hetero] {cell} failed: {failed[cell]}")
                continue
            log(f"[hetero] run {rep + 1}/{repeat} {cell}: {s['events_per_s']:,.0f} events/s, "
                f"{s['matches']:,} matches")
            want = len(rules) if cell.startswith("set") else per if cell.startswith("all_") \
                else 1
            if s["events"] != rows or s["queries"] != want:
                raise AssertionError(f"{cell}: raycep local reported {s['queries']} queries, "
                                     f"{s['events']} events")
            runs[cell].append(s)
    runs = {cell: found for cell, found in runs.items() if found}
    for cell, found in runs.items():
        if len({s["matches"] for s in found}) != 1:
            raise AssertionError(f"{cell}: match counts differ between runs")
    med = {cell: _median_run(found) for cell, found in runs.items()}
    in_set = med["set"].get("query_stats", {})
    alone_vs_set = {name: (med[name]["matches"], (in_set.get(name) or {}).get("matches"))
                    for name, _ in singles}
    off = None
    if sharing_off:
        log("[hetero] the set with --no-sharing ...")
        off = one("set", sharing=False)
    identical = None if off is None else (
        off["matches"] == med["set"]["matches"]
        and same_lines(os.path.join(tmp, "h_set_True.jsonl"),
                       os.path.join(tmp, "h_set_False.jsonl")))
    spread = {cell: (max(s["seconds"] for s in found) - min(s["seconds"] for s in found))
              / med[cell]["seconds"] for cell, found in runs.items()}
    return {"rules": rules, "first": first, "med": med, "off": off, "identical": identical,
            "spread": spread, "failed": failed,
            "alone_vs_set": alone_vs_set, "rows": rows, "seed": seed, "repeat": repeat}


def hetero_table(result: dict) -> list:
    """The runs, the ratio set / first rule, per-structure cost and paths; lines."""
    med, rules, first = result["med"], result["rules"], result["first"]
    rate = {cell: s["events_per_s"] for cell, s in med.items()}
    base = med[first]
    lines = [f"{'run':>14} {'rules':>5} {'groups':>6} {'events/s':>10} {'ratio':>7} "
             f"{'matches':>8} {'seconds':>8} {'spread':>6}"]
    shown = [("set", med["set"], "set"), (first + " alone", base, first)]
    if result["off"] is not None:
        shown.append(("set, no-share", result["off"], None))
    for label, s, cell in shown:
        spread = result["spread"].get(cell) if cell else None
        lines.append(f"{label:>14} {s['queries']:>5} {s['groups']:>6} "
                     f"{s['events_per_s']:>10,.0f} {s['events_per_s'] / rate[first]:>7.3f} "
                     f"{s['matches']:>8,} {s['seconds']:>8.3f} "
                     f"{'-' if spread is None else format(spread, '.0%'):>6}")
    lines.append("seconds: the median run's (reading, evaluating, writing); spread: (slowest - "
                 "fastest) / median over the runs; no-share: one run")
    n, read = len(rules), med["read"]["seconds"]
    lines.append(f"ratio set / first rule: {rate['set'] / rate[first]:.3f}x (issue 35 target "
                 f">= 0.2x); first rule {first}: path {_path(base['query_stats'].get(first))}"
                 f", plan {base['query_stats'][first].get('plan')}")
    if "set" + DEFAULT in med:
        s, b = med["set" + DEFAULT], med[first + DEFAULT]
        lines.append(f"with raycep local's default settings (time slices, both runs): the set "
                     f"{s['events_per_s']:,.0f} events/s ({s['seconds']:.3f} s), {first} alone "
                     f"{b['events_per_s']:,.0f} ({b['seconds']:.3f} s): "
                     f"{s['events_per_s'] / b['events_per_s']:.3f}x")
    lines.append(f"reading and the loop alone (a rule over a type never seen): {read:.3f} s; "
                 f"per-rule cost beyond it (us per event): the set "
                 f"{_us(med['set'], result['rows'], read) / n:.3f} per rule ({n} rules), the "
                 f"first rule alone {_us(base, result['rows'], read):.3f}")
    if result["identical"] is not None:
        lines.append(f"matches of the set with sharing and --no-sharing identical (sorted "
                     f"lines): {'yes' if result['identical'] else 'NO (an engine bug)'}")
    lines.append("")
    lines.append("per structure: its first rule alone (per-rule cost), and the path each of "
                 "its rules took in the set")
    lines.append(f"{'structure':>13} {'events/s':>9} {'us/ev':>6} {'matches':>7} "
                 f"{'in set':>7}  path before issue 35 | reported alone | in set")
    stats = med["set"].get("query_stats", {})
    singles = {name: name for name, _ in hr.first_of_each(rules)}
    for (sname, _, _, expected), name in zip(hr.STRUCTURES, singles):
        s = med[name]
        alone, there = result["alone_vs_set"][name]
        members = [q for q, _ in rules if q.rsplit("_", 1)[0] == sname]
        paths = sorted({_path(stats.get(q)) for q in members})
        lines.append(f"{sname:>13} {s['events_per_s']:>9,.0f} "
                     f"{_us(s, result['rows'], read):>6.2f} {alone:>7,} "
                     f"{_cell(there, ','):>7}  {expected} | "
                     f"{_path(s['query_stats'].get(name))} | {len(members)} rules: "
                     f"{'; '.join(paths)}")
    lines.append("us/ev: the rule's cost per event beyond reading (its seconds alone minus the "
                 "read-only run's, per event)")
    differ = [name for name, (a, b) in result["alone_vs_set"].items() if a != b]
    lines.append("each structure's first rule: matches alone = its matches in the set: "
                 + ("yes" if not differ else f"NO for {', '.join(differ)} (an engine bug)"))
    failed = result.get("failed", {})
    if any(cell.startswith("all_") for cell in list(med) + list(failed)):
        lines += ["", f"per structure, its {n // len(singles)} rules as a set of their own "
                      f"(where the set's time goes)",
                  f"{'structure':>13} {'groups':>6} {'events/s':>9} {'us/ev':>6} "
                  f"{'per rule':>8} {'matches':>8} {'spread':>6}"]
        total = 0.0
        for sname, *_ in hr.STRUCTURES:
            if "all_" + sname in failed:
                lines.append(f"{sname:>13} failed (an engine bug): {failed['all_' + sname]}")
                continue
            s = med["all_" + sname]
            us = _us(s, result["rows"], read)
            total += us
            lines.append(f"{sname:>13} {s['groups']:>6} {s['events_per_s']:>9,.0f} {us:>6.1f} "
                         f"{us / s['queries']:>8.2f} {s['matches']:>8,} "
                         f"{result['spread']['all_' + sname]:>6.0%}")
        lines.append(f"us/ev: beyond reading; the structures' sum {total:.1f} us/ev"
                     f"{' (of those that ran)' if failed else ''} vs the "
                     f"whole set's {_us(med['set'], result['rows'], read):.1f}")
    return lines


def run_hetero(args, machine: str) -> dict:
    rows = args.rows or (4_000 if args.quick else 40_000)
    repeat = args.repeat or (1 if args.quick else 3)
    print("raycep multi-query benchmark: heterogeneous rule set (issue 35)")
    print(f"python {platform.python_version()}; machine: {machine}")
    print(f"events: benchmarks/hetero_rules.py, {rows:,} of types A-F, {hr.KEYS} symbols, seed "
          f"{args.seed}{' (seed A: tuning)' if args.seed == hr.SEED_A else ''}"
          f"{' (seed B: reporting)' if args.seed == hr.SEED_B else ''}; rules: "
          f"{len(hr.STRUCTURES)} structures x {args.per} constants; raycep local --key "
          f"symbol --workers 1; median of {repeat} run(s) per cell")
    print(f"\n=== heterogeneous set end to end: the set, its first rule alone, each "
          f"structure's first rule alone; then the set with --no-sharing")
    with tempfile.TemporaryDirectory(prefix="bench_hetero_") as tmp:
        result = bench_hetero(tmp, rows, args.seed, repeat, args.per,
                              sharing_off=local_supports_no_sharing(),
                              by_structure=args.by_structure)
    print("\n".join(hetero_table(result)))
    return {"hetero": result}
