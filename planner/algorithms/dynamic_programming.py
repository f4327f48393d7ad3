"""DP-LD: dynamic programming over subsets for left-deep plans (Selinger et al. 1979;
VLDB 2018 sections 3.1 and 6.1): the exact optimum among all orders.

``best[S]`` is the cheapest order of the set ``S`` as a plan prefix, built from
``best[S - {v}] + (v,)``. This is exact when the cost of the rest of a plan depends on the set
of variables already bound and not on their order, which holds for every cost in planner.cost
(and their sums), in both execution models. The subsets are those of the free variables; the
fixed ones (executed mode: triggers whose position the engine ignores, planner.problem) are a
prefix bound from the start. Time and memory grow as ``2^n * n`` cost evaluations for ``n``
free variables: above ``DP_MAX_VARS`` DP-LD runs II-GREEDY instead and logs that it did.
"""
from __future__ import annotations

import logging

from raycep.planner.algorithms.iterative_improvement import ii_greedy

DP_MAX_VARS = 12
log = logging.getLogger(__name__)


def dp_left_deep(problem, cost_fn, rng=None) -> tuple:
    """The cheapest order (ties: the one found first, scanning in pattern order)."""
    names = tuple(problem.free)
    n = len(names)
    if n > DP_MAX_VARS:
        log.info("DP-LD: query %r has %d variables to order (> %d): using II-GREEDY",
                 problem.name, n, DP_MAX_VARS)
        return ii_greedy(problem, cost_fn, rng)
    best = {0: tuple(problem.fixed)}
    for mask in range(1, 1 << n):
        best_order, best_cost = None, None
        for v in range(n):
            if mask >> v & 1:
                order = best[mask & ~(1 << v)] + (names[v],)
                c = cost_fn(problem, order)
                if best_cost is None or c < best_cost:
                    best_order, best_cost = order, c
        best[mask] = best_order
    return best[(1 << n) - 1]
