"""Smoke and correctness tests of the planner benchmarks on tiny inputs (no timing assertions):
each command runs end to end, and the runs it compares find identical matches."""
import itertools
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_adaptive, bench_cost_validity, bench_planning_time  # noqa: E402
from raycep.cep.lang.compiler import compile_query  # noqa: E402
from raycep.cep.lang.parser import parse_query  # noqa: E402


def quiet(*args, **kwargs):
    pass


# --------------------------------------------------------------------------- bench_adaptive

TINY = bench_adaptive.Config(phase_events=1500, phases=4, window=4.0, keys=80, check_every=200)


def test_adaptive_stream_alternates_the_rare_type():
    events = bench_adaptive.make_events(TINY)
    assert len(events) == TINY.phases * TINY.phase_events
    assert all(x.ts < y.ts for x, y in zip(events, events[1:]))
    assert len({e.id for e in events}) == len(events)
    n = TINY.phase_events
    for p in range(TINY.phases):
        chunk = events[p * n:(p + 1) * n]
        count = {t: sum(1 for e in chunk if e.type == t) for t in "ABC"}
        rare, common = ("A", "B") if p % 2 == 0 else ("B", "A")
        assert count[rare] < count[common] / 20


def test_adaptive_runs_find_identical_matches():
    events = bench_adaptive.make_events(TINY)
    runs = bench_adaptive.static_runs() + ["tree-nfa", "EFREQ", *bench_adaptive.ADAPTIVE]
    results = bench_adaptive.run_all(TINY, events, runs, repeats=1, log=quiet)
    reference = results[0]["matches"]
    assert reference, "the tiny stream should produce matches"
    assert all(r["matches"] == reference for r in results)
    by = {r["run"]: r for r in results}
    # orders that differ only in where the trigger c stands do the same work
    for group in (("abc", "acb", "cab"), ("bac", "bca", "cba")):
        assert len({tuple(by[g]["evals"]) for g in group}) == 1
    timed_phases = [len(r["seconds"]) for r in results]
    assert all(n == TINY.phases for n in timed_phases)
    assert by["adaptive:DP-LD"]["changes"], "the planned runs install a plan"
    verdict = bench_adaptive.report(TINY, results, log=quiet)
    assert verdict["matches_equal"]


def test_adaptive_main_quick_entry(capsys):
    assert bench_adaptive.main(["--quick", "--phase-events", "800", "--window", "4"]) == 0
    out = capsys.readouterr().out
    assert "matches:" in out and "target adaptive:DP-LD" in out and "sensitivity" in out


# --------------------------------------------------------------------------- bench_planning_time

@pytest.mark.parametrize("shape", bench_planning_time.SHAPES)
def test_random_patterns_compile_with_the_requested_size(shape):
    rng = bench_planning_time.random.Random(1)
    for n in (3, 5, 8):
        text, rates, sels = bench_planning_time.random_query(shape, n, rng)
        cq = compile_query(parse_query(text))
        assert len(cq.positive_names) == n
        assert set(sels) == set(range(len(cq.conjuncts)))


def test_planning_time_dp_ld_is_never_beaten():
    r = bench_planning_time.measure("AND", 5, 2, seed=3)
    for alg, costs in r["cost"].items():
        assert all(c >= d * (1 - 1e-9) for c, d in zip(costs, r["cost"]["DP-LD"])), alg


def test_planning_time_main_quick_entry(capsys):
    assert bench_planning_time.main(["--quick", "--max-vars", "5", "--instances", "1"]) == 0
    assert "DP-LD was never beaten" in capsys.readouterr().out


# --------------------------------------------------------------------------- bench_cost_validity

def test_spearman_with_ties():
    s = bench_cost_validity
    assert s.ranks([10, 20, 20, 5]) == [2.0, 3.5, 3.5, 1.0]
    assert s.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert s.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert s.spearman([1, 2, 3], [1, 1, 1]) != s.spearman([1, 2, 3], [1, 1, 1])   # nan
    # textbook example: d = (0, 1, -1), rho = 1 - 6 * 2 / (3 * 8) = 0.5
    assert s.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)


def test_executed_orders_put_the_seq_trigger_first():
    s = bench_cost_validity
    seq = compile_query(parse_query("PATTERN SEQ(A a, B b, C c) WITHIN 5 seconds"))
    assert s.executed_orders(seq) == [("c", "a", "b"), ("c", "b", "a")]
    conj = compile_query(parse_query("PATTERN AND(A a, B b, C c) WITHIN 5 seconds"))
    assert s.executed_orders(conj) == list(itertools.permutations(("a", "b", "c")))


def test_cost_validity_orders_find_identical_matches():
    rows = bench_cost_validity.collect(3, log=quiet)
    assert len(rows) >= 30
    assert all(r["same"] for r in rows)
    assert any(r["matches"] for r in rows)
    assert all(r["cost"] > 0 and r["scan"] > 0 and r["evals"] >= 0 for r in rows)
    out = bench_cost_validity.report(rows, log=quiet)
    assert all(-1 <= v[0] <= 1 or math.isnan(v[0]) for v in out.values())


def test_cost_validity_main_quick_entry(capsys):
    assert bench_cost_validity.main(["--quick", "--windows", "2"]) == 0
    assert "Spearman" in capsys.readouterr().out
