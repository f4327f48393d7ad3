"""The planner service: statistics from partitions, merged, re-planned, pushed (in-process and
as a Ray actor)."""
import time

import pytest

from cep import PlanningError
from planner.adaptive import AdaptationSettings
from planner.service import PlannerService, planner_actor

QUERY = "PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.x = c.x AND b.x = c.x WITHIN 10 seconds"


class Recorder:
    def __init__(self):
        self.plans = []

    def set_plan(self, query, order, version):
        self.plans.append((query, tuple(order) if order else None, version))


def report(service, partition, rates, keys=5):
    service.report(partition, "q", rates, tested={0: 100, 1: 100}, passed={0: 10, 1: 10},
                   keys=keys)


def test_merges_partition_statistics_and_pushes_new_versions():
    service = PlannerService(AdaptationSettings(threshold=2.0, margin=0.1))
    service.register("q", QUERY, partitioned=True)
    p1, p2 = Recorder(), Recorder()
    service.subscribe("p1", p1)
    service.subscribe("p2", p2)
    assert service.replan() == {}                     # no statistics yet: nothing to plan
    report(service, "p1", {"A": 50.0, "B": 1.0, "C": 5.0})
    report(service, "p2", {"A": 50.0, "B": 1.0, "C": 5.0})
    stats = service.statistics("q")
    assert stats.rates == {"A": 10.0, "B": 0.2, "C": 1.0}          # 100 A/s over 10 keys
    assert stats.selectivities == {0: 0.1, 1: 0.1}
    first = service.replan()["q"]
    assert first["version"] == 1 and first["order"] == ["c", "b", "a"]
    assert p1.plans == p2.plans == [("q", ("c", "b", "a"), 1)]
    report(service, "p1", {"A": 55.0, "B": 1.1, "C": 5.0})          # noise: no new plan
    assert service.replan() == {}
    report(service, "p1", {"A": 1.0, "B": 50.0, "C": 5.0})          # drift on both partitions
    report(service, "p2", {"A": 1.0, "B": 50.0, "C": 5.0})
    second = service.replan()["q"]
    assert second["version"] == 2 and second["order"] == ["c", "a", "b"]
    assert p1.plans[-1] == p2.plans[-1] == ("q", ("c", "a", "b"), 2)
    assert service.plans()["q"]["version"] == 2


def test_an_unreachable_partition_does_not_stop_the_others(caplog):
    class Broken:
        def set_plan(self, *args):
            raise ConnectionError("actor died")
    service = PlannerService()
    service.register("q", QUERY)
    ok = Recorder()
    service.subscribe("dead", Broken())
    service.subscribe("alive", ok)
    report(service, "alive", {"A": 5.0, "B": 1.0, "C": 1.0})
    assert service.replan()["q"]["version"] == 1
    assert ok.plans and "actor died" in caplog.text


def test_errors_name_the_query():
    service = PlannerService()
    with pytest.raises(PlanningError, match="unknown query 'nope'"):
        service.report("p", "nope", {}, {}, {})
    service.register("q", QUERY)
    with pytest.raises(PlanningError, match="already planned"):
        service.register("q", QUERY)


@pytest.mark.ray
def test_planner_actor_on_ray_pushes_plans_to_partition_actors():
    import ray

    class PartitionStub:        # defined here so Ray ships it by value to the worker
        def __init__(self):
            self.plans = []

        def set_plan(self, query, order, version):
            self.plans.append((query, tuple(order) if order else None, version))

        def received(self):
            return self.plans

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        partition = ray.remote(PartitionStub).remote()
        planner = planner_actor().remote(AdaptationSettings(threshold=2.0))
        ray.get(planner.register.remote("q", QUERY, None, None, True))
        ray.get(planner.subscribe.remote("p1", partition))
        ray.get(planner.report.remote("p1", "q", {"A": 50.0, "B": 1.0, "C": 5.0},
                                      {0: 100, 1: 100}, {0: 10, 1: 10}, 5))
        changed = ray.get(planner.replan.remote())
        assert changed["q"]["version"] == 1
        received = []
        for _ in range(100):          # the push is asynchronous: wait for it, 10 s at most
            received = ray.get(partition.received.remote())
            if received:
                break
            time.sleep(0.1)
        assert received == [("q", ("c", "b", "a"), 1)]
    finally:
        ray.shutdown()
