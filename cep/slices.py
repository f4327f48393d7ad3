"""Time slices of one events file, evaluated apart (``raycep local --workers``).

The file is cut at line starts into parts of about equal size. Slice ``k`` owns the matches
whose latest event has ``lo <= ts < hi`` (``lo``: the event time of its part's first row,
``hi``: the next part's). Every event a match, its negations or the gaps its selection
strategy checks can depend on lies within one window of the match's latest event, on either
side (corrections of optimistic queries re-read one window more); so a slice reads its part
plus the rows within ``reach`` (twice the longest window, plus the slack) before ``lo`` and
after ``hi``, evaluates them all as one stream, and keeps the matches it owns (``keep``). Its
matches are those of one run over the whole file, in the same order per query, when the file
is in time order (no event behind the one before it: ``Slice.ordered`` says) and has no
copies; the caller runs the file in one piece otherwise.
"""
from __future__ import annotations

import os
from operator import lt

from cep.match import MatchBlock
from cep.sources import ROW_READ_BYTES, iter_batch_range

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
    turn (as ``iter_batch_runs``); ``keep(found)`` the owned part of what they gave; after
    the runs, ``rows`` (rows of its own part) and ``ordered``. Raises IngestError for a bad
    row, Unsliceable for a part without rows."""

    def __init__(self, path, cuts: list, k: int, reach: float, key_attr=None,
                 ts_unit: str = "s"):
        self.path, self.cuts, self.k, self.reach = os.fspath(path), cuts, k, reach
        self.key_attr, self.ts_unit = key_attr, ts_unit
        self.lo, self.hi = float("-inf"), float("inf")
        self.rows = 0
        self.ordered = True
        self._prev = float("-inf")

    def _read(self, start: int, stop: int) -> list:
        return list(iter_batch_range(self.path, start, stop, self.key_attr, self.ts_unit))

    def _check(self, piece) -> None:
        """Whether the rows go on in time order (ties allowed)."""
        if not self.ordered:
            return
        times = _times(piece)
        if times[0] < self._prev or any(map(lt, times[1:], times)):
            self.ordered = False
        self._prev = times[-1]

    def runs(self):
        cuts, k = self.cuts, self.k
        start, stop, size = cuts[k], cuts[k + 1], cuts[-1]
        main = iter_batch_range(self.path, start, stop, self.key_attr, self.ts_unit)
        first = next(main, None)
        if first is None:
            raise Unsliceable(f"part {k} of {self.path} has no rows")
        if k:
            self.lo = _first_ts(first)
            yield from self._checked(self._before(start, self.lo - self.reach))
        self.rows += len(first)
        yield from self._checked([first])
        for piece in main:
            self.rows += len(piece)
            yield from self._checked([piece])
        if stop < size:
            yield from self._after(stop, size)

    def _checked(self, pieces):
        for piece in pieces:
            self._check(piece)
            yield piece

    def _before(self, start: int, lo: float) -> list:
        """The rows before byte ``start``, from one with ``ts < lo`` (or the file's start)."""
        back = FIRST_REACH_BYTES
        with open(self.path, "rb") as handle:
            while True:
                at = line_start(handle, start - back)
                pieces = self._read(at, start) if at < start else []
                if at == 0 or (pieces and _first_ts(pieces[0]) < lo):
                    return pieces
                back *= 4

    def _after(self, stop: int, size: int):
        """The rows from byte ``stop`` on up to one with ``ts > hi + reach`` (or the end);
        ``hi``: the first one's."""
        ahead = FIRST_REACH_BYTES
        with open(self.path, "rb") as handle:
            while stop < size:
                end = line_start(handle, min(size, stop + ahead))
                for piece in self._read(stop, end):
                    if self.hi == float("inf"):
                        self.hi = _first_ts(piece)
                    self._check(piece)
                    yield piece
                    if _last_ts(piece) > self.hi + self.reach:
                        return
                stop, ahead = end, ahead * 2

    def keep(self, found: list) -> list:
        """The matches (and retractions) of ``found`` whose latest event has
        ``lo <= ts < hi``."""
        lo, hi = self.lo, self.hi
        out = []
        for item in found:
            if item.__class__ is MatchBlock:
                latest = _block_latest(item)
                inside = (latest >= lo) & (latest < hi)
                if inside.all():
                    out.append(item)
                elif inside.any():
                    out.append(MatchBlock(item.query, item.names, item.order, item.batch,
                                          item.heads, item.prefix[inside], item.lasts,
                                          item.last[inside]))
            elif lo <= item.last_ts < hi:
                out.append(item)
        return out


def _latest(value) -> float:
    return value.ts if value.__class__ is not tuple else max(e.ts for e in value)


def _block_latest(block: MatchBlock):
    """The latest event time of each match of ``block`` (numpy)."""
    import numpy as np
    latest = np.fromiter(map(_latest, block.lasts), dtype=np.float64,
                         count=len(block.lasts))[block.last]
    for heads in block.heads:
        times = np.fromiter(map(_latest, heads), dtype=np.float64, count=len(heads))
        np.maximum(latest, times[block.prefix], out=latest)
    return latest
