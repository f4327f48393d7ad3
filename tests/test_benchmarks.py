"""The benchmark's eager NFA baseline finds exactly the engine's matches (no timing here)."""
import math
import os
import sys
from dataclasses import replace

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.eager_nfa import EagerNFA, EagerQuery, NegVar, Var  # noqa: E402
from benchmarks.workloads import (SKEWED, UNIFORM, StreamSpec, generate, kleene_query,  # noqa: E402
                                  negation_query, seq3_query, workloads)
from raycep.cep import Engine  # noqa: E402
from raycep.cep.match import match_key  # noqa: E402

DENSE = StreamSpec(rates={"A": 5, "B": 2, "C": 1}, keys=3,
                   values={"A": (0, 100), "B": (0, 100), "C": (0, 100)}, seed=3)


def lazy_keys(text, events):
    engine = Engine(key_attr="k")
    engine.add_query(text, name="q")
    out = set()
    for e in events:
        out.update(m.key() for m in engine.process(e))
    out.update(m.key() for m in engine.advance(math.inf))
    return out


def eager_keys(query, events):
    nfa = EagerNFA(query)
    out = set()
    for e in events:
        out.update(match_key(b) for b in nfa.process(e))
    out.update(match_key(b) for b in nfa.advance(math.inf))
    return out


@pytest.mark.parametrize("make", [seq3_query, kleene_query, negation_query])
@pytest.mark.parametrize("window", [2, 7])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_eager_matches_engine_on_dense_streams(make, window, seed):
    text, query = make(window)
    events = generate(DENSE, 1500, seed=seed)
    lazy = lazy_keys(text, events)
    assert lazy, "the workload should produce matches"
    assert eager_keys(query, events) == lazy


@pytest.mark.parametrize("w", workloads(), ids=lambda w: w.name)
def test_eager_matches_engine_on_benchmark_streams(w):
    events = generate(w.spec, 15000)
    lazy = lazy_keys(w.text, events)
    assert eager_keys(w.eager, events) == lazy
    assert lazy or w.name.endswith("-rare")      # the rare variant needs longer streams


def test_eager_without_partition_key_and_with_shuffled_specs():
    # no [k]: every event meets every run (one partition)
    text = "PATTERN SEQ(A a, B b, C c) WHERE a.v < b.v AND b.v > c.v WITHIN 3 seconds"
    _, q = seq3_query(3)
    q = replace(q, key=None)
    spec = replace(UNIFORM, rates={"A": 4, "B": 2, "C": 1})
    events = generate(spec, 1200, seed=5)
    lazy = lazy_keys(text, events)
    assert lazy and eager_keys(q, events) == lazy


def test_eager_expires_runs_and_negated_events():
    _, q = negation_query(5)
    nfa = EagerNFA(q)
    for e in generate(DENSE, 2000, seed=9):
        nfa.process(e)
    last = e.ts
    # at most one window of A runs per key, plus what arrived since the last sweep
    assert nfa.stored_runs() <= DENSE.rates["A"] * (q.window + q.window / 4) * 1.5 + 20
    nfa.advance(last + 10 * q.window)
    assert nfa.stored_runs() == 0 and nfa.stored_events() == 0 and not nfa.parts


def test_eager_rejects_unsupported_shapes():
    with pytest.raises(ValueError):
        EagerQuery("q", (Var("a", "A"), Var("b", "B")), 1.0,
                   negations=(NegVar("n", "C", pos=2),))
    with pytest.raises(ValueError):
        EagerQuery("q", (Var("a", "A"), Var("b", "B", kleene=True)), 1.0)


def test_streams_are_seeded_and_ordered():
    a = generate(SKEWED, 500)
    b = generate(SKEWED, 500)
    assert [(e.type, e.ts, e.attrs, e.id) for e in a] == [(e.type, e.ts, e.attrs, e.id) for e in b]
    assert all(x.ts < y.ts for x, y in zip(a, a[1:]))
    assert all(e.key == e.attrs["k"] for e in a)


def test_eager_with_two_variables_of_one_type():
    text = ("PATTERN SEQ(A a, A b, C c) WHERE [k] AND a.v < b.v AND b.v > c.v "
            "WITHIN 3 seconds")
    q = EagerQuery("q", (
        Var("a", "A"),
        Var("b", "A", checks=(lambda m, e: m[0].attrs["v"] < e.attrs["v"],)),
        Var("c", "C", checks=(lambda m, e: m[1].attrs["v"] > e.attrs["v"],)),
    ), window=3, key="k")
    events = generate(DENSE, 1500, seed=4)
    lazy = lazy_keys(text, events)
    assert lazy and eager_keys(q, events) == lazy


def test_index_benchmark_runs_both_structures_on_the_same_lookups(capsys):
    """benchmarks/bench_index.py exits non-zero if TimeBuffer and SortedKeyList disagree."""
    from benchmarks import bench_index
    assert bench_index.main(["--events", "5000", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| TimeBuffer (cep.store.index) |" in out and "| sortedcontainers.SortedKeyList |" in out
    found = int(out.split("; ")[1].split(" events")[0].replace(",", ""))
    assert found > 5000 * 100          # each lookup returns a window's worth of events
