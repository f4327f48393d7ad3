"""What a query is and how it is planned, for a person (``raycep explain``, issue 37).

A pure function of the compiled query, the statistics the planner holds for it and the plan
in use: the DNF branches (positive and negated variables, conditions), the current order with
its estimated cost, the order the planning algorithm would choose now with its cost, and per
condition the selectivity the planner uses (measured, or its default guess). Costs follow the
cost model of "Join Query Optimization Techniques for Complex Event Processing Applications"
(Kolchinsky & Schuster, VLDB 2018), sections 3-4, as ``make_plan`` computes them.
"""
from __future__ import annotations

from raycep.cep.lang.compiler import CompiledQuery
from raycep.planner.plan import TREE_NFA, make_plan, order_cost
from raycep.planner.problem import default_selectivity, problem_from_query, type_rate


def explain(cq: CompiledQuery, name: str, rates: dict, selectivities: dict,
            order: tuple | None, version: int | None, algorithm: str,
            alpha: float = 0.0) -> dict:
    """``rates``: events/s by type; ``selectivities``: conjunct index -> estimate (what the
    planner holds; missing ones take the default guess); ``order`` / ``version``: the plan in
    use (None: Tree-NFA's ad hoc order)."""
    problem = problem_from_query(cq, rates, selectivities, name=name)
    best = make_plan(cq, problem, algorithm, alpha, name=name)
    return {
        "query": name,
        "strategy": cq.strategy,
        "window": cq.window,
        "partition_by": list(cq.equivalence),
        "branches": [_branch(b) for b in cq.branches],
        "rates": {t: type_rate(rates, t) for t in sorted(t for t in cq.types if t)},
        "rates_measured": bool(rates),
        "conditions": [
            {"text": c.text, "selectivity": selectivities.get(i, default_selectivity(c)),
             "measured": i in selectivities}
            for i, c in enumerate(cq.conjuncts)],
        "plan": {"order": list(order) if order else None, "version": version,
                 "cost": order_cost(cq, problem, order, alpha) if order else None},
        "best": {"order": list(best.order) if best.order else None, "algorithm": algorithm,
                 "cost": best.cost},
    }


def _branch(branch) -> dict:
    return {"variables": [{"name": v.name, "type": v.type, "kleene": v.kleene}
                          for v in branch.positives],
            "negations": [{"name": n.var.name, "type": n.var.type,
                           "after": sorted(n.before), "before": sorted(n.after)}
                          for n in branch.negations],
            "conditions": [c.text for c in branch.conjuncts]}


def render(info: dict) -> str:
    """``explain``'s dict (with the gateway's ``counters``, ``group`` and ``path``, when
    given) as text."""
    lines = [f"query {info['query']}: {info['strategy'].replace('_', '-')}, within "
             f"{info['window']:g} s" + (f", per {', '.join(info['partition_by'])}"
                                        if info["partition_by"] else "")]
    for k, b in enumerate(info["branches"], start=1):
        names = ", ".join(f"{v['type'] or 'any'}{'+' if v['kleene'] else ''} {v['name']}"
                          for v in b["variables"])
        head = f"branch {k}: {names}" if len(info["branches"]) > 1 else f"variables: {names}"
        lines.append(head)
        for n in b["negations"]:
            lines.append(f"  not {n['type'] or 'any'} {n['name']} (after "
                         f"{', '.join(n['after']) or 'the start'}, before "
                         f"{', '.join(n['before']) or 'the end'})")
    rates = ", ".join(f"{t} {r:g}/s" for t, r in info["rates"].items())
    lines.append(f"rates the planner uses: {rates}" + (
        "" if info.get("rates_measured") else " (defaults: no statistics reached the planner "
                                              "yet)"))
    plan, best = info["plan"], info["best"]
    current = ",".join(plan["order"]) if plan["order"] else TREE_NFA
    cost = f", estimated cost {plan['cost']:.4g}" if plan["cost"] is not None else ""
    lines.append(f"plan in use: {current}" + (f" (version {plan['version']})"
                                              if plan["version"] else "") + cost)
    lines.append(f"{best['algorithm']} would choose now: "
                 f"{','.join(best['order']) if best['order'] else TREE_NFA}, estimated cost "
                 f"{best['cost']:.4g}")
    if info.get("group"):
        g = info["group"]
        lines.append(f"evaluated with {len(g['queries'])} queries as group {g['name']}"
                     + (f" (they differ in: {'; '.join(g['varying'])})" if g["varying"] else ""))
    if info.get("path"):
        p = info["path"]
        lines.append(f"triggers: {p.get('bulk', 0):,} in bulk, {p.get('per_trigger', 0):,} one "
                     f"by one" + (f" ({p['why']})" if p.get("why") else ""))
    counters = info.get("counters") or {}
    lines.append("conditions (the selectivity the planner uses; the counts so far):")
    for c in info["conditions"]:
        got = counters.get(c["text"])
        seen = f"; passed {got['passed']:,} of {got['tested']:,}" if got and got["tested"] \
            else ""
        lines.append(f"  {c['text']}: {c['selectivity']:.3g} "
                     f"({'measured' if c['measured'] else 'default guess'}{seen})")
    return "\n".join(lines)
