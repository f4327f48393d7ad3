"""Statistics, the adaptive re-planning policy and the in-process planned engine."""
import itertools
import random

import pytest

from raycep.cep import Engine, Event, PlanningError
from raycep.cep.lang.compiler import compile_query
from raycep.gateway.cli import main
from raycep.planner.adaptive import AdaptationSettings, AdaptivePolicy
from raycep.planner.local import PlannedEngine, settings_for
from raycep.planner.stats import RateTracker, SelectivityEstimator, SelectivityTracker, Statistics

SEQ3 = "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x = c.x WITHIN 10 seconds"


def drifting_stream(n_per_phase=3000, seed=3):
    """Three phases; the rarest of A/B changes between them (C is always the trigger)."""
    rng = random.Random(seed)
    phases = [{"A": 50, "B": 1, "C": 5}, {"A": 1, "B": 50, "C": 5}, {"A": 50, "B": 1, "C": 5}]
    out, ts = [], 0.0
    for rates in phases:
        types, weights = list(rates), list(rates.values())
        for _ in range(n_per_phase):
            ts += rng.expovariate(sum(weights))
            out.append(Event(rng.choices(types, weights)[0], ts, {"x": rng.randint(0, 9)}))
    return out


def keys(matches):
    ks = [m.key() for m in matches]
    assert len(ks) == len(set(ks))
    return set(ks)


def run(engine, events):
    out = []
    for e in events:
        out += engine.process(e)
    return out + engine.advance(float("inf"))


# --------------------------------------------------------------------------- statistics

def test_rate_tracker_measures_events_per_second_over_the_horizon():
    rt = RateTracker(horizon=10, buckets=10)
    for i in range(1000):                  # A every 0.1 s, B every 1 s
        rt.observe("A", i * 0.1)
        if i % 10 == 0:
            rt.observe("B", i * 0.1)
    rates = rt.rates()
    assert rates["A"] == pytest.approx(10, rel=0.05)
    assert rates["B"] == pytest.approx(1, rel=0.05)
    for i in range(1000, 1200):           # A stops: after a horizon only B is counted
        rt.observe("B", i * 0.1)
    assert "A" not in rt.rates() and rt.rates()["B"] == pytest.approx(10, rel=0.05)


def test_selectivity_tracker_reads_the_evaluators_counters():
    eng = Engine()
    eng.add_query(SEQ3, name="q")
    tracker = SelectivityTracker(eng.managers["q"].cq, min_tested=10)
    run(eng, drifting_stream(800))
    sel = tracker.sample()
    assert 0.3 < sel[0] < 0.7              # a.x < b.x with uniform x in 0..9
    assert 0.05 < sel[1] < 0.2             # b.x = c.x


def test_deviation():
    s1 = Statistics({"A": 10.0, "B": 1.0}, {0: 0.5})
    assert s1.deviation(Statistics({"A": 12.0, "B": 0.9}, {0: 0.45})) < 1.3
    assert s1.deviation(Statistics({"A": 1.0, "B": 10.0}, {0: 0.5})) == pytest.approx(10)


def test_selectivity_estimator_waits_for_enough_counts_and_smooths():
    """The one estimator of raycep local and the cluster's planner: counts below min_tested
    wait (accumulated), Laplace smoothing, then an average with the previous estimate."""
    est = SelectivityEstimator(min_tested=50, smoothing=0.5)
    est.add({0: 30, "1": 100}, {0: 0, "1": 10})              # keys as ints or strings
    assert est.sample() == {1: pytest.approx(11 / 102)}       # conjunct 0: 30 < 50, waits
    est.add({0: 30}, {0: 0})
    first = est.sample()[0]
    assert first == pytest.approx(1 / 62)                     # 60 tested, 0 passed: not 0
    est.add({0: 100}, {0: 50})
    assert est.sample()[0] == pytest.approx(0.5 * first + 0.5 * 51 / 102)
    assert est.sample()[0] == pytest.approx(0.5 * first + 0.5 * 51 / 102)   # nothing new


# --------------------------------------------------------------------------- the policy

def test_policy_replans_after_drift_not_on_noise():
    cq = compile_query(SEQ3)
    policy = AdaptivePolicy(cq, "q", AdaptationSettings(threshold=2.0, margin=0.1))
    base = Statistics({"A": 50.0, "B": 1.0, "C": 5.0}, {0: 0.5, 1: 0.1})
    first = policy.consider(base)
    assert first.version == 1 and first.order[0] == "c"
    assert first.order.index("b") < first.order.index("a")          # rare B bound first
    rng = random.Random(1)
    for _ in range(50):                                              # noise within 30 %
        noisy = Statistics({t: r * rng.uniform(0.7, 1.3) for t, r in base.rates.items()},
                           {k: v * rng.uniform(0.8, 1.2) for k, v in base.selectivities.items()})
        assert policy.consider(noisy) is None
    assert policy.replans == 0
    drifted = Statistics({"A": 1.0, "B": 50.0, "C": 5.0}, {0: 0.5, 1: 0.1})
    second = policy.consider(drifted)
    assert second is not None and second.version == 2
    assert second.order.index("a") < second.order.index("b")        # now A is the rare one
    assert policy.consider(drifted) is None                          # no change, no re-plan


def test_hysteresis_keeps_a_plan_that_is_nearly_as_good():
    cq = compile_query("PATTERN SEQ(A a, B b, C c) WHERE a.x = c.x AND b.x = c.x WITHIN 10 s")
    policy = AdaptivePolicy(cq, "q", AdaptationSettings(threshold=1.05, margin=0.2))
    first = policy.consider(Statistics({"A": 10.0, "B": 9.0, "C": 1.0}))
    assert first.order == ("c", "b", "a")
    # A becomes the rarer one, a little: re-planned (deviation > 1.05), but the other order is
    # better by less than the 20 % margin (2.4 %), so the plan stays
    assert policy.consider(Statistics({"A": 9.0, "B": 10.0, "C": 1.0})) is None
    assert policy.replans == 1 and policy.swaps == 0
    # a large change pays off (23 % cheaper)
    swapped = policy.consider(Statistics({"A": 9.0, "B": 100.0, "C": 1.0}))
    assert swapped.order == ("c", "a", "b") and swapped.version == 2
    assert policy.replans == 2 and policy.swaps == 1


def test_static_and_tree_nfa_settings():
    assert settings_for("tree-nfa") is None
    assert settings_for("GREEDY").adaptive is False
    assert settings_for("adaptive:II-GREEDY").algorithm == "II-GREEDY"
    with pytest.raises(PlanningError, match="unknown planner"):
        settings_for("BOGUS")
    with pytest.raises(PlanningError, match="threshold"):
        AdaptationSettings(threshold=0.5)


# --------------------------------------------------------------------------- in the engine

def test_adaptive_engine_swaps_plans_and_finds_the_same_matches():
    events = drifting_stream()
    reference = Engine()
    reference.add_query(SEQ3, name="q")
    expected = keys(run(reference, events))
    planned = PlannedEngine(check_every=500, horizon=20)
    planned.add_query(SEQ3, name="q", planner="adaptive")
    assert keys(run(planned, events)) == expected
    versions = [c.version for c in planned.history]
    assert versions[0] == 1 and len(versions) >= 3, planned.history    # swapped back and forth
    orders = {c.order for c in planned.history}
    assert ("c", "b", "a") in orders and ("c", "a", "b") in orders


@pytest.mark.parametrize("first,second", list(itertools.permutations(
    itertools.permutations("abc"), 2))[:12])
def test_matches_do_not_change_across_a_plan_swap_mid_stream(first, second):
    events = drifting_stream(600)
    reference = Engine()
    reference.add_query(SEQ3, name="q")
    expected = keys(run(reference, events))
    eng = Engine()
    eng.add_query(SEQ3, name="q", order=first)
    out = []
    for i, e in enumerate(events):
        if i == len(events) // 2:
            eng.managers["q"].set_order(second)
        out += eng.process(e)
    out += eng.advance(float("inf"))
    assert keys(out) == expected
    assert eng.managers["q"].version == 2


def test_cli_planner_and_order_flags(tmp_path, capsys):
    path = tmp_path / "ev.jsonl"
    path.write_text("\n".join(
        '{"type": "%s", "ts": %s, "x": %d}' % (e.type, e.ts, e.attrs["x"])
        for e in drifting_stream(400)))
    results = {}
    for flags in (["--planner", "tree-nfa"], ["--planner", "GREEDY"], ["--planner", "adaptive"],
                  ["--order", "b,c,a"], ["--planner", "adaptive:II-RANDOM", "--check-every", "50"]):
        out = tmp_path / "m.jsonl"
        assert main(["local", "-q", SEQ3, "-e", str(path), "-o", str(out), *flags]) == 0
        results[tuple(flags)] = sorted(out.read_text().splitlines())
    assert len({tuple(v) for v in results.values()}) == 1 and results[("--order", "b,c,a")]
    err = capsys.readouterr().err
    assert "plan: query q1 v1" in err
    assert main(["local", "-q", SEQ3, "-e", str(path), "--planner", "NOPE"]) == 2
    assert main(["local", "-q", SEQ3, "-e", str(path), "--order", "zz=a,b,c"]) == 2
    assert "unknown query 'zz'" in capsys.readouterr().err


def test_cli_warns_about_conditions_that_cannot_be_evaluated(tmp_path, capsys):
    path = tmp_path / "ev.csv"
    path.write_text("type,ts,x\nA,1,1\nB,2,5\nA,3,2\nB,4,6\n")
    query = "PATTERN SEQ(A a, B b) WHERE a.x < b.x AND a.typo > 0 WITHIN 10 seconds"
    assert main(["local", "-q", query, "-e", str(path)]) == 0
    err = capsys.readouterr().err
    assert "condition `a.typo > 0` could not be evaluated" in err and "'typo'" in err
