"""Reading events from CSV, JSON Lines and Parquet files (as Events and as column batches)."""
import json

import pytest
from test_columns import _view, legacy_read, numeric_agrees

import raycep.cep.io.sources as sources
from raycep.cep.io import files, parquet_reader
from raycep.cep.errors import IngestError
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.sources import iter_batch_runs, iter_event_runs, iter_events, read_events
from raycep.cep.store.batch import ColumnBatch


def _write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


# --------------------------------------------------------------------------- CSV

CSV = """type,ts,symbol,price,volume,halted,note
Stock,1,IBM,101.5,300,false,
Stock,2.25,ÄÖÜ,7,1e3,TRUE,hello world
Trade,3,IBM,-0.5,+42,,00123x
"""


def test_csv_types_and_absent_cells(tmp_path):
    events = list(read_events(_write(tmp_path, "t.csv", CSV)))
    assert [e.type for e in events] == ["Stock", "Stock", "Trade"]
    assert [e.ts for e in events] == [1.0, 2.25, 3.0]
    first, second, third = (e.attrs for e in events)
    assert first == {"symbol": "IBM", "price": 101.5, "volume": 300, "halted": False}
    assert type(first["volume"]) is int and "note" not in first
    assert second == {"symbol": "ÄÖÜ", "price": 7, "volume": 1000.0, "halted": True,
                      "note": "hello world"}
    assert third == {"symbol": "IBM", "price": -0.5, "volume": 42, "note": "00123x"}
    assert all(e.key is None for e in events)


def test_csv_id_and_key_columns(tmp_path):
    path = _write(tmp_path, "k.csv", "id,type,ts,key,x\n0001,A,1,k1,1\n,A,2,,2\n")
    a, b = read_events(path)
    assert a.id == "0001" and a.key == "k1" and a.attrs == {"x": 1}
    assert b.key is None and len(b.id) == 20           # derived from the content


def test_csv_key_attr(tmp_path):
    path = _write(tmp_path, "k.csv", "type,ts,symbol\nA,1,IBM\nA,2,AAPL\n")
    assert [e.key for e in read_events(path, key_attr="symbol")] == ["IBM", "AAPL"]


def test_csv_key_attr_missing_names_row(tmp_path):
    path = _write(tmp_path, "k.csv", "type,ts,symbol\nA,1,IBM\nA,2,\n")
    with pytest.raises(IngestError) as info:
        list(read_events(path, key_attr="symbol"))
    assert info.value.row == 3 and info.value.field == "symbol"
    assert "k.csv" in str(info.value) and "line 3" in str(info.value)


def test_csv_missing_required_column_is_one_error(tmp_path):
    path = _write(tmp_path, "h.csv", "kind,time,x\nA,1,2\nB,2,3\n")
    with pytest.raises(IngestError) as info:
        read_events(path, errors="collect")
    msg = str(info.value)
    assert "'type'" in msg and "'ts'" in msg and "h.csv" in msg
    assert info.value.row == 1 and info.value.field == "type"


@pytest.mark.parametrize("header", ["type,ts,x,x", "type,ts,,x"])
def test_csv_bad_header(tmp_path, header):
    path = _write(tmp_path, "h.csv", header + "\nA,1,2,3\n")
    with pytest.raises(IngestError) as info:
        list(read_events(path))
    assert info.value.row == 1


@pytest.mark.parametrize("line,field", [
    (",5,1", "type"),
    ("A,,1", "ts"),
    ("A,noon,1", "ts"),
    ("A,nan,1", "ts"),
])
def test_csv_bad_row_names_file_line_and_field(tmp_path, line, field):
    path = _write(tmp_path, "bad.csv", f"type,ts,x\nA,1,1\n{line}\nA,3,3\n")
    with pytest.raises(IngestError) as info:
        list(read_events(path))
    err = info.value
    assert (err.row, err.field) == (3, field)
    assert "bad.csv" in str(err) and "line 3" in str(err) and repr(field) in str(err)
    assert err.path == str(path)


def test_csv_wrong_cell_count(tmp_path):
    path = _write(tmp_path, "w.csv", "type,ts,x\nA,1,1,extra\nA,2\n")
    events, problems = read_events(path, errors="collect")
    assert events == []
    assert [p.row for p in problems] == [2, 3]
    assert "cells" in str(problems[0])


def test_csv_collect_keeps_good_rows(tmp_path):
    path = _write(tmp_path, "c.csv", "type,ts,x\nA,1,1\nA,oops,2\n\nB,3,3\n,4,4\n")
    events, problems = read_events(path, errors="collect")
    assert [(e.type, e.ts) for e in events] == [("A", 1.0), ("B", 3.0)]
    assert [(p.row, p.field) for p in problems] == [(3, "ts"), (6, "type")]


def test_csv_quoted_cells_and_bom(tmp_path):
    text = '\ufefftype,ts,name\nA,1,"Smith, John"\nA,2,"multi\nline"\nA,3,x\n'
    events = list(read_events(_write(tmp_path, "q.csv", text)))
    assert [e.attrs["name"] for e in events] == ["Smith, John", "multi\nline", "x"]


def test_csv_lines_count_multiline_records(tmp_path):
    text = 'type,ts,name\nA,1,"multi\nline"\nA,bad,x\n'
    with pytest.raises(IngestError) as info:
        list(read_events(_write(tmp_path, "q.csv", text)))
    assert info.value.row == 4


def test_csv_empty_file(tmp_path):
    with pytest.raises(IngestError, match="header"):
        list(read_events(_write(tmp_path, "e.csv", "")))


def test_csv_not_utf8(tmp_path):
    path = _write(tmp_path, "l.csv", "type,ts,x\nA,1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(IngestError, match="UTF-8"):
        list(read_events(path))


@pytest.mark.parametrize("text,value", [
    ("42", 42), ("-7", -7), ("+3", 3), ("3.5", 3.5), (".5", 0.5), ("1e3", 1000.0),
    ("true", True), ("False", False), ("IBM", "IBM"), ("nan", "nan"), ("inf", "inf"),
    ("1_000", "1_000"), (" 12 ", 12), ("0x10", "0x10"),
])
def test_parse_cell(text, value):
    got = parse_cell(text)
    assert got == value and type(got) is type(value)


# --------------------------------------------------------------------------- JSON Lines

def test_jsonl_reads_objects_and_skips_blank_lines(tmp_path):
    rows = [{"type": "A", "ts": 1, "x": 1.5, "s": "é"},
            {"type": "B", "ts": 2.5, "attrs": {"y": [1, 2]}, "key": "k", "id": "e2"},
            {"type": "C", "ts": 3, "flag": None}]
    text = json.dumps(rows[0]) + "\n\n   \n" + json.dumps(rows[1]) + "\n" + json.dumps(rows[2])
    events = list(read_events(_write(tmp_path, "e.jsonl", text)))
    assert [(e.type, e.ts) for e in events] == [("A", 1.0), ("B", 2.5), ("C", 3.0)]
    assert events[0].attrs == {"x": 1.5, "s": "é"}
    assert events[1].attrs == {"y": [1, 2]} and events[1].key == "k" and events[1].id == "e2"
    assert events[2].attrs == {"flag": None}


@pytest.mark.parametrize("line,field", [
    ('{"ts": 1}', "type"),
    ('{"type": "A"}', "ts"),
    ('{"type": "A", "ts": "later"}', "ts"),
    ('{"type": "A", "ts": 1, "attrs": [1]}', "attrs"),
    ('{"type": 5, "ts": 1}', "type"),
    ('[1, 2]', None),
    ('{"type": "A", "ts": 1', None),
    ('"just a string"', None),
])
def test_jsonl_bad_line_names_file_line_and_field(tmp_path, line, field):
    text = '{"type": "A", "ts": 0}\n\n' + line + '\n{"type": "A", "ts": 9}\n'
    path = _write(tmp_path, "bad.jsonl", text)
    with pytest.raises(IngestError) as info:
        list(read_events(path))
    err = info.value
    assert (err.row, err.field) == (3, field)
    assert "bad.jsonl" in str(err) and "line 3" in str(err)


def test_jsonl_collect(tmp_path):
    text = '{"type": "A", "ts": 1}\nnot json\n{"type": "B", "ts": 2, "sym": "X"}\n'
    events, problems = read_events(_write(tmp_path, "c.jsonl", text), errors="collect")
    assert [e.type for e in events] == ["A", "B"]
    assert len(problems) == 1 and problems[0].row == 2 and "invalid JSON" in str(problems[0])


def test_jsonl_key_attr(tmp_path):
    text = '{"type": "A", "ts": 1, "sym": "X"}\n{"type": "A", "ts": 2}\n'
    path = _write(tmp_path, "k.jsonl", text)
    events, problems = read_events(path, key_attr="sym", errors="collect")
    assert [e.key for e in events] == ["X"]
    assert [(p.row, p.field) for p in problems] == [(2, "sym")]


def test_ndjson_extension(tmp_path):
    path = _write(tmp_path, "e.ndjson", '{"type": "A", "ts": 1}\n')
    assert len(list(read_events(path))) == 1


# --------------------------------------------------------------------------- files

def test_unknown_extension_lists_supported(tmp_path):
    path = _write(tmp_path, "e.txt", "type,ts\nA,1\n")
    with pytest.raises(IngestError) as info:
        read_events(path)
    assert ".csv" in str(info.value) and ".jsonl" in str(info.value)


def test_missing_file_raises_at_call(tmp_path):
    with pytest.raises(IngestError, match="not found"):
        read_events(tmp_path / "missing.csv")


def test_directory(tmp_path):
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(IngestError, match="directory"):
        read_events(tmp_path / "d.csv")


def test_read_is_lazy(tmp_path):
    path = _write(tmp_path, "l.csv", "type,ts\nA,1\nA,x\n")
    events = read_events(path)
    assert next(events).ts == 1.0
    with pytest.raises(IngestError):
        next(events)


def test_on_error_callback(tmp_path):
    path = _write(tmp_path, "cb.csv", "type,ts\nA,1\nA,x\nB,2\n")
    seen = []
    events = list(iter_events(path, on_error=seen.append))
    assert [e.type for e in events] == ["A", "B"] and [s.row for s in seen] == [3]


def test_bad_errors_argument(tmp_path):
    with pytest.raises(ValueError):
        read_events(_write(tmp_path, "x.csv", "type,ts\n"), errors="skip")


def test_sample_ticks_file_reads_cleanly():
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / "ticks.csv"
    events, problems = read_events(path, key_attr="symbol", errors="collect")
    assert problems == []
    assert len(events) >= 1000
    assert all(e.type == "Stock" for e in events)
    assert all(a.ts < b.ts for a, b in zip(events, events[1:]))
    assert {"symbol", "price", "volume"} <= set(events[0].attrs)


# --------------------------------------------------------------------------- column batches

def _flat(runs) -> list:
    return [e for r in runs for e in (r.events() if isinstance(r, ColumnBatch) else r)]


def _log(runs, path, key_attr):
    """Events and errors in the order the reader gives them (on_error between the runs)."""
    log = []
    for run in runs(path, key_attr, on_error=log.append):
        log.extend(run.events() if isinstance(run, ColumnBatch) else run)
    return log


def _shown(log) -> list:
    return [(p.row, p.field, str(p), p.path) if isinstance(p, IngestError) else _view([p])[0]
            for p in log]


def _batches_read_as_rows(path, key_attr, want_events, want_lines, want_problems,
                          in_bulk=True):
    """iter_batch_runs of ``path`` gives ``want_events`` (read at ``want_lines``) and the
    errors ``want_problems``, in line order, as iter_event_runs does; the batches' numeric
    columns agree with their events."""
    want = sorted([(line, ev) for line, ev in zip(want_lines, want_events)] +
                  [(p.row, p) for p in want_problems], key=lambda item: item[0])
    want = [item for _, item in want]
    got = _log(iter_batch_runs, path, key_attr)
    assert _shown(got) == _shown(want)
    assert _shown(_log(iter_event_runs, path, key_attr)) == _shown(want)
    # raise mode: the rows before the first bad row come out, then it is raised
    out = []
    runs = iter_batch_runs(path, key_attr)
    if want_problems:
        with pytest.raises(IngestError) as info:
            for run in runs:
                out.extend(run.events() if isinstance(run, ColumnBatch) else run)
        assert (info.value.row, str(info.value)) == (want_problems[0].row,
                                                     str(want_problems[0]))
        first_bad = want.index(want_problems[0])
        assert _view(out) == _view(want[:first_bad])
    else:
        assert _view(_flat(runs)) == _view(want_events)
    runs = list(iter_batch_runs(path, key_attr, on_error=lambda err: None))
    assert any(isinstance(r, ColumnBatch) for r in runs) == in_bulk
    for run in runs:
        if isinstance(run, ColumnBatch):
            numeric_agrees(run)


def _as_legacy(path, key_attr):
    lines = []
    events, problems = legacy_read(path, key_attr, lines)
    return events, lines, problems


def _ticks(n: int, seed: int, key_column: str = "key") -> str:
    """A CSV stream with bad rows (event time, type, cell count, missing key), quoted cells
    and mixed-kind columns here and there."""
    import random
    rnd = random.Random(seed)
    lines = [f"type,ts,price,volume,{key_column},id"]
    for i in range(n):
        roll = rnd.random()
        price = rnd.choice([f"{100 + i % 97 / 8:.2f}", str(i % 50), "n/a", "", "true"]) \
            if roll < 0.2 else f"{100 + i % 97 / 8:.2f}"
        row = [rnd.choice("ABC"), str(1_000_000 + i), price, str(100 + i % 1900),
               f"k{i % 5}", f"e{i}" if roll < 0.1 else ""]
        if roll > 0.997:
            row[1] = "oops"
        elif roll > 0.994:
            row[0] = ""
        elif roll > 0.991:
            row.pop()
        elif roll > 0.988:
            row[4] = ""
        elif roll > 0.986:
            row[2] = '"1,5"'
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key_attr", [None, "key", "sym"])
@pytest.mark.parametrize("block", [None, 700])
def test_csv_batches_read_as_rows(tmp_path, monkeypatch, key_attr, block):
    monkeypatch.setattr(files, "ROW_READ_BYTES", 0)               # in bulk
    if block:
        monkeypatch.setattr(files, "BLOCK_SIZE", block)
    path = _write(tmp_path, "t.csv", _ticks(3000, 5, "sym" if key_attr == "sym" else "key"))
    _batches_read_as_rows(path, key_attr, *_as_legacy(path, key_attr))


def test_large_csv_batches_read_as_rows(tmp_path):
    path = _write(tmp_path, "big.csv", _ticks(22_000, 7))
    assert path.stat().st_size > files.ROW_READ_BYTES
    for key_attr in (None, "key"):
        _batches_read_as_rows(path, key_attr, *_as_legacy(path, key_attr))


def test_small_csv_is_read_row_by_row(tmp_path):
    path = _write(tmp_path, "s.csv", _ticks(300, 3))
    _batches_read_as_rows(path, "key", *_as_legacy(path, "key"), in_bulk=False)


@pytest.mark.parametrize("key_attr", [None, "key", "s"])
def test_jsonl_batches_read_as_rows(tmp_path, monkeypatch, key_attr):
    monkeypatch.setattr(files, "ROW_READ_BYTES", 0)
    monkeypatch.setattr(files, "BLOCK_SIZE", 4096)
    lines = []
    for i in range(400):
        row = {"type": "AB"[i % 2], "ts": i if i % 3 else i + 0.5, "p": i / 4,
               "s": f"k{i % 3}", "n": None if i % 5 == 0 else i, "key": i % 7}
        if 100 <= i < 120 or i % 61 == 0:
            row = {"ts": i, "type": "C", "s": "x"}                    # other shapes
        if i % 53 == 7:
            row["p"] = float("nan")                                   # a bad row
        if i % 89 == 3:
            row.pop("s", None)
        lines.append(json.dumps(row))
    lines[250] = "not json"
    lines[251] = "[1, 2]"
    path = _write(tmp_path, "r.jsonl", "\n".join(lines) + "\n")
    _batches_read_as_rows(path, key_attr, *_as_legacy(path, key_attr))


@pytest.mark.parametrize("key_attr", [None, "sym"])
def test_parquet_batches_read_as_rows(tmp_path, monkeypatch, key_attr):
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    from raycep.spark_ingest.mapping import EventMapping
    monkeypatch.setattr(parquet_reader, "PARQUET_BATCH_ROWS", 50)
    n = 300
    table = pa.table({
        "type": [None if i % 71 == 5 else "AB"[i % 2] for i in range(n)],
        "ts": [math.nan if i % 97 == 11 else float(i) for i in range(n)],
        "sym": [None if i % 43 == 2 else f"k{i % 4}" for i in range(n)],
        "price": [None if i % 7 == 0 else i / 8 for i in range(n)],
        "text": [["42", "4.2", "x", "", "true"][i % 5] for i in range(n)],
        "tags": [[i] if i % 9 == 0 else None for i in range(n)],
        "id": [f"e{i}" if i % 4 == 0 else None for i in range(n)],
    })
    path = tmp_path / "e.parquet"
    pq.write_table(table, path)
    mapping = EventMapping(key_column=key_attr)
    events, rows, problems = [], [], []
    for i, row in enumerate(table.to_pylist(), start=1):
        try:
            events.append(mapping.to_event(row, i))
            rows.append(i)
        except IngestError as exc:
            problems.append(sources._located(str(path), i, exc, "row"))
    assert problems
    _batches_read_as_rows(path, key_attr, events, rows, problems)
