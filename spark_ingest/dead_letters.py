"""Dead letters of the Spark job: where a row that could not become an event came from.

A dead letter is one JSON line ``{"reason", "row", "file", "line", "record"}``: ``file`` the
input file (a local path, or the URI Spark names), ``record`` the row's 1-based position
among the records Spark read from that file, ``line`` its line in the file. Spark gives
neither line nor position, so ``Locator`` counts the rows of each file as a task reads them
and, only for a file that has a dead row, reads the file again to find the line of that
record. Parquet has no lines: there the record (row position) is what names the row.
"""
from __future__ import annotations

import bisect
import csv
import json
import os
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow.compute as pc


class Locator:
    """Where the rows of one Spark partition come from: ``file`` (from ``input_file_name``)
    and ``record``, the row's 1-based position among the records Spark read from that file
    (counted over the partition, so valid when a file is read by one task from its start:
    a CSV file always is, ``multiLine``), and the ``line`` of that record in the file: the
    file is read again, only when one of its rows is dead, with the rules by which Spark
    splits it into records (CSV: Python's csv module, quoted cells may span lines, the line
    of a record is its last; JSON lines: every line with more than blanks)."""

    def __init__(self, fmt: str | None = None):
        self.fmt = fmt                       # csv, json, parquet; None: from the extension
        self.seen: dict = {}                 # (file, block) -> records before this batch
        self.index: dict = {}                # file -> (starts, lines) or None
        self.files = self.blocks = self.ranks = None

    def start(self, files, blocks=None):
        """Begin a batch: its ``files`` column (and the split offsets, ``blocks``)."""
        if self.files is not None:
            for key, count in zip(*self._keys()[1:]):
                self.seen[key] = self.seen.get(key, 0) + int(count)
        self.files, self.blocks, self.ranks = files, blocks, None

    def _keys(self) -> tuple:
        """Per row its (file, block) code, the distinct keys and their counts."""
        files = pc.dictionary_encode(self.files)
        codes = files.indices.fill_null(0).to_numpy().astype(np.int64)
        names = files.dictionary.to_pylist() or [None]
        if self.blocks is not None:
            blocks = pc.dictionary_encode(self.blocks)
            starts = blocks.dictionary.to_pylist() or [0]
            codes = codes * len(starts) + blocks.indices.fill_null(0).to_numpy()
        else:
            starts = [0]
        found, counts = np.unique(codes, return_counts=True)
        keys = [(names[c // len(starts)], starts[c % len(starts)]) for c in found.tolist()]
        return codes, keys, counts

    def __call__(self, i: int) -> tuple:
        if self.files is None:
            return None, None, None
        if self.ranks is None:                   # once per batch with a dead row
            codes, keys, _ = self._keys()
            order = np.argsort(codes, kind="stable")
            ranks = np.empty(len(codes), dtype=np.int64)
            sorted_codes = codes[order]
            first = np.searchsorted(sorted_codes, sorted_codes, side="left")
            ranks[order] = np.arange(len(codes)) - first + 1
            where = np.searchsorted(np.unique(codes), codes)
            self.ranks = (ranks, where, keys)
        ranks, where, keys = self.ranks
        uri, block = keys[int(where[i])]
        record = self.seen.get((uri, block), 0) + int(ranks[i])
        path = local_path(uri)
        line = self._line(path, block or 0, record) if path else None
        return (path or uri), line, (record if not block else None)

    def _line(self, path: str, block: int, record: int):
        fmt = self.fmt or _FORMATS.get(os.path.splitext(path)[1].lower())
        if fmt not in ("csv", "json"):
            return None                          # Parquet: the record is the row position
        if path not in self.index:
            try:
                self.index[path] = _record_lines(path, fmt)
            except (OSError, UnicodeDecodeError, csv.Error):
                self.index[path] = None
        found = self.index[path]
        if found is None:
            return None
        starts, lines = found
        first = 0 if block == 0 else bisect.bisect_right(starts, block)
        k = first + record - 1
        return lines[k] if 0 <= k < len(lines) else None


_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


def local_path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (input_file_name), None for other schemes."""
    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return None


def _record_lines(path: str, fmt: str) -> tuple:
    """``(start offsets, line numbers)`` of the data records of a file as Spark splits it
    (start offsets only for JSON lines, where a large file may be read in several splits)."""
    if fmt == "csv":
        lines = []
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = True
            for cells in reader:
                if not cells:
                    continue                     # an empty line: Spark skips it too
                if header:
                    header = False
                    continue
                lines.append(reader.line_num)
        return [], lines
    starts, lines = [], []
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                starts.append(offset)
                lines.append(number)
            offset += len(raw)
    return starts, lines


def dead_record(reason: str, row, i: int, locate) -> str:
    path, line, record = locate(i) if locate else (None, None, None)
    return json.dumps({"reason": reason, "row": row, "file": path, "line": line,
                       "record": record}, sort_keys=True, default=str)
