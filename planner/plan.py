"""Plans: the immutable description of how a query is evaluated (docs/planning.md).

A Plan is an order of the query's positive variables, handed to
``PatternManager.set_order(plan.order, plan.version)``; the evaluator binds the trigger first
and then the other variables of each DNF branch in this order. ``order`` None is the Tree-NFA
mode ("Efficient Detection of Complex Event Patterns Using Lazy Chain Automata", section 7): no
static order, the manager picks one per trigger from the current buffer counts.

By default plans are chosen and costed under the executed model (planner.problem, "Execution
model"): the cost of the orders the engine actually runs, trigger first, with the triggers
whose position it ignores listed first in ``Plan.order``. ``make_plan(..., executed=False)``
uses the paper's raw model instead (the full order as written).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from raycep.cep.errors import PlanningError
from raycep.cep.lang.compiler import CompiledQuery
from raycep.planner.algorithms import ALGORITHMS
from raycep.planner.algorithms.frequency_order import efreq
from raycep.planner.cost import combined_cost
from raycep.planner.problem import PlanProblem, problem_from_query

TREE_NFA = "tree-nfa"


@dataclass(frozen=True)
class Plan:
    """``order``: positive variable names, or None for Tree-NFA; ``cost``: the estimate under
    the cost model the plan was chosen with (for Tree-NFA, the estimate of the EFREQ order,
    which is what Tree-NFA converges to when buffer counts follow the rates)."""
    query: str
    order: tuple | None
    version: int
    algorithm: str
    cost: float


def make_plan(cq: CompiledQuery, stats, algorithm: str, alpha: float = 0.0, version: int = 1,
              rng=None, name: str | None = None, executed: bool = True) -> Plan:
    """Plan ``cq`` with ``ALGORITHMS[algorithm]`` (or TREE_NFA) under the cost of its strategy
    plus ``alpha`` times the latency cost (VLDB 2018, section 5.1).

    ``stats``: a PlanProblem already built for ``cq``, None (default rates and selectivities),
    or a mapping / object with ``rates`` and ``selectivities`` (optionally ``pass_rates``), keyed
    as planner.problem describes.

    ``executed`` (default True): optimise and report the cost of what the lazy engine runs, the
    trigger first and then the plan's order (planner.problem, "Execution model"); a given
    PlanProblem is switched to this mode. False: the paper's raw model, the full order as
    written (which the engine does not run as such when a trigger is not first). In the
    executed mode the latency cost does not depend on the order (planner.cost.latency_cost).
    """
    if algorithm != TREE_NFA and algorithm not in ALGORITHMS:
        known = ", ".join([*ALGORITHMS, TREE_NFA])
        raise PlanningError(f"unknown planning algorithm {algorithm!r} (known: {known})")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
        raise PlanningError(f"latency weight alpha must be a number >= 0, got {alpha!r}")
    problem = stats if isinstance(stats, PlanProblem) else _problem(cq, stats, name)
    problem = problem.with_executed(bool(executed))
    names = set(cq.positive_names)
    if set(problem.names) != names:
        raise PlanningError(f"plan problem for variables {list(problem.names)} does not fit "
                            f"the query's positive variables {list(cq.positive_names)}")
    cost_fn = partial(combined_cost, alpha=float(alpha))
    query = name if name is not None else problem.name
    if algorithm == TREE_NFA:
        return Plan(query, None, version, TREE_NFA, cost_fn(problem, efreq(problem)))
    order = tuple(ALGORITHMS[algorithm](problem, cost_fn, rng))
    if len(order) != len(names) or set(order) != names:
        raise PlanningError(f"algorithm {algorithm} returned {list(order)}, not an order of "
                            f"the positive variables {list(cq.positive_names)}")
    return Plan(query, order, version, algorithm, cost_fn(problem, order))


def _problem(cq, stats, name) -> PlanProblem:
    if stats is None:
        return problem_from_query(cq, name=name)
    get = stats.get if isinstance(stats, Mapping) else (lambda k: getattr(stats, k, None))
    return problem_from_query(cq, get("rates"), get("selectivities"), get("pass_rates"),
                              name=name)


def order_cost(cq: CompiledQuery, stats, order: tuple, alpha: float = 0.0,
               executed: bool = True) -> float:
    """The estimated cost of ``order`` for ``cq`` under ``stats`` (same model as make_plan)."""
    problem = stats if isinstance(stats, PlanProblem) else _problem(cq, stats, None)
    order = tuple(order)
    if set(order) != set(cq.positive_names) or len(order) != len(cq.positive_names):
        raise PlanningError(f"{list(order)} is not an order of the positive variables "
                            f"{list(cq.positive_names)}")
    return combined_cost(problem.with_executed(bool(executed)), order, alpha=float(alpha))
