"""benchmarks.bench_disorder in quick mode: correctness properties only, no timing."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_disorder as bd  # noqa: E402


@pytest.fixture(scope="module")
def quick():
    return bd.run_all(bd.QUICK, progress=lambda msg: None)


def test_arrivals_are_a_seeded_permutation_plus_copies():
    events = bd.stream(bd.Config(events=500))
    row = bd.Row(0.4, 5, 0.2)
    a, b = bd.arrivals(events, row, 2.0, 7), bd.arrivals(events, row, 2.0, 7)
    assert [e.id for e in a] == [e.id for e in b]
    assert {e.id for e in a} == {e.id for e in events}
    assert len(a) > len(events)                          # some sent twice
    assert [e.id for e in a] != [e.id for e in events]   # and some out of order
    assert [e.id for e in bd.arrivals(events, bd.Row(0.0, 0.0, 0.0), 2.0, 7)] == \
        [e.id for e in events]


def test_within_threshold_precision_and_recall_are_one_in_both_modes(quick):
    ref, results, misses = quick
    assert misses == []
    assert len(results) == len(bd.QUICK.rows)
    for row, result in results:
        assert set(result) == set(bd.MODES)
        for mode, r in result.items():
            assert (row.label, mode, r["precision_thr"], r["recall_thr"]) == \
                (row.label, mode, 1.0, 1.0)
            assert r["problems"] == []
            assert r["matches"] > 0
            assert r["modes_agree"] or not r["same_late"]


def test_pessimistic_never_retracts_and_optimistic_corrects_negations(quick):
    _, results, _ = quick
    assert all(r["pessimistic"]["retractions"] == 0 for _, r in results)
    negation_retractions = [r["optimistic"]["retractions_by_query"][q]
                            for _, r in results for q in bd.NEGATION_QUERIES]
    assert sum(negation_retractions) > 0


def test_fixed_slack_sends_events_to_the_late_output_and_costs_recall_over_all(quick):
    _, results, _ = quick
    fixed = [r for row, r in results if row.setting == "fixed"]
    assert fixed
    for r in fixed:
        for mode in bd.MODES:
            assert r[mode]["late"] > 0 and r[mode]["late_unused"] > 0
            assert r[mode]["recall_all"] < 1.0                  # the late events' matches
            assert r[mode]["expected_thr"] < r[mode]["expected_all"]


def test_latency_is_measured_and_pessimistic_waits_for_the_watermark(quick):
    _, results, _ = quick
    for _, r in results:
        o, p = r["optimistic"], r["pessimistic"]
        assert 0.0 <= o["latency_p50"] <= o["latency_p99"] <= o["latency_max"]
        assert o["latency_p50"] < p["latency_p50"]
        assert p["latency_p50"] >= bd.QUICK.slack


def test_target_met_reports_misses():
    ok = {"precision_thr": 1.0, "recall_thr": 1.0, "retractions": 0, "problems": [],
          "modes_agree": True, "same_late": True}
    assert bd.target_met({"optimistic": dict(ok, retractions=3), "pessimistic": ok}) == []
    bad = bd.target_met({"optimistic": dict(ok, recall_thr=0.99),
                         "pessimistic": dict(ok, retractions=1)})
    assert len(bad) == 2 and "optimistic" in bad[0] and "pessimistic" in bad[1]


def test_main_exit_status_follows_the_target(monkeypatch, capsys):
    monkeypatch.setattr(bd, "QUICK", bd.Config(events=600, rows=(bd.Row(0.2, 2, 0.1),)))
    assert bd.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "target met" in out and "TARGET MISSED" not in out


def test_reference_without_reevaluates_only_the_touched_symbols_correctly():
    qs = bd.queries()
    bd.check_partitioned(qs)
    events = bd.stream(bd.Config(events=1500))
    ref_all = bd.reference(qs, events)
    drop = frozenset(e.id for e in events[100:1500:37])
    full = set(bd.reference(qs, [e for e in events if e.id not in drop]))
    assert bd.reference_without(qs, events, ref_all, drop) == full
    assert full != set(ref_all)
    assert bd.reference_without(qs, events, ref_all, frozenset()) == set(ref_all)
