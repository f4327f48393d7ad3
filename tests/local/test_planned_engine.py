"""``raycep.Engine`` (local/engine.py): the in-process engine planned as ``raycep local``
plans, against the engine without a planner (``raycep.cep.Engine``, proven against the
oracle) on random streams, through each way events go in; its plan, its explanation, its
evaluation path (issue 37: an in-process engine reported ``plan: null``)."""
from __future__ import annotations

import math
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raycep
from raycep.planner.explain import render

QUERIES = {
    "seq3": "PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.x < b.x AND b.x > c.x WITHIN 4 s",
    "neg": "PATTERN SEQ(A a, ~C c, B b) WHERE [k] AND a.x < b.x WITHIN 3 s",
    "kleene": "PATTERN SEQ(A a, B+ b[], C c) WHERE [k] WITHIN 2 s",
    "glob": "PATTERN SEQ(A a, C c) WHERE a.x + c.x > 1.5 WITHIN 1 s",
}


def stream(n: int, seed: int) -> list:
    rng = random.Random(seed)
    ts, out = 0.0, []
    for _ in range(n):
        ts += rng.choice((0.05, 0.1, 0.3))
        out.append(raycep.Event(rng.choice("AAABBC"), round(ts, 3),
                                {"x": round(rng.random(), 3), "k": rng.choice("uvw")}))
    return out


def ids(found) -> list:
    """The matches by what they bind (a table's rows get other event ids than Events)."""
    def event(e):
        return e.type, e.ts, tuple(sorted(e.attrs.items()))

    def bound(value):
        return tuple(map(event, value)) if isinstance(value, (list, tuple)) else event(value)
    return sorted(tuple(sorted((v, bound(x)) for v, x in m.bindings.items())) for m in found)


def core_ids(events) -> dict:
    core = raycep.cep.Engine(key_attr="k")
    for name, text in QUERIES.items():
        core.add_query(text, name=name)
    found = [m for ev in events for m in core.process(ev)] + core.advance(math.inf)
    return {name: ids(m for m in found if m.query == name) for name in QUERIES}


def by_query(found) -> dict:
    return {name: ids(m for m in found if m.query == name) for name in QUERIES}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), cut=st.integers(0, 900),
       first_check=st.sampled_from([1, 50, 200]), check_every=st.sampled_from([97, 500]))
def test_the_planned_engine_finds_what_the_engine_without_a_planner_finds(
        seed, cut, first_check, check_every):
    """Event by event, in lists and as a table, re-planned every ``check_every`` events:
    the same matches as the engine that evaluates every trigger in the Tree-NFA order."""
    events = stream(900, seed)
    want = core_ids(events)
    engine = raycep.Engine(key_attr="k", first_check=first_check, check_every=check_every)
    for name, text in QUERIES.items():
        engine.add_query(text, name=name)
    found = [m for ev in events[:cut] for m in engine.process(ev)]
    table = pd.DataFrame([{"type": e.type, "ts": e.ts, **e.attrs} for e in events[cut:]])
    found += engine.process_table(table, type="type")
    found += engine.advance(math.inf)
    assert by_query(found) == want


def test_its_queries_have_a_plan_and_tables_are_evaluated_in_bulk():
    events = stream(3000, 7)
    engine = raycep.Engine(key_attr="k")
    engine.add_query(QUERIES["seq3"], name="seq3")
    assert engine.stats()["queries"]["seq3"]["plan"] is not None     # provisional, at once
    table = pd.DataFrame([{"type": e.type, "ts": e.ts, **e.attrs} for e in events])
    found = engine.process_table(table, type="type")
    # what it does not override it answers for the engine it holds
    assert engine.clock == events[-1].ts and engine.take_late() == []
    found += engine.advance(math.inf)
    assert found
    stats = engine.stats()
    path = stats["paths"]["seq3"]
    assert path["bulk"] > 0 and path["bulk"] >= path["per_trigger"]
    changes = stats["plan_changes"]
    assert changes and changes[0]["query"] == "seq3" and changes[0]["algorithm"] == "DP-LD"
    assert stats["queries"]["seq3"]["plan"] == changes[-1]["order"]


def test_explain_says_the_plan_and_what_it_came_from():
    engine = raycep.Engine(key_attr="k", check_every=500)      # samples the counts 4 times
    engine.add_query(QUERIES["seq3"], name="seq3")
    engine.add_query(QUERIES["seq3"].replace("WITHIN 4 s", "WITHIN 3 s"), name="seq3b")
    engine.process_many(stream(2000, 3))
    info = engine.explain("seq3")
    assert info["plan"]["order"] == engine.stats()["queries"]["seq3"]["plan"]
    assert info["rates_measured"] and set(info["rates"]) == {"A", "B", "C"}
    measured = [c for c in info["conditions"] if c["measured"]]
    assert measured and all(0.0 <= c["selectivity"] <= 1.0 for c in measured)
    counted = info["counters"]["a.x < b.x"]
    assert counted["tested"] >= counted["passed"] > 0
    assert info["group"]["queries"] == ["seq3", "seq3b"]             # evaluated as one
    assert info["path"]["per_trigger"] > 0
    text = render(info)
    assert "plan in use: " in text and "DP-LD would choose now" in text
    with pytest.raises(raycep.CepError, match="no query named 'nope'"):
        engine.explain("nope")


def test_planner_choices():
    engine = raycep.Engine(planner="tree-nfa")
    engine.add_query(QUERIES["glob"], name="glob")
    engine.process_many(stream(500, 1))
    assert engine.stats()["queries"]["glob"]["plan"] is None
    assert "Tree-NFA" in engine.stats()["paths"]["glob"]["why"]
    with pytest.raises(raycep.PlanningError, match="unknown planner 'fast'"):
        raycep.Engine(planner="fast")
    forced = raycep.Engine()
    forced.add_query(QUERIES["glob"], name="glob", order=("c", "a"))
    assert forced.stats()["queries"]["glob"]["plan"] == ["c", "a"]
