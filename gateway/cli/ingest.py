"""``raycep ingest``: files into a running cluster with Spark (PySpark on Ray via RayDP)."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace

from raycep.cep.errors import IngestError
from raycep.cep.io.timestamps import FORMAT_HELP
from raycep.gateway.cli.common import add_gateway_arguments, client_for, err, note, require


def add_parser(commands) -> None:
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
                        help=f"how the ts column is written: {FORMAT_HELP.replace('%', '%%')} (default s)")
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
    ingest.add_argument("--own-spark", action="store_true",
                        help="start a Spark for this job even where the cluster keeps a "
                             "warm one (raycep serve --spark), which is used by default")
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
    add_gateway_arguments(ingest)


def run_ingest(args) -> int:
    """``raycep ingest``: stdout gets only the JSON summary; stderr one progress line (phase,
    elapsed seconds, events at the actors, events/s) from start-up to the end, rewritten in
    place on a terminal. Spark's, Hadoop's and Ray's logs go to a log file unless
    ``--verbose``."""
    require("ray", "pyspark", "raydp")
    from raycep.actors.handles import NAMESPACE, connect_ray
    from raycep.actors.routing import RoutingTable
    from raycep.spark_ingest.job import IngestSettings, run_job, run_stream
    from raycep.spark_ingest.mapping import EventMapping
    from raycep.spark_ingest.session import jvm_output, start_spark, stop_spark

    status = StatusLine(in_place=not args.verbose)
    log = None
    if not args.verbose:
        _quiet_libraries()
        log = os.path.join(tempfile.gettempdir(), f"raycep-ingest-{os.getpid()}.log")
    client = client_for(args)
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
        err("error: --stream needs exactly one directory")
        return 2
    for path in args.paths:
        if not os.path.exists(path):
            err(f"error: {path} not found")
            return 2
    # paths as the warm Spark's actor (another working directory) and Spark's executors see
    # them
    args.paths = [os.path.abspath(p) for p in args.paths]
    settings = replace(settings, dead_letters=os.path.abspath(settings.dead_letters))
    t0 = time.monotonic()
    status.tick(lambda: f"[ingest] joining Ray: {time.monotonic() - t0:.0f} s")
    try:
        # a namespace of its own: RayDP names its master actor in the driver's namespace, so
        # two ingest jobs on one Ray must not share one (the actors are looked up by name in
        # the raycep namespace explicitly)
        with jvm_output(log):
            connect_ray(args.ray_address, namespace=f"{NAMESPACE}-ingest-{os.getpid()}",
                        log_to_driver=False, configure_logging=False)
    except BaseException:
        status.close()
        raise
    if not (args.stream or args.spark_master or args.own_spark):
        warm = _warm_spark(status, t0)
        if warm is not None:
            return _run_warm(args, warm, fmt, mapping, routing, settings, status, t0)
    status.tick(lambda: f"[ingest] starting Spark: {time.monotonic() - t0:.0f} s")
    try:
        spark = start_spark(args.spark_master, executors=args.executors,
                            cores=args.executor_cores, memory=args.executor_memory, log=log,
                            level="warn" if args.verbose else "error")
    except BaseException:
        status.close()
        if log:
            note(f"[ingest] Spark did not start; its log: {log}")
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
                note(f"[ingest] the job failed; Spark's log: {log}")
            raise
    finally:
        stop_spark(spark, args.spark_master)
    result["spark"] = "own"
    code = _finish(result, startup, t0, status)
    if not args.spark_master and not args.own_spark:
        note(f"[ingest] starting Spark took {startup:.1f} s of this command's "
             f"{result['wall_seconds']:.1f} s: `raycep serve --spark` keeps a Spark warm in "
             f"the cluster for every `raycep ingest`")
    return code


def _finish(result: dict, startup: float, t0: float, status) -> int:
    """The summary: a last progress line, the dead letters' note, the JSON on stdout."""
    wall = time.monotonic() - t0
    result["spark_startup_seconds"] = round(startup, 3)
    result["wall_seconds"] = round(wall, 3)
    which = "the cluster's warm Spark" if result["spark"] == "warm" else "Spark start-up"
    status.show(f"[ingest] done: {result['rows']:,} rows, {result['events_sent']:,} events "
                f"sent in {result['seconds']:.1f} s after {which} "
                f"({result['events_per_s']:,} events/s), {result['dead_letters']:,} dead "
                f"letters; {wall:.1f} s in all with {which} {startup:.1f} s", keep=True)
    status.close()
    if result["dead_letters"]:
        note(f"[ingest] {result['dead_letters']} rows could not become events; reasons in "
             f"{result['dead_letter_dir']} (first: {result['dead_letter_sample'][0]})")
    print(json.dumps(result), flush=True)
    return 0


def _warm_spark(status, t0: float):
    """The cluster's warm Spark (``raycep serve --spark``) once it has started, or None: the
    cluster keeps none, or it failed to start (said on stderr)."""
    from raycep.actors.handles import INGEST, optional_handle, wait_for
    from raycep.cep.errors import UnavailableError
    handle = optional_handle(INGEST)
    if handle is None:
        return None
    pending = handle.submit("ready")
    try:
        if not wait_for(pending, 0.5)[0]:       # still starting (serve started just now)
            status.tick(lambda: f"[ingest] waiting for the cluster's warm Spark to start: "
                                f"{time.monotonic() - t0:.0f} s")
            while not wait_for(pending, 1.0)[0]:
                pass
    except UnavailableError as exc:
        status.show(f"[ingest] the cluster's warm Spark is not available ({exc}); starting "
                    f"Spark for this job", keep=True)
        return None
    return handle


def _run_warm(args, warm, fmt, mapping, routing, settings, status, t0: float) -> int:
    """The job on the cluster's warm Spark: its progress read from the actors and the
    Spark; Ctrl-C cancels it there."""
    from raycep.actors.handles import wait_for
    from raycep.spark_ingest.job import JobProgress
    startup = time.monotonic() - t0
    status.show(f"[ingest] the cluster's warm Spark (raycep serve --spark) after "
                f"{startup:.1f} s; {routing.partitions} partition actors, key "
                f"{mapping.key_column!r}")
    if (args.executors, args.executor_cores, args.executor_memory) != (1, 1, "1GB"):
        note("[ingest] --executors, --executor-cores and --executor-memory are the warm "
             "Spark's own (raycep serve --spark-executors ...); --own-spark starts one with "
             "these")
    pending = warm.submit("run", args.paths, fmt, mapping, routing.to_dict(), settings)
    watcher = JobProgress(lambda: warm.get("tasks", timeout=2), routing, status.show,
                          1.0 if status.in_place else 2.0)
    try:
        while not (got := wait_for(pending, 0.5))[0]:
            pass
        result = got[1]
    except KeyboardInterrupt:
        warm.tell("cancel")
        raise
    finally:
        watcher.stop()
    # ``seconds``: run_job's own, as with a Spark of its own (Spark running); a wait for
    # another job on the warm Spark is ``queued_seconds``, counted as start-up
    result["spark"] = "warm"
    return _finish(result, startup + result["queued_seconds"], t0, status)


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
