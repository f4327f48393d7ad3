"""Match records with ids made in bulk (``MatchLines.records``, ``cep.match.block_ids``).

``MatchLines().records(found)`` of what ``Engine.process_columns(..., blocks=True)`` returns
(MatchBlock and MatchMix entries among Match objects) is, element by element and byte for
byte, ``[match_json(m) for m in matches]`` of the same queries' engine fed event by event
(each record with its ``"id"``, ``match_id``); ``block_ids`` of a block is ``match_id`` of
each of its matches. Random SEQ queries in any static order and random query groups
(members in one block, several queries' blocks in one mix), keyed or not, events with given
or derived ids, in random chunks, bulk evaluation from the first trigger on.
"""
from __future__ import annotations

import math
from unittest import mock

import orjson

import pytest

from hypothesis import given, note, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
from raycep.cep.event import Event, trusted_event
from raycep.cep.io.output import MatchLines, match_json, record_identity, record_meta
from raycep.cep.match import MatchBlock, MatchMix, block_ids, match_id
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch

from test_bulk import VARS, bulk_queries, random_stream
from test_groups_bulk import SLOW, groups
from test_groups_bulk import stream as group_stream

pytestmark = pytest.mark.filterwarnings("ignore::raycep.cep.runtime.unseen.QueryWarning")
NAMES = ("q", "näme", "q 2", "m0'")         # query names, non-ASCII and quoted ones too


def engine(setup: list, keyed: bool, sharing: bool) -> Engine:
    eng = Engine(key_attr="k" if keyed else None, sharing=sharing)
    for name, text, order in setup:
        eng.add_query(text, name=name, order=order)
    return eng


def without_ids(events: list, drop: bool) -> list:
    """``events`` as they are, or with ids derived from their content (``drop``)."""
    if not drop:
        return events
    return [trusted_event(e.type, e.ts, dict(e.attrs), key=e.key) for e in events]


def check(setup: list, events: list, cuts: list, keyed: bool, sharing: bool) -> int:
    """Records in bulk against ``match_json`` of each match event by event; returns how many
    matches came in blocks."""
    ref = engine(setup, keyed, sharing)
    want = [match_json(m) for ev in events for m in ref.process(ev)]
    want += [match_json(m) for m in ref.advance(math.inf)]
    eng, lines, got, in_blocks = engine(setup, keyed, sharing), MatchLines(), [], 0
    meta: tuple = ([], [])
    made = 0                            # matches whose records are made from a MatchBlock
    for a, b in zip(cuts, cuts[1:]):
        found = eng.process_columns(ColumnBatch.from_events(events[a:b]), blocks=True)
        for item in found:
            if item.__class__ is MatchBlock:
                assert block_ids(item) == [m.id.encode() for m in item]
            if item.__class__ in (MatchBlock, MatchMix):
                in_blocks += len(item)
            parts = item.parts if item.__class__ is MatchMix else (item,)
            made += sum(len(p) for p in parts if p.__class__ is MatchBlock)
        got += lines.records(iter(found), meta)
    got += lines.records(eng.advance(math.inf), meta)
    assert got == want
    assert len(meta[0]) == len(meta[1]) == len(got)
    known = 0
    for record, query, ident in zip(got, *meta):  # what the gateway reads of a record
        parsed = orjson.loads(record)               # without parsing it: from the record,
        want_meta = (parsed["query"], record_identity(parsed))  # or as the worker made it
        assert record_meta(record) == want_meta
        if query is not None:
            assert (query, ident) == want_meta
            known += 1
    assert known == made                # every record made from a block comes with its meta
    return in_blocks


@settings(max_examples=250, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), seed=st.integers(0, 2 ** 20), n=st.integers(30, 200),
       keyed=st.booleans(), sharing=st.booleans(), derived=st.booleans(),
       ties=st.sampled_from([0, 0, 0.05]))
def test_records_of_blocks_equal_match_json_event_by_event(data, seed, n, keyed, sharing,
                                                           derived, ties):
    """1-3 random SEQ queries, each in a static order, with conditions the bulk path takes
    (a chunk goes bulk when every query it triggers can)."""
    setup = []
    for k in range(data.draw(st.sampled_from([1, 2, 3]), label="queries")):
        text, n_vars, _, _ = data.draw(bulk_queries().filter(lambda q: q[3]),
                                        label=f"query {k}")
        window = data.draw(st.sampled_from([None, 6, 12]), label=f"window {k}")
        if window is not None:                      # more matches than the drawn window
            text = f"{text.rsplit(' WITHIN ', 1)[0]} WITHIN {window} seconds"
        order = tuple(data.draw(st.permutations(VARS[:n_vars]), label=f"order {k}"))
        setup.append((NAMES[k], text, order))
    events = without_ids(random_stream(seed, n, ties, 0.0, keyed), derived)
    cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=5), label="cuts")})
    note(f"{setup}")
    with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
        check(setup, events, cuts, keyed, sharing)


@settings(max_examples=250, deadline=None, suppress_health_check=SLOW)
@given(case=groups(), seed=st.integers(0, 2 ** 16), n=st.integers(20, 120),
       derived=st.booleans(), ties=st.sampled_from([0, 0, 0.1]), data=st.data())
def test_records_of_group_blocks_and_mixes_equal_match_json(case, seed, n, derived, ties,
                                                            data):
    """Query groups: a member's matches in its group's block (``members``), next to an
    unrelated query (a MatchMix)."""
    queries, order, keyed = case
    setup = [(name, text, order if name != "other" else ("q", "p"))
             for name, text in queries]
    events = without_ids(group_stream(seed, n, keyed, ties, 0.0), derived)
    cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=5), label="cuts")})
    note("\n".join(f"{name}: {text}" for name, text, _ in setup) + f"\norder={order}")
    with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
        check(setup, events, cuts, keyed, True)


def test_a_group_block_and_a_mix_are_made_in_bulk():
    """A fixed case that goes bulk: a group of two members and a query of its own give a
    MatchMix holding a group's MatchBlock; its records and ids are the matches'."""
    setup = [("lo", "PATTERN SEQ(A a, B b) WHERE b.x > a.x + 1 WITHIN 5 seconds", ("b", "a")),
             ("hi", "PATTERN SEQ(A a, B b) WHERE b.x > a.x + 2 WITHIN 5 seconds", ("b", "a")),
             ("näme", "PATTERN SEQ(B c, A d) WHERE d.x < c.x WITHIN 3 seconds", ("d", "c"))]
    events = [Event("AB"[i % 2], float(i), {"x": (i * 7) % 5}, id=f"e{i}") for i in range(200)]
    eng = engine(setup, False, True)
    found = eng.process_columns(ColumnBatch.from_events(events), blocks=True)
    mixes = [f for f in found if f.__class__ is MatchMix]
    assert mixes and any(p.__class__ is MatchBlock and p.members is not None
                         for p in mixes[0].parts)
    assert check(setup, events, [0, 200], False, True) > 0
    matches = list(mixes[0])
    assert MatchLines().records(mixes) == [match_json(m) for m in matches]
    block = next(p for p in mixes[0].parts if p.__class__ is MatchBlock)
    assert block_ids(block) == [match_id(m).encode() for m in block]


def test_record_meta_reads_query_and_identity_or_declines():
    """``record_meta`` gives what parsing gives for matches and retractions (non-ASCII and
    quoted names too) and declines texts of another form: a late-event record, a name with
    a JSON escape."""
    a, b = Event("A", 1.0, {"x": 1}, id="a1"), Event("B", 2.0, {"x": "y"}, id="b1")
    from raycep.cep.match import Match, Retraction
    for name in NAMES:
        m = Match(name, {"a": a, "b": b}, ("a", "b"))
        for out in (m, Retraction.of(m)):
            data = match_json(out)
            parsed = orjson.loads(data)
            assert record_meta(data) == (name, record_identity(parsed))
        assert record_meta(match_json(Retraction.of(m)))[1] == "retracted:" + m.id
    escaped = match_json(Match('q"1', {"a": a}, ("a",)))
    assert record_meta(escaped) is None
    assert record_meta(orjson.dumps({"late": True, "id": "late:s:a1"})) is None
