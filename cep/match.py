"""A match: the events bound to each variable of a query."""
from __future__ import annotations

import hashlib
import threading
from binascii import hexlify
from itertools import repeat
from operator import attrgetter, itemgetter

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
    match); ``cep.io.output`` writes the lines of a block without making them (issue 14).

    The matches of a query group's members (cep.runtime.groups) come as one block with
    ``queries`` (the members' names) and ``members`` (per match, the index of its query in
    ``queries``); ``query`` is then the group's name."""

    __slots__ = ("query", "names", "order", "batch", "heads", "prefix", "lasts", "last",
                 "queries", "members")

    retracted = False                   # like Match: a block holds matches, never retractions

    def __init__(self, query: str, names: tuple, order, batch: bool, heads: list, prefix,
                 lasts: list, last, queries: tuple | None = None, members=None):
        self.query, self.names, self.order, self.batch = query, names, order, batch
        self.heads, self.prefix, self.lasts, self.last = heads, prefix, lasts, last
        self.queries, self.members = queries, members

    def labels(self, a: int, b: int):
        """The query name of matches ``a`` to ``b - 1`` (an iterable)."""
        if self.members is None:
            return repeat(self.query)
        return map(self.queries.__getitem__, self.members[a:b].tolist())

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
        p0, p1 = _span(prefix)
        local = (prefix - p0).tolist()
        names, last = self.names, len(self.names) - 1
        heads = [h[p0:p1] for h in self.heads]
        lasts = list(map(self.lasts.__getitem__, self.last[a:b].tolist()))
        if self.batch:
            bases = list(map(dict, zip(*(zip(repeat(names[k]), heads[k])
                                         for k in range(last)))))
            return list(map(_new, repeat(Match), zip(
                self.labels(a, b), map(bases.__getitem__, local), repeat(names[last]), lasts,
                repeat(self.order))))
        columns = [list(map(h.__getitem__, local)) for h in heads]
        columns.append(lasts)
        return list(map(_new, repeat(Match), zip(
            self.labels(a, b), map(dict, zip(*(zip(repeat(names[k]), columns[k])
                                                 for k in range(last + 1)))),
            repeat(None), repeat(None), repeat(self.order))))

    def same_kind(self, other: "MatchBlock") -> bool:
        """Whether the matches of both can be one block (``joined``)."""
        return self.query == other.query and self.names == other.names and \
            self.order == other.order and self.batch == other.batch and \
            self.queries == other.queries

    @staticmethod
    def joined(pieces: list):
        """The matches of ``pieces`` (``(block, a, b)``: matches ``a`` to ``b - 1`` of
        ``block``, all blocks of one kind) in that order, as one MatchBlock (gathered with
        numpy: one index per match, whatever the number of pieces)."""
        import numpy as np
        pieces = [p for p in pieces if p[2] > p[1]]
        if not pieces:
            return []
        first = pieces[0][0]
        if len(pieces) == 1 and pieces[0][1] == 0 and pieces[0][2] == len(first):
            return first
        blocks, number = [], {}
        for block, _, _ in pieces:
            if id(block) not in number:
                number[id(block)] = len(blocks)
                blocks.append(block)
        bid = np.fromiter((number[id(p[0])] for p in pieces), dtype=np.intp, count=len(pieces))
        starts = np.fromiter((p[1] for p in pieces), dtype=np.intp, count=len(pieces))
        ends = np.fromiter((p[2] for p in pieces), dtype=np.intp, count=len(pieces))
        if len(blocks) == 1 and starts[0] == 0 and ends[-1] == len(first) and \
                (starts[1:] == ends[:-1]).all():
            return first                    # the whole block, in order
        lens = ends - starts
        # per match: its row in the blocks' rows put end to end
        sizes = np.array([len(b) for b in blocks], dtype=np.intp)
        base = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        rows = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens - starts -
                                                      base[bid], lens)
        # the prefix bindings each block's matches use (a range of its own), end to end
        prefix = np.concatenate([b.prefix for b in blocks])[rows]
        heads = [[] for _ in first.heads]
        which = np.repeat(bid, lens)
        for k, b in enumerate(blocks):
            mine = which == k if len(blocks) > 1 else slice(None)
            used = prefix[mine]
            p0, p1 = int(used.min()), int(used.max()) + 1
            prefix[mine] = used + (len(heads[0]) - p0 if heads else -p0)
            for into, h in zip(heads, b.heads):
                into.extend(h[p0:p1])
        last_off = np.concatenate(([0], np.cumsum([len(b.lasts) for b in blocks])[:-1]))
        last = np.concatenate([b.last + o for b, o in zip(blocks, last_off)])[rows]
        lasts = [e for b in blocks for e in b.lasts]
        members = None
        if first.members is not None:
            members = np.concatenate([b.members for b in blocks])[rows]
        return MatchBlock(first.query, first.names, first.order, first.batch, heads, prefix,
                          lasts, last, first.queries, members)


def _span(prefix) -> tuple:
    """The prefix bindings ``prefix`` (a slice of a MatchBlock's) refers to: ``(first,
    end)``. Not in order: a group's block lists each trigger's matches member by member, a
    joined block interleaves the blocks it joins."""
    return int(prefix.min()), int(prefix.max()) + 1


class MatchMix:
    """The matches of several queries found in bulk for one chunk of triggers, in the order
    the engine reports them (trigger by trigger, each trigger's queries in turn): ``parts``
    (a MatchBlock or a list of Match objects, one per query or group) and, per match, its
    part (``which``) and its position there (``at``), numpy arrays. Iterating gives the
    Match objects; ``cep.io.output`` writes the lines without making them."""

    __slots__ = ("parts", "which", "at")

    retracted = False

    def __init__(self, parts: list, which, at):
        self.parts, self.which, self.at = parts, which, at

    def __len__(self) -> int:
        return len(self.which)

    def __iter__(self):
        built = [list(p) for p in self.parts]
        return iter(list(map(lambda w, a: built[w][a], self.which.tolist(),
                             self.at.tolist())))


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


class _Local(threading.local):
    """Per thread: one msgpack Packer (not thread-safe), as match_id packs (no ``default``)."""

    def __init__(self):
        packer = msgpack.Packer(use_bin_type=True)
        self.pack, self.array = packer.pack, packer.pack_array_header


_LOCAL = _Local()
_ID = attrgetter("id")
_BLAKE = hashlib.blake2b(digest_size=12)       # never updated: copied per match (_digest)


def _digest(body: bytes, new=_BLAKE.copy) -> bytes:
    """``blake2b(body, digest_size=12).digest()``; a copy of a fresh hash is quicker to make
    than a hash with keyword arguments."""
    h = new()
    h.update(body)
    return h.digest()


def block_ids(block: MatchBlock) -> list:
    """``match_id`` of each match of ``block``, in order, as hex bytes, without Match objects:
    ``match_id``'s msgpack body is ``[query, [[var, id], ...]]`` with the variables sorted, so
    it is joined from fragments, each packed once (the query's head; per prefix binding,
    the pairs of the variables before and after the last one; per last event, its pair),
    then hashed, one blake2b per match (C-level maps)."""
    import numpy as np
    names, last = block.names, len(block.names) - 1
    pack, array = _LOCAL.pack, _LOCAL.array(len(names))
    if block.members is None:
        columns = [repeat(b"\x92" + pack(block.query) + array)]
    else:                               # a group's: each match's query is a member's
        heads = np.empty(len(block.queries), dtype=object)
        heads[:] = [b"\x92" + pack(q) + array for q in block.queries]
        columns = [heads[block.members].tolist()]
    pre = post = None                   # per prefix binding: the pairs before / after the last
    seen = False
    for k in sorted(range(len(names)), key=names.__getitem__):
        if k == last:
            columns.append(_pairs(pack, names[k], block.lasts)[block.last].tolist())
            seen = True
            continue
        pairs = _pairs(pack, names[k], block.heads[k])
        if seen:
            post = pairs if post is None else post + pairs
        else:
            pre = pairs if pre is None else pre + pairs
    if pre is not None:
        columns.insert(1, pre[block.prefix].tolist())
    if post is not None:
        columns.append(post[block.prefix].tolist())
    return list(map(hexlify, map(_digest, map(b"".join, zip(*columns)))))


def _pairs(pack, var: str, events: list):
    """``[var, event id]`` packed for each of ``events`` (a MatchBlock binds Events, no
    Kleene tuples), as a numpy object array (block_ids)."""
    import numpy as np
    key = b"\x92" + pack(var)
    out = np.empty(len(events), dtype=object)
    out[:] = list(map(key.__add__, map(pack, map(_ID, events))))
    return out
