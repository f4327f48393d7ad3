"""Shared sub-patterns: evaluators whose plans begin with the same steps share their
evaluation for one trigger (issue 15).

In a lazy evaluation ("Efficient Detection of Complex Event Patterns Using Lazy Chain Automata",
sections 3-5) a trigger's matches are enumerated step by step in plan order, the trigger's
variable first. Two queries of different structure -- or two branches of one query -- whose
plans begin with steps that bind the same event types in the same order under the same
conditions (same expressions and constants, variables renamed by position), window, strategy and
equivalence attributes enumerate the same partial bindings for the same trigger. This is
OpenCEP's multi-pattern sharing of equivalent subtrees (its ``SubTreeSharing`` / ``ShareLeaves``
tree mergers) applied to the left-deep prefix a lazy plan evaluates: the first evaluator to
reach such a prefix for a trigger materialises its partial bindings; the others extend those
bindings with their own remaining steps. The plans themselves stay each evaluator's own (the
planner re-orders each one on its statistics); a prefix is shared only while the orders happen
to coincide.

What is shared, and why it cannot change a result:

- only steps of positive, non-Kleene variables that check no negation (their candidates are a
  range lookup plus filters and conjuncts over the bound variables: a function of the trigger,
  the index and the steps alone), and never a plan's last step;
- only within one state of the shared index (events inserted, evicted) and one partition;
- bindings are kept in enumeration order, so each consumer sees them in the order its own
  depth-first enumeration would (its results and its match cap are unchanged);
- the condition counters the planner's selectivities come from (tested, passed, failed) are
  added to each consumer's own conditions as if it had evaluated the prefix itself.

Which prefixes are worth materialising is learnt: a prefix key asked for twice for one trigger
is marked shared (until the engine's queries change) unless its first materialisation shows
it cheaper to evaluate again than to share (``WORTH``); one asked for ``LEARN`` times, never
twice for one trigger, is taken as unshared; a prefix with more than
``limit`` partial bindings for a trigger is not materialised (that trigger is evaluated
depth-first by each evaluator as before).
"""
from __future__ import annotations

import dataclasses

from raycep.cep.lang import ast

_UNSEEN = object()

#: the most partial bindings materialised for one (prefix, trigger); more: evaluated unshared
LIMIT = 50_000
#: share a prefix only if evaluating it tests at least this many conditions per binding
WORTH = 8
#: a prefix asked for this many times, never twice for one trigger, is taken as unshared; a
#: shared one is judged worth sharing (WORTH) on this many materialisations
LEARN = 32
#: the most partial bindings kept at once (across prefixes and triggers of one index state)
KEEP = 500_000


def _canon(node, names: dict):
    """``node`` as a hashable value, with variable names replaced by their position in the
    prefix (``names``), literal values with their type, source positions left out; None when
    it holds a parameter (bound by the compiler, not visible here)."""
    if node.__class__ is ast.Literal:
        return ("lit", node.value.__class__.__name__, node.value)
    if node.__class__ is ast.Param:
        raise LookupError(node.name)
    if isinstance(node, tuple):
        return tuple(_canon(x, names) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        out = [node.__class__.__name__]
        for f in dataclasses.fields(node):
            if f.name == "pos":
                continue
            value = getattr(node, f.name)
            if f.name == "var" and value.__class__ is str:
                out.append(("var", names[value]))
            else:
                out.append(_canon(value, names))
        return tuple(out)
    return node


def conditions(steps) -> list:
    """The conditions of ``steps`` whose counters a prefix evaluation moves, in order."""
    out = []
    for step in steps:
        out.extend(step.filters)
        out.extend(step.conjuncts)
    return out


def prefix_keys(cq, steps: tuple, opaque: dict | None = None) -> tuple:
    """``((k, key), ...)``, longest first: the shareable prefixes ``steps[:k]`` (k >= 2) of a
    plan's steps with their keys; () when none. ``opaque``: id(condition) -> a token standing
    for a condition whose expression is not what it evaluates (a query group's condition
    over the loosest of its members' constants, which changes as members come and go)."""
    opaque = opaque or {}

    def shape(c):
        token = opaque.get(id(c))
        return token if token is not None else _canon(c.expr, names)

    names: dict = {}
    shapes: list = []
    out = []
    head = (cq.window, cq.strategy, tuple(cq.equivalence))
    for k, step in enumerate(steps[:-1]):
        var = step.var
        if var.kleene or var.negated or step.negations:
            break
        names[var.name] = k
        try:
            shapes.append((var.type, tuple(names[n] for n in step.after_of),
                           tuple(names[n] for n in step.before_of), step.check_used,
                           tuple(map(shape, step.filters)),
                           tuple(map(shape, step.conjuncts))))
        except (LookupError, KeyError):
            break
        if k >= 1:
            out.append((k + 1, (head, tuple(shapes))))
    return tuple(reversed(out))


class Prefix:
    """One materialised prefix for one trigger: the partial bindings in enumeration order
    (tuples of events in step order) and what evaluating it added to each condition's
    (tested, passed, failed)."""

    __slots__ = ("bindings", "counts")

    def __init__(self, bindings: list, counts: list):
        self.bindings = bindings
        self.counts = counts


class SharedPrefixes:
    """The prefixes materialised for the current state of one shared index (see the module
    docstring); one per engine, handed to its evaluators while it has two or more."""

    def __init__(self, index, limit: int | None = None, keep: int | None = None):
        self.index = index
        self.limit = LIMIT if limit is None else limit
        self.keep = KEEP if keep is None else keep
        self._ids: dict = {}          # prefix key -> small int
        self.shared: set = set()      # prefix ids asked for twice for one trigger
        self.settled: set = set()     # prefix ids shared, not worth sharing, or never shared
        self._tries: dict = {}        # prefix id -> times asked for while learning
        self._work: dict = {}         # shared prefix id -> [tested, bindings + 1, times]
        self._state = None            # (inserted, evicted) of the index the entries are for
        self._entries: dict = {}      # (id, trigger, partition) -> Prefix | None (too large)
        self._asked: set = set()      # (id, trigger, partition) asked for, not materialised
        self._kept = 0
        self.materialised = 0         # prefixes evaluated for sharing
        self.reused = 0               # evaluations that started from a materialised prefix

    def intern(self, keys: tuple) -> tuple:
        """``keys`` of ``prefix_keys`` with each key replaced by a small int."""
        ids = self._ids
        return tuple((k, ids.setdefault(key, len(ids))) for k, key in keys)

    def reset(self):
        """Queries or plans changed: learn again which prefixes are shared."""
        self.shared.clear()
        self.settled.clear()
        self._tries.clear()
        self._work.clear()
        self._clear()

    def _clear(self):
        self._entries.clear()
        self._asked.clear()
        self._kept = 0

    def find(self, keys: tuple, trigger, partition):
        """``(k, slot, prefix)`` for the longest of ``keys`` to share for this trigger:
        ``prefix`` a materialised Prefix, or None to materialise (then ``store`` it in
        ``slot``); None when no prefix is shared."""
        index = self.index
        state = (index.inserted, index.evicted)
        if state != self._state:
            self._state = state
            self._clear()
        tid = id(trigger)
        entries = self._entries
        shared = self.shared
        for k, pid in keys:
            if pid in shared:                  # only shared prefixes are materialised
                slot = (pid, tid, partition)
                prefix = entries.get(slot, _UNSEEN)
                if prefix is _UNSEEN:
                    return k, slot, None
                if prefix is not None:         # (None: too large for this trigger)
                    self.reused += 1
                    return k, slot, prefix
        asked, tries, settled = self._asked, self._tries, self.settled
        for k, pid in keys:
            if pid in settled:
                continue
            slot = (pid, tid, partition)
            if slot in asked:
                shared.add(pid)
                settled.add(pid)
                self._work[pid] = [0, 0, 0]
            else:
                asked.add(slot)
                n = tries[pid] = tries.get(pid, 0) + 1
                if n >= LEARN:
                    settled.add(pid)
        return None

    def store(self, slot, prefix: Prefix | None):
        """Keep what was materialised in ``slot`` (None: it had more than ``limit``). A prefix
        whose first ``LEARN`` materialisations tested fewer than ``WORTH`` conditions per
        binding is cheaper to evaluate again than to share: not shared again (until
        ``reset``)."""
        pid = slot[0]
        if prefix is not None:
            self.materialised += 1
            n = len(prefix.bindings)
            work = self._work.get(pid)
            if work is not None:
                work[0] += sum(c[0] for c in prefix.counts)
                work[1] += n + 1
                work[2] += 1
                if work[2] >= LEARN:
                    del self._work[pid]
                    if work[0] < WORTH * work[1]:
                        self.shared.discard(pid)
            self._kept += n
            if self._kept > self.keep:
                self._clear()
                self._kept = n
        self._entries[slot] = prefix

    def stats(self) -> dict:
        return {"shared_prefixes": len(self.shared), "materialised": self.materialised,
                "reused": self.reused}
