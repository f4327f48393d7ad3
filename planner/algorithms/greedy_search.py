"""GREEDY (Swami 1989, VLDB 2018 section 6.1): extend the plan one variable at a time, each
time with the variable that minimises the cost of the extended prefix.

The plan starts with the fixed variables (executed mode, planner.problem) and extends over the
free ones. Being myopic it can end above the pattern order (a rare pair that only pays off once
a third variable joins; see tests/planner/test_planner_algorithms.py), so it returns the cheaper of its
own order and TRIVIAL: the planner never does worse than the query as written.
"""
from __future__ import annotations

from raycep.planner.algorithms.pattern_order import trivial


def greedy_order(problem, cost_fn) -> tuple:
    """The plain greedy order (ties: pattern order)."""
    order, left = tuple(problem.fixed), list(problem.free)
    while left:
        best = min(left, key=lambda v: cost_fn(problem, order + (v,)))
        order += (best,)
        left.remove(best)
    return order


def greedy(problem, cost_fn, rng=None) -> tuple:
    """The cheaper of greedy_order and the pattern order."""
    order, plain = greedy_order(problem, cost_fn), trivial(problem)
    return plain if cost_fn(problem, plain) <= cost_fn(problem, order) else order
