"""Steps: the description of one branch's evaluation in a given plan order (what each step
binds, which conjuncts and negations it checks, and how a skip-till-next-match Kleene block is
run), built once per (branch, order) and executed by ``cep.evaluation.evaluator.Evaluation``."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from math import ceil, floor, isnan

from raycep.cep.lang import ast
from raycep.cep.lang.compiler import Branch, Negation
from raycep.cep.lang.expressions import FIELDS, kleene_offset_shift

@dataclass(frozen=True)
class Step:
    var: object                  # compiled Var
    after_of: tuple              # bound names whose events precede this variable's
    before_of: tuple             # bound names whose events follow this variable's
    check_used: bool             # an earlier variable may hold the same event
    conjuncts: tuple             # checked on the full binding after this step
    incremental: tuple           # Kleene: element-wise conjuncts checked as elements are added
    unary: tuple                 # Kleene: conjuncts on one element only (candidate filter)
    negations: tuple             # first-chance negations decidable after this step
    take_complete: bool = False  # Kleene: unary + incremental are its whole take condition
    filters: tuple = ()          # separable comparisons: filter all candidates at once
    chained: bool = False        # Kleene: deterministic runs shared per trigger (see _runs)
    local: bool = False          # Kleene: the take condition reads only b[i-1] and b[i]
    begin: tuple | None = None   # Kleene: begin condition of b[1], ((conjunct, at_0, jump), ...)
    min_len: int = 1             # Kleene: conjuncts[0] is ``b.LEN >= min_len`` (or the like):
                                 # a shorter sequence fails it, and nothing else is checked
    columnar: tuple | None = None  # Kleene: ``unary`` as (attr, op, literal) each, compared
                                 # over a buffer's columns (Evaluation._kleene_candidates)
    ordered: tuple | None = None   # Kleene, local: the take condition is one comparison
                                 # ``b[i].attr OP b[i-1].attr``, as (attr, OP(current, previous))
                                 # (every next element of a span at once: _Span.ordered_nexts)


NUMERIC_KINDS = frozenset((int, float))
_TS = operator.attrgetter("ts")


# One comprehension per order operator (no call per candidate). Python raises on a missing
# attribute or a string/number mix; a boolean would compare as a number, so it is excluded
# (a failed comparison is false).
def _lt(cands, attr, value):
    return [e for e in cands if (x := e.attrs[attr]) < value and x.__class__ is not bool]


def _le(cands, attr, value):
    return [e for e in cands if (x := e.attrs[attr]) <= value and x.__class__ is not bool]


def _gt(cands, attr, value):
    return [e for e in cands if (x := e.attrs[attr]) > value and x.__class__ is not bool]


def _ge(cands, attr, value):
    return [e for e in cands if (x := e.attrs[attr]) >= value and x.__class__ is not bool]


ORDER_FILTERS = {operator.lt: _lt, operator.le: _le, operator.gt: _gt, operator.ge: _ge}


class _Span:
    """A chained Kleene step's candidates up to one upper bound, for one trigger: their
    times, the runs and next elements found so far, and skip tables (see ``skip``)."""

    __slots__ = ("_lengths", "_skips", "events", "nexts", "ordered", "runs", "times")

    def __init__(self, events: list):
        self.events = events
        self.times = [e.ts for e in events]
        self.runs: dict = {}
        self.nexts: dict = {}
        self._skips: dict = {}
        self.ordered = None             # (next of each candidate, how many tests find them
        #                                 all): see ordered_nexts
        self._lengths = None

    def ordered_nexts(self, attr: str, op) -> tuple | None:
        """For the take condition ``op(b[i].attr, b[i-1].attr)``: per candidate, the position
        of the first later one whose value satisfies it against this one's (None: none), and
        how many candidates the evaluator tests to find them all (Evaluation._next: each later
        one up to that one, or every later one), by one pass with a stack of the candidates
        still waiting (their values monotone: a candidate that satisfies the condition
        against one of them satisfies it against every one above it). None where a
        candidate's value is not a number (the evaluator then fails or compares it)."""
        values = [e.attrs.get(attr) for e in self.events]
        for v in values:
            if v.__class__ not in NUMERIC_KINDS or v != v:
                return None
        n = len(values)
        nexts: list = [None] * n
        stack: list = []
        for j, v in enumerate(values):
            while stack and op(v, values[stack[-1]]):
                nexts[stack.pop()] = j
            stack.append(j)
        tested = sum((n - 1 - j) if k is None else (k - j) for j, k in enumerate(nexts))
        self.ordered = (nexts, tested)
        return self.ordered

    def lengths(self) -> list:
        """Per candidate, the length of the run from it (``ordered`` next elements)."""
        if self._lengths is None:
            nexts = self.ordered[0]
            out = [1] * len(nexts)
            for j in range(len(nexts) - 1, -1, -1):
                k = nexts[j]
                if k is not None:
                    out[j] = out[k] + 1
            self._lengths = out
        return self._lengths

    def skip(self, jump: tuple) -> list:
        """For each candidate ``k`` with a number ``w`` as ``attr``: the next candidate whose
        ``attr`` is not a number at most ``w`` (``up``) or at least ``w`` (len when none)."""
        table = self._skips.get(jump)
        if table is None:
            attr, up = jump
            events = self.events
            n = len(events)
            table = self._skips[jump] = [n] * n
            stack: list = []            # candidates still waiting for their next, as (k, w)
            for k, e in enumerate(events):
                w = e.attrs.get(attr)
                if w.__class__ not in NUMERIC_KINDS or isnan(w):   # NaN compares with nothing
                    for j, _ in stack:
                        table[j] = k
                    stack.clear()
                    table[k] = k + 1
                    continue
                while stack and (stack[-1][1] < w if up else stack[-1][1] > w):
                    table[stack.pop()[0]] = k
                stack.append((k, w))
        return table


def build_steps(branch: Branch, order: tuple) -> tuple:
    """The join steps for ``order`` (the trigger variable first)."""
    steps, bound = [], set()
    pending_conj = list(branch.conjuncts)
    pending_neg = [n for n in branch.negations if not n.deferred]
    variables = {v.name: v for v in branch.positives}
    for name in order:
        var = variables[name]
        same = any(variables[b].type == var.type or variables[b].type is None or var.type is None
                   for b in bound)
        bound.add(name)
        ready = [c for c in pending_conj if c.vars <= bound]
        pending_conj = [c for c in pending_conj if c not in ready]
        incremental, unary, inc = (), (), []
        if var.kleene:
            inc = [c for c in ready if c.kleene_i == name and name not in c.set_level
                   and c.max_first.get(name, 0) == 0]
            unary = tuple(c for c in inc if c.unary)
            incremental = tuple(c for c in inc if not c.unary)
            ready = [c for c in ready if c not in inc]
        filters = ()
        if not var.kleene:
            filters = tuple(c for c in ready if name in c.separable)
            ready = [c for c in ready if c not in filters]
        take_complete = var.kleene and all(
            c in inc for c in branch.conjuncts
            if name in c.vars and name not in c.set_level
            and (c.kleene_i == name or c.max_first.get(name, 0) > 0))
        negs = [n for n in pending_neg if _negation_ready(n, bound, variables)]
        pending_neg = [n for n in pending_neg if n not in negs]
        chained, local, begin = False, False, None
        around = branch.before[name] | branch.after[name]
        if take_complete and all(c.vars == {name} for c in inc) and bound - {name} <= around:
            # the run's candidates and take condition do not depend on the other variables
            chained = True
            local = all(_local(c, name) for c in incremental)
            if branch.before[name] and branch.before[name] <= bound and all(
                    v in around for v in variables if v != name):
                begin = _begin_condition(branch, name)
        steps.append(Step(
            var=var,
            after_of=tuple(b for b in branch.before[name] if b in bound and b != name),
            before_of=tuple(a for a in branch.after[name] if a in bound and a != name),
            check_used=same, conjuncts=tuple(ready), incremental=incremental, unary=unary,
            negations=tuple(negs), take_complete=take_complete, filters=filters,
            chained=chained, local=local, begin=begin,
            min_len=_min_len(ready[0], name) if var.kleene and ready else 1,
            columnar=_columnar(unary, name) if unary else None,
            ordered=_ordered(incremental, name) if local else None))
    return tuple(steps)


def _ordered(incremental: tuple, name: str) -> tuple | None:
    """``(attr, op)`` when the take condition is the one conjunct ``name[i].attr OP
    name[i-1].attr`` (either side, or ``[i+1]`` / ``[i]``) of a plain attribute, ``op`` an
    order comparison of the current element's value with the previous one's; else None."""
    if len(incremental) != 1:
        return None
    c = incremental[0]
    e = c.expr
    if e.__class__ is not ast.Compare or e.op not in ("<", "<=", ">", ">=") or c.p_min != 1:
        return None
    shift = kleene_offset_shift(e)
    sides = []
    for side in (e.left, e.right):
        idx = side.index if side.__class__ is ast.Attr else None
        if side.__class__ is not ast.Attr or side.var != name or side.attr in FIELDS or \
                (idx is not None and idx.base != "i"):
            return None
        sides.append((side.attr, (idx.offset if idx is not None else 0) - shift))
    (attr, left), (other, right) = sides
    if attr != other or {left, right} != {0, -1}:
        return None
    return attr, _OPS[e.op if left == 0 else _FLIPPED[e.op]]


_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def _columnar(unary: tuple, name: str) -> tuple | None:
    """Each element-wise conjunct of Kleene variable ``name`` as ``(attr, op, literal)`` when
    it is ``name.attr OP literal`` (either side) for a plain attribute and a text (``=``,
    ``!=``) or a number; None when one is not."""
    out = []
    for c in unary:
        e = c.expr
        if e.__class__ is not ast.Compare:
            return None
        op, side, lit = e.op, e.left, e.right
        if side.__class__ is ast.Literal:
            op, side, lit = _FLIPPED.get(op, op), lit, side
        if side.__class__ is not ast.Attr or lit.__class__ is not ast.Literal or \
                side.var != name or side.attr in FIELDS or \
                (side.index is not None and side.index.base != "i"):
            return None
        value = lit.value
        if value.__class__ is str:
            if op not in ("=", "!="):
                return None
        elif value.__class__ not in NUMERIC_KINDS or value != value or \
                abs(value) > 2 ** 53:
            return None
        out.append((side.attr, _OPS[op], value))
    return tuple(out)


_FLIPPED = {">=": "<=", ">": "<", "=": "=", "<=": ">=", "<": ">", "!=": "!="}


def _min_len(c, name: str) -> int:
    """``K`` when conjunct ``c`` is ``name.LEN >= K`` (``> K - 1``, ``= K``, or the same with
    the sides swapped) for a literal number: a sequence shorter than ``K`` fails it (without
    an evaluation error); 1 otherwise."""
    e = c.expr
    if c.vars != {name} or not isinstance(e, ast.Compare):
        return 1
    op, left, right = e.op, e.left, e.right
    if isinstance(right, ast.Len) and isinstance(left, ast.Literal):
        op, left, right = _FLIPPED[op], right, left
    if not (isinstance(left, ast.Len) and left.var == name and isinstance(right, ast.Literal)):
        return 1
    value = right.value
    if value.__class__ not in (int, float) or isnan(value) or abs(value) > 2 ** 31:
        return 1
    if op in (">=", "="):
        return max(1, ceil(value))
    if op == ">":
        return max(1, floor(value) + 1)
    return 1


def _local(c, name: str) -> bool:
    """Whether element-wise conjunct ``c`` reads only the elements ``i-1`` and ``i`` of
    ``name`` (then the next element of a run depends only on the current one)."""
    shift = kleene_offset_shift(c.expr)
    for node in ast.walk_expr(c.expr):
        if isinstance(node, (ast.Len, ast.Aggregate)) and node.var == name:
            return False
        if node.__class__ is ast.Attr and node.var == name:
            idx = node.index
            if idx is not None and idx.base != "i" or (
                    idx.offset if idx is not None else 0) - shift not in (-1, 0):
                return False
    return True


def _begin_condition(branch: Branch, name: str) -> tuple:
    """The conjuncts of the begin condition of Kleene variable ``name`` when every variable
    before it is in the run's buffer (strategies._condition at p = 0): (conjunct, checked at
    position 0, jump), where jump is ``(attr, up)`` when the conjunct is ``name[1].attr > T``
    (up) or ``< T`` with T not reading ``name``: a failure at value w then also fails every
    candidate whose value is not past w."""
    buffer = branch.before[name] | {name}
    out = []
    for c in branch.conjuncts:
        if name not in c.vars or not c.vars <= buffer or name in c.set_level:
            continue
        if c.kleene_i == name:
            if c.max_first.get(name, 0) <= 0:
                out.append((c, True, _jump(c, name)))
        elif c.max_first.get(name, 0) == 0:
            out.append((c, False, _jump(c, name)))
    return tuple(out)


def _jump(c, name: str):
    """``(attr, up)`` for ``name[1].attr > T`` / ``< T`` (see _begin_condition), else None."""
    expr = c.expr
    if expr.__class__ is not ast.Compare or expr.op not in ("<", "<=", ">", ">="):
        return None
    shift = kleene_offset_shift(expr)
    for side, other, up in ((expr.left, expr.right, expr.op in (">", ">=")),
                            (expr.right, expr.left, expr.op in ("<", "<="))):
        idx = getattr(side, "index", None)
        if (side.__class__ is ast.Attr and side.var == name and side.attr not in FIELDS
                and (idx is None and shift == 0 or idx is not None and (
                    idx.base == "first" and idx.offset == 0
                    or idx.base == "i" and idx.offset == shift))
                and not any(getattr(n, "var", None) == name for n in ast.walk_expr(other))):
            return side.attr, up
    return None


def _negation_ready(neg: Negation, bound: set, variables: dict) -> bool:
    needed = set(neg.before) | set(neg.after)
    for c in neg.conjuncts:
        needed |= c.vars - {neg.var.name}
    # a positive variable of the negated type could still take the witness event
    needed |= {n for n, v in variables.items()
               if v.type is None or neg.var.type is None or v.type == neg.var.type}
    return needed <= bound
