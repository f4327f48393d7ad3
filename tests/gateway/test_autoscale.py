"""Autoscaling (``raycep serve --autoscale MIN..MAX``, issue 38): the decision rule over
looks at the actors' load, its settings and their errors, and the gateway scaling an
in-process cluster up under load and down when idle, every decision logged with its reason,
the matches still one engine's."""
from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from raycep.cep.errors import CepError
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.autoscale import (AutoscaleSettings, Autoscaler, Look, decide,
                                             parse_range)
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import make_stream
from test_scale import QUERIES, engine_ids, read_ids

S = AutoscaleSettings(1, 4, up_after=2, down_after=3)


def hot(p=0.9):
    return Look((p, 0.1))


def cold(p=0.05):
    return Look((p, p))


def test_up_after_consecutive_hot_looks_to_the_target_share():
    assert decide([hot()], 2, S) is None                       # one look is not enough
    want, why = decide([hot(), hot()], 2, S)
    assert want == 4 and "busiest actor 90% busy" in why       # ceil(2 x 0.9 / 0.5)
    assert decide([hot(0.75), hot(0.75)], 1, S)[0] == 2        # at least one more
    assert decide([hot(), hot()], 4, S) is None                # at the maximum
    assert decide([hot(), cold()], 2, S) is None               # not in a row


def test_backpressure_and_full_outboxes_count_as_load():
    refused = [Look((0.1,), refused=3), Look((0.1,), refused=1)]
    want, why = decide(refused, 1, S)
    assert want == 2 and "4 batches refused" in why
    full = [Look((0.1,), outbox=0.6)] * 2
    assert decide(full, 1, S)[1].startswith("an outbox half full")


def test_down_slowly_one_at_a_time_never_below_the_minimum():
    assert decide([cold(), cold()], 3, S) is None              # down waits longer than up
    want, why = decide([cold()] * 3, 3, S)
    assert want == 2 and "at most 5% busy" in why
    assert decide([cold()] * 3, 1, S) is None
    assert decide([cold(), cold(), Look((0.05,), refused=1)], 3, S) is None
    assert decide([Look((0.5, 0.5))] * 6, 3, S) is None        # between low and high: stay


def test_out_of_range_goes_back_into_it():
    assert decide([], 6, S) == (4, "6 actors, above the maximum 4")
    assert decide([], 0, AutoscaleSettings(2, 3))[0] == 2


def test_settings_and_range_errors_name_the_problem():
    assert parse_range("1..8") == (1, 8) and parse_range("3") == (3, 3)
    for bad in ("0..4", "5..2", "a..b", "1..", ""):
        with pytest.raises(CepError, match="--autoscale"):
            parse_range(bad)
    with pytest.raises(CepError, match="minimum .3. is above the maximum .2."):
        AutoscaleSettings(3, 2)
    with pytest.raises(CepError, match="low < high"):
        AutoscaleSettings(1, 2, low=0.8, high=0.5)
    with pytest.raises(CepError, match="interval must be a number of seconds > 0"):
        AutoscaleSettings(1, 2, interval=math.nan)


class _Actors:
    """Actors whose busy seconds grow as the test says (``load``)."""

    def __init__(self, n):
        self.routing = type("R", (), {"partitions": n})()
        self.busy = [0.0] * n
        self.load = 0.0

    async def call(self, j, method):
        assert method == "health"
        self.busy[j] += self.load
        return {"busy": self.busy[j], "refused": 0, "outbox": 0, "outbox_capacity": 10}


def test_the_loop_looks_decides_scales_and_keeps_the_reason():
    clock = [0.0]
    actors = _Actors(1)
    done = []

    async def scale(n):
        done.append(n)
        actors.routing.partitions = n
        actors.busy = [0.0] * n
        return {"seconds": 0.01}
    auto = Autoscaler(AutoscaleSettings(1, 3, interval=1, up_after=2, down_after=2,
                                        cooldown=5), actors, scale, clock=lambda: clock[0])

    async def run(steps, load):
        actors.load = load
        for _ in range(steps):
            clock[0] += 1.0
            await auto.step()
    asyncio.run(run(3, 0.95))           # a first look, then two hot ones
    assert done == [2] and auto.decisions[0]["reason"].startswith("busiest actor 95% busy")
    asyncio.run(run(5, 0.95))           # the cooldown (5 s) after the change, then a decision
    assert done == [2, 3]
    asyncio.run(run(12, 0.0))
    assert done == [2, 3, 2, 1]
    assert [(d["from"], d["to"]) for d in auto.describe()["decisions"]] == \
        [(1, 2), (2, 3), (3, 2), (2, 1)]


def test_raycep_serve_autoscale_scales_up_under_load_and_down_when_idle(capsys):
    """Through the gateway: ``GatewaySettings.autoscale`` (``raycep serve --autoscale``)
    adds actors while a producer keeps them busy and removes them once it stops; every
    decision is in ``GET /v1/scale``; the matches equal one engine's."""
    settings = GatewaySettings(port=0, registry_path=None, plan_every=0, key_groups=16,
                               autoscale=AutoscaleSettings(1, 3, interval=0.1, high=0.02,
                                                           low=0.01, up_after=2,
                                                           down_after=3, cooldown=0.3))
    cluster = InProcessCluster(1, "k", settings)
    cluster.start()
    try:
        client = connect(cluster.url)
        for name, text in QUERIES.items():
            client.register(text, name=name)
        events = make_stream(20000, 13, 10, 0.0, gaps=(0.1, 0.2, 0.5))
        sent = [0]

        def produce():                     # until the cluster grew, then 50 sends more
            sender = connect(cluster.url)
            after = None
            for i in range(0, len(events), 20):
                sender.send(events[i:i + 20])
                sent[0] = i + 20
                if after is None and sender.routing()["partitions"] > 1:
                    after = i
                if after is not None and i - after >= 1000:
                    break
        thread = threading.Thread(target=produce)
        thread.start()
        thread.join(120)
        assert client.routing()["partitions"] >= 2
        events = events[:sent[0]]
        deadline = time.monotonic() + 60
        while client.routing()["partitions"] > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        auto = client.scaling()["autoscale"]
        assert (auto["minimum"], auto["maximum"]) == (1, 3)
        moves = [(d["from"], d["to"]) for d in auto["decisions"]]
        assert moves[0][0] == 1 and moves[0][1] > 1 and moves[-1][1] == 1, moves
        assert all("busy" in d["reason"] for d in auto["decisions"])
        from raycep.gateway import cli
        assert cli.main(["scale", "--gateway", cluster.url]) == 0
        shown = capsys.readouterr().out
        assert "autoscaling between 1 and 3 actors" in shown and "1 -> " in shown
        metrics = _metrics(cluster.url)                  # (GET /metrics)
        assert metrics["raycep_partition_actors"] == 1
        assert metrics["raycep_autoscale_decisions_total"] == len(moves)
        assert metrics["raycep_rescales_total"] == len(moves)
        assert 0 < metrics["raycep_rescale_held_seconds_total"] < 60
        client.advance(1e6, force=True)
        assert client.drained()
        assert read_ids(client) == engine_ids(events)
    finally:
        cluster.stop()


def _metrics(url: str) -> dict:
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.labels}


def test_a_rescale_asks_rays_autoscaler_for_a_cpu_per_actor(monkeypatch):
    """The partition actors ask Ray for no CPU (they share the nodes'), so a rescale asks
    Ray's autoscaler for one per actor itself: KubeRay then adds worker pods."""
    import ray.autoscaler.sdk as sdk
    from raycep.actors.partition import WorkerSettings
    from raycep.gateway.runtime import LocalSpawner, RaySpawner
    asked = []
    monkeypatch.setattr(sdk, "request_resources", lambda **kw: asked.append(kw))
    RaySpawner("k", WorkerSettings(), None, None, 16).reserve(3)
    assert asked == [{"bundles": [{"CPU": 1}] * 3}]
    reserved = []
    monkeypatch.setattr(LocalSpawner, "reserve", lambda self, n: reserved.append(n))
    cluster = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None,
                                                       plan_every=0, key_groups=16))
    cluster.start()
    try:
        client = connect(cluster.url)
        client.scale(3)
        client.scale(1)
        assert reserved == [3, 1]
    finally:
        cluster.stop()
