"""``raycep local``: run queries over an events file in this process (no Ray, no Spark).

    raycep local --query examples/queries.cep --events examples/ticks.csv --key symbol \\
        --out out/matches.jsonl

Each match is one JSON line ``{"query": NAME, "events": {VAR: EVENT | [EVENT, ...]}}`` on
``--out`` (or stdout); a retraction (an optimistic query's match that a late event cancelled)
is the same line plus ``"retracted": true``. Late events (later than the lateness threshold,
never used) go to ``--late-out`` (default: stderr) as JSON lines. The last stdout line is always
a JSON summary (docs/local.md). Progress goes to stderr every ~2 s.

The engine and the loop that feeds it are ``local.run``'s (``local.match`` runs them too);
this module reads the arguments, writes the lines and the summary.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from raycep.cep.errors import CepError
from raycep.cep.io.output import MatchLines
from raycep.cep.io.sources import SUPPORTED_EXTENSIONS, iter_batch_runs
from raycep.cep.io.timestamps import FORMAT_HELP, check_format
from raycep.gateway.cli.common import (UsageError, add_disorder_arguments, disorder_settings, err,
                                load_queries, parse_params, peak_rss_mb, table)
from raycep.gateway.cli.lines import evaluate, open_output
from raycep.gateway.cli.slices import run_slices, slice_cuts
from raycep.gateway.cli.writer import BackgroundWriter
from raycep.local.queries import QuerySourceError
from raycep.local.run import (CHECK_EVERY, CHUNK_EVENTS, CHUNK_MATCHES, FIRST_PLAN_EVENTS, Chunks,
                       build_engine, evaluate as evaluate_runs, few_collections)

__all__ = ["CHECK_EVERY", "CHUNK_EVENTS", "CHUNK_MATCHES", "FIRST_PLAN_EVENTS", "Chunks",
           "add_parser", "evaluate", "run_local"]

PROGRESS_EVERY_S = 2.0
SHOW_BAD_ROWS = 10


def add_parser(commands) -> None:
    local = commands.add_parser(
        "local", help="run queries over an events file in this process",
        description="Run one or more queries over an events file in this process and write "
                    "the matches as JSON lines. The last stdout line is a JSON summary.")
    local.add_argument("--query", "-q", action="append", required=True, metavar="FILE_OR_TEXT",
                       help="a query file (queries separated by ';', optionally named with "
                            "NAME <ident>) or query text; may be given several times")
    local.add_argument("--events", "-e", required=True, metavar="FILE",
                       help=f"events file ({', '.join(SUPPORTED_EXTENSIONS)})")
    local.add_argument("--key", metavar="ATTR", default=None,
                       help="partition key attribute (e.g. symbol)")
    local.add_argument("--ts-format", default="s", metavar="UNIT",
                       help=f"how the ts column is written: {FORMAT_HELP.replace('%', '%%')} (default s; as "
                            f"raycep ingest --ts-format)")
    local.add_argument("--out", "-o", metavar="FILE", default=None,
                       help="write matches to this JSON-lines file (default: stdout)")
    local.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                       help="bind a query parameter (number, true/false or text)")
    local.add_argument("--skip-bad-rows", action="store_true",
                       help="skip malformed event rows (reported on stderr) instead of "
                            "stopping at the first one")
    local.add_argument("--planner", default="adaptive", metavar="NAME",
                       help="how plans are chosen: 'adaptive' (default: DP-LD re-planned when "
                            "the statistics drift), 'adaptive:ALGO', a static ALGO planned once "
                            "from the first statistics (TRIVIAL, EFREQ, GREEDY, II-RANDOM, "
                            "II-GREEDY, DP-LD) or 'tree-nfa' (order chosen at every trigger)")
    local.add_argument("--order", action="append", default=[], metavar="[QUERY=]VAR,VAR,...",
                       help="a forced static order of the positive variables (QUERY= is "
                            "needed when several queries are given); overrides --planner")
    local.add_argument("--check-every", type=int, default=CHECK_EVERY, metavar="N",
                       help=f"events between two looks at the statistics (default "
                            f"{CHECK_EVERY}; the first look is after "
                            f"min(N, {FIRST_PLAN_EVENTS}) events)")
    local.add_argument("--no-sharing", action="store_true",
                       help="evaluate every query on its own (default: queries that differ "
                            "only in constants are evaluated as one group)")
    local.add_argument("--workers", type=int, default=None, metavar="N",
                       help="evaluate the file in N time slices, one process each (default: "
                            "the CPUs this process may use; 1: in this process only). A CSV "
                            "without quotes or a JSON Lines file of more than 512 KiB is cut "
                            "into slices; each also reads the events within two windows "
                            "before its part and writes what is found while its own part is "
                            "read. When a slice finds the events out of time order, a copy, "
                            "a bad row, a condition that could not be evaluated or a trigger "
                            "over the cap, the file is run again in one piece")
    add_disorder_arguments(local)
    local.add_argument("--late-out", metavar="FILE", default=None,
                       help="write late events (later than the threshold, not used) to this "
                            "JSON-lines file (default: stderr)")
    local.set_defaults(func=run_local)


def run_local(args) -> int:
    """Parse the queries, stream the events through one Engine, write matches and a summary
    (``seconds``: reading, evaluating and writing; ``startup_seconds``: what came before in
    this function: imports, compiling the queries, checking the file)."""
    entered = time.perf_counter()
    # pyarrow's own memory pool keeps ~17 MB it has freed; glibc's returns it (no slower here)
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    options = engine_options(args)
    try:
        engine = new_engine(options)
    except UsageError as exc:
        err(str(exc))
        return 2

    bad = BadRows()
    parts = slice_cuts(args, engine)
    runs = iter_batch_runs(args.events, key_attr=args.key,
                           on_error=bad if args.skip_bad_rows else None, ts_unit=args.ts_format)
    if "raycep.cep.store.batch" in sys.modules:     # the reader makes column batches: evaluated in bulk
        import raycep.cep.evaluation.bulk  # noqa: F401   (loaded now, not in the timed loop)
    late_out, close_late = open_output(args.late_out) if args.late_out else (sys.stderr, False)
    # start-up objects are frozen out of the collector's passes (local.run.few_collections)
    with few_collections():
        started = time.perf_counter()
        try:
            run = _evaluate_file(args, options, engine, parts, runs, late_out, started)
        finally:                # (the collector's first pass over the unfrozen heap comes
            if close_late:      # after the writer's close, never on the writer's thread)
                late_out.close()
    seconds = time.perf_counter() - started
    bad.report()
    stats = run.engine.engine.stats()
    warnings = _report(args, run, stats)
    summary = _summary(run, stats, warnings, seconds, started - entered)
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    if run.stopped is not None:
        err(_stopped_message(run.stopped, run.events))
        return 2
    return 0


def engine_options(args) -> dict:
    """``build_engine``'s arguments from the command line, each checked first (a bad one is
    a UsageError that names its option)."""
    from raycep.planner.local import settings_for           # imported late: `raycep --help` stays cheap

    params = parse_params(args.param)
    queries = load_queries(args.query)
    orders = parse_orders(args.order, [q.name for _, q in queries])
    if args.check_every < 1:
        raise UsageError("error: --check-every must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise UsageError("error: --workers must be at least 1")
    try:
        check_format(args.ts_format)
    except CepError as exc:
        raise UsageError(f"error: --ts-format: {exc}") from None
    try:
        settings_for(args.planner)
    except CepError as exc:
        raise UsageError(f"error: --planner: {exc}") from None
    disorder = disorder_settings(args)
    return dict(key=args.key, params=params, orders=orders, planner=args.planner,
                check_every=args.check_every, sharing=not args.no_sharing, disorder=disorder,
                mode=args.disorder_mode, queries=queries)


def new_engine(options: dict):
    """A new engine of ``engine_options``; a query it cannot take is a UsageError."""
    try:
        return build_engine(**options)
    except QuerySourceError as exc:
        raise UsageError(str(exc)) from None


@dataclass
class _Run:
    """What evaluating the file gave: the engine (a new one when the slices gave up), the
    lines written (their counts per query), the events read, the bad row it stopped at
    (None: none) and the slices' result (None: evaluated in one piece)."""
    engine: object
    lines: MatchLines
    events: int
    stopped: object = None
    sliced: object = None


def _evaluate_file(args, options: dict, engine, parts, runs, late_out, started) -> _Run:
    """Evaluate the events file in time slices (``parts``, run_slices), else, or when the
    slices gave up, in one piece with a new engine, the matches written to --out."""
    lines = MatchLines()
    if parts:
        sliced = run_slices(engine, parts, args, lines,
                            Progress(started, f"slice 1 of {len(parts) - 1}: "))
        if sliced is not None:
            return _Run(engine, lines, sliced.events, None, sliced)
        engine, lines = new_engine(options), MatchLines()   # in one piece (again so)
    out = BackgroundWriter(*open_output(args.out, binary=True),
                           name=f"matches to {args.out}" if args.out else "matches to stdout")
    try:
        n_events, stopped = evaluate(engine, runs, lines, out.write, late_out,
                                     Progress(started), gather=True)
    finally:
        out.close()     # what is queued is written (stdout: flushed, kept open)
    return _Run(engine, lines, n_events, stopped)


def _report(args, run: _Run, stats: dict) -> dict:
    """Tell stderr how the run went: the slices, the plans, what was shared, the matches per
    query, out-of-order input, the queries' warnings and failed conditions; returns the
    warnings (for the summary)."""
    if run.sliced is not None:
        err(f"evaluated in {run.sliced.workers} time slices, one process each (--workers)")
    for change in run.engine.history:
        order = ",".join(change.order) if change.order else "per trigger (tree-nfa)"
        err(f"plan: query {change.query} v{change.version} after {change.events} events: "
             f"{order} ({change.algorithm}, estimated cost {change.cost:.4g})")
    _report_sharing(run.engine.engine, stats["prefixes"])
    counts, retracted = run.lines.counts, run.lines.retractions
    paths = run.sliced.paths if run.sliced is not None else stats["paths"]
    # in registration order (not the order of the first matches: that of the lines' pieces)
    names = [*run.engine.engine.managers, *counts]
    groups = {name: m.name for name, m in run.engine.engine.managers.items()}
    for name in dict.fromkeys(names):
        extra = f", {retracted[name]} retracted" if retracted.get(name) else ""
        err(f"query {name}: {counts.get(name, 0)} matches{extra}"
            f"{_path_text(paths.get(name))}")
    seconds = run.sliced.seconds if run.sliced is not None else run.engine.engine.seconds()
    table = time_table(dict.fromkeys(names), groups, paths, counts, seconds)
    if table:
        err(table)
    if stats["late_events"] or stats["out_of_order"]:
        d = stats["disorder"]
        err(f"out of order: {stats['out_of_order']} events used, {stats['late_events']} late "
             f"(not used; {'in ' + args.late_out if args.late_out else 'above'}); learnt "
             f"slack {d['slack']:g}")
    warnings = run.engine.engine.warnings() if run.sliced is None else run.sliced.warnings
    for name, found in warnings.items():
        for text in found:
            err(f"warning: query {name}: {text}")
    for name, qstats in stats["queries"].items():
        for c in qstats["conjuncts"]:
            if c["failed"]:
                err(f"warning: query {name}: condition `{c['text']}` could not be evaluated "
                     f"{c['failed']} times out of {c['tested']} (counted as false): "
                     f"{c['last_error']}")
    return warnings


#: the evaluators the time table lists (the most expensive first)
TIME_TABLE_ROWS = 20


def time_table(names, groups: dict, paths: dict, counts: dict, seconds: dict) -> str:
    """The evaluators (a query, or a group of queries evaluated as one) by their share of
    the evaluation time, the most expensive first: their queries, matches, triggers in bulk
    and one by one, and seconds (summed over the worker processes)."""
    rows: dict = {}
    for name in names:
        path = paths.get(name)
        if path is None or name not in seconds:
            continue
        key = groups.get(name, name)
        row = rows.setdefault(key, {"queries": [], "matches": 0, "path": path,
                                    "seconds": seconds[name]})
        row["queries"].append(name)
        row["matches"] += counts.get(name, 0)
    total = sum(r["seconds"] for r in rows.values())
    if not rows or total <= 0:
        return ""
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["seconds"])
    lines = []
    for key, r in ranked[:TIME_TABLE_ROWS]:
        queries = r["queries"][0] if len(r["queries"]) == 1 else \
            f"{key} ({len(r['queries'])} queries)"
        p = r["path"]
        lines.append((f"{100 * r['seconds'] / total:.1f}%", f"{r['seconds']:.3f}", queries,
                      f"{r['matches']:,}", f"{p['bulk']:,}", f"{p['per_trigger']:,}"))
    more = f" (the {TIME_TABLE_ROWS} most expensive of {len(rows)})" \
        if len(rows) > TIME_TABLE_ROWS else ""
    return f"evaluation time by query{more}:\n" + table(
        ("SHARE", "SECONDS", "QUERIES", "MATCHES", "IN BULK", "ONE BY ONE"), lines,
        right=(0, 1, 3, 4, 5), indent="  ")


def _bulk_share(paths: dict) -> float | None:
    """The share of the queries' trigger evaluations done in bulk (None: no trigger)."""
    bulk = sum(p["bulk"] for p in paths.values())
    total = bulk + sum(p["per_trigger"] for p in paths.values())
    return round(bulk / total, 3) if total else None


def _path_text(path: dict | None) -> str:
    """How a query's triggers were evaluated (Engine.paths), for its line on stderr."""
    if not path or not (path["bulk"] or path["per_trigger"]):
        return ""
    why = f": {path['why']}" if path["why"] and path["per_trigger"] else ""
    return f"; triggers: {path['bulk']} in bulk, {path['per_trigger']} one by one{why}"


def _report_sharing(core, prefixes: dict) -> None:
    """The groups of queries evaluated as one and the plan prefixes shared, on stderr."""
    shared = [g for g in core.groups() if len(g["queries"]) > 1]
    if shared:
        err(f"sharing: {len(core.managers)} queries evaluated by {len(core.evaluators)} "
             f"evaluators; groups: " + "; ".join(
                 f"{g['name']} ({len(g['queries'])} queries, constants differ in "
                 f"{', '.join(g['varying']) or 'nothing'})" for g in shared[:5])
             + (f"; ... {len(shared) - 5} more" if len(shared) > 5 else ""))
    if prefixes["reused"]:
        err(f"sharing: {prefixes['shared_prefixes']} plan prefixes shared between queries "
             f"(materialised {prefixes['materialised']} times, reused "
             f"{prefixes['reused']} times)")


def _summary(run: _Run, stats: dict, warnings: dict, seconds: float, startup: float) -> dict:
    """The JSON summary, the last stdout line (docs/local.md)."""
    core, sliced = run.engine.engine, run.sliced
    paths = sliced.paths if sliced is not None else stats["paths"]
    summary = {
        "events": run.events,
        "matches": sum(run.lines.counts.values()),
        "retractions": sum(run.lines.retractions.values()),
        "late_events": stats["late_events"],
        "duplicates": stats["duplicates"],
        "seconds": round(seconds, 3),
        "events_per_s": round(run.events / seconds, 1) if seconds > 0 else None,
        "peak_rss_mb": peak_rss_mb() if sliced is None else  # (slices: all processes)
        round(peak_rss_mb() + sliced.children_rss_mb, 1),
        "startup_seconds": round(startup, 3),
        "queries": len(core.managers),
        "groups": len(core.evaluators),
        "prefixes_reused": stats["prefixes"]["reused"],
        "bulk_share": _bulk_share(paths),
        "workers": sliced.workers if sliced is not None else 1,
    }
    if warnings:
        summary["warnings"] = warnings
    if run.stopped is not None:
        summary["stopped"] = str(run.stopped)
    return summary


def _stopped_message(stopped, events: int) -> str:
    """What stderr says when a bad row stopped the run (with a hint for dates or ms)."""
    hint = ""
    if "event time must be a number (seconds), got '" in str(stopped):
        hint = ("; event times written as dates or in ms: --ts-format iso, ms, or a "
                "pattern such as '%Y-%m-%d %H:%M:%S'")
    return (f"bad input: {stopped}; stopped there after {events} events (the matches "
            f"found up to there are written; matches still waiting for a window to close "
            f"are not); --skip-bad-rows skips such rows and goes on{hint}")


def parse_orders(values, names) -> dict:
    """``--order [QUERY=]VAR,VAR,...`` values -> {query name: (var, ...)}."""
    out = {}
    for value in values:
        query, sep, spec = value.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise UsageError("error: --order needs QUERY=VAR,... when several queries "
                                 f"are given ({', '.join(names)})")
            query = names[0]
        elif query not in names:
            raise UsageError(f"error: --order names unknown query {query!r} "
                             f"(queries: {', '.join(names)})")
        order = tuple(v.strip() for v in spec.split(",") if v.strip())
        if not order:
            raise UsageError(f"error: --order {value!r} lists no variable")
        out[query] = order
    return out


class BadRows:
    """Collects the rows skipped with --skip-bad-rows; shows the first few, counts the rest."""

    def __init__(self):
        self.count = 0

    def __call__(self, problem: IngestError) -> None:
        self.count += 1
        if self.count <= SHOW_BAD_ROWS:
            err(f"skipped bad row: {problem}")

    def report(self) -> None:
        if self.count:
            more = f" ({self.count - SHOW_BAD_ROWS} not shown)" if self.count > SHOW_BAD_ROWS \
                else ""
            err(f"skipped {self.count} bad row(s){more}")


class Progress:
    """Prints ``events, matches, events/s`` to stderr at most every PROGRESS_EVERY_S, after
    ``label`` (time slices: which slice it counts)."""

    def __init__(self, started: float, label: str = ""):
        self.started, self.label = started, label
        self.next_at = started + PROGRESS_EVERY_S

    def tick(self, events: int, counts: dict) -> None:
        """Called per chunk of events; ``counts``: matches per query."""
        now = time.perf_counter()
        if now < self.next_at:
            return
        self.next_at = now + PROGRESS_EVERY_S
        rate = events / (now - self.started)
        err(f"{self.label}{events} events, {sum(counts.values())} matches, {rate:.0f} events/s")


class _StdoutBytes:
    """Writes bytes to standard output (``sys.stdout.buffer``, or the text stream when it has
    none, e.g. under a test's capture)."""

    def write(self, data) -> None:
        """``data``: bytes or another bytes-like object (the writer's memoryview pieces)."""
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            sys.stdout.write(str(data, "utf-8"))
        else:
            buffer.write(data)

    def flush(self) -> None:
        buffer = getattr(sys.stdout, "buffer", None)
        (buffer or sys.stdout).flush()


