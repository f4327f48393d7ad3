"""The cluster commands of the ``raycep`` CLI: ``demo``, ``serve``, ``query add|rm|ls``,
``matches``, ``late``, ``advance`` and ``ingest`` (``raycep local`` lives in gateway.cli)."""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from cep.errors import CepError, IngestError, UnavailableError

DEFAULT_GATEWAY = "http://127.0.0.1:8470"


def _err(msg: str):
    print(msg, file=sys.stderr, flush=True)


def add_cluster_commands(commands, usage_error):
    """Register the subcommands on the argparse ``commands`` group."""
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

    serve = commands.add_parser(
        "serve", help="start the partition actors, planner and gateway, and block",
        description="Start (or join, with --address) Ray, create the partition actors, the "
                    "planner and the gateway, print the gateway URL and serve until Ctrl-C.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address the gateway listens on (default 127.0.0.1; 0.0.0.0 "
                            "for every interface)")
    serve.add_argument("--port", type=int, default=8470,
                       help="the gateway's HTTP port (default 8470; 0: any free port, printed)")
    serve.add_argument("--partitions", type=int, default=2, metavar="N",
                       help="partition actors, each holding the events of its keys and "
                            "evaluating the keyed queries on them (default 2)")
    serve.add_argument("--key", default=None, metavar="ATTR",
                       help="the partition key attribute (queries with [ATTR] run per key "
                            "on every partition actor; others on the global actor)")
    serve.add_argument("--token", default=os.environ.get("RAYCEP_TOKEN"),
                       help="require 'Authorization: Bearer TOKEN' (default $RAYCEP_TOKEN)")
    serve.add_argument("--registry", default=None, metavar="FILE",
                       help="the persisted query registry (default $RAYCEP_REGISTRY, else "
                            "$XDG_STATE_HOME/raycep/registry.sqlite, i.e. "
                            "~/.local/state/raycep/registry.sqlite: the same whatever "
                            "directory raycep serve starts in)")
    serve.add_argument("--matches-jsonl", default=None, metavar="FILE",
                       help="also append every match to this JSON-lines file")
    serve.add_argument("--match-capacity", type=int, default=10_000, metavar="N",
                       help="matches kept per query for readers (oldest dropped beyond)")
    serve.add_argument("--outbox-capacity", type=int, default=100_000, metavar="N",
                       help="undelivered matches a partition actor holds before it refuses "
                            "new batches until the gateway has drained it (backpressure)")
    serve.add_argument("--address", default=None,
                       help="an existing Ray cluster ('auto' inside one); default: start a "
                            "local Ray")
    # defaults None: GatewaySettings has them (not imported here: every `raycep` command
    # builds this parser, and gateway.service pulls in asyncio and the actors)
    serve.add_argument("--max-body-bytes", type=int, default=None, metavar="N",
                       help="the largest request body; larger ones get 413 (default 16 MiB)")
    serve.add_argument("--max-depth", type=int, default=None, metavar="N",
                       help="the deepest nesting of arrays/maps in a request body "
                            "(default 32)")
    serve.add_argument("--max-window", type=float, default=None, metavar="SECONDS",
                       help="the largest query window (WITHIN) a registration may ask for "
                            "(default 604800: 7 days)")
    serve.add_argument("--max-advance-ahead", type=float, default=None, metavar="SECONDS",
                       help="how far past the latest event time seen `advance` may move the "
                            "watermark without --force (default 86400: 1 day)")
    from gateway.cli import add_disorder_arguments
    add_disorder_arguments(serve)
    serve.set_defaults(func=run_serve)

    query = commands.add_parser("query", help="add, remove or list queries on a gateway")
    qcmd = query.add_subparsers(dest="query_command", metavar="ACTION", required=True)
    add = qcmd.add_parser("add", help="register the queries of a file or a text")
    add.add_argument("query", metavar="FILE_OR_TEXT")
    add.add_argument("--name", default=None, help="the id of a single query")
    add.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    add.add_argument("--disorder-mode", choices=("optimistic", "pessimistic"), default=None,
                     help="out-of-order handling of these queries (default: the cluster's)")
    rm = qcmd.add_parser("rm", help="remove queries by id")
    rm.add_argument("ids", nargs="+", metavar="ID")
    ls = qcmd.add_parser("ls", help="list queries with status, plan and counts")
    ls.add_argument("--json", action="store_true")
    matches = commands.add_parser("matches", help="print the matches of a query (JSON lines)")
    matches.add_argument("id", metavar="QUERY")
    matches.add_argument("--since", type=int, default=0, metavar="CURSOR")
    matches.add_argument("--limit", type=int, default=1000)
    matches.add_argument("--follow", "-f", action="store_true",
                         help="keep printing new matches (Server-Sent Events)")
    late = commands.add_parser(
        "late", help="print the late events (later than the lateness threshold; JSON lines)")
    late.add_argument("--since", type=int, default=0, metavar="CURSOR")
    late.add_argument("--limit", type=int, default=1000)
    advance = commands.add_parser(
        "advance", help="promise that no event with ts <= WATERMARK will come",
        description="Move the cluster's watermark to WATERMARK (event time, seconds): matches "
                    "deferred by a trailing negation are released, and a later event with ts "
                    "<= WATERMARK is late. The gateway refuses a watermark more than its "
                    "--max-advance-ahead past the latest event time seen, unless --force.")
    advance.add_argument("watermark", metavar="WATERMARK", type=_finite_float)
    advance.add_argument("--force", action="store_true",
                         help="advance even beyond the gateway's --max-advance-ahead bound")
    ingest = commands.add_parser(
        "ingest", help="ingest files into a running cluster with Spark (RayDP on Ray)",
        description="Read CSV / JSON-lines / Parquet files with PySpark, map rows to events, "
                    "partition them by the cluster's routing hash, sort each partition by "
                    "event time and push msgpack batches to the partition actors. Rows that "
                    "cannot become events go to the dead-letter directory with their reason. "
                    "With --stream, watch a directory and ingest every file dropped there.")
    ingest.add_argument("paths", nargs="+", metavar="PATH",
                        help="input files (or, with --stream, one directory)")
    ingest.add_argument("--format", choices=("csv", "json", "parquet"), default=None,
                        help="input format (default: from the file extension)")
    ingest.add_argument("--type-column", default="type", metavar="COL")
    ingest.add_argument("--type", dest="type_constant", default=None, metavar="TYPE",
                        help="one event type for every row (instead of --type-column)")
    ingest.add_argument("--ts-column", default="ts", metavar="COL")
    ingest.add_argument("--ts-format", default="s", metavar="UNIT",
                        help="s, ms, us, ns (numbers), iso, or a strftime pattern (default s)")
    ingest.add_argument("--key", default=None, metavar="COL",
                        help="partition key column (default: the gateway's key attribute)")
    ingest.add_argument("--id-column", default=None, metavar="COL")
    ingest.add_argument("--attributes", default=None, metavar="COL,COL",
                        help="attribute columns (default: every other column)")
    ingest.add_argument("--batch-size", type=int, default=10_000, metavar="N")  # IngestSettings
    ingest.add_argument("--max-in-flight", type=int, default=4, metavar="N",
                        help="unacknowledged batches per Spark partition (default 4)")
    ingest.add_argument("--dead-letters", default="raycep-dead-letters", metavar="DIR")
    ingest.add_argument("--stream", action="store_true",
                        help="structured streaming over the directory PATH until Ctrl-C")
    ingest.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="streaming checkpoint (which files were ingested)")
    ingest.add_argument("--spark-master", default=None, metavar="URL",
                        help="an existing Spark master (default: Spark on Ray via RayDP)")
    ingest.add_argument("--ray-address", default="auto",
                        help="the Ray cluster of the raycep actors (default: auto)")
    ingest.add_argument("--executors", type=int, default=1, metavar="N")
    ingest.add_argument("--executor-cores", type=int, default=1, metavar="N",
                        help="cores of the Spark executor (default 1: one task reads and "
                             "then feeds every actor at once; with N cores the actors are "
                             "spread over N push tasks). RayDP waits until Ray has the CPUs "
                             "free")
    ingest.add_argument("--executor-memory", default="1GB")
    ingest.add_argument("--verbose", "-v", action="store_true",
                        help="show Spark's, Hadoop's and Ray's own logs on stderr (default: "
                             "they go to a log file named when the job fails)")
    ingest.set_defaults(func=run_ingest)
    for p in (add, rm, ls, matches, late, advance, ingest):
        p.add_argument("--gateway", default=os.environ.get("RAYCEP_GATEWAY", DEFAULT_GATEWAY),
                       help="gateway URL (default $RAYCEP_GATEWAY or %(default)s)")
        p.add_argument("--token", default=os.environ.get("RAYCEP_TOKEN"))
    for p in (add, rm, ls):
        p.set_defaults(func=run_query)
    matches.set_defaults(func=run_matches)
    late.set_defaults(func=run_late)
    advance.set_defaults(func=run_advance)


def _finite_float(text: str) -> float:
    """argparse type of a watermark: a finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# --------------------------------------------------------------------------- ingest

def run_ingest(args) -> int:
    """``raycep ingest``: stdout gets only the JSON summary; stderr one progress line (phase,
    elapsed seconds, events at the actors, events/s) from start-up to the end, rewritten in
    place on a terminal. Spark's, Hadoop's and Ray's logs go to a log file unless
    ``--verbose``."""
    import ray

    from actors.producer import NAMESPACE
    from actors.routing import RoutingTable
    from spark_ingest.job import IngestSettings, run_job, run_stream
    from spark_ingest.mapping import EventMapping
    from spark_ingest.session import jvm_output, start_spark, stop_spark

    status = StatusLine(in_place=not args.verbose)
    log = None
    if not args.verbose:
        _quiet_libraries()
        log = os.path.join(tempfile.gettempdir(), f"raycep-ingest-{os.getpid()}.log")
    client = _client(args)
    routing = RoutingTable.from_dict(client.routing())
    fmt = args.format or _format_of(args.paths[0])
    mapping = EventMapping(
        type_column=None if args.type_constant else args.type_column,
        type_constant=args.type_constant, ts_column=args.ts_column, ts_unit=args.ts_format,
        key_column=args.key or routing.key_attr, id_column=args.id_column,
        attributes=tuple(args.attributes.split(",")) if args.attributes else None)
    settings = IngestSettings(batch_size=args.batch_size, max_in_flight=args.max_in_flight,
                              dead_letters=args.dead_letters, ray_address=args.ray_address)
    if args.stream and (len(args.paths) != 1 or not os.path.isdir(args.paths[0])):
        _err("error: --stream needs exactly one directory")
        return 2
    for path in args.paths:
        if not os.path.exists(path):
            _err(f"error: {path} not found")
            return 2
    t0 = time.monotonic()
    status.tick(lambda: f"[ingest] starting Spark: {time.monotonic() - t0:.0f} s")
    try:
        if not ray.is_initialized():
            # a namespace of its own: RayDP names its master actor in the driver's
            # namespace, so two ingest jobs on one Ray must not share one (the actors are
            # looked up by name in the raycep namespace explicitly)
            with jvm_output(log):
                ray.init(address=args.ray_address,
                         namespace=f"{NAMESPACE}-ingest-{os.getpid()}",
                         log_to_driver=False, configure_logging=False)
        spark = start_spark(args.spark_master, executors=args.executors,
                            cores=args.executor_cores, memory=args.executor_memory, log=log,
                            level="warn" if args.verbose else "error")
    except BaseException:
        status.close()
        if log:
            _err(f"[ingest] Spark did not start; its log: {log}")
        raise
    startup = time.monotonic() - t0
    status.show(f"[ingest] Spark ready in {startup:.1f} s "
                f"({args.spark_master or 'RayDP on Ray'}); {routing.partitions} partition "
                f"actors, key {mapping.key_column!r}")
    try:
        if args.stream:
            query = run_stream(spark, args.paths[0], fmt, mapping,
                               lambda: RoutingTable.from_dict(client.routing()), settings,
                               checkpoint=args.checkpoint,
                               report=lambda line: status.show(line, keep=True))
            status.show(f"[ingest] watching {args.paths[0]}; drop files there; Ctrl-C stops",
                        keep=True)
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            status.close()
            return 0
        try:
            result = run_job(spark, args.paths, fmt, mapping, routing, settings,
                             report=status.show, every=1.0 if status.in_place else 2.0)
        except BaseException:
            status.close()
            if log:
                _err(f"[ingest] the job failed; Spark's log: {log}")
            raise
    finally:
        stop_spark(spark, args.spark_master)
    wall = time.monotonic() - t0
    result["spark_startup_seconds"] = round(startup, 3)
    result["wall_seconds"] = round(wall, 3)
    status.show(f"[ingest] done: {result['rows']:,} rows, {result['events_sent']:,} events "
                f"sent in {result['seconds']:.1f} s after Spark start-up "
                f"({result['events_per_s']:,} events/s), {result['dead_letters']:,} dead "
                f"letters; {wall:.1f} s in all with Spark start-up {startup:.1f} s", keep=True)
    status.close()
    if result["dead_letters"]:
        _err(f"[ingest] {result['dead_letters']} rows could not become events; reasons in "
             f"{result['dead_letter_dir']} (first: {result['dead_letter_sample'][0]})")
    print(json.dumps(result), flush=True)
    return 0


def _quiet_libraries():
    """Ray's and py4j's Python loggers and library warnings off; Ray's C++ core logs only
    errors (its processes read RAY_BACKEND_LOG_LEVEL when they start)."""
    import logging
    import warnings
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    for name in ("ray", "py4j", "pyspark", "raydp"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


class StatusLine:
    """One progress line on stderr. On a terminal (``in_place``) each ``show`` rewrites it
    (``keep=True`` leaves the current text as a line of its own first); elsewhere each
    ``show`` is a line. Writes to a duplicate of stderr's file descriptor, so it stays
    visible while Spark's JVM starts with fd 2 pointing at its log file."""

    def __init__(self, in_place: bool = True):
        try:
            self.stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        except (AttributeError, OSError, ValueError):       # no real file (captured)
            self.stream = sys.stderr
        self.in_place = in_place and self.stream.isatty()
        self._shown = False
        self._lock = threading.Lock()
        self._ticker = None

    def show(self, text: str, keep: bool = False):
        self._stop_ticker()
        with self._lock:
            if self.in_place:
                self.stream.write("\r\x1b[K" + text + ("\n" if keep else ""))
                self._shown = not keep
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def tick(self, text, every: float = 1.0):
        """Show ``text()`` now and every ``every`` seconds (terminal) until the next show;
        elsewhere once."""
        self.show(text())
        if not self.in_place:
            return
        stop = threading.Event()

        def run():
            while not stop.wait(every):
                with self._lock:
                    self.stream.write("\r\x1b[K" + text())
                    self.stream.flush()
        self._ticker = (stop, threading.Thread(target=run, daemon=True))
        self._ticker[1].start()

    def _stop_ticker(self):
        if self._ticker:
            stop, thread = self._ticker
            stop.set()
            thread.join(2)
            self._ticker = None

    def close(self):
        self._stop_ticker()
        with self._lock:
            if self._shown:
                self.stream.write("\n")
                self._shown = False
            self.stream.flush()


def _format_of(path: str) -> str:
    ext = os.path.splitext(path.rstrip("/"))[1].lower()
    fmt = {".csv": "csv", ".jsonl": "json", ".json": "json", ".ndjson": "json",
           ".parquet": "parquet"}.get(ext)
    if fmt is None:
        raise IngestError(f"cannot tell the format of {path!r} from its extension; pass "
                          f"--format csv|json|parquet")
    return fmt


# --------------------------------------------------------------------------- client commands

def _client(args):
    from gateway.client import connect
    return connect(args.gateway, args.token)


def run_query(args) -> int:
    client = _client(args)
    if args.query_command == "add":
        return add_queries(client, args)
    if args.query_command == "rm":
        for qid in args.ids:
            out = client.remove(qid)
            print(f"removed {qid} ({out.get('matches', 0)} matches were stored)")
    else:
        rows = client.queries()
        if args.json:
            from gateway.client import strict_json
            print(strict_json(rows, indent=2))
        else:
            print(query_table(rows))
    return 0


def add_queries(client, args) -> int:
    """``raycep query add``: all or nothing. Every query is checked first (it compiles with
    the parameters; its name is neither registered on the gateway nor used twice in the
    file), then they are registered; when a registration fails, the queries this command
    registered are removed again. Errors name a query by its NAME, unnamed ones ``query #k``."""
    from cep.compiler import compile_query
    from gateway.cli import declares_name, load_queries, parse_params
    params = parse_params(args.param)
    queries = load_queries([args.query], text_label="the query text")
    if args.name and len(queries) > 1:
        _err("error: --name needs a single query")
        return 2
    taken = {q["id"] for q in client.queries()}
    todo, problems = [], []
    for k, (_, q) in enumerate(queries, start=1):
        name = args.name or (q.name if declares_name(q) else None)
        label = f"query {name!r}" if name else f"query #{k}"
        if name in taken:
            problems.append(f"{label}: a query named {name!r} is already registered (remove "
                            f"it first or choose another name)")
        try:
            compile_query(q, params or None)
        except CepError as exc:
            problems.append(f"{label}: {exc}")
        todo.append((label, name, q))
    if problems:
        for problem in problems:
            _err(f"error: {problem}")
        _err("nothing was registered")
        return 2
    done = []
    for label, name, q in todo:
        try:
            done.append(client.register(q.text, name=name, params=params or None,
                                        mode=args.disorder_mode))
        except CepError as exc:
            _err(f"error: {label}: {exc}")
            _undo(client, done)
            return 2
    for qid in done:
        print(f"registered {qid}")
    return 0


def _undo(client, registered: list):
    """Remove the queries a failed ``query add`` registered, and say what is left."""
    left = []
    for qid in registered:
        try:
            client.remove(qid)
        except CepError as exc:
            _err(f"error: could not remove query {qid!r} again: {exc}")
            left.append(qid)
    if registered and len(left) < len(registered):
        _err(f"removed the queries this command had registered: "
             f"{', '.join(q for q in registered if q not in left)}")
    if left:
        _err(f"still registered: {', '.join(left)} (remove with raycep query rm)")
    else:
        _err("nothing was registered")


def run_matches(args) -> int:
    client = _client(args)
    if args.follow:
        try:
            for m in client.subscribe(args.id, since=args.since):
                print(json.dumps(m), flush=True)
        except KeyboardInterrupt:
            return 0
        return 0
    page = client.matches(args.id, since=args.since, limit=args.limit)
    for m in page.matches:
        print(json.dumps(m))
    retracted = sum(1 for m in page.matches if m.get("retracted"))
    _err(f"{len(page.matches) - retracted} matches"
         + (f", {retracted} retractions" if retracted else "") + f"; next cursor {page.next}"
         + (f"; {page.missed} dropped before this read" if page.missed else ""))
    return 0


def run_late(args) -> int:
    page = _client(args).late_events(since=args.since, limit=args.limit)
    for record in page.matches:
        print(json.dumps(record))
    _err(f"{len(page.matches)} late events; next cursor {page.next}"
         + (f"; {page.missed} dropped before this read" if page.missed else ""))
    return 0


def run_advance(args) -> int:
    out = _client(args).advance(args.watermark, force=args.force)
    print(f"advanced the watermark to {out['watermark']:g}; {out['matches']} deferred "
          f"matches released")
    return 0


def query_table(rows: list) -> str:
    header = ("QUERY", "SCOPE", "STATUS", "MATCHES", "PLAN", "VERSION")
    lines = [header]
    for q in rows:
        plan = q.get("plan") or {}
        order = ",".join(plan.get("order") or []) or "tree-nfa"
        lines.append((q["id"], q.get("scope") or "-", q.get("status", "-"),
                      str(q.get("matches", {}).get("total", 0)), order,
                      str(plan.get("version", "-"))))
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(header))]
    notes = [f"warning: query {q['id']}: {w}" for q in rows for w in q.get("warnings") or ()]
    return "\n".join(["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
                      for r in lines] + notes)


# --------------------------------------------------------------------------- serve

#: GatewaySettings fields set by `raycep serve` options that default to the settings' own
LIMITS = ("max_body_bytes", "max_depth", "max_window", "max_advance_ahead")


def run_serve(args) -> int:
    from gateway.registry import default_registry_path
    from gateway.runtime import RayCluster
    from gateway.service import GatewaySettings
    args.registry = os.path.abspath(args.registry) if args.registry else default_registry_path()
    try:
        settings = GatewaySettings(
            host=args.host, port=args.port, token=args.token, registry_path=args.registry,
            matches_jsonl=args.matches_jsonl, match_capacity=args.match_capacity,
            outbox_capacity=args.outbox_capacity,
            **{name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None})
    except CepError as exc:                     # name the option, not the settings' field
        option = str(exc).split(" ", 1)[0]
        _err(f"error: --{option.replace('_', '-')} {str(exc).split(' ', 1)[1]}")
        return 2
    from gateway.cli import disorder_settings
    cluster = RayCluster(args.partitions, args.key, settings, address=args.address,
                         disorder=disorder_settings(args), mode=args.disorder_mode)
    _err(f"starting {args.partitions} partition actors, the global actor, the planner and "
         f"the gateway ...")
    url = cluster.start()
    # SIGTERM (kill, Kubernetes) stops as Ctrl-C does; set after Ray's start, whose own handler
    # would print a native stack dump instead
    signal.signal(signal.SIGTERM, _terminated)
    print(f"raycep gateway listening on {url} (registry {args.registry}"
          f"{', token required' if args.token else ''}); Ctrl-C or SIGTERM stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, _Terminated) as exc:
        _err(f"{'SIGTERM: ' if isinstance(exc, _Terminated) else ''}stopping ...")
    finally:
        cluster.stop()
    _err("stopped")
    return 0


class _Terminated(Exception):
    """SIGTERM arrived (raised by the handler ``run_serve`` installs)."""


def _terminated(signum, frame):
    raise _Terminated()


# --------------------------------------------------------------------------- demo

def run_demo(args) -> int:
    """The README's main job (issue 4): see the ``demo`` parser description."""
    from actors.producer import Producer, named_handles
    from actors.routing import RoutingTable
    from cep.compiler import compile_query
    from cep.sources import iter_events
    from gateway.cli import load_queries
    from gateway.client import connect
    from gateway.runtime import RayCluster
    from gateway.service import GatewaySettings

    for path in (args.events, args.queries):
        if not os.path.isfile(path):
            _err(f"error: {path} not found (run `raycep demo` from the repository root, or "
                 f"pass --events/--queries)")
            return 2
    if args.partitions < 1 or args.batch < 1:
        _err("error: --partitions and --batch must be at least 1")
        return 2
    queries = load_queries([args.queries])
    names = [q.name for _, q in queries]
    removed = args.remove or (names[1] if len(names) > 1 else None)
    if removed is not None and removed not in names:
        _err(f"error: --remove {removed!r} is not one of the queries {names}")
        return 2
    events = list(iter_events(args.events, key_attr=args.key))
    workdir = tempfile.mkdtemp(prefix="raycep-demo-")
    settings = GatewaySettings(port=0, registry_path=os.path.join(workdir, "registry.sqlite"),
                               matches_jsonl=args.out, plan_every=1.0)
    t0 = time.monotonic()
    _err(f"[demo] starting local Ray: {args.partitions} partition actors + global actor, "
         f"planner, gateway ...")
    cluster = RayCluster(args.partitions, args.key, settings, num_cpus=os.cpu_count() or 2)
    try:
        url = cluster.start()
        _err(f"[demo] gateway at {url} (started in {time.monotonic() - t0:.1f} s)")
        client = connect(url)
        shown: dict = {}
        lock = threading.Lock()
        for _, q in queries:
            client.register(q.text, name=q.name)
            shown[q.name] = 0
            client.listen(q.name, _printer(q.name, shown, lock, args.show))
        _err(f"[demo] registered {', '.join(names)}; streaming {len(events)} events from "
             f"{args.events} in slices of {args.batch} (the Spark push path)")
        routing = lambda: RoutingTable.from_dict(client.routing())   # noqa: E731
        producer = Producer(named_handles(routing()), routing, source="demo")
        t1 = time.monotonic()
        last = t1
        half = len(events) // 2
        for start in range(0, len(events), args.batch):
            producer.send(events[start:start + args.batch])
            if removed and start < half <= start + args.batch:
                producer.flush()
                out = client.remove(removed)
                _err(f"[demo] removed query {removed} at event {start + args.batch} "
                     f"({out['matches']} matches so far); the others keep running")
            now = time.monotonic()
            if now - last >= 2.0:
                last = now
                _err(f"[demo] {producer.events}/{len(events)} events, "
                     f"{producer.events / (now - t1):,.0f} events/s")
        producer.flush()
        # the end of the stream: past every window (a finite watermark; forced, since a
        # window may be longer than the gateway's --max-advance-ahead)
        client.advance(max(ev.ts for ev in events) + 1.0 + max(
            compile_query(q).window for _, q in queries), force=True)
        _settle(client)
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
        _err(f"error: {exc}")
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


def _settle(client, timeout: float = 30.0):
    """Wait until every actor's outbox has been drained into the gateway's store."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        actors = client.stats()["actors"]
        if all(not a.get("outbox") for a in actors.values()):
            return
        time.sleep(0.05)


def _verify(client, queries, removed, events, key) -> bool:
    """Run the kept queries over the same events in one in-process Engine and compare the
    match ids with what the cluster stored."""
    from actors.partition import match_id
    from cep.engine import Engine
    engine = Engine(key_attr=key)
    kept = [q for _, q in queries if q.name != removed]
    for q in kept:
        engine.add_query(q, name=q.name)
    expected = {q.name: set() for q in kept}
    for m in engine.process_many(list(events)):
        expected[m.query].add(match_id(m))
    for m in engine.advance(math.inf):
        expected[m.query].add(match_id(m))
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
            _err(f"[demo] {q.name}: cluster {len(got)} matches, in-process {len(expected[q.name])}")
            ok = False
    return ok

