"""raycep.cep.io.output: match lines assembled from per-event JSON fragments parse to exactly what
``Match.to_dict()`` says, for single matches, batches (shared bindings), Kleene bindings,
retractions, a given variable order and extra fields."""
import hashlib
import json
import pickle
import threading

import msgpack
import orjson
from hypothesis import given, settings, strategies as st

from raycep.cep.event import Event, derive_id, prepare_json, trusted_event
from raycep.cep.io import output
from raycep.cep.io.output import MatchLines
from raycep.cep.match import Match, Retraction

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                    st.binary(max_size=3))
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text(max_size=3), scalars, max_size=2))
events = st.builds(
    Event, st.sampled_from(["A", "B", "Ü"]), st.floats(0, 1e6, allow_nan=False),
    st.dictionaries(st.sampled_from(["price", "key", "x", "é"]), values, max_size=3),
    st.one_of(st.none(), st.text(max_size=3), st.integers(0, 9)),
    st.one_of(st.none(), st.text(min_size=1, max_size=4)))
VARS = ["a", "b", "c", "d"]


def expected(match, **extra) -> dict:
    record = match.to_dict()
    del record["start"], record["end"]          # (to_dict's times are not in the lines)
    record.update(extra)
    return json.loads(json.dumps(record, default=str))


@st.composite
def matches(draw):
    """A list of matches as the evaluator emits them: single ones and batches."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 4))
        names = VARS[:n]
        bindings = {v: draw(st.one_of(events, st.tuples(events, events))) for v in names}
        order = draw(st.one_of(st.none(), st.permutations(names).map(tuple)))
        query = draw(st.sampled_from(["q1", "q\"2"]))
        if draw(st.booleans()):
            name = draw(st.sampled_from(names))
            base = {v: b for v, b in bindings.items() if v != name}
            batch = Match.batch(query, base, name, draw(st.lists(events, min_size=1, max_size=4)),
                                order)
            kind = draw(st.sampled_from(["matches", "retractions", "mixed"]))
            if kind == "retractions":
                batch = [Retraction.of(m) for m in batch]
            elif kind == "mixed":
                batch = [Retraction.of(m) if draw(st.booleans()) else m for m in batch]
            out.extend(batch)
        else:
            m = Match(query, bindings, order)
            out.append(Retraction.of(m) if draw(st.booleans()) else m)
    return out


@settings(max_examples=300, deadline=None)
@given(matches())
def test_lines_parse_to_the_match_records(found):
    writer = MatchLines()
    data = writer.lines(found)
    assert data.endswith(b"\n")
    got = [json.loads(line) for line in data.decode().split("\n")[:-1]]
    assert got == [expected(m, retracted=True) if m.retracted else expected(m) for m in found]
    # one line per match, and the counters add up per query
    total = {}
    for m in found:
        into = total.setdefault("r" if m.retracted else "m", {})
        into[m.query] = into.get(m.query, 0) + 1
    assert writer.counts == total.get("m", {})
    assert writer.retractions == total.get("r", {})


@settings(max_examples=100, deadline=None)
@given(matches())
def test_extra_fields_go_before_the_closing_brace(found):
    writer = MatchLines()
    data = b"".join(writer.line(m, b',"id":' + json.dumps(m.query).encode()) for m in found)
    got = [json.loads(line) for line in data.decode().split("\n")[:-1]]
    want = []
    for m in found:
        fields = {"id": m.query}
        if m.retracted:
            fields["retracted"] = True
        want.append(expected(m, **fields))
    assert got == want


def test_an_event_is_serialised_once_and_not_pickled_with_its_cache():
    e = Event("A", 1.0, {"price": 3})
    first = e.json()
    assert e.json() is first                    # cached
    clone = pickle.loads(pickle.dumps(e))
    assert clone._json is None and clone.json() == first and clone.id == e.id


def test_values_json_cannot_carry_are_written_as_text():
    e = Event("A", 1.0, {"raw": b"\x00x", "m": {1: "int key"}})
    assert json.loads(e.json()) == {"id": e.id, "type": "A", "ts": 1.0, "raw": "b'\\x00x'",
                                    "m": {"1": "int key"}}


def test_matches_of_several_queries_sharing_one_binding_keep_their_query():
    """A group's fan-out: the same bindings object and variable, other query names."""
    a, b1, b2 = Event("A", 1.0, {"x": 1}), Event("B", 2.0, {"x": 2}), Event("B", 3.0, {"x": 3})
    batch = Match.batch("g", {"a": a}, "b", [b1, b2], ("a", "b"))
    fanned = [tuple.__new__(Match, (q, *m[1:])) for q in ("q1", "q2") for m in batch]
    fanned.insert(1, fanned.pop(2))                 # q1, q2, q1, q2: runs that mix queries
    lines = MatchLines()
    got = [json.loads(line) for line in lines.lines(fanned).splitlines()]
    assert got == [expected(m) for m in fanned]
    assert lines.counts == {"q1": 2, "q2": 2}


# --- prepare_json: Event.json() of many events in one loop -----------------------------------

def reference_json(e: Event, eid: str) -> bytes:
    """What ``Event.json()`` is specified to give, spelled out independently of cep.event:
    id, type, ts, the partition key unless an attribute is named ``key``, then the
    attributes that do not clash with those fields; orjson, or the json module when orjson
    cannot encode it (e.g. an int beyond 64 bits)."""
    record = dict(id=eid, type=e.type, ts=e.ts)
    if e.key is not None and "key" not in e.attrs:
        record["key"] = e.key
    record.update((k, v) for k, v in e.attrs.items() if k not in record)
    try:
        return orjson.dumps(record, default=str)
    except TypeError:
        return json.dumps(record, default=str, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")


def reference_id(e: Event) -> str:
    body = msgpack.packb([e.type, e.ts, e.key, sorted(e.attrs.items())], use_bin_type=True,
                         default=str)
    return hashlib.blake2b(body, digest_size=10).hexdigest()


CASES = [
    ("A", 1.0, {"price": 3}, None, "given-id"),
    ("A", 1000006.0, {"price": 100.25, "volume": 690}, "k0", None),
    ("B", 2.5, {"x": 1}, 7, None),
    ("B", 2.5, {"key": "attr wins", "x": 1}, "partition", None),
    ("C", 3.0, {"raw": b"\x00x", "s": "é✓ 𝄞"}, "ключ", None),
    ("C", 4.0, {"big": 2 ** 70, "neg": -2 ** 65}, None, None),           # orjson fails
    ("C", 4.5, {"big": 2 ** 64, "s": "é✓", "raw": b"\xff"}, "ключ", None),  # json, unicode
    ("C", 4.0, {"big": 2 ** 64 - 1, "small": -2 ** 63}, None, None),     # orjson takes them
    ("D", 5.0, {"l": [1, [2.5, None], {"m": [True, b"b"]}], "m": {"a": {"b": []}}}, None, None),
    ("D", 5.0, {"m": {1: "int key"}}, None, None),                       # orjson fails
    ("Ü", 6.0, {"id": "shadowed", "type": "no", "ts": -1, "é": "ü"}, "k", None),
    ("F", 6.5, {"a": 1, "type": "no"}, None, None),
    ("F", 6.5, {"ts": -1, "z": 2}, "k", None),
    ("E", 7.0, {}, None, "x"),
]


def fresh() -> list:
    return [trusted_event(*case) for case in CASES]   # some values Event() refuses


def test_prepare_json_gives_the_bytes_and_ids_event_json_gives():
    bulk, single = fresh(), fresh()
    prepare_json(bulk)
    assert all(e._json is not None and e._id is not None for e in bulk)
    for b, s, case in zip(bulk, single, CASES):
        eid = case[4] or reference_id(s)
        assert b._id == eid == s.id
        assert reference_id(s) == derive_id(case[0], case[1], case[3], case[2])
        assert b._json == reference_json(s, eid) == s.json()
    assert reference_id(bulk[1]) == "c976929c5e2ef00c4b13"     # the id raycep local wrote


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(events, st.builds(
    trusted_event, st.just("A"), st.floats(0, 10), st.dictionaries(
        st.sampled_from(["n", "key", "id"]),
        st.one_of(st.integers(), st.lists(st.integers(), max_size=2)), max_size=2),
        st.one_of(st.none(), st.integers(-2 ** 70, 2 ** 70)))), max_size=6))
def test_prepare_json_agrees_with_the_reference_on_random_events(found):
    twins = pickle.loads(pickle.dumps(found))                   # same content, nothing cached
    prepare_json(found)
    for e, twin in zip(found, twins):
        eid = twin._id or reference_id(twin)
        assert e._id == eid and e._json == reference_json(twin, eid) == twin.json()


def test_prepare_json_leaves_prepared_events_as_they_are():
    done, known_id, todo = Event("A", 1.0, {"x": 1}), Event("A", 1.0, {"x": 1}, id="kept"), \
        Event("A", 2.0, {"x": 2})
    first = done.json()
    prepare_json([done, known_id, todo, todo])
    assert done._json is first
    assert known_id._id == "kept" and json.loads(known_id._json)["id"] == "kept"  # not derived
    assert todo._id == reference_id(todo) and todo._json == reference_json(todo, todo._id)
    again = todo._json
    prepare_json([todo])
    assert todo._json is again


def test_derived_ids_are_the_same_in_another_thread():
    e = Event("A", 1.0, {"x": [1, "y"], "b": b"z"}, "k")
    got = []
    worker = threading.Thread(target=lambda: got.append(derive_id(e.type, e.ts, e.key, e.attrs)))
    worker.start()
    worker.join()
    assert got == [reference_id(e)] == [e.id]


@settings(max_examples=200, deadline=None)
@given(matches())
def test_lines_prepare_the_events_at_once_and_write_what_line_writes(found):
    copy = pickle.loads(pickle.dumps(found))    # the same matches with fresh events
    calls = []
    real = output.prepare_json
    output.prepare_json = lambda events: calls.append(list(events)) or real(calls[-1])
    try:
        data = MatchLines().lines(found)
    finally:
        output.prepare_json = real
    one_by_one = MatchLines()
    assert data == b"".join(one_by_one.line(m) for m in copy)
    if len(found) > 1:
        assert len(calls) == 1                  # one bulk call per lines()
        top = [v for m in found for v in m.bindings.values() if v.__class__ is Event]
        assert {id(e) for e in top} <= {id(e) for e in calls[0]}
