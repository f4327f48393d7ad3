"""A match: the events bound to each variable of a query."""
from __future__ import annotations

import hashlib
from itertools import repeat
from operator import itemgetter

import msgpack

from raycep.cep.event import Event

_new = tuple.__new__


class Match(tuple):
    """An immutable record of one match.

    ``bindings`` maps a variable name to an Event, or to a tuple of Events for a Kleene
    variable; negated variables never appear. ``order`` is the query's variable order (for
    output). The evaluator creates many matches that share all bindings but the last variable:
    those store the shared part once and the last binding apart (``Match.batch``), and
    ``bindings`` joins them when read.
    """

    __slots__ = ()

    def __new__(cls, query: str, bindings: dict, order: tuple | None = None):
        return _new(cls, (query, bindings, None, None, order))

    @staticmethod
    def batch(query: str, base: dict, name: str, events, order: tuple | None) -> list:
        """One match per event of ``events``: ``base`` (which must not change afterwards)
        plus ``name = event``, built without a Python call per match."""
        return list(map(_new, repeat(Match), zip(repeat(query), repeat(base), repeat(name),
                                                  events, repeat(order))))

    query = property(itemgetter(0))
    order = property(itemgetter(4))

    @property
    def bindings(self) -> dict:
        _, base, name, event, _ = self
        if name is None:
            return base
        out = dict(base)
        out[name] = event
        return out

    def __getnewargs__(self):
        return (self.query, self.bindings, self.order)

    def key(self) -> frozenset:
        """Canonical identity: {(var, id) or (var, (id, ...))}; equal for equal matches."""
        return match_key(self.bindings)

    @property
    def id(self) -> str:
        """The match's stable id (``match_id``): the same through every path."""
        return match_id(self)

    @property
    def start(self) -> float:
        """The time of its first event (seconds)."""
        return min(e.ts for e in self.events())

    @property
    def end(self) -> float:
        """The time of its last event (seconds)."""
        return max(e.ts for e in self.events())

    first_ts, last_ts = start, end

    def events(self):
        for value in self.bindings.values():
            if isinstance(value, Event):
                yield value
            else:
                yield from value

    def to_dict(self) -> dict:
        """The record ``{"query": NAME, "events": {VAR: EVENT | [EVENT, ...]}, "start": T,
        "end": T}`` (``start``/``end``: its first and last event time; the lines of
        cep.io.output are this record without them)."""
        out = {}
        b = self.bindings
        for var in self.order or b:
            if var in b:
                value = b[var]
                out[var] = value.to_dict() if isinstance(value, Event) else [e.to_dict() for e in value]
        return {"query": self.query, "events": out, "start": self.start, "end": self.end}

    retracted = False

    def __eq__(self, other):
        return other.__class__ is self.__class__ and self.query == other.query \
            and self.key() == other.key()

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.query, self.key(), self.retracted))

    def __repr__(self):
        return f"{self.__class__.__name__}({self.query!r}, {self.bindings!r})"


class Retraction(Match):
    """A match reported earlier that a late event invalidated (optimistic queries): same
    bindings, output as the match's record plus ``"retracted": true``."""

    __slots__ = ()
    retracted = True

    @classmethod
    def of(cls, match: Match) -> "Retraction":
        return _new(cls, tuple(match))

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["retracted"] = True
        return out


class MatchBlock:
    """Many matches of one query as columns, as a bulk evaluation finds them (cep.evaluation.bulk):
    ``heads[k]`` is the Event bound to variable ``names[k]`` in each prefix binding (all
    variables but the last), ``prefix`` the prefix binding of each match, ``lasts`` the
    distinct Events bound to the last variable and ``last`` the one of each match (numpy
    index arrays). Iterating or slicing gives the Match objects the evaluator gives, in the
    same order (``batch``: one ``Match.batch`` per prefix binding, else one bindings dict per
    match); ``cep.io.output`` writes the lines of a block without making them (issue 14)."""

    __slots__ = ("query", "names", "order", "batch", "heads", "prefix", "lasts", "last")

    retracted = False                   # like Match: a block holds matches, never retractions

    def __init__(self, query: str, names: tuple, order, batch: bool, heads: list, prefix,
                 lasts: list, last):
        self.query, self.names, self.order, self.batch = query, names, order, batch
        self.heads, self.prefix, self.lasts, self.last = heads, prefix, lasts, last

    def __len__(self) -> int:
        return len(self.prefix)

    def __iter__(self):
        return iter(self._build(0, len(self.prefix)))

    def __getitem__(self, part):
        if not isinstance(part, slice) or part.step not in (None, 1):
            raise TypeError("a MatchBlock is read whole or in slices")
        a, b, _ = part.indices(len(self.prefix))
        return self._build(a, b)

    def _build(self, a: int, b: int) -> list:
        if b <= a:
            return []
        prefix = self.prefix[a:b]
        p0 = int(prefix[0])
        local = (prefix - p0).tolist()
        names, last = self.names, len(self.names) - 1
        heads = [h[p0:int(prefix[-1]) + 1] for h in self.heads]
        lasts = list(map(self.lasts.__getitem__, self.last[a:b].tolist()))
        if self.batch:
            bases = list(map(dict, zip(*(zip(repeat(names[k]), heads[k])
                                         for k in range(last)))))
            return list(map(_new, repeat(Match), zip(
                repeat(self.query), map(bases.__getitem__, local), repeat(names[last]), lasts,
                repeat(self.order))))
        columns = [list(map(h.__getitem__, local)) for h in heads]
        columns.append(lasts)
        return list(map(_new, repeat(Match), zip(
            repeat(self.query), map(dict, zip(*(zip(repeat(names[k]), columns[k])
                                                 for k in range(last + 1)))),
            repeat(None), repeat(None), repeat(self.order))))

    def same_kind(self, other: "MatchBlock") -> bool:
        """Whether the matches of both can be one block (``joined``)."""
        return self.query == other.query and self.names == other.names and \
            self.order == other.order and self.batch == other.batch

    @staticmethod
    def joined(pieces: list):
        """The matches of ``pieces`` (``(block, a, b)``: matches ``a`` to ``b - 1`` of
        ``block``, all blocks of one kind) in that order, as one MatchBlock."""
        import numpy as np
        merged: list = []                   # consecutive ranges of one block as one
        for block, a, b in pieces:
            if b > a:
                if merged and merged[-1][0] is block and merged[-1][2] == a:
                    merged[-1][2] = b
                else:
                    merged.append([block, a, b])
        pieces = merged
        if len(pieces) == 1 and pieces[0][1] == 0 and pieces[0][2] == len(pieces[0][0]):
            return pieces[0][0]
        first = pieces[0][0] if pieces else None
        if first is None:
            return []
        heads = [[] for _ in first.heads]
        prefix, last, lasts, offsets = [], [], [], {}
        for block, a, b in pieces:
            part = block.prefix[a:b]
            p0, p1 = int(part[0]), int(part[-1]) + 1
            prefix.append(part + (len(heads[0]) - p0 if heads else -p0))
            for into, h in zip(heads, block.heads):
                into.extend(h[p0:p1])
            off = offsets.get(id(block))
            if off is None:
                off = offsets[id(block)] = len(lasts)
                lasts.extend(block.lasts)
            last.append(block.last[a:b] + off)
        return MatchBlock(first.query, first.names, first.order, first.batch, heads,
                          np.concatenate(prefix), lasts, np.concatenate(last))


def match_key(bindings: dict) -> frozenset:
    """Canonical identity of a binding dict (var -> Event | sequence of Events)."""
    out = []
    for var, value in bindings.items():
        if isinstance(value, Event):
            out.append((var, value.id))
        else:
            out.append((var, tuple(e.id for e in value)))
    return frozenset(out)


def match_id(match) -> str:
    """A stable id of a match (or retraction): blake2b of the query name and its bindings
    (variable -> event ids); the same through every path (raycep local, actors, gateway)."""
    items = sorted(match.key(), key=lambda item: item[0])
    body = msgpack.packb([match.query, [[v, list(i) if isinstance(i, tuple) else i]
                                        for v, i in items]], use_bin_type=True)
    return hashlib.blake2b(body, digest_size=12).hexdigest()
