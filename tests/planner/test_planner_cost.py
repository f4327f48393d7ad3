"""Cost model of planner.cost against hand-computed values (VLDB 2018, sections 3.1, 4, 5).

The first part checks the paper's raw model (``executed=False``: the full order as written);
the second the executed model, the default, which prices the orders the lazy engine runs
(per trigger ``t`` of a branch: ``(t,) + the others in plan order``, summed over triggers).
"""
from __future__ import annotations

import math

import pytest

from raycep.cep.lang.compiler import compile_query
from raycep.planner.cost import (KLEENE_MAX_EXPONENT, combined_cost, cost_for, cost_ord,
                                 cost_ord_next, executed_orders, latency_cost, seq_probability,
                                 window_count)
from raycep.planner.problem import problem_from_query


def problem(text, rates=None, sels=None, pass_rates=None, executed=False):
    """The paper's raw model unless ``executed``."""
    return problem_from_query(compile_query(text), rates, sels, pass_rates, executed=executed)


def executed(text, rates=None, sels=None, pass_rates=None):
    return problem(text, rates, sels, pass_rates, executed=True)


# AND(A a, B b, C c), W = 2, rates 1, 2, 3; sel(a,c) = 0.1, sel(b,b) = 0.5
AND3 = "PATTERN AND(A a, B b, C c) WHERE a.x = c.x AND b.y > 5 WITHIN 2 seconds"
AND3_RATES = {"A": 1.0, "B": 2.0, "C": 3.0}
AND3_SELS = {0: 0.1, 1: 0.5}


def test_window_count_plain_kleene_and_cap():
    assert window_count(3.0, False, 2.0) == 6.0
    assert window_count(1.5, True, 2.0) == 8.0                  # 2^(r*W) subsets
    assert window_count(100.0, True, 10.0) == 2.0 ** KLEENE_MAX_EXPONENT


def test_cost_ord_hand_computed():
    p = problem(AND3, AND3_RATES, AND3_SELS)
    # PM(k) = W^k prod r prod sel:  (a): 2*1;  (a,c): 4*1*3*0.1;  (a,c,b): 8*6*0.1*0.5
    assert cost_ord(p, ("a", "c", "b")) == pytest.approx(2 + 1.2 + 2.4)
    # (b): 2*2*0.5;  (b,a): 4*2*0.5;  (b,a,c): 8*6*0.05
    assert cost_ord(p, ("b", "a", "c")) == pytest.approx(2 + 4 + 2.4)


def test_cost_of_a_prefix_is_the_sum_of_its_terms():
    p = problem(AND3, AND3_RATES, AND3_SELS)
    assert cost_ord(p, ("a",)) == pytest.approx(2.0)
    assert cost_ord(p, ("a", "c")) == pytest.approx(3.2)
    assert cost_ord(p, ()) == 0.0


def test_cost_ord_next_hand_computed():
    p = problem(AND3, AND3_RATES, AND3_SELS)
    # m[k] = W * min(r) * prod sel: 2*1;  2*1*0.1;  2*1*0.05
    assert cost_ord_next(p, ("a", "c", "b")) == pytest.approx(2 + 0.2 + 0.1)
    # (c): 2*3;  (c,b): 2*2*0.5;  (c,b,a): 2*1*0.05
    assert cost_ord_next(p, ("c", "b", "a")) == pytest.approx(6 + 2 + 0.1)


def test_seq_precedence_is_the_probability_of_the_timestamp_order():
    # W = 1, all rates 1, no predicates: PM(k) = P(the k events come in SEQ order)
    p = problem("PATTERN SEQ(A a, B b, C c) WITHIN 1 seconds")
    assert cost_ord(p, ("a", "b", "c")) == pytest.approx(1 + 1 / 2 + 1 / 6)
    assert cost_ord(p, ("c", "a", "b")) == pytest.approx(1 + 1 / 2 + 1 / 6)
    q = problem("PATTERN AND(A a, B b, C c) WITHIN 1 seconds")
    assert cost_ord(q, ("a", "b", "c")) == pytest.approx(3.0)


def test_seq_probability_of_series_parallel_orders():
    # SEQ(A a, AND(B b, C c), D d): a < b, a < c, b < d, c < d; 2 of 4! orders
    p = problem("PATTERN SEQ(A a, AND(B b, C c), D d) WITHIN 1 seconds").branches[0]
    preds = p.pred_masks
    assert seq_probability(preds, 0b1111) == pytest.approx(2 / 24)
    assert seq_probability(preds, 0b0110) == 1.0                # b, c: no order
    assert seq_probability(preds, 0b1011) == pytest.approx(1 / 6)   # a < b < d
    assert seq_probability(preds, 0b1001) == pytest.approx(1 / 2)
    # an order that is not series-parallel (N-shaped) falls back to counting: a<c, b<c, b<d
    n_shape = (0, 0, 0b011, 0b010)
    assert seq_probability(n_shape, 0b1111) == pytest.approx(5 / 24)


def test_kleene_is_a_power_set_type():
    # SEQ(A a, B+ b[]) W=2, rA=1, rB=1.5: w_b = 2^3 = 8; PM(2) = 2 * 8 * P(a<b) = 8
    p = problem("PATTERN SEQ(A a, B+ b[]) WITHIN 2 seconds", {"A": 1.0, "B": 1.5})
    assert cost_ord(p, ("a", "b")) == pytest.approx(2 + 8)
    assert cost_ord(p, ("b", "a")) == pytest.approx(8 + 8)
    assert cost_ord_next(p, ("b", "a")) == pytest.approx(8 + 2 * 0.5)


def test_negation_checked_when_its_variables_are_bound():
    # depends on b (latest before), c (earliest after) and a (its conjunct n.x = a.x)
    text = "PATTERN AND(A a, SEQ(B b, ~N n, C c)) WHERE n.x = a.x WITHIN 1 seconds"
    p = problem(text, {"N": 2.0}, {0: 0.5})
    neg = p.branches[0].negations[0]
    assert neg.depends == frozenset({"a", "b", "c"})
    assert neg.pass_prob == pytest.approx(math.exp(-1 * 2.0 * 0.5))
    # (b, c, a): 1;  1 * P(b<c) = 0.5;  0.5 * pass
    assert cost_ord(p, ("b", "c", "a")) == pytest.approx(1 + 0.5 + 0.5 * math.exp(-1))
    q = problem(text, {"N": 2.0}, {0: 0.5}, pass_rates={"n": 0.25})
    assert cost_ord(q, ("a", "b", "c")) == pytest.approx(1 + 1 + 0.5 * 0.25)


def test_conjunct_over_three_variables_applies_once_all_are_bound():
    p = problem("PATTERN AND(A a, B b, C c) WHERE a.x + b.x < c.x WITHIN 1 seconds", sels={0: 0.2})
    assert cost_ord(p, ("a", "b", "c")) == pytest.approx(1 + 1 + 0.2)


def test_or_branches_are_costed_on_their_projection_and_summed():
    p = problem("PATTERN OR(SEQ(A a, B b), AND(C c, B d)) WITHIN 1 seconds",
                {"A": 1.0, "B": 2.0, "C": 3.0})
    # branch 1 (a, b): 1 + 1*2*0.5;  branch 2 (c, d) projected as (d, c): 2 + 6
    assert cost_ord(p, ("d", "a", "c", "b")) == pytest.approx(1 + 1 + 2 + 6)


def test_latency_cost_sequence():
    # SEQ: T_n = c; Succ_O(c) in (c, a, b) = {a, b}: W * (rA + rB) = 2 * 3
    p = problem("PATTERN SEQ(A a, B b, C c) WITHIN 2 seconds", {"A": 1.0, "B": 2.0, "C": 3.0})
    assert latency_cost(p, ("c", "a", "b")) == pytest.approx(6.0)
    assert latency_cost(p, ("a", "c", "b")) == pytest.approx(4.0)
    assert latency_cost(p, ("a", "b", "c")) == 0.0


def test_latency_cost_conjunction_is_the_mean_over_possible_last_events():
    p = problem("PATTERN AND(A a, B b) WITHIN 2 seconds", {"A": 1.0, "B": 2.0})
    # last = a: b after it, W*rB = 4; last = b: nothing after it
    assert latency_cost(p, ("a", "b")) == pytest.approx(2.0)
    assert latency_cost(p, ("b", "a")) == pytest.approx(1.0)


def test_combined_cost_and_cost_for_strategy():
    p = problem("PATTERN SEQ(A a, B b, C c) WITHIN 2 seconds", {"A": 1.0, "B": 2.0, "C": 3.0})
    order = ("c", "a", "b")
    assert combined_cost(p, order, 0.5) == pytest.approx(cost_ord(p, order) + 0.5 * 6.0)
    assert combined_cost(p, order, 0.0) == cost_ord(p, order)
    assert cost_for(p) is cost_ord
    for strategy in ("skip_till_next_match", "partition_contiguity", "strict_contiguity"):
        q = problem(f"PATTERN SEQ(A a, B b) WITHIN 2 seconds STRATEGY {strategy}")
        assert cost_for(q) is cost_ord_next


def test_zero_selectivity_never_gives_nan():
    p = problem("PATTERN SEQ(A a, B+ b[]) WHERE a.x = b[1].x WITHIN 100 seconds",
                {"A": 1e300, "B": 50.0}, {0: 0.0})
    assert cost_ord(p, ("a", "b")) == pytest.approx(1e302)
    assert not math.isnan(cost_ord(p, ("b", "a")))


# --------------------------------------------------------------------------- executed model

def test_the_executed_model_is_the_default():
    cq = compile_query("PATTERN SEQ(A a, B b) WITHIN 1 seconds")
    assert problem_from_query(cq).executed
    assert not problem_from_query(cq).with_executed(False).executed


def test_executed_orders_put_each_trigger_first():
    seq = executed("PATTERN SEQ(A a, B b, C c) WITHIN 1 seconds").branches[0]
    assert executed_orders(seq, ("a", "b", "c")) == (("c", "a", "b"),)
    assert executed_orders(seq, ("b",)) == (("c", "b"),)          # a prefix: trigger bound anyway
    conj = executed(AND3).branches[0]
    assert executed_orders(conj, ("b", "c", "a")) == (("a", "b", "c"), ("b", "c", "a"),
                                                      ("c", "b", "a"))


def test_executed_sequence_hand_computed():
    # SEQ(A a, B b, C c), W = 1, rates 50, 1, 10: the engine runs (c, a, b) or (c, b, a).
    p = executed("PATTERN SEQ(A a, B b, C c) WITHIN 1 seconds", {"A": 50.0, "B": 1.0, "C": 10.0})
    # (c, a, b): 10;  10*50 * P(a<c) = 250;  10*50*1 * P(a<b<c) = 500/6
    cab = 10 + 250 + 500 / 6
    # (c, b, a): 10;  10*1 * P(b<c) = 5;  500/6
    cba = 10 + 5 + 500 / 6
    assert cost_ord(p, ("c", "a", "b")) == pytest.approx(cab)
    assert cost_ord(p, ("c", "b", "a")) == pytest.approx(cba)
    assert cab - cba == pytest.approx(245.0)
    # where the plan puts the trigger does not matter: it runs first anyway
    assert cost_ord(p, ("a", "b", "c")) == cost_ord(p, ("a", "c", "b")) == pytest.approx(cab)
    assert cost_ord(p, ("b", "a", "c")) == pytest.approx(cba)
    # the raw model prices (b, a, c) as written: 1 + 25 + 500/6, an order that never runs
    assert cost_ord(p.with_executed(False), ("b", "a", "c")) == pytest.approx(1 + 25 + 500 / 6)


def test_raw_model_prefers_an_order_that_runs_worse():
    # SEQ(A a, B b, C c) WHERE b.x = c.x, W = 1, rates 1, 10, 10, sel 0.01
    text = "PATTERN SEQ(A a, B b, C c) WHERE b.x = c.x WITHIN 1 seconds"
    raw = problem(text, {"A": 1.0, "B": 10.0, "C": 10.0}, {0: 0.01})
    ex = raw.with_executed(True)
    # raw: (a, c, b) = 1 + 10/2 + 1/6 beats (c, b, a) = 10 + 100*0.01/2 + 1/6
    assert cost_ord(raw, ("a", "c", "b")) == pytest.approx(1 + 5 + 1 / 6)
    assert cost_ord(raw, ("c", "b", "a")) == pytest.approx(10 + 0.5 + 1 / 6)
    # but (a, c, b) runs as (c, a, b): 10 + 10/2 + 1/6, the dearer of the two
    assert cost_ord(ex, ("a", "c", "b")) == pytest.approx(10 + 5 + 1 / 6)
    assert cost_ord(ex, ("c", "b", "a")) == pytest.approx(10 + 0.5 + 1 / 6)


def test_executed_conjunction_sums_over_triggers():
    p = executed(AND3, AND3_RATES, AND3_SELS)
    # plan (a, c, b); W = 2, rates 1, 2, 3, sel(a,c) = 0.1, sel(b,b) = 0.5
    # trigger a runs (a, c, b): 2 + 4*3*0.1 + 8*6*0.05 = 2 + 1.2 + 2.4
    # trigger b runs (b, a, c): 4*0.5 + 8*0.5 + 2.4 = 2 + 4 + 2.4
    # trigger c runs (c, a, b): 6 + 1.2 + 2.4
    assert cost_ord(p, ("a", "c", "b")) == pytest.approx(5.6 + 8.4 + 9.6)
    # m[k] = W*min(r)*prod sel: a: 2 + 0.2 + 0.1;  b: 2 + 2*1*0.5 + 0.1;  c: 6 + 0.2 + 0.1
    assert cost_ord_next(p, ("a", "c", "b")) == pytest.approx(2.3 + 3.1 + 6.3)
    # each trigger's evaluations are weighted by its rate: a trigger of rate 0 adds nothing
    q = executed(AND3, {"A": 1.0, "B": 2.0, "C": 0.0}, AND3_SELS)
    # a: (a, c, b) = 2 + 0 + 0;  b: (b, a, c) = 2 + 4 + 0
    assert cost_ord(q, ("a", "c", "b")) == pytest.approx(2 + 6)


def test_executed_prefix_cost_binds_the_triggers_from_the_start():
    p = executed(AND3, AND3_RATES, AND3_SELS)
    assert cost_ord(p, ()) == pytest.approx(2 + 2 + 6)          # (a), (b), (c)
    # adding a: new terms (b, a) = 4 and (c, a) = 4*3*0.1 = 1.2; none for a's own evaluation
    assert cost_ord(p, ("a",)) == pytest.approx(10 + 4 + 1.2)
    s = executed("PATTERN SEQ(A a, B b, C c) WITHIN 1 seconds", {"A": 50.0, "B": 1.0, "C": 10.0})
    assert cost_ord(s, ()) == pytest.approx(10.0)
    assert cost_ord(s, ("c",)) == pytest.approx(10.0)
    assert cost_ord(s, ("c", "a")) == pytest.approx(260.0)


def test_executed_or_branches_and_kleene_trigger():
    p = executed("PATTERN OR(SEQ(A a, B b), AND(C c, B d)) WITHIN 1 seconds",
                 {"A": 1.0, "B": 2.0, "C": 3.0})
    # branch 1 runs (b, a): 2 + 2*1*0.5;  branch 2 runs (c, d) and (d, c): 3 + 6 and 2 + 6
    for order in (("d", "a", "c", "b"), ("a", "b", "c", "d")):
        assert cost_ord(p, order) == pytest.approx(3 + 9 + 8)
    k = executed("PATTERN SEQ(A a, B+ b[]) WITHIN 2 seconds", {"A": 1.0, "B": 1.5})
    # runs (b, a): w_b = 8, then 8 * 2 * P(a<b)
    assert cost_ord(k, ("a", "b")) == cost_ord(k, ("b", "a")) == pytest.approx(8 + 8)


def test_executed_negation():
    text = "PATTERN AND(A a, SEQ(B b, ~N n, C c)) WHERE n.x = a.x WITHIN 1 seconds"
    p = executed(text, {"N": 2.0}, {0: 0.5})
    assert p.branches[0].triggers == ("a", "c")
    # plan (b, c, a). Trigger a runs (a, b, c): 1 + 1 + P(b<c) * pass = 2 + 0.5/e;
    # trigger c runs (c, b, a): 1 + 1*P(b<c) + 0.5/e
    assert cost_ord(p, ("b", "c", "a")) == pytest.approx(2 + 0.5 / math.e + 1.5 + 0.5 / math.e)


def test_executed_latency_does_not_depend_on_the_order():
    p = executed("PATTERN SEQ(A a, B b, C c) WITHIN 2 seconds", {"A": 1.0, "B": 2.0, "C": 3.0})
    # T_n = c is bound first: a and b are always examined after it, W * (rA + rB) = 6
    for order in (("c", "a", "b"), ("a", "c", "b"), ("a", "b", "c")):
        assert latency_cost(p, order) == pytest.approx(6.0)
    assert latency_cost(p, ("a",)) == pytest.approx(2.0)          # prefix: what it lists
    q = executed("PATTERN AND(A a, B b) WITHIN 2 seconds", {"A": 1.0, "B": 2.0})
    # last = a: W*rB = 4 after it; last = b: W*rA = 2; the mean
    assert latency_cost(q, ("a", "b")) == latency_cost(q, ("b", "a")) == pytest.approx(3.0)
    assert combined_cost(p, ("c", "a", "b"), 0.5) == pytest.approx(
        cost_ord(p, ("c", "a", "b")) + 3.0)
    assert cost_for(p) is cost_ord
