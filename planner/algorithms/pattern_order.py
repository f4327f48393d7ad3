"""TRIVIAL: the pattern (text) order, as SASE and Cayuga evaluate (VLDB 2018, section 6.1)."""
from __future__ import annotations


def trivial(problem, cost_fn=None, rng=None) -> tuple:
    """The positive variables in pattern order."""
    return tuple(problem.names)
