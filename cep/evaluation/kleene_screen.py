"""A bulk screen for skip-till-next-match Kleene runs (issue 35).

Under skip-till-next-match the elements of a Kleene block follow each other
deterministically (SASE+, "Efficient Pattern Matching over Event Streams", section 3.2: the
NFA^b ignores an event that fails the take condition): when the take condition is one order
comparison of consecutive elements, ``b[i].x OP b[i-1].x`` (``steps.Step.ordered``), and
nothing else decides which events the block takes, element ``i + 1`` is the first later
candidate whose ``x`` satisfies ``OP`` against element ``i``'s: its *next* element. A run
is then a chain of next elements, whatever its first element and whatever the plan order.

For ``SEQ(a, b+, c)`` a match with trigger ``c`` holds a run of at least ``min_len``
elements (``b.LEN >= K``), all after ``a`` and before ``c``, with ``a`` no earlier than the
window before ``c``. So a trigger can have a match only if some chain of ``min_len``
elements starts at ``c.ts - window`` or later and ends before ``c``. For a chunk of
triggers this is decided per partition with one stack pass over the candidates (next
elements), ``min_len - 1`` gathers and a running maximum; the triggers it rules out have no
match, and the others are evaluated one by one as before. The screen only reads the
structure, so the matches do not depend on it. The triggers it rules out are counted as
evaluated; the condition counters are not (the planner's selectivities come from the
triggers the evaluator ran).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raycep.cep.evaluation.steps import _min_len, _ordered


@dataclass(frozen=True)
class KleeneScreen:
    """The screen of one ``SEQ(a, b+, c)`` branch triggered at ``c``."""
    kleene_type: str             # the type of ``b``'s candidates
    attr: str                    # the take condition's attribute
    op: object                   # op(current, previous): the take condition
    min_len: int                 # the fewest elements a run of a match has
    window: float                # the largest window of the queries screened


def kleene_screen(cqs: list, b: int, name: str) -> KleeneScreen | None:
    """The screen of branch ``b`` triggered at variable ``name`` for the queries ``cqs``
    (one query, or a group's members: the same structure, the loosest length and window),
    or None where the shape is not the one described above."""
    found = [_shape(cq, cq.branches[b], name) for cq in cqs if b < len(cq.branches)]
    if not found or len(found) != len(cqs) or None in found:
        return None
    first = found[0]
    if any(s[:3] != first[:3] for s in found):
        return None
    kleene_type, attr, op = first[:3]
    return KleeneScreen(kleene_type, attr, op, min(s[3] for s in found),
                        max(cq.window for cq in cqs))


def _shape(cq, branch, name: str) -> tuple | None:
    """``(type of b, attr, op, min_len)`` for ``SEQ(a, b+, c)`` triggered at ``c`` under
    skip-till-next-match, no negation, no SLIDE, the take condition of ``b`` the one order
    comparison of consecutive elements and no other element-wise condition; else None."""
    if cq.strategy != "skip_till_next_match" or cq.slide or branch.negations or \
            len(branch.positives) != 3:
        return None
    a, k, c = branch.positives
    if a.kleene or not k.kleene or c.kleene or c.name != name or None in (k.type, c.type):
        return None
    if branch.before[k.name] != frozenset((a.name,)) or \
            branch.before[c.name] != frozenset((a.name, k.name)):
        return None
    kn = k.name
    element_wise = [x for x in branch.conjuncts
                    if x.kleene_i == kn and kn not in x.set_level and x.max_first.get(kn, 0) == 0]
    deciding = [x for x in branch.conjuncts
                if kn in x.vars and kn not in x.set_level
                and (x.kleene_i == kn or x.max_first.get(kn, 0) > 0)]
    if any(x not in element_wise for x in deciding) or \
            any(x.unary or x.vars != {kn} for x in element_wise):
        return None
    ordered = _ordered(tuple(element_wise), kn)
    if ordered is None:
        return None
    min_len = max((_min_len(x, kn) for x in branch.conjuncts), default=1)
    return k.type, ordered[0], ordered[1], min_len


def screen_triggers(screen: KleeneScreen, index, parts: list, triggers: list) -> list:
    """Per trigger of ``triggers`` (in time order), whether it can have no match (True) or
    must be evaluated (False). ``parts``: ``[(partition, its triggers)]`` (ALL when the
    query is not partitioned). A partition whose candidates hold a value that is not an
    exact number is left to the evaluator."""
    ruled_out: dict = {}
    for part, mine in parts:
        buf = index.buffer(part, screen.kleene_type)
        if buf is None or not len(buf):
            for t in mine:
                ruled_out[id(t)] = True
            continue
        lo, hi = buf.span(mine[0].ts - screen.window, mine[-1].ts)
        if hi <= lo:
            for t in mine:
                ruled_out[id(t)] = True
            continue
        values, odd = buf.numeric(lo, hi, screen.attr)
        if odd.any() or np.isnan(values).any():
            continue
        times = np.asarray(buf.times(lo, hi), dtype=np.float64)
        reach = _chain_starts(values.tolist(), times, screen.op, screen.min_len)
        stamps = np.fromiter((t.ts for t in mine), dtype=np.float64, count=len(mine))
        # the candidates before each trigger: those of earlier times, and those of its time
        # unless that is the trigger alone (where times tie, the ids order: all are kept)
        before = np.searchsorted(times, stamps, side="right")
        if screen.kleene_type == mine[0].type:
            earlier = np.searchsorted(times, stamps, side="left")
            before = np.where(before - earlier == 1, earlier, before)
        latest = np.maximum.accumulate(reach)
        best = np.where(before > 0, latest[np.maximum(before - 1, 0)], -np.inf)
        for t, none in zip(mine, (best < stamps - screen.window).tolist()):
            ruled_out[id(t)] = none
    return [ruled_out.get(id(t), False) for t in triggers]


def _chain_starts(values: list, times, op, min_len: int):
    """Per candidate ``e``: the latest time of a candidate whose chain of next elements
    reaches ``e`` in ``min_len - 1`` steps (-inf: none)."""
    n = len(values)
    nexts = np.full(n + 1, n, dtype=np.intp)      # n: no next element
    stack: list = []
    for j, v in enumerate(values):
        while stack and op(v, values[stack[-1]]):
            nexts[stack.pop()] = j
        stack.append(j)
    end = np.arange(n, dtype=np.intp)
    for _ in range(min_len - 1):
        end = nexts[end]
    reach = np.full(n + 1, -np.inf)
    np.maximum.at(reach, end, times)
    return reach[:n]


def result(ruled_out: list) -> tuple:
    """The triggers' result as ``cep.evaluation.bulk.evaluate`` gives it: no matches, and
    ``good`` (decided) for those ruled out; no condition counted."""
    return [], [0] * (len(ruled_out) + 1), ruled_out, []
