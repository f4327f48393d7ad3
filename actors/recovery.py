"""Durable state of a partition actor: a checkpoint plus a write-ahead log (WAL) in a directory.

What a PartitionWorker changes (a batch ingested, a watermark advance, a query added or
removed, a plan installed, an outbox drained) is appended to ``DIR/<partition>/wal`` before
the caller is answered; every ``every_events`` events or ``every_seconds`` seconds the
worker's whole state (``PartitionWorker.snapshot``: index, pending matches, plans, dedup
memory, remembered batch ids, undrained outbox) is written to ``DIR/<partition>/checkpoint``
(temporary file, fsync, atomic rename) and the log starts again. A restarted actor (Ray
``max_restarts`` re-runs its constructor with the same arguments) loads the checkpoint and
replays the log: it is where it was when it last answered, as Flink restores a checkpoint
and replays its source, with the replay coming from the actor's own log.

Each log record carries a sequence number; the checkpoint names the last one it contains,
so a crash between writing a checkpoint and starting the new log replays nothing twice. A
record is ``length, crc32, pickle``: a record torn by a crash mid-write (the last one) fails
its check and is cut off with everything after it; it was never acknowledged.

Records and checkpoints are pickles of the actor's own state: the directory must be as
trusted as the code (it is the operator's, never a user's). ``fsync=False`` (default) hands
each record to the operating system (it survives the actor's process being killed, not the
machine losing power); ``fsync=True`` also syncs it to the disk before answering.
"""
from __future__ import annotations

import json
import os
import pickle
import struct
import time
import zlib
from dataclasses import dataclass

from cep.errors import RecoveryError

_HEAD = struct.Struct("<II")          # payload length, crc32 of the payload
CHECKPOINT = "checkpoint"
WAL = "wal"
EVICTED = "evicted"
MANIFEST = "cluster.json"
#: default interval between two checkpoints of an actor: events taken, or seconds. The state
#: written is the windows' contents, not the stream, so a checkpoint is cheap (~15 ms for the
#: sample queries) and a short interval keeps the log a restarted actor replays short
CHECKPOINT_EVERY = 20_000
CHECKPOINT_SECONDS = 10.0


@dataclass(frozen=True)
class CheckpointSettings:
    """Where and how often the partition actors save their state (``raycep serve
    --checkpoint-dir DIR --checkpoint-every N --checkpoint-seconds S --fsync``)."""
    directory: str
    every_events: int = CHECKPOINT_EVERY
    every_seconds: float = CHECKPOINT_SECONDS
    fsync: bool = False

    def worker_options(self) -> dict:
        """The PartitionWorker arguments of these settings."""
        return {"checkpoint_dir": self.directory, "checkpoint_every": self.every_events,
                "checkpoint_seconds": self.every_seconds, "fsync": self.fsync}


def claim(directory: str, partitions: int, key_attr) -> None:
    """Check that ``directory`` holds no other cluster's state (another number of partitions
    or partition key routes keys elsewhere) and mark it as this cluster's; RecoveryError
    otherwise."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, MANIFEST)
    shape = {"partitions": partitions, "key": key_attr}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            try:
                found = json.load(f)
            except ValueError:
                raise RecoveryError(f"{path} is not a raycep checkpoint manifest") from None
        if {k: found.get(k) for k in shape} != shape:
            raise RecoveryError(
                f"checkpoint directory {directory} holds the state of a cluster with "
                f"{found.get('partitions')} partitions keyed by {found.get('key')!r}; this one "
                f"has {partitions} keyed by {key_attr!r}: give another --checkpoint-dir, or "
                f"remove that directory to start empty")
        return
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(shape, f)
    os.replace(path + ".tmp", path)


class DurableLog:
    """The checkpoint and WAL of one partition under ``directory``."""

    def __init__(self, directory: str, partition: str, every_events: int = CHECKPOINT_EVERY,
                 every_seconds: float = CHECKPOINT_SECONDS, fsync: bool = False):
        if every_events < 1 or every_seconds <= 0:
            raise ValueError("checkpoint intervals must be positive (events >= 1, seconds > 0)")
        self.directory = os.path.join(os.fspath(directory), str(partition))
        self.partition = str(partition)
        self.every_events, self.every_seconds, self.fsync = every_events, every_seconds, fsync
        os.makedirs(self.directory, exist_ok=True)
        self._wal = None
        self.seq = 0                      # sequence number of the last record logged
        self.since_events = 0             # events logged since the last checkpoint
        self.since = time.monotonic()
        self.checkpoints = 0
        self.last_checkpoint: dict | None = None   # {"at", "seq", "bytes", "seconds"}
        self.wal_bytes = 0
        self.evicted_written = 0          # lists of evicted events in the EVICTED file
        self._evicted_dead = 0            # records in that file (live or not) since rewritten

    # ---------------------------------------------------------------- reading
    def load(self) -> tuple:
        """``(snapshot or None, [(seq, op, args, outputs), ...] to replay, (first number,
        lists of evicted events) of the snapshot)``; a torn last record is cut off the log."""
        path = os.path.join(self.directory, CHECKPOINT)
        snap, done, evicted = None, 0, (0, [])
        if os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    stored = pickle.load(f)
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
                raise RecoveryError(f"cannot read the checkpoint {path}: {exc}") from None
            if stored.get("partition") != self.partition:
                raise RecoveryError(f"{path} holds the state of partition "
                                    f"{stored.get('partition')!r}, not {self.partition!r}")
            snap, done = stored["state"], stored["seq"]
            evicted = self._load_evicted(*stored.get("evicted", (0, 0)))
            self.last_checkpoint = {"at": stored.get("at"), "seq": done,
                                    "bytes": os.path.getsize(path), "seconds": None}
        if snap is None and os.path.exists(os.path.join(self.directory, EVICTED)):
            os.remove(os.path.join(self.directory, EVICTED))   # of a checkpoint never written
        records, self.wal_bytes = _read_records(os.path.join(self.directory, WAL), cut=True)
        self.seq = max([done] + [r[0] for r in records])
        return snap, [r for r in records if r[0] > done], evicted

    def _load_evicted(self, first: int, total: int) -> tuple:
        """The lists of evicted events numbered ``first`` .. ``total - 1`` from the EVICTED
        file, which is rewritten to hold just those."""
        path = os.path.join(self.directory, EVICTED)
        found, _ = _read_records(path)
        by_number = {number: events for number, events in found}   # a later write wins
        lists = [by_number[n] for n in range(first, total) if n in by_number]
        if len(lists) != total - first:
            raise RecoveryError(f"{path} lacks evicted events the checkpoint needs "
                                f"(lists {first}..{total - 1}, found {len(lists)})")
        self._rewrite_evicted([(first + i, events) for i, events in enumerate(lists)])
        self.evicted_written = total
        return first, lists

    # ---------------------------------------------------------------- writing
    def log(self, op: str, args: tuple, outputs=None, events: int = 0) -> None:
        """Append one change (before its caller is answered)."""
        if self._wal is None:
            self._wal = open(os.path.join(self.directory, WAL), "ab")
        self.seq += 1
        record = _record((self.seq, op, args, outputs))
        self._wal.write(record)
        self._wal.flush()
        if self.fsync:
            os.fsync(self._wal.fileno())
        self.wal_bytes += len(record)
        self.since_events += events

    def due(self) -> bool:
        return self.since_events >= self.every_events or \
            (self.wal_bytes and time.monotonic() - self.since >= self.every_seconds)

    def checkpoint(self, state: dict, evicted: tuple = (0, 0, [], 0)) -> dict:
        """Write ``state`` as the checkpoint of everything logged so far; start a new log.
        ``evicted``: ``(first live, first new, new lists, total)`` of the engine's remembered
        evicted events: the lists not written yet are appended to the EVICTED file (so a
        checkpoint writes the events evicted since the previous one, not all it remembers),
        and the checkpoint names the span ``first live .. total - 1`` it needs."""
        started = time.perf_counter()
        live_from, new_from, new, total = evicted
        if new:
            with open(os.path.join(self.directory, EVICTED), "ab") as f:
                f.write(b"".join(_record((new_from + i, events))
                                 for i, events in enumerate(new)))
                f.flush()
                os.fsync(f.fileno())
            self._evicted_dead += len(new)
        self.evicted_written = total
        path = os.path.join(self.directory, CHECKPOINT)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump({"partition": self.partition, "seq": self.seq, "at": time.time(),
                         "evicted": (live_from, total), "state": state}, f, protocol=5)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _sync_directory(self.directory)
        if self._evicted_dead > 2 * max(64, total - live_from):   # mostly forgotten lists
            found, _ = _read_records(os.path.join(self.directory, EVICTED))
            self._rewrite_evicted([r for r in found if live_from <= r[0] < total])
        if self._wal is not None:
            self._wal.close()
        self._wal = open(os.path.join(self.directory, WAL), "wb")     # the new, empty log
        self.wal_bytes = 0
        self.since_events, self.since = 0, time.monotonic()
        self.checkpoints += 1
        self.last_checkpoint = {"at": time.time(), "seq": self.seq,
                                "bytes": os.path.getsize(path),
                                "seconds": round(time.perf_counter() - started, 4)}
        return self.last_checkpoint

    def _rewrite_evicted(self, records: list) -> None:
        path = os.path.join(self.directory, EVICTED)
        with open(path + ".tmp", "wb") as f:
            f.write(b"".join(map(_record, records)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        self._evicted_dead = len(records)

    def close(self) -> None:
        if self._wal is not None:
            self._wal.close()
            self._wal = None

    def stats(self) -> dict:
        return {"directory": self.directory, "checkpoints": self.checkpoints,
                "last_checkpoint": self.last_checkpoint, "wal_bytes": self.wal_bytes,
                "events_since_checkpoint": self.since_events}


def _record(value) -> bytes:
    """One framed record: payload length, crc32, pickle."""
    payload = pickle.dumps(value, protocol=5)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _read_records(path: str, cut: bool = False) -> tuple:
    """``(values, bytes read)`` of the whole records of a file, up to the first torn one (a
    crash mid-write, or zeros a file system left after a power loss: never answered);
    ``cut``: the file is truncated there."""
    if not os.path.exists(path):
        return [], 0
    with open(path, "rb") as f:
        data = f.read()
    values, at = [], 0
    while at + _HEAD.size <= len(data):
        size, crc = _HEAD.unpack_from(data, at)
        payload = data[at + _HEAD.size:at + _HEAD.size + size]
        if not size or len(payload) < size or zlib.crc32(payload) != crc:
            break
        try:
            values.append(pickle.loads(payload))
        except (pickle.UnpicklingError, EOFError, ValueError, AttributeError):
            break
        at += _HEAD.size + size
    if cut and at < len(data):
        with open(path, "r+b") as f:
            f.truncate(at)
    return values, at


def _sync_directory(path: str) -> None:
    """Make a rename in ``path`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["CHECKPOINT_EVERY", "CHECKPOINT_SECONDS", "CheckpointSettings", "DurableLog",
           "claim"]
