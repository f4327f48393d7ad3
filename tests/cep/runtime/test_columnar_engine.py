"""``Engine.process_columns`` (column batches in, Events made only for the rows that are used;
issue 14) gives exactly what ``process`` of each event in turn gives, on streams long enough to
fill and evict buffers many times: the same matches, retractions and late events in the same
order, the same statistics (the conjunct counters the planner reads) and the same buffered
events; for random queries, every strategy and disorder mode, keyed or not, attribute values of
every kind (ints beyond 2**53, floats, bools, text, missing), ties, out-of-order and duplicate
rows, and Events made or not made in any order."""
from __future__ import annotations

import re

import dataclasses
import math
import random
from unittest import mock

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
from raycep.cep.event import Event
from raycep.cep.lang import ast as A
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.disorder import DisorderSettings
from raycep.cep.store.index import ALL
from raycep.planner.local import PlannedEngine

from strategies import queries, query_text
from test_process_many import record, state

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


def long_stream(seed: int, n: int, keyed: bool, tidy: bool = False) -> list:
    """``n`` events over A-D with ties, odd attribute values, a few late and repeated rows
    (``tidy``: no ties, all in order, no copies)."""
    rng = random.Random(seed)
    events, ts = [], 0.0
    for j in range(n):
        ts += rng.choice([1, 1, 1, 2, 3] if tidy else [0, 0, 1, 1, 1, 2, 3]) * 0.5
        x = rng.randint(0, 5)
        roll = rng.random()
        if roll < 0.05:
            x = x + 0.5
        elif roll < 0.07:
            x = 2 ** 60 + x                       # beyond float64's exact integers
        elif roll < 0.08:
            x = bool(x % 2)
        elif roll < 0.09:
            x = "p"
        attrs = {"x": x, "y": rng.randint(0, 3), "k": rng.randint(0, 2),
                 "s": rng.choice(["p", "q", "r", 1])}
        if rng.random() < 0.05:
            del attrs["x"]
        if rng.random() < 0.05:
            del attrs["y"]
        events.append(Event(rng.choice("AAABBBCDDDDD"), ts, attrs, key=attrs["k"] if keyed else None,
                            id=f"e{j:05d}" if rng.random() < 0.5 else None))
    arrivals = list(events)
    if tidy:
        return arrivals
    for _ in range(n // 50):                      # a few late rows and copies
        k = rng.randrange(1, n)
        back = rng.randint(1, 6)
        arrivals.insert(max(0, k - back), arrivals.pop(k))
    for _ in range(n // 100):
        k = rng.randrange(n)
        ev = arrivals[k]
        arrivals.insert(min(n, k + rng.randint(1, 12)),
                        Event(ev.type, ev.ts, dict(ev.attrs), ev.key, ev._id))
    return arrivals


def cut(rng: random.Random, events: list) -> list:
    out, k = [], 0
    while k < len(events):
        size = rng.choice([1, 2, 7, 40, 150, 600])
        out.append(events[k:k + size])
        k += size
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), keyed=st.booleans(), seed=st.integers(0, 2 ** 20),
       evict_every=st.sampled_from([3, 64, 4096]), tidy=st.booleans())
def test_process_columns_equals_process_of_each_event_on_long_streams(data, keyed, seed,
                                                                       evict_every, tidy):
    setup = []
    for k in range(data.draw(st.integers(1, 3), label="queries")):
        q, p = data.draw(queries(allow_kleene=False), label=f"query {k}")
        setup.append((dataclasses.replace(q, strategy=data.draw(
            st.sampled_from(A.STRATEGIES), label="strategy")), p,
            data.draw(st.sampled_from(["optimistic"] * 4 + ["pessimistic"]), label="mode")))
    arrivals = long_stream(seed, 1200, keyed, tidy)
    pieces = cut(random.Random(seed), arrivals)
    note(f"{[query_text(q) for q, _, _ in setup]} modes={[m for _, _, m in setup]}")
    results = []
    with mock.patch.object(raycep.cep.runtime.engine, "EVICT_EVERY", evict_every):
        for columns in (False, True):
            eng = Engine(key_attr="k" if keyed else None, disorder=DisorderSettings(min_slack=3))
            for k, (q, p, mode) in enumerate(setup):
                eng.add_query(q, name=f"q{k}", params=p or None, mode=mode)
            out = []
            for piece in pieces:
                if columns:
                    batch = ColumnBatch.from_events(piece)
                    if len(piece) > 3:                # some rows made before, in any order
                        for r in random.Random(len(piece)).sample(range(len(piece)), 3):
                            batch.event(r)
                    out += eng.process_columns(batch)
                else:
                    for ev in piece:
                        out += eng.process(ev)
            mid = state(eng)
            out += eng.advance(math.inf)
            results.append(([record(x) for x in out], mid, state(eng)))
    assert results[0][1] == results[1][1]
    assert results[0][2] == results[1][2]
    assert results[0][0] == results[1][0]


def test_planned_process_columns_replans_at_the_same_events():
    arrivals = long_stream(7, 3000, keyed=False)
    outs = []
    for columns in (False, True):
        eng = PlannedEngine(Engine(), check_every=97)
        eng.add_query("PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x > c.x "
                      "WITHIN 5 seconds", name="q", planner="adaptive:GREEDY")
        out = []
        for piece in cut(random.Random(1), arrivals):
            out += eng.process_columns(ColumnBatch.from_events(piece)) if columns \
                else eng.process_many(piece)
        out += eng.advance(math.inf)
        outs.append(([record(x) for x in out], eng.history, eng.rates.rates(),
                     eng.engine.stats()))
    assert outs[0][0], "the query should match"
    assert outs[0] == outs[1]


def test_only_the_rows_a_query_reads_become_events():
    """A bulk run of non-trigger rows is indexed without Events; the rows a step selects
    column-wise and the trigger are made, the others are not."""
    eng = Engine()
    eng.add_query("PATTERN SEQ(A a, B b) WHERE a.x > b.x WITHIN 100 seconds")
    rows = [Event("A", float(t), {"x": t % 10}) for t in range(1, 200)]
    batch = ColumnBatch.from_events(rows + [Event("B", 250.0, {"x": 8})])
    out = eng.process_columns(batch)
    assert sorted(m.bindings["a"].ts for m in out) == [159.0, 169.0, 179.0, 189.0, 199.0]
    made = [r for r, ev in enumerate(batch.objs) if ev is not None]
    assert made == [158, 168, 178, 188, 198, 199]
    # the matches hold the batch's Events, and the index hands out the same objects
    assert [m.bindings["a"] for m in out] == [batch.objs[r] for r in made[:-1]]
    assert all(m.bindings["a"] is batch.objs[int(m.bindings["a"].ts) - 1] for m in out)
    buffered = list(eng.index.buffer(ALL, "A"))
    assert len(buffered) == 199 and all(ev is batch.objs[r] for r, ev in enumerate(buffered))


def read_as_events(monkeypatch):
    """``raycep local`` reads the same runs, made into Events (no column batches)."""
    from raycep.cep.io import sources
    from raycep.gateway.cli import local
    monkeypatch.setattr(local, "iter_batch_runs", lambda *a, **k: (
        r.events() if r.__class__ is not list else r for r in sources.iter_batch_runs(*a, **k)))


def summary_counts(stdout: str) -> dict:
    """The summary (last stdout line) of ``raycep local`` without its timings and memory."""
    import json
    summary = json.loads(stdout.splitlines()[-1])
    return {k: v for k, v in summary.items()
            if "second" not in k and "_s" not in k and k not in ("peak_rss_mb", "bulk_share")}


def stderr_counts(stderr: str) -> list:
    """The stderr lines of ``raycep local`` that depend on the input only: without the
    throughput, how many triggers went bulk, the table of evaluation times, or a plan's
    estimated cost (the screen of Kleene runs, cep.evaluation.kleene_screen, counts no
    condition for the triggers it rules out, so the statistics behind the cost differ)."""
    return [re.sub(r"estimated cost [-0-9.e+inf]+", "estimated cost", line.split("; triggers: ")[0])
            for line in stderr.splitlines()
            if "events/s" not in line and not line.startswith("  ")
            and "evaluation time by query" not in line]


def test_raycep_local_writes_the_same_bytes_from_column_batches_as_from_events(tmp_path,
                                                                                monkeypatch,
                                                                                capsys):
    """End to end through ``raycep local``: a file read in bulk (column batches, Events made
    only where used) gives byte for byte the matches, late events and summary counts of the
    same file read as Events; several queries, ties, late rows, copies and a bad row."""
    from raycep.cep.io import files
    from raycep.gateway import cli

    rows = ["type,ts,x,y,k,s"]
    for ev in long_stream(11, 4000, keyed=False):
        a = ev.attrs
        rows.append(",".join([ev.type, repr(ev.ts)] + [
            "" if a.get(n) is None else str(a[n]) for n in ("x", "y", "k", "s")]))
    rows.insert(2500, "A,not-a-time,1,2,3,p")
    path = tmp_path / "events.csv"
    path.write_text("\n".join(rows) + "\n")
    queries = tmp_path / "q.sase"
    queries.write_text(
        "NAME seq\nPATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x > c.x WITHIN 4 seconds;\n"
        "NAME neg\nPATTERN SEQ(A a, ~D d, C c) WHERE a.y = c.y WITHIN 3 seconds;\n"
        "NAME keyed\nPATTERN SEQ(B b, D d) WHERE b.x >= d.x AND b.k = d.k WITHIN 2 seconds\n")
    monkeypatch.setattr(files, "ROW_READ_BYTES", 0)                # read in bulk
    outs = []
    for columns in (True, False):
        if not columns:
            read_as_events(monkeypatch)
        out, late = tmp_path / f"m{columns}.jsonl", tmp_path / f"l{columns}.jsonl"
        status = cli.main(["local", "--query", str(queries), "--events", str(path),
                           "--out", str(out), "--late-out", str(late), "--skip-bad-rows",
                           "--max-slack", "0.5"])
        captured = capsys.readouterr()
        assert status == 0, captured.err
        outs.append((out.read_bytes(), late.read_bytes(), summary_counts(captured.out)))
    assert outs[0][2]["matches"] > 100 and outs[0][2]["late_events"] > 0
    assert outs[0][2]["duplicates"] > 0 and outs[0][2]["retractions"] > 0
    assert outs[0] == outs[1]


def test_queries_that_all_read_per_key_index_rows_per_key_in_bulk():
    """Only partitioned queries: no all-partitions buffers (keep_all off), the rows go to
    their key's buffers in bulk; the same results as event by event, in order and late."""
    for tidy in (True, False):
        arrivals = long_stream(23, 3000, keyed=True, tidy=tidy)
        outs = []
        for columns in (False, True):
            eng = Engine(key_attr="k", disorder=DisorderSettings(min_slack=3))
            eng.add_query("PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.x < b.x WITHIN 5 seconds",
                          name="abc")
            eng.add_query("PATTERN SEQ(D d, A a) WHERE [k] AND d.y >= a.y WITHIN 2 seconds",
                          name="da")
            assert not eng.index.keep_all
            out = []
            for piece in cut(random.Random(2), arrivals):
                out += eng.process_columns(ColumnBatch.from_events(piece)) if columns \
                    else [m for ev in piece for m in eng.process(ev)]
            mid = state(eng)
            out += eng.advance(math.inf)
            outs.append(([record(x) for x in out], mid, state(eng)))
        assert len(outs[0][0]) > 100
        assert outs[0] == outs[1]
