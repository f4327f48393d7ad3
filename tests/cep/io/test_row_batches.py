"""Column batches of row-read files, and the column batch's cheaper paths.

A CSV or JSON Lines file of more than ``cep.io.sources.ROW_BATCH_BYTES`` (64 KiB) and at most
``ROW_READ_BYTES`` (512 KiB) is read without pyarrow and comes from ``iter_batch_runs`` as
column batches (a simple CSV block typed column by column, tests/cep/io/test_csv_columns.py; anything
else as ``ColumnBatch.from_events(events, keep=True)`` of the very Events the row reader
made), so ``raycep local`` evaluates it in bulk with the same output. Beyond
512 KiB the CSV reader's batches take a few rows' values straight from plain int64/float64
Arrow columns (``batch.events(rows)``) and index types from Arrow's dictionary codes
(``groups``, ``rows_of``); ``RateTracker.observe_runs`` keeps in-order times as they are.
Each is compared with a path that does not use the feature."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
from raycep.cep.errors import IngestError
from raycep.cep.event import ABSENT, EXACT, Event, kind_of, trusted_event
from raycep.cep.io import files, sources
from raycep.cep.io.cells import parse_cell
from raycep.cep.store.batch import ColumnBatch
from raycep.gateway.cli.local import FIRST_PLAN_EVENTS
from raycep.planner.stats import RateTracker

from test_bulk import patched
from test_columnar_engine import stderr_counts, summary_counts

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
ROOT = Path(__file__).resolve().parents[3]
KIB = 1024


# --------------------------------------------------------------------------- helpers

def content(ev: Event) -> tuple:
    """An Event's id, type, time, key and attributes in order, each value with its type."""
    assert ev.__class__ is Event
    return (ev.id, ev.type, repr(ev.ts), repr(ev.key),
            [(k, type(v).__name__, repr(v)) for k, v in ev.attrs.items()])


def batch_runs(path, **kw) -> list:
    return list(sources.iter_batch_runs(path, **kw))


def event_runs(path, **kw) -> list:
    return list(sources.iter_event_runs(path, **kw))


def cell(rng: random.Random, kind: str) -> str:
    """A CSV cell of a column of ``kind``: i(nt, up to 2**62), f(loat), s(tring),
    b(oolean), e(mpty or int: absent cells), m(ixed kinds)."""
    if kind == "i":
        return str(rng.choice([rng.randint(-9, 9), rng.randint(-2 ** 62, 2 ** 62)]))
    if kind == "f":
        return repr(rng.choice([rng.uniform(-1e3, 1e3), -0.0, 0.5, 1e-300, 2.0 ** 60]))
    if kind == "s":
        return rng.choice(["p", "q", "hello world", " padded "])
    if kind == "b":
        return rng.choice(["true", "false", "TRUE", "False"])
    if kind == "e":
        return rng.choice(["", "", "3", "-7"])
    return rng.choice(["1", "2.5", "x", "true", "", "1e3", "-0", str(2 ** 60)])


def write_csv(path: Path, n: int, kinds: str, seed: int = 0, ids: bool = False,
              key: bool = False, types: str = "ABCD", bad: dict | None = None) -> Path:
    """``n`` rows with a column per kind of ``kinds`` (see ``cell``), times increasing by
    0.5; ``ids``: an id column (some cells empty: derived ids); ``key``: a key column ``k``;
    ``bad``: ``{row: line text}`` lines put in place of rows."""
    rng = random.Random(seed)
    head = ["type", "ts"] + (["id"] if ids else []) + (["k"] if key else []) + \
        [f"c{j}{kind}" for j, kind in enumerate(kinds)]
    rows = [",".join(head)]
    for j in range(n):
        if bad and j in bad:
            rows.append(bad[j])
            continue
        cells = [rng.choice(types), repr(1.0 + j * 0.5)]
        if ids:
            cells.append(rng.choice(["", f"id{j}"]))
        if key:
            cells.append(str(rng.randint(0, 3)))
        cells += [cell(rng, kind) for kind in kinds]
        rows.append(",".join(cells))
    path.write_text("\n".join(rows) + "\n")
    return path


def json_line(rng: random.Random, j: int) -> str:
    """A JSON object with attributes of every kind in a random order, some absent, some
    under ``attrs``, sometimes an id and a key."""
    attrs = {"x": rng.randint(-5, 9), "y": rng.uniform(-1, 1), "s": rng.choice(["p", "q"]),
             "b": rng.choice([True, False]), "big": 2 ** 62 + j, "n": None, "l": [1, "two"],
             "mixed": rng.choice([1, 2.5, "x", False])}
    names = list(attrs)
    rng.shuffle(names)
    attrs = {name: attrs[name] for name in names[:rng.randint(0, len(names))]}
    record = {"type": rng.choice("ABC"), "ts": 1.0 + j * 0.5}
    if rng.random() < 0.3:
        record["id"] = f"j{j}"
    if rng.random() < 0.3:
        record["key"] = rng.randint(0, 3)
    if rng.random() < 0.4:
        record["attrs"] = attrs
    else:
        record.update(attrs)
    items = list(record.items())
    rng.shuffle(items)
    return json.dumps(dict(items))


def write_jsonl(path: Path, n: int, seed: int = 0, bad: dict | None = None) -> Path:
    rng = random.Random(seed)
    lines = [bad[j] if bad and j in bad else json_line(rng, j) for j in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def mid_size(path: Path) -> Path:
    size = os.path.getsize(path)
    assert sources.ROW_BATCH_BYTES < size <= files.ROW_READ_BYTES, size
    return path


def assert_same_as_row_reader(path: Path, **kw):
    """``iter_batch_runs`` of a mid-size file: ColumnBatch runs (cut where the row reader's
    runs are cut) whose Events (the row reader's, or made from the columns of a simple CSV
    block: cep.io.csv_columns) have the content of ``iter_event_runs``'; ``batch.event(i)`` is
    ``events()[i]``."""
    runs, want = batch_runs(path, **kw), event_runs(path, **kw)
    assert runs and all(run.__class__ is ColumnBatch for run in runs)
    assert all(run.__class__ is list for run in want)
    assert [len(r) for r in runs] == [len(r) for r in want]
    for batch, events in zip(runs, want):
        got = batch.events()
        assert [content(e) for e in got] == [content(e) for e in events]
        assert all(batch.event(i) is ev for i, ev in enumerate(got))
        assert batch.types == [e.type for e in events]
        assert batch.times == [e.ts for e in events]
    return runs


# --------------------------------------------------------------------------- mid-size files

@pytest.mark.parametrize("kinds,ids,key", [("ifsbem", False, False), ("if", True, True),
                                           ("mm", True, False), ("", False, True)])
def test_mid_size_csv_comes_as_batches_of_the_row_readers_events(tmp_path, kinds, ids, key):
    n = {0: 7000, 2: 5000}.get(len(kinds), 3000)
    path = mid_size(write_csv(tmp_path / "events.csv", n, kinds, seed=len(kinds), ids=ids,
                              key=key))
    runs = assert_same_as_row_reader(path, key_attr="k" if key else None)
    assert sum(map(len, runs)) == n
    if key:
        assert {e.key for e in runs[0].events()} == {0, 1, 2, 3}
    if "e" in kinds:                                # absent cells: absent attributes
        name = f"c{kinds.index('e')}e"
        events = runs[0].events()
        assert any(name in e.attrs for e in events) and any(name not in e.attrs for e in events)


def test_mid_size_jsonl_keeps_each_events_attribute_order(tmp_path):
    """JSON lines whose attributes come in different orders, absent, null, lists, under
    ``attrs`` or not: each Event keeps its own line's order."""
    path = mid_size(write_jsonl(tmp_path / "events.jsonl", 2500))
    runs = assert_same_as_row_reader(path)
    events = [e for run in runs for e in run.events()]
    orders = {tuple(e.attrs) for e in events}
    assert len(orders) > 100
    for line, ev in zip(path.read_text().splitlines(), events):
        record = json.loads(line)
        attrs = record.get("attrs", {k: v for k, v in record.items()
                                     if k not in ("type", "ts", "id", "key")})
        assert list(ev.attrs) == list(attrs)
        assert ev.attrs == attrs


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".ndjson"])
def test_size_bounds_of_the_batch_path(tmp_path, suffix):
    """A file of exactly ROW_BATCH_BYTES gives lists, one byte more a ColumnBatch (of
    Python lists), ROW_READ_BYTES too, one byte more a ColumnBatch read as Arrow columns."""
    def padded(size: int) -> Path:
        path = tmp_path / f"e{size}{suffix}"
        if suffix == ".csv":
            head, row = "type,ts,x,pad\n", "A,{ts},{x},\n"
        else:
            head, row = "", '{{"type": "A", "ts": {ts}, "x": {x}}}\n'
        text, j = head, 0
        while True:
            line = row.format(ts=float(j + 1), x=j % 7)
            if len(text) + len(line) > size - 40:
                break
            text += line
            j += 1
        last = row.format(ts=float(j + 1), x=j % 7)
        fill = size - len(text) - len(last)
        last = last.replace(",\n", "," + "z" * fill + "\n") if suffix == ".csv" else \
            last.replace('"A"', '"A' + "z" * fill + '"')
        path.write_text(text + last)
        assert os.path.getsize(path) == size
        return path

    def kinds(path) -> set:
        return {r.__class__.__name__ for r in batch_runs(path)}

    assert kinds(padded(sources.ROW_BATCH_BYTES)) == {"list"}
    for size in (sources.ROW_BATCH_BYTES + 1, files.ROW_READ_BYTES):
        path = padded(size)
        assert kinds(path) == {"ColumnBatch"}
        assert_same_as_row_reader(path)
    big = batch_runs(padded(files.ROW_READ_BYTES + 1))
    assert {r.__class__.__name__ for r in big} == {"ColumnBatch"}
    assert all(ev is None for r in big for ev in r.objs)      # read as columns: none made


def test_a_small_file_still_gives_lists(tmp_path):
    path = write_csv(tmp_path / "small.csv", 300, "ifs")
    assert os.path.getsize(path) <= sources.ROW_BATCH_BYTES
    runs = batch_runs(path)
    assert runs and all(r.__class__ is list for r in runs)
    assert [content(e) for r in runs for e in r] == \
        [content(e) for r in event_runs(path) for e in r]


BAD_CSV = {7: "A,not-a-time,1,2", 400: ",5.0,1,2", 401: "B,7.5,1,2,3,4,5",
           2999: "C,,1,2"}
BAD_JSON = {3: '{"type": "A", "ts": "x"}', 1200: "[1, 2]", 1201: "{not json",
            2499: '{"ts": 3.0}'}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_bad_rows_are_skipped_the_same_way(tmp_path, fmt):
    """``on_error``: the same rows skipped, the same errors (line, field, message) and the
    same cuts as the row reader's; without it, the same error after the same runs."""
    if fmt == "csv":
        path = mid_size(write_csv(tmp_path / "bad.csv", 4000, "ii", seed=2, bad=BAD_CSV))
    else:
        path = mid_size(write_jsonl(tmp_path / "bad.jsonl", 2500, seed=2, bad=BAD_JSON))
    errors: list = []
    runs = assert_same_as_row_reader(path, on_error=lambda e: None)
    batch_runs(path, on_error=errors.append)
    want: list = []
    event_runs(path, on_error=want.append)
    assert len(errors) == len(want) == 4
    assert [(e.row, e.field, str(e)) for e in errors] == [(e.row, e.field, str(e)) for e in want]
    assert len(runs) >= 3
    for reader in (sources.iter_batch_runs, sources.iter_event_runs):
        got = []
        with pytest.raises(IngestError) as info:
            for run in reader(path):
                got.append(len(run))
        assert info.value.row == want[0].row and str(info.value) == str(want[0])
        assert got == [len(event_runs(path, on_error=lambda e: None)[0])]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_reading_a_mid_size_file_does_not_import_pyarrow(tmp_path, fmt):
    """The memory reason for the path: numpy only. (A file beyond ROW_READ_BYTES does import
    pyarrow: the check can tell.)"""
    if fmt == "csv":
        mid = mid_size(write_csv(tmp_path / "mid.csv", 4000, "ifm", key=True))
        big = write_csv(tmp_path / "big.csv", 16000, "ifm", key=True)
    else:
        mid = mid_size(write_jsonl(tmp_path / "mid.jsonl", 2500))
        big = write_jsonl(tmp_path / "big.jsonl", 8000)
    assert os.path.getsize(big) > files.ROW_READ_BYTES

    def imports_pyarrow(path: Path) -> bool:
        code = ("import sys; from raycep.cep.io.sources import iter_batch_runs; "
                "runs = list(iter_batch_runs(sys.argv[1])); "
                "[(r.events(), r.numeric('c0i')) for r in runs if not isinstance(r, list)]; "
                "print('pyarrow' in sys.modules)")
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              cwd=str(ROOT), check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip() == "True"
    assert {r.__class__ for r in batch_runs(mid)} == {ColumnBatch}
    assert not imports_pyarrow(mid)
    assert imports_pyarrow(big)


# --------------------------------------------------------------------------- from_events keep

VALUES = st.one_of(st.integers(-2 ** 64, 2 ** 64), st.floats(allow_nan=False),
                   st.sampled_from([2 ** 53, 2 ** 53 + 1, -0.0, math.inf, True, False, "p", "",
                                    "1"]),
                   st.lists(st.integers(0, 3), max_size=2))


NUMERIC_VALUES = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                           st.integers(-2 ** 53 - 2, 2 ** 53 + 2),
                           st.sampled_from([2 ** 63, -2 ** 64, True, False, None, "1", 0, -0.0]))


@settings(max_examples=300, deadline=None)
@given(values=st.one_of(st.lists(st.floats(allow_nan=False, allow_infinity=False)),
                        st.lists(st.integers(-2 ** 53, 2 ** 53)),
                        st.lists(NUMERIC_VALUES, max_size=30)))
def test_numeric_of_gives_each_values_kind_and_value(values):
    """The C conversion of an all-number column and the value-by-value path agree with
    ``kind_of``: EXACT (with the value) for floats and ints float64 holds, OTHER for bools,
    text and larger ints, ABSENT for None."""
    from raycep.cep.store.batch import numeric_of
    vals, kinds = numeric_of(values)
    assert vals.dtype == np.float64 and kinds.dtype == np.int8 and len(vals) == len(values)
    for v, got, kind in zip(values, vals.tolist(), kinds.tolist()):
        want = ABSENT if v is None else kind_of(v)
        assert kind == want, (v, kind)
        if want == EXACT:
            assert got == v and (got != 0 or math.copysign(1, got) == math.copysign(1, v))


@st.composite
def event_lists(draw):
    """Events whose attributes come in any order, each present or absent, of any kind."""
    names = ["x", "y", "z", "w"]
    out = []
    for j in range(draw(st.integers(0, 25))):
        chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
        attrs = {name: draw(VALUES) for name in chosen}
        # any value, as a decoded row may hold (Event() refuses some)
        out.append(trusted_event(draw(st.sampled_from("ABC")), float(j) / 2, attrs,
                                 key=draw(st.sampled_from([None, None, 1, "k"])),
                                 id=draw(st.sampled_from([None, f"e{j}"]))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(events=event_lists(), rows_seed=st.randoms(use_true_random=False))
def test_from_events_keep_holds_the_very_events(events, rows_seed):
    """``keep=True``: ``event(i)``, ``events()`` and ``events(rows)`` are the given Events
    (attribute order, absent attributes as they are); ``numeric`` gives each value's kind and
    value; ``keep=False`` gives new Events of the same content."""
    batch = ColumnBatch.from_events(events, keep=True)
    n = len(events)
    assert len(batch) == n
    rows = [rows_seed.randrange(n) for _ in range(min(n, 9))] if n else []
    assert all(a is b for a, b in zip(batch.events(rows), [events[r] for r in rows]))
    assert all(batch.event(i) is events[i] for i in range(n))
    assert all(a is b for a, b in zip(batch.events(), events))
    assert batch.types == [e.type for e in events] and batch.times == [e.ts for e in events]
    for name in ("x", "y", "z", "w", "nowhere"):
        vals, kinds = batch.numeric(name)
        assert len(vals) == len(kinds) == n
        for i, ev in enumerate(events):
            if name not in ev.attrs:
                assert kinds[i] == ABSENT, (name, i)
                continue
            value = ev.attrs[name]
            assert kinds[i] == kind_of(value), (name, i, value)
            if kinds[i] == EXACT:
                assert vals[i] == value
    copy = ColumnBatch.from_events(events)
    made = copy.events()
    assert not any(a is b for a, b in zip(made, events))
    assert [content(e) for e in made] == [content(e) for e in events]


# --------------------------------------------------------------------------- raycep local

def ticks_head(path: Path, size: int, suffix: str, bad: bool = True) -> Path:
    """The first rows of examples/ticks.csv, about ``size`` bytes, as CSV or JSON lines
    (a bad row in the middle)."""
    lines = (ROOT / "examples" / "ticks.csv").read_text().splitlines()
    header, rows = lines[0].split(","), []
    total = 0
    for line in lines[1:]:
        cells = line.split(",")
        if suffix == ".csv":
            text = line
        else:
            record = {k: parse_cell(v) if k not in ("type", "ts") else v
                      for k, v in zip(header, cells)}
            record["ts"] = float(record["ts"])
            text = json.dumps(record)
        total += len(text) + 1
        if total > size:
            break
        rows.append(text)
    if bad:
        rows.insert(len(rows) // 2, "Stock,not-a-time,AAPL,1,1" if suffix == ".csv"
                    else '{"type": "Stock", "ts": "not-a-time"}')
    if suffix == ".csv":
        rows.insert(0, lines[0])
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_raycep_local_on_a_mid_size_file_writes_the_same_bytes_as_by_rows(tmp_path, monkeypatch,
                                                                          capsys, suffix):
    """examples/queries.cep over the head of examples/ticks.csv (a mid-size file, a bad row
    skipped): as column batches evaluated in bulk, the same matches byte for byte, plans,
    per-query counts and summary as with ROW_BATCH_BYTES so high that it is read as lists."""
    from raycep.gateway import cli

    path = mid_size(ticks_head(tmp_path / f"ticks{suffix}", 300 * KIB, suffix))
    outs = []
    for batches in (True, False):
        if not batches:
            monkeypatch.setattr(sources, "ROW_BATCH_BYTES", 10 ** 12)
        out = tmp_path / f"m{batches}.jsonl"
        with patched(bulk_triggers=raycep.cep.runtime.engine.BULK_TRIGGERS) as spy:
            status = cli.main(["local", "--query", str(ROOT / "examples" / "queries.cep"),
                               "--events", str(path), "--key", "symbol", "--out", str(out),
                               "--skip-bad-rows"])
        captured = capsys.readouterr()
        assert status == 0, captured.err
        # (how many triggers went bulk differs: not compared)
        err = stderr_counts(captured.err)
        outs.append((out.read_bytes(), err, summary_counts(captured.out)))
        if batches:
            for name in ("dip_recovery", "clean_breakout"):
                assert spy.bulk(name) > 100, name
        else:
            assert not spy.calls
    assert outs[0][2]["matches"] > 100 and outs[0][2]["events"] > 3000
    first = f"plan: query dip_recovery v1 after {FIRST_PLAN_EVENTS} events"
    assert any(first in line for line in outs[0][1])
    assert any("bad" in line for line in outs[0][1])
    assert outs[0][0] == outs[1][0]
    assert outs[0][2] == outs[1][2]
    assert outs[0][1] == outs[1][1]


# --------------------------------------------------------------------------- large CSV blocks

BIG_KINDS = ["if", "ifm", "iiff", "ifsbem", "fe"]


@pytest.fixture(scope="module")
def big_csvs(tmp_path_factory) -> dict:
    """``{kinds: (path, the row reader's Events)}`` of CSV files beyond ROW_READ_BYTES."""
    root = tmp_path_factory.mktemp("big")
    out = {}
    for j, kinds in enumerate(BIG_KINDS):
        n = 24_000 if len(kinds) <= 2 else 14_000
        path = write_csv(root / f"big_{kinds}.csv", n, kinds, seed=j, ids=j % 2 == 0,
                         key=j == 1, types="ABCDEFG"[:3 + j])
        assert os.path.getsize(path) > files.ROW_READ_BYTES
        with mock.patch.object(files, "ROW_READ_BYTES", 10 ** 12):
            truth = [e for run in event_runs(path, key_attr="k" if j == 1 else None)
                     for e in run]
        out[kinds] = (path, j == 1, truth)
    return out


def _read(path: Path, keyed: bool) -> list:
    runs = batch_runs(path, key_attr="k" if keyed else None)
    assert all(run.__class__ is ColumnBatch for run in runs)
    return runs


@pytest.mark.parametrize("kinds", BIG_KINDS)
def test_events_of_a_few_rows_equal_those_of_the_whole_block(big_csvs, kinds):
    """``batch.events(rows)`` for a few rows of a fresh block (or a fresh slice of it), rows
    in any order, some repeated: the Events made after the whole block is decoded, and the
    row reader's; made once (the same objects after)."""
    path, keyed, truth = big_csvs[kinds]
    pristine, fresh = _read(path, keyed), _read(path, keyed)   # pristine: only sliced
    whole = [e for run in _read(path, keyed) for e in run.events()]
    assert [content(e) for e in whole] == [content(e) for e in truth]
    rng = random.Random(len(kinds))
    at = 0
    for run, first in zip(pristine, fresh):
        n = len(run)
        ref = whole[at:at + n]
        for k in range(25):
            a = 0 if k == 0 else rng.randrange(n)
            b = n if k == 0 else rng.randint(a + 1, n)
            part = first if k == 0 else run.slice(a, b)
            rows = [rng.randrange(b - a) for _ in range(rng.choice([5, 8, 40, 200]))]
            if k % 3 == 0:
                rows.sort()
            got = part.events(rows)
            assert [content(e) for e in got] == [content(ref[a + r]) for r in rows], (k, a, b)
            assert all(part.event(r) is e for r, e in zip(rows, got))
            few = [rng.randrange(b - a) for _ in range(3)]
            assert [content(e) for e in part.events(few)] == \
                [content(ref[a + r]) for r in few]
            if k % 8 == 7:                      # then all of the slice
                assert [content(e) for e in part.events()] == \
                    [content(e) for e in ref[a:b]]
        at += n
    assert at == len(whole)


# --------------------------------------------------------------------------- type index

@settings(max_examples=40, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_type_index_from_dictionary_codes(big_csvs, data):
    """``groups`` and ``rows_of`` of a CSV-read block (and of slices of it) equal those of a
    batch of its Events (no codes), for random row ranges and type sets."""
    kinds = data.draw(st.sampled_from(BIG_KINDS), label="file")
    path, keyed, _ = big_csvs[kinds]
    run = _read(path, keyed)[0]
    n = len(run)
    if data.draw(st.booleans(), label="slice"):
        a = data.draw(st.integers(0, n - 1), label="slice start")
        run = run.slice(a, data.draw(st.integers(a + 1, n), label="slice end"))
        n = len(run)
    plain = ColumnBatch.from_events(run.events())
    seen = sorted(set(run.types))
    for _ in range(3):
        lo = data.draw(st.integers(0, n), label="lo")
        hi = data.draw(st.integers(lo, n), label="hi")
        assert run.groups(lo, hi) == plain.groups(lo, hi)
        assert list(run.groups(lo, hi)) == list(plain.groups(lo, hi))
        types = data.draw(st.sets(st.sampled_from(seen + ["Z"])), label="types")
        assert run.rows_of(types, lo, hi) == plain.rows_of(types, lo, hi)
        assert run.rows_of(types, lo, hi) == [r for r in range(lo, hi) if run.types[r] in types]


def test_type_index_with_types_first_seen_late(tmp_path):
    """Types whose first row comes late, or that come only in a slice's rows."""
    rng = random.Random(4)
    rows = ["type,ts,x"]
    for j in range(60_000):
        t = "late" if j > 45_000 and j % 3 == 0 else rng.choice(["b", "a", "c"])
        if j in (5, 59_999):
            t = "rare"
        rows.append(f"{t},{1.0 + j},{j % 5}")
    path = tmp_path / "late.csv"
    path.write_text("\n".join(rows) + "\n")
    assert os.path.getsize(path) > files.ROW_READ_BYTES
    for run in _read(path, False):
        plain = ColumnBatch.from_events(run.events())
        n = len(run)
        for lo, hi in ((0, n), (0, 10), (n - 10, n), (n // 2, n), (3, 6)):
            assert run.groups(lo, hi) == plain.groups(lo, hi)
            for types in ({"late"}, {"rare", "a"}, {"a", "b", "c", "late", "rare"}):
                assert run.rows_of(types, lo, hi) == plain.rows_of(types, lo, hi)
        part = run.slice(n // 2, n)
        assert part.groups(0, len(part)) == \
            ColumnBatch.from_events(part.events()).groups(0, len(part))


# --------------------------------------------------------------------------- RateTracker

RUNS = st.lists(st.tuples(st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 800)),
                                   max_size=40),
                          st.sampled_from(["sorted", "sorted", "as drawn", "descending"])),
                max_size=10)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(runs=RUNS, start=st.integers(-100, 1000), horizon=st.sampled_from([6.0, 60.0, 7.5]),
       buckets=st.sampled_from([1, 3, 12]), fold_every=st.sampled_from([4, 50, 8192]))
def test_observe_runs_equals_observe_of_each_event(runs, start, horizon, buckets, fold_every):
    """Runs in order (often starting before the latest time seen), as drawn, or descending:
    ``observe_runs`` gives the rates of ``observe`` event by event (and of observe_many),
    asked after every run or only at the end."""
    def tracker():
        return RateTracker(horizon, buckets, fold_every)
    one, runs_now, runs_end, many = tracker(), tracker(), tracker(), tracker()
    for run, how in runs:
        run = sorted(run, key=lambda x: x[1], reverse=how == "descending") \
            if how != "as drawn" else run
        types = [t for t, _ in run]
        times = [(start + ts) / 4 for _, ts in run]
        for t, ts in zip(types, times):
            one.observe(t, ts)
        runs_now.observe_runs(list(types), list(times))
        runs_end.observe_runs(list(types), list(times))
        many.observe_many([Event(t, ts) for t, ts in zip(types, times)])
        assert runs_now.rates() == one.rates()
    assert runs_end.rates() == one.rates() == many.rates()


def test_observe_runs_of_in_order_runs_behind_the_latest_time():
    """A run in order whose first time is behind the latest time seen counts in the
    current bucket, as ``observe`` does."""
    one, bulk = RateTracker(10.0, 2), RateTracker(10.0, 2)
    first = (["A"] * 5, [0.0, 1.0, 2.0, 3.0, 30.0])
    second = (["B"] * 4, [4.0, 5.0, 6.0, 7.0])               # in order, all behind 30
    third = (["C"] * 3, [31.0, 36.0, 41.0])
    for types, times in (first, second, third):
        for t, ts in zip(types, times):
            one.observe(t, ts)
        bulk.observe_runs(types, times)
        assert bulk.rates() == one.rates()
    assert one.rates().get("B", 0) > 0
