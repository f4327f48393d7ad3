"""Read events from files: CSV (header row, cep.io.csv_reader), JSON Lines
(cep.io.jsonl_reader) and Parquet (cep.io.parquet_reader).

``id`` is the event id. ``key`` is the partition key, unless ``key_attr`` names another
attribute: then it is an ordinary attribute, so a user's column called ``key`` is never lost
(see ``cep.event.make_event``, which also rejects non-finite numbers and non-scalar keys).

Errors are IngestError with ``row`` = the 1-based line number in the file (the CSV header is
line 1; for Parquet the 1-based row number), ``field`` = the offending field, and the file
named in the message (also in the error's ``path`` attribute).

A file is read lazily, in blocks (cep.io.files), and a bad row cuts the events into runs.
``iter_batch_runs`` hands out what is read in bulk as ``cep.store.batch.ColumnBatch`` (an Event
made per row only when asked for), ``iter_event_runs`` as Events. A CSV or JSON Lines file read
row by row (``cep.io.files.ROW_READ_BYTES``) but larger than ``ROW_BATCH_BYTES`` comes from
``iter_batch_runs`` as column batches too (numpy, no pyarrow), which ``raycep local`` evaluates
in bulk: a CSV block without quotes typed column by column (``cep.io.csv_columns``, no Event
per row), anything else as the Events read row by row.
"""
from __future__ import annotations

import bisect
import gc
import os
from functools import partial
from itertools import chain

from raycep.cep.errors import IngestError
from raycep.cep.io.csv_reader import csv_chunks
from raycep.cep.io.files import by_rows, file_error
from raycep.cep.io.jsonl_reader import jsonl_chunks
from raycep.cep.io.parquet_reader import parquet_chunks
from raycep.cep.io.timestamps import check_format

#: file extensions read_events understands
SUPPORTED_EXTENSIONS = (".csv", ".jsonl", ".ndjson", ".parquet")

#: such a file larger than this comes from iter_batch_runs as column batches of its Events
#: (numpy, no pyarrow: cep.store.batch), which raycep local evaluates in bulk (cep.evaluation.bulk)
ROW_BATCH_BYTES = 64 * 1024


def read_events(path, key_attr: str | None = None, errors: str = "raise", ts_unit: str = "s"):
    """Events of a .csv / .jsonl / .parquet file, in file order.

    ``errors="raise"`` (default): a lazy iterator of Event; the first bad row raises
    IngestError. ``errors="collect"``: ``(list of good Events, list of IngestError)``.
    ``key_attr`` sets each event's partition key from that attribute (missing -> IngestError).
    """
    if errors == "raise":
        return iter_events(path, key_attr, ts_unit=ts_unit)
    if errors == "collect":
        problems: list = []
        events = list(iter_events(path, key_attr, on_error=problems.append, ts_unit=ts_unit))
        return events, problems
    raise ValueError(f"errors must be 'raise' or 'collect', not {errors!r}")


def iter_events(path, key_attr: str | None = None, on_error=None, ts_unit: str = "s"):
    """Iterator over the events of ``path`` (the file is checked and the libraries its reader
    needs are loaded now; it is read lazily).

    A bad row is passed to ``on_error(IngestError)`` and skipped, or raised when ``on_error``
    is None. Errors that concern the whole file (unreadable, unsupported extension, missing
    CSV column, not Parquet) always raise.
    """
    return chain.from_iterable(iter_event_runs(path, key_attr, on_error, ts_unit))


def iter_event_runs(path, key_attr: str | None = None, on_error=None, ts_unit: str = "s"):
    """``iter_events`` as lists of consecutive events (the events of a block of the file
    between two bad rows): the same events, checks and errors, without a Python step per
    event (``raycep local`` hands the engine such lists)."""
    return _event_lists(_open_runs(path, key_attr, on_error, ts_unit))


def iter_batch_runs(path, key_attr: str | None = None, on_error=None, ts_unit: str = "s"):
    """``iter_event_runs`` without making the Events of what is read in bulk: a block read
    as columns (CSV, Parquet, a run of JSON lines of one shape) comes as a
    ``cep.store.batch.ColumnBatch`` (Events made when asked for), what is read row by row as a list
    of Events (but for a file of more than ``ROW_BATCH_BYTES``: a ColumnBatch of these
    Events, so it is evaluated in bulk too). The same rows, checks, errors and cuts at bad
    rows; ``batch.events()`` gives the events of ``iter_event_runs``."""
    return _pieces(_open_runs(path, key_attr, on_error, ts_unit, batches=True))


def _open_runs(path, key_attr, on_error, ts_unit, batches: bool = False):
    """The file checks, then the lazy reader of ``path`` (see _runs); ``batches``: the Events
    read row by row come as column batches when the file has more than ROW_BATCH_BYTES."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".csv":
        reader = csv_chunks
    elif ext in (".jsonl", ".ndjson"):
        reader = jsonl_chunks
    elif ext == ".parquet":
        reader = parquet_chunks
    else:
        raise file_error(path, f"unsupported file extension {ext or '(none)'!r}; supported: "
                               f"{', '.join(SUPPORTED_EXTENSIONS)}")
    if not os.path.exists(path):
        raise file_error(path, "events file not found")
    if os.path.isdir(path):
        raise file_error(path, "events path is a directory, not a file")
    size = os.path.getsize(path)
    ts_unit = check_format(ts_unit)
    if reader is parquet_chunks or not by_rows(size):
        import raycep.cep.io.columns  # noqa: F401  (numpy, pyarrow: read in bulk)
    elif batches and size > ROW_BATCH_BYTES:
        from raycep.cep.store.batch import ColumnBatch       # numpy
        if reader is csv_chunks:               # simple blocks typed column by column
            from raycep.cep.io.csv_columns import csv_block_batch
            reader = partial(csv_chunks, typed=csv_block_batch)
        runs = _runs(path, reader, key_attr, on_error, ts_unit)
        return ([ColumnBatch.from_events(piece, keep=True) if piece.__class__ is list else piece
                 for piece in pieces] for pieces in runs)
    return _runs(path, reader, key_attr, on_error, ts_unit)


def _event_lists(runs):
    """One list of Events per run of pieces."""
    for pieces in runs:
        if len(pieces) == 1:
            yield _events(pieces[0])
        else:
            yield list(chain.from_iterable(map(_events, pieces)))


def _pieces(runs):
    for pieces in runs:
        yield from pieces


def _events(piece) -> list:
    """The Events of a piece (a list of Events, or a ColumnBatch: made now)."""
    if piece.__class__ is list:
        return piece
    # Only acyclic objects are made: the collector need not run a pass per 700 of them.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return piece.events()
    finally:
        if collecting:
            gc.enable()


def iter_batch_range(path, start: int, stop: int, key_attr: str | None = None,
                     ts_unit: str = "s"):
    """``iter_batch_runs`` of the lines in bytes ``start`` to ``stop - 1`` of a CSV or JSON
    Lines file, read in bulk (both at line starts; a CSV range after the first line is read
    under the file's header line). A bad row raises (line numbers count from the range).
    ``raycep local --workers`` reads its time slices so (cep.io.slices)."""
    import raycep.cep.io.columns  # noqa: F401  (numpy, pyarrow: read in bulk)
    path = os.fspath(path)
    reader = csv_chunks if os.path.splitext(path)[1].lower() == ".csv" else jsonl_chunks
    try:
        handle = _Range(path, start, stop, header=reader is csv_chunks and start > 0)
    except OSError as exc:
        raise file_error(path, f"cannot open events file: {exc.strerror or exc}") from None
    return _pieces(_runs(path, reader, key_attr, None, check_format(ts_unit), handle))


class _Range:
    """Bytes ``start`` to ``stop - 1`` of a file as a handle to read (after its first line,
    with ``header``)."""

    def __init__(self, path: str, start: int, stop: int, header: bool):
        self._file = open(path, "rb")
        self._head = self._file.readline() if header else b""
        self._file.seek(start)
        self._left = stop - start

    def read(self, size: int) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        data = self._file.read(min(size, self._left))
        self._left -= len(data)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def _runs(path: str, reader, key_attr, on_error, ts_unit, handle=None):
    """Per chunk of the file (or of ``handle``), the rows between two bad rows as a list of
    pieces (ColumnBatch or list of Events, see iter_batch_runs), the bad rows reported in
    line order."""
    unit = "row" if reader is parquet_chunks else "line"
    try:
        handle = handle or open(path, "rb")
    except OSError as exc:
        raise file_error(path, f"cannot open events file: {exc.strerror or exc}") from None
    with handle:
        chunks = reader(path, handle, key_attr, ts_unit)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except OSError as exc:
                raise file_error(path, f"read failed: {exc}") from None
            pieces, lines, problems = chunk
            pieces = [piece for piece in pieces if len(piece)]
            if not problems:
                if pieces:
                    yield pieces
                continue
            start = 0
            for line, err in problems:
                stop = bisect.bisect_left(lines, line)
                if stop > start:
                    yield _cut(pieces, start, stop)
                start = stop
                located = _located(path, line, err, unit)
                if on_error is None:
                    raise located
                on_error(located)
            total = sum(map(len, pieces))
            if start < total:
                yield _cut(pieces, start, total)


def _cut(pieces: list, start: int, stop: int) -> list:
    """Rows ``start`` to ``stop - 1`` of the pieces taken one after the other."""
    out = []
    offset = 0
    for piece in pieces:
        size = len(piece)
        a, b = max(start - offset, 0), min(stop - offset, size)
        if a < b:
            if a == 0 and b == size:
                out.append(piece)
            else:
                out.append(piece[a:b] if piece.__class__ is list else piece.slice(a, b))
        offset += size
    return out


def _located(path: str, line: int, err: IngestError, unit: str = "line") -> IngestError:
    """Re-issue a row error with the file and line (Parquet: row) number."""
    located = IngestError(f"{err.reason} (file {path}, {unit} {line})", field=err.field)
    located.row, located.path = line, path            # named once, in the file's terms
    return located


__all__ = ["read_events", "iter_events", "iter_event_runs", "iter_batch_runs",
           "SUPPORTED_EXTENSIONS"]
