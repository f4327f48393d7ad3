"""Read events from files: CSV (header row), JSON Lines and Parquet.

CSV: the header names the columns; ``type`` and ``ts`` are required, ``id`` and ``key`` are
optional, every other column is an attribute. Cells are typed from their text: integers
(``42``), floats (``4.2``, ``1e3``), ``true``/``false`` (any case) as booleans, anything else
a string; an empty cell means the attribute is absent. ``id`` cells stay strings. The typing
is per cell, so one column may hold ints, floats and strings.

JSON Lines: one JSON object per line with ``type``, ``ts``, optional ``id``/``key`` and the
attributes at top level or under ``attrs``; blank lines are ignored.

Parquet: columns typed by their Parquet types (text columns are typed per cell like CSV
cells, as the Spark ingest job types them; a timestamp is read as epoch seconds, a date or
time as ISO text, a decimal as a float); null = absent.

``id`` is the event id. ``key`` is the partition key, unless ``key_attr`` names another
attribute: then it is an ordinary attribute, so a user's column called ``key`` is never lost
(see ``cep.event.make_event``, which also rejects non-finite numbers and non-scalar keys).

Errors are IngestError with ``row`` = the 1-based line number in the file (the CSV header is
line 1; for Parquet the 1-based row number), ``field`` = the offending field, and the file
named in the message (also in the error's ``path`` attribute).

Files are read in blocks of about ``BLOCK_SIZE`` bytes (Parquet: record batches), so memory
stays bounded and the first events come out before the file is read to its end. A CSV block
whose lines hold no quote character is split by pyarrow's CSV parser with quoting off (by
numpy, which reports it, when a line has the wrong width or may be blank) and typed per
column (``raycep.cep.io.columns``); from a quote on, Python's csv module splits the records (quoted
cells may span lines) until a block ends on a record boundary. JSON lines are parsed with orjson; a line
orjson refuses or might read differently (NaN, integers beyond 64 bits, deep nesting) is
parsed by the standard json module, so every line reads as it always did. ``iter_batch_runs``
hands out what is read in bulk as ``cep.store.batch.ColumnBatch`` (an Event made per row only when
asked for), ``iter_event_runs`` as Events.

A CSV or JSON Lines file of at most ``ROW_READ_BYTES`` is read without pyarrow, row by row
(csv module or orjson, then ``parse_cell`` and ``make_event`` per row, the rules the columns
follow): for a small file, importing numpy and pyarrow would cost more time and memory
(~0.2 s, ~50 MB) than reading in bulk saves. Both ways give the same events, ids and errors. From
``ROW_BATCH_BYTES`` on, ``iter_batch_runs`` hands out such a file as column batches (numpy,
no pyarrow), which ``raycep local`` evaluates in bulk: a CSV block without quotes typed
column by column (``cep.io.csv_columns``, no Event per row), anything else as the Events read
row by row.
"""
from __future__ import annotations

import bisect
import csv
import gc
import io
import json
import os
from functools import partial
from itertools import chain, repeat
from operator import itemgetter

from raycep.cep.errors import IngestError
from raycep.cep.event import make_event
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.timestamps import check_format, event_time

#: file extensions read_events understands
SUPPORTED_EXTENSIONS = (".csv", ".jsonl", ".ndjson", ".parquet")

REQUIRED_COLUMNS = ("type", "ts")

#: bytes read at a time (whole lines; a longer line is read whole)
BLOCK_SIZE = 1 << 20
#: JSON lines with the same fields in a row from which events are built from columns
JSON_RUN = 32
#: Parquet rows per record batch
PARQUET_BATCH_ROWS = 65_536
#: CSV and JSON Lines files up to this size are read row by row (no numpy, no pyarrow)
ROW_READ_BYTES = 512 * 1024
#: such a file larger than this comes from iter_batch_runs as column batches of its Events
#: (numpy, no pyarrow: cep.store.batch), which raycep local evaluates in bulk (cep.evaluation.bulk)
ROW_BATCH_BYTES = 64 * 1024

#: a run of digits orjson may read differently from json (integers beyond 64 bits): found
#: as 20 zeros once every digit is made a zero
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 20
#: orjson reads an integer below -2**63 as a float (one above 2**64 - 1 needs 20 digits):
#: lines with such a run are read by json, whose int make_event refuses as the rows' reader
_NEGATIVE_RUN = b"-" + b"0" * 19
#: more brackets than this in a line: json decides (it refuses deep nesting, orjson does not)
_DEEP = 200
_BLANK = object()
_BOM = b"\xef\xbb\xbf"
#: bytes that are never part of a blank CSV line (ASCII, not whitespace, not a comma): a
#: table of 256 booleans, read with numpy.frombuffer
_SOLID = bytes(1 if (33 <= b < 128 and b != ord(",")) or 1 <= b <= 8 or 14 <= b <= 27 else 0
               for b in range(256))


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
        reader = _csv_chunks
    elif ext in (".jsonl", ".ndjson"):
        reader = _jsonl_chunks
    elif ext == ".parquet":
        reader = _parquet_chunks
    else:
        raise _file_error(path, f"unsupported file extension {ext or '(none)'!r}; supported: "
                                f"{', '.join(SUPPORTED_EXTENSIONS)}")
    if not os.path.exists(path):
        raise _file_error(path, "events file not found")
    if os.path.isdir(path):
        raise _file_error(path, "events path is a directory, not a file")
    size = os.path.getsize(path)
    ts_unit = check_format(ts_unit)
    if reader is _parquet_chunks or size > ROW_READ_BYTES:
        import raycep.cep.io.columns  # noqa: F401  (numpy, pyarrow: read in bulk)
    elif batches and size > ROW_BATCH_BYTES:
        from raycep.cep.store.batch import ColumnBatch       # numpy
        if reader is _csv_chunks:               # simple blocks typed column by column
            from raycep.cep.io.csv_columns import csv_block_batch
            reader = partial(_csv_chunks, typed=csv_block_batch)
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
    reader = _csv_chunks if os.path.splitext(path)[1].lower() == ".csv" else _jsonl_chunks
    try:
        handle = _Range(path, start, stop, header=reader is _csv_chunks and start > 0)
    except OSError as exc:
        raise _file_error(path, f"cannot open events file: {exc.strerror or exc}") from None
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
    unit = "row" if reader is _parquet_chunks else "line"
    try:
        handle = handle or open(path, "rb")
    except OSError as exc:
        raise _file_error(path, f"cannot open events file: {exc.strerror or exc}") from None
    with handle:
        chunks = reader(path, handle, key_attr, ts_unit)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except OSError as exc:
                raise _file_error(path, f"read failed: {exc}") from None
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


# --------------------------------------------------------------------------- blocks of lines

def _blocks(path: str, handle):
    """``(bytes, number of the first line)`` of whole lines (the last one may lack its
    newline), a UTF-8 BOM at the start dropped; non-UTF-8 text raises a file error after the
    lines before it were given."""
    line = 1
    carry = b""
    start = True
    while True:
        block = handle.read(BLOCK_SIZE)
        if block:
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            if cut == 0:                                   # no line end yet: read on
                carry = data
                continue
            data, carry = data[:cut], data[cut:]
        elif carry:
            data, carry = carry, b""
        else:
            return
        if start:
            start = False
            if data.startswith(_BOM):
                data = data[len(_BOM):]
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            good = data.rfind(b"\n", 0, exc.start) + 1
            bad_line = line + _count_lines(data[:good])
            if good:
                yield data[:good], line
            raise _file_error(path, f"not UTF-8 text at line {bad_line}: {exc.reason}") \
                from None
        yield data, line
        line += _count_lines(data)


def _count_lines(data: bytes) -> int:
    """Line ends in ``data`` as text mode counts them: LF, CRLF and a lone CR."""
    count = data.count(b"\n")
    if b"\r" in data:
        count += data.count(b"\r") - data.count(b"\r\n")
    return count


# --------------------------------------------------------------------------- CSV

def _csv_chunks(path: str, handle, key_attr, ts_unit, typed=None):
    """``([ColumnBatch] or [events], their line numbers, [(line, IngestError)])`` per block
    of a CSV file; ``typed``: ``cep.io.csv_columns.csv_block_batch``, to type a simple block of
    a file read row by row column by column where it can."""
    by_rows = _small(handle)
    blocks = _blocks(path, handle)
    header = None
    pending = None                       # (bytes, first line) not yet split into records
    while True:
        if pending is None:
            pending = next(blocks, None)
            if pending is None:
                break
        data, first = pending
        pending = None
        if header is None:
            end = data.find(b"\n") + 1 or len(data)
            head = data[:end]
            if b'"' in head or b"\x00" in head or b"\r" in head.rstrip(b"\r\n") \
                    or head.endswith(b"\r") or len(head) > csv.field_size_limit():
                records = _QuotedRecords(data, first, blocks)
                header = records.header(path)
            else:
                header = _check_header(path, head.decode("utf-8").rstrip("\r\n").split(","))
                data, first = data[end:], first + 1
                records = None
                if not data:
                    continue
        else:
            records = None
        if by_rows:
            if records is None and _simple(data):
                got = typed and typed(header, _lf_text(data), first, key_attr, ts_unit)
                if got:
                    yield [got[0]], got[1], []
                    continue
                split = _simple_records(data, len(header), first)
            else:
                if records is None:
                    records = _QuotedRecords(data, first, blocks)
                split = records.records(len(header))
                pending = records.rest
            events, lines, problems = _row_events(header, *split, key_attr, ts_unit)
            yield [events], lines, problems
            continue
        if records is None and _simple(data):
            cells, lines, problems = _split_simple(data, len(header), first)
        else:
            if records is None:
                records = _QuotedRecords(data, first, blocks)
            cells, lines, problems = records.split(len(header))
            pending = records.rest
        yield _column_events(header, cells, lines, problems, key_attr, ts_unit)
    if header is None:
        raise _file_error(path, "empty CSV file: expected a header row with columns "
                                "'type' and 'ts'", row=1)


def _small(handle) -> bool:
    """Whether the file is small enough to be read row by row (see ROW_READ_BYTES)."""
    try:
        return os.fstat(handle.fileno()).st_size <= ROW_READ_BYTES
    except (OSError, AttributeError, ValueError):
        return False


def _column_events(header: list, cells: list, lines, problems: list, key_attr, ts_unit) -> tuple:
    """``([ColumnBatch], line numbers, problems)`` of CSV records given as columns of text."""
    import numpy as np
    import pyarrow as pa
    from raycep.cep.io.columns import build_columns, convert_times, typed_table
    table, wrong = convert_times(pa.Table.from_arrays(cells, names=header), ts_unit, lines)
    batch, bad = build_columns(typed_table(table, empty_absent=True), key_attr, rows=lines)
    bad = [(p, wrong.get(p, err)) for p, err in bad]
    if bad:
        problems = sorted(problems + [(int(lines[p]), err) for p, err in bad],
                          key=lambda item: item[0])
        lines = np.delete(lines, [p for p, _ in bad])
    return [batch], lines, problems


def _row_events(header: list, records: list, lines: list, problems: list, key_attr,
                ts_unit) -> tuple:
    """``(events, line numbers, problems)`` of CSV records typed cell by cell: an empty cell
    is absent, ``type``/``ts``/``id`` are stripped text, other cells go through parse_cell."""
    roles = [name in ("type", "ts", "id") for name in header]
    events, numbers = [], []
    typed: dict = {}                     # cell text -> parse_cell(text): repeated cells (keys,
    for cells, line in zip(records, lines):          # small numbers) are typed once
        row = {}
        for name, role, cell in zip(header, roles, cells):
            if cell != "":
                if role:
                    row[name] = cell.strip()
                else:
                    value = typed.get(cell, _BLANK)
                    if value is _BLANK:
                        value = typed[cell] = parse_cell(cell)
                    row[name] = value
        try:
            if ts_unit != "s" and "ts" in row:
                row["ts"] = event_time(row["ts"], ts_unit, line)
            events.append(make_event(row, line, key_attr))
            numbers.append(line)
        except IngestError as err:
            problems.append((line, err))
    problems.sort(key=lambda item: item[0])
    return events, numbers, problems


def _check_header(path: str, header: list) -> list:
    header = [name.strip() for name in header]
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise _file_error(path, f"CSV header lacks required column(s) "
                                f"{', '.join(repr(m) for m in missing)} (header: "
                                f"{', '.join(header)})", row=1, field=missing[0])
    for position, name in enumerate(header):
        if not name:
            raise _file_error(path, f"CSV header column {position + 1} has no name", row=1)
        if header.index(name) != position:
            raise _file_error(path, f"CSV header names column {name!r} twice", row=1,
                              field=name)
    return header


def _simple(data: bytes) -> bool:
    """Lines Python's csv module splits at every comma: no quote, no NUL, no carriage
    return but in CRLF, no line longer than the csv field size limit."""
    if b'"' in data or b"\x00" in data:
        return False
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return False
    limit = csv.field_size_limit()
    if len(data) <= limit:
        return True
    import numpy as np
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    return bool(np.diff(ends, prepend=-1).max(initial=0) <= limit) and \
        len(data) - (ends[-1] + 1 if ends.size else 0) <= limit


def _simple_records(data: bytes, width: int, first: int) -> tuple:
    """``_QuotedRecords.records`` of a block of whole lines that Python's csv module splits
    at every comma (_simple): records, their line numbers and errors, each line split with
    ``str.split`` (blank lines skipped)."""
    text = _lf_text(data)
    records, lines, problems = [], [], []
    for k, cells in enumerate(map(str.split, text.split("\n"), repeat(","))):
        if not (cells[0].strip() or any(map(str.strip, cells))):
            continue                                     # blank line
        if len(cells) != width:
            problems.append((first + k, IngestError(
                f"row has {len(cells)} cells, the header has {width}", first + k)))
            continue
        records.append(cells)
        lines.append(first + k)
    return records, lines, problems


def _lf_text(data: bytes) -> str:
    """A simple block (_simple) as text, its CRLF line ends made LF."""
    text = data.decode("utf-8")
    return text.replace("\r\n", "\n") if "\r" in text else text


def _split_simple(data: bytes, width: int, first: int) -> tuple:
    """Cells (one pyarrow string array per column), line numbers and errors of the records
    of ``data`` (whole lines, see _simple): each line is one record, split at its commas."""
    import numpy as np
    import pyarrow as pa
    from raycep.cep.store.arrow import arrow_array
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if not data.endswith(b"\n"):
        data += b"\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    newline = buf == 10
    ends = np.flatnonzero(newline)
    count = len(ends)
    starts = np.concatenate(([0], ends[:-1] + 1))
    maybe_blank = ~np.frombuffer(_SOLID, dtype=bool)[buf[starts]]   # starts with a space, comma..
    if not maybe_blank.any():
        columns = _arrow_split(data, width)
        if columns is not None:
            return columns, np.arange(first, first + count, dtype=np.int64), []
    comma = buf == 44
    commas = np.searchsorted(np.flatnonzero(comma), ends)   # commas before each line end
    per_line = np.diff(commas, prepend=0)            # commas in each line
    good = per_line == width - 1
    problems = []
    if maybe_blank.any() or not good.all():
        for i in np.flatnonzero(maybe_blank | ~good).tolist():
            text = data[starts[i]:ends[i]].decode("utf-8")
            cells = text.split(",")
            if not any(cell.strip() for cell in cells):
                good[i] = False                          # a blank line
            elif not good[i]:
                problems.append((first + i, IngestError(
                    f"row has {len(cells)} cells, the header has {width}", first + i)))
    separator = newline | comma
    seps = np.flatnonzero(separator)
    lengths = np.diff(seps, prepend=-1) - 1
    offsets = np.zeros(len(seps) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    cells = pa.Array.from_buffers(pa.string(), len(seps),
                                  [None, pa.py_buffer(offsets), pa.py_buffer(buf[~separator])])
    first_cell = np.arange(count, dtype=np.int64) + commas - per_line
    rows = np.flatnonzero(good)
    columns = [cells.take(arrow_array(first_cell[rows] + j)) for j in range(width)]
    return columns, rows + first, problems


def _arrow_split(data: bytes, width: int):
    """The cells of a simple block (_simple, LF line ends, no line that may be blank) as one
    pyarrow string array per column, split by pyarrow's CSV parser with quoting off (~3x
    faster than _split_simple's numpy); None when a line has not ``width`` cells (then
    _split_simple finds and reports it)."""
    import pyarrow as pa
    from pyarrow import csv as arrow_csv
    names = [str(j) for j in range(width)]
    try:
        table = arrow_csv.read_csv(
            pa.py_buffer(data),
            read_options=arrow_csv.ReadOptions(column_names=names, use_threads=False,
                                               block_size=max(len(data) + 1, 1 << 16)),
            parse_options=arrow_csv.ParseOptions(quote_char=False, double_quote=False,
                                                 escape_char=False, newlines_in_values=False,
                                                 ignore_empty_lines=False),
            convert_options=arrow_csv.ConvertOptions(
                column_types={name: pa.string() for name in names}, strings_can_be_null=False,
                quoted_strings_can_be_null=False, check_utf8=False))
    except pa.ArrowInvalid:
        return None
    return [column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            for column in table.columns]


class _QuotedRecords:
    """Records split by Python's csv module (quoted cells may span lines and blocks), from a
    block on until a record ends where a block ends; ``rest`` is then the next block, not yet
    read, to split the fast way again."""

    def __init__(self, data: bytes, first: int, blocks):
        self.base = first - 1                            # line number before the first line
        self.blocks = blocks
        self.lines = iter(io.StringIO(data.decode("utf-8"), newline=""))
        self.peeked = None
        self.read = 0                                    # lines given to the csv reader
        self.reader = csv.reader(self)
        self.rest = None

    def __iter__(self):
        return self

    def __next__(self) -> str:
        while True:
            line, self.peeked = self.peeked, None
            if line is None:
                line = next(self.lines, None)
            if line is not None:
                self.read += 1
                return line
            block = next(self.blocks, None)              # a record goes on in the next block
            if block is None:
                raise StopIteration
            self.lines = iter(io.StringIO(block[0].decode("utf-8"), newline=""))

    def _at_block_end(self) -> bool:
        if self.peeked is None:
            self.peeked = next(self.lines, None)
        return self.peeked is None

    def header(self, path: str) -> list:
        try:
            header = next(self.reader)
        except StopIteration:
            raise _file_error(path, "empty CSV file: expected a header row with columns "
                                    "'type' and 'ts'", row=1) from None
        except csv.Error as exc:
            raise _file_error(path, f"malformed CSV header: {exc}", row=1) from None
        return _check_header(path, header)

    def split(self, width: int) -> tuple:
        """Cells (one pyarrow string array per column), line numbers and errors of the
        records up to the next block boundary that ends a record."""
        import numpy as np
        import pyarrow as pa
        from raycep.cep.store.arrow import arrow_array
        records, lines, problems = self.records(width)
        columns = [arrow_array(list(column), pa.string()) for column in zip(*records)] \
            if records else [arrow_array([], pa.string()) for _ in range(width)]
        return columns, np.asarray(lines, dtype=np.int64), problems

    def records(self, width: int) -> tuple:
        """Records (lists of cells), their line numbers and the errors of the lines up to
        the next block boundary that ends a record (blank lines skipped)."""
        records, lines, problems = [], [], []
        while not self._at_block_end():
            try:
                cells = next(self.reader)
            except StopIteration:
                break
            except csv.Error as exc:
                line = self.base + self.read
                problems.append((line, IngestError(f"malformed CSV: {exc}", line)))
                continue
            line = self.base + self.read
            if not any(cell.strip() for cell in cells):
                continue                                 # blank line
            if len(cells) != width:
                problems.append((line, IngestError(
                    f"row has {len(cells)} cells, the header has {width}", line)))
                continue
            records.append(cells)
            lines.append(line)
        self.rest = next(self.blocks, None)
        return records, lines, problems


# --------------------------------------------------------------------------- JSON Lines

def _jsonl_chunks(path: str, handle, key_attr, ts_unit):
    """``(pieces, their line numbers, [(line, IngestError)])`` per block of a JSONL file: a
    ColumnBatch per run read as columns, a list of Events per stretch read row by row."""
    import orjson
    loads = orjson.loads
    run = None if _small(handle) else JSON_RUN          # rows of a small file: no columns
    for data, first in _blocks(path, handle):
        # lines end at LF, CRLF and a lone CR, as in text mode; each keeps its end (json's
        # error messages count it in their column numbers)
        lines = data.splitlines(keepends=True)
        digits = data.translate(_DIGITS_AS_ZERO)
        careful = _LONG_RUN in digits or _NEGATIVE_RUN in digits
        rows, numbers, problems = [], [], []
        for number, line in enumerate(lines, start=first):
            if (careful and _long_number(line.translate(_DIGITS_AS_ZERO))) or \
                    (len(line) > _DEEP and line.count(b"[") + line.count(b"{") > _DEEP):
                row = _json_row(line, number)
            else:
                try:
                    row = loads(line)
                except orjson.JSONDecodeError:
                    row = _json_row(line, number)
            if row is _BLANK:
                continue
            if row.__class__ is dict:
                rows.append(row)
                numbers.append(number)
            elif isinstance(row, IngestError):
                problems.append((number, row))
            else:
                problems.append((number, IngestError(
                    f"expected a JSON object, got {_json_kind(row)}", number)))
        pieces, lines_of_events = [], []
        for start, stop in _shapes(rows):
            _json_events(rows[start:stop], numbers[start:stop], key_attr, ts_unit, pieces,
                         lines_of_events, problems, run)
        problems.sort(key=lambda item: item[0])
        yield pieces, lines_of_events, problems


def _long_number(digits: bytes) -> bool:
    """Whether a line (digits as 0) has a number orjson would not read exactly."""
    return _LONG_RUN in digits or _NEGATIVE_RUN in digits


def _shapes(rows: list):
    """``(start, stop)`` of the runs of rows with the same fields in the same order."""
    start = 0
    fields = None
    for i, row in enumerate(rows):
        shape = tuple(row)
        if shape != fields:
            if i > start:
                yield start, i
            start, fields = i, shape
    if rows:
        yield start, len(rows)


def _json_events(rows, numbers, key_attr, ts_unit, pieces, lines, problems, run) -> None:
    """The events of a run of JSON objects with the same fields, added to ``pieces``: a
    ColumnBatch when the run is ``run`` rows or longer (raycep.cep.io.columns), else (or if ``run``
    is None) Events made row by row with make_event, added to the list ``pieces`` ends with."""
    if run is not None and len(rows) >= run:
        table = _json_table(rows)
        if table is not None:
            from raycep.cep.io.columns import build_columns, convert_times
            table, wrong = convert_times(table, ts_unit, numbers)
            batch, bad = build_columns(table, key_attr, rows=numbers)
            bad = [(p, wrong.get(p, err)) for p, err in bad]
            failed = {p for p, _ in bad}
            pieces.append(batch)
            lines.extend(n for p, n in enumerate(numbers) if p not in failed)
            problems.extend((numbers[p], err) for p, err in bad)
            return
    if not pieces or pieces[-1].__class__ is not list:
        pieces.append([])
    events = pieces[-1]
    for row, number in zip(rows, numbers):
        try:
            if ts_unit != "s" and row.get("ts") is not None:
                row["ts"] = event_time(row["ts"], ts_unit, number)
            events.append(make_event(row, number, key_attr))
            lines.append(number)
        except IngestError as err:
            problems.append((number, err))


def _json_table(rows):
    """Columns of JSON objects that have the same fields (null is a value, not absent), or
    None if a value has no column form (text that is not UTF-8, nesting msgpack refuses)."""
    import pyarrow as pa
    from raycep.cep.io.columns import column_from_values
    names = list(rows[0])
    if not names:
        return None                                      # {}: a table needs a column
    arrays = []
    try:
        for name in names:
            values = list(map(itemgetter(name), rows))
            if name == "ts" and set(map(type, values)) <= {int, float}:
                try:
                    values = list(map(float, values))        # as make_event reads them
                except OverflowError:
                    pass
            # null is absent for type, ts and id (make_event reads both alike), a value
            # elsewhere (an attribute null; a null key is no key, a missing one an error)
            arrays.append(column_from_values(values, name, bigint=True,
                                             none_is_absent=name in ("type", "ts", "id")))
        return pa.Table.from_arrays(arrays, names=names)
    except (IngestError, ValueError, TypeError, pa.ArrowException):
        return None


def _json_row(line: bytes, number: int):
    """One line read by the json module: a value, _BLANK for a blank line, or IngestError."""
    text = line.decode("utf-8")
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return IngestError(f"invalid JSON: {exc.msg} at column {exc.colno}", number)
    except (ValueError, RecursionError) as exc:     # a number of 4,300+ digits, deep nesting
        return IngestError(f"invalid JSON: {str(exc).split(':')[0]}", number)


# --------------------------------------------------------------------------- Parquet

def _parquet_chunks(path: str, handle, key_attr, ts_unit):
    """``([ColumnBatch], their row numbers, [(row, IngestError)])`` per record batch of a
    Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from raycep.cep.io.columns import build_columns, convert_times, typed_table
    try:
        parquet = pq.ParquetFile(handle)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise _file_error(path, f"not a Parquet file: {str(exc).splitlines()[0]}") from None
    names = parquet.schema_arrow.names
    missing = [name for name in REQUIRED_COLUMNS if name not in names]
    if missing:
        raise _file_error(path, f"Parquet file lacks required column(s) "
                                f"{', '.join(repr(m) for m in missing)} (columns: "
                                f"{', '.join(names)})", field=missing[0])
    row = 1
    try:
        for record_batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            size = record_batch.num_rows
            table, wrong = convert_times(pa.Table.from_batches([record_batch]), ts_unit,
                                         first_row=row)
            batch, bad = build_columns(typed_table(table, empty_absent=False), key_attr,
                                       first_row=row)
            bad = [(p, wrong.get(p, err)) for p, err in bad]
            numbers = np.arange(row, row + size, dtype=np.int64)
            if bad:
                numbers = np.delete(numbers, [p for p, _ in bad])
            yield [batch], numbers, [(err.row, err) for _, err in bad]
            row += size
    except pa.ArrowException as exc:
        raise _file_error(path, f"Parquet read failed after row {row - 1}: "
                                f"{str(exc).splitlines()[0]}") from None


# --------------------------------------------------------------------------- errors

def _json_kind(value) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _file_error(path: str, message: str, row: int | None = None,
                field: str | None = None) -> IngestError:
    err = IngestError(f"{message} (file {path})", row, field)
    err.path = path
    return err


def _located(path: str, line: int, err: IngestError, unit: str = "line") -> IngestError:
    """Re-issue a row error with the file and line (Parquet: row) number."""
    located = IngestError(f"{err.reason} (file {path}, {unit} {line})", field=err.field)
    located.row, located.path = line, path            # named once, in the file's terms
    return located


__all__ = ["read_events", "iter_events", "iter_event_runs", "iter_batch_runs",
           "SUPPORTED_EXTENSIONS"]
