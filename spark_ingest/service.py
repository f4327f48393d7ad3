"""A warm Spark for ``raycep ingest``: one RayDP session kept by the cluster (issue 36).

Started by ``raycep serve --spark`` as an actor of the cluster (``actors.handles.INGEST``),
it holds a Spark session (Spark on Ray through RayDP, as ``raycep ingest`` starts one) and runs
the ingestion jobs ``raycep ingest`` hands it, one at a time (``run``: ``spark_ingest.job.run_job``).
A job then pays neither Spark's start-up (~10 s: the executor's JVM, RayDP's master) nor the
costs of a first job in a fresh session (Spark's Python worker, the JVM's first query plans,
~4-6 s), which dominate a file of a million events. The input paths must be readable where
the actor and Spark's executors run (the same as for a job's own Spark).
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass

from raycep.actors.handles import connect_ray, connected_address
from raycep.actors.routing import RoutingTable
from raycep.spark_ingest.job import (ARROW_BATCH, ARROW_ROWS, IngestSettings, in_time_order,
                                     read_table, run_job, spark_tasks)
from raycep.spark_ingest.mapping import EventMapping
from raycep.spark_ingest.session import start_spark, stop_spark


@dataclass(frozen=True)
class SparkSettings:
    """The warm Spark's executors (``raycep serve --spark --spark-executors N
    --spark-executor-cores N --spark-executor-memory M``)."""
    executors: int = 1
    cores: int = 1
    memory: str = "1GB"


class IngestService:
    """The cluster's warm Spark. Its calls may overlap (the Ray actor runs several at once:
    ``tasks`` and ``cancel`` answer while ``run`` works); jobs run one after the other."""

    def __init__(self, settings: SparkSettings = SparkSettings(), log: str | None = None):
        started = time.monotonic()
        self.settings = settings
        self.log = log or os.path.join(tempfile.gettempdir(),
                                       f"raycep-ingest-service-{os.getpid()}.log")
        self.spark = start_spark(executors=settings.executors, cores=settings.cores,
                                 memory=settings.memory, log=self.log, level="error")
        self.warm_up = warm_up(self.spark)
        self.startup = time.monotonic() - started
        self.jobs = 0
        self._job = threading.Lock()

    def ready(self) -> dict:
        """Its state: Spark's start-up seconds (the warm-up's of them), the jobs run, whether
        one runs now, the log."""
        return {"startup_seconds": round(self.startup, 3),
                "warm_up_seconds": round(self.warm_up, 3), "jobs": self.jobs,
                "busy": self._job.locked(), "log": self.log,
                "executors": self.settings.executors, "cores": self.settings.cores,
                "memory": self.settings.memory}

    def run(self, paths: list, fmt: str, mapping: EventMapping, routing: dict,
            settings: IngestSettings) -> dict:
        """``run_job`` on this session (after the job before it, if one runs); its summary,
        with ``queued_seconds``: how long it waited for that one."""
        asked = time.monotonic()
        with self._job:
            queued = time.monotonic() - asked
            try:
                out = run_job(self.spark, paths, fmt, mapping, RoutingTable.from_dict(routing),
                              settings)
            finally:
                self.jobs += 1
        out["queued_seconds"] = round(queued, 3)
        return out

    def tasks(self) -> str:
        """Spark's task counts of the job running now (``, Spark tasks 3/8``), or ""."""
        return spark_tasks(self.spark)

    def cancel(self) -> None:
        """Cancel the running job (its caller stopped waiting: Ctrl-C)."""
        self.spark.sparkContext.cancelAllJobs()

    def stop(self) -> None:
        stop_spark(self.spark)


#: rows of the warm-up's file: enough for the JVM to compile its CSV reading and Arrow
#: conversion (a first job of a million rows took ~1.5x the next one's time without)
WARM_ROWS = 200_000


def warm_up(spark, rows: int = WARM_ROWS) -> float:
    """Run what a first job would run for the first time, on a CSV file of ``rows`` rows:
    the driver's order check, Spark's CSV reader and a ``mapInArrow`` stage (the JVM's first
    plans, compiled as it reads), a Python worker (Spark reuses it for the next tasks) that
    imports the job's modules, joins Ray and calls the actors as a push task does. Nothing
    reaches the actors. Returns its seconds."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="raycep-warm-up-") as tmp:
        path = os.path.join(tmp, "warm.csv")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("type,ts,key,value\n")
            handle.writelines(f"A,{k / 10},k{k % 64},{k % 997 / 7}\n" for k in range(rows))
        in_time_order([path], "csv", EventMapping(key_column="key"))   # the driver's check
        spark.conf.set(ARROW_BATCH, str(ARROW_ROWS))
        try:
            read_table(spark, [path], "csv").mapInArrow(
                _joining(connected_address()), "ready boolean").collect()
        finally:
            spark.conf.unset(ARROW_BATCH)
    return time.monotonic() - started


def _joining(address: str | None):
    """Spark-side (warm_up): the push tasks' modules imported, the Ray at ``address`` joined
    and each partition actor asked for its figures (as a job's push task joins it and
    calls them; nothing is sent to them)."""
    def run(batches):
        import pyarrow as pa

        import raycep.cep.io.codec  # noqa: F401  (what a job's tasks import)
        import raycep.spark_ingest.columnar  # noqa: F401
        from raycep.actors.handles import actor_name, optional_handle, result
        from raycep.actors.routing import GLOBAL
        connect_ray(address or "auto", log_to_driver=False, configure_logging=False)
        handles, k = [optional_handle(actor_name(GLOBAL))], 0
        while (handle := optional_handle(actor_name(k))) is not None:
            handles.append(handle)
            k += 1
        for pending in [h.submit("stats") for h in handles if h is not None]:
            result(pending, timeout=30)
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"ready": [True] * batch.num_rows})
    return run
