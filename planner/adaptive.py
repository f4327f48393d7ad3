"""Adaptive re-planning (docs/planning.md; the deviation-aware optimizer of OpenCEP and the
adaptive CEP of Kolchinsky & Schuster, VLDB 2018, section 5, and their "Efficient Adaptive
Detection of Complex Event Patterns", PVLDB 11(11), 2018).

A query's plan is rebuilt only when some statistic (an arrival rate or a selectivity) has moved
away from the value the current plan was built with by more than a factor ``threshold``; the new
plan replaces the old one only if its estimated cost, under the new statistics, is lower than
the old plan's by more than ``margin`` (hysteresis). Noise below the threshold costs nothing;
a re-plan that does not pay off only moves the reference statistics.
"""
from __future__ import annotations

from dataclasses import dataclass

from raycep.cep.errors import PlanningError
from raycep.cep.lang.compiler import CompiledQuery
from raycep.planner.algorithms import ALGORITHMS
from raycep.planner.plan import TREE_NFA, Plan, make_plan, order_cost
from raycep.planner.stats import Statistics


@dataclass(frozen=True)
class AdaptationSettings:
    algorithm: str = "DP-LD"      # any planner.ALGORITHMS name, or TREE_NFA
    adaptive: bool = True         # False: plan once (on the first statistics) and keep it
    threshold: float = 2.0        # re-plan when a statistic moved by more than this factor
    margin: float = 0.1           # replace only if the new cost < (1 - margin) * current cost
    alpha: float = 0.0            # weight of the latency cost (VLDB 2018 section 5.1)

    def __post_init__(self):
        if self.algorithm != TREE_NFA and self.algorithm not in ALGORITHMS:
            known = ", ".join([*ALGORITHMS, TREE_NFA])
            raise PlanningError(f"unknown planning algorithm {self.algorithm!r} (known: {known})")
        if not self.threshold > 1.0:
            raise PlanningError(f"threshold must be > 1, got {self.threshold!r}")
        if not 0.0 <= self.margin < 1.0:
            raise PlanningError(f"margin must be in [0, 1), got {self.margin!r}")


class AdaptivePolicy:
    """The plan of one query and the statistics it was built with."""

    def __init__(self, cq: CompiledQuery, name: str, settings: AdaptationSettings,
                 first_version: int = 1):
        self.cq = cq
        self.first_version = first_version   # > 1: plans of an earlier planner are installed
        self.name = name
        self.settings = settings
        self.plan: Plan | None = None
        self.reference: Statistics | None = None
        self.replans = 0          # plans computed after the first
        self.swaps = 0            # ... of which replaced the current plan

    def consider(self, stats: Statistics) -> Plan | None:
        """A new plan to install, or None to keep the current one."""
        s = self.settings
        if self.plan is None:
            self.plan = make_plan(self.cq, stats, s.algorithm, s.alpha,
                                  version=self.first_version, name=self.name)
            self.reference = stats
            return self.plan
        if s.algorithm == TREE_NFA or not s.adaptive:
            return None
        if self.reference.deviation(stats) <= s.threshold:
            return None
        self.replans += 1
        self.reference = stats
        candidate = make_plan(self.cq, stats, s.algorithm, s.alpha,
                              version=self.plan.version + 1, name=self.name)
        if candidate.order == self.plan.order:
            return None
        current = order_cost(self.cq, stats, self.plan.order, s.alpha)
        if not candidate.cost < (1.0 - s.margin) * current:
            return None
        self.swaps += 1
        self.plan = candidate
        return candidate
