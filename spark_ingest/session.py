"""Starting Spark for an ingestion job: on the local Ray through RayDP (default), or an
existing Spark master whose Python workers join the Ray cluster at ``ray_address``.

Spark is started quiet: no console progress bars, no web UI, and a Log4j 2 configuration
of its own (RayDP points Log4j at a file it does not ship, so Log4j printed ``ERROR
StatusConsoleListener Reconfiguration failed`` on stdout). The JVM's own output (Spark,
Hadoop, and the Ray Java runtime RayDP loads, which logs to stdout) goes to ``log`` when
given, else to this process's stderr; never to its stdout.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid

#: Log4j 2 configuration of the Spark driver: WARN and above, on the JVM's stderr; the
#: shell's own logger at the same level (else Spark prints "Setting default log level")
LOG4J2 = """\
status = error
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
"""


def log4j_config(level: str = "warn") -> str:
    """The path of a Log4j 2 properties file for the driver (written once per level)."""
    path = os.path.join(tempfile.gettempdir(), f"raycep-log4j2-{level}.properties")
    text = LOG4J2.format(level=level)
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


def start_spark(master: str | None = None, app: str | None = None, executors: int = 1,
                cores: int = 1, memory: str = "1GB", log: str | None = None,
                level: str = "warn"):
    """A SparkSession. Spark's Python workers must run this interpreter (else they fail with
    "No module named pyspark"), so PYSPARK_PYTHON is set to it unless already set.

    ``log``: a file that receives the JVM's output (Spark's, Hadoop's and Ray Java's logs);
    None: this process's stderr. ``level``: Log4j level of the driver (warn, error, info).

    The application name is unique per call (``raycep-ingest-<random>``) unless given: RayDP
    names its master actor after it, so two jobs with one name cannot share a Ray cluster.
    RayDP also names its Java app master ``RAY_APP_MASTER`` in the driver's Ray namespace:
    two Sparks on one Ray need drivers in different namespaces as well."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    app = app or f"raycep-ingest-{uuid.uuid4().hex[:8]}"
    config = log4j_config(level)
    quiet = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false"}
    with jvm_output(log):
        if master:
            from pyspark.sql import SparkSession
            builder = SparkSession.builder.master(master).appName(app) \
                .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"]) \
                .config("spark.driver.extraJavaOptions",
                        f"-Dlog4j2.configurationFile=file:{config}")
            for key, value in quiet.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
        else:
            import raydp
            spark = raydp.init_spark(app_name=app, num_executors=executors,
                                     executor_cores=cores, executor_memory=memory,
                                     configs={**quiet, "spark.log4j.config.file.name": config})
    spark.sparkContext.setLogLevel(level.upper())
    return spark


@contextlib.contextmanager
def jvm_output(log: str | None):
    """While Spark's JVM starts (it inherits this process's file descriptors), point fd 1
    at ``log`` (or at stderr) and, with ``log``, fd 2 too; restored afterwards."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log \
        else os.dup(2)
    try:
        os.dup2(target, 1)
        if log:
            os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def stop_spark(spark, master: str | None = None):
    if master:
        spark.stop()
    else:
        import raydp
        raydp.stop_spark()
