"""Iterative improvement (Swami 1989, Steinbrunn et al. 1997; VLDB 2018 section 6.1).

Local search over orders with two moves, swap (exchange two positions) and cycle (rotate three
positions) of the free variables (the fixed ones of the executed mode stay first, see
planner.problem), taking every improving move found while scanning the neighbourhood in a random
order, until a full scan finds none: a local minimum for both moves. ``RESTARTS`` descents in
all, the first from the pattern order (II-RANDOM) or from GREEDY (II-GREEDY), the others from
random orders; the cheapest local minimum wins. Starting one descent from TRIVIAL / GREEDY means
the result never costs more than that start. ``rng`` (a random.Random, a seed, or None for seed
0) makes runs reproducible.
"""
from __future__ import annotations

import itertools
import random

from raycep.planner.algorithms.greedy_search import greedy
from raycep.planner.algorithms.pattern_order import trivial

RESTARTS = 8
DEFAULT_SEED = 0


def as_rng(rng) -> random.Random:
    """A random.Random from an instance, a seed, or None (DEFAULT_SEED)."""
    if isinstance(rng, random.Random):
        return rng
    return random.Random(DEFAULT_SEED if rng is None else rng)


def moves(n: int) -> list:
    """Every swap (i, j) and both rotations (i, j, k) / (i, k, j) of every position triple."""
    out = [(i, j) for i, j in itertools.combinations(range(n), 2)]
    for i, j, k in itertools.combinations(range(n), 3):
        out += [(i, j, k), (i, k, j)]
    return out


def apply_move(order: tuple, move: tuple) -> tuple:
    """Swap two positions, or cycle three: the item at move[0] goes to move[1], and so on."""
    new = list(order)
    for a, b in zip(move, move[1:] + move[:1]):
        new[b] = order[a]
    return tuple(new)


def descend(problem, cost_fn, start: tuple, rng: random.Random) -> tuple:
    """(local minimum, its cost) reached from ``start`` (the fixed variables, then the free
    ones) by improving swap/cycle moves of the free positions."""
    order, cost = tuple(start), cost_fn(problem, tuple(start))
    lo = len(problem.fixed)
    neighbourhood = [tuple(i + lo for i in m) for m in moves(len(order) - lo)]
    improved = True
    while improved:
        improved = False
        rng.shuffle(neighbourhood)
        for move in neighbourhood:
            cand = apply_move(order, move)
            c = cost_fn(problem, cand)
            if c < cost:
                order, cost, improved = cand, c, True
    return order, cost


def improve(problem, cost_fn, first: tuple, rng) -> tuple:
    """Best local minimum of RESTARTS descents: one from ``first``, the rest from random orders."""
    rng = as_rng(rng)
    best, best_cost = descend(problem, cost_fn, first, rng)
    fixed, names = tuple(problem.fixed), list(problem.free)
    for _ in range(RESTARTS - 1):
        start = fixed + tuple(rng.sample(names, len(names)))
        order, cost = descend(problem, cost_fn, start, rng)
        if cost < best_cost:
            best, best_cost = order, cost
    return best


def ii_random(problem, cost_fn, rng=None) -> tuple:
    """II-RANDOM: iterative improvement from the pattern order and random orders."""
    return improve(problem, cost_fn, trivial(problem), rng)


def ii_greedy(problem, cost_fn, rng=None) -> tuple:
    """II-GREEDY: iterative improvement from the GREEDY order (and random restarts)."""
    return improve(problem, cost_fn, greedy(problem, cost_fn), rng)
