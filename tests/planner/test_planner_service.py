"""The planner service: statistics from partitions, merged and re-planned (in-process and as a
Ray actor); the gateway installs the new plans on the actors."""
import pytest

from raycep.actors.handles import actor_class
from raycep.cep import PlanningError
from raycep.planner.adaptive import AdaptationSettings
from raycep.planner.service import PlannerService

QUERY = "PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.x = c.x AND b.x = c.x WITHIN 10 seconds"


def report(service, partition, rates, keys=5):
    service.report(partition, "q", rates, tested={0: 100, 1: 100}, passed={0: 10, 1: 10},
                   keys=keys)


def test_merges_partition_statistics_and_returns_new_versions():
    service = PlannerService(AdaptationSettings(threshold=2.0, margin=0.1))
    service.register("q", QUERY, partitioned=True)
    assert service.replan() == {}                     # no statistics yet: nothing to plan
    report(service, "p1", {"A": 50.0, "B": 1.0, "C": 5.0})
    report(service, "p2", {"A": 50.0, "B": 1.0, "C": 5.0})
    stats = service.statistics("q")
    assert stats.rates == {"A": 10.0, "B": 0.2, "C": 1.0}          # 100 A/s over 10 keys
    # both partitions' counts, Laplace-smoothed as raycep local's (planner.stats)
    assert stats.selectivities == {0: pytest.approx(21 / 202), 1: pytest.approx(21 / 202)}
    first = service.replan()["q"]
    assert first["version"] == 1 and first["order"] == ["c", "b", "a"]
    report(service, "p1", {"A": 55.0, "B": 1.1, "C": 5.0})          # noise: no new plan
    assert service.replan() == {}
    service.report_many([("p1", "q", {"A": 1.0, "B": 50.0, "C": 5.0}, {0: 100, 1: 100},
                          {0: 10, 1: 10}, 5),
                         ("p2", "q", {"A": 1.0, "B": 50.0, "C": 5.0}, {0: 100, 1: 100},
                          {0: 10, 1: 10}, 5)])               # drift on both partitions
    second = service.replan()["q"]
    assert second["version"] == 2 and second["order"] == ["c", "a", "b"]
    assert service.plans()["q"]["version"] == 2


def test_the_gateway_installs_new_plans_on_the_querys_actors(make_cluster, caplog):
    """The gateway is the one coordinator: a planner round collects the actors' statistics,
    the planner returns the new plan, the gateway installs it on every partition actor of
    the keyed query; an actor that fails is logged and does not stop the others."""
    from unittest import mock

    from raycep.gateway.client import connect
    cluster = make_cluster()
    client = connect(cluster.url)
    client.register(QUERY, name="q")
    workers = [w for t, w in cluster.workers.items() if "q" in w.queries()]
    assert len(workers) == 2
    events = [{"type": t, "ts": i * 0.5, "k": f"k{i % 3}", "x": 1}
              for i, t in enumerate("AAAAAAAAAABCAAAAAAAAAABC" * 20)]
    client.send(events)
    broken, alive = workers
    with mock.patch.object(broken, "set_plan", side_effect=ConnectionError("actor died")):
        changed = cluster._run(cluster.server.service.plan_round())
    assert changed["q"]["version"] == 1
    order = tuple(changed["q"]["order"])
    manager = alive.engine.managers["q"]
    assert (manager.order, manager.version) == (order, 1) and not alive.own_plans
    # the broken actor keeps the plan it made itself after 200 events (WorkerSettings.first_plan)
    assert broken.own_plans == {"q"} and broken.engine.managers["q"].order is not None
    assert "actor died" in caplog.text


def test_errors_name_the_query():
    service = PlannerService()
    with pytest.raises(PlanningError, match="unknown query 'nope'"):
        service.report("p", "nope", {}, {}, {})
    service.register("q", QUERY)
    with pytest.raises(PlanningError, match="already planned"):
        service.register("q", QUERY)


@pytest.mark.ray
def test_planner_actor_on_ray_returns_new_plans_through_a_handle():
    """The planner as a Ray actor, called through actors.handles as the gateway calls it."""
    from raycep.actors.handles import RayHandle, connect_ray

    import ray
    connect_ray("local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        planner = RayHandle(actor_class(PlannerService).remote(
            AdaptationSettings(threshold=2.0)))
        planner.get("register", "q", QUERY, None, None, True)
        planner.get("report_many", [("p1", "q", {"A": 50.0, "B": 1.0, "C": 5.0},
                                     {0: 100, 1: 100}, {0: 10, 1: 10}, 5)])
        changed = planner.get("replan")
        assert changed["q"]["version"] == 1 and changed["q"]["order"] == ["c", "b", "a"]
        assert planner.get("plans")["q"]["version"] == 1
    finally:
        ray.shutdown()
