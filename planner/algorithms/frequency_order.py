"""EFREQ: ascending arrival frequency, the Lazy NFA's order (VLDB 2018, section 6.1; "Efficient
Detection of Complex Event Patterns Using Lazy Chain Automata").

A Kleene variable counts with its power-set rate ``2^(r*W)/W`` (section 4), so it goes late.
Ties keep pattern order. The fixed variables (executed mode, planner.problem) come first.
"""
from __future__ import annotations

from raycep.planner.cost import window_count


def efreq(problem, cost_fn=None, rng=None) -> tuple:
    """The positive variables by ascending (effective) arrival rate, fixed ones first."""
    index = problem.index
    rank = sorted((index[n] for n in problem.free),
                  key=lambda i: (window_count(problem.rates[i], problem.kleene[i],
                                              problem.window), i))
    return tuple(problem.fixed) + tuple(problem.names[i] for i in rank)
