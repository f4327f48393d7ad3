"""EventMapping (spark_ingest/mapping.py), in-process: how a table row becomes an event. No
Spark here: a row is the dict Spark's ``Row.asDict()`` gives (CSV cells as text, empty cells
as None), so these tests pin down what the Spark job does to every row."""
import csv
import datetime as dt
import math
import pathlib

import pytest

from raycep.cep.errors import IngestError
from raycep.cep.event import Event
from raycep.cep.io.sources import iter_events, read_events
from raycep.spark_ingest.mapping import EventMapping

TICKS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ticks.csv"


def spark_csv_row(row: dict) -> dict:
    """A csv.DictReader row as Spark's CSV reader gives it: every cell text, an empty cell
    null (Spark's default ``nullValue`` is the empty string)."""
    return {k: (None if v == "" else v) for k, v in row.items()}


# --------------------------------------------------------------------------- type

def test_type_column_and_constant_type():
    row = {"kind": "Trade", "ts": "1", "x": "2"}
    ev = EventMapping(type_column="kind").to_event(row)
    assert ev.type == "Trade" and ev.attrs == {"x": 2}
    ev = EventMapping(type_column=None, type_constant="Stock").to_event(row)
    assert ev.type == "Stock" and ev.attrs == {"kind": "Trade", "x": 2}
    # surrounding blanks of a type cell are dropped, as raycep local does
    assert EventMapping().to_event({"type": " A ", "ts": "1"}).type == "A"


def test_exactly_one_of_type_column_and_constant():
    with pytest.raises(IngestError, match="exactly one"):
        EventMapping(type_column=None)
    with pytest.raises(IngestError, match="exactly one"):
        EventMapping(type_column="type", type_constant="A")


@pytest.mark.parametrize("value", [None, "", "  "])
def test_missing_type_names_the_type_column(value):
    with pytest.raises(IngestError, match="missing event type") as info:
        EventMapping(type_column="kind").to_event({"kind": value, "ts": "1"}, index=7)
    assert info.value.field == "kind" and info.value.row == 7
    assert "field 'kind'" in str(info.value) and "row 7" in str(info.value)


def test_type_must_be_text():
    with pytest.raises(IngestError, match="must be text") as info:
        EventMapping().to_event({"type": 5, "ts": 1})
    assert info.value.field == "type"


# --------------------------------------------------------------------------- event time

@pytest.mark.parametrize("unit, value, ts", [
    ("s", "12.5", 12.5), ("s", 12, 12.0), ("s", " 3 ", 3.0), ("s", "1e3", 1000.0),
    ("ms", "1500", 1.5), ("ms", 9, 0.009), ("ms", "12.5", 0.0125),
    ("us", "1500001", 1.500001), ("us", 5, 0.000005),
    ("ns", 1_700_000_000_123_456_789, 1_700_000_000_123_456_789 / 10**9),
    ("ns", "2500000000", 2.5),
])
def test_numeric_time_units(unit, value, ts):
    ev = EventMapping(ts_unit=unit).to_event({"type": "A", "ts": value})
    assert ev.ts == ts and isinstance(ev.ts, float)


def test_millisecond_times_equal_the_same_times_in_seconds():
    """A file in ms gives exactly the event times (so the ids) of the file in seconds."""
    ms, s = EventMapping(ts_unit="ms"), EventMapping()
    for k in range(0, 20_000, 7):
        a = ms.to_event({"type": "A", "ts": str(k), "x": "1"})
        b = s.to_event({"type": "A", "ts": str(k / 1000), "x": "1"})
        assert a.ts == b.ts and a.id == b.id, k


@pytest.mark.parametrize("value", [
    "2024-01-02T03:04:05Z", "2024-01-02T03:04:05+00:00", "2024-01-02T04:04:05+01:00",
    "2024-01-01T22:04:05-05:00", "2024-01-02 03:04:05", "2024-01-02T03:04:05.000Z",
])
def test_iso_times(value):
    expected = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc).timestamp()
    assert EventMapping(ts_unit="iso").to_event({"type": "A", "ts": value}).ts == expected


def test_iso_fractions_and_naive_times_are_utc():
    ev = EventMapping(ts_unit="iso").to_event({"type": "A", "ts": "1970-01-01T00:00:01.25"})
    assert ev.ts == 1.25


def test_strftime_pattern():
    m = EventMapping(ts_unit="%d/%m/%Y %H:%M:%S")
    ev = m.to_event({"type": "A", "ts": "02/01/2024 03:04:05"})
    assert ev.ts == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc).timestamp()
    with pytest.raises(IngestError, match="not valid for format") as info:
        m.to_event({"type": "A", "ts": "2024-01-02 03:04:05"})
    assert info.value.field == "ts"


def test_datetime_and_date_values():
    """Parquet/Spark timestamp and date columns arrive as datetime/date objects; naive ones
    are taken as UTC, aware ones converted; whatever the declared unit."""
    utc = dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=dt.timezone.utc)
    for unit in ("s", "iso", "%Y"):
        m = EventMapping(ts_unit=unit)
        assert m.to_event({"type": "A", "ts": utc}).ts == utc.timestamp()
        assert m.to_event({"type": "A", "ts": utc.replace(tzinfo=None)}).ts == utc.timestamp()
        plus2 = utc.astimezone(dt.timezone(dt.timedelta(hours=2)))
        assert m.to_event({"type": "A", "ts": plus2}).ts == utc.timestamp()
        day = m.to_event({"type": "A", "ts": dt.date(2024, 1, 2)}).ts
        assert day == dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc).timestamp()


@pytest.mark.parametrize("value", [None, ""])
def test_missing_time_names_the_column(value):
    with pytest.raises(IngestError, match="missing event time") as info:
        EventMapping(ts_column="when").to_event({"type": "A", "when": value}, index=3)
    assert info.value.field == "when" and info.value.row == 3


@pytest.mark.parametrize("unit, value", [
    ("s", "abc"), ("s", True), ("s", "nan"), ("s", "inf"), ("ms", "12:00"), ("ns", [1]),
    ("iso", "yesterday"), ("iso", "2024-13-01T00:00:00"), ("s", 10**400),
])
def test_invalid_time_names_the_column(unit, value):
    with pytest.raises(IngestError) as info:
        EventMapping(ts_column="when", ts_unit=unit).to_event({"type": "A", "when": value})
    assert info.value.field == "when"
    assert "field 'when'" in str(info.value)


def test_unknown_unit():
    with pytest.raises(IngestError, match="unknown event-time format 'minutes'"):
        EventMapping(ts_unit="minutes")


# --------------------------------------------------------------------------- key, id, attributes

def test_key_column_is_the_event_key():
    m = EventMapping(key_column="symbol")
    ev = m.to_event({"type": "Stock", "ts": "1", "symbol": "AAPL", "price": "1.5"})
    assert ev.key == "AAPL" and ev.attrs == {"symbol": "AAPL", "price": 1.5}
    # a typed key: "7" is the integer 7, as raycep local types the cell
    assert m.to_event({"type": "Stock", "ts": "1", "symbol": "7"}).key == 7
    assert EventMapping().to_event({"type": "A", "ts": "1", "symbol": "x"}).key is None


def test_missing_key_names_the_key_column():
    with pytest.raises(IngestError, match="partition key") as info:
        EventMapping(key_column="symbol").to_event({"type": "A", "ts": "1", "symbol": None})
    assert info.value.field == "symbol"


def test_id_column():
    m = EventMapping(id_column="tick")
    ev = m.to_event({"type": "A", "ts": "1", "tick": "t-1", "x": "2"})
    assert ev.id == "t-1" and ev.attrs == {"x": 2}
    assert m.to_event({"type": "A", "ts": "1", "tick": 42}).id == "42"
    # no id in the row: derived from the content, as for any event without one
    derived = m.to_event({"type": "A", "ts": "1", "tick": None, "x": "2"})
    assert derived.id == Event("A", 1.0, {"x": 2}).id
    # without an id column, equal content gives equal ids
    plain = EventMapping()
    assert plain.to_event({"type": "A", "ts": "1", "x": "2"}).id == derived.id


def test_attributes_subset():
    row = {"type": "A", "ts": "1", "symbol": "S", "price": "2.5", "volume": "3", "note": "x"}
    ev = EventMapping(attributes=("price", "volume")).to_event(row)
    assert ev.attrs == {"price": 2.5, "volume": 3}
    # the key column is always an attribute ([symbol] tests it)
    ev = EventMapping(attributes=["price"], key_column="symbol").to_event(row)
    assert ev.attrs == {"price": 2.5, "symbol": "S"} and ev.key == "S"
    assert EventMapping(attributes=["price"]).attributes == ("price",)
    # an empty cell is an absent attribute
    assert EventMapping(attributes=("price", "volume")).to_event(
        dict(row, volume=None)).attrs == {"price": 2.5}


@pytest.mark.parametrize("name", ["attrs"])
def test_reserved_column_names(name):
    with pytest.raises(IngestError, match="reserved") as info:
        EventMapping().to_event({"type": "A", "ts": "1", name: "v"})
    assert info.value.field == name
    # also when the cell is empty in this row: the column itself is the problem
    with pytest.raises(IngestError, match="reserved"):
        EventMapping().to_event({"type": "A", "ts": "1", name: None})
    with pytest.raises(IngestError, match="reserved"):
        EventMapping(attributes=(name,)).to_event({"type": "A", "ts": "1", name: "v"})
    # mapped to a role or left out of the attributes, it is fine
    assert EventMapping(attributes=("x",)).to_event(
        {"type": "A", "ts": "1", name: "v", "x": "1"}).attrs == {"x": 1}


def test_key_and_id_columns_are_read_as_raycep_local_reads_them(tmp_path):
    """A column named ``key`` is the partition key unless another key column is mapped, then
    an ordinary attribute; a column named ``id`` is the event id unless another id column is
    mapped, then an ordinary attribute. Same events (ids, keys, attributes) as raycep local."""
    path = tmp_path / "reserved.csv"
    path.write_text("type,ts,key,id,sensor,x\nA,1,k1,007,s1,1\nA,2,k2,,s2,2\n"
                    "A,3,,e3,s1,3\n", encoding="utf-8")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [spark_csv_row(r) for r in csv.DictReader(handle)]
    for key in (None, "key", "sensor"):
        local, problems = read_events(path, key_attr=key, errors="collect")
        mapping = EventMapping(key_column=key)
        mapped, dead = [], []
        for i, row in enumerate(rows):
            try:
                mapped.append(mapping.to_event(row, i))
            except IngestError as exc:
                dead.append(exc)
        assert [(e.id, e.key, e.attrs) for e in mapped] == \
            [(e.id, e.key, e.attrs) for e in local], key
        assert [e.field for e in dead] == [p.field for p in problems]
    by_sensor = [EventMapping(key_column="sensor").to_event(r) for r in rows]
    assert [(e.key, e.attrs.get("key")) for e in by_sensor] == \
        [("s1", "k1"), ("s2", "k2"), ("s1", None)]
    assert [e.id for e in by_sensor][0::2] == ["007", "e3"]
    # with another id column, the 'id' column is an attribute
    ev = EventMapping(id_column="sensor").to_event(rows[0])
    assert ev.id == "s1" and ev.attrs["id"] == 7 and ev.key == "k1"


def test_typed_strings():
    row = {"type": "A", "ts": "1", "i": "12", "f": "1.5", "e": "1e3", "t": "true",
           "F": "FALSE", "s": "abc", "neg": "-3", "pad": " 7 ", "text": " a b "}
    ev = EventMapping().to_event(row)
    assert ev.attrs == {"i": 12, "f": 1.5, "e": 1000.0, "t": True, "F": False, "s": "abc",
                        "neg": -3, "pad": 7, "text": " a b "}
    assert type(ev.attrs["i"]) is int and type(ev.attrs["f"]) is float
    raw = EventMapping(typed_strings=False).to_event(row)
    assert raw.attrs["i"] == "12" and raw.attrs["t"] == "true"


def test_typed_values_pass_through():
    """Parquet/JSON columns are typed already; nested values and decimals are kept."""
    from decimal import Decimal
    row = {"type": "A", "ts": 1.5, "i": 3, "f": 2.0, "b": False, "l": [1, 2],
           "m": {"k": 1}, "d": Decimal("1.25"), "day": dt.date(2024, 1, 2),
           "at": dt.datetime(1970, 1, 1, 0, 0, 2)}
    ev = EventMapping().to_event(row)
    assert ev.ts == 1.5
    assert ev.attrs == {"i": 3, "f": 2.0, "b": False, "l": [1, 2], "m": {"k": 1}, "d": 1.25,
                        "day": "2024-01-02", "at": 2.0}


def test_unsupported_value_names_the_column():
    with pytest.raises(IngestError, match="unsupported value") as info:
        EventMapping().to_event({"type": "A", "ts": "1", "blob": object()})
    assert info.value.field == "blob"


def test_check_columns_names_every_missing_column():
    m = EventMapping(type_column="kind", ts_column="when", key_column="symbol",
                     id_column="tick", attributes=("price", "volume"))
    m.check_columns(["kind", "when", "symbol", "tick", "price", "volume", "extra"])
    with pytest.raises(IngestError) as info:
        m.check_columns(["when", "symbol", "price"])
    message = str(info.value)
    for name in ("'kind'", "'tick'", "'volume'"):
        assert name in message
    assert "'when'" not in message.split("(columns")[0]
    assert info.value.field == "kind"
    EventMapping(type_column=None, type_constant="A").check_columns(["ts"])


# --------------------------------------------------------------------------- parity

PARITY_CSV = (
    "type,ts,symbol,price,volume,flag,note\n"
    "Stock,0.1,AAPL,189.97,900,true,plain\n"
    "Stock,1.1,AMZN,174.48,3800,false,\"with, comma\"\n"
    "Trade, 1.25 ,AMZN,174.64,,TRUE,\n"
    "Stock,2.2,7,411.91,1500,,\"say \"\"hi\"\"\"\n"
    "Stock,3,MSFT,1e2,-5,no, spaced \n"
)


def test_same_events_as_raycep_local(tmp_path):
    """A CSV row dict through EventMapping gives the event ``raycep local`` reads from the same
    file: same type, time, key, attributes, hence the same id."""
    path = tmp_path / "ticks.csv"
    path.write_text(PARITY_CSV, encoding="utf-8")
    local = list(iter_events(path, key_attr="symbol"))
    mapping = EventMapping(key_column="symbol")
    with open(path, newline="", encoding="utf-8") as handle:
        mapped = [mapping.to_event(spark_csv_row(r), i)
                  for i, r in enumerate(csv.DictReader(handle))]
    assert len(mapped) == len(local) == 5
    for a, b in zip(mapped, local):
        assert (a.id, a.type, a.ts, a.key, a.attrs) == (b.id, b.type, b.ts, b.key, b.attrs)
        assert {k: type(v) for k, v in a.attrs.items()} == \
            {k: type(v) for k, v in b.attrs.items()}


def test_same_events_as_raycep_local_on_the_sample():
    local = list(iter_events(TICKS, key_attr="symbol"))
    mapping = EventMapping(key_column="symbol")
    with open(TICKS, newline="", encoding="utf-8") as handle:
        ids = [mapping.to_event(spark_csv_row(r)).id for r in csv.DictReader(handle)]
    assert ids == [e.id for e in local]
    assert len(set(ids)) == len(ids) == 20_000


def test_bad_rows_are_the_rows_raycep_local_rejects(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("type,ts,symbol,x\nA,1,s,1\nA,abc,s,1\n,2,s,1\nA,,s,1\nA,3,,1\n"
                    "A,4,s,1\n", encoding="utf-8")
    good, problems = read_events(path, key_attr="symbol", errors="collect")
    mapping = EventMapping(key_column="symbol")
    ok, dead = [], []
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                ok.append(mapping.to_event(spark_csv_row(row)))
            except IngestError as exc:
                dead.append(exc)
    assert [e.id for e in ok] == [e.id for e in good]
    assert [e.field for e in dead] == [p.field for p in problems] == \
        ["ts", "type", "ts", "symbol"]
    assert math.isclose(ok[-1].ts, 4.0)
