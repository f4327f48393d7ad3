"""Fixtures shared by the test modules."""
import pytest

from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings


@pytest.fixture
def make_cluster():
    """Start InProcessClusters (key attribute ``k``, no registry file, no planner rounds
    unless given); all are stopped at teardown. ``disorder`` / ``mode``: the partitions'
    out-of-order settings."""
    started = []

    def start(partitions=2, key_attr="k", disorder=None, mode=None, **kw):
        kw.setdefault("port", 0)
        kw.setdefault("registry_path", None)
        kw.setdefault("plan_every", 0)
        cluster = InProcessCluster(partitions, key_attr, GatewaySettings(**kw),
                                   disorder=disorder, mode=mode)
        started.append(cluster)
        cluster.start()
        return cluster
    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def cluster(make_cluster):
    """One in-process cluster with the defaults of ``make_cluster``."""
    return make_cluster()


@pytest.fixture
def client(cluster):
    """A Client connected to ``cluster``."""
    return connect(cluster.url)
