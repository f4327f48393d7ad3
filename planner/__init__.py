"""raycep planner: plan problems, cost models and plan search (Kolchinsky & Schuster,
"Join Query Optimization Techniques for Complex Event Processing Applications", VLDB 2018).

Pipeline: CompiledQuery + statistics --problem_from_query--> PlanProblem --ALGORITHMS[name]
with a cost function--> order --make_plan--> Plan (handed to PatternManager.set_order).
"""
from raycep.planner.algorithms import ALGORITHMS
from raycep.planner.cost import (combined_cost, cost_for, cost_ord, cost_ord_next, latency_cost)
from raycep.planner.plan import TREE_NFA, Plan, make_plan
from raycep.planner.problem import PlanProblem, measured_selectivities, problem_from_query

__all__ = ["ALGORITHMS", "TREE_NFA", "Plan", "PlanProblem", "combined_cost", "cost_for",
           "cost_ord", "cost_ord_next", "latency_cost", "make_plan", "measured_selectivities",
           "problem_from_query"]
