"""What a query reads that the input has not had so far: a misspelt event type (``Stok``), an
equivalence attribute no event has (``[sym]``), a misspelt attribute (``a.prcie``); and a
condition that failed on every evaluation (``a.price < 'high'`` over numeric prices). Such a
query is valid and silently matches nothing; these checks turn that into a warning, listed by
``Engine.warnings()`` and told once per query and cause to Python's ``warnings`` (``Teller``).

Nothing here runs per event. ``Seen`` remembers what was confirmed (a type or an attribute,
once seen, stays seen) and is asked only about what is still unconfirmed: against the
buffered events when someone reads the warnings, and against the events the index is about
to evict, so that nothing passes unchecked while a pair is unconfirmed (out-of-order events
inserted behind an eviction are the exception: "so far" is approximate for them).
"""
from __future__ import annotations

import logging
import math
import os
import sys
import warnings as _warnings

from raycep.cep.lang import ast
from raycep.cep.lang.expressions import FIELDS

log = logging.getLogger("raycep")


class QueryWarning(UserWarning):
    """A query that is valid but reads what the input never had, or a condition that never
    held (Python's ``warnings`` category of what ``Engine.warnings()`` lists)."""


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
        return [text for _, text in self.causes(wanted)]

    def causes(self, wanted: dict) -> list:
        """``[(cause, warning)]`` of ``warnings``."""
        out = []
        for t, attrs in sorted(self.missing(wanted).items()):
            if attrs is None:
                out.append((("type", t), f"no event of type {t!r} seen in the input so far "
                                         f"(misspelt event type?)"))
            else:
                for a in sorted(attrs):
                    out.append((("attribute", t, a), f"no {t!r} event had attribute {a!r} so "
                                                     f"far (misspelt attribute?)"))
        return out


def never_held(conjuncts) -> list:
    """``[(cause, warning)]`` for the conditions whose every evaluation so far failed (a
    comparison of values of different kinds, ``a.price < 'high'`` with numeric prices; a
    missing attribute; a division by zero): such a condition can never be true for the
    input seen, the query matches nothing through it. Read from the counters the evaluation
    keeps anyway (nothing is done per event)."""
    out = []
    for c in conjuncts:
        if c.failed and c.failed >= c.tested and not c.passed:
            out.append((("never held", c.text),
                        f"condition `{c.text}` never held: it failed on all {c.tested} "
                        f"evaluations so far ({c.last_error})"))
    return out


class Teller:
    """Tells each of an engine's warnings once (per query and cause) to Python's ``warnings``
    module (category QueryWarning: shown in a notebook or a console without asking) and to
    the ``raycep`` logger at info level (a warning there would show twice in a notebook).

    When: the engine asks after ``process``/``process_many`` once the number of events
    doubled since it last looked (so looking, which may scan the buffer, costs O(1) per event
    amortised), and at ``advance``. A query is told about only once its window has passed
    over the input (one window without any event of a type is evidence; one event is not),
    or when the stream ended."""

    def __init__(self):
        self.told: set = set()
        self.next = 1                     # look when this many events were inserted
        self.first = math.inf             # the earliest event time looked at

    def due(self, inserted: int, ts: float) -> bool:
        if ts < self.first:
            self.first = ts
        if inserted < self.next:
            return False
        self.next = 2 * inserted
        return True

    def ready(self, clock: float, managers) -> bool:
        """Some query's window has passed over the input (before that, looking is not worth
        it: it may scan the buffer, and make the Events of column batches)."""
        return any(clock - self.first >= m.cq.window for m in managers)

    def tell(self, found: dict, windows: dict, clock: float, ended: bool) -> list:
        """Warn about what ``found`` (``{query: [(cause, text)]}``) has that was not told;
        ``windows``: query -> window (s). Returns the texts told."""
        out = []
        for name, items in found.items():
            if not ended and not clock - self.first >= windows.get(name, math.inf):
                continue
            for cause, text in items:
                if (name, cause) in self.told:
                    continue
                self.told.add((name, cause))
                message = f"query {name!r}: {text}"
                log.info("%s", message)
                _warnings.warn(message, QueryWarning, stacklevel=_caller())
                out.append(message)
        return out


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller() -> int:
    """The ``stacklevel`` of the first frame outside this package (the user's call of
    ``process``/``process_many``/``advance``), counted from the caller of this function."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
