"""Time slices of one events file, evaluated apart (``raycep local --workers``).

The file is cut at line starts into parts of about equal size. Slice ``k`` writes what its
engine emits while it processes the rows from ``lo`` (its part's first event time) up to, not
including, ``hi`` (the next part's), and, for the last slice, at the end of the stream; so
the slices' outputs, one after the other, hold every match of one run over the whole file,
for each query in the order that run emits them (the order of their triggers, or of their
windows' ends for a negation at the end; the matches of one trigger in the order of the
slice's plan, which it chose from its own statistics). For that, the engine's state at ``lo`` must be that
of the whole run in everything a later emission can depend on: every match, negation, gap of
a selection strategy and correction lies within two windows (and SLIDE periods) and the slack
of the row that emits it, and a binding still waiting at ``lo`` within that reach of the row
before; so a slice first reads the rows before its part back to one more than ``reach`` before
the last of them. This holds when the file is in time order (``Slice.ordered`` says; ties
allowed) and has no copies; the caller runs the file in one piece otherwise.
"""
from __future__ import annotations

import os
from bisect import bisect_left
from operator import lt

from raycep.cep.io.files import ROW_READ_BYTES
from raycep.cep.io.sources import iter_batch_range

#: a file is cut into parts of at least this many bytes
MIN_PART_BYTES = 256 * 1024
#: the first guess of the bytes read before and after a part (doubled until enough)
FIRST_REACH_BYTES = 16 * 1024


class Unsliceable(Exception):
    """The file cannot be evaluated in slices (the caller runs it in one piece)."""


def cuts(path, parts: int) -> list | None:
    """Byte offsets ``0 = c_0 < c_1 < ... < c_parts = size`` at line starts, near
    ``size * k / parts``; None when the file is not cut: fewer than 2 parts, not CSV or JSON
    Lines, at most ROW_READ_BYTES or MIN_PART_BYTES per part, or a CSV with a quote character
    (a quoted cell may span lines)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if parts < 2 or ext not in (".csv", ".jsonl", ".ndjson"):
        return None
    try:
        size = os.path.getsize(path)
        if size <= ROW_READ_BYTES:
            return None
        parts = min(parts, size // MIN_PART_BYTES)
        if parts < 2:
            return None
        with open(path, "rb") as handle:
            if ext == ".csv":
                import mmap
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                    if view.find(b'"') >= 0:
                        return None
            out = [0]
            for k in range(1, parts):
                at = line_start(handle, size * k // parts)
                if out[-1] < at < size:
                    out.append(at)
            out.append(size)
    except OSError:
        return None
    return out if len(out) > 2 else None


def line_start(handle, pos: int) -> int:
    """The first line start at or after byte ``pos`` (the file's size if none)."""
    if pos <= 0:
        return 0
    handle.seek(pos - 1)
    at = pos - 1
    while True:
        data = handle.read(1 << 16)
        if not data:
            return at
        k = data.find(b"\n")
        if k >= 0:
            return at + k + 1
        at += len(data)


def _first_ts(piece) -> float:
    return piece.times[0] if piece.__class__ is not list else piece[0].ts


def _last_ts(piece) -> float:
    return piece.times[-1] if piece.__class__ is not list else piece[-1].ts


def _times(piece) -> list:
    return piece.times if piece.__class__ is not list else [e.ts for e in piece]


class Slice:
    """Slice ``k`` of the file cut at ``cuts``: ``runs()`` gives the pieces to evaluate in
    turn (as ``iter_batch_runs``), ``keep(found)`` what the last one made that is this
    slice's to write; after the runs, ``rows`` (rows of its own part). Raises IngestError for
    a bad row, Unsliceable for a part without rows or rows out of time order."""

    def __init__(self, path, cuts: list, k: int, reach: float, key_attr=None,
                 ts_unit: str = "s"):
        self.path, self.cuts, self.k, self.reach = os.fspath(path), cuts, k, reach
        self.key_attr, self.ts_unit = key_attr, ts_unit
        self.lo, self.hi = float("-inf"), float("inf")
        self.rows = 0
        self.ordered = True
        self.owning = False             # whether what the last piece made is this slice's
        self._prev = float("-inf")

    def keep(self, found: list) -> list:
        """``found`` if the piece it came from is this slice's (rows from ``lo`` on, before
        ``hi``; the end of the stream for the last slice), else nothing."""
        return found if self.owning else []

    def _read(self, start: int, stop: int) -> list:
        return list(iter_batch_range(self.path, start, stop, self.key_attr, self.ts_unit))

    def _check(self, piece) -> None:
        """Raises Unsliceable at the first piece whose rows do not go on in time order (ties
        allowed): the slice stops there, its run will not stand."""
        times = _times(piece)
        if times[0] < self._prev or any(map(lt, times[1:], times)):
            self.ordered = False
            raise Unsliceable("the events are not in time order")
        self._prev = times[-1]

    def runs(self):
        cuts, k = self.cuts, self.k
        start, stop, size = cuts[k], cuts[k + 1], cuts[-1]
        if stop < size:
            self.hi = self._first_after(stop, size)
        main = iter_batch_range(self.path, start, stop, self.key_attr, self.ts_unit)
        first = next(main, None)
        if first is None:
            raise Unsliceable(f"part {k} of {self.path} has no rows")
        if k:
            self.lo = _first_ts(first)
            for piece in self._before(start):
                yield from self._split(piece)
        self.rows += len(first)
        yield from self._split(first)
        for piece in main:
            self.rows += len(piece)
            yield from self._split(piece)
        self.owning = self.hi == float("inf")       # what the end of the stream releases

    def _split(self, piece):
        """The rows of ``piece`` before ``lo`` (not owning), then those before ``hi``
        (owning); the rest (ties of the next part's first row) are the next slice's."""
        self._check(piece)
        times = _times(piece)
        a, b = bisect_left(times, self.lo), bisect_left(times, self.hi)
        for lo, hi, owning in ((0, a, False), (a, b, True)):
            if hi > lo:
                self.owning = owning
                yield piece if hi - lo == len(piece) else \
                    piece[lo:hi] if piece.__class__ is list else piece.slice(lo, hi)

    def _before(self, start: int) -> list:
        """The rows before byte ``start`` from one more than ``reach`` before the last of
        them (or from the file's start)."""
        back = FIRST_REACH_BYTES
        with open(self.path, "rb") as handle:
            while True:
                at = line_start(handle, start - back)
                pieces = self._read(at, start) if at < start else []
                if at == 0 or (pieces and _first_ts(pieces[0]) <
                               _last_ts(pieces[-1]) - self.reach):
                    return pieces
                back *= 4

    def _first_after(self, stop: int, size: int) -> float:
        """The event time of the first row from byte ``stop`` on."""
        ahead = FIRST_REACH_BYTES
        with open(self.path, "rb") as handle:
            while True:
                end = line_start(handle, min(size, stop + ahead))
                pieces = self._read(stop, end)
                if pieces or end >= size:
                    return _first_ts(pieces[0]) if pieces else float("inf")
                ahead *= 4
