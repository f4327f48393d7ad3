"""Writing match lines in a background thread: the kernel's copy of each piece (~25 ms for
the 71 MB of matches of the W = 600 s peers workload, GIL released) overlaps the evaluation of
the next chunk on the second core. Pieces wait in a bounded queue, so a slow disk or pipe
holds the producer back instead of filling memory; a failed write (disk full, closed pipe) is
raised in the producer at its next write, flush or close, after which nothing more is taken.

A piece is bytes, or cep.io.output.Fragments: lines left as the fragments they are made of, joined
here and written WRITE_BYTES at a time. Joining them in the producer cost it ~18 ms of its ~90
on the W = 600 s workload; handing them to ``os.writev`` (the kernel gathers, ~430 calls of
1,024 fragments) made that run 0.065 s where a join per 8,192 lines here makes it 0.052 s
(benchmarks/PEERS_RESULTS.md).
"""
from __future__ import annotations

import queue
import threading

from raycep.cep.io.output import Fragments
from raycep.gateway.cli.common import UsageError

#: pieces waiting at most (raycep local: Fragments of up to 8,192 lines, cep.io.output: a
#: list of references to the chunk's cells, ~200 KB each). A chunk of 1,000 variant rules
#: gives ~14 pieces at once: with 8 the producer waited ~0.075 s of a 0.45 s run for the
#: writer; with 32 not at all (peak memory +1 MB)
QUEUE_PIECES = 32
#: bytes per write call at most. Writing the W = 600 s workload's 71 MB of matches 2.5 MB a
#: call took the kernel 0.013-0.16 s on this VM, 1 MiB a call 0.013 s every time (16 MB a
#: call: 0.13-0.16 s): a larger write seems to get the file's cache in 2 MiB blocks, which
#: come from memory the VM gave back to its host (benchmarks/PEERS_RESULTS.md)
WRITE_BYTES = 1 << 20
_STOP = object()


class BackgroundWriter:
    """A bytes stream whose ``write`` hands the data to a thread that writes it to
    ``stream`` in order; ``close`` writes what is queued, then closes ``stream`` if
    ``owned`` (else flushes it). A failed write raises UsageError naming ``name`` and the
    reason (a closed pipe: BrokenPipeError, as the CLI expects)."""

    def __init__(self, stream, owned: bool = True, name: str = "the output"):
        self.stream, self.owned, self.name = stream, owned, name
        self._queue: queue.Queue = queue.Queue(QUEUE_PIECES)
        self._error: BaseException | None = None
        self._failed = self._closed = False
        self._thread = threading.Thread(target=self._run, name="raycep-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        get = self._queue.get
        while True:
            data = get()
            try:
                if data is _STOP:
                    return
                if self._error is None and not self._failed:
                    self._put(data)
            except BaseException as exc:       # noqa: BLE001  (handed to the producer)
                self._error = exc
            finally:
                self._queue.task_done()

    def _put(self, data) -> None:
        """Writes ``data`` (bytes, or Fragments joined here) WRITE_BYTES at a time."""
        view = memoryview(b"".join(data) if data.__class__ is Fragments else data)
        for k in range(0, len(view), WRITE_BYTES):
            self.stream.write(view[k:k + WRITE_BYTES])

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._failed = True
            self._raise(error)

    def _raise(self, error: BaseException):
        if isinstance(error, OSError) and not isinstance(error, BrokenPipeError):
            raise UsageError(f"error: cannot write {self.name}: "
                             f"{error.strerror or error}") from None
        raise error

    def write(self, data: bytes) -> None:
        self._check()
        if data and not self._failed:
            self._queue.put(data)

    def flush(self) -> None:
        """Wait until everything queued is written, then flush ``stream``."""
        self._queue.join()
        self._check()
        self.stream.flush()

    def close(self) -> None:
        """Write what is queued, then close (or flush) ``stream``; raises a failure not
        raised yet."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        try:
            self._check()
        finally:
            try:
                if self.owned:
                    self.stream.close()
                elif not self._failed:
                    self.stream.flush()
            except OSError as exc:
                if not self._failed:
                    self._failed = True
                    self._raise(exc)
