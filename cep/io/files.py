"""What the readers of an events file share (cep.io.sources): the columns every file has, the
size up to which a file is read row by row, the blocks of whole lines a CSV or JSON Lines file
is read in, and the error that names the file.

Files are read in blocks of about ``BLOCK_SIZE`` bytes (Parquet: record batches), so memory
stays bounded and the first events come out before the file is read to its end. A CSV or JSON
Lines file of at most ``ROW_READ_BYTES`` is read without pyarrow, row by row (csv module or
orjson, then ``parse_cell`` and ``make_event`` per row, the rules the columns follow): for a
small file, importing numpy and pyarrow would cost more time and memory (~0.2 s, ~50 MB) than
reading in bulk saves. Both ways give the same events, ids and errors.
"""
from __future__ import annotations

import os

from raycep.cep.errors import IngestError

#: the columns every events file has
REQUIRED_COLUMNS = ("type", "ts")

#: bytes read at a time (whole lines; a longer line is read whole)
BLOCK_SIZE = 1 << 20
#: CSV and JSON Lines files up to this size are read row by row (no numpy, no pyarrow)
ROW_READ_BYTES = 512 * 1024
_BOM = b"\xef\xbb\xbf"


def by_rows(size: int) -> bool:
    """Whether a CSV or JSON Lines file of ``size`` bytes is read row by row (ROW_READ_BYTES)."""
    return size <= ROW_READ_BYTES


def small(handle) -> bool:
    """Whether the file of ``handle`` is read row by row (by_rows; a handle that is no file,
    such as a range of one, is not)."""
    try:
        return by_rows(os.fstat(handle.fileno()).st_size)
    except (OSError, AttributeError, ValueError):
        return False


def line_blocks(path: str, handle):
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
            raise file_error(path, f"not UTF-8 text at line {bad_line}: {exc.reason}") \
                from None
        yield data, line
        line += _count_lines(data)


def _count_lines(data: bytes) -> int:
    """Line ends in ``data`` as text mode counts them: LF, CRLF and a lone CR."""
    count = data.count(b"\n")
    if b"\r" in data:
        count += data.count(b"\r") - data.count(b"\r\n")
    return count


def file_error(path: str, message: str, row: int | None = None,
               field: str | None = None) -> IngestError:
    err = IngestError(f"{message} (file {path})", row, field)
    err.path = path
    return err


__all__ = ["BLOCK_SIZE", "REQUIRED_COLUMNS", "ROW_READ_BYTES", "by_rows", "file_error",
           "line_blocks", "small"]
