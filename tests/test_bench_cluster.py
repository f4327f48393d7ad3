"""benchmarks.bench_cluster at tiny sizes: correctness properties only, no timing."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_cluster as bc  # noqa: E402
from raycep.cep.lang.compiler import compile_query  # noqa: E402
from raycep.cep.lang.parser import parse_query  # noqa: E402


def total_matches(batches, queries):
    worker = bc.make_worker(queries)
    n = sum(len(worker.ingest(b)["matches"]) for b in batches)
    return n + len(worker.advance(math.inf))


def test_ticks_are_deterministic_and_keyed_by_symbol():
    a, b = bc.ticks(500, 16, seed=3), bc.ticks(500, 16, seed=3)
    assert [(e.ts, e.attrs) for e in a] == [(e.ts, e.attrs) for e in b]
    assert all(e.key == e.attrs["symbol"] for e in a)
    assert len({e.id for e in a}) == 500
    assert all(x.ts < y.ts for x, y in zip(a, a[1:]))
    assert {e.key for e in a} <= set(bc.symbol_names(16))


def test_partitions_cover_the_stream_with_same_batch_size():
    events = bc.ticks(3000, 16)
    for n in (1, 2):
        plan = bc.encode_partitions(events, n, 250)
        assert len(plan) == n
        sizes = [[bc._rows(b) for b in bs] for bs in plan]
        assert sum(map(sum, sizes)) == len(events)
        assert all(s <= 250 for ss in sizes for s in ss)


def test_query_variants_are_distinct_valid_and_share_the_window():
    variants = bc.query_variants(100)
    assert len({name for name, _ in variants}) == 100
    assert len({text for _, text in variants}) == 100
    for _, text in variants:
        assert compile_query(parse_query(text)).window == 30
    sample = dict(bc.sample_queries())
    assert set(sample) == {"dip_recovery", "rally", "clean_breakout"}
    events = bc.ticks(4000, 8)
    batches = bc.encode_partitions(events, 1, 500)[0]
    # the first variant is the sample dip_recovery
    assert total_matches(batches, variants[:1]) == \
        total_matches(batches, [("dip_recovery", sample["dip_recovery"])])


def test_warm_up_events_match_nothing():
    worker = bc.make_worker(bc.sample_queries())
    ack = worker.ingest(bc.encode_batch(bc.warm_events(50), "warm", "w"))
    assert ack["events"] == 50 and ack["matches"] == []
    assert worker.advance(math.inf) == []


def test_index_event_count_equal_for_1_10_100_queries():
    events = bc.ticks(800, 16)
    batches = bc.encode_partitions(events, 1, 200)[0]
    mems = [bc.index_memory(batches, bc.query_variants(n)) for n in (1, 10, 100)]
    assert len({m["buffered"] for m in mems}) == 1
    assert mems[0]["buffered"] > 0 and mems[0]["index"] > 0
    # the index holds the same events whatever the number of queries: same bytes (10%) for
    # 10 and 100; with the single query, which reads across keys, no per-key buffers: fewer
    assert abs(mems[2]["index"] - mems[1]["index"]) <= 0.1 * mems[1]["index"]
    assert mems[0]["index"] <= mems[1]["index"]
    assert mems[2]["json_cache"] <= 0.1 * mems[2]["index"]


def test_queries_part_runs(capsys):
    cfg = bc.Config(query_events=800, query_counts=(1, 10), query_reps=1, batch=200)
    out = bc.bench_queries(cfg)
    assert [r["queries"] for r in out["rows"]] == [1, 10]
    assert out["rows"][0]["buffered"] == out["rows"][1]["buffered"]
    assert "identical: yes" in capsys.readouterr().out


@pytest.mark.ray
def test_match_totals_equal_for_1_and_2_actors():
    import ray
    events = bc.ticks(3000, 16)
    queries = bc.sample_queries()
    expected = total_matches(bc.encode_partitions(events, 1, 400)[0], queries)
    assert expected > 0
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runs = {n: bc.run_actors(ray, bc.encode_partitions(events, n, 400), queries,
                                 bc.warm_events(5), quiet_wait=0.0)
                for n in (1, 2)}
    finally:
        ray.shutdown()
    for n, r in runs.items():
        assert len(r["events"]) == n
        assert sum(r["events"]) == len(events) == sum(r["processed"])
        assert sum(r["matches"]) == expected
    assert all(e > 0 for e in runs[2]["events"])


@pytest.mark.ray
def test_main_runs_with_a_tiny_config(capsys):
    assert bc.main(["--quick", "--events", "2000", "--symbols", "16", "--batch", "300",
                    "--reps", "1", "--query-events", "600", "--query-counts", "1,10",
                    "--quiet-wait", "0"]) == 0
    out = capsys.readouterr().out
    assert "=== part 1" in out and "=== part 2" in out and "=== summary" in out
    assert "'events': 2000" in out
    assert out.count("identical: yes") == 2


@pytest.mark.ray
def test_latency_benchmark_measures_every_path(capsys):
    from benchmarks import bench_latency
    assert bench_latency.main(["--probes", "3", "--load-rate", "500"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("idle", "loaded"))]
    assert len(rows) == 6                              # 3 paths x (idle, loaded)
    assert all(r[-4] == "3" for r in rows)             # every probe's match was seen
    assert {" ".join(r[1:-4]) for r in rows} == {"gateway send -> matches() read",
                                                  "gateway send -> subscribe() yields",
                                                  "bulk push -> subscribe() yields"}
