"""Plan search algorithms (VLDB 2018, section 6.1), one small module each.

Each is a pure function ``(problem, cost_fn, rng=None) -> tuple`` of the positive variable
names (a permutation of ``problem.names``): ``problem.fixed`` first (executed mode: the triggers
whose position the engine ignores; empty in the raw mode), then an order of ``problem.free``,
which is all they search. ``cost_fn(problem, order)`` is one of planner.cost (it must accept
plan prefixes, always starting with ``problem.fixed``). ``ALGORITHMS`` maps the paper's names
to them. The Tree-NFA mode (order chosen per trigger from buffer counts) is not a search: see
planner.plan.TREE_NFA.
"""
from __future__ import annotations

from raycep.planner.algorithms.dynamic_programming import DP_MAX_VARS, dp_left_deep
from raycep.planner.algorithms.frequency_order import efreq
from raycep.planner.algorithms.greedy_search import greedy, greedy_order
from raycep.planner.algorithms.iterative_improvement import RESTARTS, ii_greedy, ii_random
from raycep.planner.algorithms.pattern_order import trivial

ALGORITHMS = {
    "TRIVIAL": trivial,
    "EFREQ": efreq,
    "GREEDY": greedy,
    "II-RANDOM": ii_random,
    "II-GREEDY": ii_greedy,
    "DP-LD": dp_left_deep,
}

__all__ = ["ALGORITHMS", "DP_MAX_VARS", "RESTARTS", "dp_left_deep", "efreq", "greedy",
           "greedy_order", "ii_greedy", "ii_random", "trivial"]
