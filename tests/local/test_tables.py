"""Tables in, tables out: DataFrames and Arrow tables as the engine's input (cep.io.tables),
matches as an Arrow table (cep.io.match_table), ``local.match.match`` against ``raycep local``
run as a subprocess on the same events written to CSV, Engine.process_table, and the client
sending a DataFrame to an in-process cluster."""
import datetime as dt
import json
import math
import pathlib
import random
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from raycep.cep import Engine, Event
from raycep.cep.errors import IngestError
from raycep.cep.io.columns import convert_times
from raycep.cep.io.match_table import matches_table
from raycep.cep.io.sources import read_events
from raycep.cep.io.tables import BATCH_ROWS, TableReader, TimeUnitWarning
from raycep.cep.io.timestamps import event_time, timestamp_seconds
from raycep.cep.lang.builder import attr, kleene, neg, query, seq, var
from raycep.cep.lang.parser import parse_queries
from raycep.cep.match import MatchBlock, match_id
from raycep.local.match import match
from raycep.local.queries import QuerySourceError

from cluster_helpers import ids_of, make_stream, read_all

ROOT = pathlib.Path(__file__).resolve().parents[2]
EPOCH = dt.datetime(2024, 3, 1, 9, 30)                 # naive: UTC
SYMBOLS = ("AAA", "BBB", "CCC", "DDD")

RISE = """NAME rise PATTERN SEQ(Stock a, Stock b)
WHERE [symbol] AND b.price > a.price * 1.02 WITHIN 30 seconds"""
CLIMB = """NAME climb PATTERN SEQ(Stock a, Stock+ b[], Stock c)
WHERE skip_till_next_match(a, b, c) {
    [symbol] AND b[1].price > a.price AND b[i].price > b[i-1].price AND b.LEN >= 3
    AND c.price < LAST(b.price) }
WITHIN 20 seconds"""
LOUD = """NAME loud PATTERN SEQ(News n, Stock s) WHERE s.volume > 9000 WITHIN 5 seconds"""
#: a builder query: a drop of 2 % with no news in between (same symbol)
DROP = query(seq(var("Stock", "a"), neg("News", "n"), var("Stock", "b")),
             where=(attr("b", "price") < attr("a", "price") * 0.98), equivalence="symbol",
             within=(1, "minutes"), name="drop")


# --------------------------------------------------------------------------- data

def ticks(n=3000, seed=7) -> dict:
    """Columns of a deterministic stream of Stock ticks and News items (ms event times, ties
    included); News rows have no price or volume, Stock rows no headline."""
    rng = random.Random(seed)
    cols = {name: [] for name in ("type", "ts_ms", "symbol", "price", "volume", "headline")}
    ms = int(EPOCH.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    prices = {s: 100.0 + 20 * k for k, s in enumerate(SYMBOLS)}
    for _ in range(n):
        ms += rng.choice((0, 1, 7, 250, 500, 999, 1500))
        symbol = rng.choice(SYMBOLS)
        news = rng.random() < 0.1
        cols["type"].append("News" if news else "Stock")
        cols["ts_ms"].append(ms)
        cols["symbol"].append(symbol)
        if news:
            cols["price"].append(None)
            cols["volume"].append(None)
            cols["headline"].append(rng.choice(("beats", "misses", "says \"hi\", too")))
        else:
            prices[symbol] = round(prices[symbol] * rng.uniform(0.985, 1.016), 2)
            cols["price"].append(prices[symbol])
            cols["volume"].append(rng.randrange(100, 10_000))
            cols["headline"].append(None)
    return cols


@pytest.fixture(scope="module")
def data():
    return ticks()


def frame(cols, ts) -> pd.DataFrame:
    """A pandas frame of ``ticks`` with ``ts`` as its event-time column."""
    return pd.DataFrame({"type": cols["type"], "ts": ts, "symbol": cols["symbol"],
                         "price": pd.array(cols["price"], dtype="Float64"),
                         "volume": pd.array(cols["volume"], dtype="Int64"),
                         "headline": pd.array(cols["headline"], dtype=object)})


def datetimes(cols, unit="ns", tz=None) -> pd.Series:
    out = pd.to_datetime(pd.Series(cols["ts_ms"]), unit="ms").astype(f"datetime64[{unit}]")
    return out.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else out


def iso(cols) -> list:
    """The event times as ISO text (ms, +00:00 or Z)."""
    return [(dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)).isoformat(
        timespec="milliseconds") + ("Z" if ms % 2 else "+00:00") for ms in cols["ts_ms"]]


def write_csv(path, cols, ts_cells) -> pathlib.Path:
    """``ticks`` as CSV (absent = empty cell, text quoted where it needs it)."""
    import csv
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["type", "ts", "symbol", "price", "volume", "headline"])
        for k, ts in enumerate(ts_cells):
            writer.writerow([cols["type"][k], ts, cols["symbol"][k],
                             "" if cols["price"][k] is None else repr(cols["price"][k]),
                             "" if cols["volume"][k] is None else cols["volume"][k],
                             cols["headline"][k] or ""])
    return path


def line_id(record) -> str:
    """``match_id`` of a ``raycep local`` line (from its events' ids)."""
    key = frozenset((v, tuple(e["id"] for e in x) if isinstance(x, list) else x["id"])
                    for v, x in record["events"].items())
    return match_id(SimpleNamespace(query=record["query"], key=lambda: key))


def raycep_local(tmp_path, queries, events, *extra) -> list:
    """The records of ``raycep local`` run as a subprocess, each with its match id."""
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}.jsonl"
    argv = [sys.executable, "-m", "raycep", "local", "--events", str(events),
            "--key", "symbol", "--out", str(out), "--workers", "1", *map(str, extra)]
    for q in queries:
        argv += ["--query", q]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for record in records:
        record["id"] = line_id(record)
    return records


def found(table) -> list:
    """(query, id, retracted) of each row."""
    return list(zip(table.column("query").to_pylist(), table.column("id").to_pylist(),
                    table.column("retracted").to_pylist()))


def expected(records) -> list:
    return [(r["query"], r["id"], r.get("retracted", False)) for r in records]


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """``raycep local`` of the three text queries and the builder query (as its text in a
    query file) over ``ticks`` as CSV with ISO event times."""
    tmp = tmp_path_factory.mktemp("local")
    csv = write_csv(tmp / "ticks.csv", data, iso(data))
    qfile = tmp / "drop.cep"
    qfile.write_text(str(DROP) + ";\n", encoding="utf-8")
    records = raycep_local(tmp, [RISE, str(qfile), CLIMB, LOUD], csv, "--ts-format", "iso")
    assert {r["query"] for r in records} == {"rise", "drop", "climb", "loud"}
    assert any(r.get("retracted") for r in records)     # ties taken out of (ts, id) order
    return records


QUERIES = [RISE, DROP, CLIMB, LOUD]


# --------------------------------------------------------------------------- match vs local

def test_pandas_datetime64_ns_gives_raycep_locals_matches_and_ids(data, reference):
    table = match(QUERIES, frame(data, datetimes(data, "ns")), key="symbol")
    assert found(table) == expected(reference)
    assert table.schema.field("start").type == pa.timestamp("ns")
    starts = [min(e["ts"] for x in r["events"].values() for e in (x if isinstance(x, list)
                                                                   else [x]))
              for r in reference]
    got = pc.divide(table.column("start").cast(pa.int64()), 1_000_000).to_pylist()
    assert got == [round(s * 1000) for s in starts]                # ms exact


def test_tz_aware_times_are_the_instants_they_name(data, reference):
    ts = datetimes(data, "us", tz="America/New_York")
    table = match(QUERIES, frame(data, ts), key="symbol")
    assert found(table) == expected(reference)
    assert table.schema.field("end").type == pa.timestamp("us", tz="America/New_York")
    first = table.column("start")[0].as_py()
    assert first.tzinfo is not None and first.utcoffset() in (dt.timedelta(hours=-5),
                                                             dt.timedelta(hours=-4))


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_arrow_table_with_timestamp_column(data, reference, unit):
    ts = pa.array(data["ts_ms"], pa.int64()).cast(pa.timestamp("ms")).cast(pa.timestamp(unit))
    table = pa.table({"type": data["type"], "ts": ts, "symbol": data["symbol"],
                      "price": pa.array(data["price"], pa.float64()),
                      "volume": pa.array(data["volume"], pa.int64()),
                      "headline": pa.array(data["headline"], pa.string())})
    got = match(QUERIES, table, key="symbol")
    assert found(got) == expected(reference)
    assert got.schema.field("start").type == pa.timestamp(unit)


def test_numeric_times_with_a_unit(data, reference, tmp_path):
    df = frame(data, data["ts_ms"])
    assert found(match(QUERIES, df, key="symbol", ts_format="ms")) == expected(reference)
    csv = write_csv(tmp_path / "ms.csv", data, data["ts_ms"])
    qfile = tmp_path / "drop.cep"
    qfile.write_text(str(DROP), encoding="utf-8")
    assert expected(raycep_local(tmp_path, [RISE, str(qfile), CLIMB, LOUD], csv,
                                 "--ts-format", "ms")) == expected(reference)
    # seconds as floats: the same times, float seconds back
    seconds = [ms / 1000 for ms in data["ts_ms"]]
    table = match(QUERIES, frame(data, seconds), key="symbol")
    assert found(table) == expected(reference)
    assert table.schema.field("start").type == pa.float64()


def test_iso_text_times(data, reference):
    table = match(QUERIES, frame(data, iso(data)).rename(columns={"ts": "when"}),
                  key="symbol", ts="when", ts_format="iso")
    assert found(table) == expected(reference)
    assert table.schema.field("start").type == pa.timestamp("us", tz="UTC")


def test_record_batch_reader_and_small_batches(data, reference):
    source = pa.Table.from_pandas(frame(data, datetimes(data, "ms")), preserve_index=False)
    reader = pa.RecordBatchReader.from_batches(source.schema,
                                               source.to_batches(max_chunksize=97))
    assert found(match(QUERIES, reader, key="symbol")) == expected(reference)


class ArrowStream:
    """A table known only by the Arrow C stream interface (as a polars DataFrame, DuckDB
    relation, ... offer it)."""

    def __init__(self, table):
        self.table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self.table.__arrow_c_stream__(requested_schema)


def test_any_object_with_the_arrow_c_stream_interface(data, reference):
    source = pa.Table.from_pandas(frame(data, datetimes(data, "us")), preserve_index=False)
    assert found(match(QUERIES, ArrowStream(source), key="symbol")) == expected(reference)


_NO_PANDAS = """
import sys
import numpy as np
import pyarrow as pa
from raycep.cep.store.arrow import arrow_array
from raycep.local.match import match
n = 100
table = pa.Table.from_arrays(
    [arrow_array(["A", "B"] * (n // 2), pa.string()),
     arrow_array(np.arange(n, dtype=np.int64) * 1000).cast(pa.timestamp("ms")),
     arrow_array(np.arange(n, dtype=np.int64))], names=["type", "ts", "x"])
found = match("PATTERN SEQ(A a, B b) WHERE a.x < b.x WITHIN 3 seconds", table)
print(found.num_rows, "pandas" in sys.modules)
"""


def test_an_arrow_table_in_and_out_never_imports_pandas():
    done = subprocess.run([sys.executable, "-c", _NO_PANDAS], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["99", "False"]


def test_parquet_path(data, reference, tmp_path):
    path = tmp_path / "ticks.parquet"
    pq.write_table(pa.Table.from_pandas(frame(data, datetimes(data, "ms")),
                                        preserve_index=False), path)
    table = match(QUERIES, str(path), key="symbol")
    assert found(table) == expected(reference)
    assert table.schema.field("start").type == pa.timestamp("ms")


def test_a_query_file_path_a_csv_path_and_one_query(data, reference, tmp_path):
    csv = write_csv(tmp_path / "t.csv", data, iso(data))
    qfile = tmp_path / "q.cep"
    qfile.write_text(RISE + ";\n" + CLIMB, encoding="utf-8")
    table = match(str(qfile), csv, key="symbol", ts_format="iso")
    assert found(table) == [p for p in expected(reference) if p[0] in ("rise", "climb")]
    only = match(DROP, frame(data, datetimes(data)), key="symbol")
    assert found(only) == [p for p in expected(reference) if p[0] == "drop"]


def test_the_bound_events_as_structs_and_lists_of_structs(data, reference):
    """Each variable's column holds its events as ``raycep local`` writes them (float
    seconds in: float times out); "b" is Kleene in climb, so a list in every row."""
    table = match(QUERIES, frame(data, [ms / 1000 for ms in data["ts_ms"]]), key="symbol")
    climb = table.schema.field("b").type
    assert pa.types.is_list(climb) and pa.types.is_struct(climb.value_type)
    assert pa.types.is_struct(table.schema.field("a").type)
    fields = [f.name for f in table.schema.field("a").type]
    assert fields[:4] == ["id", "type", "ts", "key"] and {"price", "volume"} <= set(fields)
    rows = table.to_pylist()
    assert any(r["query"] == "climb" and len(r["b"]) >= 3 for r in rows)
    assert len(rows) == len(reference)
    for row, record in zip(rows, reference):
        for name in ("a", "b", "c", "n", "s"):
            want, got = record["events"].get(name), row.get(name)
            if want is None:
                assert got is None
                continue
            want = want if isinstance(want, list) else [want]
            got = got if isinstance(got, list) else [got]
            assert [{k: v for k, v in g.items() if v is not None} for g in got] == want
    assert [r["retracted"] for r in rows] == [r.get("retracted", False) for r in reference]


def test_to_pandas_gives_a_usable_frame(data):
    table = match(QUERIES, frame(data, datetimes(data, "us")), key="symbol")
    df = table.to_pandas()
    assert list(df.columns[:5]) == ["query", "id", "retracted", "start", "end"]
    assert str(df["start"].dtype) == "datetime64[us]" and (df["end"] >= df["start"]).all()
    rise = df[df["query"] == "rise"]
    assert len(rise) and (rise["b"].map(lambda b: b[0]["price"]) >      # (Kleene in climb)
                          rise["a"].map(lambda a: a["price"]) * 1.02).all()
    retracted = df["retracted"]
    assert retracted.any() and set(df["id"][retracted]) <= set(df["id"][~retracted])
    flat = table.flatten()
    assert "a.price" in flat.column_names


def test_help_of_match_explains_arguments_and_columns():
    text = match.__doc__
    for word in ("queries", "events", "key", "params", "ts_format", "RecordBatchReader",
                 "query", "retracted", "start", "end", "struct", "Kleene", "Usage"):
        assert word in text, word


# --------------------------------------------------------------------------- the columns

def test_type_as_a_constant_and_columns_under_other_names(data):
    stocks = [k for k, t in enumerate(data["type"]) if t == "Stock"]
    df = frame(data, datetimes(data)).iloc[stocks].drop(columns="type")
    df = df.rename(columns={"ts": "time"}).set_index("time")            # an index level
    table = match(RISE, df, key="symbol", ts="time", type="Stock")
    with_type = frame(data, datetimes(data)).iloc[stocks]
    assert found(table) == found(match(RISE, with_type, key="symbol"))
    assert table.num_rows > 0


def test_mixed_object_column_keeps_each_values_kind():
    df = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1.0, 2.0, 3.0, 4.0],
                       "x": [1, "high", 2.5, None]})
    (batch,) = TableReader(df)
    events = batch.events()
    assert [e.attrs for e in events] == [{"x": 1}, {"x": "high"}, {"x": 2.5}, {}]
    assert [e.id for e in events] == [Event(e.type, e.ts, e.attrs).id for e in events]


def test_text_attributes_stay_text():
    df = pd.DataFrame({"type": ["A"], "ts": [1], "code": ["007"], "flag": ["true"]})
    (batch,) = TableReader(df)
    assert batch.events()[0].attrs == {"code": "007", "flag": "true"}


def test_large_tables_come_in_batches_with_rows_counted_from_zero():
    n = BATCH_ROWS + 10
    ts = np.arange(n, dtype=np.float64)
    ts[BATCH_ROWS + 3] = np.nan
    reader = TableReader(pa.table({"type": ["A"] * n, "ts": ts}))
    first = next(iter(reader))
    assert len(first) == BATCH_ROWS
    with pytest.raises(IngestError) as info:
        list(reader)
    assert info.value.row == BATCH_ROWS + 3 and info.value.field == "ts"
    assert "finite" in str(info.value)


def test_time_conversion_is_event_time_of_each_value():
    """Numeric times in a unit and timestamps, read in bulk, are exactly what
    ``event_time`` and ``datetime.timestamp()`` give value by value (beyond 2**53 too)."""
    rng = random.Random(3)
    for unit, per in (("ms", 1_000), ("us", 10 ** 6), ("ns", 10 ** 9)):
        ints = [rng.randrange(-2 ** 62, 2 ** 62) if k % 5 == 0 else
                rng.randrange(0, 2 * 10 ** 18) if k % 7 else None for k in range(3000)]
        table, errors = convert_times(pa.table({"ts": pa.array(ints, pa.int64())}), unit)
        assert not errors
        assert table.column("ts").to_pylist() == [None if v is None else event_time(v, unit)
                                                  for v in ints]
        stamps = pa.array(ints, pa.int64()).cast(pa.timestamp(unit))
        assert timestamp_seconds(stamps).to_pylist() == [None if v is None else v / per
                                                      for v in ints]
        floats = [rng.uniform(-1e15, 1e15) for _ in range(2000)] + [math.nan]
        table, errors = convert_times(pa.table({"ts": floats}), unit)
        assert table.column("ts").to_pylist()[:-1] == [event_time(v, unit)
                                                       for v in floats[:-1]]
        assert list(errors) == [2000] and "finite" in str(errors[2000])


def test_iso_text_read_in_bulk_is_event_time_of_each_cell():
    """The ISO forms read in bulk give exactly ``event_time(cell, "iso")``, and a cell in
    another form, out of range or not a time is read (or refused) by ``event_time``."""
    rng = random.Random(5)
    cells = []
    for _ in range(20_000):
        cells.append(None if rng.random() < 0.01 else "%04d-%02d-%02d%s%02d:%02d:%02d%s%s" % (
            rng.choice((rng.randint(1, 9999), rng.randint(1960, 2100))), rng.randint(0, 13),
            rng.randint(0, 32), rng.choice("T T "), rng.randint(0, 25), rng.randint(0, 60),
            rng.randint(0, 60), rng.choice(("", ".123", ".123456", ".5", ".1234567", ".")),
            rng.choice(("", "Z", "+01:00", "-05:30", "+23:59", "+24:00", "+0100", " "))))
    table, errors = convert_times(pa.table({"ts": pa.array(cells, pa.string())}), "iso")
    got = table.column("ts").to_pylist()
    for k, cell in enumerate(cells):
        try:
            want = None if cell is None else event_time(cell, "iso", k)
        except IngestError as err:
            assert got[k] is None and str(errors[k]) == str(err)
            continue
        assert got[k] == want and k not in errors, cell
    assert 0 < len(errors) < len(cells) // 2


# --------------------------------------------------------------------------- bad input

def bad(table, **kw) -> IngestError:
    with pytest.raises(IngestError) as info:
        list(TableReader(table, **kw))
    return info.value


def test_bad_tables_are_named_by_column_and_problem():
    base = {"type": ["A", "B"], "ts": [1.0, 2.0]}
    err = bad(pd.DataFrame({"type": ["A"], "time": [1.0]}))
    assert err.field == "ts" and "no event-time column 'ts'" in str(err) and "ts=" in str(err)
    err = bad(pd.DataFrame({"ts": [1.0]}))
    assert err.field == "type" and "type='Stock'" in str(err)
    err = bad(pd.DataFrame({"type": ["A", "B", "A"], "when": [1.0, None, 3.0]}), ts="when")
    assert err.field == "when" and err.row == 1 and "missing (null)" in str(err)
    err = bad(pd.DataFrame({"type": ["A", "B"], "ts": pd.to_datetime([None, "2024-01-01"])}))
    assert err.field == "ts" and err.row == 0
    err = bad(pd.DataFrame({**base, "ts": [True, False]}))
    assert err.field == "ts" and "type bool" in str(err)
    err = bad(pd.DataFrame({**base, "wait": pd.to_timedelta([1, 2], unit="s")}))
    assert err.field == "wait" and "duration" in str(err) and "total_seconds" in str(err)
    err = bad(pd.DataFrame({**base, "type": [1, 2]}))
    assert err.field == "type" and "event types are text" in str(err)
    err = bad(pd.DataFrame(base), ts_format="iso")
    assert err.field == "ts" and "holds numbers" in str(err)
    err = bad(pd.DataFrame({"type": ["A"], "ts": ["2024-01-01T10:00:00"]}))
    assert err.field == "ts" and "ts_format='iso'" in str(err)
    err = bad(pd.DataFrame({"type": ["A"], "ts": ["yesterday"]}), ts_format="iso")
    assert err.field == "ts" and err.row == 0 and "'yesterday'" in str(err)
    err = bad(pd.DataFrame(base), key_attr="symbol")
    assert err.field == "symbol" and "partition key" in str(err)
    err = bad(pd.DataFrame({**base, "time": [1, 2]}), ts="time")
    assert err.field == "ts" and "rename or drop" in str(err)
    err = bad(pd.DataFrame({**base, "x": [1.0, math.inf]}))
    assert err.field == "x" and err.row == 1
    with pytest.raises(TypeError, match="expected a table"):
        TableReader([{"type": "A", "ts": 1.0}])
    with pytest.raises(IngestError, match="unknown event-time format"):
        TableReader(pd.DataFrame(base), ts_format="minutes")


def test_match_refuses_what_it_cannot_use(data, tmp_path):
    df = frame(data, datetimes(data))
    with pytest.raises(QuerySourceError, match="query #1"):
        match("PATTERN SEQ(Stock a, Stock b", df)
    with pytest.raises(QuerySourceError, match="has no value"):
        match("PATTERN SEQ(Stock a, Stock b) WITHIN W", df)
    with pytest.raises(TypeError, match="a query is query text"):
        match(42, df)
    with pytest.raises(TypeError, match="columns of a table"):
        match(RISE, str(tmp_path / "x.csv"), ts="when")
    with pytest.raises(TypeError, match="expected a table"):
        match(RISE, [Event("Stock", 1.0)])


def test_seconds_that_look_like_milliseconds_are_warned_about(data):
    with pytest.warns(TimeUnitWarning, match="ts_format='ms'"):
        match(RISE, frame(data, data["ts_ms"]), key="symbol")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimeUnitWarning)
        match(RISE, frame(data, data["ts_ms"]), key="symbol", ts_format="ms")


# --------------------------------------------------------------------------- the engine

def test_engine_process_table_equals_processing_the_events(data):
    df = frame(data, datetimes(data, "ms"))
    events = [Event(t, ms / 1000, {k: v for k, v in (("symbol", s), ("price", p),
                                                     ("volume", v), ("headline", h))
                                   if v is not None}, key=s)        # (as a file's rows are)
              for t, ms, s, p, v, h in zip(data["type"], data["ts_ms"], data["symbol"],
                                           data["price"], data["volume"], data["headline"])]

    def run(feed):
        engine = Engine(key_attr="symbol")
        for q in (RISE, DROP, CLIMB):
            engine.add_query(q)
        return [match_id(m) for m in feed(engine) + engine.advance(math.inf)]

    want = run(lambda e: [m for ev in events for m in e.process(ev)])
    assert want
    assert run(lambda e: e.process_table(df)) == want
    assert run(lambda e: e.process_many(df)) == want
    with pytest.raises(TypeError, match="process_table"):
        Engine().process(df)
    with pytest.raises(TypeError, match=r"raycep\.Event"):
        Engine().process({"type": "A", "ts": 1.0})


def test_match_table_rows_are_the_matches(data, tmp_path):
    """The table built column-wise from Match objects and MatchBlocks (one query: blocks)
    holds each match's id, times and events, in order; retractions are flagged."""
    from raycep.cep.match import Match, Retraction
    from raycep.cep.store.batch import ColumnBatch
    from raycep.local.queries import load_queries
    from raycep.local.run import build_engine
    ours = write_csv(tmp_path / "t.csv", data, iso(data))
    for path, unit, queries in ((ROOT / "examples" / "ticks.csv", "s", [RISE]),
                                (ours, "iso", [RISE, CLIMB, DROP])):
        events = list(read_events(path, key_attr="symbol", ts_unit=unit))
        engine = build_engine(load_queries(queries), key="symbol")
        out = []
        for k in range(0, len(events), 500):
            out += engine.process_columns(ColumnBatch.from_events(events[k:k + 500]),
                                          blocks=True)
        out += engine.advance(math.inf)
        flat = [m for x in out for m in (x if x.__class__ is MatchBlock else [x])]
        if unit == "s":                 # in time order, one query: blocks
            assert any(x.__class__ is MatchBlock for x in out)
        else:
            assert any(m.retracted for m in flat)
        table = matches_table(out)
        assert table.column("id").to_pylist() == [m.id for m in flat] == \
            [match_id(m) for m in flat]
        assert table.column("start").to_pylist() == [m.start for m in flat]
        assert table.column("end").to_pylist() == [m.end for m in flat]
        assert table.column("query").to_pylist() == [m.query for m in flat]
    a, b = Event("A", 1.0, {"x": 1}), Event("B", 2.0, {"x": [1, "y"]})
    m = Match("q", {"a": a, "b": b}, ("a", "b"))
    table = matches_table([m, Retraction.of(m)])
    assert table.column("retracted").to_pylist() == [False, True]
    assert table.column("id").to_pylist() == [m.id, m.id]
    assert table.column("b").to_pylist()[0]["x"] == '[1,"y"]'        # a list: its JSON
    assert m.to_dict()["start"] == 1.0 and m.to_dict()["end"] == 2.0


# --------------------------------------------------------------------------- the client

def test_client_sends_a_dataframe_as_columns(make_cluster):
    events = make_stream(600, 5, 4, 1000.0, gaps=(0.25, 0.5, 1.0))
    df = pd.DataFrame([{"type": e.type, "ts": e.ts, **e.attrs} for e in events])
    seq3 = query(seq(var("A", "a"), var("B", "b"), var("C", "c")),
                 where="[k] AND a.x < b.x AND b.x > c.x", within=10, name="seq3")
    got = {}
    for how, payload in (("events", events), ("frame", df)):
        from raycep.gateway.client import connect
        client = connect(make_cluster().url)
        assert client.register(seq3) == "seq3"
        ack = client.send(payload)
        assert ack["events"] == 600 and ack["bad_rows"] == []
        client.advance(2000.0)
        client.drained()
        got[how] = ids_of(read_all(client, "seq3"))
        bulk = sum(a["paths"].get("seq3", {}).get("bulk", 0)
                   for a in client.stats()["actors"].values())
        assert (bulk > 0) == (how == "frame"), bulk  # a table's rows reach the actors as
        if how == "frame":                           # columns, evaluated in bulk
            with pytest.raises(TypeError):
                client.send(42)
            with pytest.raises(TypeError):
                client.send("type,ts\nA,1")
            with pytest.raises(TypeError, match="row 1"):
                client.send([{"type": "A", "ts": 1.0, "k": "x"}, ("A", 2.0)])
            with pytest.raises(IngestError, match="'ts'"):
                client.send(df.drop(columns="ts"))
    assert got["events"] and sorted(got["frame"]) == sorted(got["events"])


def test_client_sends_a_large_table_in_batches_and_adds_the_acks(make_cluster, monkeypatch):
    import raycep.gateway.client
    monkeypatch.setattr(raycep.gateway.client, "TABLE_BATCH_ROWS", 100)
    client = raycep.gateway.client.connect(make_cluster().url)
    table = pa.table({"type": ["A", "B"] * 150, "ts": [float(k) for k in range(300)],
                      "k": ["x"] * 300, "x": [1.0] * 299 + [math.nan]})
    ack = client.send(table)
    assert ack["events"] == 299 and sum(ack["partitions"].values()) == 299
    assert len(ack["bad_rows"]) == 1 and ack["bad_rows"][0].startswith("row 299")
