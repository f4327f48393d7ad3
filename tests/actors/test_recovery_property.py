"""Crash recovery of a partition actor (actors/recovery.py, PartitionWorker(checkpoint=...)):
a worker that crashes and is rebuilt from its checkpoint directory delivers exactly what an
undisturbed worker delivers.

A random *run*: 1-4 queries (random queries with every selection strategy, Kleene, negation,
keyed ``[k]`` queries and forced plan orders, or variants of one query that the engine
evaluates as one shared group), a stream fed out of order with duplicate events (the
generators of test_disorder / test_sharing), a disorder mode and DisorderSettings (a slack that
covers the delays, or a learnt threshold, so that some events are late), batches of 1-8 events
from one or two sources (sometimes pipelined with ``after``, sometimes a batch sent twice), a
reader draining the outbox after some batches (sometimes a page at a time), queries added and
removed and plans installed mid-stream, a watermark advance mid-stream or at the end, and a
checkpoint every 1-50 events. Then 0-3 crashes, in-process (the worker object is dropped without
any close and a new one built on the same directory), each of one of these kinds:

* after an operation answered (a batch, a drain, ...): sometimes the sender sends its last batch
  again (it cannot know the batch was taken), sometimes the crash happened after a checkpoint
  was renamed into place but before the log was restarted (the old log is still there, and a
  torn ``checkpoint.tmp`` lies beside it);
* during an operation: its log record is written only up to a random length (a torn record,
  possibly the whole record: the crash came after the write, before the answer), and the
  caller retries the operation on the new worker;
* either way, sometimes a few random bytes are appended to the log before the restart.

Property: the multiset of records the reader receives over the whole run (all drains, before
and after crashes) equals that of the same run without crashes and without a checkpoint
directory; no record id (with its retracted flag) is delivered more often; every crash is one
recovery; the queries and plans at the end are the same. (The record of a late event sent
twice is delivered twice without crashes too: late records are compared by count.)
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from collections import Counter
from types import SimpleNamespace

import orjson
import hypothesis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from raycep.actors.partition import PartitionWorker, WorkerSettings
from raycep.actors.recovery import CHECKPOINT, WAL, CheckpointSettings
from raycep.cep.event import Event
from raycep.cep.io.codec import encode_batch
from raycep.cep.lang import ast as A
from raycep.cep.lang.parser import parse_query
from raycep.cep.store.disorder import DisorderSettings

from strategies import events_text, queries, query_and_stream, query_text
from test_disorder import disorder, max_delay_of
from test_sharing import Member, variant_sets

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
MODES = ("optimistic", "pessimistic")
PARTITION = "p0"


# =========================================================================== drawing

def positive(query: A.Query) -> list:
    """The names of the query's positive variables (what a plan order permutes)."""
    return [v.name for v in A.event_vars(query.pattern) if not v.negated]


@dataclasses.dataclass
class Crash:
    at: int                       # index of the operation it happens before / during
    during: bool                  # torn log record of operation ``at``, then a retry
    keep: float                   # the fraction of that record written
    resend: bool                  # after an ingest: the sender sends that batch again
    stale_log: bool               # checkpoint renamed into place, the log not restarted yet
    garbage: bytes | None         # appended to the log before the restart

    def text(self) -> str:
        how = (f"during op {self.at} (keep {self.keep:.2f} of its record)" if self.during
               else f"before op {self.at}")
        extra = [w for w, on in (("resend", self.resend), ("stale log", self.stale_log))
                 if on]
        if self.garbage is not None:
            extra.append(f"garbage {self.garbage!r}")
        return how + (f" [{', '.join(extra)}]" if extra else "")


BUSY = ("PATTERN SEQ(A a, B b) WITHIN 4 seconds",
        "PATTERN SEQ(A a, B b) WHERE [k] AND a.x <= b.x + 2 WITHIN 5 seconds",
        "PATTERN SEQ(A a, ~C c, B b) WITHIN 4 seconds",
        "PATTERN SEQ(A a, ~B n) WITHIN 3 seconds",
        "PATTERN AND(A a, C c) WITHIN 2 seconds",
        "PATTERN SEQ(A a, B+ b[], C c) WHERE b[i].x >= b[i-1].x WITHIN 3 seconds")

#: shapes the worker evaluates in bulk (variants differ in C and W; [k] when keyed)
BULK_SHAPES = ("PATTERN SEQ(A a, B b) WHERE {k}a.x < C AND b.x > a.x WITHIN W seconds",
               "PATTERN SEQ(A a, B b, C c) WHERE {k}b.x < a.x + C AND c.x > b.x "
               "WITHIN W seconds",
               "PATTERN SEQ(A a, ~C n, B b) WHERE {k}b.x > a.x - C WITHIN W seconds")


@st.composite
def bulk_sets(draw, keyed: bool):
    """2-4 variants of one of BULK_SHAPES (one group), sometimes with a plan order forced,
    and an in-order stream of 20-80 events of types A-C."""
    shape = draw(st.sampled_from(BULK_SHAPES), label="shape")
    text = shape.replace("{k}", "[k] AND " if keyed else "")
    members = []
    for v in range(draw(st.integers(2, 4), label="variants")):
        q = parse_query(text.replace("C AND", f"{draw(st.integers(0, 9), label='C')} AND", 1)
                        .replace(" - C ", f" - {draw(st.integers(0, 3), label='C')} ")
                        .replace("W seconds", f"{draw(st.sampled_from([2, 4, 6]))} seconds"))
        order = tuple(draw(st.permutations(positive(q)), label="order")) \
            if draw(st.integers(0, 3), label="forced order?") == 0 else None
        members.append(Member(f"v{v}", q, {}, order, None))
    ts, events = 0.0, []
    for i in range(draw(st.integers(20, 80), label="events")):
        ts += draw(st.sampled_from([0.25, 0.5, 1.0, 1.5]), label="gap")   # (a tie: per trigger)
        k = f"k{draw(st.integers(0, 2), label='key')}"
        events.append(Event(draw(st.sampled_from("ABC"), label="type"), ts,
                            {"x": draw(st.integers(0, 9), label="x"), "k": k},
                            key=k if keyed else None, id=f"e{i}"))
    return members, events


GARBAGE = st.one_of(st.none(), st.binary(min_size=1, max_size=24),
                    st.just(b"\0" * 8))     # zeros a file system left after a power loss


@st.composite
def recovery_runs(draw, bulk: bool = False):
    """A random run (module docstring). ``bulk``: one the worker evaluates in bulk where it
    can (in order, column batches of 5-40 events, optimistic, variant sets in a group): its
    log keeps those matches by identity and a replay must give them again, in order."""
    keyed = draw(st.booleans(), label="keyed")
    if bulk:
        members, events = draw(bulk_sets(keyed), label="bulk set")
        arrivals, slack = events, 0.0
    elif draw(st.integers(0, 2), label="variant set?") == 0:
        # variants of one query: evaluated as one shared group (test_sharing)
        case = draw(variant_sets(keyed=keyed, out_of_order=True, allow_restore=False),
                    label="variant set")
        members = case.members[:4]           # their added/removed are not used here
        events, arrivals, slack = case.events, case.arrivals, case.slack
    else:
        first, params, events = draw(query_and_stream(keyed=keyed), label="first query")
        drawn = [(first, params)]
        for _ in range(draw(st.integers(0, 3), label="more queries")):
            drawn.append(draw(queries(allow_kleene=False, equivalence=True if keyed else None),
                              label="query"))
        members = []
        for k, (q, p) in enumerate(drawn):
            q = dataclasses.replace(q, strategy=draw(st.sampled_from(A.STRATEGIES),
                                                     label="strategy"))
            order = (tuple(draw(st.permutations(positive(q)), label="order"))
                     if draw(st.booleans(), label="forced order?") else None)
            mode = draw(st.sampled_from((None,) + MODES), label="query mode")
            members.append(Member(f"q{k}", q, p, order, mode))
        slack = max_delay_of(SimpleNamespace(draw=draw), first, params)
        arrivals = disorder(SimpleNamespace(draw=draw), events, slack)
    if draw(st.integers(0, 2), label="a busy query?"):
        # random queries often match nothing in 25 events: one that often does
        text = draw(st.sampled_from(BUSY[:2] if bulk else BUSY), label="busy query")
        busy = Member("busy", parse_query(text), {}, None,
                      draw(st.sampled_from((None,) + MODES), label="busy mode"))
        members = members[:3] + [busy]
    if bulk or draw(st.booleans(), label="slack covers the delays?"):
        disorder_settings = DisorderSettings(min_slack=slack)
    else:                          # a learnt threshold: some events are late
        disorder_settings = DisorderSettings(
            alpha=draw(st.sampled_from([1.0, 2.5]), label="alpha"),
            max_slack=draw(st.sampled_from([None, 2.0, 5.0]), label="max slack"))

    # batches, from one or two sources
    size = draw(st.integers(5, 40) if bulk else st.integers(1, 8), label="batch size")
    chunks = [arrivals[a:a + size] for a in range(0, len(arrivals), size)]
    n_sources = draw(st.integers(1, 2), label="sources")
    sources = [draw(st.sampled_from(["s0", "s1"][:n_sources]), label="source") for _ in chunks]
    pipelined = draw(st.booleans(), label="after?")
    # rows, or columns (evaluated in bulk: the log keeps those matches by identity and a
    # replay gives them again)
    schema = 2 if bulk else draw(st.sampled_from([1, 2]), label="batch schema")
    batches, previous = [], {}
    for k, (chunk, source) in enumerate(zip(chunks, sources)):
        bid = f"b{k}"
        batches.append((encode_batch(chunk, source, bid, schema),
                        previous.get(source) if pipelined else None))
        previous[source] = bid
    nb = len(batches)

    # when queries come and go (positions: before batch k)
    added = [0] + [draw(st.sampled_from([0, 0, 0, *range(1, nb + 1)]), label="added before")
                   for _ in members[1:]]
    removed = [None] + [
        draw(st.one_of(st.none(), st.none(), st.integers(a + 1, nb)), label="removed before")
        if a < nb else None for a in added[1:]]
    ops = [("add", i) for i, a in enumerate(added) if a == 0]
    initial = len(ops)
    version = 0
    ts = [e.ts for e in arrivals]
    for k in range(nb + 1):
        ops += [("remove", i) for i, r in enumerate(removed) if r == k]
        if k:
            ops += [("add", i) for i, a in enumerate(added) if a == k]
        present = [i for i in range(len(members))
                   if added[i] <= k and (removed[i] is None or removed[i] > k)]
        if present and draw(st.integers(0, 5), label="set_plan?") == 0:
            i = draw(st.sampled_from(present), label="plan of")
            order = (tuple(draw(st.permutations(positive(members[i].query)), label="plan order"))
                     if draw(st.integers(0, 4), label="Tree-NFA plan?") else None)
            version += 1
            ops.append(("plan", i, order, draw(st.sampled_from([version, None]),
                                               label="version")))
        if k == nb:
            break
        ops.append(("ingest", k))
        if k and draw(st.integers(0, 9), label="send a batch again?") == 0:
            ops.append(("ingest", draw(st.integers(0, k), label="which")))
        if draw(st.integers(0, 2), label="drain?"):
            ops.append(("drain", draw(st.sampled_from([1, 2, 3, 10_000]), label="limit")))
        if ts and draw(st.integers(0, 14), label="advance mid-stream?") == 0:
            ops.append(("advance", draw(st.sampled_from(ts), label="mid watermark") - 1.0))
    if ts and draw(st.booleans(), label="advance at the end?"):
        top = max(ts)
        ops.append(("advance", draw(st.sampled_from([math.inf, top, top - 1.0, ts[len(ts) // 2]]),
                                    label="watermark")))

    crashes = []
    n_crashes = min(draw(st.sampled_from([1, 1, 2, 2, 3, 0]), label="crashes"),
                    len(ops) - initial + 1)                 # as many as there are spots
    spots = sorted(draw(st.lists(st.integers(initial, len(ops)), min_size=n_crashes,
                                 max_size=n_crashes, unique=True), label="crash points"))
    for at in spots:
        during = at < len(ops) and draw(st.booleans(), label="during an operation?")
        crashes.append(Crash(
            at, during,
            keep=draw(st.floats(0, 1), label="kept") if during else 1.0,
            resend=not during and ops[at - 1][0] == "ingest"
            and draw(st.booleans(), label="resend?"),
            stale_log=not during and draw(st.integers(0, 3), label="stale log?") == 0,
            garbage=draw(GARBAGE, label="garbage")))
    return SimpleNamespace(
        keyed=keyed, members=members, events=events, arrivals=arrivals, batches=batches,
        disorder=disorder_settings,
        mode="optimistic" if bulk else draw(st.sampled_from(MODES), label="worker mode"),
        sharing=draw(st.integers(0, 3), label="sharing off?") != 0,
        every=draw(st.integers(20, 200) if bulk else st.one_of(st.integers(1, 8),
                                                               st.integers(1, 50)),
                   label="checkpoint every"),     # (bulk: long logs to replay)
        ops=ops, crashes=crashes)


def describe(case) -> str:
    lines = [f"{m.name} order={m.order} mode={m.mode} params={m.params}:\n{query_text(m.query)}"
             for m in case.members]
    lines.append(f"keyed={case.keyed} mode={case.mode} sharing={case.sharing} "
                 f"{case.disorder} checkpoint every {case.every} events")
    lines.append("events:\n" + events_text(case.events))
    lines.append(f"arrivals: {[e.id for e in case.arrivals]}")
    lines.append(f"{len(case.batches)} batches; ops: {case.ops}")
    lines.append("crashes: " + "; ".join(c.text() for c in case.crashes))
    return "\n".join(lines)


# =========================================================================== running

class Died(Exception):
    """The worker's process ended in the middle of a log write."""


class TornLog:
    """Stands in for the worker's open log file: the next record (what is written up to the
    next flush) is written only up to a fraction of its bytes (flushed, as the operating
    system would keep them), then the process dies."""

    def __init__(self, f, keep: float, whole: bool):
        self.f, self.keep, self.whole = f, keep, whole
        self.pending = b""

    def write(self, data: bytes):
        self.pending += data

    def flush(self):
        data = self.pending
        if not data:
            return self.f.flush()
        n = min(int(self.keep * (len(data) + 1)), len(data) if self.whole else len(data) - 1)
        self.f.write(data[:n])
        self.f.flush()
        raise Died(f"{n} of {len(data)} bytes written")

    def fileno(self):
        return self.f.fileno()

    def close(self):
        self.f.close()


class Reader:
    """The gateway: drains the outbox, acknowledging what it received."""

    def __init__(self):
        self.ack = 0
        self.received: list = []

    def drain(self, worker, limit: int = 10_000) -> dict:
        page = worker.drain(self.ack, limit)
        self.received += page["records"]
        self.ack = page["last"]
        return page


def new_worker(case, directory: str | None) -> PartitionWorker:
    durable = None if directory is None else CheckpointSettings(
        directory, every_events=case.every, every_seconds=3600.0)
    return PartitionWorker(PARTITION, "k" if case.keyed else None,
                           worker=WorkerSettings(outbox=True, mode=case.mode,
                                                 sharing=case.sharing),
                           disorder=case.disorder, checkpoint=durable)


def apply(worker, case, op, reader: Reader):
    kind = op[0]
    if kind == "add":
        m = case.members[op[1]]
        worker.add_query(m.name, m.query, m.params or None, m.order, m.mode)
    elif kind == "remove":
        worker.remove_query(case.members[op[1]].name)
    elif kind == "plan":
        worker.set_plan(case.members[op[1]].name, op[2], op[3])
    elif kind == "ingest":
        return worker.ingest(*case.batches[op[1]])
    elif kind == "drain":
        reader.drain(worker, op[1])
    elif kind == "advance":
        worker.advance(op[1])
    else:
        raise AssertionError(op)


def restart(worker, case, crash: Crash, directory: str) -> PartitionWorker:
    """Drop ``worker`` as a crash would (no close, no final checkpoint) and build its
    successor on the same directory."""
    home = os.path.join(directory, PARTITION)
    if crash.stale_log:
        # the crash came after the new checkpoint was renamed into place, before the log
        # was restarted: the records it holds are also in the checkpoint
        with open(os.path.join(home, WAL), "rb") as f:
            old_log = f.read()
        worker.checkpoint()
        with open(os.path.join(home, WAL), "wb") as f:
            f.write(old_log)
        with open(os.path.join(home, CHECKPOINT + ".tmp"), "wb") as f:
            f.write(b"half a checkpoint")
    del worker
    if crash.garbage is not None:
        with open(os.path.join(home, WAL), "ab") as f:
            f.write(crash.garbage)
    successor = new_worker(case, directory)
    assert successor.recovery is not None, "the restarted worker restored nothing"
    return successor


def run(case, directory: str | None = None):
    """Apply the operations (with the crashes when ``directory`` is given), then drain the
    outbox to the end: (records received, the last worker, crashes, recoveries seen)."""
    worker = new_worker(case, directory)
    reader = Reader()
    crashes = {c.at: c for c in case.crashes} if directory is not None else {}
    died, seen = 0, []

    def crash_now(crash):
        nonlocal worker, died
        old, worker = worker, None
        worker = restart(old, case, crash, directory)
        died += 1
        seen.append(worker.recovery)

    for at, op in enumerate(case.ops + [None]):
        crash = crashes.get(at)
        if crash is not None and not crash.during:
            crash_now(crash)
            if crash.resend:
                answer = apply(worker, case, case.ops[at - 1], reader)
                assert answer["redelivered"], "the restarted worker forgot an accepted batch"
        if op is None:
            break
        if crash is not None and crash.during:
            durable = worker.durable
            log_file = durable._wal or open(os.path.join(durable.directory, WAL), "ab")
            # the record is torn, or whole (the crash came before the answer); a change that
            # cannot be made twice (add, remove, a plan without a version) is retried only
            # after a torn record
            whole = op[0] in ("ingest", "drain", "advance") or (op[0] == "plan"
                                                                and op[3] is not None)
            durable._wal = TornLog(log_file, crash.keep, whole)
            try:
                apply(worker, case, op, reader)
            except Died:
                crash_now(crash)
                apply(worker, case, op, reader)          # the caller tries again
            else:                                        # the operation logged nothing:
                worker.durable._wal = log_file           # the crash comes after it
                crash_now(crash)
            continue
        apply(worker, case, op, reader)
    while True:
        page = reader.drain(worker)
        if not page["records"]:
            assert page["pending"] == 0
            break
    return reader.received, worker, died, seen


def ids(records: list) -> Counter:
    return Counter((r["id"], r.get("retracted", False)) for r in map(orjson.loads, records))


# =========================================================================== property

@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(case=recovery_runs())
def test_recovered_worker_delivers_what_an_undisturbed_worker_delivers(case):
    check_run(case)


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(case=recovery_runs(bulk=True))
def test_recovered_worker_replays_the_matches_it_found_in_bulk_in_their_order(case):
    """The same property for runs evaluated in bulk: their log keeps matches by identity."""
    check_run(case)


def check_run(case) -> None:
    """The property of the module docstring for one drawn run."""
    note(describe(case))
    expected, reference, _, _ = run(case)
    directory = tempfile.mkdtemp(prefix="raycep-recovery-")
    try:
        got, worker, died, seen = run(case, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    note(f"recoveries: {seen}")
    hypothesis.event(f"crashes: {died}")
    if seen:
        hypothesis.event("first restart from a checkpoint" if seen[0]["from_checkpoint"]
                         else "first restart from the log alone")
        hypothesis.event("a restart replayed logged changes"
                         if any(r["replayed"] for r in seen) else "no restart replayed")
    hypothesis.event("records delivered" if expected else "no record")

    missing = Counter(expected) - Counter(got)
    extra = Counter(got) - Counter(expected)
    assert not missing and not extra, (
        f"missing {[orjson.loads(r) for r in missing.elements()]}\n"
        f"extra {[orjson.loads(r) for r in extra.elements()]}")
    # a match or retraction once; a late event sent twice is reported late twice, also
    # without crashes, but not more often with them
    want, have = ids(expected), ids(got)
    twice = {k: n for k, n in have.items()
             if n > 1 and (not k[0].startswith("late:") or n > want[k])}
    assert not twice, f"delivered twice: {twice}"
    assert died == len(case.crashes)
    assert worker.stats()["recoveries"] == died
    if case.crashes:
        assert worker.stats()["recoveries"] >= 1
    assert worker.queries() == reference.queries()
    assert worker.stats()["plans"] == reference.stats()["plans"]


# =========================================================================== found bugs

def _ev(etype, ts, eid):
    return Event(etype, float(ts), {}, id=eid)


def test_zero_filled_log_tail_is_ignored():
    """A log whose tail is zeros (a file extended by a crash before its data reached the disk,
    as ext4 and other file systems can leave it after a power loss): the zeros are a torn
    record, never answered, and must be cut off like any other."""
    directory = tempfile.mkdtemp(prefix="raycep-recovery-")
    try:
        options = dict(worker=WorkerSettings(outbox=True),
                       checkpoint=CheckpointSettings(directory, every_events=1000))
        w = PartitionWorker(PARTITION, **options)
        w.add_query("q", "PATTERN SEQ(A a, B b) WITHIN 5")
        w.ingest(encode_batch([_ev("A", 1, "a"), _ev("B", 2, "b")], "s", "b1"))
        expected = w.drain(0)["records"]
        del w
        with open(os.path.join(directory, PARTITION, WAL), "ab") as f:
            f.write(b"\0" * 8)
        w = PartitionWorker(PARTITION, **options)
        assert w.recovery is not None and w.drain(0)["records"] == expected
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_evicted_event_ids_survive_a_restart():
    """A copy of an event that was evicted before the last checkpoint is a duplicate after a
    restart too (the checkpoint holds the worker's dedup memory), as without the crash."""
    def run(crash: bool):
        directory = tempfile.mkdtemp(prefix="raycep-recovery-")
        try:
            opts = {"worker": WorkerSettings(outbox=True)}
            if crash:
                opts.update(checkpoint=CheckpointSettings(directory, every_events=1))
            w = PartitionWorker(PARTITION, **opts)
            w.add_query("q", "PATTERN SEQ(A a, A b) WITHIN 1 seconds")
            w.ingest(encode_batch([_ev("A", 0, "e0")], "s", "b1"))
            w.advance(2.0)                                          # e0 is evicted
            w.ingest(encode_batch([_ev("A", 3, "e1")], "s", "b2"))  # checkpoint
            if crash:
                del w
                w = PartitionWorker(PARTITION, **opts)
                assert w.recovery is not None
            w.ingest(encode_batch([_ev("A", 0, "e0")], "s", "b3"))  # e0 sent again
            return w.drain(0)["records"], w.stats()["duplicates"]
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    assert run(False) == ([], 1)
    assert run(True) == ([], 1)
