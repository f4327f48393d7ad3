"""Events of a CSV file, a block of lines at a time (cep.io.sources).

The header names the columns; ``type`` and ``ts`` are required, ``id`` and ``key`` are
optional, every other column is an attribute. Cells are typed from their text: integers
(``42``), floats (``4.2``, ``1e3``), ``true``/``false`` (any case) as booleans, anything else
a string; an empty cell means the attribute is absent. ``id`` cells stay strings. The typing
is per cell, so one column may hold ints, floats and strings.

A block whose lines hold no quote character is split by pyarrow's CSV parser with quoting off
(by numpy, which reports it, when a line has the wrong width or may be blank) and typed per
column (``cep.io.columns``); from a quote on, Python's csv module splits the records (quoted
cells may span lines) until a block ends on a record boundary. A small file (``small``) is read
row by row: ``parse_cell`` and ``make_event`` per row, or a simple block typed column by column
in Python (``cep.io.csv_columns``) when the caller asks for column batches.
"""
from __future__ import annotations

import csv
import io
from itertools import repeat

from raycep.cep.errors import IngestError
from raycep.cep.event import make_event
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.files import REQUIRED_COLUMNS, file_error, line_blocks, small
from raycep.cep.io.timestamps import event_time

_BLANK = object()
#: bytes that are never part of a blank CSV line (ASCII, not whitespace, not a comma): a
#: table of 256 booleans, read with numpy.frombuffer
_SOLID = bytes(1 if (33 <= b < 128 and b != ord(",")) or 1 <= b <= 8 or 14 <= b <= 27 else 0
               for b in range(256))


def csv_chunks(path: str, handle, key_attr, ts_unit, typed=None):
    """``([ColumnBatch] or [events], their line numbers, [(line, IngestError)])`` per block
    of a CSV file; ``typed``: ``cep.io.csv_columns.csv_block_batch``, to type a simple block of
    a file read row by row column by column where it can."""
    by_rows = small(handle)
    blocks = line_blocks(path, handle)
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
        raise file_error(path, "empty CSV file: expected a header row with columns "
                               "'type' and 'ts'", row=1)


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
        raise file_error(path, f"CSV header lacks required column(s) "
                               f"{', '.join(repr(m) for m in missing)} (header: "
                               f"{', '.join(header)})", row=1, field=missing[0])
    for position, name in enumerate(header):
        if not name:
            raise file_error(path, f"CSV header column {position + 1} has no name", row=1)
        if header.index(name) != position:
            raise file_error(path, f"CSV header names column {name!r} twice", row=1,
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
            raise file_error(path, "empty CSV file: expected a header row with columns "
                                   "'type' and 'ts'", row=1) from None
        except csv.Error as exc:
            raise file_error(path, f"malformed CSV header: {exc}", row=1) from None
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


__all__ = ["csv_chunks"]
