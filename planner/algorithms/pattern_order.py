"""TRIVIAL: the pattern (text) order, as SASE and Cayuga evaluate (VLDB 2018, section 6.1).

In the executed mode the fixed variables (planner.problem: triggers whose position the engine
ignores) come first, then the others in pattern order; the engine runs the same orders as for
the plain pattern order.
"""
from __future__ import annotations


def trivial(problem, cost_fn=None, rng=None) -> tuple:
    """The positive variables in pattern order (fixed ones first)."""
    return tuple(problem.fixed) + tuple(problem.free)
