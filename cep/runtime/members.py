"""A query group's members decided for many bindings at once (bulk evaluation of groups).

cep.runtime.groups decides, binding by binding, which members of a group accept it: per
conjunct whose constants differ (``Variants``), the members whose constant lets it hold, by
bisection over the sorted constants; per window (``Windows``), the members whose window holds
the binding. ``MemberColumns`` does the same for all the bindings of a chunk's triggers
(cep.evaluation.bulk): each bisection step is one numpy evaluation of the conjunct
(cep.evaluation.vector) with the probed constant of every binding, so the accepted members of a
binding are, per conjunct and per window, a range of that one's sorted entries; the matches are
the (binding, member) pairs inside every range, found by expanding the first range and testing
the others; an equality with differing constants (``x.attr = constant``) accepts the members
of one entry of its sorted constants, the binding's value's (Esper's filter service likewise indexes many statements' constants rather than
testing each, "Esper Reference", chapter "Processing Model", filter indexes).
"""
from __future__ import annotations

import numpy as np

from raycep.cep.evaluation.vector import compile_vector
from raycep.cep.lang.validate import conjuncts as split_conjuncts


class _Ordered:
    """One ordered Variants table: the conjunct's truth is monotone in its one differing
    constant (entries sorted by it)."""

    def __init__(self, fn, consts: np.ndarray):
        self.fn, self.consts = fn, consts

    def ranges(self, get, n: int) -> tuple:
        """``(lo, hi, unsure)`` per binding: the entries whose constant accepts it."""
        consts, fn = self.consts, self.fn
        k = len(consts)
        first, bad = fn(get, consts[0])
        first = np.broadcast_to(first, (n,))
        last, bad_last = fn(get, consts[-1])
        unsure = np.broadcast_to(bad | bad_last, (n,)).copy()
        # the first entry whose truth differs from the first one's (Variants.mask)
        split = first != last
        lo = np.ones(n, dtype=np.intp)
        hi = np.full(n, k - 1, dtype=np.intp)
        active = split & (lo < hi)
        while active.any():
            mid = (lo + hi) // 2
            got, bad_mid = fn(get, consts[mid])
            unsure |= active & bad_mid
            same = got == first
            lo = np.where(active & same, mid + 1, lo)
            hi = np.where(active & ~same, mid, hi)
            active = split & (lo < hi)
        start = np.where(split, np.where(first, 0, lo), 0)
        end = np.where(split, np.where(first, lo, k), np.where(first, k, 0))
        return start, end, unsure


class _Equal:
    """One equal Variants table (``x.attr = constant``, cep.evaluation.loose.OneOf): a
    binding is accepted by the members whose constant its value is, one entry of the sorted
    constants."""

    def __init__(self, spec):
        self.spec = spec
        self.table = spec.table if spec.texts else None
        self.consts = None if spec.texts else np.asarray(spec.values, dtype=np.float64)

    def ranges(self, get, n: int) -> tuple:
        """``(lo, hi, unsure)`` per binding (as _Ordered's)."""
        spec = self.spec
        if self.table is not None:
            at = get.ids(spec.var, spec.attr, self.table)
            found, unsure = at >= 0, np.zeros(n, dtype=bool)
        else:
            values, unsure = get(spec.var, spec.attr)
            at = np.minimum(np.searchsorted(self.consts, values), len(self.consts) - 1)
            found = (self.consts[at] == values) & ~unsure
        lo = np.where(found, at, 0)
        return lo, np.where(found, at + 1, 0), unsure


class _Windows:
    """The members' windows (Windows): a binding is kept by those from the first window
    ``w`` with ``first >= last - w`` on (sorted ascending)."""

    def __init__(self, windows: list):
        self.windows = np.asarray(windows, dtype=np.float64)

    def ranges(self, first, last) -> tuple:
        ws = self.windows
        k = len(ws)
        lo = np.zeros(len(first), dtype=np.intp)
        hi = np.full(len(first), k, dtype=np.intp)
        active = lo < hi
        while active.any():
            mid = np.minimum((lo + hi) // 2, k - 1)
            held = first >= last - ws[mid]
            hi = np.where(active & held, mid, hi)
            lo = np.where(active & ~held, mid + 1, lo)
            active = lo < hi
        return lo, np.full(len(first), k, dtype=np.intp)


class MemberColumns:
    """Which members accept each binding (``resolve``), for the group's tables; build with
    ``of`` (None when a table is not one this module decides)."""

    def __init__(self, names: tuple, dims: list):
        self.names = names
        self._dims = dims                   # [(table, rank of each member, its variables)]
        self._orders: dict = {}             # dims used -> the first one's rank order

    @classmethod
    def of(cls, members: list, varying: tuple, tables: list, windows) -> "MemberColumns | None":
        """``varying``: the conjuncts whose constants differ, ``tables`` their Variants;
        ``windows``: the group's Windows (None: one window)."""
        dims = []
        if tables:
            exprs = split_conjuncts(members[0].cq.query.where)
        for k, table in zip(varying, tables):
            lits = [m.values[k] for m in members]
            hole = [i for i in range(len(lits[0])) if len({x[i] for x in lits}) > 1]
            if table.kind == "equal":
                spec = table.one_of
                if spec is None or len(hole) != 1:
                    return None
                at = {v: i for i, v in enumerate(spec.values)}
                dims.append((_Equal(spec), np.array([at[x[hole[0]]] for x in lits],
                                                    dtype=np.intp), table.vars))
                continue
            if table.kind != "ordered":
                return None
            values = [v for v, _, _ in table.entries]
            fn = compile_vector(exprs[k], hole[0]) if len(hole) == 1 else None
            if fn is None:
                return None
            at = {v: i for i, v in enumerate(values)}
            dims.append((_Ordered(fn, np.asarray(values, dtype=np.float64)),
                         np.array([at[x[hole[0]]] for x in lits], dtype=np.intp),
                         table.vars))
        if windows is not None:
            by = {w: i for i, w in enumerate(windows.windows)}
            dims.append((_Windows(windows.windows),
                         np.array([by[m.window] for m in members], dtype=np.intp),
                         frozenset()))
        if not dims:
            return None
        return cls(tuple(m.name for m in members), dims)

    def resolve(self, get, first, last, bound: frozenset) -> tuple:
        """``(binding, member, unsure)``: the pairs of a binding and a member that accepts
        it (bindings ascending, a binding's members in order), and per binding whether a conjunct could not be
        decided over columns. ``get(var, attr)``: the bindings' values (vector module);
        ``first``/``last``: each binding's earliest and latest event time; ``bound``: the
        variables a binding binds (a conjunct of others, another branch's of an OR, does
        not apply)."""
        n = len(first)
        unsure = np.zeros(n, dtype=bool)
        dims = [d for d in self._dims if d[2] <= bound]
        if not dims:                        # every member takes every binding
            k = len(self.names)
            return np.repeat(np.arange(n), k), np.tile(np.arange(k), n), unsure
        ranges = []
        for table, rank, _ in dims:
            if table.__class__ is _Windows:
                lo, hi = table.ranges(first, last)
            else:
                lo, hi, bad = table.ranges(get, n)
                unsure |= bad
            ranges.append((lo, hi))
        # the members in the first table's range: consecutive in its rank order
        order = self._orders.get(id(dims[0]))
        if order is None:
            rank = dims[0][1]
            order = np.argsort(rank, kind="stable")
            order = self._orders[id(dims[0])] = (order, rank[order])
        order, ranked = order
        lo, hi = ranges[0]
        a = np.searchsorted(ranked, lo, "left")
        b = np.searchsorted(ranked, hi, "left")
        count = np.where(unsure, 0, b - a)
        binding = np.repeat(np.arange(n), count)
        at = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - a, count)
        member = order[at]
        for (_, rank, _), (lo, hi) in zip(dims[1:], ranges[1:]):
            r = rank[member]
            keep = (r >= lo[binding]) & (r < hi[binding])
            binding, member = binding[keep], member[keep]
        return binding, member, unsure

