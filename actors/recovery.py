"""Durable state of a partition actor: incremental checkpoints plus a write-ahead log (WAL).

What a PartitionWorker changes (a batch ingested, a watermark advance, a query added or
removed, a plan installed, an outbox drained) is appended to ``DIR/<partition>/wal`` before
the caller is answered. Every ``every_events`` events or ``every_seconds`` seconds (checked
when a change is logged: an idle actor writes nothing) the worker writes a checkpoint and
the log starts again. A restarted actor (Ray ``max_restarts`` re-runs its constructor with
the same arguments) loads the checkpoint and replays the log: it is where it was when it
last answered, as Flink restores a checkpoint and replays its source, the replay coming from
the actor's own log.

A checkpoint costs what changed since the previous one, not the size of the state (issue
33; Flink's incremental checkpoints, Kafka Streams' changelogs): the events indexed since
then go to a new *segment* file (``segments/<n>.seg``) and the small rest of the state
(queries, plans, pending matches, outbox, counters: ``PartitionWorker.snapshot(events=False,
recent=False)``) to ``checkpoint``, which lists the live segments and is replaced atomically
(temporary file, fsync, rename): the commit point. Evicted events are not rewritten: a
segment's events older than the index's eviction floor are skipped on load. When the
segments hold much more than the live events (``COMPACT_FACTOR`` times, plus
``COMPACT_SLACK`` bytes) or there are ``COMPACT_SEGMENTS`` of them, the checkpoint is a
*compaction*: one segment with every live event replaces them (its cost is the live state,
after at least as much change was written). The remembered evicted events (duplicate
detection) evicted since the previous checkpoint go to a file of their own
(``evicted-lists/<first list>.lists``), removed once none of its lists is remembered: never
read back to shrink (issue 36: rewriting one file of them by reading it was a quarter of an
actor's time under a fast ingest). A checkpoint with nothing logged since the last is
skipped.

Each log record carries a sequence number; the checkpoint names the last one it contains,
so a crash between writing a checkpoint and starting the new log replays nothing twice. A
record torn by a crash mid-write (the last one) fails its checksum and is cut off with
everything after it; it was never acknowledged.

Every file is in the explicit, versioned format of ``actors/state_format.py`` (msgpack, a
header with the format's name and version; never pickle: a file an older raycep wrote, or
any file that is not in that format, is refused with RecoveryError, never interpreted).
``fsync=False`` (default) hands each log record to the operating system (it survives the
actor's process being killed, not the machine losing power); ``fsync=True`` also syncs it
to the disk before answering. Checkpoint files are always synced.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

import orjson

from raycep.actors.routing import KEY_GROUPS
from raycep.actors.state_format import (CHECKPOINT_KIND, EVICTED_KIND, LOGGED_OPS, SEGMENT_KIND,
                                 WAL_KIND, event_rows, header, intern, read_one, read_records,
                                 record, record_parts, row_event, write_file)
from raycep.cep.errors import RecoveryError
from raycep.cep.io.output import record_identity, record_meta

CHECKPOINT = "checkpoint"
WAL = "wal"
EVICTED = "evicted-lists"          # the remembered evicted events: a file per checkpoint
LEGACY_EVICTED = "evicted"         # ... before: one file, rewritten (read back) to shrink
SEGMENTS = "segments"
MANIFEST = "cluster.json"
#: default interval between two checkpoints of an actor: events taken, or seconds. A
#: checkpoint writes the events indexed since the previous one (and the small rest of the
#: state), so a short interval is cheap and keeps the log a restarted actor replays short
CHECKPOINT_EVERY = 20_000
CHECKPOINT_SECONDS = 10.0
#: a checkpoint compacts the segments into one when they hold more than COMPACT_FACTOR times
#: the bytes of the live events plus COMPACT_SLACK bytes, or when there are COMPACT_SEGMENTS
COMPACT_FACTOR = 2.0
COMPACT_SLACK = 4 * 2**20
COMPACT_SEGMENTS = 256


@dataclass(frozen=True)
class CheckpointSettings:
    """Where and how often the partition actors save their state (``raycep serve
    --checkpoint-dir DIR --checkpoint-every N --checkpoint-seconds S --fsync``)."""
    directory: str
    every_events: int = CHECKPOINT_EVERY
    every_seconds: float = CHECKPOINT_SECONDS
    fsync: bool = False


def claim(directory: str, partitions: int, key_attr, key_groups: int = KEY_GROUPS,
          force: bool = False) -> None:
    """Check that ``directory`` holds no other cluster's state (another number of partitions,
    partition key or number of key groups routes keys elsewhere) and mark it as this
    cluster's; RecoveryError otherwise. ``force``: mark it whatever it held (a rescale
    writes the new number of partitions once every actor has saved its new state)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, MANIFEST)
    shape = {"partitions": partitions, "key": key_attr, "key_groups": key_groups}
    if os.path.exists(path) and not force:
        with open(path, encoding="utf-8") as f:
            try:
                found = json.load(f)
            except ValueError:
                raise RecoveryError(f"{path} is not a raycep checkpoint manifest") from None
        if {k: found.get(k) for k in shape} != shape:
            raise RecoveryError(
                f"checkpoint directory {directory} holds the state of a cluster with "
                f"{found.get('partitions')} partitions keyed by {found.get('key')!r} "
                f"({found.get('key_groups') or 'no'} key groups); this one has {partitions} "
                f"keyed by {key_attr!r} ({key_groups} key groups): give another "
                f"--checkpoint-dir, or remove that directory to start empty")
        return
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(shape, f)
    os.replace(path + ".tmp", path)


def saved_partitions(directory: str, key_attr, key_groups: int = KEY_GROUPS) -> int | None:
    """The number of partitions whose state ``directory`` holds, when it is a cluster's of
    the same partition key and key groups (so a rescale can take it to another number);
    None otherwise (no manifest, another shape: ``claim`` says why)."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("key") != key_attr or \
            found.get("key_groups") != key_groups:
        return None
    n = found.get("partitions")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= key_groups \
        else None


class DurableLog:
    """The checkpoint, segments and WAL of one partition under ``directory``."""

    def __init__(self, directory: str, partition: str, every_events: int = CHECKPOINT_EVERY,
                 every_seconds: float = CHECKPOINT_SECONDS, fsync: bool = False):
        if every_events < 1 or every_seconds <= 0:
            raise ValueError("checkpoint intervals must be positive (events >= 1, seconds > 0)")
        self.directory = os.path.join(os.fspath(directory), str(partition))
        self.partition = str(partition)
        self.every_events, self.every_seconds, self.fsync = every_events, every_seconds, fsync
        os.makedirs(os.path.join(self.directory, SEGMENTS), exist_ok=True)
        os.makedirs(os.path.join(self.directory, EVICTED), exist_ok=True)
        self._wal = None
        self.seq = 0                      # sequence number of the last record logged
        self.saved_seq = 0                # ... of the last one a checkpoint contains
        self.compact_next = False         # the next checkpoint writes every live event
        self.since_events = 0             # events logged since the last checkpoint
        self.since = time.monotonic()
        self.checkpoints = 0
        self.skipped = 0                  # checkpoints asked for with nothing to save
        self.last_checkpoint: dict | None = None
        self.totals = {"bytes": 0, "seconds": 0.0, "events": 0, "compactions": 0}
        self.wal_bytes = 0
        self.evicted_written = 0          # lists of evicted events written (numbered)
        self._evicted: list = []          # [(first list, end, file name)] in EVICTED
        self.segments: list = []          # [{"name", "events", "bytes"}] the checkpoint lists
        self._next = 0                    # number of the next segment file
        self.mark = (-math.inf, [])       # where the index stood at the last checkpoint

    def _path(self, *names) -> str:
        return os.path.join(self.directory, *names)

    # ---------------------------------------------------------------- reading
    def load(self) -> tuple:
        """``(snapshot or None, [(seq, op, args, outputs), ...] to replay, (first number,
        lists of evicted events) of the snapshot)``; a torn last record is cut off the log.
        The snapshot is a worker snapshot with its buffered events (from the segments, those
        not evicted) and its remembered batch ids."""
        path = self._path(CHECKPOINT)
        snap, done, evicted = None, 0, (0, [])
        if os.path.exists(path):
            meta = read_one(path, CHECKPOINT_KIND)
            if not isinstance(meta, dict) or meta.get("partition") != self.partition:
                raise RecoveryError(f"{path} holds the state of partition "
                                    f"{meta.get('partition') if isinstance(meta, dict) else meta!r}"
                                    f", not {self.partition!r}")
            snap, done = meta["state"], meta["seq"]
            floor = snap["engine"].get("index_floor", -math.inf)
            events, batches = [], []
            for name in meta["segments"]:
                seg = read_one(self._path(SEGMENTS, name), SEGMENT_KIND)
                events += [row_event(r) for r in seg["events"] if r[1] >= floor]
                batches += seg["batches"]
                self.segments.append({"name": name, "events": len(seg["events"]),
                                      "bytes": os.path.getsize(self._path(SEGMENTS, name))})
                self._next = max(self._next, int(name.split(".")[0]) + 1)
            table = {(e.type, e.ts, e.id): e for e in events}
            snap = intern(snap, table)
            snap["engine"]["events"] = events
            snap["recent"] = batches
            self.mark = (meta["mark"][0], list(meta["mark"][1]))
            evicted = self._load_evicted(*meta.get("evicted", (0, 0)))
            self.last_checkpoint = {"at": meta.get("at"), "seq": done,
                                    "bytes": os.path.getsize(path), "seconds": None}
            self.saved_seq = done
        else:                                      # of a checkpoint never written
            for _, name in self._evicted_names():
                os.remove(self._path(EVICTED, name))
        listed = {s["name"] for s in self.segments}
        for name in os.listdir(self._path(SEGMENTS)):  # of a checkpoint never committed
            if name not in listed:
                os.remove(self._path(SEGMENTS, name))
        records, self.wal_bytes = read_records(self._path(WAL), WAL_KIND, cut=True)
        for r in records:
            if not (isinstance(r, list) and len(r) == 4 and isinstance(r[0], int)
                    and r[1] in LOGGED_OPS):
                raise RecoveryError(f"{self._path(WAL)}: a record that is not a logged "
                                    f"change: {str(r)[:200]}")
        self.seq = max([done] + [r[0] for r in records])
        replay = [r for r in records if r[0] > done]
        if len(replay) < len(records) or not self.wal_bytes:
            self._restart_wal(replay)              # drop what the checkpoint holds
        return snap, replay, evicted

    def _load_evicted(self, first: int, total: int) -> tuple:
        """The lists of evicted events numbered ``first`` .. ``total - 1`` from the EVICTED
        files (a file holding none of them is removed: written by a checkpoint never
        committed, or no longer needed), or from the single file of the earlier layout
        (then written as one file of this one)."""
        by_number: dict = {}
        legacy = self._path(LEGACY_EVICTED)
        if os.path.isfile(legacy):
            found, _ = read_records(legacy, EVICTED_KIND)
            by_number.update((number, rows) for number, rows in found)   # later ones win
        files = []
        for start, name in self._evicted_names():
            found, _ = read_records(self._path(EVICTED, name), EVICTED_KIND)
            end = max((number + 1 for number, _ in found), default=start)
            if end <= first or start >= total:
                os.remove(self._path(EVICTED, name))
                continue
            by_number.update((number, rows) for number, rows in found)
            files.append((start, end, name))
        lists = [[row_event(r) for r in by_number[n]] for n in range(first, total)
                 if n in by_number]
        if len(lists) != total - first:
            raise RecoveryError(f"{self._path(EVICTED)} lacks evicted events the checkpoint "
                                f"needs (lists {first}..{total - 1}, found {len(lists)})")
        if os.path.isfile(legacy):
            if lists:
                name = self._evicted_name(first)
                write_file(self._path(EVICTED, name), EVICTED_KIND,
                           [[first + i, event_rows(events)] for i, events in enumerate(lists)])
                files = [(first, total, name)]
            os.remove(legacy)
        self._evicted = files
        self.evicted_written = total
        return first, lists

    @staticmethod
    def _evicted_name(first: int) -> str:
        return f"{first:012d}.lists"

    def _evicted_names(self) -> list:
        """``[(first list number, file name)]`` of the EVICTED files, ascending."""
        out = []
        for name in os.listdir(self._path(EVICTED)):
            stem, dot, ext = name.partition(".")
            if ext == "lists" and stem.isdigit():
                out.append((int(stem), name))
            else:                                    # a temporary file of a torn write
                os.remove(self._path(EVICTED, name))
        return sorted(out)

    def _drop_evicted(self, live_from: int) -> None:
        """Remove the EVICTED files all of whose lists are before ``live_from`` (no longer
        remembered; the checkpoint just committed does not name them)."""
        keep = []
        for first, end, name in self._evicted:
            if end <= live_from:
                os.remove(self._path(EVICTED, name))
            else:
                keep.append((first, end, name))
        self._evicted = keep

    # ---------------------------------------------------------------- writing
    def _restart_wal(self, records=()) -> None:
        """A new log holding ``records`` (header first, synced)."""
        if self._wal is not None:
            self._wal.close()
        self._wal = open(self._path(WAL), "wb")
        data = header(WAL_KIND) + b"".join(map(record, records))
        self._wal.write(data)
        self._wal.flush()
        os.fsync(self._wal.fileno())
        self.wal_bytes = len(data)

    def log(self, op: str, args: tuple, outputs=None, events: int = 0) -> None:
        """Append one change (before its caller is answered)."""
        if self._wal is None:
            if os.path.exists(self._path(WAL)) and os.path.getsize(self._path(WAL)):
                self._wal = open(self._path(WAL), "ab")
            else:
                self._restart_wal()
        self.seq += 1
        head, payload = record_parts([self.seq, op, args, outputs])
        self._wal.write(head)
        self._wal.write(payload)
        self._wal.flush()
        if self.fsync:
            os.fsync(self._wal.fileno())
        self.wal_bytes += len(head) + len(payload)
        self.since_events += events

    def due(self) -> bool:
        return self.since_events >= self.every_events or \
            (self.seq > self.saved_seq and time.monotonic() - self.since >= self.every_seconds)

    def changed(self) -> bool:
        """Whether anything was logged since the last checkpoint."""
        return self.seq > self.saved_seq

    def _compaction_due(self, live: int) -> bool:
        if not self.segments:
            return False
        written = sum(s["bytes"] for s in self.segments)
        count = sum(s["events"] for s in self.segments)
        per_event = written / count if count else 0.0
        return len(self.segments) >= COMPACT_SEGMENTS or \
            written > COMPACT_FACTOR * live * per_event + COMPACT_SLACK

    def checkpoint(self, state: dict, events=(), batches=(), mark=(-math.inf, []),
                   evicted: tuple = (0, 0, [], 0), live: int = 0, everything=None) -> dict:
        """Save what changed since the previous checkpoint and start a new log: ``events``
        (indexed since then) and ``batches`` (batch ids accepted since then) as a new segment,
        ``state`` (the rest of the worker's state) and ``mark`` (where the index stands now)
        in the checkpoint file. ``evicted``: ``(first live, first new, new lists, total)`` of
        the engine's remembered evicted events, each list as event rows (``evicted_rows``):
        the new lists go to an EVICTED file of their own and the checkpoint names the span
        it needs. ``live``: events buffered now;
        ``everything()``: ``(every buffered event, every remembered batch id)``, written
        instead of the changes when a compaction is due. Returns this checkpoint's figures."""
        started = time.perf_counter()
        written = 0
        live_from, new_from, new, total = evicted
        if new:                          # a file of their own: never read back to shrink
            name = self._evicted_name(new_from)
            written += write_file(self._path(EVICTED, name), EVICTED_KIND,
                                  [[new_from + i, rows] for i, rows in enumerate(new)])
            self._evicted.append((new_from, new_from + len(new), name))
        self.evicted_written = total
        compact = everything is not None and (self.compact_next or self._compaction_due(live))
        self.compact_next = False
        if compact:
            events, batches = everything()
        name = f"{self._next:012d}.seg"
        self._next += 1
        size = write_file(self._path(SEGMENTS, name), SEGMENT_KIND, [{
            "events": event_rows(events), "batches": [list(b) for b in batches]}])
        old = self.segments
        self.segments = ([] if compact else old) + [
            {"name": name, "events": len(events), "bytes": size}]
        meta = {"partition": self.partition, "seq": self.seq, "at": time.time(),
                "evicted": [live_from, total], "segments": [s["name"] for s in self.segments],
                "mark": [mark[0], list(mark[1])], "state": state}
        meta_size = write_file(self._path(CHECKPOINT), CHECKPOINT_KIND, [meta])
        _sync_directory(self._path(SEGMENTS))
        _sync_directory(self._path(EVICTED))
        _sync_directory(self.directory)
        written += size + meta_size
        if compact:
            for s in old:
                try:
                    os.remove(self._path(SEGMENTS, s["name"]))
                except FileNotFoundError:
                    pass
        self._drop_evicted(live_from)
        self._restart_wal()
        self.saved_seq, self.mark = self.seq, (mark[0], list(mark[1]))
        self.since_events, self.since = 0, time.monotonic()
        self.checkpoints += 1
        seconds = time.perf_counter() - started
        self.last_checkpoint = {"at": time.time(), "seq": self.seq, "bytes": written,
                                "seconds": round(seconds, 4), "events": len(events),
                                "compacted": compact, "segments": len(self.segments)}
        t = self.totals
        t["bytes"] += written
        t["seconds"] = round(t["seconds"] + seconds, 4)
        t["events"] += len(events)
        t["compactions"] += compact
        return self.last_checkpoint

    def close(self) -> None:
        if self._wal is not None:
            self._wal.close()
            self._wal = None

    def stats(self) -> dict:
        """Checkpoint figures: the last one (``bytes`` written, ``seconds``, ``events``
        saved, whether it ``compacted``) and ``totals`` over this process's checkpoints."""
        return {"directory": self.directory, "checkpoints": self.checkpoints,
                "skipped": self.skipped, "last_checkpoint": self.last_checkpoint,
                "totals": dict(self.totals), "segments": len(self.segments),
                "wal_bytes": self.wal_bytes, "events_since_checkpoint": self.since_events}


def logged_outputs(records: list, meta: tuple) -> list:
    """A change's outputs as the write-ahead log keeps them: the identity (str) of each record
    made in bulk, whose replay gives it again (a tenth of the bytes: the log of a batch's
    records cost ~40 % of an actor's time), the record itself (bytes) otherwise."""
    idents = meta[1]
    if None not in idents:
        return idents
    return [r if i is None else i for r, i in zip(records, idents)]


def replayed_outputs(logged: list, records: list, meta: tuple) -> list:
    """The records a logged change gave, in their order, from what ``logged_outputs`` kept and the
    ``records`` (with ``meta``, as ``PartitionWorker._records`` gives them) its replay gives: the outbox's
    sequence numbers are those the gateway acknowledged. A record the replay does not give
    again is a RecoveryError (the evaluation would not be deterministic)."""
    if all(x.__class__ is bytes for x in logged):
        return logged
    by_identity = {}
    for record, ident in zip(records, meta[1]):
        if ident is None:
            found = record_meta(record)
            ident = found[1] if found is not None else record_identity(orjson.loads(record))
        by_identity[ident] = record
    out = []
    for x in logged:
        if x.__class__ is not bytes:
            got = by_identity.get(x)
            if got is None:
                raise RecoveryError(f"replaying the write-ahead log did not give record {x!r} "
                                    f"again, which the change gave before: cannot restore "
                                    f"the outbox's sequence")
            x = got
        out.append(x)
    return out


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
