"""Cost functions of order-based plans (VLDB 2018, sections 3.1, 4, 5.1 and 5.2).

Every function is pure, ``(problem, order) -> float``. ``order`` lists positive variable names;
a full plan lists all of them, and a prefix of a plan is accepted too (GREEDY and DP-LD cost
prefixes). Each DNF branch is costed on the projection of the order onto its variables, and the
query's cost is the sum over branches (each branch is evaluated on its own, section 4).

Which orders are priced depends on ``problem.executed`` (planner.problem, "Execution model"):

* raw (``executed=False``, the paper's model): each branch's projection of ``order``, as written.
* executed (the default): what the lazy engine runs. For every trigger variable ``t`` of a branch
  (``BranchProblem.triggers``), the engine evaluates ``(t,) + (the branch's other variables in
  the order of ``order``)``, see ``executed_orders``; the branch costs the SUM of the raw cost of
  these orders over its triggers. A trigger is bound in its own evaluations even when a plan
  prefix does not list it yet, so the trigger terms are constant and the empty order already
  costs them. Weighting: every prefix term of Cost_ord((t,) + rest) carries the factor
  ``W * r_t``, the number of evaluations ``t`` triggers per window, so the plain sum is the
  trigger-arrival-rate-weighted total (``W * R`` times the mean cost of one evaluation when the
  trigger of an evaluation is ``t`` with probability ``r_t / R``, ``R`` = sum of the trigger
  rates); a trigger of rate 0 adds nothing. A branch with one trigger (a SEQ) costs exactly
  Cost((t,) + rest). Cost_ord^next is summed the same way. For the latency cost see
  ``latency_cost``.

Model, for the prefix ``S_k`` of the first ``k`` variables of a priced order:

* ``w_v = W * r_v``: the expected number of events of ``v`` in a window; for a Kleene variable
  the power-set type of section 4, ``r' = 2^(r*W) / W``, so ``w_v = 2^(r*W)``, with the
  exponent capped at ``KLEENE_MAX_EXPONENT`` so that products stay finite.
* ``f(S_k)``: the product of ``sel[i][j]`` over the pairs ``i <= j`` of ``S_k`` (section 3.1),
  times the selectivity of every conjunct over three or more variables all in ``S_k``, times
  the pass probability of every negation whose ``depends`` lie in ``S_k`` (a negation is
  checked at the earliest position where the variables it depends on are bound, section 4),
  times ``P_seq(S_k)``: the probability that the events of ``S_k``, each uniform in the window,
  respect the SEQ precedence among them. This is the selectivity of the timestamp predicates
  that section 4 adds to reduce SEQ to AND; it is computed exactly (linear extensions of the
  SEQ/AND partial order restricted to ``S_k``, divided by ``|S_k|!``), not as a product of 1/2s.

Every term depends only on the set ``S_k``, never on the order inside it. In the executed mode
the prefixes of the order run for trigger ``t`` are ``{t} | (P & branch)`` for the prefixes ``P``
of the plan, so every term still depends only on the set of variables a plan prefix has bound
(the triggers being bound from the start). So every cost here (and any sum of them) is additive
over plan prefixes, which is what makes DP-LD exact.
"""
from __future__ import annotations

import math
from functools import lru_cache

KLEENE_MAX_EXPONENT = 32.0


def window_count(rate: float, kleene: bool, window: float) -> float:
    """Expected events of a variable in a window: ``W*r``, or ``2^(r*W)`` subsets for a Kleene
    variable (section 4), with the exponent capped at KLEENE_MAX_EXPONENT."""
    if kleene:
        return 2.0 ** min(rate * window, KLEENE_MAX_EXPONENT)
    return rate * window


def executed_orders(branch, order) -> tuple:
    """The orders the engine runs for ``branch`` under the plan ``order``: one per trigger
    ``t``, ``(t,) + (the branch's other variables in plan order)`` (cep.evaluation.manager
    ``_steps_for``). Variables of ``order`` outside the branch are dropped; so are branch variables
    missing from ``order`` (a plan prefix), except the trigger, which its evaluation always binds
    first."""
    index = branch.index
    return tuple((t,) + tuple(n for n in order if n != t and n in index)
                 for t in branch.triggers)


def _priced(problem, order):
    """(branch, order to price) pairs under the problem's execution model (module doc)."""
    for br in problem.branches:
        if problem.executed and br.triggers:
            for run in executed_orders(br, order):
                yield br, run
        else:
            yield br, order


def _sum_prefixes(problem, order, which: int) -> float:
    """Sum over the priced orders' prefixes of their window term (0: ``W^k * prod r``,
    1: ``W * min r``) times the predicate factor."""
    total = 0.0
    for br, run in _priced(problem, order):
        for terms in _prefixes(problem, br, run):
            factor = terms[2]
            total += terms[which] * factor if factor else 0.0
    return total


def cost_ord(problem, order) -> float:
    """Cost_ord (section 3.1, skip-till-any-match): expected number of partial matches,
    ``sum_k W^k * prod_{i<=k} r_{p_i} * prod_{i<=j<=k} sel_{p_i,p_j}`` (model: module doc),
    of the orders the execution model runs (executed mode: summed over triggers)."""
    return _sum_prefixes(problem, order, 0)


def cost_ord_next(problem, order) -> float:
    """Cost_ord^next (section 5.2, skip-till-next-match): ``sum_k m[k]`` with
    ``m[k] = W * min(r_{p_1..p_k}) * prod_{i<=j<=k} sel_{p_i,p_j}``.

    The paper prints ``sum_k W * m[k]``; ``m[k]`` already counts the partial matches of a
    window, so the extra constant ``W`` is left out (the best order is the same; the scale
    matches cost_ord, which keeps the latency weight alpha comparable across strategies).
    Executed mode: summed over the triggers' orders, like cost_ord.
    """
    return _sum_prefixes(problem, order, 1)


def latency_cost(problem, order) -> float:
    """Cost_lat_ord (section 5.1): ``sum_{T_i in Succ_O(T_n)} W * r_i``, the buffered events
    still to examine after the last event of a match (type ``T_n``) arrives.

    ``T_n`` ranges over the branch's trigger variables (those with nothing after them). A SEQ
    has one; for AND, where the last event is not known in advance (the paper suggests an
    output profiler), each trigger is taken as equally likely and the mean is used. Branches
    are summed, like cost_ord. Only positive variables count, as in the paper; Kleene
    variables count their power-set size. Mean and sum keep the cost additive over prefixes.

    Executed mode: the engine binds ``T_n`` first, so every other variable of the branch is
    examined after the last event arrives, whatever the plan: per trigger ``t``,
    ``sum_{v != t} w_v`` over the branch variables the plan (prefix) lists, mean over the
    triggers, sum over branches. For a full plan this does not depend on the order (the lazy
    engine does all of its work after the trigger), so alpha shifts the reported cost but never
    changes the executed-mode choice.
    """
    total = 0.0
    window = problem.window
    for br in problem.branches:
        triggers = br.trigger_mask
        n_trig = bin(triggers).count("1")
        if not n_trig:
            continue
        index, lat = br.index, 0.0
        if problem.executed:
            for name in order:
                v = index.get(name)
                if v is None:
                    continue
                others = n_trig - (triggers >> v & 1)
                if others:
                    lat += window_count(br.rates[v], br.kleene[v], window) * others
            total += lat / n_trig
            continue
        mask = 0
        for name in order:
            v = index.get(name)
            if v is None:
                continue
            seen = bin(triggers & mask).count("1")
            if seen:
                lat += window_count(br.rates[v], br.kleene[v], window) * seen
            mask |= 1 << v
        total += lat / n_trig
    return total


def combined_cost(problem, order, alpha: float) -> float:
    """Section 5.1: ``Cost = Cost_trpt + alpha * Cost_lat`` (throughput cost by strategy)."""
    cost = cost_for(problem)(problem, order)
    return cost + alpha * latency_cost(problem, order) if alpha else cost


COST_BY_STRATEGY = {
    "skip_till_any_match": cost_ord,
    "skip_till_next_match": cost_ord_next,
    # section 5.2 bases both contiguity models on skip-till-next-match (their adjacency
    # conditions are not modelled).
    "partition_contiguity": cost_ord_next,
    "strict_contiguity": cost_ord_next,
}


def cost_for(problem):
    """The throughput cost function of the problem's selection strategy."""
    return COST_BY_STRATEGY.get(problem.strategy, cost_ord)


def _prefixes(problem, br, order):
    """For each prefix of the branch's projection of ``order``: (prod of w, min of w, f(S_k))."""
    index, sel, window = br.index, br.sel, problem.window
    multi = br.multi_masks
    negs = list(br.negation_masks)
    bound, mask = [], 0
    factor, prod_w, min_w = 1.0, 1.0, math.inf
    for name in order:
        v = index.get(name)
        if v is None:
            continue
        row = sel[v]
        f = row[v]
        for u in bound:
            f *= row[u]
        bit = 1 << v
        mask |= bit
        for m, s in multi:
            if m & bit and m & mask == m:
                f *= s
        if negs:
            keep = []
            for m, p in negs:
                if m & mask == m:
                    f *= p
                else:
                    keep.append((m, p))
            negs = keep
        bound.append(v)
        factor *= f
        w = window_count(br.rates[v], br.kleene[v], window)
        prod_w *= w
        min_w = min(min_w, w)
        yield prod_w, min_w, factor * seq_probability(br.pred_masks, mask)


@lru_cache(maxsize=1 << 16)
def seq_probability(preds: tuple, mask: int) -> float:
    """P(independent uniform timestamps of the variables in ``mask`` respect the precedence):
    linear extensions of the order ``preds`` (bit masks of predecessors) on ``mask`` / |mask|!.

    SEQ/AND trees give series-parallel orders: split into parts with no order between them
    (probabilities multiply) or into blocks that follow one another (one block order out of
    ``n! / prod n_i!``). Anything else is counted by brute force over down-sets.
    """
    elems = [v for v in range(len(preds)) if mask >> v & 1]
    if len(elems) <= 1:
        return 1.0
    if not any(preds[v] & mask for v in elems):
        return 1.0

    def comparable(u, v):
        return (preds[v] >> u & 1) or (preds[u] >> v & 1)

    parts = _components(elems, comparable)
    if len(parts) > 1:
        return math.prod(seq_probability(preds, _bits(p)) for p in parts)
    blocks = _components(elems, lambda u, v: not comparable(u, v))
    if len(blocks) > 1:
        p = math.prod(seq_probability(preds, _bits(b)) * math.factorial(len(b)) for b in blocks)
        return p / math.factorial(len(elems))
    return _linear_extensions(preds, mask) / math.factorial(len(elems))


def _bits(elems) -> int:
    m = 0
    for v in elems:
        m |= 1 << v
    return m


def _components(elems, linked) -> list:
    left, parts = list(elems), []
    while left:
        part = [left.pop(0)]
        frontier = list(part)
        while frontier:
            u = frontier.pop()
            near = [v for v in left if linked(u, v)]
            for v in near:
                left.remove(v)
            part.extend(near)
            frontier.extend(near)
        parts.append(part)
    return parts


def _linear_extensions(preds: tuple, mask: int) -> int:
    memo = {0: 1}

    def count(s):
        if s not in memo:
            memo[s] = sum(count(s & ~(1 << v)) for v in range(len(preds))
                          if s >> v & 1 and not preds[v] & s)
        return memo[s]
    return count(mask)
