"""The plan-generation problem of one compiled query (VLDB 2018, sections 3.1, 4 and 5.2).

``problem_from_query(cq, rates, selectivities)`` reduces a CompiledQuery to what the cost model
needs, per DNF branch (section 4, "nested patterns": one conjunctive sub-pattern per branch):
the positive variables with their type's arrival rate and Kleene flag, the selectivity matrix
``sel[i][j]``, the predicates over three or more variables, the SEQ precedence, the negations
and the trigger variables; plus the window W and the selection strategy.

Keys and defaults (the statistics collector must follow them):

* ``rates``: event type -> events per second. A type without a rate gets ``DEFAULT_RATE``; an
  untyped variable (``SEQ(a, ...)``: any event) gets the sum of all given rates (or
  ``DEFAULT_RATE`` when none is given).
* ``selectivities``: index of the conjunct in ``cq.conjuncts`` -> fraction of tests that pass
  (the engine counts ``tested``/``passed`` per Conjunct, see ``measured_selectivities``). An
  unmeasured conjunct gets a System-R style guess from its operator, ``OPERATOR_SELECTIVITY``
  (``=`` 0.1, ``!=`` 0.9, ``< <= > >=`` 0.5), and ``DEFAULT_SELECTIVITY`` = 1.0 for anything
  else (OR, NOT, a boolean attribute, ...).
* ``pass_rates`` (optional): negated variable name -> probability that a partial match survives
  the negation check; otherwise ``exp(-W * r_neg * s_neg)``, the Poisson probability that no
  event of the negated type satisfying the negation's conjuncts (product ``s_neg``) falls in a
  window.

Conjunct placement: a conjunct over exactly one variable ``i`` goes to ``sel[i][i]``, over
exactly two ``i, j`` to ``sel[i][j] = sel[j][i]`` (products when several conjuncts share the
same variables). A conjunct over three or more positive variables is not spread over the pairs:
it is kept whole in ``multi`` and its selectivity applies to a prefix once all of its variables
are bound, which is where the evaluator checks it (the generalisation of the pairwise formula
that section 2.1 mentions). A conjunct with no variable does not depend on the order and is
left out. Conjuncts that mention a negated variable make up the negation's selectivity, and
their positive variables are among the ones the negation check waits for. The equivalence
test ``[attr]`` is not modelled: rates are expected per partition when a query is partitioned.

Execution model (``PlanProblem.executed``, default True). The engine evaluates lazily: for each
event that can be a match's last event it binds that trigger variable ``t`` first, then the other
positive variables of the branch in the plan's order (cep.evaluation.manager ``_steps_for``). So
where a plan puts ``t`` is ignored for ``t``'s own evaluations. In the executed mode the cost
functions (planner.cost) price, per branch and per trigger ``t``, the order ``(t,) + (the others in
plan order)``; a variable that is the only trigger of every branch it belongs to (the last variable
of a SEQ) is then ``fixed``: its position never matters, plans put it first and the search
algorithms order only the other (``free``) variables. With ``executed=False`` the cost
functions price the plan's full order as written, the paper's model, and every variable is free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from raycep.cep.errors import PlanningError
from raycep.cep.lang import ast
from raycep.cep.lang.compiler import CompiledQuery

DEFAULT_RATE = 1.0
DEFAULT_SELECTIVITY = 1.0
OPERATOR_SELECTIVITY = {"=": 0.1, "!=": 0.9, "<": 0.5, "<=": 0.5, ">": 0.5, ">=": 0.5}


@dataclass(frozen=True)
class NegationProblem:
    """A negated variable of a branch, checked as soon as ``depends`` is bound (section 4)."""
    name: str
    rate: float
    depends: frozenset       # positive names: latest of before, earliest of after, its conjuncts'
    selectivity: float       # product of the selectivities of the conjuncts that mention it
    pass_prob: float         # probability that a partial match survives the check
    deferred: bool           # nothing after it: confirmed when the window closes


@dataclass(frozen=True)
class BranchProblem:
    """One DNF branch: positive variables in pattern order and what links them.

    ``before[i]``: names that SEQ puts before ``names[i]``; ``multi``: (names, selectivity) of
    the conjuncts over three or more positive variables; ``triggers``: the variables that can
    hold a match's last event (the ``T_n`` of section 5.1).
    """
    names: tuple
    rates: tuple
    kleene: tuple
    sel: tuple
    multi: tuple
    before: tuple
    negations: tuple
    triggers: tuple

    @cached_property
    def index(self) -> dict:
        return {n: i for i, n in enumerate(self.names)}

    @cached_property
    def pred_masks(self) -> tuple:
        """Per variable, the bit mask of the variables that must precede it."""
        return tuple(_mask(self.index, b) for b in self.before)

    @cached_property
    def multi_masks(self) -> tuple:
        return tuple((_mask(self.index, names), s) for names, s in self.multi)

    @cached_property
    def negation_masks(self) -> tuple:
        return tuple((_mask(self.index, n.depends), n.pass_prob) for n in self.negations)

    @cached_property
    def trigger_mask(self) -> int:
        return _mask(self.index, self.triggers)


@dataclass(frozen=True)
class PlanProblem:
    """What a plan search needs to know about a query (``names``: its positive variables in
    pattern order, with their type rate and Kleene flag).

    ``executed``: cost plans as the engine runs them, trigger first (module doc); False: the
    paper's model, the full order as written. ``fixed`` / ``free``: see the module doc.
    """
    name: str
    names: tuple
    rates: tuple
    kleene: tuple
    window: float
    strategy: str
    branches: tuple
    executed: bool = True

    @cached_property
    def index(self) -> dict:
        return {n: i for i, n in enumerate(self.names)}

    @cached_property
    def fixed(self) -> tuple:
        """Variables whose position no executed order depends on (executed mode only): each is
        the only trigger of every branch it belongs to. Pattern order; plans list them first."""
        if not self.executed:
            return ()
        return tuple(n for n in self.names
                     if all(br.triggers == (n,) for br in self.branches if n in br.index))

    @cached_property
    def free(self) -> tuple:
        """The variables a plan search orders (pattern order): all but ``fixed``."""
        fixed = set(self.fixed)
        return tuple(n for n in self.names if n not in fixed)

    def with_executed(self, executed: bool) -> "PlanProblem":
        """This problem under the executed model (True) or the paper's raw model (False)."""
        return self if self.executed == executed else replace(self, executed=bool(executed))


def _mask(index: dict, names) -> int:
    m = 0
    for n in names:
        m |= 1 << index[n]
    return m


def problem_from_query(cq: CompiledQuery, rates: dict | None = None,
                       selectivities: dict | None = None, pass_rates: dict | None = None,
                       name: str | None = None, executed: bool = True) -> PlanProblem:
    """Build the PlanProblem of ``cq`` from measured rates and selectivities (keys: see module);
    ``executed``: the execution model the costs follow (module doc; False: the paper's)."""
    rates = _check_rates(rates or {})
    sels = _conjunct_selectivities(cq, selectivities or {})
    pass_rates = dict(pass_rates or {})
    for var, p in pass_rates.items():
        if not _is_prob(p):
            raise PlanningError(f"pass rate of negation {var!r} must be in [0, 1], got {p!r}")
    position = {id(c): i for i, c in enumerate(cq.conjuncts)}
    names = cq.positive_names
    branches = tuple(_branch(cq, b, rates, sels, position, pass_rates) for b in cq.branches)
    return PlanProblem(
        name=name if name is not None else (cq.query.name or ""),
        names=names,
        rates=tuple(type_rate(rates, cq.variables[n].type) for n in names),
        kleene=tuple(cq.variables[n].kleene for n in names),
        window=cq.window, strategy=cq.strategy, branches=branches, executed=bool(executed))


def type_rate(rates: dict, type_name: str | None) -> float:
    """Arrival rate of a variable's type; untyped: the sum of all rates."""
    if type_name is None:
        return sum(rates.values()) if rates else DEFAULT_RATE
    return rates.get(type_name, DEFAULT_RATE)


def default_selectivity(conjunct) -> float:
    """The guess for an unmeasured conjunct: by comparison operator, else 1.0."""
    expr = conjunct.expr
    if isinstance(expr, ast.Compare):
        return OPERATOR_SELECTIVITY.get(expr.op, DEFAULT_SELECTIVITY)
    return DEFAULT_SELECTIVITY


def measured_selectivities(cq: CompiledQuery, min_tested: int = 1) -> dict:
    """conjunct index -> passed/tested from the engine's counters (conjuncts tested enough)."""
    return {i: c.passed / c.tested for i, c in enumerate(cq.conjuncts)
            if c.tested >= max(1, min_tested)}


def _is_prob(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0


def _check_rates(rates: dict) -> dict:
    for t, r in rates.items():
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r < math.inf:
            raise PlanningError(f"arrival rate of type {t!r} must be a finite number >= 0, "
                                f"got {r!r}")
    return dict(rates)


def _conjunct_selectivities(cq: CompiledQuery, given: dict) -> list:
    n = len(cq.conjuncts)
    for key, s in given.items():
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < n:
            raise PlanningError(f"selectivity key {key!r} is not a conjunct index of this query "
                                f"(0..{n - 1}, the order of cq.conjuncts)")
        if not _is_prob(s):
            raise PlanningError(f"selectivity of conjunct {key} must be in [0, 1], got {s!r}")
    return [float(given[i]) if i in given else default_selectivity(c)
            for i, c in enumerate(cq.conjuncts)]


def _branch(cq, branch, rates, sels, position, pass_rates) -> BranchProblem:
    names = branch.names
    index = {v: i for i, v in enumerate(names)}
    sel = [[1.0] * len(names) for _ in names]
    multi = []
    for c in branch.conjuncts:
        s = sels[position[id(c)]]
        vs = sorted(c.vars, key=index.__getitem__)
        if len(vs) == 1:
            sel[index[vs[0]]][index[vs[0]]] *= s
        elif len(vs) == 2:
            i, j = index[vs[0]], index[vs[1]]
            sel[i][j] *= s
            sel[j][i] *= s
        elif len(vs) > 2:
            multi.append((frozenset(vs), s))
    negations = tuple(_negation(cq, branch, neg, rates, sels, position, pass_rates)
                      for neg in branch.negations)
    return BranchProblem(
        names=names,
        rates=tuple(type_rate(rates, v.type) for v in branch.positives),
        kleene=tuple(v.kleene for v in branch.positives),
        sel=tuple(tuple(row) for row in sel), multi=tuple(multi),
        before=tuple(frozenset(branch.before[n]) for n in names),
        negations=negations, triggers=tuple(branch.triggers))


def _negation(cq, branch, neg, rates, sels, position, pass_rates) -> NegationProblem:
    before, after = neg.before, neg.after
    latest = {v for v in before if not any(v in branch.before[u] for u in before)}
    earliest = {v for v in after if not (branch.before[v] & after)}
    own = {v for c in neg.conjuncts for v in c.vars if v != neg.var.name}
    s = math.prod(sels[position[id(c)]] for c in neg.conjuncts)
    rate = type_rate(rates, neg.var.type)
    p = pass_rates.get(neg.var.name)
    if p is None:
        p = math.exp(-cq.window * rate * s)
    return NegationProblem(name=neg.var.name, rate=rate, depends=frozenset(latest | earliest | own),
                           selectivity=s, pass_prob=float(p), deferred=neg.deferred)
