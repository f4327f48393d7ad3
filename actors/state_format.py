"""The on-disk format of a partition actor's durable state (actors/recovery.py): explicit,
versioned, msgpack, never pickle.

Every file starts with the 8 bytes ``MAGIC`` (``RAYCEP\\0\\n``) and a header record, then
records. A record is ``<u32 length><u32 crc32 of the payload><payload>`` (little endian); a
payload is one msgpack value. The header's payload is the map ``{"format": KIND, "version":
VERSION}``; a reader refuses another kind or a version it does not know (RecoveryError naming
both), and a file that does not start with ``MAGIC`` (a pickle from an older raycep, or
anything else) is refused without being interpreted. Nothing here unpickles: a volume's
contents are data, never code (the project rule "never unpickle what another process or a
volume could have written").

Kinds (version 1):

* ``raycep.wal``: records ``[seq, op, args, outputs]``: one logged change of the worker
  (``op`` one of ``LOGGED_OPS``), ``outputs`` the records it gave, in order: each a
  record (its JSON text, bytes) or, for a record that replaying the change gives again (a
  match found in bulk), its identity (str: its id, ``"retracted:" + id`` for a retraction);
* ``raycep.checkpoint``: one record, the map ``{"partition", "seq", "at", "evicted":
  [first live list, lists written], "segments": [names], "mark": [ts, [ids]], "state":
  worker snapshot without its buffered events and batch ids}``;
* ``raycep.segment``: one record ``{"events": [row, ...], "batches": [[source, id], ...]}``:
  the events indexed (and batch ids accepted) between two checkpoints, or all live ones (a
  compaction's base);
* ``raycep.evicted``: records ``[list number, [row, ...]]``: the remembered evicted events.

An event row is ``[type, ts, key, attrs, id or nil]`` (nil: the id is derived from the
content, as when it arrived). Values in ``state`` and WAL records are msgpack's own types plus
these extension types (code: payload, itself msgpack): 1 tuple (array), 2 set, 3 frozenset
(arrays), 4 Event (a row), 5 query AST node (``[class name, {field: value}]``, only the
dataclasses of ``cep.lang.ast``), 6 settings (``[class name, {field: value}]``, only
``DisorderSettings``), 7 LateEvent (``[event, source, reason, score, threshold,
watermark]``). An unknown extension code is an error, never a guess.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import zlib

import msgpack

from raycep.cep.errors import RecoveryError
from raycep.cep.event import Event, event_row
from raycep.cep.lang import ast as _ast
from raycep.cep.store.disorder import DisorderSettings, LateEvent

MAGIC = b"RAYCEP\x00\n"
VERSION = 1
WAL_KIND, CHECKPOINT_KIND = "raycep.wal", "raycep.checkpoint"
SEGMENT_KIND, EVICTED_KIND = "raycep.segment", "raycep.evicted"
#: the worker methods a WAL record may name (replay calls nothing else)
LOGGED_OPS = frozenset({"add_query", "add_queries", "remove_query", "remove_queries",
                        "set_plan", "ingest", "advance", "observe", "set_outbox", "drain",
                        "take"})

_HEAD = struct.Struct("<II")          # payload length, crc32 of the payload
_TUPLE, _SET, _FROZENSET, _EVENT, _AST, _SETTINGS, _LATE = range(1, 8)
_SETTINGS_CLASSES = {"DisorderSettings": DisorderSettings}


# ------------------------------------------------------------------ values
def _default(value):
    cls = value.__class__
    if cls is Event:
        return msgpack.ExtType(_EVENT, pack(event_row(value)))
    if cls is tuple:
        return msgpack.ExtType(_TUPLE, pack(list(value)))
    if cls is set or cls is frozenset:
        return msgpack.ExtType(_SET if cls is set else _FROZENSET, pack(list(value)))
    if cls is LateEvent:
        return msgpack.ExtType(_LATE, pack([value.event, value.source, value.reason,
                                            value.score, value.threshold, value.watermark]))
    if dataclasses.is_dataclass(value) and cls.__module__ == _ast.__name__:
        return msgpack.ExtType(_AST, pack([cls.__name__, _fields(value)]))
    if _SETTINGS_CLASSES.get(cls.__name__) is cls:
        return msgpack.ExtType(_SETTINGS, pack([cls.__name__, _fields(value)]))
    raise TypeError(f"cannot write a {cls.__module__}.{cls.__name__} in raycep's state format")


def _fields(value) -> dict:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}


def _ext(code: int, data: bytes):
    if not _TUPLE <= code <= _LATE:
        raise RecoveryError(f"unknown extension type {code} in a raycep state file")
    items = unpack(data)
    if code == _EVENT:
        return row_event(items)
    if code == _TUPLE:
        return tuple(items)
    if code == _SET:
        return set(items)
    if code == _FROZENSET:
        return frozenset(items)
    if code == _LATE:
        return LateEvent(*items)
    if code in (_AST, _SETTINGS):
        name, fields = items
        cls = _SETTINGS_CLASSES.get(name) if code == _SETTINGS else getattr(_ast, name, None)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)
                and (code == _SETTINGS or cls.__module__ == _ast.__name__)):
            raise RecoveryError(f"unknown class {name!r} in a raycep state file")
        return cls(**fields)
    raise RecoveryError(f"unknown extension type {code} in a raycep state file")


def pack(value) -> bytes:
    """``value`` as msgpack with raycep's extension types (tuples stay tuples)."""
    return msgpack.packb(value, use_bin_type=True, strict_types=True, default=_default)


def unpack(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext,
                           use_list=True)


def row_event(row) -> Event:
    etype, ts, key, attrs, eid = row
    return Event(etype, ts, attrs, key, eid)


def event_rows(events) -> list:
    return list(map(event_row, events))


def intern(value, table: dict):
    """``value`` with every Event replaced by the one of ``table`` (``{(type, ts, id):
    Event}``, filled as new ones are met), containers rebuilt: a decoded state refers to the
    same Event objects as the restored index, and to one object per event, as the live
    state did (pickle kept that identity; the evaluators may rely on it)."""
    cls = value.__class__
    if cls is Event:
        key = (value.type, value.ts, value.id)
        return table.setdefault(key, value)
    if cls is dict:
        return {k: intern(v, table) for k, v in value.items()}
    if cls is list:
        return [intern(v, table) for v in value]
    if cls is tuple:
        return tuple(intern(v, table) for v in value)
    if cls is LateEvent:
        return dataclasses.replace(value, event=intern(value.event, table))
    return value


# ------------------------------------------------------------------ files
def frame_head(payload: bytes) -> bytes:
    """The header of ``payload``'s record: its length and crc32."""
    return _HEAD.pack(len(payload), zlib.crc32(payload))


def frame(payload: bytes) -> bytes:
    return frame_head(payload) + payload


def record(value) -> bytes:
    """One framed record of ``value``."""
    return frame(pack(value))


def record_parts(value) -> tuple:
    """``record(value)`` as its frame header and payload, to write one after the other (a
    log record of a batch's outputs is megabytes: joined, it would be copied once more)."""
    payload = pack(value)
    return frame_head(payload), payload


def header(kind: str) -> bytes:
    return MAGIC + frame(msgpack.packb({"format": kind, "version": VERSION}))


def _check_header(data: bytes, path: str, kind: str) -> int:
    """The offset of the first record after a valid header; RecoveryError otherwise."""
    if not data.startswith(MAGIC):
        what = "a pickle (written by raycep before issue 33?)" if data[:1] == b"\x80" \
            else "not a raycep state file"
        raise RecoveryError(f"{path} is {what}: refused, not read (state files are msgpack "
                            f"with a versioned header; remove the checkpoint directory to "
                            f"start empty)")
    at = len(MAGIC)
    size, crc = _HEAD.unpack_from(data, at) if len(data) >= at + _HEAD.size else (0, 0)
    payload = data[at + _HEAD.size:at + _HEAD.size + size]
    if not size or len(payload) < size or zlib.crc32(payload) != crc:
        raise RecoveryError(f"{path}: its header is damaged")
    try:
        head = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise RecoveryError(f"{path}: its header does not decode ({exc})") from None
    if not isinstance(head, dict) or head.get("format") != kind:
        raise RecoveryError(f"{path} holds {head.get('format') if isinstance(head, dict) else head!r}"
                            f", not {kind}")
    if head.get("version") != VERSION:
        raise RecoveryError(f"{path} is {kind} version {head.get('version')!r}; this raycep "
                            f"reads version {VERSION} only (a newer raycep wrote it?)")
    return at + _HEAD.size + size


def read_records(path: str, kind: str, cut: bool = False) -> tuple:
    """``(values, bytes)`` of the whole records of a file, up to the first torn one (a crash
    mid-write, or zeros a file system left after a power loss: never answered); ``cut``: the
    file is truncated there. A missing file, or one whose header itself was torn while it
    was created, holds no record. A record whose checksum holds but whose payload does not
    decode is not a torn write: RecoveryError."""
    if not os.path.exists(path):
        return [], 0
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < len(header(kind)) and header(kind).startswith(data):
        return [], 0                       # created, header not complete: nothing in it
    at = _check_header(data, path, kind)
    values = []
    while at + _HEAD.size <= len(data):
        size, crc = _HEAD.unpack_from(data, at)
        payload = data[at + _HEAD.size:at + _HEAD.size + size]
        if not size or len(payload) < size or zlib.crc32(payload) != crc:
            break
        try:
            values.append(unpack(payload))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise RecoveryError(f"{path}: record at byte {at} does not decode ({exc})") \
                from None
        at += _HEAD.size + size
    if cut and at < len(data):
        with open(path, "r+b") as f:
            f.truncate(at)
    return values, at


def write_file(path: str, kind: str, values: list, fsync: bool = True) -> int:
    """Write ``values`` as the records of a new file at ``path`` (temporary file, fsync,
    atomic rename); returns its size in bytes."""
    data = header(kind) + b"".join(map(record, values))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(data)


def read_one(path: str, kind: str):
    """The single record of a file written by ``write_file`` (RecoveryError if missing)."""
    values, _ = read_records(path, kind)
    if len(values) != 1:
        raise RecoveryError(f"{path}: expected one record, found {len(values)}")
    return values[0]


__all__ = ["CHECKPOINT_KIND", "EVICTED_KIND", "LOGGED_OPS", "MAGIC", "SEGMENT_KIND",
           "VERSION", "WAL_KIND", "event_rows", "header", "pack", "read_one", "read_records",
           "record", "row_event", "unpack", "write_file"]
