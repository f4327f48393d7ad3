"""Selection strategies other than skip-till-any-match (SASE+ section 2; NFA^b, section 3.2).

A binding found by the join is accepted if the NFA^b of its own variable order (the order of
the blocks its events form) can select exactly its events while reading the query's stream:
every stream event between two selected ones must be ignorable at the state the run is in.
The ignore edge is the only thing that differs between strategies (section 3.2, step 3):
strict contiguity never ignores, partition contiguity ignores other partitions, skip till next
match ignores events that do not satisfy the state's begin/take condition. After the last
element of a Kleene block the run may take its epsilon proceed edge at any point of the gap.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from heapq import merge

from raycep.cep.event import Event, before
from raycep.cep.lang.expressions import field_value
from raycep.cep.store.index import ALL

_MISSING = object()


@dataclass(frozen=True)
class Run:
    """What ``accepts`` reads of an evaluation (the evaluator's Evaluation), where a binding
    is judged outside one: the query, the branch, the index and the partition its trigger
    reads (bulk evaluation; a query group's members, each under its own conditions)."""
    cq: object
    branch: object
    index: object
    partition: object


def accepts(ev, env: dict, proven: dict | None = None, gaps: dict | None = None) -> bool:
    """Whether the NFA^b under ``ev.cq.strategy`` accepts the binding ``env`` (an Evaluation).

    ``proven`` (skip till next match) maps Kleene variables whose elements the evaluator chose
    as the automaton does (each the first later event that satisfies the take condition) to
    ``(begun, run)``: ``run`` is the whole run the binding is a prefix of, ``begun`` whether its
    first element is also the first event after the preceding (simple) block that satisfies the
    begin condition. Those gaps are not checked again.

    ``gaps``: a dict kept by a caller that judges the same binding under several queries of
    one structure (a query group's members): the stream events between two of its events,
    read once for all of them.
    """
    cq = ev.cq
    blocks = []
    for name, value in env.items():
        seq = (value,) if value.__class__ is Event else value
        blocks.append((seq[0], seq, name))
    blocks.sort(key=lambda b: b[0].order)
    for (_, s1, _), (f2, _, _) in zip(blocks, blocks[1:]):
        if not before(s1[-1], f2):
            return False          # interleaved blocks: no linear NFA^b selects them
    selected = [(e, name, p) for _, seq, name in blocks for p, e in enumerate(seq)]
    first, last = selected[0][0], selected[-1][0]
    chosen = {id(e) for e, _, _ in selected}
    strategy = cq.strategy
    if strategy in ("strict_contiguity", "partition_contiguity"):
        return _contiguous(ev, first, last, chosen)
    proven = proven or {}
    gap = _gap_of if gaps is None else partial(_shared_gap, gaps,
                                               (cq.positive_types, cq.equivalence))
    order = [name for _, _, name in blocks]
    variables = {v.name: v for v in ev.branch.positives}
    for k in range(len(selected) - 1):
        e1, name1, p1 = selected[k]
        e2, name2, p2 = selected[k + 1]
        if name1 == name2:        # inside a Kleene block: the run is at p[i], buffer p[..p1]
            if name1 in proven:
                continue
            buffer = _buffer(env, order, name1, p1 + 1)
            if any(_condition(ev, variables[name1], g, buffer, first)
                   for g in gap(ev, e1, e2, chosen)):
                return False
            continue
        if name2 in proven and proven[name2][0]:
            continue
        begin_buffer = _buffer(env, order, name2, 0)
        var1 = variables[name1]
        if not var1.kleene:
            if any(_condition(ev, variables[name2], g, begin_buffer, first)
                   for g in gap(ev, e1, e2, chosen)):
                return False
            continue
        # after the last element of Kleene block name1: proceed at some split point, at the
        # latest just before the first event it could take; no begin event may follow that
        if name1 in proven:
            run, taken = proven[name1][1], len(env[name1])
            take = run[taken] if len(run) > taken else None
            if take is None or not before(take, e2):
                continue          # nothing to take before e2: proceed right before it
            rest = [take] + gap(ev, take, e2, chosen)
        else:
            between = gap(ev, e1, e2, chosen)
            take_buffer = _buffer(env, order, name1, len(env[name1]))
            split = next((s for s, g in enumerate(between)
                          if _condition(ev, var1, g, take_buffer, first)), len(between))
            rest = between[split:]
        if any(_condition(ev, variables[name2], g, begin_buffer, first) for g in rest):
            return False
    return True


def _contiguous(ev, first: Event, last: Event, chosen: set) -> bool:
    """Whether no event of the query's stream between ``first`` and ``last`` that the binding
    does not hold breaks contiguity: any does under strict contiguity, one of the binding's
    partition (its equivalence values) under partition contiguity. Read from the buffers of
    the binding's partition key where the equivalence attributes include it (events of other
    keys are of other partitions), in no particular order."""
    cq = ev.cq
    strict = cq.strategy == "strict_contiguity" or not cq.equivalence
    home = None if strict else _partition(first, cq.equivalence)
    for buf in _buffers(ev, ALL if strict else _key_part(ev)):
        for g in buf.range(first.ts, last.ts):
            if id(g) in chosen or not (before(first, g) and before(g, last)):
                continue
            if strict or _partition(g, cq.equivalence) == home:
                return False
    return True


def _key_part(ev):
    """The partition key whose buffers hold every event that can share the binding's
    equivalence values (ALL: the query is not evaluated per key)."""
    part = ev.partition
    if part is not ALL and ev.index.key_attr in ev.cq.equivalence:
        return part
    return ALL


def _buffers(ev, part) -> list:
    """The index buffers of the query's positive types (all types: one) in partition ``part``."""
    index, cq = ev.index, ev.cq
    types = (None,) if None in cq.positive_types else cq.positive_types
    return [buf for buf in (index.buffer(part, t) for t in types) if buf is not None]


def _shared_gap(gaps: dict, kind: tuple, ev, e1: Event, e2: Event, chosen: set) -> list:
    """``_gap_of`` read once per pair of events and kind of query (its positive types and
    equivalence attributes) into ``gaps`` (accepts)."""
    key = (id(e1), id(e2), kind)
    got = gaps.get(key)
    if got is None:
        got = gaps[key] = _gap_of(ev, e1, e2, chosen)
    return got


def _gap_of(ev, e1: Event, e2: Event, chosen: set) -> list:
    """The stream events strictly between ``e1`` and ``e2`` that the binding does not hold."""
    return [g for g in _stream(ev, e1.ts, e2.ts)
            if id(g) not in chosen and before(e1, g) and before(g, e2)]


def _stream(ev, lo: float, hi: float):
    """The query's stream between ``lo`` and ``hi`` (positive types only), in order: of the
    binding's partition key where the equivalence attributes include it (``_key_part``: an
    event of another key fails every begin and take condition, ``_condition``), else of every
    partition."""
    ranges = [buf.range(lo, hi) for buf in _buffers(ev, _key_part(ev))]
    if len(ranges) == 1:
        return ranges[0]
    return list(merge(*ranges, key=lambda e: e.order))


def _partition(e: Event, attrs: tuple) -> tuple:
    return tuple(field_value(e, a, _MISSING) for a in attrs)


def _buffer(env: dict, order: list, name: str, upto: int) -> dict:
    """The run's buffer when it waits at ``name`` having taken ``upto`` of its elements."""
    out = {}
    for n in order:
        if n == name:
            if upto:
                out[n] = env[n][:upto]
            break
        out[n] = env[n]
    return out


def _condition(ev, var, g: Event, buffer: dict, first: Event) -> bool:
    """The begin (or take) condition of ``var``'s state for event ``g``: type, equivalence with
    the run's first event, and the conjuncts whose last identifier is this element."""
    if var.type is not None and g.type != var.type:
        return False
    for a in ev.cq.equivalence:
        value = field_value(g, a, _MISSING)
        if value is _MISSING or value != field_value(first, a, _MISSING):
            return False
    name = var.name
    env = dict(buffer)
    if var.kleene:
        prefix = buffer.get(name, ())
        p = len(prefix)
        env[name] = prefix + (g,)
    else:
        env[name] = g
    bound = set(env)
    for c in ev.branch.conjuncts:
        if name not in c.vars or not c.vars <= bound:
            continue
        if not var.kleene:
            if not c.check(env):
                return False
            continue
        if name in c.set_level:
            continue                  # proceed edge
        if c.kleene_i == name:
            if c.max_first.get(name, 0) <= p and not c.check_at(env, p):
                return False
        elif c.max_first.get(name, 0) == p:
            if not c.check(env):
                return False
    return True
