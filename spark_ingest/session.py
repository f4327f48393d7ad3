"""Starting Spark for an ingestion job: on the local Ray through RayDP (default), or an
existing Spark master whose Python workers join the Ray cluster at ``ray_address``."""
from __future__ import annotations

import os
import sys
import uuid


def start_spark(master: str | None = None, app: str | None = None, executors: int = 1,
                cores: int = 1, memory: str = "1GB"):
    """A SparkSession. Spark's Python workers must run this interpreter (else they fail with
    "No module named pyspark"), so PYSPARK_PYTHON is set to it unless already set.

    The application name is unique per call (``raycep-ingest-<random>``) unless given: RayDP
    names its master actor after it, so two jobs with one name cannot share a Ray cluster.
    RayDP also names its Java app master ``RAY_APP_MASTER`` in the driver's Ray namespace:
    two Sparks on one Ray need drivers in different namespaces as well."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    app = app or f"raycep-ingest-{uuid.uuid4().hex[:8]}"
    if master:
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master(master).appName(app) \
            .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]).getOrCreate()
    else:
        import raydp
        spark = raydp.init_spark(app_name=app, num_executors=executors,
                                 executor_cores=cores, executor_memory=memory)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark, master: str | None = None):
    if master:
        spark.stop()
    else:
        import raydp
        raydp.stop_spark()
