"""Plan search (planner.algorithms), problems from compiled queries, and make_plan.

The properties run in the executed model (the default: the orders the engine runs, triggers
first; only ``problem.free`` is searched) and, where noted, in the paper's raw model too.
"""
from __future__ import annotations

import itertools
import logging
import math
import random
from functools import partial

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from raycep.cep import Engine, Event
from raycep.cep.errors import PlanningError
from raycep.cep.evaluation.manager import PatternManager
from raycep.cep.lang.compiler import compile_query
from raycep.cep.store.index import SharedEventIndex
from raycep.planner.algorithms import ALGORITHMS, greedy, greedy_order, ii_greedy, trivial
from raycep.planner.cost import combined_cost, cost_for, cost_ord
from raycep.planner.plan import TREE_NFA, Plan, make_plan
from raycep.planner.problem import (BranchProblem, PlanProblem, measured_selectivities,
                             problem_from_query)

TYPES = ("T0", "T1", "T2", "T3")
OPS = ("=", "!=", "<", "<=", ">", ">=")
STRATEGIES = ("skip_till_any_match", "skip_till_next_match", "strict_contiguity")
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- random queries

@st.composite
def query_texts(draw, min_vars=2, max_vars=8):
    """SEQ/AND (with nested SEQ/AND/OR groups) of 2-8 positive variables, some Kleene, some
    untyped, 0-2 negations, and conjuncts over one, two and three variables."""
    n = draw(st.integers(min_vars, max_vars))
    leaves = []
    for i in range(n):
        kleene = draw(st.integers(0, 5)) == 0
        typ = draw(st.sampled_from(TYPES + (None,))) if not kleene else draw(st.sampled_from(TYPES))
        leaves.append((f"v{i}", typ, kleene))
    groups, k = [], 0
    while k < n:
        size = draw(st.integers(1, min(2, n - k)))
        part = leaves[k:k + size]
        k += size
        groups.append(part[0] if size == 1 else (draw(st.sampled_from(("SEQ", "AND", "OR"))), part))
    if len(groups) < 2:
        op, part = groups[0]
        groups = list(part)
    negs = [(f"n{j}", draw(st.sampled_from(TYPES))) for j in range(draw(st.integers(0, 2)))]
    items = [_leaf(g) if not isinstance(g[1], list) else f"{g[0]}({', '.join(map(_leaf, g[1]))})"
             for g in groups]
    for name, typ in negs:
        items.insert(draw(st.integers(0, len(items))), f"~{typ} {name}")
    top = draw(st.sampled_from(("SEQ", "AND")))
    simple = [f"{v}[1].x" if kl else f"{v}.x" for v, _, kl in leaves]
    conjs = []
    for _ in range(draw(st.integers(0, 5))):
        arity = draw(st.sampled_from((1, 2, 2, 3)[:4 if n > 2 else 3]))
        vs = draw(st.lists(st.sampled_from(simple), min_size=arity, max_size=arity, unique=True))
        op = draw(st.sampled_from(OPS))
        if arity == 1:
            conjs.append(f"{vs[0]} {op} 2")
        elif arity == 2:
            conjs.append(f"{vs[0]} {op} {vs[1]}")
        else:
            conjs.append(f"{vs[0]} + {vs[1]} {op} {vs[2]}")
    for name, _ in negs:
        if draw(st.booleans()):
            conjs.append(f"{name}.x = {draw(st.sampled_from(simple))}")
    for v, _, kl in leaves:
        if kl and draw(st.booleans()):
            conjs.append(f"{v}[i].x > {v}[i-1].x")
    where = f" WHERE {' AND '.join(conjs)}" if conjs else ""
    window = draw(st.sampled_from((1, 2, 5, 10)))
    strategy = draw(st.sampled_from(STRATEGIES))
    return f"PATTERN {top}({', '.join(items)}){where} WITHIN {window} seconds STRATEGY {strategy}"


def _leaf(leaf):
    name, typ, kleene = leaf
    if kleene:
        return f"{typ}+ {name}[]"
    return f"{typ} {name}" if typ else name


@st.composite
def problems(draw, min_vars=2, max_vars=8, executed=True):
    """(cq, problem); ``executed`` None: either model."""
    cq = compile_query(draw(query_texts(min_vars, max_vars)))
    rate = st.floats(0.0, 5.0, allow_nan=False)
    rates = {t: draw(rate) for t in TYPES if draw(st.integers(0, 4))}
    sel = st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0))
    sels = {i: draw(sel) for i in range(len(cq.conjuncts)) if draw(st.booleans())}
    if executed is None:
        executed = draw(st.booleans())
    return cq, problem_from_query(cq, rates, sels, executed=executed)


def cost_fns(problem):
    return [partial(combined_cost, alpha=0.0), partial(combined_cost, alpha=0.7)]


# --------------------------------------------------------------------------- properties

@settings(max_examples=60, **SETTINGS)
@given(problems(executed=None), st.integers(0, 2 ** 32))
def test_every_algorithm_returns_a_permutation_no_worse_than_trivial(case, seed):
    cq, p = case
    for cost_fn in cost_fns(p):
        base = cost_fn(p, trivial(p))
        costs = {}
        for name, algorithm in ALGORITHMS.items():
            order = algorithm(p, cost_fn, random.Random(seed))
            assert sorted(order) == sorted(cq.positive_names), name
            assert order[:len(p.fixed)] == p.fixed, name
            costs[name] = cost_fn(p, order)
        for name in ("GREEDY", "II-RANDOM", "II-GREEDY", "DP-LD"):
            assert costs[name] <= base, name
        assert costs["II-GREEDY"] <= costs["GREEDY"]
        assert all(costs["DP-LD"] <= c * (1 + 1e-9) + 1e-300 for c in costs.values())


@settings(max_examples=30, **SETTINGS)
@given(problems(max_vars=7), st.randoms(use_true_random=False))
def test_dp_ld_equals_brute_force_minimum(case, rnd):
    # executed model: brute force over the orders of the searchable variables (fixed first)
    cq, p = case
    for cost_fn in cost_fns(p):
        best = min(cost_fn(p, p.fixed + perm) for perm in itertools.permutations(p.free))
        got = cost_fn(p, ALGORITHMS["DP-LD"](p, cost_fn))
        assert math.isclose(got, best, rel_tol=1e-9, abs_tol=1e-300), (got, best)
        # any order of all the variables runs like its free part behind the fixed ones
        for _ in range(5):
            perm = tuple(rnd.sample(p.names, len(p.names)))
            moved = p.fixed + tuple(n for n in perm if n not in p.fixed)
            assert math.isclose(cost_fn(p, perm), cost_fn(p, moved), rel_tol=1e-9,
                                abs_tol=1e-300)
            assert got <= cost_fn(p, perm) * (1 + 1e-9) + 1e-300


@settings(max_examples=15, **SETTINGS)
@given(problems(max_vars=7, executed=False))
def test_dp_ld_equals_brute_force_minimum_in_the_raw_model(case):
    cq, p = case
    assert p.fixed == () and p.free == p.names
    for cost_fn in cost_fns(p):
        best = min(cost_fn(p, perm) for perm in itertools.permutations(p.names))
        got = cost_fn(p, ALGORITHMS["DP-LD"](p, cost_fn))
        assert math.isclose(got, best, rel_tol=1e-9, abs_tol=1e-300), (got, best)


@settings(max_examples=30, **SETTINGS)
@given(problems(), st.randoms(use_true_random=False))
def test_executed_cost_is_the_raw_cost_of_the_orders_the_engine_runs(case, rnd):
    # the orders come from the engine itself (PatternManager._steps_for with a static plan)
    cq, p = case
    order = tuple(rnd.sample(p.names, len(p.names)))
    manager = PatternManager("q", cq, SharedEventIndex(), order)
    expected = 0.0
    for b, br in enumerate(p.branches):
        single = dataclasses.replace(p, branches=(br,), executed=False)
        for t in br.triggers:
            run = tuple(step.var.name for step in manager._steps_for(b, t, None))
            expected += cost_for(p)(single, run)
    assert math.isclose(cost_for(p)(p, order), expected, rel_tol=1e-9, abs_tol=1e-300)


@settings(max_examples=20, **SETTINGS)
@given(problems(), st.integers(0, 2 ** 32))
def test_make_plan_is_reproducible_for_a_seed(case, seed):
    cq, p = case
    for algorithm in ("II-RANDOM", "II-GREEDY"):
        first = make_plan(cq, p, algorithm, alpha=0.1, rng=seed)
        assert make_plan(cq, p, algorithm, alpha=0.1, rng=seed) == first


# --------------------------------------------------------------------------- examples

def toy(rates, sel, window=1.0, triggers=None, executed=False):
    """A one-branch problem without SEQ precedence; every variable a trigger unless given."""
    names = tuple("abcdefgh"[:len(rates)])
    br = BranchProblem(names, tuple(rates), (False,) * len(names), sel, (),
                       tuple(frozenset() for _ in names), (), triggers or names)
    return PlanProblem("toy", names, tuple(rates), (False,) * len(names), window,
                       "skip_till_any_match", (br,), executed)


def test_plain_greedy_can_be_worse_than_trivial_so_greedy_keeps_the_better():
    # raw model. Rates a=10, b=10, c=5, W=1, sel(a,b)=0.01. Greedy takes the rarest c first
    # (5), then a (5*10 = 50), then b (500*0.01 = 5): 60. The pattern order pays 10 + 1 + 5 = 16.
    p = toy((10.0, 10.0, 5.0), ((1.0, 0.01, 1.0), (0.01, 1.0, 1.0), (1.0, 1.0, 1.0)))
    assert greedy_order(p, cost_ord) == ("c", "a", "b")
    assert cost_ord(p, ("c", "a", "b")) == pytest.approx(60.0)
    assert cost_ord(p, ("a", "b", "c")) == pytest.approx(16.0)
    assert greedy(p, cost_ord) == ("a", "b", "c")
    assert cost_ord(p, ii_greedy(p, cost_ord)) == pytest.approx(16.0)


def test_plain_greedy_can_be_worse_than_trivial_in_the_executed_model():
    # the same behind a fixed trigger d of rate 1: every run starts (d, ...), the terms gain a
    # factor W*r_d = 1 and (d) adds 1. Greedy: 1 + 5 + 50 + 5; pattern order 1 + 10 + 1 + 5.
    sel = tuple(tuple(0.01 if {i, j} == {0, 1} else 1.0 for j in range(4)) for i in range(4))
    p = toy((10.0, 10.0, 5.0, 1.0), sel, triggers=("d",), executed=True)
    assert p.fixed == ("d",) and p.free == ("a", "b", "c")
    assert trivial(p) == ("d", "a", "b", "c")
    assert greedy_order(p, cost_ord) == ("d", "c", "a", "b")
    assert cost_ord(p, ("d", "c", "a", "b")) == pytest.approx(61.0)
    assert cost_ord(p, ("d", "a", "b", "c")) == pytest.approx(17.0)
    assert greedy(p, cost_ord) == ("d", "a", "b", "c")
    assert cost_ord(p, ALGORITHMS["DP-LD"](p, cost_ord)) == pytest.approx(17.0)


def test_fixed_and_free_variables():
    def fixed(text, executed=True):
        p = problem_from_query(compile_query(text), executed=executed)
        return p.fixed, p.free
    assert fixed("PATTERN SEQ(A a, B b, C c) WITHIN 1 s") == (("c",), ("a", "b"))
    assert fixed("PATTERN SEQ(A a, B b, C c) WITHIN 1 s", executed=False) == \
        ((), ("a", "b", "c"))
    # several triggers: each is ordered in the others' evaluations, so all are searched
    assert fixed("PATTERN AND(A a, B b, C c) WITHIN 1 s") == ((), ("a", "b", "c"))
    assert fixed("PATTERN SEQ(A a, AND(B b, C c)) WITHIN 1 s") == ((), ("a", "b", "c"))
    assert fixed("PATTERN SEQ(A a, OR(B b, SEQ(C c, D d))) WITHIN 1 s") == \
        (("b", "d"), ("a", "c"))
    assert fixed("PATTERN AND(A a, OR(B b, SEQ(C c, D d))) WITHIN 1 s") == \
        ((), ("a", "b", "c", "d"))


def test_efreq_orders_by_ascending_rate_kleene_last():
    cq = compile_query("PATTERN SEQ(A a, B+ b[], C c, D d) WITHIN 10 seconds")
    rates = {"A": 3.0, "B": 0.5, "C": 1.0, "D": 2.0}
    p = problem_from_query(cq, rates, executed=False)
    assert ALGORITHMS["EFREQ"](p, cost_ord) == ("c", "d", "a", "b")   # b: 2^5/10 per second
    assert ALGORITHMS["EFREQ"](p.with_executed(True), cost_ord) == ("d", "c", "a", "b")
    q = problem_from_query(cq, {"A": 3.0, "B": 0.01, "C": 1.0, "D": 1.0}, executed=False)
    assert ALGORITHMS["EFREQ"](q, cost_ord) == ("b", "c", "d", "a")   # ties: pattern order
    assert ALGORITHMS["EFREQ"](q.with_executed(True), cost_ord) == ("d", "b", "c", "a")


def test_cost_based_plan_binds_the_selective_pair_first():
    # the example of section 2.3: a.x = c.x very selective, equal rates
    cq = compile_query("PATTERN SEQ(A a, B b, C c) WHERE a.x = c.x WITHIN 10 seconds")
    p = problem_from_query(cq, {"A": 1.0, "B": 1.0, "C": 1.0}, {0: 0.001})
    for name in ("GREEDY", "II-RANDOM", "II-GREEDY", "DP-LD"):
        assert ALGORITHMS[name](p, cost_ord) == ("c", "a", "b"), name
        assert set(ALGORITHMS[name](p.with_executed(False), cost_ord)[:2]) == {"a", "c"}, name


def test_make_plan_plans_what_runs_and_keeps_the_raw_model_on_request():
    # the raw model picks (a, c, b), which the engine runs as (c, a, b): 10 + 5 + 1/6; the
    # executed model picks (c, b, a): 10 + 0.5 + 1/6 (tests/planner/test_planner_cost.py)
    cq = compile_query("PATTERN SEQ(A a, B b, C c) WHERE b.x = c.x WITHIN 1 s")
    stats = {"rates": {"A": 1.0, "B": 10.0, "C": 10.0}, "selectivities": {0: 0.01}}
    ex = problem_from_query(cq, stats["rates"], stats["selectivities"])
    for algorithm in ALGORITHMS:
        if algorithm in ("TRIVIAL", "EFREQ"):
            continue
        plan = make_plan(cq, stats, algorithm)
        assert plan.order == ("c", "b", "a"), algorithm
        assert plan.cost == pytest.approx(10 + 0.5 + 1 / 6)
        raw = make_plan(cq, stats, algorithm, executed=False)
        # (a, c, b) or its tie (a, b, c): both run as (c, a, b)
        assert raw.order[0] == "a", algorithm
        assert raw.cost == pytest.approx(1 + 5 + 1 / 6)
        assert cost_ord(ex, raw.order) == pytest.approx(10 + 5 + 1 / 6)
    # a PlanProblem given in either model is planned in the requested one
    assert make_plan(cq, ex.with_executed(False), "DP-LD").order == ("c", "b", "a")
    assert make_plan(cq, ex, "DP-LD", executed=False).order == ("a", "c", "b")


def test_dp_ld_falls_back_to_ii_greedy_above_threshold(monkeypatch, caplog):
    from raycep.planner.algorithms import dynamic_programming
    monkeypatch.setattr(dynamic_programming, "DP_MAX_VARS", 2)   # 3 free: a, b, c
    cq = compile_query("PATTERN SEQ(A a, B b, C c, D d) WHERE a.x = d.x WITHIN 10 seconds")
    p = problem_from_query(cq, {"A": 4.0, "B": 1.0, "C": 2.0, "D": 3.0})
    with caplog.at_level(logging.INFO, logger="raycep.planner.algorithms.dynamic_programming"):
        order = ALGORITHMS["DP-LD"](p, cost_ord)
    assert order == ii_greedy(p, cost_ord)
    assert "II-GREEDY" in caplog.text


# --------------------------------------------------------------------------- problem_from_query

def test_selectivity_matrix_from_compiled_query():
    cq = compile_query("""PATTERN SEQ(A a, B+ b[], C c, D d)
        WHERE a.x = b[1].x AND b[i].y > b[i-1].y AND a.z < c.z AND c.w > 3 AND a.q != c.q
          AND a.p + c.p < d.p AND (a.k = 1 OR d.k = 2)
        WITHIN 10 seconds""")
    p = problem_from_query(cq, {"A": 2.0, "C": 0.5}, {0: 0.2, 4: 0.3})
    br = p.branches[0]
    assert br.names == ("a", "b", "c", "d")
    assert br.rates == (2.0, 1.0, 0.5, 1.0) and br.kleene == (False, True, False, False)
    expected = [[1.0, 0.2, 0.5 * 0.3, 1.0],     # a-b measured; a-c: '<' guess 0.5, '!=' measured 0.3
                [0.2, 0.5, 1.0, 1.0],           # b-b: element-wise '>' guess
                [0.5 * 0.3, 1.0, 0.5, 1.0],     # c-c: 'c.w > 3'
                [1.0, 1.0, 1.0, 1.0]]           # a-d: OR: no guess
    assert [x for row in br.sel for x in row] == pytest.approx(sum(expected, []))
    assert br.multi == ((frozenset({"a", "c", "d"}), 0.5),)
    assert br.before[3] == frozenset({"a", "b", "c"}) and br.triggers == ("d",)
    assert p.window == 10.0 and p.strategy == "skip_till_any_match"


def test_equality_chain_and_or_branches():
    cq = compile_query("PATTERN OR(SEQ(A a, B b), SEQ(A c, C d)) WHERE a.x = b.x "
                       "AND c.y = d.y WITHIN 5 seconds")
    p = problem_from_query(cq)
    assert p.names == ("a", "b", "c", "d")
    one, two = p.branches
    assert one.names == ("a", "b") and one.sel[0][1] == pytest.approx(0.1)
    assert two.names == ("c", "d") and two.sel[0][1] == pytest.approx(0.1)


def test_untyped_variable_rate_is_the_sum_of_all_rates_and_defaults():
    cq = compile_query("PATTERN SEQ(A a, x, C c) WITHIN 5 seconds")
    assert problem_from_query(cq, {"A": 2.0, "B": 3.0}).rates == (2.0, 5.0, 1.0)
    assert problem_from_query(cq).rates == (1.0, 1.0, 1.0)


def test_negation_problem():
    cq = compile_query("PATTERN SEQ(A a, AND(B b, C c), ~N n, D d, E e) WHERE n.v = e.v "
                       "WITHIN 2 seconds")
    p = problem_from_query(cq, {"N": 0.5}, {0: 0.4})
    (neg,) = p.branches[0].negations
    assert neg.name == "n" and not neg.deferred
    assert neg.depends == frozenset({"b", "c", "d", "e"})   # latest before, earliest after, e
    assert neg.pass_prob == pytest.approx(math.exp(-2 * 0.5 * 0.4))
    trailing = problem_from_query(compile_query("PATTERN SEQ(A a, B b, ~N n) WITHIN 2 seconds"))
    assert trailing.branches[0].negations[0].deferred
    assert trailing.branches[0].negations[0].depends == frozenset({"b"})


def test_bad_statistics_raise_planning_error():
    cq = compile_query("PATTERN SEQ(A a, B b) WHERE a.x = b.x WITHIN 5 seconds")
    with pytest.raises(PlanningError, match="conjunct index"):
        problem_from_query(cq, {}, {3: 0.5})
    with pytest.raises(PlanningError, match=r"\[0, 1\]"):
        problem_from_query(cq, {}, {0: 1.5})
    with pytest.raises(PlanningError, match="rate"):
        problem_from_query(cq, {"A": -1.0})


def test_measured_selectivities_from_engine_counters():
    cq = compile_query("PATTERN SEQ(A a, B b) WHERE a.x = b.x AND a.y > 1 WITHIN 5 seconds")
    cq.conjuncts[0].tested, cq.conjuncts[0].passed = 8, 2
    assert measured_selectivities(cq) == {0: 0.25}


# --------------------------------------------------------------------------- make_plan

def test_make_plan_unknown_algorithm():
    cq = compile_query("PATTERN SEQ(A a, B b) WITHIN 5 seconds")
    with pytest.raises(PlanningError, match="unknown planning algorithm 'FASTEST'") as err:
        make_plan(cq, None, "FASTEST")
    for name in [*ALGORITHMS, TREE_NFA]:
        assert name in str(err.value)


def test_make_plan_fields_and_tree_nfa():
    cq = compile_query("NAME spike PATTERN SEQ(A a, B b, C c) WHERE a.x = c.x WITHIN 5 seconds")
    stats = {"rates": {"A": 5.0, "B": 1.0, "C": 2.0}, "selectivities": {0: 0.01}}
    plan = make_plan(cq, stats, "DP-LD", alpha=0.2, version=3)
    assert isinstance(plan, Plan) and plan.query == "spike" and plan.version == 3
    assert plan.algorithm == "DP-LD" and sorted(plan.order) == ["a", "b", "c"]
    p = problem_from_query(cq, stats["rates"], stats["selectivities"])
    assert plan.cost == pytest.approx(combined_cost(p, plan.order, 0.2))
    raw = make_plan(cq, stats, "DP-LD", alpha=0.2, executed=False)
    assert raw.cost == pytest.approx(combined_cost(p.with_executed(False), raw.order, 0.2))
    tree = make_plan(cq, p, TREE_NFA)
    assert tree.order is None and tree.algorithm == TREE_NFA and tree.cost > 0
    with pytest.raises(PlanningError, match="alpha"):
        make_plan(cq, p, "GREEDY", alpha=-1)


def test_planned_order_runs_in_the_engine_with_the_same_matches():
    text = "PATTERN SEQ(A a, B b, C c) WHERE a.x = c.x WITHIN 10 seconds"
    cq = compile_query(text)
    plan = make_plan(cq, {"rates": {"A": 1.0, "B": 5.0, "C": 1.0},
                          "selectivities": {0: 0.05}}, "DP-LD")
    rng = random.Random(7)
    events = [Event(rng.choice("ABC"), float(t), {"x": rng.randint(0, 2)}) for t in range(40)]
    runs = []
    for order in (plan.order, None):
        engine = Engine()
        engine.add_query(text, name="q", order=order)
        out = [m for ev in events for m in engine.process(ev)]
        out += engine.advance(math.inf)
        runs.append(sorted(str(sorted(m.to_dict().items())) for m in out))
    assert runs[0] == runs[1] and runs[0]
