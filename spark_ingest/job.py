"""The Spark ingestion job: files -> events -> partition actors (docs/architecture.md, "Data flow").

No Python work per row on the Spark side. ``ingest_dataframe`` runs one Spark job:
``mapInArrow`` maps Arrow batches of rows to typed event columns (spark_ingest.columnar, the
columnar twin of EventMapping; rows that cannot become events go to the dead letters with
their reason, file and line), routes them with the cluster's RoutingTable (the hash the
gateway and the actors use, computed once per distinct key; events a global query needs are
also sent to the global actor), arranges each actor's events in one Spark partition sorted by
event time (DataFrame operations in the JVM), and a second ``mapInArrow`` pushes them: per
actor, batches of ``batch_size`` events in ``(ts, id)`` order, columnar (codec schema version
2) where the codec has it, every actor of the partition fed at once. When ``run_job`` finds
that its one input file is already in event-time order (``in_time_order``: the time column
read with pyarrow on the driver, ~0.15 s per million CSV rows), there is no sort: one
``mapInArrow`` maps and pushes in the task that reads, so the actors get events while the
file is still being read; that task checks the order per actor as it goes.

Backpressure: an actor whose match outbox is over its limit refuses batches (nothing
processed). Each Spark task pushes to each actor through an ``actors.producer.Lane``: every
batch names its predecessor, so the batches in flight behind a refused one are refused too,
and the lane sends them again in their order (growing pauses) for up to ``retry_for``
seconds; events are never reordered. After that the task fails and the job raises
OverloadedError (``refused_batches`` in the summary counts the batches sent again).

Batch ids are ``<job id>:<target>:<n>``: deterministic (the batches of an actor are the same
whatever Spark's Arrow batch boundaries), so a Spark task that is retried resends the same
ids and the actor acknowledges them without processing them again (and events are
de-duplicated by id in any case).
"""
from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from dataclasses import dataclass, replace

from raycep.actors.handles import connected_address, named_handles
from raycep.actors.routing import RoutingTable
from raycep.cep.errors import CepError, IngestError, OverloadedError
from raycep.cep.io.timestamps import TS_UNITS
from raycep.spark_ingest.columnar import DEAD_TARGET, PART, TARGET, TS, Plan, category_of
from raycep.spark_ingest.dead_letters import Locator, local_path
from raycep.spark_ingest.mapping import EventMapping
from raycep.spark_ingest.push import Pusher

FORMATS = ("csv", "json", "parquet")
#: the column in which Spark keeps the raw text of a CSV row / JSON line it cannot parse
#: (a row with more or fewer cells than the header, a line that is not JSON); without it,
#: PERMISSIVE mode silently drops a row's extra cells and fills missing ones with nulls
MALFORMED = "_raycep_malformed"


@dataclass(frozen=True)
class IngestSettings:
    batch_size: int = 10_000               # events per wire batch (larger batches: less
                                           # fixed work per batch at the actors)
    max_in_flight: int = 4                 # unacknowledged batches per Spark partition
    dead_letters: str = "raycep-dead-letters"   # directory; one sub-directory per job
    source: str = "spark"
    ray_address: str = "auto"              # how Spark's Python workers join Ray
    retry_for: float = 60.0                # seconds a task resends batches an actor refuses
    push_tasks: int | None = None          # Spark tasks that push (None: Spark's task slots)


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
        if schema is None and not stream and fmt == "csv" and len(paths) == 1:
            schema = csv_header_schema(paths[0])
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


def csv_header_schema(path: str):
    """The schema Spark infers for one local CSV file (every column text, named by the
    header), read here instead of in a Spark job; None when Spark has to decide (not a plain
    local file, a byte-order mark, a header with a blank or repeated name)."""
    import csv

    from pyspark.sql.types import StringType, StructField, StructType
    if "://" in path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            if handle.read(1) == "\ufeff":
                return None
            handle.seek(0)
            header = next((row for row in csv.reader(handle) if row), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not header or any(not name.strip() for name in header) or \
            len(set(header)) != len(header) or \
            len({name.lower() for name in header}) != len(header):
        return None
    return StructType([StructField(name, StringType(), True) for name in header])


def push_slots(spark) -> int:
    """How many Spark tasks can run at once: executors x cores (RayDP sets both), else
    Spark's default parallelism."""
    conf = spark.sparkContext.getConf()
    try:
        executors = int(conf.get("spark.executor.instances", "0"))
        cores = int(conf.get("spark.executor.cores", "1"))
    except ValueError:
        executors = cores = 0
    return executors * cores if executors > 0 and cores > 0 \
        else spark.sparkContext.defaultParallelism


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int column (Murmur3_x86_32.hashInt, seed 42), which its hash
    partitioning takes modulo the number of partitions."""
    mask = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & mask
    k1 = rotl((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def partition_values(slots: int) -> list:
    """For each Spark partition ``p < slots``, an int whose hash puts a row into partition
    ``p`` when ``repartition(slots, column)`` hashes that column."""
    found: dict = {}
    value = 0
    while len(found) < slots:
        found.setdefault(spark_hash_int(value) % slots, value)
        value += 1
    return [found[p] for p in range(slots)]


def arrange(spark, df, mapping: EventMapping, routing: RoutingTable, fmt: str | None = None,
            tasks: int | None = None):
    """``(plan, DataFrame)``: the rows of ``df`` prepared (typed event columns, routing
    target, dead letters; ``spark_ingest.columnar.Plan.prepare`` in ``mapInArrow``) and
    arranged for the push: each actor's rows in one Spark partition, sorted by event time.
    The partitions are as many as ``tasks`` (default: Spark's task slots), at most one per
    actor; actor ``t`` is in partition ``t % partitions``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    plan, df, block, slots = planned(spark, df, mapping, routing, tasks)
    prepared = df.mapInArrow(_preparer(plan, fmt, block), from_arrow_schema(plan.schema()))
    if slots == 1:
        arranged = prepared.coalesce(1)       # no shuffle: the read feeds the one push task
    else:
        arranged = prepared.repartition(slots, PART)
    return plan, arranged.sortWithinPartitions(TS)


def planned(spark, df, mapping: EventMapping, routing: RoutingTable, tasks: int | None = None,
            located: bool = True):
    """``(plan, df, block, slots)``: the Plan of ``df``'s columns, ``df`` with the columns
    that name each row's file and split (dead letters; not with ``located=False``),
    whether the split offsets are there, and the number of push partitions
    (``arrange``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    columns = [c for c in df.columns if c != MALFORMED]
    mapping.check_columns(columns)
    arrow = to_arrow_schema(df.select(columns).schema)
    categories = {name: category_of(arrow.field(name).type) for name in columns}
    block = False
    if located:
        df = df.withColumn(FILE_COLUMN, F.input_file_name())
        try:
            df = df.withColumn(BLOCK_COLUMN, F.col("_metadata.file_block_start"))
            block = True
        except Exception:                     # no file metadata (a streaming micro-batch)
            pass
    n = routing.partitions
    targets = n + (0 if routing.global_types is not None and not routing.global_types else 1)
    slots = max(1, min(targets, tasks or push_slots(spark)))
    values = partition_values(slots)
    plan = Plan(mapping, categories, n, routing.global_types,
                parts=tuple(values[t % slots] for t in range(n + 1)), dead_part=values[0],
                key_groups=routing.key_groups, epoch=routing.epoch,
                malformed=MALFORMED if MALFORMED in df.columns else None)
    return plan, df, block, slots


def ingest_dataframe(spark, df, mapping: EventMapping, routing: RoutingTable,
                     settings: IngestSettings = IngestSettings(), job_id: str | None = None,
                     progress=None, fmt: str | None = None, phase=None,
                     in_order: bool = False) -> dict:
    """Ingest one (batch) DataFrame; returns the job's counts and the dead-letter location.

    One Spark job: ``mapInArrow`` maps each Arrow batch of rows to typed event columns with
    their routing target (spark_ingest.columnar; rows that cannot become events become dead
    letters naming their file and line), the rows are arranged so that each actor's events
    are in one Spark partition sorted by event time (``sortWithinPartitions``; one partition
    for all actors when Spark runs one task at a time, else ``repartition`` over as many
    partitions as Spark has task slots, the actors spread over them), and a second
    ``mapInArrow`` pushes them: per actor, chunks of ``batch_size`` in ``(ts, id)`` order,
    pipelined through one ``Lane`` per actor, every actor of the partition fed at once.
    ``progress(dict)`` is called with the counts when the job is done, ``phase(name)`` with
    ``"draining"`` when every batch is pushed (the dead letters are written then). ``fmt``
    (csv, json, parquet) tells how to find a dead row's line (default: from the file
    extension).

    ``in_order``: the caller knows that ``df`` reads one file, in one Spark task, in
    event-time order (``run_job`` checks it with ``in_time_order``). Then there is no sort
    and no second stage: the task that reads the rows prepares and pushes them at once
    (one ``mapInArrow``: the push overlaps the read), checking the order as it goes (a row
    older than an event already sent to its actor fails the job, naming the row's time)."""
    # larger Arrow batches than Spark's 10,000 rows: less fixed work per batch in Python
    # (for this job only: the session's setting is restored)
    before = spark.conf.get(ARROW_BATCH, None)
    spark.conf.set(ARROW_BATCH, str(ARROW_ROWS))
    try:
        return _ingest(spark, df, mapping, routing, settings, job_id, progress, fmt, phase,
                       in_order)
    finally:
        if before is None:
            spark.conf.unset(ARROW_BATCH)
        else:
            spark.conf.set(ARROW_BATCH, before)


def _ingest(spark, df, mapping, routing, settings, job_id, progress, fmt, phase, in_order):
    from pyspark import StorageLevel

    job_id = job_id or uuid.uuid4().hex[:12]
    settings = _joinable(settings)
    files = df.inputFiles() if in_order else []
    # one task only: two tasks would feed one actor at once (out of order, and with the
    # same batch ids); one file read by one task from its start needs no file column
    if len(files) == 1 and df.rdd.getNumPartitions() == 1:
        plan, ready, _, _ = planned(spark, df, mapping, routing, settings.push_tasks,
                                    located=False)
        prepare = _preparer(plan, fmt, False, files[0])
        push = _pusher(job_id, plan, settings, check_order=True)
        pushed = ready.mapInArrow(lambda batches: push(prepare(batches)),
                                  "kind string, text string")
    else:
        plan, arranged = arrange(spark, df, mapping, routing, fmt, settings.push_tasks)
        pushed = arranged.mapInArrow(_pusher(job_id, plan, settings),
                                     "kind string, text string")
    pushed = pushed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            reports = [json.loads(r.text) for r in pushed.filter("kind = 'count'").collect()]
        except Exception as exc:
            failure = _task_failure(exc)
            if failure is None:
                raise
            raise failure from None
        counts = {k: sum(r[k] for r in reports) for k in COUNTS}
        if phase:
            phase("draining")
        dead_dir, sample = None, []
        if counts["dead"]:
            dead = pushed.filter("kind = 'dead'").select("text")
            dead_dir = _fresh_dir(settings.dead_letters, job_id)
            dead.coalesce(1).write.text(dead_dir)
            sample = [reason for r in reports for reason in r["sample"]][:5]
    finally:
        pushed.unpersist()
    out = {"job": job_id, "rows": counts["rows"],
           "events_sent": counts["events"],
           "duplicates": counts["duplicates"],
           "late_events": counts["late"],
           "redelivered_batches": counts["redelivered"],
           "rejected_by_actors": counts["bad"],
           "truncated_triggers": counts["truncated"],
           "refused_batches": counts["refused"],
           "dead_letters": counts["dead"], "dead_letter_dir": dead_dir,
           "dead_letter_sample": sample}
    if progress:
        progress(out)
    return out


#: Spark's setting of the rows per Arrow batch given to mapInArrow, and this job's value
ARROW_BATCH, ARROW_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch", 50_000

#: the counts each push task reports
COUNTS = ("rows", "dead", "events", "duplicates", "late", "redelivered", "bad", "truncated",
          "refused")
FILE_COLUMN, BLOCK_COLUMN = "_raycep_file", "_raycep_block"


def _preparer(plan: Plan, fmt: str | None, block: bool, file: str | None = None):
    """Spark-side (mapInArrow): input batches -> prepared batches (spark_ingest.columnar).
    ``file``: every row comes from that file (a task that reads it all from its start),
    else from the FILE_COLUMN (and BLOCK_COLUMN) of the batch."""
    def run(batches):
        import numpy as np
        import pyarrow as pa
        locator = Locator(fmt)
        for batch in batches:
            if file is None:
                locator.start(batch.column(FILE_COLUMN),
                              batch.column(BLOCK_COLUMN) if block else None)
            else:
                locator.start(pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(batch.num_rows, dtype=np.int32)), pa.array([file])))
            yield plan.prepare(batch, locator)
    return run


def _pusher(job_id: str, plan: Plan, settings: IngestSettings, check_order: bool = False):
    """Spark-side (mapInArrow): one partition's prepared rows, sorted by ts -> wire batches
    pushed to their actors, each through its own Lane (in order, pipelined, backpressure
    with retries), all actors of the partition at once. Yields the dead letters
    (``kind="dead"``) and one row of counts (``kind="count"``). ``check_order``: the rows
    were not sorted here but are said to be in time order; a row older than one before it
    for the same actor fails the task (CepError) before it is sent."""
    n = plan.partitions

    def run(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        counts = dict.fromkeys(COUNTS, 0)
        sample: list = []                      # the first dead letters' reasons

        def count(ack):
            counts["events"] += ack["events"]
            counts["duplicates"] += ack["duplicates"]
            counts["late"] += ack.get("late", 0)
            counts["redelivered"] += int(ack["redelivered"])
            counts["bad"] += len(ack["bad_rows"])
            counts["truncated"] += ack.get("truncated", 0)

        pusher = Pusher(job_id, plan, settings, count)
        latest: dict = {}                      # target -> its latest event time so far
        for batch in batches:
            if check_order:
                _check_order(batch, latest)
            t = batch.column(TARGET)
            counts["rows"] += pc.sum(pc.and_(pc.greater_equal(t, DEAD_TARGET),
                                             pc.less(t, n))).as_py() or 0
            dead = pusher.add(batch)
            if dead:
                counts["dead"] += len(dead)
                sample.extend(json.loads(d)["reason"] for d in dead[:5 - len(sample)])
                yield pa.RecordBatch.from_pydict({"kind": ["dead"] * len(dead), "text": dead})
        counts["refused"] += pusher.finish()
        yield pa.RecordBatch.from_pydict({"kind": ["count"],
                                          "text": [json.dumps({**counts, "sample": sample})]})
    return run


def _check_order(batch, latest: dict):
    """Raise CepError when a row of ``batch`` is older than a row before it (in this batch
    or, ``latest``, an earlier one) for the same target; dead rows do not count."""
    import numpy as np
    targets = batch.column(TARGET).to_numpy()
    ts = batch.column(TS).to_numpy(zero_copy_only=False)
    for target in np.unique(targets).tolist():
        if target == DEAD_TARGET:
            continue
        times = ts[targets == target]
        back = np.flatnonzero(~(np.diff(times, prepend=latest.get(target, -math.inf)) >= 0))
        if back.size:
            raise CepError(f"the input was taken to be in event-time order, but an event at "
                           f"ts {times[back[0]]} comes after a later one (the events sent "
                           f"before it stay; a job sent again adds no duplicates)")
        latest[target] = times[-1]


def in_time_order(paths, fmt: str, mapping: EventMapping) -> bool:
    """Whether the input is one local CSV or Parquet file whose event times never decrease
    from row to row, read here with pyarrow (the event-time column only, streamed): then
    the job needs no sort (``ingest_dataframe(in_order=True)``). Conservative: False for
    several files, another format or file system, an event-time unit that is not a number
    (``iso``, a pattern), a Parquet file Spark would read in several splits, and for any
    cell pyarrow does not read as a finite number (blank, text, a row it cannot parse)."""
    import numpy as np
    import pyarrow as pa
    paths = [paths] if isinstance(paths, str) else list(paths)
    if len(paths) != 1 or fmt not in ("csv", "parquet") or mapping.ts_unit not in TS_UNITS \
            or mapping.ts_column is None:
        return False
    path = local_path(paths[0])
    if path is None or not os.path.isfile(path):
        return False
    column = mapping.ts_column
    try:
        if fmt == "csv":
            import pyarrow.csv as pacsv
            batches = pacsv.open_csv(
                path, read_options=pacsv.ReadOptions(block_size=1 << 22),
                parse_options=pacsv.ParseOptions(newlines_in_values=True, double_quote=True,
                                                 escape_char=False),
                convert_options=pacsv.ConvertOptions(
                    include_columns=[column], column_types={column: pa.float64()},
                    null_values=[], strings_can_be_null=False))
        else:
            import pyarrow.parquet as pq
            source = pq.ParquetFile(path)
            if source.metadata.num_row_groups > 1:
                return False                  # may be several Spark splits
            batches = source.iter_batches(batch_size=1 << 16, columns=[column])
        latest = -math.inf
        for batch in batches:
            values = batch.column(0)
            if values.null_count:
                return False
            if pa.types.is_timestamp(values.type):
                values = values.cast(pa.int64())
            elif not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
                return False
            values = values.to_numpy()
            if not len(values):
                continue
            if values.dtype.kind == "f" and not np.isfinite(values).all():
                return False
            if values[0] < latest or (np.diff(values) < 0).any():
                return False
            latest = values[-1]
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return False
    return True


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
        address = connected_address()
        if address is not None:
            return replace(settings, ray_address=address)
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


def run_job(spark, paths, fmt: str, mapping: EventMapping, routing: RoutingTable,
            settings: IngestSettings = IngestSettings(), report=None,
            every: float = 2.0) -> dict:
    """Batch ingestion of files. ``report(line)`` gets a progress line every ``every`` seconds
    while the job runs (``[ingest] PHASE: ...``: reading until the first event reaches an
    actor, then pushing, then draining: writing the dead letters).

    The summary's ``seconds`` is the wall time of this call (Spark already running): reading,
    mapping, sorting, pushing until every batch is acknowledged, writing the dead letters;
    ``events_per_s`` is ``events_sent / seconds``."""
    t0 = time.monotonic()
    watcher = JobProgress(lambda: spark_tasks(spark), routing, report, every) if report \
        else None
    try:
        # a sort is the only way to spread one actor's events over several push tasks
        in_order = settings.push_tasks in (None, 1) and in_time_order(paths, fmt, mapping)
        df = read_table(spark, paths, fmt)
        result = ingest_dataframe(spark, df, mapping, routing, settings, fmt=fmt,
                                  phase=watcher.phase if watcher else None,
                                  in_order=in_order)
    finally:
        if watcher:
            watcher.stop()
    wall = time.monotonic() - t0
    result["seconds"] = round(wall, 3)
    result["events_per_s"] = rate(result["events_sent"], wall)
    return result


def rate(events: int, seconds: float) -> float | None:
    """Events per second, to 0.1 (a small file's rate is not 0)."""
    return round(events / seconds, 1) if seconds > 0 else None


def spark_tasks(spark) -> str:
    """Spark's task counts of the stages running now (``, Spark tasks 3/8``), or ""."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for stage in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return f", Spark tasks {done}/{total}" if total else ""


class JobProgress:
    """A driver thread that reports, every ``every`` seconds, the job's phase, the events
    the actors received since it started and their rate, and Spark's task counts
    (``tasks()``: ``spark_tasks`` of the session that runs the job)."""

    def __init__(self, tasks, routing: RoutingTable, report, every: float = 2.0):
        import threading
        self.tasks, self.report, self.every = tasks, report, every
        self.handles = list(named_handles(routing).values())
        self.base = self._events()
        self.t0 = time.monotonic()
        self._phase = "reading"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="raycep-progress")
        self._thread.start()

    def phase(self, name: str):
        self._phase = name

    def _events(self) -> int:
        from raycep.actors.handles import result
        return sum(s["events"] + s["duplicates"] for s in
                   [result(p) for p in [h.submit("stats") for h in self.handles]])

    def line(self) -> str:
        wall = time.monotonic() - self.t0
        got = self._events() - self.base
        if got and self._phase == "reading":
            self._phase = "pushing"
        return (f"[ingest] {self._phase}: {wall:.0f} s, {got:,} events at the actors, "
                f"{got / wall if wall > 0 else 0:,.0f} events/s{self.tasks()}")

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                self.report(self.line())
            except Exception as exc:            # progress must never break the job
                self.report(f"[ingest] progress unavailable: {exc}")

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
                                  job_id=f"{stream_id}:{epoch}", fmt=fmt)
        if report and result["rows"]:
            report(f"[stream] micro-batch {epoch}: {result['rows']} rows, "
                   f"{result['events_sent']} events sent, {result['dead_letters']} dead "
                   f"letters")

    df = read_table(spark, directory, fmt, stream=True, schema=schema)
    return df.writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint) \
        .trigger(processingTime=f"{every} seconds").start()
