"""Bulk reading: cep.io.columns (typing in bulk, events from columns, column batches) and the
block readers of cep.io.sources, checked against the row-by-row reader they replace.

``legacy_read`` below is the previous implementation of cep.io.sources (csv module + json module
+ make_event per row), kept here as the oracle: on random files the new reader must give the
same events (type, ts, attributes with their Python types, key, id) and the same bad rows
(line, field, message).
"""
import csv
import datetime as dt
import decimal
import json
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import raycep.cep.io.sources as sources
from raycep.cep.io import csv_reader, files, jsonl_reader, parquet_reader
from raycep.cep.errors import IngestError
from raycep.cep.event import make_event
from raycep.cep.io.cells import parse_cell
from raycep.cep.io.columns import (build_columns, build_events, column_from_values, column_values,
                                   strip_text, typed_column, typed_table)
from raycep.cep.io.sources import read_events
from raycep.cep.store.arrow import arrow_array
from raycep.cep.store.batch import ColumnBatch
from raycep.spark_ingest.mapping import EventMapping


# --------------------------------------------------------------------------- the oracle

def legacy_read(path, key_attr=None, lines=None):
    """``read_events(path, key_attr, errors="collect")`` as it was, row by row (``lines``:
    a list to receive the line number of each event)."""
    path = os.fspath(path)
    reader = _legacy_csv if path.endswith(".csv") else _legacy_jsonl
    events, problems = [], []
    with open(path, encoding="utf-8-sig", newline="") as handle:
        for line, row in reader(path, handle):
            try:
                if isinstance(row, IngestError):
                    raise row
                events.append(make_event(row, line, key_attr))
                if lines is not None:
                    lines.append(line)
            except IngestError as err:
                problems.append(sources._located(path, line, err))
    return events, problems


def _legacy_csv(path, handle):
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise files.file_error(path, "empty CSV file", row=1) from None
    header = csv_reader._check_header(path, header)
    width = len(header)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield reader.line_num, IngestError(f"malformed CSV: {exc}", reader.line_num)
            continue
        line = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != width:
            yield line, IngestError(f"row has {len(cells)} cells, the header has {width}",
                                    line)
            continue
        row = {}
        for name, cell in zip(header, cells):
            if cell == "":
                continue
            row[name] = cell.strip() if name in ("type", "ts", "id") else parse_cell(cell)
        yield line, row


def _legacy_jsonl(path, handle):
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            yield line, IngestError(f"invalid JSON: {exc.msg} at column {exc.colno}", line)
            continue
        except (ValueError, RecursionError) as exc:
            yield line, IngestError(f"invalid JSON: {str(exc).split(':')[0]}", line)
            continue
        if not isinstance(row, dict):
            yield line, IngestError(f"expected a JSON object, got "
                                    f"{jsonl_reader._json_kind(row)}", line)
            continue
        yield line, row


def _typed(value):
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _view(events):
    return [(e.type, e.ts, _typed(e.attrs), list(e.attrs), _typed(e.key), _id(e))
            for e in events]


def _id(ev):
    try:
        return ev.id
    except UnicodeEncodeError:          # text with a lone surrogate (JSON "\ud800")
        return "no id"


def _same_as_legacy(path, key_attr=None):
    lines = []
    want, want_problems = legacy_read(path, key_attr, lines)
    got, problems = read_events(path, key_attr=key_attr, errors="collect")
    assert _view(got) == _view(want)
    assert [(p.row, p.field, str(p)) for p in problems] == \
        [(p.row, p.field, str(p)) for p in want_problems]
    # raise mode: the events before the first bad row come out, then it is raised
    out = []
    if want_problems:
        with pytest.raises(IngestError) as info:
            for ev in read_events(path, key_attr=key_attr):
                out.append(ev)
        assert (info.value.row, info.value.field) == (want_problems[0].row,
                                                      want_problems[0].field)
        assert len(out) == sum(1 for line in lines if line < want_problems[0].row)
    else:
        assert len(list(read_events(path, key_attr=key_attr))) == len(want)


# --------------------------------------------------------------------------- random files

cells = st.one_of(
    st.sampled_from(["42", "-7", "+3", "0012", "-0", "4.2", ".5", "5.", "-.5e3", "1e3", "1E+05",
                     "true", "FALSE", "True", "tRuE", "IBM", "x y", "", " ", " 12 ", "12 ",
                     "\u00a07", "\u3000true", "٣", "１２", "nan", "inf", "-Infinity", "1_000",
                     "0x10", "1e999", "-1E400", "1" * 25, "9" * 19, "18446744073709551615",
                     "18446744073709551616", "-9223372036854775809", "1.5e-400", "é",
                     "ſalse", "K", "a\x1cb", "\x1c", "k1"]),
    st.integers(-2 ** 65, 2 ** 65).map(str),
    st.floats(allow_nan=False).map(repr),
    st.text(st.characters(blacklist_characters='\r\n",\x00', blacklist_categories=("Cs",)),
            max_size=5),
)
quoted = st.one_of(cells.map(lambda c: f'"{c}"'),
                   st.sampled_from(['"a,b"', '"multi\nline"', '"say ""hi"""', '"x"y', 'a"b',
                                    '"open']))
ts_cells = st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr),
                     st.integers(0, 10 ** 12).map(str),
                     st.sampled_from(["", " 5 ", "noon", "nan", "1e999", "1_0", "١", "-0",
                                      "+4", "0x1", "1.", ".5", "1" * 30]))
type_cells = st.sampled_from(["A", "B", " A ", "", "  ", "Ü", "t y"])
extra_names = st.sampled_from(["x", "price", "sym", "key", "id", "attrs", "note", "flag"])


@st.composite
def csv_files(draw):
    names = ["type", "ts"] + draw(st.lists(extra_names, max_size=4, unique=True))
    order = draw(st.permutations(names))
    lines = [",".join(order)]
    allow_quotes = draw(st.booleans())
    for _ in range(draw(st.integers(0, 14))):
        shape = draw(st.integers(0, 12))
        if shape == 0:
            lines.append(draw(st.sampled_from(["", "  ", ",,", " , ", "\u3000", "\x1c"])))
            continue
        row = []
        for name in order:
            if name == "type":
                row.append(draw(type_cells))
            elif name == "ts":
                row.append(draw(ts_cells))
            elif allow_quotes and draw(st.integers(0, 5)) == 0:
                row.append(draw(quoted))
            else:
                row.append(draw(cells))
        if shape == 1:
            row.append(draw(cells))                     # one cell too many
        elif shape == 2 and len(row) > 1:
            row.pop()                                   # one too few
        lines.append(",".join(row))
    ending = draw(st.sampled_from(["\n", "\r\n", "\n", "\r"]))
    text = ending.join(lines) + draw(st.sampled_from(["", ending]))
    if draw(st.integers(0, 5)) == 0:
        text = "\ufeff" + text
    return text


@pytest.fixture(autouse=True)
def in_bulk(monkeypatch):
    """The files of these tests are small: read them in bulk, as a large file is read (the
    ``by-rows`` reader parameter below reads them as a small file is read)."""
    monkeypatch.setattr(files, "ROW_READ_BYTES", -1)


@pytest.fixture(params=[None, 64, "by-rows"], ids=["big-blocks", "64-byte-blocks", "by-rows"])
def block_size(request, monkeypatch):
    if request.param == "by-rows":                  # a small file: row by row, no columns
        monkeypatch.setattr(files, "ROW_READ_BYTES", 1 << 30)
        monkeypatch.setattr(files, "BLOCK_SIZE", 64)
    elif request.param:
        monkeypatch.setattr(files, "BLOCK_SIZE", request.param)
    return request.param


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=csv_files(), key_attr=st.sampled_from([None, "key", "sym", "x"]))
def test_csv_reads_as_the_row_by_row_reader(tmp_path, block_size, text, key_attr):
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode("utf-8"))
    try:
        legacy_read(path, key_attr)
    except IngestError as err:                         # a bad header: the same file error
        with pytest.raises(IngestError) as info:
            read_events(path, key_attr=key_attr, errors="collect")
        assert (info.value.row, info.value.field) == (err.row, err.field)
        return
    _same_as_legacy(path, key_attr)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=6)
json_lines = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["A", "B"]),
                           "ts": st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                                           st.integers(-2 ** 64, 2 ** 64))},
                          optional={"x": json_values, "key": json_values, "id": json_values,
                                    "attrs": json_values, "sym": json_values}).map(json.dumps),
    st.sampled_from(['{"type": "A", "ts": 1, "v": NaN}', '{"type": "A", "ts": Infinity}',
                     '{"type": "A", "ts": 1e400}', '{"type": "A", "ts": 1, "v": 1e-400}',
                     '{"type": "A", "ts": 1, "big": 123456789012345678901234567890}',
                     '{"type": "A", "ts": 1, "f": 0.123456789012345678901234}',
                     '{"type": "A", "ts": 1, "d": [' * 300 + ']' * 300 + '}',
                     '{"type": "A", "ts": 1, "a": 1, "a": 2}', '{"type": "A", "ts": 1, "s":'
                     ' "\\ud800"}', '[1, 2]', '"text"', 'null', '{"type": "A"', '',
                     '   ', '\u3000', '\x1c', '{"type": "A", "ts": -0.0}', '{"ts": 2}',
                     '{"type": "A", "ts": 1}, {"type": "B", "ts": 2}']),
    json_values.map(json.dumps))


@pytest.fixture(params=[1, 32], ids=["columns-from-1-row", "columns-from-32-rows"])
def json_run(request, monkeypatch):
    monkeypatch.setattr(jsonl_reader, "JSON_RUN", request.param)
    return request.param


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lines=st.lists(json_lines, max_size=10), ending=st.sampled_from(["\n", "\r\n", "\r"]),
       key_attr=st.sampled_from([None, "key", "sym"]))
def test_jsonl_reads_as_the_row_by_row_reader(tmp_path, block_size, json_run, lines, ending,
                                             key_attr):
    path = tmp_path / "f.jsonl"
    path.write_bytes(ending.join(lines).encode("utf-8", "surrogatepass"))
    try:
        open(path, encoding="utf-8").read()
    except UnicodeDecodeError:
        with pytest.raises(IngestError, match="UTF-8"):
            read_events(path, errors="collect")
        return
    _same_as_legacy(path, key_attr)


def test_jsonl_runs_of_one_shape_are_built_from_columns(tmp_path):
    rows = [{"type": "A", "ts": i if i % 2 else i + 0.5, "p": i / 4, "s": f"k{i % 3}",
             "n": None if i % 5 == 0 else i} for i in range(100)]
    rows[40]["p"] = float("nan")                         # via json: NaN, a bad row
    rows[60] = {"ts": 60, "type": "B"}                   # another shape
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    events, problems = read_events(path, key_attr="s", errors="collect")
    assert [(p.row, p.field) for p in problems] == [(41, "p"), (61, "s")]
    assert events[0].attrs == {"p": 0.0, "s": "k0", "n": None} and events[0].key == "k0"
    assert [type(e.ts) for e in events] == [float] * 98
    _same_as_legacy(path, "s")


def test_the_sample_and_a_generated_stream_read_as_before(tmp_path):
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    _same_as_legacy(os.path.join(root, "examples", "ticks.csv"), "symbol")
    text = "type,ts,price,volume,key\n" + "".join(
        f"{'ABC'[i % 3]},{1_000_000 + i},{100 + (i % 97) / 8:.2f},{100 + i % 1900},k{i % 5}\n"
        for i in range(5000))
    path = tmp_path / "s.csv"
    path.write_text(text, encoding="utf-8")
    _same_as_legacy(path)
    _same_as_legacy(path, "key")


# --------------------------------------------------------------------------- CSV details

def test_quoted_records_across_blocks_keep_their_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "BLOCK_SIZE", 16)
    text = ('type,ts,note\nA,1,plain\nA,2,"a long\nquoted, cell\nover lines"\nA,bad,x\n'
            'A,3,"q"\n' + "".join(f"B,{i},n{i}\n" for i in range(4, 40)) + 'A,x,"y"\n')
    path = tmp_path / "q.csv"
    path.write_text(text, encoding="utf-8")
    events, problems = read_events(path, errors="collect")
    assert events[1].attrs["note"] == "a long\nquoted, cell\nover lines"
    assert [(p.row, p.field) for p in problems] == [(6, "ts"), (44, "ts")]
    _same_as_legacy(path)


def test_csv_read_is_lazy_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "BLOCK_SIZE", 64)
    path = tmp_path / "big.csv"
    path.write_text("type,ts\n" + "".join(f"A,{i}\n" for i in range(200)) + "A,\xe9\n",
                    encoding="latin-1")
    events = read_events(path)
    first = [next(events).ts for _ in range(10)]
    assert first == [float(i) for i in range(10)]
    with pytest.raises(IngestError, match="UTF-8") as info:
        list(events)
    assert "line 202" in str(info.value)


def test_csv_cell_larger_than_the_field_limit_is_a_bad_row(tmp_path):
    limit = csv.field_size_limit()
    path = tmp_path / "w.csv"
    path.write_text(f"type,ts,x\nA,1,{'y' * (limit + 5)}\nA,2,z\n", encoding="utf-8")
    events, problems = read_events(path, errors="collect")
    assert [e.ts for e in events] == [2.0] and [p.row for p in problems] == [2]
    _same_as_legacy(path)


def test_csv_mixed_column_keeps_the_type_of_each_cell(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("type,ts,v\nA,1,42\nA,2,4.2\nA,3,true\nA,4,IBM\nA,5,\nA,6, 7 \n",
                    encoding="utf-8")
    events = list(read_events(path))
    assert [e.attrs.get("v", "absent") for e in events] == [42, 4.2, True, "IBM", "absent", 7]
    assert [type(e.attrs.get("v")).__name__ for e in events] == \
        ["int", "float", "bool", "str", "NoneType", "int"]


# --------------------------------------------------------------------------- typing in bulk

@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(cells, st.text(max_size=6), st.none()), max_size=30))
def test_typed_column_is_parse_cell_per_cell(texts):
    got = column_values(typed_column(pa.array(texts, pa.string()))).values
    want = [None if t is None or t == "" else parse_cell(t) for t in texts]
    assert [_typed(v) for v in got] == [_typed(v) for v in want]
    kept = column_values(typed_column(pa.array(texts, pa.string()), empty_absent=False)).values
    assert [_typed(v) for v in kept] == [_typed(None if t is None else parse_cell(t))
                                         for t in texts]


@given(st.lists(st.one_of(st.none(), st.text(max_size=5),
                          st.sampled_from([" a", "b\u3000", "\x1c", "\x85x\xa0", "é "]))))
def test_strip_text_is_str_strip(texts):
    got = strip_text(pa.array(texts, pa.string())).to_pylist()
    assert got == [None if t is None else t.strip() for t in texts]


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(0, 5))
def test_typed_column_of_a_slice_is_parse_cell_per_cell(data, start):
    """Columns that begin inside their buffers (bit and value offsets) read as unsliced."""
    texts = data.draw(st.lists(st.one_of(cells, st.none()), max_size=20))
    sliced = pa.array(["x"] * start + texts, pa.string()).slice(start)
    got = column_values(typed_column(sliced)).values
    want = [None if t is None or t == "" else parse_cell(t) for t in texts]
    assert [_typed(v) for v in got] == [_typed(v) for v in want]
    ts = pa.array([0] * start + [None if t is None else len(t) for t in texts],
                  pa.int64()).slice(start)
    table = pa.table({"type": pa.array(["A"] * len(texts)), "ts": ts})
    events, bad = build_events(table)
    assert [e.ts for e in events] == [float(len(t)) for t in texts if t is not None]
    assert [p for p, _ in bad] == [i for i, t in enumerate(texts) if t is None]


_ARROW_LISTS = [
    (pa.string(), st.text(max_size=4)), (pa.binary(), st.binary(max_size=4)),
    (pa.int64(), st.integers(-2 ** 63, 2 ** 63 - 1)), (pa.uint64(), st.integers(0, 2 ** 64 - 1)),
    (pa.float64(), st.floats(allow_nan=False)), (pa.bool_(), st.booleans())]


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(range(len(_ARROW_LISTS))))
def test_arrow_array_of_a_list_is_pa_array(data, which):
    arrow_type, values = _ARROW_LISTS[which]
    items = data.draw(st.lists(st.one_of(st.none(), values), max_size=40))
    got = arrow_array(items, arrow_type)
    assert got.type == arrow_type and got.null_count == items.count(None)
    assert got.equals(pa.array(items, arrow_type))
    assert got.to_pylist() == items


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from(["int8", "int32", "int64", "float64", "bool"]))
def test_arrow_array_of_numpy_is_pa_array(data, dtype):
    import numpy as np
    n = data.draw(st.integers(0, 40))
    values = np.array(data.draw(st.lists(st.integers(-100, 100), min_size=n, max_size=n)),
                      dtype=dtype)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    assert arrow_array(values).equals(pa.array(values))
    assert arrow_array(values, mask=mask).equals(pa.array(values, mask=mask))
    assert arrow_array(values[::2]).equals(pa.array(values[::2]))        # not contiguous


def test_arrow_array_refuses_what_pa_array_refuses():
    with pytest.raises(OverflowError):
        arrow_array([2 ** 63], pa.int64())
    with pytest.raises(OverflowError):
        arrow_array([-1], pa.uint64())
    with pytest.raises(UnicodeEncodeError):
        arrow_array(["\ud800"], pa.string())


def test_python_whitespace_is_below_u3001():
    import sys
    assert max(c for c in range(sys.maxunicode + 1) if chr(c).isspace()) <= 0x3000


def test_typed_column_of_one_kind_is_plain():
    assert typed_column(pa.array(["1", "-2", None, ""])).type == pa.int64()
    assert typed_column(pa.array(["1.5", "2e3"])).type == pa.float64()
    assert typed_column(pa.array(["true", "FALSE"])).to_pylist() == [True, False]
    assert typed_column(pa.array(["IBM", " x "])).to_pylist() == ["IBM", " x "]
    assert pa.types.is_union(typed_column(pa.array(["1", "1.5"])).type)


# --------------------------------------------------------------------------- Parquet

def _parquet(tmp_path, table, name="e.parquet"):
    path = tmp_path / name
    pq.write_table(table, path)
    return path


def test_parquet_gives_the_events_of_the_spark_mapping(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_reader, "PARQUET_BATCH_ROWS", 2)
    table = pa.table({
        "type": ["Stock", " Stock ", "Trade", "Stock", "Stock"],
        "ts": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "sym": ["IBM", "7", None, "AAPL", "x"],
        "price": [1.5, None, 2.0, 3.0, 4.5],
        "vol": pa.array([10, 20, None, 40, 50], pa.int32()),
        "flag": [True, False, None, True, False],
        "text": ["42", "4.2", "true", "", " a "],
        "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6)] * 5, pa.timestamp("us")),
        "day": pa.array([dt.date(2024, 1, 2)] * 5, pa.date32()),
        "dec": pa.array([decimal.Decimal("1.25")] * 5, pa.decimal128(5, 2)),
        "tags": [[1, 2], None, [], [3], [4]],
        "id": ["e1", None, "e3", None, "e5"],
    })
    path = _parquet(tmp_path, table)
    for key in (None, "sym"):
        got, problems = read_events(path, key_attr=key, errors="collect")
        mapping = EventMapping(key_column=key)
        want, dead = [], []
        for i, row in enumerate(table.to_pylist(), start=1):
            try:
                want.append(mapping.to_event(row, i))
            except IngestError as exc:
                dead.append(exc)
        assert _view(got) == _view(want)
        assert [(p.row, p.field) for p in problems] == [(p.row, p.field) for p in dead]
    assert [(p.row, p.field) for p in read_events(path, key_attr="sym", errors="collect")[1]] \
        == [(3, "sym")]
    assert "row 3" in str(read_events(path, key_attr="sym", errors="collect")[1][0])


def test_parquet_bad_rows_and_file_errors(tmp_path):
    path = _parquet(tmp_path, pa.table({"type": ["A", None, "A"],
                                        "ts": [1.0, 2.0, math.nan], "v": [1, 2, 3]}))
    events, problems = read_events(path, errors="collect")
    assert [e.ts for e in events] == [1.0]
    assert [(p.row, p.field) for p in problems] == [(2, "type"), (3, "ts")]
    missing = _parquet(tmp_path, pa.table({"type": ["A"]}), "m.parquet")
    with pytest.raises(IngestError, match="'ts'") as info:
        read_events(missing, errors="collect")
    assert info.value.field == "ts"
    junk = tmp_path / "j.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(IngestError, match="Parquet"):
        list(read_events(junk))


def test_parquet_file_of_csv_text_reads_like_the_csv(tmp_path):
    text = "type,ts,sym,price,flag\nA,1,IBM,1.5,true\nB,2.5,7,3,FALSE\n"
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(text, encoding="utf-8")
    table = pa.table({"type": ["A", "B"], "ts": ["1", "2.5"], "sym": ["IBM", "7"],
                      "price": ["1.5", "3"], "flag": ["true", "FALSE"]})
    path = _parquet(tmp_path, table)
    assert _view(read_events(path, errors="collect")[0]) == \
        _view(read_events(csv_path, errors="collect")[0])
    assert ".parquet" in sources.SUPPORTED_EXTENSIONS


# --------------------------------------------------------------------------- column batches

def _numeric_kind(attrs: dict, name) -> tuple:
    """What ColumnBatch.numeric must say of an Event's attribute: absent -> 0; a float, or an
    int (not a bool) float64 holds exactly -> 1 with its value; anything else -> 2."""
    if name not in attrs:
        return 0, None
    value = attrs[name]
    if value.__class__ is float or (value.__class__ is int and abs(value) <= 2 ** 53):
        return 1, float(value)
    return 2, None


def numeric_agrees(batch: ColumnBatch) -> list:
    """Check ``batch.numeric(name)`` (asked before any Event is made, then after) against the
    attributes of ``batch.events()`` for every attribute name; returns the events."""
    early = {name: batch.numeric(name) for name in batch.names}
    events = batch.events()
    names = set(early) | {name for ev in events for name in ev.attrs}
    for name in names:
        for vals, kinds in {id(got): got for got in (early.get(name), batch.numeric(name))
                            if got is not None}.values():
            assert len(vals) == len(kinds) == len(events)
            for i, ev in enumerate(events):
                kind, value = _numeric_kind(ev.attrs, name)
                assert kinds[i] == kind, (name, i, ev.attrs)
                if kind == 1:
                    assert vals[i] == value, (name, i, ev.attrs)
    return events


def _batch_matches_events(table, key_attr=None, **kw) -> tuple:
    """build_columns of ``table``: the batch's rows are build_events' events (type, ts, key,
    id, attribute order), its numeric columns agree with them; returns (events, problems)."""
    batch, problems = build_columns(table, key_attr, **kw)
    events, want_problems = build_events(table, key_attr, **kw)
    assert [(p, e.row, e.field, str(e)) for p, e in problems] == \
        [(p, e.row, e.field, str(e)) for p, e in want_problems]
    got = numeric_agrees(batch)
    assert _view(got) == _view(events)
    assert len(batch) == len(events) == table.num_rows - len(problems)
    assert batch.types == [e.type for e in events] and batch.times == [e.ts for e in events]
    if batch.keys is None:
        assert all(e.key is None for e in events)
    else:
        assert batch.keys == [e.key for e in events]
    for i in range(0, len(batch), max(3, len(batch) // 8)):    # a slice, from scratch
        again, _ = build_columns(table, key_attr, **kw)
        assert _view(numeric_agrees(again.slice(i, i + 4))) == _view(events[i:i + 4])
    return events, problems


def _mixed_table(plain: int = 0) -> pa.Table:
    """Six rows of columns of every kind a batch holds: plain Arrow columns with nulls, a
    union (mixed kinds), uint64, ints beyond 2**53, JSON nulls (present null values: made
    by make_event), lists and maps (make_event too); then ``plain`` rows of plain values
    (the few rows make_event sees are then decoded alone)."""
    def column(values, more):
        return values + [more(i) for i in range(plain)]
    return pa.table({
        "type": column(["A", "B", "A", "A", "B", "A"], lambda i: "AB"[i % 2]),
        "ts": pa.array(column([1, 2, 3, 4, 5, 6], lambda i: 7 + i), pa.int64()),
        "f": pa.array(column([1.5, None, -0.0, 2.0, 3.5, 1e300], lambda i: i / 3)),
        "i": pa.array(column([1, 2 ** 53, 2 ** 53 + 1, -2 ** 53 - 1, None, -5], lambda i: i),
                      pa.int64()),
        "u": pa.array(column([2 ** 64 - 1, 5, None, 2 ** 53, 2 ** 53 + 1, 0], lambda i: i),
                      pa.uint64()),
        "b": column([True, False, None, True, True, False], lambda i: i % 3 == 0),
        "s": column(["x", None, "1", "", "y", "z"], lambda i: f"s{i % 4}"),
        "by": pa.array(column([b"a", None, b"", b"c", b"d", b"e"], lambda i: b"p")),
        "mixed": typed_column(pa.array(column(["1", "2.5", "true", "x", None, str(2 ** 60)],
                                              lambda i: str(i)))),
        "null": column_from_values(column([None, 1, None, 2.5, "s", True], lambda i: i),
                                   none_is_absent=False),
        "tags": column([[1], None, [], [2, 3], None, [4]], lambda i: None),
        "attrs": pa.array(column([None, [("q", 1)], None, [("q", 2.5), ("r", 3)], None, None],
                                 lambda i: None), pa.map_(pa.string(), pa.int64())),
        "key": column(["k1", "k2", None, "k1", "k2", "k3"], lambda i: f"k{i % 3}"),
    })


@pytest.mark.parametrize("plain", [0, 200])
@pytest.mark.parametrize("key_attr", [None, "key", "i", "s", "u"])
def test_build_columns_is_build_events_and_numeric_agrees(key_attr, plain):
    events, problems = _batch_matches_events(_mixed_table(plain), key_attr, first_row=10)
    if key_attr == "i":
        assert [(p, e.row, e.field) for p, e in problems] == [(4, 14, "i")]
    if key_attr is None:
        assert problems == [] and list(events[3].attrs) == \
            ["f", "i", "u", "b", "s", "by", "mixed", "null", "tags", "q", "r"]


def test_build_columns_of_a_table_without_good_rows():
    table = pa.table({"type": ["A", None], "ts": [float("nan"), 2.0]})
    batch, problems = build_columns(table)
    assert len(batch) == 0 and batch.events() == [] and len(problems) == 2
    assert len(build_columns(table.slice(0, 0))[0]) == 0


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(0, 12), st.sampled_from([None, "key", "x"]))
def test_build_columns_of_typed_text_and_json_values(data, n, key_attr):
    """CSV-typed columns (one kind or a union of kinds) and JSON values (nulls, nesting,
    big integers: rows made by make_event) in one table."""
    text = st.lists(st.one_of(cells, st.none()), min_size=n, max_size=n)
    table = typed_table(pa.table({
        "type": pa.array(data.draw(st.lists(type_cells, min_size=n, max_size=n))),
        "ts": pa.array(data.draw(st.lists(ts_cells, min_size=n, max_size=n))),
        "x": pa.array(data.draw(text), pa.string()),
        "key": pa.array(data.draw(text), pa.string())}))
    values = data.draw(st.lists(json_values, min_size=n, max_size=n))
    try:
        json_column = column_from_values(values, "j", none_is_absent=False, bigint=True)
    except IngestError:                     # no column form (a big int in a list): row by row
        assume(False)
    table = table.append_column("j", json_column)
    _batch_matches_events(table, key_attr, rows=list(range(2, n + 2)))


@settings(max_examples=300, deadline=None)
@given(cells=st.lists(st.one_of(st.none(), st.text("0123456789.-+eE x", max_size=24),
                                st.text("0123456789", min_size=1, max_size=22),
                                st.from_regex(r"-?[0-9]{1,20}\.[0-9]{1,20}", fullmatch=True)),
                      max_size=40),
       cut=st.integers(0, 3))
def test_the_byte_check_before_the_number_patterns_changes_no_answer(cells, cut):
    """Cells a byte check proves to be numbers skip the regular expressions of the number
    patterns; every answer stays the expression's (sliced arrays too)."""
    import numpy as np
    import pyarrow.compute as pc

    from raycep.cep.io import columns
    arr = pa.array(cells, pa.string()).slice(min(cut, len(cells)))

    def want(pattern):
        return np.asarray(pc.fill_null(pc.match_substring_regex(arr, pattern), False),
                          dtype=bool)
    ints, floats = columns._shapes(arr)
    assert ints.tolist() == want(columns._INT_FAST).tolist()       # exactly the pattern
    assert not (floats & ~want(columns._FLOAT_FAST)).any()          # surely floats
    assert columns._match(arr, columns._TS_FAST).tolist() == want(columns._TS_FAST).tolist()
    typed = columns.typed_column(arr)                               # as parse_cell types them
    from raycep.cep.io.cells import parse_cell
    values = columns.column_values(typed).values
    for cell, value in zip(arr.to_pylist(), values):
        expected = None if cell is None or cell == "" else parse_cell(cell)
        assert type(value) is type(expected) and value == expected, (cell, value)
