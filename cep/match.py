"""A match: the events bound to each variable of a query."""
from __future__ import annotations

from cep.event import Event


class Match:
    """``bindings`` maps a variable name to an Event, or to a tuple of Events for a Kleene
    variable. Negated variables never appear."""

    __slots__ = ("query", "bindings", "order", "_key")

    def __init__(self, query: str, bindings: dict, order: tuple | None = None):
        self.query = query
        self.bindings = bindings
        self.order = order          # the query's variable order, for output
        self._key = None

    def key(self) -> frozenset:
        """Canonical identity: {(var, id) or (var, (id, ...))}; equal for equal matches."""
        if self._key is None:
            self._key = match_key(self.bindings)
        return self._key

    @property
    def first_ts(self) -> float:
        return min(e.ts for e in self.events())

    @property
    def last_ts(self) -> float:
        return max(e.ts for e in self.events())

    def events(self):
        for value in self.bindings.values():
            if isinstance(value, Event):
                yield value
            else:
                yield from value

    def to_dict(self) -> dict:
        """The output record: ``{"query": NAME, "events": {VAR: EVENT | [EVENT, ...]}}``."""
        out = {}
        b = self.bindings
        for var in self.order or b:
            if var in b:
                value = b[var]
                out[var] = value.to_dict() if isinstance(value, Event) else [e.to_dict() for e in value]
        return {"query": self.query, "events": out}

    def __eq__(self, other):
        return isinstance(other, Match) and self.query == other.query and self.key() == other.key()

    def __hash__(self):
        return hash((self.query, self.key()))

    def __repr__(self):
        return f"Match({self.query!r}, {self.bindings!r})"


def match_key(bindings: dict) -> frozenset:
    """Canonical identity of a binding dict (var -> Event | sequence of Events)."""
    out = []
    for var, value in bindings.items():
        if isinstance(value, Event):
            out.append((var, value.id))
        else:
            out.append((var, tuple(e.id for e in value)))
    return frozenset(out)
