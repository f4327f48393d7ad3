"""A simple CSV block of a mid-size file typed column by column (``cep.io.csv_columns``):
``iter_batch_runs`` gives the same events (content, ids, attribute order and types), the
same errors and the same cuts as the row-by-row reader, and makes no Event until one is asked
for; a block with a bad row, a blank line or a line of the wrong width is read row by row.
Random blocks of tricky cells (hypothesis), every key setting and a time format."""
from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raycep.cep.event import Event
from raycep.cep.io import csv_columns, sources
from raycep.cep.store.batch import ColumnBatch

TYPES = ["A", "B", " A ", "\tC"]
TIMES = ["1", "2.5", " 3 ", "1e3", "-0.0", "4_0"]
BAD_TIMES = ["", " ", "x", "nan", "1e400", "inf"]
CELLS = ["1", "-7", "2.5", "1e3", "-0", " 4 ", "true", "FALSE", "p", " padded ", "", "  ",
         "\u0661\u0662", "1_0", "0x1f", str(2 ** 63), str(-2 ** 63), str(2 ** 64 - 1)]
BAD_CELLS = ["nan", "inf", "-Infinity", "1e400", str(2 ** 64), "9" * 30]
IDS = ["", "i1", " i2 ", "7"]


def content(ev: Event) -> tuple:
    return (ev.id, ev.type, repr(ev.ts), repr(ev.key),
            [(k, type(v).__name__, repr(v)) for k, v in ev.attrs.items()])


@st.composite
def blocks(draw):
    """(header, lines, key_attr, ts_unit): a CSV file's text of good rows, in half of the
    cases with one or two bad things (a bad line, type, time or cell)."""
    extra = draw(st.lists(st.sampled_from(["x", "y", "key", "k", "id"]), unique=True,
                          max_size=4))
    header = ["type", "ts"] + extra
    draw(st.randoms()).shuffle(header)
    pools = {"type": TYPES, "ts": TIMES, "id": IDS}
    rows = [[draw(st.sampled_from(pools.get(name, CELLS))) for name in header]
            for _ in range(draw(st.integers(1, 40)))]
    typed = [name for name in extra if name != "id"]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        j = draw(st.integers(0, len(rows) - 1))
        kind = draw(st.sampled_from(["line", "type", "ts"] + ["cell"] * 3 * bool(typed)))
        if len(rows[j]) != len(header):
            continue                                # a bad line already
        if kind == "line":
            rows[j] = [draw(st.sampled_from(["", ",", " , ", "A,1,2,3,4,5,6,7", "A"]))]
        elif kind == "type":
            rows[j][header.index("type")] = draw(st.sampled_from(["", " "]))
        elif kind == "ts":
            rows[j][header.index("ts")] = draw(st.sampled_from(BAD_TIMES))
        else:
            name = draw(st.sampled_from(typed))
            rows[j][header.index(name)] = draw(st.sampled_from(BAD_CELLS + [""]))
    key_attr = draw(st.sampled_from([None, "key", "k"]))
    ts_unit = draw(st.sampled_from(["s", "s", "ms"]))
    return header, [",".join(row) for row in rows], key_attr, ts_unit


def read_both(text: str, key_attr, ts_unit) -> tuple:
    """(batch runs, event runs, batch errors, row errors) of a CSV file with ``text``, read
    as a mid-size file (every size above 0 counts as one)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.csv"
        path.write_text(text)
        with mock.patch.object(sources, "ROW_BATCH_BYTES", 0):
            got_errors, want_errors = [], []
            got = list(sources.iter_batch_runs(path, key_attr=key_attr,
                                               on_error=got_errors.append, ts_unit=ts_unit))
            want = list(sources.iter_event_runs(path, key_attr=key_attr,
                                                on_error=want_errors.append, ts_unit=ts_unit))
    return got, want, got_errors, want_errors


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks())
def test_column_typed_blocks_equal_the_row_reader(block):
    header, rows, key_attr, ts_unit = block
    text = "\n".join([",".join(header)] + rows) + "\n"
    with mock.patch.object(csv_columns, "csv_block_batch",
                           wraps=csv_columns.csv_block_batch) as spy:
        got, want, got_errors, want_errors = read_both(text, key_attr, ts_unit)
    assert all(run.__class__ is ColumnBatch for run in got)
    assert [len(run) for run in got] == [len(run) for run in want]
    assert [(e.row, e.field, str(e)) for e in got_errors] == \
        [(e.row, e.field, str(e)) for e in want_errors]
    events = [e for run in got for e in run.events()]
    assert [content(e) for e in events] == [content(e) for run in want for e in run]
    assert spy.call_count == 1
    clean = not want_errors and all(rows) and all(row.strip(" ,") for row in rows)
    if clean:                        # typed by columns: no Event until asked for
        assert len(got) == 1
        fresh = read_both(text, key_attr, ts_unit)[0]
        assert all(ev is None for ev in fresh[0].objs)


def test_a_clean_block_is_typed_by_columns_and_a_bad_one_row_by_row(tmp_path, monkeypatch):
    """The same rows with one bad time: the clean file's batch holds no Event (column
    path), the other holds the row reader's (fallback), both with the right content."""
    monkeypatch.setattr(sources, "ROW_BATCH_BYTES", 0)
    rows = [f"{'AB'[j % 2]},{j}.5,{j % 7},p{j % 3},{2 ** 62 + j}" for j in range(200)]
    clean = tmp_path / "clean.csv"
    clean.write_text("type,ts,x,s,big\n" + "\n".join(rows) + "\n")
    rows[150] = "A,never,1,p,2"
    bad = tmp_path / "bad.csv"
    bad.write_text("type,ts,x,s,big\n" + "\n".join(rows) + "\n")
    [run] = sources.iter_batch_runs(clean)
    assert run.__class__ is ColumnBatch and all(ev is None for ev in run.objs)
    assert run.events()[3].attrs == {"x": 3, "s": "p0", "big": 2 ** 62 + 3}
    assert run.numeric("x")[0][:3].tolist() == [0.0, 1.0, 2.0]
    errors: list = []
    runs = list(sources.iter_batch_runs(bad, on_error=errors.append))
    assert [len(r) for r in runs] == [150, 49]
    assert all(ev is not None for ev in runs[0].objs)
    assert [(e.row, e.field) for e in errors] == [(152, "ts")]
    assert "never" in str(errors[0])


@pytest.mark.parametrize("key_attr,missing", [("key", "key"), ("k", "k")])
def test_a_missing_partition_key_is_reported_as_by_rows(tmp_path, monkeypatch, key_attr,
                                                        missing):
    monkeypatch.setattr(sources, "ROW_BATCH_BYTES", 0)
    path = tmp_path / "keys.csv"
    path.write_text(f"type,ts,{missing}\nA,1,a\nA,2,\nB,3,b\n")
    errors: list = []
    runs = list(sources.iter_batch_runs(path, key_attr=key_attr, on_error=errors.append))
    assert [e.key for r in runs for e in r.events()] == ["a", "b"]
    assert [(e.row, e.field) for e in errors] == [(3, missing)]
