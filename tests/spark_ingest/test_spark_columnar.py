"""raycep.spark_ingest.columnar in-process (no Spark): the bulk path of the Spark job gives the
events, event ids, routing targets, order and dead letters of the reference,
``EventMapping.to_event`` applied row by row (then ``partition_of`` of the event's key, and
the engine's ``(ts, id)`` order per actor).

``through_columnar`` does what the job does around Spark: ``Plan.prepare`` per input batch
(``mapInArrow``), a stable sort by event time (``sortWithinPartitions``), ``Chunker`` and
``encode_chunk`` (the push task), then ``cep.io.codec.decode_batch`` as the actor decodes."""
import json
import math

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raycep.actors.routing import partition_of
from raycep.cep.errors import CepError
from raycep.cep.io.codec import decode_batch
from raycep.spark_ingest.columnar import (TS, Chunker, Plan, category_of,
                                   encode_chunk)
from raycep.spark_ingest.dead_letters import Locator
from raycep.spark_ingest.job import MALFORMED, in_time_order, partition_values, spark_hash_int
from raycep.spark_ingest.job import _check_order as check_order
from raycep.spark_ingest.mapping import EventMapping

# --------------------------------------------------------------------------- the two paths


def through_columnar(mapping, table, partitions=2, global_types=frozenset(), size=3,
                     split=4):
    """{target: [events]} and the dead-letter records of ``table`` through the bulk path."""
    columns = {f.name: category_of(f.type) for f in table.schema if f.name != MALFORMED}
    plan = Plan(mapping, columns, partitions, global_types,
                malformed=MALFORMED if MALFORMED in table.schema.names else None)
    prepared = pa.Table.from_batches([plan.prepare(b) for b in
                                      table.to_batches(max_chunksize=split)], plan.schema())
    prepared = prepared.take(pc.sort_indices(prepared, [(TS, "ascending", "at_start")]))
    chunker = Chunker(plan, size)
    dead, chunks = [], []
    for batch in prepared.to_batches(max_chunksize=split):
        got, out = chunker.add(batch)
        dead += got
        chunks += out
    chunks += chunker.flush()
    events: dict = {}
    for n, (target, chunk) in enumerate(chunks):
        events.setdefault(target, []).extend(
            decode_batch(encode_chunk(plan, chunk, "test", f"b{n}")).events)
    return events, [json.loads(d) for d in dead], chunks


def reference(mapping, table, partitions=2, global_types=frozenset()):
    """The same through EventMapping.to_event, row by row."""
    events, reasons = {}, []
    for row in table.to_pylist():
        row.pop(MALFORMED, None)
        try:
            ev = mapping.to_event(row)
            target = partition_of(ev.key, partitions)
        except CepError as exc:
            reasons.append(str(exc))
            continue
        events.setdefault(target, []).append(ev)
        if global_types is None or ev.type in global_types:
            events.setdefault(partitions, []).append(ev)
    return {t: sorted(evs, key=lambda e: (e.ts, e.id)) for t, evs in events.items()}, reasons


def described(events) -> list:
    """Everything that makes an event, Python types included."""
    return [(e.id, e.type, e.ts, type(e.ts), e.key, type(e.key),
             sorted((k, repr(v), type(v).__name__) for k, v in e.attrs.items()))
            for e in events]


def check_same(mapping, table, **kw):
    got, dead, _ = through_columnar(mapping, table, **kw)
    kw.pop("size", None)
    kw.pop("split", None)
    want, reasons = reference(mapping, table, **kw)
    assert {t: described(evs) for t, evs in got.items()} == \
        {t: described(evs) for t, evs in want.items()}
    assert sorted(d["reason"] for d in dead) == sorted(reasons)
    return got, dead


# --------------------------------------------------------------------------- text cells

#: cells that probe parse_cell's rules: signs, blanks, exponents, integers beyond 64 bits,
#: non-finite numbers, non-ASCII digits and blanks, booleans in any case, text
TRICKY = ["1", "-0", "+5", "007", " 42 ", "\t3.5", "1e3", "1E-2", ".5", "5.", "-.5e+2",
          "1e400", "-1e400", "nan", "inf", "1_000", "0x10", "true", "FALSE", " True ", "tru",
          "abc", "  ", "", "\u0663", "\xa07", "7\u2003", "12345678901234567890",
          "9223372036854775807", "9223372036854775808", "18446744073709551615",
          "-9223372036854775809", "1.0", "3.0", "\xe9", "x y", "0.1", "1e-320"]
cells = st.one_of(st.sampled_from(TRICKY), st.none(),
                  st.integers(-10 ** 20, 10 ** 20).map(str),
                  st.floats(allow_nan=False, allow_infinity=False).map(repr),
                  st.text(alphabet="0123456789+-.eE tT", max_size=6))
times = st.one_of(st.sampled_from(["1", "2", "2", "2.0", " 3 ", "1e1", "abc", "", "nan",
                                   "9007199254740993", "1_0", "+4", "\u0665"]),
                  st.none(), st.integers(0, 50).map(str))
types = st.sampled_from(["A", "A", "B", " B ", "", "  ", None, "\u2003C"])
keys = st.one_of(st.sampled_from(["s1", "s2", " s1", "3", "3.0", "true", "", "\u0663"]),
                 st.none(), cells)

MAPPINGS = [EventMapping(key_column="symbol"), EventMapping(), EventMapping(key_column="key"),
            EventMapping(key_column="symbol", typed_strings=False),
            EventMapping(key_column="symbol", ts_unit="ms"),
            EventMapping(key_column="symbol", id_column="code"),
            EventMapping(type_column=None, type_constant="T", key_column="symbol",
                         attributes=("price",))]


def text_table(rows) -> pa.Table:
    names = ["type", "ts", "symbol", "key", "price", "code"]
    return pa.table({n: pa.array([r[i] for r in rows], pa.string())
                     for i, n in enumerate(names)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(types, times, keys, keys, cells, cells), max_size=25),
       which=st.integers(0, len(MAPPINGS) - 1), size=st.integers(1, 5),
       split=st.integers(1, 7), everything=st.booleans(), key_column=st.booleans())
def test_text_rows_give_the_events_of_the_reference(rows, which, size, split, everything,
                                                    key_column):
    table = text_table(rows)
    if not key_column:                       # else "key" is an attribute: msgpack rows
        table = table.drop_columns(["key"])
    check_same(MAPPINGS[which], table, size=size, split=split,
               global_types=None if everything else frozenset({"B"}))


def test_cells_typed_like_parse_cell():
    rows = [("A", "1", "s1", None, cell, None) for cell in TRICKY]
    got, dead = check_same(EventMapping(key_column="symbol"), text_table(rows), size=100)
    prices = [e.attrs.get("price") for e in got[partition_of("s1", 2)]]
    assert 7 in prices and 3 in prices          # "\xa07" and the Arabic-Indic digit three
    assert {d["reason"] for d in dead} >= {"field 'price': number must be finite, got inf"}


def test_batches_are_columnar_unless_a_row_needs_the_reference():
    """Schema version 2 (a column of mixed kinds as a dense union); a chunk with a row the
    reference built (a nested value) or an attribute named like a wire field (``key``)
    travels as version 1 rows."""
    mapping = EventMapping(key_column="symbol")
    table = pa.table({"type": ["A"] * 4, "ts": ["1", "2", "3", "4"],
                      "symbol": ["s", "s", "s", "s"], "x": ["1", "2.5", "n/a", None]})
    got, _, chunks = through_columnar(mapping, table, size=10)
    plan = Plan(mapping, {n: "str" for n in table.schema.names}, 2)
    data = encode_chunk(plan, chunks[0][1], "s", "b")
    assert msgpack.unpackb(data)["schema_version"] == 2
    assert [e.attrs.get("x") for e in got[partition_of("s", 2)]] == [1, 2.5, "n/a", None]
    check_same(mapping, table)
    keyed = table.append_column("key", pa.array(["k"] * 4))
    plan = Plan(mapping, {n: "str" for n in keyed.schema.names}, 2)
    _, _, chunks = through_columnar(mapping, keyed, size=10)
    assert msgpack.unpackb(encode_chunk(plan, chunks[0][1], "s", "b"))["schema_version"] == 1
    check_same(mapping, keyed)
    nested = pa.table({"type": ["A", "A"], "ts": [1.0, 2.0], "symbol": ["s", "s"],
                       "x": pa.array([[1], None])})
    plan = Plan(mapping, {f.name: category_of(f.type) for f in nested.schema}, 2)
    _, _, chunks = through_columnar(mapping, nested, size=10)
    assert msgpack.unpackb(encode_chunk(plan, chunks[0][1], "s", "b"))["schema_version"] == 1
    check_same(mapping, nested)


# --------------------------------------------------------------------------- routing

def test_targets_are_partition_of_the_key_per_distinct_value():
    """Integer keys, integral floats (3.0 routes like 3), text, booleans, no key (partition
    0), several partition counts: every event reaches partition_of(key)."""
    keys = ["1", "2", "3", "3.0", "-7", str(2 ** 40), "0.5", "1e300", "AAPL", " 3 ", "",
            "true", "False", None]
    table = pa.table({"type": ["A"] * 28, "ts": [str(i) for i in range(28)], "k": keys * 2})
    for n in (1, 2, 7, 64):
        got, dead = check_same(EventMapping(key_column="k"), table, partitions=n, size=5)
        # dead: no key, and 1e300 (an integral float beyond 64 bits: partition_of refuses it)
        assert sum(map(len, got.values())) == 24 and len(dead) == 4
        for target, evs in got.items():
            assert all(partition_of(e.key, n) == target for e in evs)
    got, _ = check_same(EventMapping(), table.rename_columns(["type", "ts", "key"]),
                        partitions=7)
    found = {(e.key, type(e.key)) for evs in got.values() for e in evs}
    assert {(1, int), (3, int), (3.0, float), (2 ** 40, int), ("AAPL", str), (True, bool),
            (False, bool), (None, type(None))} <= found
    assert {e.key for e in got[0]} >= {None}       # no key: the global partition 0
    # typed key columns (JSON, Parquet): int64, float64, bool
    for column in (pa.array([1, 2, 3, None] * 2, pa.int64()),
                   pa.array([1.0, 2.5, 3.0, None] * 2, pa.float64()),
                   pa.array([True, False, None, True] * 2, pa.bool_())):
        typed = pa.table({"type": ["A"] * 8, "ts": pa.array(range(8), pa.int64()),
                          "key": column})
        check_same(EventMapping(), typed, partitions=5)


# --------------------------------------------------------------------------- typed columns

def test_typed_columns_give_the_events_of_the_reference():
    """JSON lines / Parquet columns: integers, floats (a non-finite one is a dead letter),
    booleans, text, timestamps and dates (as event time and as attributes), nested and
    decimal values (the reference's own conversion)."""
    import datetime as dt
    import decimal
    utc = dt.timezone.utc
    stamps = [dt.datetime(2024, 1, 1, 12, 0, 0, 123457, tzinfo=utc),
              dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=utc), None,
              dt.datetime(2024, 1, 1, 12, 0, 0, 123457, tzinfo=utc)]
    table = pa.table({
        "type": ["A", "B", "A", "A"],
        "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        "symbol": pa.array([1, 2, 3, 1], pa.int64()),
        "x": pa.array([1.5, float("nan"), None, 2.0]),
        "flag": [True, None, False, True],
        "note": ["7", " 8 ", "n/a", None],
        "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1, 1, 1), dt.date(2024, 1, 1)]),
        "at": pa.array(stamps, pa.timestamp("ms")),
        "nested": pa.array([{"a": 1}, None, {"a": None}, {"a": 2}]),
        "items": pa.array([[1, 2], None, [], [3]]),
        "amount": pa.array([decimal.Decimal("1.10"), None, decimal.Decimal("-2"), None],
                           pa.decimal128(5, 2))})
    got, dead = check_same(EventMapping(key_column="symbol"), table, size=2)
    assert len(dead) == 2          # no event time; a NaN attribute
    first = [e for evs in got.values() for e in evs if e.attrs.get("x") == 1.5]
    assert first[0].ts == stamps[0].timestamp() and first[0].attrs["day"] == "2024-02-29"
    assert first[0].attrs["nested"] == {"a": 1} and first[0].attrs["amount"] == 1.1
    for unit in ("s", "ms", "us", "ns"):
        ints = pa.table({"type": ["A"] * 5, "symbol": ["s"] * 5,
                         "ts": pa.array([0, 9, 1_700_000_000_123_456_789, -5, 2 ** 53 + 1],
                                        pa.int64())})
        check_same(EventMapping(key_column="symbol", ts_unit=unit), ints)
        floats = ints.set_column(2, "ts", pa.array([0.5, 9.25, 1.7e9, -5.0, math.inf]))
        check_same(EventMapping(key_column="symbol", ts_unit=unit), floats)


def test_iso_and_strftime_event_times():
    table = pa.table({"type": ["A"] * 4, "symbol": ["s"] * 4,
                      "ts": ["2024-01-01T00:00:01Z", "2024-01-01 00:00:00.5", "bad", None]})
    check_same(EventMapping(key_column="symbol", ts_unit="iso"), table)
    table = table.set_column(2, "ts", pa.array(["2024-01-01 00:00:01", "01/02/2024", None,
                                                "2024-01-01 00:00:00"]))
    check_same(EventMapping(key_column="symbol", ts_unit="%Y-%m-%d %H:%M:%S"), table)


def test_reserved_and_missing_columns_make_every_row_a_dead_letter():
    table = pa.table({"kind": ["A", "B"], "ts": ["1", "2"], "type": ["x", "y"],
                      "symbol": ["s", "t"]})
    _, dead = check_same(EventMapping(type_column="kind", key_column="symbol"), table)
    assert len(dead) == 2 and all("reserved" in d["reason"] for d in dead)


def test_malformed_rows_are_dead_letters_with_their_text():
    table = pa.table({"type": ["A", None, "A"], "ts": ["1", None, "2"],
                      "symbol": ["s", None, "s"], MALFORMED: [None, "A,1,s,extra", None]})
    got, dead, _ = through_columnar(EventMapping(key_column="symbol"), table)
    assert sum(len(evs) for evs in got.values()) == 2
    assert [d["row"] for d in dead] == ["A,1,s,extra"]
    assert dead[0]["reason"].startswith("malformed record")


# --------------------------------------------------------------------------- order and chunks

def test_chunks_keep_equal_times_together_in_id_order_whatever_the_batches():
    """Chunks of ``size`` events; a run of equal ts is never cut and is ordered by event id
    (the engine's order), and the chunks are the same for any Arrow batch boundaries (a
    retried Spark task resends the same batches)."""
    ts = ["1", "2", "2", "2", "2", "3", "4", "4", "5", "6", "6", "6", "6", "6", "7"]
    table = text_table([("A", t, "s", None, str(i), None) for i, t in enumerate(ts)])
    mapping = EventMapping(key_column="symbol")
    shapes = set()
    for split in (1, 2, 3, 5, 15):
        got, _, chunks = through_columnar(mapping, table, size=3, split=split)
        evs = [e for chunk in got.values() for e in chunk]
        assert [e.order for e in evs] == sorted(e.order for e in evs)
        shapes.add(tuple(tuple(c.column(TS).to_pylist()) for _, c in chunks))
        for _, chunk in chunks:
            assert chunk.num_rows >= 3 or chunk is chunks[-1][1]
    assert len(shapes) == 1
    assert shapes.pop()[:2] == ((1.0, 2.0, 2.0, 2.0, 2.0), (3.0, 4.0, 4.0))


def test_released_chunks_hold_every_row_before_the_batch_and_keep_runs_together():
    """``Chunker.release`` (a push task after each batch: no actor's rows held behind
    another's) cuts every held row before the given time into chunks and keeps the rest;
    a run of equal times is never cut, so the same batch boundaries give the same chunks
    whatever the order of the rows within a run (a retried task)."""
    ts = ["1", "2", "2", "2", "3", "4", "4", "5", "6", "6", "6", "7"]
    rows = [("A", t, f"s{i % 3}", None, str(i), None) for i, t in enumerate(ts)]
    mapping = EventMapping(key_column="symbol")

    def released(order):
        table = text_table([rows[i] for i in order])
        plan = Plan(mapping, {f.name: category_of(f.type) for f in table.schema}, 2)
        chunker = Chunker(plan, 100)
        out = []
        for start in range(0, table.num_rows, 4):       # batches of 4 rows
            batch = plan.prepare(table.slice(start, 4).to_batches()[0])
            out += chunker.add(batch)[1]
            before = max(batch.column(TS).to_pylist())
            got = chunker.release(before)
            for _, chunk in got:
                assert max(chunk.column(TS).to_pylist()) < before
            held = [t for tables in chunker.pending.values() for tb in tables
                    for t in tb.column(TS).to_pylist()]
            assert all(t >= before for t in held)
            out += got
        out += chunker.flush()
        return sorted((target, tuple((r[1], r[2]["price"]) for r in plan.rows(c)))
                      for target, c in out)
    first = released(range(len(rows)))
    swapped = list(range(len(rows)))
    swapped[1], swapped[3] = swapped[3], swapped[1]           # (within the run at ts 2)
    swapped[8], swapped[10] = swapped[10], swapped[8]         # (within the run at ts 6)
    assert released(swapped) == first
    assert sum(len(rows_) for _, rows_ in first) == len(rows)


def test_global_actor_gets_copies_of_the_types_it_needs():
    table = text_table([("A", "1", "s1", None, "1", None), ("B", "2", "s2", None, "2", None),
                        ("B", "3", "s1", None, "3", None)])
    got, _ = check_same(EventMapping(key_column="symbol"), table, partitions=3,
                        global_types=frozenset({"B"}))
    assert [e.type for e in got[3]] == ["B", "B"]
    got, _ = check_same(EventMapping(key_column="symbol"), table, partitions=3,
                        global_types=None)
    assert len(got[3]) == 3


# --------------------------------------------------------------------------- dead-letter lines

def locate_all(fmt, path, files, split=2):
    """Locator over ``files`` (one URI per row) fed in batches of ``split`` rows."""
    locator = Locator(fmt)
    out = []
    for start in range(0, len(files), split):
        part = pa.array(files[start:start + split], pa.string())
        locator.start(part)
        out.extend(locator(i) for i in range(len(part)))
    return out


def test_dead_letter_lines_of_csv_records(tmp_path):
    """CSV: the line of a record is its last line (as raycep local numbers it); blank lines
    and quoted cells with line breaks count; records are numbered per file."""
    a = tmp_path / "a.csv"
    a.write_text('type,ts,note\nA,1,x\n\nA,2,"two\nlines"\nA,3,y\n   \nA,4,z\n',
                 encoding="utf-8")
    b = tmp_path / "b.csv"
    b.write_text("type,ts\r\nA,1\r\nA,2\r\n", encoding="utf-8")
    files = [f"file:{a}"] * 5 + [f"file://{b}"] * 2
    found = locate_all("csv", None, files)
    assert [(p, line, rec) for p, line, rec in found] == [
        (str(a), 2, 1), (str(a), 5, 2), (str(a), 6, 3), (str(a), 7, 4), (str(a), 8, 5),
        (str(b), 2, 1), (str(b), 3, 2)]


def test_dead_letter_lines_of_json_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"a": 2}\n[1]\n', encoding="utf-8")
    found = locate_all(None, None, [f"file:{path}"] * 3, split=1)
    assert [(line, rec) for _, line, rec in found] == [(1, 1), (4, 2), (5, 3)]
    # not a local file, or Parquet: the record (row position) only
    assert locate_all("parquet", None, [f"file:{path}"])[0][1:] == (None, 1)
    assert locate_all("csv", None, ["hdfs://nn/x.csv"])[0] == ("hdfs://nn/x.csv", None, 1)


# --------------------------------------------------------------------------- Spark partitions

def test_spark_hash_of_an_int_column():
    # values of Spark 3.5's SELECT hash(CAST(v AS INT)) (Murmur3, seed 42)
    assert [spark_hash_int(v) for v in (0, 1, -7, 123456)] == \
        [933211791, -559580957, -1618159745, 1905992991]
    for slots in (1, 2, 3, 8):
        assert [spark_hash_int(v) % slots for v in partition_values(slots)] == \
            list(range(slots))


# --------------------------------------------------------------------------- input already in order

def write_text(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_input_in_time_order_is_recognised_only_when_certain(tmp_path):
    """``in_time_order`` (the job then skips its sort): one local CSV / Parquet file whose
    event times never decrease; anything it cannot be sure of is False."""
    import pyarrow.parquet as pq
    m = EventMapping(key_column="symbol")
    head = "type,ts,symbol\n"
    ordered = write_text(tmp_path / "a.csv", head + 'A,1,s\nA,1.5,"x\ny"\nA,1.5,t\nB,2e1,s\n')
    assert in_time_order(ordered, "csv", m) and in_time_order([f"file:{ordered}"], "csv", m)
    assert not in_time_order(write_text(tmp_path / "b.csv", head + "A,2,s\nA,1,s\n"), "csv", m)
    assert not in_time_order(write_text(tmp_path / "c.csv", head + "A,1,s\nA,,s\n"), "csv", m)
    assert not in_time_order(write_text(tmp_path / "d.csv", head + "A,1,s\nA,two,s\n"), "csv", m)
    assert not in_time_order(write_text(tmp_path / "e.csv", head + "A,1,s\nA,2,s,x\n"), "csv",
                             m)                                    # a malformed row
    assert not in_time_order(write_text(tmp_path / "f.csv", head + "A,1,s\nA,inf,s\n"), "csv",
                             m)
    assert not in_time_order(write_text(tmp_path / "g.csv", "type,time\nA,1\n"), "csv", m)
    assert not in_time_order([ordered, ordered], "csv", m)        # several files
    assert not in_time_order(ordered, "json", m)
    assert not in_time_order(ordered, "csv", EventMapping(key_column="symbol", ts_unit="iso"))
    assert not in_time_order("hdfs://nn/a.csv", "csv", m)
    assert in_time_order(ordered, "csv", EventMapping(key_column="symbol", ts_unit="ms"))
    table = pa.table({"type": ["A"] * 3, "ts": [1, 2, 2], "symbol": ["s"] * 3})
    pq.write_table(table, tmp_path / "a.parquet")
    assert in_time_order(str(tmp_path / "a.parquet"), "parquet", m)
    pq.write_table(table.set_column(1, "ts", pa.array([1, 3, 2])), tmp_path / "b.parquet")
    assert not in_time_order(str(tmp_path / "b.parquet"), "parquet", m)
    pq.write_table(table.set_column(1, "ts", pa.array([1.0, None, 2.0])),
                   tmp_path / "c.parquet")
    assert not in_time_order(str(tmp_path / "c.parquet"), "parquet", m)
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=1)   # several splits
    assert not in_time_order(str(tmp_path / "d.parquet"), "parquet", m)


def test_rows_said_to_be_in_order_are_checked_per_actor():
    """The push of an unsorted job checks the order per target: a row older than one sent
    before it to the same actor fails the task; other actors and dead rows do not count."""
    def batch(targets, ts):
        return pa.RecordBatch.from_pydict({"_t": pa.array(targets, pa.int32()),
                                           "_ts": pa.array(ts, pa.float64())})
    latest: dict = {}
    check_order(batch([0, 1, 0, -1, 1], [1.0, 0.5, 2.0, None, 0.5]), latest)
    assert latest == {0: 2.0, 1: 0.5}
    check_order(batch([1, 0], [0.7, 2.0]), latest)
    with pytest.raises(CepError, match="at ts 1.5"):
        check_order(batch([1, 0], [0.8, 1.5]), latest)
    with pytest.raises(CepError, match="event-time order"):
        check_order(batch([1, 1], [3.0, 2.0]), {})
