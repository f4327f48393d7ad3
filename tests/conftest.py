"""Fixtures shared by the test modules, and the hypothesis profile of the property tests."""
import os

import pytest
from hypothesis import settings

from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

# Property tests draw the same examples on every run (``ci``, the default): a CI run cannot
# fail on an example the run before it never drew, and a failure reproduces. Searching new
# examples is a separate run: ``RAYCEP_HYPOTHESIS=explore python3 -m pytest -q`` (fresh
# random draws; a failure found there becomes an explicit test).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("RAYCEP_HYPOTHESIS", "ci"))


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
