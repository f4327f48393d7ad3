"""The Spark ingestion job: files -> events -> partition actors (DESIGN.md "Data flow").

``ingest_dataframe`` maps each row to an event with an EventMapping (rows that cannot become
events go to the dead-letter output with their reason), routes every event with the cluster's
RoutingTable (the same hash the gateway and the actors use; events a global query needs are
also sent to the global actor), repartitions so that Spark partition ``i`` holds exactly the
events of actor ``i``, sorts each partition by ``(ts, id)``, and pushes msgpack batches from
``foreachPartition`` straight to the named actors, with at most ``max_in_flight`` batches
unacknowledged per partition.

Backpressure: an actor whose match outbox is over its limit refuses batches (nothing
processed). Each Spark task pushes through an ``actors.producer.Lane``: every batch names its
predecessor, so the batches in flight behind a refused one are refused too, and the lane sends
them again in their order (growing pauses) for up to ``retry_for`` seconds; events are never
reordered. After that the task fails and the job raises OverloadedError (``refused_batches``
in the summary counts the batches sent again).

Batch ids are ``<job id>:<target>:<n>``: deterministic, so a Spark task that is retried
resends the same ids and the actor acknowledges them without processing them again (and
events are de-duplicated by id in any case).
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, replace

from actors.producer import NAMESPACE, Lane, named_handles
from actors.routing import GLOBAL, RoutingTable, actor_name, event_key, partition_of
from cep.codec import encode_rows
from cep.errors import CepError, IngestError, OverloadedError
from spark_ingest.mapping import EventMapping
FORMATS = ("csv", "json", "parquet")
#: the column in which Spark keeps the raw text of a CSV row / JSON line it cannot parse
#: (a row with more or fewer cells than the header, a line that is not JSON); without it,
#: PERMISSIVE mode silently drops a row's extra cells and fills missing ones with nulls
MALFORMED = "_raycep_malformed"


@dataclass(frozen=True)
class IngestSettings:
    batch_size: int = 2000
    max_in_flight: int = 4                 # unacknowledged batches per Spark partition
    dead_letters: str = "raycep-dead-letters"   # directory; one sub-directory per job
    source: str = "spark"
    ray_address: str = "auto"              # how Spark's Python workers join Ray
    retry_for: float = 60.0                # seconds a task resends batches an actor refuses


def read_table(spark, paths, fmt: str, stream: bool = False, schema=None):
    """A DataFrame (or a streaming DataFrame) over ``paths``. CSV: header row, every column
    read as text (typed later like ``raycep local`` does), quoting as Python's csv module
    reads it; JSON: one object per line. CSV and JSON tables get the column MALFORMED, set
    on the rows Spark cannot parse (they go to the dead letters)."""
    if fmt not in FORMATS:
        raise IngestError(f"unknown input format {fmt!r}; use one of {', '.join(FORMATS)}")
    paths = [paths] if isinstance(paths, str) else list(paths)

    def options(reader):
        if fmt == "csv":
            # RFC 4180 like Python's csv module (raycep local): a quote inside a quoted cell
            # is doubled (with Spark's default escape, a backslash, such a cell keeps its
            # quotes and a backslash escapes, without an error), and a quoted cell may span
            # lines (without multiLine its row is cut in two: a wrong event + a bad row)
            reader = reader.option("header", True).option("inferSchema", False) \
                .option("escape", '"').option("multiLine", True)
        if fmt in ("csv", "json"):
            reader = reader.option("mode", "PERMISSIVE") \
                .option("columnNameOfCorruptRecord", MALFORMED)
        return reader

    if fmt in ("csv", "json"):
        if schema is None and not stream:
            schema = options(spark.read).format(fmt).load(paths).schema
        if schema is not None and MALFORMED not in schema.fieldNames():
            from pyspark.sql.types import StringType, StructField, StructType
            schema = StructType(schema.fields + [StructField(MALFORMED, StringType(), True)])
    reader = options(spark.readStream if stream else spark.read)
    if schema is not None:
        reader = reader.schema(schema)
    # load() takes a list of paths for every format (DataFrameReader.parquet takes *paths)
    return reader.format(fmt).load(paths[0] if stream else paths)


def _convert(mapping: EventMapping, routing: RoutingTable, file_col: str | None):
    """Spark-side: rows -> ("ok", (target, ts, id), wire row) | ("dead", reason, row)."""
    n = routing.partitions
    wanted = routing.global_types

    def run(index, rows):
        for row in rows:
            data = row.asDict()
            origin = data.pop(file_col, None) if file_col else None
            raw = data.pop(MALFORMED, None)
            if raw is not None:
                yield ("dead", "malformed record: Spark could not parse it (a CSV row with "
                               "more or fewer cells than the header, or a line that is not "
                               "a JSON object)", raw, origin)
                continue
            try:
                ev = mapping.to_event(data)
                target = partition_of(event_key(ev), n)
            except CepError as exc:
                yield ("dead", str(exc), _jsonable(data), origin)
                continue
            wire = [ev.type, ev.ts, ev.attrs, ev.key, ev.id]
            yield ("ok", (target, ev.ts, ev.id), wire, None)
            if wanted is None or ev.type in wanted:
                yield ("ok", (n, ev.ts, ev.id), wire, None)          # the global actor
    return run


def _pusher(job_id: str, routing: RoutingTable, settings: IngestSettings, counters):
    """Spark-side: push one partition (all of one actor's events, sorted) in batches."""
    n = routing.partitions

    def run(records):
        import ray
        first = next(records, None)
        if first is None:
            return
        target = first[0][0]
        if not ray.is_initialized():
            ray.init(address=settings.ray_address, namespace=NAMESPACE, log_to_driver=False,
                     configure_logging=False)
        name = actor_name(GLOBAL if target == n else target)
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            raise CepError(f"no actor {name!r} in Ray namespace {NAMESPACE!r}: is the raycep "
                           f"cluster running (raycep serve) on this Ray?") from None

        def count(ack):
            counters["events"].add(ack["events"])
            counters["duplicates"].add(ack["duplicates"])
            counters["late"].add(ack.get("late", 0))
            counters["redelivered"].add(int(ack["redelivered"]))
            counters["bad"].add(len(ack["bad_rows"]))
            counters["truncated"].add(ack.get("truncated", 0))

        lane = Lane(handle, settings.max_in_flight, count, settings.retry_for)
        seq, rows = 0, []

        def push():
            nonlocal seq
            seq += 1
            batch_id = f"{job_id}:{target}:{seq}"
            lane.push(encode_rows(rows, settings.source, batch_id), batch_id)

        for _key, wire in _chain(first, records):
            rows.append(wire)
            if len(rows) >= settings.batch_size:
                push()
                rows = []
        if rows:
            push()
        lane.flush()
        counters["refused"].add(lane.refusals)
    return run


def _chain(first, rest):
    yield first
    yield from rest


def ingest_dataframe(spark, df, mapping: EventMapping, routing: RoutingTable,
                     settings: IngestSettings = IngestSettings(), job_id: str | None = None,
                     progress=None) -> dict:
    """Ingest one (batch) DataFrame; returns the job's counts and the dead-letter location.
    ``progress(dict)`` is called with the counts when the job is done (``run_job`` also
    reports while it runs)."""
    job_id = job_id or uuid.uuid4().hex[:12]
    settings = _joinable(settings)
    file_col = "_raycep_file"
    columns = [c for c in df.columns if c != MALFORMED]
    mapping.check_columns(columns)
    from pyspark.sql.functions import input_file_name
    df = df.withColumn(file_col, input_file_name())
    sc = spark.sparkContext
    counters = {k: sc.accumulator(0) for k in ("events", "duplicates", "late", "redelivered",
                                               "bad", "truncated", "refused")}
    converted = df.rdd.mapPartitionsWithIndex(_convert(mapping, routing, file_col)).cache()
    try:
        dead = converted.filter(lambda r: r[0] == "dead")
        events = converted.filter(lambda r: r[0] == "ok").map(lambda r: (r[1], r[2]))
        n_targets = routing.partitions + 1
        try:
            events.repartitionAndSortWithinPartitions(
                n_targets, partitionFunc=lambda key: key[0]) \
                .foreachPartition(_pusher(job_id, routing, settings, counters))
        except Exception as exc:
            failure = _task_failure(exc)
            if failure is None:
                raise
            raise failure from None
        n_dead = dead.count()
        n_part = routing.partitions
        rows = converted.filter(lambda r: r[0] == "dead" or r[1][0] < n_part).count()
        dead_dir = None
        if n_dead:
            dead_dir = _fresh_dir(settings.dead_letters, job_id)
            dead.map(lambda r: json.dumps({"reason": r[1], "row": r[2], "file": r[3]},
                                          sort_keys=True, default=str)) \
                .coalesce(1).saveAsTextFile(dead_dir)
        sample = [r[1] for r in dead.take(5)] if n_dead else []
    finally:
        converted.unpersist()
    out = {"job": job_id, "rows": rows,
           "events_sent": counters["events"].value,
           "duplicates": counters["duplicates"].value,
           "late_events": counters["late"].value,
           "redelivered_batches": counters["redelivered"].value,
           "rejected_by_actors": counters["bad"].value,
           "truncated_triggers": counters["truncated"].value,
           "refused_batches": counters["refused"].value,
           "dead_letters": n_dead, "dead_letter_dir": dead_dir, "dead_letter_sample": sample}
    if progress:
        progress(out)
    return out


def _task_failure(exc: Exception) -> CepError | None:
    """The raycep error a Spark task failed with (an actor still refusing after
    ``retry_for``, no actor), read from the Python traceback in Spark's error text; None for
    any other failure (raised as it is)."""
    found = _TASK_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return (OverloadedError if name == "OverloadedError" else CepError)(message.strip())


_TASK_ERROR = re.compile(r"cep\.errors\.(OverloadedError|CepError): ([^\n]*)")


def _joinable(settings: IngestSettings) -> IngestSettings:
    """Spark's Python workers join the driver's Ray, not whichever Ray ``address="auto"``
    finds last on the machine (another cluster on the same host would get the events)."""
    if settings.ray_address == "auto":
        import ray
        if ray.is_initialized():
            return replace(settings, ray_address=ray.get_runtime_context().gcs_address)
    return settings


def _fresh_dir(root: str, job_id: str) -> str:
    """The dead-letter directory of a job: ``root/<job id>``, or ``root/<job id>.<n>`` when a
    job with the same id (a replayed micro-batch, a re-sent job) already wrote one (Spark
    refuses to write into an existing directory)."""
    if "://" in root:
        return f"{root.rstrip('/')}/{job_id}"
    base = os.path.join(os.path.abspath(root), job_id)
    path, n = base, 0
    while os.path.exists(path):
        n += 1
        path = f"{base}.{n}"
    return path


def _jsonable(data: dict) -> dict:
    return {k: (v if isinstance(v, (str, int, float, bool, type(None))) else str(v))
            for k, v in data.items()}


def run_job(spark, paths, fmt: str, mapping: EventMapping, routing: RoutingTable,
            settings: IngestSettings = IngestSettings(), report=None,
            every: float = 2.0) -> dict:
    """Batch ingestion of files. ``report(line)`` gets a progress line every ``every`` seconds
    (events the actors have received so far and the rate) while the job runs."""
    t0 = time.monotonic()
    df = read_table(spark, paths, fmt)
    watcher = ActorProgress(routing, report, every) if report else None
    try:
        result = ingest_dataframe(spark, df, mapping, routing, settings)
    finally:
        if watcher:
            watcher.stop()
    wall = time.monotonic() - t0
    result["seconds"] = round(wall, 3)
    result["events_per_s"] = round(result["events_sent"] / wall) if wall > 0 else None
    return result


class ActorProgress:
    """A driver thread that reports the events the actors received since it started."""

    def __init__(self, routing: RoutingTable, report, every: float = 2.0):
        import threading
        self.handles = list(named_handles(routing).values())
        self.report, self.every = report, every
        self.base = self._events()
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="raycep-progress")
        self._thread.start()

    def _events(self) -> int:
        import ray
        return sum(s["events"] + s["duplicates"] for s in
                   ray.get([h.stats.remote() for h in self.handles]))

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                got = self._events() - self.base
            except Exception as exc:            # progress must never break the job
                self.report(f"[ingest] progress unavailable: {exc}")
                continue
            wall = time.monotonic() - self.t0
            self.report(f"[ingest] {got:,} events received by the actors, "
                        f"{got / wall:,.0f} events/s")

    def stop(self):
        self._stop.set()
        self._thread.join(5)


def run_stream(spark, directory: str, fmt: str, mapping: EventMapping, routing,
               settings: IngestSettings = IngestSettings(), schema=None,
               checkpoint: str | None = None, every: float = 2.0, report=None):
    """Structured streaming over ``directory`` (Spark's file source): every file dropped there
    is ingested by ``ingest_dataframe`` in a micro-batch (``foreachBatch``, every ``every``
    seconds). ``routing`` is a RoutingTable or a callable returning the current one (read per
    micro-batch). Returns the running StreamingQuery (``.stop()``, ``.awaitTermination()``).

    The schema is taken from the files already there, or given (CSV: every column as text).
    The checkpoint directory records which files were ingested, so a restarted stream does
    not ingest a file twice; micro-batch ``k`` uses job id ``<stream>:<k>``, so a replayed
    micro-batch is recognised by the actors."""
    if schema is None:
        try:
            schema = read_table(spark, directory, fmt).schema
        except Exception as exc:
            raise IngestError(f"cannot infer the schema of {directory!r} (put one file there "
                              f"first): {str(exc).splitlines()[0]}") from None
    checkpoint = checkpoint or os.path.join(settings.dead_letters, "_checkpoints",
                                            uuid.uuid4().hex[:12])
    stream_id = os.path.basename(os.path.normpath(checkpoint))
    current = routing if callable(routing) else (lambda: routing)

    def batch(df, epoch: int):
        result = ingest_dataframe(spark, df, mapping, current(), settings,
                                  job_id=f"{stream_id}:{epoch}")
        if report and result["rows"]:
            report(f"[stream] micro-batch {epoch}: {result['rows']} rows, "
                   f"{result['events_sent']} events sent, {result['dead_letters']} dead "
                   f"letters")

    df = read_table(spark, directory, fmt, stream=True, schema=schema)
    return df.writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint) \
        .trigger(processingTime=f"{every} seconds").start()
