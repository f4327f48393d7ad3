"""What a query reads that the input has not had so far: a misspelt event type (``Stok``), an
equivalence attribute no event has (``[sym]``), a misspelt attribute (``a.prcie``). Such a
query is valid and silently matches nothing; these checks turn that into a warning.

Nothing here runs per event. ``Seen`` remembers what was confirmed (a type or an attribute,
once seen, stays seen) and is asked only about what is still unconfirmed: against the
buffered events when someone reads the warnings, and against the events the index is about
to evict, so that nothing passes unchecked while a pair is unconfirmed (out-of-order events
inserted behind an eviction are the exception: "so far" is approximate for them).
"""
from __future__ import annotations

import math

from cep import ast
from cep.expressions import FIELDS


def reads(query: ast.Query) -> dict:
    """``{event type: frozenset(attribute names)}`` that ``query`` reads: the attributes of
    its typed variables in WHERE and the equivalence attributes of every typed variable.
    Untyped variables and the event's own fields (``ts``, ``type``, ``id``, ``key``) are
    left out: they cannot be misspelt against one type."""
    types = {v.name: v.type for v in ast.event_vars(query.pattern)}
    out: dict = {t: set() for t in types.values() if t is not None}
    for node in ast.walk_expr(query.where):
        if isinstance(node, (ast.Attr, ast.Aggregate)) and node.attr is not None:
            t = types.get(node.var)
            if t is not None and node.attr not in FIELDS:
                out[t].add(node.attr)
    for attr in query.equivalence:
        if attr not in FIELDS:
            for attrs in out.values():
                attrs.add(attr)
    return {t: frozenset(a) for t, a in out.items()}


class Seen:
    """The event types and (type, attribute) pairs confirmed in the input so far."""

    def __init__(self):
        self.types: set = set()
        self.attrs: dict = {}            # type -> set of attribute names seen

    def missing(self, wanted: dict) -> dict:
        """The part of ``wanted`` (``reads()`` form) not confirmed: ``{type: set | None}``,
        None when the type itself is unconfirmed."""
        out = {}
        for t, attrs in wanted.items():
            if t not in self.types:
                out[t] = None
            else:
                rest = attrs - self.attrs.get(t, set())
                if rest:
                    out[t] = set(rest)
        return out

    def observe(self, wanted: dict, events_of, lo: float = -math.inf, hi: float = math.inf):
        """Confirm what ``events_of(type, lo, hi)`` (an iterable of events) shows of the
        unconfirmed part of ``wanted``."""
        for t, attrs in self.missing(wanted).items():
            for e in events_of(t, lo, hi):
                self.types.add(t)
                if attrs is None:
                    attrs = set(wanted[t]) - self.attrs.get(t, set())
                found = {a for a in attrs if a in e.attrs}
                if found:
                    self.attrs.setdefault(t, set()).update(found)
                    attrs -= found
                if not attrs:
                    break

    def warnings(self, wanted: dict) -> list:
        """Human-readable warnings for what ``wanted`` reads and the input never had."""
        out = []
        for t, attrs in sorted(self.missing(wanted).items()):
            if attrs is None:
                out.append(f"no event of type {t!r} seen in the input so far "
                           f"(misspelt event type?)")
            else:
                for a in sorted(attrs):
                    out.append(f"no {t!r} event had attribute {a!r} so far "
                               f"(misspelt attribute?)")
        return out
