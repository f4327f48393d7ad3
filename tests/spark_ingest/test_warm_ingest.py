"""``raycep serve --spark``: the cluster keeps a warm Spark, and ``raycep ingest`` runs its jobs
there (issue 36), marked spark and ray.

The cluster (``RayCluster`` with SparkSettings, what ``raycep serve --spark`` starts) runs on a
Ray of this module, whose driver starts no Spark of its own: RayDP names its Java master in
the namespace of the process that starts Spark, here the cluster's service actor. ``raycep
ingest`` runs as a user runs it, in a subprocess, joining that Ray by its address.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import ray

from raycep.actors.handles import INGEST, NAMESPACE
from raycep.gateway.client import connect
from raycep.gateway.runtime import RayCluster
from raycep.gateway.server.service import GatewaySettings
from raycep.spark_ingest.service import SparkSettings

from cluster_helpers import read_all

pytestmark = [pytest.mark.spark, pytest.mark.ray]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TICKS = ROOT / "examples" / "ticks.csv"
ALL = "PATTERN SEQ(Stock a) WHERE [symbol] WITHIN 1 seconds"
BAD = ["Stock,not-a-time,AAPL,1.0,10", "Stock,,AAPL,1.0,10"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("warm")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             namespace="raycep-warm-tests")
    c = RayCluster(2, "symbol", GatewaySettings(port=0, registry_path=str(tmp / "r.sqlite"),
                                                match_capacity=50_000),
                   spark=SparkSettings(), spark_log=str(tmp / "spark.log"))
    c.start()
    yield c
    c.stop()
    deadline = time.monotonic() + 30                 # stopped with the cluster (Ray frees
    while time.monotonic() < deadline:               # a killed actor's name soon after)
        try:
            ray.get_actor(INGEST, namespace=NAMESPACE)
        except ValueError:
            break
        time.sleep(0.1)
    with pytest.raises(ValueError):
        ray.get_actor(INGEST, namespace=NAMESPACE)
    ray.shutdown()


def ingest(cluster, path: str, cwd, *extra) -> tuple:
    """``raycep ingest PATH`` in ``cwd``: ``(summary, stderr)``."""
    proc = subprocess.run(
        [sys.executable, "-m", "raycep", "ingest", path, "--gateway", cluster.url,
         "--ray-address", ray.get_runtime_context().gcs_address, "--batch-size", "100",
         *extra],
        cwd=cwd, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.splitlines()) == 1, proc.stdout[:3000]
    return json.loads(proc.stdout), proc.stderr


def test_ingest_runs_on_the_clusters_warm_spark(cluster, tmp_path):
    """Two files, one after the other, on the warm Spark (no Spark start-up of their own,
    relative paths resolved where the command runs), every event at the actors once, the
    bad rows in dead letters beside the command."""
    client = connect(cluster.url)
    client.register(ALL, name="all")
    lines = TICKS.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], lines[1:601]
    (tmp_path / "a.csv").write_text("\n".join([header, *rows[:300]]) + "\n")
    (tmp_path / "b.csv").write_text("\n".join([header, *rows[300:], *BAD]) + "\n")
    first, err = ingest(cluster, "a.csv", tmp_path)
    assert first["spark"] == "warm" and first["events_sent"] == 300
    assert "[ingest] the cluster's warm Spark" in err and "starting Spark" not in err
    assert first["queued_seconds"] == 0
    second, err = ingest(cluster, "b.csv", tmp_path)
    assert second["spark"] == "warm" and second["events_sent"] == 300
    assert second["dead_letters"] == 2
    assert second["dead_letter_dir"].startswith(str(tmp_path / "raycep-dead-letters"))
    assert second["spark_startup_seconds"] < first["spark_startup_seconds"] + 5
    info = ray.get(ray.get_actor(INGEST, namespace=NAMESPACE).ready.remote())
    assert info["jobs"] == 2 and info["warm_up_seconds"] > 0 and not info["busy"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = read_all(client, "all")
        if len(got) >= 600:
            break
        time.sleep(0.5)
    ids = [m["events"]["a"]["id"] for m in got]
    assert len(ids) == 600 == len(set(ids))


class _Broken:
    """A warm Spark whose start failed (no Java, no memory): its constructor raises."""

    def __init__(self):
        raise RuntimeError("JAVA_HOME is not set")

    def ready(self):                      # pragma: no cover  (never constructed)
        return {}


def test_a_warm_spark_that_failed_to_start_is_passed_over_saying_why(cluster, capsys):
    """``raycep ingest`` asks the cluster's warm Spark; when its actor died starting, the
    command goes on with a Spark of its own and says why on stderr (here checked without
    starting one: the decision alone)."""
    from raycep.gateway.cli.ingest import StatusLine, _warm_spark
    warm = ray.get_actor(INGEST, namespace=NAMESPACE)
    ray.kill(warm)                                    # the fixture's: replaced by a broken one
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get_actor(INGEST, namespace=NAMESPACE)
        except ValueError:
            break
        time.sleep(0.1)
    from ray import cloudpickle                    # tests/ is not on the workers' path
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    broken = ray.remote(_Broken).options(name=INGEST, namespace=NAMESPACE).remote()
    try:
        status = StatusLine(in_place=False)
        assert _warm_spark(status, time.monotonic()) is None
        status.close()
        err = capsys.readouterr().err
        assert "the cluster's warm Spark is not available" in err
        assert "JAVA_HOME is not set" in err and "starting Spark for this job" in err
    finally:
        ray.kill(broken)
        cluster.ingest = None                         # (nothing left to stop)
