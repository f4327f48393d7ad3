"""cep.output: match lines assembled from per-event JSON fragments parse to exactly what
``Match.to_dict()`` says, for single matches, batches (shared bindings), Kleene bindings,
retractions, a given variable order and extra fields."""
import json
import pickle

from hypothesis import given, settings, strategies as st

from cep.event import Event
from cep.match import Match, Retraction
from cep.output import MatchLines

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
    assert got == [m.to_dict() for m in fanned]
    assert lines.counts == {"q1": 2, "q2": 2}
