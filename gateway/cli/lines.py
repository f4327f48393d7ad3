"""What ``raycep local`` writes, in one process and in each time slice (gateway.cli.slices):
``evaluate`` feeds an engine and writes the lines of what it finds, ``open_output`` opens
``--out`` (standard output when none is given)."""
from __future__ import annotations

import json
import os
import sys

from raycep.cep.io.output import MatchLines
from raycep.gateway.cli.common import UsageError
from raycep.local.run import CHUNK_EVENTS, evaluate as evaluate_runs

__all__ = ["evaluate", "open_output"]


def evaluate(engine, runs, lines: MatchLines, write, late_out, progress=None,
             keep=None, gather: bool = False) -> tuple:
    """Feed the pieces of ``runs`` (as iter_batch_runs gives them) through ``engine`` in
    chunks (``local.run.evaluate``, this module's CHUNK_EVENTS), writing the lines of what
    it finds (``keep``: the part of it to write; ``gather``: ``write`` takes
    cep.io.output.Fragments too) and late events to ``late_out``; ``(events, the IngestError it
    stopped at or None)``. The matches found before a bad row are written."""
    def take(found) -> int:
        if keep is not None:
            found = keep(found)
        before = lines.written
        for piece in lines.pieces(found, gather) if found else ():
            write(piece)
        return lines.written - before

    def end(found) -> None:
        write(lines.lines(keep(found) if keep is not None else found))

    def late(events) -> None:
        for event in events:
            late_out.write(json.dumps(event.to_dict(), default=str) + "\n")

    tick = (lambda n: progress.tick(n, lines.counts)) if progress is not None else None
    return evaluate_runs(engine, runs, take, end=end, late=late if late_out is not None
                         else None, tick=tick, sizes=CHUNK_EVENTS)


class _StdoutBytes:
    """Writes bytes to standard output (``sys.stdout.buffer``, or the text stream when it has
    none, e.g. under a test's capture)."""

    def write(self, data) -> None:
        """``data``: bytes or another bytes-like object (the writer's memoryview pieces)."""
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            sys.stdout.write(str(data, "utf-8"))
        else:
            buffer.write(data)

    def flush(self) -> None:
        buffer = getattr(sys.stdout, "buffer", None)
        (buffer or sys.stdout).flush()


def open_output(path, binary: bool = False):
    """(stream, must_close) for --out, creating parent directories; stdout when None.
    ``binary``: a bytes stream (stdout's buffer, flushed when the caller closes nothing)."""
    if path is None:
        if binary:
            sys.stdout.flush()
            return _StdoutBytes(), False
        return sys.stdout, False
    parent = os.path.dirname(path)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        return open(path, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})), True
    except OSError as exc:
        raise UsageError(f"error: cannot write {path}: {exc.strerror or exc}") from None
