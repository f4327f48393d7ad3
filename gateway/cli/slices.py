"""``raycep local --workers N``: the events file in time slices, one forked process each.

Slice 0 runs in this process, the others in forked children (after the queries are compiled,
before anything is read); each writes the lines of what its engine emits while it processes
its own part (cep.io.slices) to its own file, and this process appends them to the output in
slice order, each while its slice still writes it (``_follow``). A slice that finds the file
out of time order, a copy of an event, a late event, a bad row, a condition that could not be
evaluated or a trigger with more matches than the cap makes the run start again in one piece,
so what is written and reported is always what one process would have found. The first four
stop a slice where they are found, and slice 0 ends the others as soon as one of them
reports, so a file that cannot be sliced costs little more than one process's run.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import tempfile
from dataclasses import dataclass

from raycep.cep.io.output import MatchLines
from raycep.cep.io.slices import Slice, Unsliceable, cuts
from raycep.gateway.cli.common import UsageError, err, peak_rss_mb, terminable
from raycep.gateway.cli.lines import evaluate, open_output
from raycep.gateway.cli.writer import WRITE_BYTES, BackgroundWriter


#: how long the parent waits for a slice's report between two copies of what it wrote
FOLLOW_POLL_S = 0.002


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                          # not on Linux
        return os.cpu_count() or 1


def slice_cuts(args, engine) -> list | None:
    """Where ``args.events`` is cut for ``args.workers`` slices (cep.io.slices.cuts), or None:
    one worker, or a file that is not cut."""
    workers = args.workers if args.workers is not None else default_workers()
    if workers < 2 or not hasattr(os, "fork"):
        return None
    return cuts(args.events, workers)


@dataclass
class Sliced:
    events: int
    workers: int
    children_rss_mb: float          # the forked slices' peak RSS, summed
    warnings: dict                  # those of every slice: what the whole file never had
    paths: dict                     # query -> its triggers in bulk and one by one, summed
    seconds: dict                   # query -> its evaluator's seconds, summed


def _reach(engine, args) -> float:
    """Event time a slice reads before its part (cep.io.slices): two of the longest window or
    SLIDE period, and the slack."""
    span = max(max(m.cq.window, m.cq.slide or 0.0) for m in engine.engine.managers.values())
    return 2 * span + (args.slack or 0.0)


def _clean(engine, stopped) -> str | None:
    """Why the slice's result cannot stand for one process's (None: it can)."""
    if stopped is not None:
        return f"bad input ({stopped})"
    stats = engine.engine.stats()
    if stats["duplicates"] or stats["late_events"]:
        return "copies or late events"
    if any(c["failed"] for q in stats["queries"].values() for c in q["conjuncts"]):
        return "a condition could not be evaluated"
    if any(q.get("truncated_triggers") for q in stats["queries"].values()):
        return "a trigger hit the cap of matches (which ones are kept depends on the plan)"
    return None


def _run_slice(engine, slice_: Slice, write, lines: MatchLines, progress=None,
               others=None) -> str | None:
    try:
        _, stopped = evaluate(engine, _watched(engine, slice_, others), lines, write, None,
                              progress, keep=slice_.keep, gather=True)
    except Unsliceable as exc:
        return str(exc)
    return _clean(engine, stopped)


def _watched(engine, slice_: Slice, others=None):
    """``slice_.runs()``, stopped (Unsliceable) after a piece that gave a copy or a late
    event, or once one of ``others`` (the forked slices) reported that its run cannot stand:
    the run in one piece need not wait for the rest of this one."""
    core = engine.engine
    for piece in slice_.runs():
        yield piece
        if core.duplicates or core.late_events:
            raise Unsliceable("copies or late events")
        why = others.failed() if others is not None else None
        if why is not None:
            raise Unsliceable(why)


def _child(engine, slice_: Slice, path: str, report_fd: int) -> None:
    """A forked slice: its lines to ``path``, a JSON report to ``report_fd``; never returns."""
    code = 1
    try:
        lines = MatchLines()
        out = BackgroundWriter(open(path, "wb"), True, name=f"slice {slice_.k} to {path}")
        try:
            why = _run_slice(engine, slice_, out.write, lines)
        finally:
            out.close()
        report = {"why": why, "rows": slice_.rows, "counts": lines.counts,
                  "retractions": lines.retractions, "peak_rss_mb": peak_rss_mb(),
                  "warnings": engine.engine.warnings(), "paths": engine.engine.paths(),
                  "seconds": engine.engine.seconds()}
        code = 0
    except BaseException as exc:                    # reported; the parent runs it whole
        report = {"why": f"slice {slice_.k} failed: {type(exc).__name__}: {exc}"}
    try:
        os.write(report_fd, json.dumps(report).encode())
    finally:
        os._exit(code)


def run_slices(engine, parts: list, args, lines: MatchLines, progress) -> Sliced | None:
    """Evaluate the slices at ``parts`` (slice 0 here, the others forked), write every
    slice's lines to ``args.out`` (stdout when None) in order, merge their counts into
    ``lines``; None (nothing written) when the run must be done in one piece."""
    with terminable():          # SIGTERM, SIGHUP: the slices are ended, their files removed
        return _run_slices(engine, parts, args, lines, progress)


def _run_slices(engine, parts: list, args, lines: MatchLines, progress) -> Sliced | None:
    reach = _reach(engine, args)
    n = len(parts) - 1
    direct = _regular(args.out)          # slice 0 straight to --out (rewritten if run again)
    files, children = [], _Children()
    try:
        try:                            # (in the output's file system: copy_file_range)
            files = _temporary(n, os.path.dirname(os.path.abspath(args.out)) if direct
                               else None)
        except OSError as exc:
            err(f"the file is run in one piece: no temporary file for the slices' lines "
                f"({exc.strerror or exc})")
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        for k in range(1, n):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(engine, Slice(args.events, parts, k, reach, args.key, args.ts_format),
                       files[k], write_fd)
            os.close(write_fd)
            children.add(pid, read_fd)
        first = Slice(args.events, parts, 0, reach, args.key, args.ts_format)
        if direct:
            handle = open_output(args.out, binary=True)[0]
            os.unlink(files[0])
            files[0] = None
        else:
            handle = open(files[0], "wb")
        out = BackgroundWriter(handle, True, name=f"matches to {args.out}" if direct
                               else f"slice 0 to {files[0]}")
        try:
            why = _run_slice(engine, first, out.write, lines, progress, children)
        finally:
            out.close()
        rows, rss = first.rows, 0.0
        warnings = engine.engine.warnings()
        paths = engine.engine.paths()
        seconds = engine.engine.seconds()
        if why is not None:
            children.stop()                         # their work is of no use now
        elif direct:                                # their lines follow, each while written
            why = _follow(children, files[1:], args.out)
        for report in children.reports():
            why = why or report["why"]
            if why is None:
                rows += report["rows"]
                rss += report["peak_rss_mb"] or 0.0
                warnings = {name: [w for w in found if w in report["warnings"].get(name, ())]
                            for name, found in warnings.items()}
                for name, path in report["paths"].items():
                    if name in paths:
                        paths[name] = {**paths[name], "bulk": paths[name]["bulk"] + path["bulk"],
                                       "per_trigger": paths[name]["per_trigger"]
                                       + path["per_trigger"]}
                for name, spent in report["seconds"].items():
                    if name in seconds:
                        seconds[name] += spent
                for name, count in report["counts"].items():
                    lines.counts[name] = lines.counts.get(name, 0) + count
                for name, count in report["retractions"].items():
                    lines.retractions[name] = lines.retractions.get(name, 0) + count
        if why is not None:
            err(f"the {n} slices of {args.events} are run again in one piece: {why}")
            return None
        if not direct:
            _append(files, args.out)
        return Sliced(events=rows, workers=n, children_rss_mb=rss,
                      warnings={name: found for name, found in warnings.items() if found},
                      paths=paths, seconds=seconds)
    finally:
        children.stop()                             # (only if this process failed)
        for path in files:
            try:
                if path:
                    os.unlink(path)
            except OSError:
                pass


def _temporary(n: int, where: str | None) -> list:
    """``n`` new empty files for the slices' lines: in ``where`` if it can, else in the
    system's temporary directory (a device or pipe as the output, a directory not writable)."""
    error = None
    for place in dict.fromkeys((where, None)):
        paths: list = []
        try:
            if place:
                os.makedirs(place, exist_ok=True)
            for _ in range(n):
                fd, path = tempfile.mkstemp(prefix=".raycep-slice-", suffix=".jsonl",
                                            dir=place)
                os.close(fd)
                paths.append(path)
            return paths
        except OSError as exc:
            error = exc
            for path in paths:
                os.unlink(path)
    raise error


def _regular(path) -> bool:
    """Whether ``path`` is a file to write (not there yet, or a regular file)."""
    if path is None:
        return False
    try:
        import stat
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


class _Children:
    """The forked slices: their process ids and the pipes their reports come by."""

    def __init__(self):
        self.waiting: dict = {}                     # pipe -> process id
        self.done: dict = {}                        # pipe -> report
        self.order: list = []                       # the pipes in slice order

    def add(self, pid: int, fd: int) -> None:
        self.waiting[fd] = pid
        self.order.append(fd)

    def failed(self) -> str | None:
        """Why a slice that already ended cannot stand (None: none such yet); never waits."""
        if self.waiting:
            ready, _, _ = select.select(list(self.waiting), [], [], 0)
            for fd in ready:
                self.done[fd] = _wait(self.waiting.pop(fd), fd)
        return next((r["why"] for r in self.done.values() if r.get("why") is not None), None)

    def ended(self, fd: int, timeout: float) -> dict | None:
        """The report of the slice whose pipe is ``fd`` if it ends within ``timeout`` s."""
        if fd in self.waiting and select.select([fd], [], [], timeout)[0]:
            self.done[fd] = _wait(self.waiting.pop(fd), fd)
        return self.done.get(fd)

    def reports(self) -> list:
        """Every slice's report, in slice order, once all have ended."""
        for fd, pid in self.waiting.items():
            self.done[fd] = _wait(pid, fd)
        self.waiting.clear()
        return [self.done[fd] for fd in self.order if fd in self.done]

    def stop(self) -> None:
        """Ends the slices still running (what they would write is not used)."""
        for fd, pid in self.waiting.items():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait(pid, fd)
        self.waiting.clear()


def _wait(pid: int, fd: int) -> dict:
    """The report of the forked slice ``pid`` (read from ``fd``) once it ended."""
    with os.fdopen(fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    try:
        report = json.loads(data)
    except ValueError:
        report = {"why": f"a slice's process ended without a report "
                         f"(exit status {os.waitstatus_to_exitcode(status)})"}
    return report


def _follow(children: _Children, files: list, out_path: str) -> str | None:
    """Appends the forked slices' files to ``out_path`` (which holds slice 0's lines) in
    slice order, each while its slice still writes it (the copy overlaps the wait); the
    reason a slice cannot stand, if one reports one (the others are then ended)."""
    try:
        with open(out_path, "r+b") as out:          # (copy_file_range refuses O_APPEND)
            out.seek(0, os.SEEK_END)
            for fd, path in zip(children.order, files):
                with open(path, "rb") as part:
                    at = 0
                    while True:
                        report = children.ended(fd, FOLLOW_POLL_S)
                        at = _copy(part, out, at, os.fstat(part.fileno()).st_size)
                        if report is not None:
                            break
                if report.get("why") is not None:
                    children.stop()
                    return report["why"]
    except OSError as exc:
        children.stop()
        raise _write_error(out_path, exc) from None
    return None


def _copy(part, out, at: int, end: int) -> int:
    """Bytes ``at`` to ``end - 1`` of the file ``part`` to the end of ``out`` (in the kernel
    where it can, WRITE_BYTES a call); returns ``end``."""
    while at < end:
        try:
            done = os.copy_file_range(part.fileno(), out.fileno(), min(end - at, WRITE_BYTES),
                                      at)
        except (AttributeError, OSError):           # not here: by hand
            part.seek(at)
            done = out.write(part.read(min(end - at, WRITE_BYTES)))
            out.flush()
        if not done:
            raise OSError(f"{part.name} ended before byte {end}")
        at += done
    return end


def _append(files: list, out_path) -> None:
    """The slices' files, in order, to ``out_path`` (stdout when None)."""
    out, close = open_output(out_path, binary=True)
    target = out if close else getattr(sys.stdout, "buffer", None)
    try:
        for path in files:
            with open(path, "rb") as part:
                if target is None:                  # (a text stdout, e.g. a test's capture)
                    sys.stdout.write(part.read().decode())
                    continue
                target.flush()
                _copy(part, target, 0, os.fstat(part.fileno()).st_size)
    except BrokenPipeError:
        raise                                       # (a closed stdout: as in one process)
    except OSError as exc:
        raise _write_error(out_path or "stdout", exc) from None
    finally:
        if close:
            out.close()
        else:
            out.flush()


def _write_error(out_path: str, exc: OSError) -> UsageError:
    return UsageError(f"error: cannot write matches to {out_path}: {exc.strerror or exc}")
