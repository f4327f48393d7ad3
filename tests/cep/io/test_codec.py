"""The msgpack batch codec: round trips and precise errors on malformed input."""
import math

import msgpack
import pytest

from raycep.cep.errors import IngestError
from raycep.cep.event import Event, trusted_event
from raycep.cep.io.codec import SCHEMA_VERSION, Batch, decode_batch, decode_row, encode_batch


def _pack(body) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def _batch(rows, /, **header) -> bytes:
    body = {"schema_version": 1, "source": "s", "batch_id": "b", "rows": rows}
    body.update(header)
    return _pack(body)


def _same(a: Event, b: Event) -> bool:
    return (a.type, a.ts, a.attrs, a.key, a.id) == (b.type, b.ts, b.attrs, b.key, b.id)


EVENTS = [
    Event("Stock", 1.5,
          {"symbol": "IBM", "price": 101.25, "volume": 300, "halted": False, "note": None}),
    Event("Stock", 2.0, {"symbol": "ÄÖÜ-東京", "price": -3, "flag": True}, key="ÄÖÜ-東京"),
    Event("Trade", 2.0, {}, key=7, id="given-id"),
    Event("Ünïcode", 1e9, {"nested": [1, "x", None], "map": {"a": 1}}),
    Event("Big", 3.0, {"big": 2 ** 62, "small": -(2 ** 62), "tiny": 1e-300}),
]


def test_round_trip_keeps_everything():
    data = encode_batch(EVENTS, "spark-job-1", "batch-0007")
    assert isinstance(data, bytes)
    batch = decode_batch(data)
    assert isinstance(batch, Batch)
    assert (batch.schema_version, batch.source, batch.batch_id) == (SCHEMA_VERSION,
                                                                    "spark-job-1", "batch-0007")
    assert len(batch) == len(EVENTS)
    for sent, got in zip(EVENTS, batch.events):
        assert _same(sent, got), (sent, got)
        assert isinstance(got.ts, float)
    # attribute types survive exactly
    first = batch.events[0].attrs
    assert first["volume"] == 300 and type(first["volume"]) is int
    assert first["halted"] is False and first["note"] is None
    assert batch.events[1].attrs["flag"] is True


def test_ids_are_sent_not_rederived():
    ev = Event("A", 5, {"x": 1})           # int ts: a float-ts copy would derive another id
    got = decode_batch(encode_batch([ev], "s", "b")).events[0]
    assert got.id == ev.id
    assert got.ts == 5.0


def test_empty_batch_and_frozen():
    batch = decode_batch(encode_batch([], "s", "b"))
    assert batch.events == () and len(batch) == 0
    with pytest.raises(AttributeError):
        batch.source = "other"


def test_rows_are_compact_arrays():
    body = msgpack.unpackb(encode_batch(EVENTS[:1], "s", "b"), raw=False)
    assert body["schema_version"] == 1
    row = body["rows"][0]
    assert row == ["Stock", 1.5, EVENTS[0].attrs, None, EVENTS[0].id]


def test_map_rows_and_short_arrays_accepted():
    data = _batch([{"type": "A", "ts": 1, "attrs": {"x": 1}, "id": "i1"},
                   {"type": "B", "ts": 2, "y": "top-level"},
                   ["C", 3]])
    events = decode_batch(data).events
    assert [e.type for e in events] == ["A", "B", "C"]
    assert events[0].attrs == {"x": 1} and events[0].id == "i1"
    assert events[1].attrs == {"y": "top-level"}
    assert events[2].attrs == {} and events[2].key is None


def test_batch_equality_is_by_value():
    a = decode_batch(encode_batch(EVENTS, "s", "b"))
    b = decode_batch(encode_batch(EVENTS, "s", "b"))
    assert a == b


# --------------------------------------------------------------------------- header errors

@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x92\x01", b"not msgpack at all"])
def test_not_msgpack(data):
    with pytest.raises(IngestError) as info:
        decode_batch(data)
    assert info.value.row is None


def test_not_bytes():
    with pytest.raises(IngestError, match="bytes"):
        decode_batch("a string")


@pytest.mark.parametrize("body", [[1, 2, 3], "text", 42, None])
def test_wrong_container(body):
    with pytest.raises(IngestError, match="map"):
        decode_batch(_pack(body))


@pytest.mark.parametrize("field", ["schema_version", "source", "batch_id", "rows"])
def test_missing_header_field(field):
    body = {"schema_version": 1, "source": "s", "batch_id": "b", "rows": []}
    del body[field]
    with pytest.raises(IngestError) as info:
        decode_batch(_pack(body))
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize("version", [3, 0, "1", True, None])
def test_bad_schema_version(version):
    with pytest.raises(IngestError) as info:
        decode_batch(_batch([], schema_version=version))
    assert info.value.field == "schema_version"


def test_unsupported_version_message_names_supported():
    with pytest.raises(IngestError, match=r"unsupported schema version 3 \(supported: 1, 2\)"):
        decode_batch(_batch([], schema_version=3))


@pytest.mark.parametrize("field,value", [("source", 3), ("batch_id", None), ("rows", {})])
def test_bad_header_types(field, value):
    with pytest.raises(IngestError) as info:
        decode_batch(_batch([], **{field: value}))
    assert info.value.field == field


def test_header_errors_raise_even_when_collecting():
    with pytest.raises(IngestError):
        decode_batch(b"\xc1", errors="collect")


def test_bad_errors_argument():
    with pytest.raises(ValueError):
        decode_batch(encode_batch([], "s", "b"), errors="ignore")


# --------------------------------------------------------------------------- row errors

GOOD = ["A", 1.0, {"x": 1}, None, "g"]


@pytest.mark.parametrize("row,field", [
    (["", 1.0], "type"),
    ([None, 1.0], "type"),
    ([5, 1.0], "type"),
    (["A", None], "ts"),
    (["A", "soon"], "ts"),
    (["A", "12"], "ts"),                 # the wire format wants numbers, not numeric text
    (["A", True], "ts"),
    (["A", float("nan")], "ts"),
    (["A", float("inf")], "ts"),
    (["A", 1.0, [1, 2]], "attrs"),
    (["A", 1.0, "x=1"], "attrs"),
    (["A", 1.0, {1: "int key"}], "attrs"),
    ({"ts": 1.0}, "type"),
    ({"type": "A"}, "ts"),
    ({"type": "A", "ts": 1.0, "attrs": 3}, "attrs"),
    # non-finite numbers anywhere, non-scalar keys and ids (issue 13)
    (["A", 1.0, {"vol": float("nan")}], "vol"),
    (["A", 1.0, {"vol": float("-inf")}], "vol"),
    (["A", 1.0, {"m": {"deep": [1, float("inf")]}}], "m"),
    ({"type": "A", "ts": 1.0, "vol": float("inf")}, "vol"),
    (["A", 1.0, {}, {"a": 1}], "key"),
    (["A", 1.0, {}, [1, 2]], "key"),
    (["A", 1.0, {}, float("nan")], "key"),
    (["A", 1.0, {}, None, {"a": 1}], "id"),
    (["A", 1.0, {}, None, [1]], "id"),
])
def test_malformed_row_names_index_and_field(row, field):
    data = _batch([GOOD, GOOD, row, GOOD])
    with pytest.raises(IngestError) as info:
        decode_batch(data)
    assert info.value.row == 2
    assert info.value.field == field
    assert "row 2" in str(info.value) and repr(field) in str(info.value)


@pytest.mark.parametrize("row", ["A,1.0", 17, None, ["A"], ["A", 1, {}, None, "i", "extra"]])
def test_row_that_is_not_a_row(row):
    with pytest.raises(IngestError) as info:
        decode_batch(_batch([GOOD, row]))
    assert info.value.row == 1
    assert "row 1" in str(info.value)


def test_collect_keeps_good_rows_and_reports_bad_ones():
    rows = [GOOD, ["B", "x"], ["C", 2.0, {"y": 2}], 42, {"type": "D"}, ["E", 3]]
    batch, problems = decode_batch(_batch(rows), errors="collect")
    assert [e.type for e in batch.events] == ["A", "C", "E"]
    assert [(p.row, p.field) for p in problems] == [(1, "ts"), (3, None), (4, "ts")]
    assert all(isinstance(p, IngestError) for p in problems)
    assert batch.source == "s" and batch.batch_id == "b"


def test_collect_on_clean_batch():
    batch, problems = decode_batch(encode_batch(EVENTS, "s", "b"), errors="collect")
    assert problems == [] and len(batch.events) == len(EVENTS)


def test_decode_row_directly():
    ev = decode_row(["A", 2, {"x": 1}, "k", "id1"], 0)
    assert (ev.type, ev.ts, ev.attrs, ev.key, ev.id) == ("A", 2.0, {"x": 1}, "k", "id1")
    assert math.isclose(ev.ts, 2.0)


# --------------------------------------------------------------------------- encoding errors

def test_unencodable_attribute_names_row_and_attribute():
    with pytest.raises(IngestError, match="value must be"):
        Event("A", 2.0, {"when": object()})          # refused when made...
    events = [Event("A", 1.0, {"x": 1}), trusted_event("A", 2.0, {"when": object()})]
    with pytest.raises(IngestError) as info:         # ... and when encoded, past the check
        encode_batch(events, "s", "b")
    assert info.value.row == 1 and info.value.field == "when"


def test_encode_rejects_non_events_and_bad_header():
    with pytest.raises(IngestError) as info:
        encode_batch([EVENTS[0], {"type": "A"}], "s", "b")
    assert info.value.row == 1
    with pytest.raises(IngestError):
        encode_batch([], 3, "b")
    with pytest.raises(IngestError):
        encode_batch([], "s", None)
