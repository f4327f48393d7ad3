"""Match records as JSON bytes, assembled from fragments.

A match line is ``{"query":Q,"events":{VAR:EVENT,...}}`` plus optional extra fields
(``"id"``, ``"retracted":true``). Each event is serialised once (``Event.json()``, cached on the
event), so an event that takes part in many matches costs one serialisation, and a line is a
``bytes`` concatenation of fragments (``MatchLines.lines`` first serialises the new events of
its matches in one loop, ``cep.event.prepare_json``). The evaluator emits the matches of one
trigger as a batch that shares every binding but one (``Match.batch``): the part before and
after the varying binding is built once per batch and reused for each of its matches.

Output is compact JSON (orjson), keys in the order of ``Match.to_dict()``; parsing a line gives
exactly ``match.to_dict()`` without its ``start`` and ``end`` (plus the extra fields).
"""
from __future__ import annotations

from itertools import chain, compress, islice, repeat
from operator import attrgetter, is_, is_not, itemgetter

import orjson

from raycep.cep.event import Event, prepare_json
from raycep.cep.match import MatchBlock, MatchMix, block_ids, match_id

_QUERY, _BASE, _NAME, _EVENT = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)
_JSON = attrgetter("_json")

_RETRACTED = b',"retracted":true'
#: a record's end after its last event (MatchLines.records): the id field around the id
_ID_OPEN, _ID_CLOSE = b'},"id":"', b'"}'
_BLOCKS = frozenset((MatchBlock, MatchMix))
#: the lines of a MatchBlock are joined this many at a time (MatchLines.block)
PIECE_LINES = 2048
#: lines of a MatchBlock per Fragments piece (MatchLines.block with ``gather``)
GATHER_LINES = 8192


class Fragments(list):
    """Lines not joined: the bytes objects that make them up, in order. ``bytes(piece)``
    joins them; the writer thread does (gateway.cli.writer), so the producer never copies
    a line."""

    __slots__ = ()

    def __bytes__(self) -> bytes:
        return b"".join(self)


def _value(value) -> bytes:
    if value.__class__ is Event:
        return value.json()
    return b"[" + b",".join([e.json() for e in value]) + b"]"


def _head(query: str) -> bytes:
    return b'{"query":' + orjson.dumps(query) + b',"events":{'


class MatchLines:
    """Serialises matches to JSON lines (bytes, each ending in a newline).

    Keeps the fragments of the last batch seen, so consecutive matches of one ``Match.batch``
    (same shared bindings object, same varying variable) cost one concatenation each.
    """

    __slots__ = ("_heads", "_names", "_base", "_name", "_pre", "_post", "counts",
                 "retractions")

    def __init__(self):
        self.counts: dict = {}          # query -> matches written
        self.retractions: dict = {}     # query -> retractions written
        self._heads: dict = {}          # query -> b'{"query":...,"events":{'
        self._names: dict = {}          # variable -> b'"var":'
        self._base = None
        self._name = None
        self._pre = self._post = b""

    def _var(self, name: str) -> bytes:
        frag = self._names.get(name)
        if frag is None:
            frag = self._names[name] = orjson.dumps(name) + b":"
        return frag

    def _fields(self, bindings: dict, order, skip=None) -> list:
        out = []
        for var in order or bindings:
            if var in bindings and var != skip:
                out.append(self._var(var) + _value(bindings[var]))
        return out

    def line(self, match, extra: bytes = b"") -> bytes:
        """``match`` as one JSON line; ``extra`` is inserted before the closing brace (e.g.
        ``b',"id":"..."'``). A Retraction gets ``"retracted":true`` after ``extra``."""
        query, base, name, event, order = match
        head = self._heads.get(query)
        if head is None:
            head = self._heads[query] = _head(query)
        tail = extra + _RETRACTED if match.retracted else extra
        if name is None:
            return head + b",".join(self._fields(base, order)) + b"}" + tail + b"}\n"
        if base is not self._base or name != self._name:
            pre, post, seen = [], [], False
            for var in order or (*base, name):
                if var == name:
                    seen = True
                elif var in base:
                    (post if seen else pre).append(self._var(var) + _value(base[var]))
            self._pre = b",".join(pre) + b"," if pre else b""
            self._pre += self._var(name)
            self._post = b"," + b",".join(post) if post else b""
            self._base, self._name = base, name
        return head + self._pre + _value(event) + self._post + b"}" + tail + b"}\n"

    def lines(self, matches) -> bytes:
        """All ``matches`` as JSON lines, concatenated; counts them per query in ``counts``
        and ``retractions``. ``matches`` may hold cep.match.MatchBlock entries (``block``)."""
        return b"".join(self.pieces(matches))

    def pieces(self, matches, gather: bool = False) -> list:
        """``lines(matches)`` as a list of bytes to write in turn (``matches`` may hold
        cep.match.MatchBlock entries, each standing for its matches; with ``gather`` their
        lines come as Fragments pieces)."""
        if not isinstance(matches, list):
            matches = list(matches)
        at = list(compress(range(len(matches)), map(_BLOCKS.__contains__, map(type, matches))))
        if not at:
            return [self._lines(matches)]
        out, k = [], 0
        for j in (*at, len(matches)):
            if j > k:
                out.append(self._lines(matches[k:j]))
            if j < len(matches):
                item = matches[j]
                out += self.block(item, gather) if item.__class__ is MatchBlock else \
                    self.mix(item, gather)
            k = j + 1
        return out

    def _lines(self, matches: list) -> bytes:
        """``lines`` of a list of Match objects.

        A run of consecutive matches of one ``Match.batch`` (the same shared bindings object)
        becomes ``pre + (post + pre).join(event fragments) + post``: the per-match work is
        fetching the event's cached JSON (run boundaries are found with C-level maps)."""
        n = len(matches)
        if n < 2:
            if n:
                self._count(matches[0], 1)
                return self.line(matches[0])
            return b""
        bases = list(map(_BASE, matches))
        starts = [0, *compress(range(1, n), map(is_not, bases[1:], bases[:-1])), n]
        _prepare(matches, bases, starts)
        out = []
        append = out.append
        for a, b in zip(starts, starts[1:]):
            m = matches[a]
            if b - a == 1 or m[2] is None:
                for k in range(a, b):
                    append(self.line(matches[k]))
                    self._count(matches[k], 1)
                continue
            run = matches[a:b]
            if len(set(map(type, run))) > 1 or len(set(map(_NAME, run))) > 1 or \
                    len(set(map(_QUERY, run))) > 1:
                for k in run:                           # not one batch after all
                    append(self.line(k))
                    self._count(k, 1)
                continue
            first = self.line(m)                        # sets _pre / _post for this batch
            pre = self._heads[m[0]] + self._pre
            post = first[len(pre) + len(_value(m[3])):]
            # a batch's varying values are Events, serialised by _prepare
            append(pre + (post + pre).join(list(map(_JSON, map(_EVENT, run)))) + post)
            self._count(m, b - a)
        return b"".join(out)

    def block(self, block: MatchBlock, gather: bool = False) -> list:
        """The lines of the matches of ``block`` (cep.match.MatchBlock), in order, without
        Match objects: ``lines(list(block))`` in pieces of at most PIECE_LINES lines (with
        ``gather``: Fragments of at most GATHER_LINES lines). A line is the part before the
        last variable's event (made once per prefix binding), that event's JSON with its
        separator (once per event) and the part after it (per prefix binding), gathered per
        match with numpy object arrays (whose ``+`` concatenates bytes element-wise)."""
        parts = self._parts(block)
        if parts is None:
            return []
        return _joined(parts, gather)

    def mix(self, mix: MatchMix, gather: bool = False) -> list:
        """``block`` of a cep.match.MatchMix: each part's lines (a MatchBlock's made as
        ``block`` makes them), put in the mix's order."""
        import numpy as np
        cells = []
        for part in mix.parts:
            if part.__class__ is MatchBlock:
                cells.append(self._parts(part))
            else:
                got = np.empty((len(part), 1), dtype=object)
                got[:, 0] = [self.line(m) for m in part]
                for m in part:
                    self._count(m, 1)
                cells.append(got)
        # the parts' cells in one matrix (short rows padded with b""), rows in the mix's order
        width = max(c.shape[1] for c in cells)
        sizes = [len(c) for c in cells]
        if all(c.shape[1] == width for c in cells):
            rows = np.concatenate(cells)
        else:
            rows = np.full((sum(sizes), width), b"", dtype=object)
            at = 0
            for c in cells:
                rows[at:at + len(c), :c.shape[1]] = c
                at += len(c)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        return _joined(rows[offsets[mix.which] + mix.at], gather)

    def records(self, matches, meta: tuple | None = None) -> list:
        """``[match_json(m, self) for m in matches]``: each match's record with its ``id``
        (bytes, no newline), where ``matches`` may hold MatchBlock and MatchMix entries
        standing for their matches; their records are made in bulk (``_parts`` with the
        ids of ``cep.match.block_ids``), without Match objects. ``meta``: two lists to
        extend with each record's query and identity (``record_meta``) where they come
        with the bulk ids, None for the others (read from the record when needed)."""
        if not isinstance(matches, list):
            matches = list(matches)
        at = list(compress(range(len(matches)), map(_BLOCKS.__contains__, map(type, matches))))
        if not at:
            out = [match_json(m, self) for m in matches]
            unknown_meta(meta, len(out))
            return out
        out, k = [], 0
        for j in (*at, len(matches)):
            out += [match_json(m, self) for m in matches[k:j]]
            unknown_meta(meta, j - k)
            if j < len(matches):
                item = matches[j]
                out += self._block_records(item, meta) if item.__class__ is MatchBlock else \
                    self._mix_records(item, meta)
            k = j + 1
        return out

    def _block_records(self, block: MatchBlock, meta: tuple | None = None) -> list:
        """``records`` of a MatchBlock: its lines' cells up to the closing brace of
        ``"events"``, then the id field (joined per match through ``zip``, which reuses its
        tuple: no container per match for the garbage collector to track)."""
        columns = self._columns(block, _ID_OPEN)
        if columns is None:
            return []
        ids = block_ids(block)
        if meta is not None:
            meta[0].extend(islice(block.labels(0, len(ids)), len(ids)))
            meta[1].extend(map(bytes.decode, ids))
        return list(map(b"".join, zip(*(c.tolist() for c in columns), ids,
                                      repeat(_ID_CLOSE))))

    def _mix_records(self, mix: MatchMix, meta: tuple | None = None) -> list:
        """``records`` of a MatchMix: each part's, put in the mix's order."""
        import numpy as np
        made, metas = [], []
        for p in mix.parts:
            got = ([], []) if meta is not None else None
            made.append(self._block_records(p, got) if p.__class__ is MatchBlock else
                        [match_json(m, self) for m in p])
            if got is not None and p.__class__ is not MatchBlock:
                unknown_meta(got, len(made[-1]))
            metas.append(got)
        offsets = np.concatenate(([0], np.cumsum([len(r) for r in made])[:-1]))
        order = (offsets[mix.which] + mix.at).tolist()
        if meta is not None:
            for into, k in zip(meta, (0, 1)):
                flat = list(chain.from_iterable(got[k] for got in metas))
                into += map(flat.__getitem__, order)
        flat = list(chain.from_iterable(made))
        return list(map(flat.__getitem__, order))

    def _parts(self, block: MatchBlock):
        """The lines of ``block`` as a numpy object array of bytes, a row per match whose
        cells joined are its line (None: no match); counts them."""
        import numpy as np
        columns = self._columns(block)
        if columns is None:
            return None
        parts = np.empty((len(block), len(columns)), dtype=object)
        for c, column in enumerate(columns):
            parts[:, c] = column
        return parts

    def _columns(self, block: MatchBlock, end: bytes = b"}}\n"):
        """``_parts`` as its columns: numpy object arrays of bytes, a cell per match (None:
        no match); counts them. ``end``: what follows the last event (the line's end)."""
        import numpy as np
        n = len(block)
        if not n:
            return None
        events = [e for h in block.heads for e in h]
        events += block.lasts
        prepare_json(compress(events, map(is_, map(_JSON, events), repeat(None))))
        names, last = block.names, len(block.names) - 1
        order = [v for v in block.order if v in names] if block.order else list(names)
        if block.members is None:
            head = self._heads.get(block.query)
            if head is None:
                head = self._heads[block.query] = _head(block.query)
            heads = None
        else:                               # a group's: each match's query is a member's
            head = b""
            heads = np.empty(len(block.queries), dtype=object)
            heads[:] = [_head(q) for q in block.queries]
        pre = post = None                   # per prefix binding: before / after the last
        mid = _fragments(block.lasts)
        sep, seen = head, False
        for var in order:
            k = names.index(var)
            if k == last:
                mid = sep + self._var(var) + mid
                seen = True
            else:
                frags = sep + self._var(var) + _fragments(block.heads[k])
                if seen:
                    post = frags if post is None else post + frags
                else:
                    pre = frags if pre is None else pre + frags
            sep = b","
        if post is None:
            mid = mid + end
        else:
            post = post + end
        columns = [column[block.last if column is mid else
                          block.members if column is heads else block.prefix]
                   for column in (heads, pre, mid, post) if column is not None]
        if heads is None:
            self.counts[block.query] = self.counts.get(block.query, 0) + n
        else:
            for q, k in zip(block.queries, np.bincount(block.members,
                                                       minlength=len(block.queries)).tolist()):
                if k:
                    self.counts[q] = self.counts.get(q, 0) + k
        return columns

    @property
    def written(self) -> int:
        """Lines written so far: matches and retractions."""
        return sum(self.counts.values()) + sum(self.retractions.values())

    def _count(self, match, n: int) -> None:
        into = self.retractions if match.retracted else self.counts
        into[match[0]] = into.get(match[0], 0) + n


def unknown_meta(meta: tuple | None, n: int) -> None:
    """``MatchLines.records``' meta for ``n`` records made one by one (or that are not
    matches): not known, None each."""
    if meta is not None and n:
        meta[0].extend(repeat(None, n))
        meta[1].extend(repeat(None, n))


def _joined(parts, gather: bool) -> list:
    """The rows of ``parts`` (MatchLines._parts) as bytes pieces of at most PIECE_LINES
    lines (``gather``: Fragments of at most GATHER_LINES lines). Joined in pieces: a fresh
    buffer for all of them costs more (page faults) than pieces that the allocator reuses
    once written."""
    n = len(parts)
    if gather:
        return [Fragments(parts[a:a + GATHER_LINES].ravel().tolist())
                for a in range(0, n, GATHER_LINES)]
    return [b"".join(parts[a:a + PIECE_LINES].ravel().tolist())
            for a in range(0, n, PIECE_LINES)]


def _fragments(events: list):
    """The events' cached JSON as a numpy object array (MatchLines.block)."""
    import numpy as np
    out = np.empty(len(events), dtype=object)
    out[:] = list(map(_JSON, events))
    return out


def _prepare(matches: list, bases: list, starts: list) -> None:
    """Serialise the events of ``matches`` that have no JSON yet in one ``prepare_json``
    call, before the lines are assembled from the cache: the varying binding of each match
    and the values of each distinct shared bindings object (the Events; Kleene tuples go
    through ``_value``)."""
    events = [value for k in starts[:-1] for value in bases[k].values()]
    events += map(_EVENT, matches)
    events = list(compress(events, map(is_, map(type, events), repeat(Event))))
    prepare_json(compress(events, map(is_, map(_JSON, events), repeat(None))))


def match_json(match, lines: MatchLines | None = None) -> bytes:
    """The JSON text of ``match_record(match)``, assembled from the events' cached JSON
    (``lines``: a MatchLines to reuse)."""
    return (lines or MatchLines()).line(match, b',"id":"' + match_id(match).encode() + b'"')[:-1]


_HEAD = b'{"query":"'
_TAIL_RETRACTED = _RETRACTED + b"}"


def record_meta(data: bytes) -> tuple | None:
    """``(query, identity)`` of a match or retraction record's JSON as ``match_json`` and
    ``MatchLines.records`` write it, read from its head and tail without parsing it whole
    (identity: its id, ``"retracted:" + id`` for a retraction); None for any other text (a
    late-event record, a query name or id with escapes: parse those)."""
    if not data.startswith(_HEAD):
        return None
    end = data.find(b'"', 10)
    query = data[10:end]
    if end < 0 or b"\\" in query:
        return None
    retracted = data.endswith(_TAIL_RETRACTED)
    stop = len(data) - (len(_TAIL_RETRACTED) if retracted else 1)
    start = data.rfind(b',"id":"', end, stop)
    ident = data[start + 7:stop - 1]
    if start < 0 or data[stop - 1:stop] != b'"' or b'"' in ident or b"\\" in ident:
        return None
    ident = ident.decode()
    return query.decode(), "retracted:" + ident if retracted else ident


def record_identity(record: dict):
    """What makes an output record (a mapping) a duplicate: its id, ``"retracted:" + id``
    for a retraction (a match and its retraction share the id); None without an id."""
    rid = record.get("id")
    return "retracted:" + rid if rid is not None and record.get("retracted") else rid


def match_record(match) -> dict:
    """``match.to_dict()`` plus its ``id`` (a Retraction: the same id, ``"retracted": true``)."""
    return orjson.loads(match_json(match))
