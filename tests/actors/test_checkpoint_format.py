"""The durable state's format and costs (issue 33 section 3, actors/state_format.py and
actors/recovery.py): explicit, versioned msgpack, never pickle; a checkpoint costs what
changed since the last one, and nothing when nothing changed; figures in ``stats()``."""
from __future__ import annotations

import os
import pickle

import msgpack
import pytest

from raycep.actors import state_format as fmt
from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.actors.recovery import CheckpointSettings
from raycep.actors.recovery import CHECKPOINT, EVICTED, SEGMENTS, WAL
from raycep.cep.errors import RecoveryError
from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch

PAIR = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price WITHIN 5 seconds"


def ticks(n: int, start: int = 0) -> list:
    return [Event("Stock", (start + i) / 100, {"symbol": f"S{i % 7}", "price": float(i % 13)},
                  key=f"S{i % 7}") for i in range(n)]


def worker(directory, retain=0.0) -> PartitionWorker:
    return PartitionWorker("p0", "symbol", worker=WorkerSettings(outbox=True, retain=retain),
                           checkpoint=CheckpointSettings(str(directory), every_events=10**9,
                                                         every_seconds=3600.0))


def send(w, events, name):
    return w.ingest(encode_batch(events, "s", name))


class Boom:
    """Unpickling this runs code: the proof that a file was unpickled."""
    ran = []

    def __reduce__(self):
        return (Boom.ran.append, ("unpickled!",))


def test_state_files_start_with_the_format_name_and_version(tmp_path):
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    send(w, ticks(500), "b1")
    w.checkpoint()
    home = tmp_path / "p0"
    files = [home / CHECKPOINT, home / WAL] + list((home / SEGMENTS).iterdir())
    for path in files:
        data = path.read_bytes()
        assert data.startswith(fmt.MAGIC)
        size = int.from_bytes(data[8:12], "little")
        head = msgpack.unpackb(data[16:16 + size])
        assert head["version"] == fmt.VERSION and head["format"].startswith("raycep.")
    assert b"\x80\x05" not in (home / CHECKPOINT).read_bytes()[:16]


@pytest.mark.parametrize("target", [CHECKPOINT, WAL])
def test_a_pickle_is_refused_and_never_unpickled(tmp_path, target):
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    send(w, ticks(100), "b1")
    w.checkpoint()
    del w
    Boom.ran.clear()
    (tmp_path / "p0" / target).write_bytes(pickle.dumps({"state": Boom()}, protocol=5))
    with pytest.raises(RecoveryError, match="pickle"):
        worker(tmp_path)
    assert Boom.ran == []


def test_a_pickle_inside_a_valid_frame_is_not_unpickled(tmp_path):
    """A WAL record whose checksum holds but whose payload is a pickle: refused as a record
    that does not decode (not cut off silently, not unpickled)."""
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    del w
    Boom.ran.clear()
    with open(tmp_path / "p0" / WAL, "ab") as f:
        f.write(fmt.frame(pickle.dumps([2, "ingest", Boom(), None], protocol=5)))
    with pytest.raises(RecoveryError):
        worker(tmp_path)
    assert Boom.ran == []


def test_an_unknown_version_is_refused_with_a_clear_error(tmp_path):
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    send(w, ticks(100), "b1")
    w.checkpoint()
    del w
    path = tmp_path / "p0" / CHECKPOINT
    data = path.read_bytes()
    size = int.from_bytes(data[8:12], "little")
    rest = data[16 + size:]
    path.write_bytes(fmt.MAGIC + fmt.frame(msgpack.packb(
        {"format": fmt.CHECKPOINT_KIND, "version": 99})) + rest)
    with pytest.raises(RecoveryError, match="version 99; this raycep reads version 1"):
        worker(tmp_path)


def test_unknown_classes_and_extension_types_are_refused():
    evil = msgpack.ExtType(5, msgpack.packb(["__import__", {}]))
    with pytest.raises(RecoveryError, match="unknown class"):
        fmt.unpack(msgpack.packb([evil]))
    with pytest.raises(RecoveryError, match="unknown extension type"):
        fmt.unpack(msgpack.packb([msgpack.ExtType(42, b"")]))


def test_checkpoint_when_nothing_changed_writes_nothing(tmp_path):
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    send(w, ticks(2000), "b1")
    assert w.checkpoint() is not None
    home = tmp_path / "p0"
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in home.rglob("*")}
    figures = w.stats()["checkpoint"]
    assert w.checkpoint() is None and w.checkpoint() is None
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in home.rglob("*")}
    assert after == before
    now = w.stats()["checkpoint"]
    assert now["checkpoints"] == figures["checkpoints"] and now["skipped"] == 2
    assert now["totals"] == figures["totals"]


def test_a_checkpoint_writes_the_change_not_the_state(tmp_path):
    """With 20,000 events buffered, a checkpoint after 500 more writes about 500 events'
    worth of bytes, and the figures are in stats() (last and totals)."""
    w = worker(tmp_path, retain=10**6)
    send(w, ticks(20_000), "b0")
    first = w.checkpoint()
    assert first["events"] == 20_000 and w.stats()["buffered"] == 20_000
    send(w, ticks(500, start=20_000), "b1")
    second = w.checkpoint()
    assert second["events"] == 500 and not second["compacted"]
    assert second["bytes"] < first["bytes"] / 10
    stats = w.stats()["checkpoint"]
    assert stats["last_checkpoint"]["bytes"] == second["bytes"]
    assert stats["totals"]["bytes"] == first["bytes"] + second["bytes"]
    assert stats["totals"]["events"] == 20_500 and stats["checkpoints"] == 2
    assert stats["last_checkpoint"]["seconds"] >= 0


def test_restart_from_segments_gives_the_same_state(tmp_path):
    """Events from several segments, out-of-order ones, evicted ones and batch ids: the
    restarted worker has the same buffered events, remembers the batches, and a copy of an
    evicted event is still a duplicate."""
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    events = ticks(3000)
    for i in range(0, 3000, 500):
        send(w, events[i:i + 500], f"b{i}")
        w.checkpoint()
    late = Event("Stock", 29.0, {"symbol": "S1", "price": 99.0}, key="S1", id="late-one")
    send(w, [late], "late")                            # behind the clock, within the window
    w.checkpoint()
    send(w, ticks(10, start=3000), "tail")              # logged, not checkpointed
    want = sorted((e.type, e.ts, e.id) for e in w.engine.index.events())
    records = list(w.outbox)
    again = worker(tmp_path)
    assert again.recovery["from_checkpoint"] and again.recovery["replayed"] == 1
    assert sorted((e.type, e.ts, e.id) for e in again.engine.index.events()) == want
    assert list(again.outbox) == records
    assert send(again, events[:500], "b0")["redelivered"]
    ack = send(again, [events[0]], "copy")              # evicted long ago
    assert ack["duplicates"] == 1 and ack["events"] == 1


def test_segments_are_compacted_when_mostly_evicted(tmp_path, monkeypatch):
    import raycep.actors.recovery as recovery
    monkeypatch.setattr(recovery, "COMPACT_SLACK", 0)
    w = worker(tmp_path)
    w.add_query("pair", PAIR.replace("a.price", "a.price + 1000"))    # no match: small outbox
    for k in range(10):
        send(w, ticks(2000, start=2000 * k), f"b{k}")
        w.checkpoint()
    stats = w.stats()["checkpoint"]
    assert stats["totals"]["compactions"] >= 1
    assert len(list((tmp_path / "p0" / SEGMENTS).iterdir())) == stats["segments"] <= 3
    want = sorted((e.ts, e.id) for e in w.engine.index.events())
    again = worker(tmp_path)
    assert sorted((e.ts, e.id) for e in again.engine.index.events()) == want
    assert send(again, ticks(2000, start=0), "b0")["redelivered"]


def test_the_evicted_files_are_in_the_format_too(tmp_path):
    w = worker(tmp_path)
    w.add_query("pair", PAIR)
    send(w, ticks(3000), "b1")
    w.advance(100.0)
    send(w, ticks(10, start=10_001), "b2")
    w.checkpoint()
    files = sorted((tmp_path / "p0" / EVICTED).iterdir())
    assert files and all(f.read_bytes().startswith(fmt.MAGIC) for f in files)
    values = [v for f in files for v in fmt.read_records(str(f), fmt.EVICTED_KIND)[0]]
    assert sum(len(rows) for _, rows in values) >= 3000


def test_evicted_files_no_longer_remembered_are_removed_and_never_read_back(
        tmp_path, monkeypatch):
    """Each checkpoint writes the lists evicted since the one before to a file of its own;
    once the index remembers none of a file's events, the next checkpoint deletes it: the
    directory does not grow with the stream, no checkpoint reads a file back, and a
    restarted worker still recognises a copy of a remembered evicted event."""
    import raycep.actors.recovery as recovery
    w = worker(tmp_path)
    w.engine.index.remember_ids = 3000
    w.add_query("pair", PAIR.replace("a.price", "a.price + 1000"))    # no match
    reads = []
    real = recovery.read_records
    monkeypatch.setattr(recovery, "read_records",
                        lambda path, *a, **k: reads.append(path) or real(path, *a, **k))
    for k in range(12):                     # batch k: times 20k .. 20k + 19.99
        send(w, ticks(2000, start=2000 * k), f"b{k}")
        w.advance(20.0 * (k + 1))
        w.checkpoint()
    index = w.engine.index
    first, total = index.evicted_span()
    assert first > 0 and index.gone_lists == total      # lists forgotten: files to drop
    assert not [p for p in reads if EVICTED in p]
    files = list((tmp_path / "p0" / EVICTED).iterdir())
    assert 1 <= len(files) <= 4            # ~3,000 remembered of ~20,000 evicted
    copy = ticks(2000, start=2000 * 9)[-1]
    assert index.seen_before(copy) and not index.contains(copy)
    monkeypatch.undo()
    again = worker(tmp_path)
    ack = send(again, [copy], "copy")
    assert ack["duplicates"] == 1 and ack["events"] == 1


def test_the_single_evicted_file_of_the_earlier_layout_is_read_and_converted(tmp_path):
    """State written before evicted events got a file per checkpoint: one ``evicted`` file.
    A restarted worker reads the lists its checkpoint needs from it, recognises a copy of a
    remembered evicted event, and keeps them in the present layout (the old file gone)."""
    from raycep.actors.recovery import LEGACY_EVICTED
    w = worker(tmp_path)
    w.add_query("pair", PAIR.replace("a.price", "a.price + 1000"))    # no match
    for k in range(3):
        send(w, ticks(2000, start=2000 * k), f"b{k}")
        w.advance(20.0 * (k + 1))
        w.checkpoint()
    copy = ticks(2000, start=2000)[0]
    assert w.engine.index.seen_before(copy) and not w.engine.index.contains(copy)
    lists = tmp_path / "p0" / EVICTED
    records = [r for f in sorted(lists.iterdir())
               for r in fmt.read_records(str(f), fmt.EVICTED_KIND)[0]]
    fmt.write_file(str(tmp_path / "p0" / LEGACY_EVICTED), fmt.EVICTED_KIND, records)
    for f in lists.iterdir():
        f.unlink()
    again = worker(tmp_path)
    assert not (tmp_path / "p0" / LEGACY_EVICTED).exists()
    assert len(list(lists.iterdir())) == 1
    ack = send(again, [copy], "copy")
    assert ack["duplicates"] == 1 and ack["events"] == 1
    third = worker(tmp_path)                          # and from the present layout again
    assert send(third, [copy], "copy2")["duplicates"] == 1
