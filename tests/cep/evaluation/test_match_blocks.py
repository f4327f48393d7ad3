"""Bulk matches as columns (cep.match.MatchBlock) and the planner's first look.

``Engine.process_columns(..., blocks=True)`` and ``PlannedEngine.process_columns(...,
blocks=True)`` may hand over a MatchBlock entry standing for many matches: expanded (by
iterating it), the list is element by element the list of ``blocks=False`` on a fresh engine and
of ``Engine.process`` of each event in turn (the same Match objects, bindings with their key
order, query and variable order); slices, ``len`` and ``MatchBlock.joined`` of pieces agree with
the expanded matches; ``raycep.cep.io.output.MatchLines`` writes a list mixing Match and MatchBlock
entries byte for byte as the expanded list, keys in the query's variable order.

``PlannedEngine(first_check=N)`` looks at the statistics first after N events, then at the
multiples of ``check_every`` (before it, a query runs a provisional plan); ``raycep local`` plans first after FIRST_PLAN_EVENTS and then every
``--check-every`` (default ``gateway.cli.local.CHECK_EVERY``)
(``--check-every``'s default)."""
from __future__ import annotations

import math
import random
from itertools import permutations

import orjson
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import raycep.cep.io.output
from raycep.cep.event import Event
from raycep.cep.io.output import Fragments, MatchLines
from raycep.cep.match import Match, MatchBlock, MatchMix, Retraction
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch
from raycep.planner.local import PlannedEngine

from test_bulk import VARS, bulk_queries, cycle_stream, patched, random_stream
from test_bulk_shapes import (EVERY, _note, _positives, chunk_bounds, shape, sig, stream,
                              with_window)
from test_columnar_engine import summary_counts

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
ABC = "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x WITHIN 6 seconds"


# --------------------------------------------------------------------------- helpers

def expand(out: list) -> list:
    """``out`` with each MatchBlock (or MatchMix: several queries' blocks interleaved) entry
    replaced by its matches (iterating it)."""
    flat = []
    for item in out:
        if item.__class__ in (MatchBlock, MatchMix):
            flat.extend(iter(item))
        else:
            flat.append(item)
    return flat


def blocks_of(out: list) -> list:
    """``[(block, offset of its first match in expand(out))]``."""
    found, at = [], 0
    for item in out:
        if item.__class__ is MatchBlock:
            found.append((item, at))
            at += len(item)
        elif item.__class__ is MatchMix:
            at += len(item)
        else:
            at += 1
    return found


def make_engine(setup: list, key=None, sharing=True) -> Engine:
    eng = Engine(key_attr=key, sharing=sharing)
    for name, text, order in setup:
        eng.add_query(text, name=name, order=order)
    return eng


def by_columns(eng, events: list, bounds: list, blocks: bool, one_batch: bool) -> list:
    """``process_columns`` over ``events`` in the chunks ``bounds``: rows of one batch, or one
    batch per chunk; then the end of the stream."""
    out = []
    batch = ColumnBatch.from_events(events) if one_batch else None
    for lo, hi in bounds:
        if one_batch:
            out += eng.process_columns(batch, lo, hi, blocks=blocks)
        else:
            out += eng.process_columns(ColumnBatch.from_events(events[lo:hi]), blocks=blocks)
    return out + eng.advance(math.inf)


def by_event(eng, events: list) -> list:
    out = []
    for ev in events:
        out += eng.process(ev)
    return out + eng.advance(math.inf)


def assert_same_matches(got: list, want: list):
    """Element by element: equal Match objects, the same tuple (query, bindings with their
    key order and Events' content, varying variable, its Event, order) and bindings."""
    assert len(got) == len(want)
    assert got == want
    assert [shape(m) for m in got] == [shape(m) for m in want]
    assert [[(k, sig(v)) for k, v in m.bindings.items()] for m in got] == \
        [[(k, sig(v)) for k, v in m.bindings.items()] for m in want]
    assert [(m.query, m.order) for m in got] == [(m.query, m.order) for m in want]


def assert_lines(items: list, flat: list):
    """``MatchLines.pieces`` of ``items`` (Match and MatchBlock entries) against
    ``MatchLines.lines`` of the expanded ``flat``: the same bytes and counts; each line is the
    JSON of its match's ``to_dict()``, keys in that order (as orjson writes it: infinities
    become null)."""
    mixed, plain = MatchLines(), MatchLines()
    pieces = mixed.pieces(items)
    assert all(p.__class__ is bytes for p in pieces)
    got = b"".join(pieces)
    want = plain.lines(flat)
    assert got == want
    assert mixed.counts == plain.counts and mixed.retractions == plain.retractions
    assert MatchLines().lines(iter(items)) == want          # any iterable, blocks too
    lines = got.splitlines()
    assert len(lines) == len(flat)
    for line, m in zip(lines, flat):
        parsed, expected = orjson.loads(line), orjson.loads(orjson.dumps(line_record(m)))
        assert parsed == expected
        assert list(parsed["events"]) == list(expected["events"])


def line_record(m) -> dict:
    """``m.to_dict()`` without its times: what a line holds."""
    record = m.to_dict()
    del record["start"], record["end"]
    return record


def check_slices(block: MatchBlock, want: list, rng: random.Random):
    """``len``, iteration and random slices of ``block`` against its matches ``want``."""
    n = len(block)
    assert n == len(list(block)) == len(want)
    for _ in range(4):
        a, b = rng.randint(-n - 2, n + 2), rng.randint(-n - 2, n + 2)
        assert_same_matches(block[a:b], want[a:b])
    k = rng.randint(0, n)
    assert_same_matches(block[k:], want[k:])
    assert_same_matches(block[:k], want[:k])
    assert_same_matches(block[:], want)


def random_pieces(kind: list, rng: random.Random) -> list:
    """1 to 5 ``(block, a, b)`` pieces of the blocks ``kind`` (one kind): ranges of random
    blocks, empty ones, and a block cut into contiguous pieces."""
    pieces = []
    for _ in range(rng.randint(1, 5)):
        block = rng.choice(kind)
        n = len(block)
        roll = rng.random()
        if roll < 0.3:                                  # contiguous pieces of one block
            cuts = sorted(rng.randint(0, n) for _ in range(rng.randint(1, 3)))
            bounds = [0, *cuts, n]
            pieces += [(block, a, b) for a, b in zip(bounds, bounds[1:])]
        elif roll < 0.4:
            k = rng.randint(0, n)
            pieces.append((block, k, k))                # empty
        else:
            a = rng.randint(0, n - 1)
            pieces.append((block, a, rng.randint(a + 1, n)))
    return pieces


def check_joined(kind: list, rng: random.Random):
    """``MatchBlock.joined`` of random pieces of the blocks ``kind``: its matches (and lines)
    are the concatenation of the pieces' slices."""
    pieces = random_pieces(kind, rng)
    want = [m for block, a, b in pieces for m in block[a:b]]
    got = MatchBlock.joined(pieces)
    if not want:
        assert got == []
        return
    assert got.__class__ is MatchBlock and got.same_kind(kind[0])
    assert len(got) == len(want)
    assert_same_matches(list(got), want)
    assert_lines([got], want)
    n = len(want)
    a, b = rng.randint(0, n), rng.randint(0, n)
    assert_same_matches(got[a:b], want[a:b])


def check_blocks(setup: list, events: list, bounds: list, *, key=None, sharing=True,
                 one_batch=True, seed: int = 0) -> list:
    """``blocks=True`` against ``blocks=False`` and ``process`` of each event (expanded:
    the same matches), its lines against the expanded list's, each block's slices, and
    ``joined`` of random pieces of the blocks of each kind; returns the raw output."""
    with patched() as spy:
        blocked = by_columns(make_engine(setup, key, sharing), events, bounds, True, one_batch)
        plain = by_columns(make_engine(setup, key, sharing), events, bounds, False, one_batch)
    want = by_event(make_engine(setup, key, sharing), events)
    found = blocks_of(blocked)
    _note(f"bulk results {spy.bulk()}, {len(found)} blocks of "
          f"{sum(len(b) for b, _ in found)} matches, {len(want)} outputs")
    if currently_in_test_context():
        event(f"{len(setup)} q, matches {bool(want)}, blocks {bool(found)}")
    assert not any(m.__class__ in (MatchBlock, MatchMix) for m in plain)
    flat = expand(blocked)
    assert_same_matches(flat, plain)
    assert_same_matches(flat, want)
    assert_lines(blocked, flat)
    rng = random.Random(seed)
    for block, at in found:
        check_slices(block, flat[at:at + len(block)], rng)
    kinds: list = []
    for block, _ in found:
        for kind in kinds:
            if kind[0].same_kind(block):
                kind.append(block)
                break
        else:
            kinds.append([block])
    for kind in kinds:
        check_joined(kind, rng)
    return blocked


# --------------------------------------------------------------------------- properties

@settings(max_examples=250, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), seed=st.integers(0, 2 ** 20), n=st.integers(40, 250),
       ties=st.sampled_from([0, 0, 0, 0.05]), odd=st.sampled_from([0.0, 0.0, 0.05]),
       keyed=st.booleans(), sharing=st.booleans(), one_batch=st.booleans(),
       largest=st.sampled_from([12, 60, 250]))
def test_blocks_expand_to_the_matches_without_blocks_random_seq(data, seed, n, ties, odd, keyed,
                                                                sharing, one_batch, largest):
    """Random SEQ queries (1 to 3, any static order) over random streams in random chunks:
    ``blocks=True`` expanded equals ``blocks=False`` and ``process`` of each event."""
    setup = []
    for k in range(data.draw(st.sampled_from([1, 1, 2, 3]), label="queries")):
        text, n_vars, _, _ = data.draw(bulk_queries(), label=f"query {k}")
        window = data.draw(st.sampled_from([None, 6, 12]), label=f"window {k}")
        if window is not None:                      # more matches than the drawn window
            text = f"{text.rsplit(' WITHIN ', 1)[0]} WITHIN {window} seconds"
        order = tuple(data.draw(st.permutations(VARS[:n_vars]), label=f"order {k}"))
        setup.append((f"q{k}", text, order))
    events = random_stream(seed, n, ties, odd, keyed)
    note(f"{setup}")
    check_blocks(setup, events, chunk_bounds(seed, n, largest), key="k" if keyed else None,
                 sharing=sharing, one_batch=one_batch, seed=seed)


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(data=st.data(), seed=st.integers(0, 2 ** 20), one_batch=st.booleans())
def test_blocks_expand_to_the_matches_without_blocks_shapes(data, seed, one_batch):
    """The shapes of test_bulk_shapes (variables of one type, arithmetic, negations: blocks
    with one bindings dict per match as well as shared prefixes)."""
    types, text = data.draw(st.sampled_from(EVERY), label="query")
    text = with_window(text, data.draw(st.sampled_from([3.0, 6.0]), label="window"))
    order = tuple(data.draw(st.permutations(_positives(text)), label="order"))
    n = data.draw(st.sampled_from([100, 250, 400]), label="events")
    events = stream(seed, n, types, ties=data.draw(st.booleans(), label="ties"))
    largest = data.draw(st.sampled_from([16, 128, 400]), label="largest chunk")
    note(f"{text} order={order}")
    check_blocks([("q", text, order)], events, chunk_bounds(seed, n, largest),
                 one_batch=one_batch, seed=seed)


# --------------------------------------------------------------------------- blocks occur

def test_one_query_in_bulk_gives_blocks_of_both_kinds():
    """Not vacuous: a clean stream in chunks gives MatchBlock entries, with shared prefix
    bindings (``batch``) and with one bindings dict per match, holding most matches."""
    events = cycle_stream(600, "ABCEB", seed=1)
    bounds = chunk_bounds(2, len(events), 64)
    for order in permutations("abc"):
        out = check_blocks([("q", ABC, order)], events, bounds, seed=3)
        found = blocks_of(out)
        assert len(found) > 5, order
        assert sum(len(b) for b, _ in found) > 0.8 * len(expand(out)), order
        assert all(b.batch for b, _ in found)
    types, text = EVERY[0]                      # SEQ(Stock a, Stock b, Stock c): not batch
    events = stream(4, 400, types)
    out = check_blocks([("q", with_window(text, 6.0), ("c", "a", "b"))], events,
                       chunk_bounds(5, 400, 50), seed=4)
    found = blocks_of(out)
    assert found and not any(b.batch for b, _ in found)
    assert sum(len(b) for b, _ in found) > 100


def test_several_queries_give_blocks_and_matches_mixed():
    """Two queries of different trigger types: chunks with one query's triggers come as
    blocks, those with both as a MatchMix (the two queries' blocks interleaved trigger by
    trigger); expanded, the same as without blocks."""
    events = cycle_stream(900, "ABDCAEDB", seed=8)
    setup = [("abc", "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.y >= c.y WITHIN 5 "
                     "seconds", ("b", "a", "c")),
             ("ad", "PATTERN SEQ(A a, D d) WHERE a.z > d.z WITHIN 3 seconds", ("d", "a"))]
    for sharing in (True, False):
        out = check_blocks(setup, events, chunk_bounds(9, len(events), 12), sharing=sharing,
                           seed=9)
        assert {b.query for b, _ in blocks_of(out)} == {"abc", "ad"}
        mixes = [m for m in out if m.__class__ is MatchMix]
        assert mixes and {p.query for m in mixes for p in m.parts} == {"abc", "ad"}


def test_planned_engine_hands_over_blocks():
    """``PlannedEngine.process_columns(blocks=True)`` (adaptive plans, cut where the planner
    looks): blocks whose matches, and the plan history, are those of ``blocks=False`` and of
    ``process`` of each event in turn."""
    events = cycle_stream(3000, "ABACBE", seed=12)
    runs = []
    for mode in ("blocks", "columns", "events"):
        with patched() as spy:
            eng = PlannedEngine(Engine(sharing=False), check_every=397, first_check=50)
            eng.add_query("PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.y > c.y "
                          "WITHIN 5 seconds", name="q", planner="adaptive:GREEDY")
            eng.add_query("PATTERN SEQ(B b, E e) WHERE b.x >= e.x WITHIN 2 seconds", name="be",
                          order=("e", "b"))
            out = []
            batch = ColumnBatch.from_events(events)
            for lo, hi in chunk_bounds(13, len(events), 200):
                if mode == "events":
                    out += [m for ev in events[lo:hi] for m in eng.process(ev)]
                else:
                    out += eng.process_columns(batch, lo, hi, blocks=mode == "blocks")
            out += eng.advance(math.inf)
        runs.append((out, eng.history))
        if mode == "blocks":
            found = blocks_of(out)
            assert {b.query for b, _ in found} == {"q", "be"}
            assert spy.bulk("q") > 0
    (blocked, h1), (plain, h2), (want, h3) = runs
    assert h1 and h1 == h2 == h3
    assert not any(m.__class__ in (MatchBlock, MatchMix) for m in plain)
    assert_same_matches(expand(blocked), plain)
    assert_same_matches(expand(blocked), want)
    assert_lines(blocked, want)


# --------------------------------------------------------------------------- slicing, joining

def _blocks(n_events: int = 600, size: int = 100, order=("c", "a", "b"), seed: int = 1):
    """The blocks of ``ABC`` over a cycle stream in chunks of ``size`` (and the output)."""
    events = cycle_stream(n_events, "ABCEB", seed=seed)
    with patched():
        out = by_columns(make_engine([("q", ABC, order)]), events,
                         [(k, min(k + size, n_events)) for k in range(0, n_events, size)],
                         True, False)
    found = [b for b, _ in blocks_of(out)]
    assert len(found) >= 2
    return found, out


def test_every_slice_of_a_block_is_that_slice_of_its_matches():
    block = max(_blocks()[0], key=len)
    want = list(block)
    n = len(block)
    assert n >= 8 and len(want) == n
    for a in range(-n - 2, n + 3):
        for b in range(-n - 2, n + 3):
            assert_same_matches(block[a:b], want[a:b])
        assert_same_matches(block[a:], want[a:])
        assert_same_matches(block[:a], want[:a])
    assert_same_matches(block[:], want)
    for bad in (0, -1, slice(0, 4, 2), slice(None, None, -1)):
        with pytest.raises(TypeError):
            block[bad]


def test_joined_pieces_of_two_blocks():
    """Pieces of two different blocks of one kind, contiguous pieces of one block, empty
    pieces: the matches of the slices, in order."""
    (b1, b2, *_), _ = _blocks()
    assert b1.same_kind(b2) and b1 is not b2
    n1, n2 = len(b1), len(b2)
    cases = [
        [(b1, 0, n1), (b2, 0, n2)],
        [(b1, 2, 5), (b2, 1, n2 - 1)],
        [(b2, 3, 4), (b1, 0, 1), (b2, 0, 3)],
        [(b1, 0, 2), (b1, 2, 6), (b2, 0, 0), (b2, 4, n2)],
        [(b1, 3, 7), (b1, 0, 2)],                   # one block twice, not contiguous
        [(b1, 1, 1), (b2, 2, 7), (b1, 4, 4)],
        [(b1, 0, 3), (b1, 3, 5), (b1, 5, n1)],      # contiguous: the whole block
    ]
    for pieces in cases:
        want = [m for block, a, b in pieces for m in block[a:b]]
        got = MatchBlock.joined(pieces)
        assert got.__class__ is MatchBlock and len(got) == len(want)
        assert_same_matches(list(got), want)
        assert_same_matches(got[1:-1], want[1:-1])
        assert_lines([got], want)
    assert MatchBlock.joined([(b1, 2, 2), (b2, 0, 0)]) == []
    assert MatchBlock.joined([]) == []


def test_joined_contiguous_pieces_of_one_block_are_that_block():
    """Consecutive ranges of one block are merged: pieces covering a whole block give that
    block itself (no copy), pieces covering part of it one range of it."""
    (b1, b2, *_), _ = _blocks()
    n = len(b1)
    assert MatchBlock.joined([(b1, 0, n)]) is b1
    assert MatchBlock.joined([(b1, 0, 3), (b1, 3, 3), (b1, 3, n)]) is b1
    assert MatchBlock.joined([(b1, 0, 1), (b1, 1, 4), (b1, 4, n)]) is b1
    part = MatchBlock.joined([(b2, 1, 3), (b2, 3, 5)])
    assert part is not b2
    assert_same_matches(list(part), b2[1:5])
    assert len(part.heads[0]) == len({id(m[1]) for m in b2[1:5]})   # no prefix twice


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(seed=st.integers(0, 2 ** 20))
def test_joined_random_pieces(seed):
    found, _ = _blocks(400, 60, seed=seed % 7)
    check_joined(found, random.Random(seed))


# --------------------------------------------------------------------------- MatchLines

def test_lines_of_a_block_follow_the_query_variable_order():
    """A forced order ``c,a,b`` (plan names c, a, b: the last variable b in the middle of the
    query's a, b, c), and every other order: each line's keys are a, b, c."""
    for order in permutations("abc"):
        found, out = _blocks(order=order)
        assert any(tuple(b.names) != ("a", "b", "c") for b in found)
        flat = expand(out)
        assert_lines(out, flat)
        lines = MatchLines()
        for block in found:
            text = b"".join(lines.block(block))
            records = [orjson.loads(line) for line in text.splitlines()]
            assert len(records) == len(block)
            assert all(list(r["events"]) == ["a", "b", "c"] for r in records)
            assert records == [line_record(m) for m in block]
        assert lines.counts == {"q": sum(len(b) for b in found)}


def test_lines_of_mixed_matches_blocks_and_retractions():
    """Lists mixing blocks, pieces of them as Match objects (of the same Match.batch as the
    block's neighbours), joined blocks and retractions: the bytes and counts of the expanded
    list."""
    found, out = _blocks(order=("b", "a", "c"))
    rng = random.Random(5)
    for _ in range(30):
        items, flat = [], []
        for block in rng.sample(found, rng.randint(1, len(found))):
            n = len(block)
            a = rng.randint(0, n)
            b = rng.randint(a, n)
            head, tail = block[:a], block[b:]
            items += head
            flat += head
            if b > a:
                mid = MatchBlock.joined([(block, a, b)])
                items += [mid] if rng.random() < 0.8 else list(mid)
                flat += list(mid)
            items += tail
            flat += tail
            if rng.random() < 0.3 and flat:
                r = Retraction.of(rng.choice(flat))
                items.append(r)
                flat.append(r)
        assert_lines(items, flat)
    assert_lines([], [])
    assert_lines(found[:1], list(found[0]))


def test_a_block_longer_than_a_piece(monkeypatch):
    """A block of more than PIECE_LINES matches is written in pieces of at most PIECE_LINES
    lines, together the lines of its matches."""
    events = cycle_stream(3000, "AB", seed=2)
    with patched():
        out = by_columns(make_engine([("q", "PATTERN SEQ(A a, B b) WHERE a.x <= b.x WITHIN "
                                            "60 seconds", ("b", "a"))]),
                         events, [(0, 3000)], True, True)
    block = max((b for b, _ in blocks_of(out)), key=len)
    assert len(block) > raycep.cep.io.output.PIECE_LINES
    pieces = MatchLines().pieces([block])
    assert len(pieces) == -(-len(block) // raycep.cep.io.output.PIECE_LINES)
    assert all(p.count(b"\n") <= raycep.cep.io.output.PIECE_LINES for p in pieces)
    assert_lines([block], list(block))
    monkeypatch.setattr(raycep.cep.io.output, "PIECE_LINES", 7)
    small = max(_blocks()[0], key=len)
    pieces = MatchLines().pieces([small, small])
    assert len(pieces) == 2 * -(-len(small) // 7)
    assert all(0 < p.count(b"\n") <= 7 for p in pieces)
    assert_lines([small, small], list(small) * 2)


# --------------------------------------------------------------------------- first look

def phased_stream(n: int, switch: int, seed: int = 0, step: float = 1.0) -> list:
    """Events one per ``step`` s: B frequent until event ``switch``, A frequent after (the
    adaptive plan of SEQ(A a, B b, C c) changes with the rates)."""
    rng = random.Random(seed)
    out = []
    for j in range(n):
        w = "ABBBBBBBBC" if j < switch else "AAAAAAAABC"
        out.append(Event(rng.choice(w), 1.0 + j * step,
                         {"x": rng.randint(0, 5), "y": rng.randint(0, 3)}, id=f"e{j:06d}"))
    return out


PHASED = "PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x WITHIN 5 seconds"


def planned(first_check, check_every=997):
    eng = PlannedEngine(Engine(sharing=False), check_every=check_every,
                        first_check=first_check)
    eng.add_query(PHASED, name="q")
    looks = []                                  # history length at each look
    replan = eng.replan

    def spy():
        looks.append(eng.engine.clock)          # events one a second from ts 1: the count
        replan()
    eng.replan = spy
    return eng, looks


@pytest.mark.parametrize("first_check", [1, 37, 500, 996])
def test_first_look_after_first_check_events_then_every_check_every(first_check):
    events = phased_stream(4000, 1500)
    runs = []
    for mode in ("events", "many", "columns", "blocks"):
        eng, looks = planned(first_check)
        cuts = []
        inner = eng.engine.process_columns

        def recorded(batch, lo=0, hi=None, **kw):
            cuts.append(hi)
            return inner(batch, lo, hi, **kw)
        eng.engine.process_columns = recorded
        out = []
        batch = ColumnBatch.from_events(events)
        for lo, hi in chunk_bounds(first_check, len(events), 700):
            if mode == "events":
                out += [m for ev in events[lo:hi] for m in eng.process(ev)]
            elif mode == "many":
                out += eng.process_many(events[lo:hi])
            else:
                out += eng.process_columns(batch, lo, hi, blocks=mode == "blocks")
        assert looks == [float(first_check)] + [float(k) for k in range(997, 4000, 997)], mode
        assert eng.history[0].events == first_check
        assert all(h.events % 997 == 0 for h in eng.history[1:])
        assert len(eng.history) >= 2            # the plan changes with the rates
        if mode in ("columns", "blocks"):      # each look cuts the chunk it falls in
            assert {first_check, 997, 1994, 2991} <= set(cuts)
        runs.append((expand(out + eng.advance(math.inf)), eng.history))
    for got, history in runs[1:]:
        assert history == runs[0][1]
        assert_same_matches(got, runs[0][0])
    # the matches (as a set) do not depend on when the plans were made
    eng, _ = planned(None)
    default = by_event(eng, events)
    assert eng.history[0].events == 997
    assert sorted(map(sorted, (m.key() for m in default))) == \
        sorted(map(sorted, (m.key() for m in runs[0][0])))


def test_before_the_first_look_a_query_has_a_provisional_plan():
    """A query the planner decides has a static order from its registration on (planned
    from the default statistics), so the rows before the first look go in bulk, not one by
    one in the ad hoc order; the first look's plan is the policy's first (``history``), and
    the matches are those of the engine without a planner. ``tree-nfa`` keeps the ad hoc
    order (no provisional plan)."""
    events = phased_stream(3000, 1500)
    eng, looks = planned(1000)
    assert eng.engine.managers["q"].order is not None and eng.history == []
    batch = ColumnBatch.from_events(events)
    first = eng.process_columns(batch, 0, 999)
    paths = eng.engine.paths()["q"]
    assert paths["per_trigger"] == 0 and paths["bulk"] > 0 and paths["why"] is None, paths
    assert looks == [] and eng.history == []
    rest = eng.process_columns(batch, 999, len(events))
    assert looks and eng.history[0].events == 1000 and eng.history[0].version == 1
    got = expand(first + rest + eng.advance(math.inf))
    alone = Engine(sharing=False)
    alone.add_query(PHASED, name="q")
    want = by_event(alone, events)
    assert want and sorted(map(sorted, (m.key() for m in got))) == \
        sorted(map(sorted, (m.key() for m in want)))
    adhoc = PlannedEngine(Engine(sharing=False))
    adhoc.add_query(PHASED, name="q", planner="tree-nfa")
    assert adhoc.engine.managers["q"].order is None


def test_first_check_at_or_after_check_every():
    """``first_check`` >= ``check_every``: the first look then, the next at the next multiple
    of ``check_every``; None: the first at ``check_every``."""
    events = phased_stream(2500, 10 ** 9)
    for first_check, want in ((None, [500.0, 1000.0, 1500.0, 2000.0, 2500.0]),
                              (500, [500.0, 1000.0, 1500.0, 2000.0, 2500.0]),
                              (700, [700.0, 1000.0, 1500.0, 2000.0, 2500.0]),
                              (1200, [1200.0, 1500.0, 2000.0, 2500.0])):
        eng, looks = planned(first_check, check_every=500)
        eng.process_many(events)
        assert looks == want, first_check


def _phased_csv(path, n: int, switch: int):
    rows = ["type,ts,x,y"]
    for ev in phased_stream(n, switch, seed=3):
        rows.append(f"{ev.type},{ev.ts!r},{ev.attrs['x']},{ev.attrs['y']}")
    path.write_text("\n".join(rows) + "\n")


def test_raycep_local_plans_first_then_every_check_every(tmp_path, capsys):
    """``raycep local``: ``plan: ... after FIRST_PLAN_EVENTS events`` first; with the default
    --check-every (CHECK_EVERY) the plan changes next at a multiple of it (of 2000 with
    --check-every 2000); the same matches either way."""
    from raycep.gateway import cli
    from raycep.gateway.cli.local import CHECK_EVERY, FIRST_PLAN_EVENTS as FIRST

    assert FIRST < 300
    path = tmp_path / "events.csv"
    _phased_csv(path, CHECK_EVERY + 8000, 5000)
    query = tmp_path / "q.cep"
    query.write_text(f"NAME q\n{PHASED}\n")
    outs = {}
    for extra in ([], ["--check-every", "2000"], ["--check-every", "300"]):
        out = tmp_path / f"m{len(extra)}{''.join(extra)}.jsonl"
        status = cli.main(["local", "--query", str(query), "--events", str(path),
                           "--out", str(out), "--workers", "1", *extra])
        captured = capsys.readouterr()
        assert status == 0, captured.err
        plans = [line for line in captured.err.splitlines() if "plan: query q " in line]
        after = [int(line.split(" after ")[1].split()[0]) for line in plans]
        outs[tuple(extra)] = (after, sorted(out.read_bytes().splitlines()),
                              summary_counts(captured.out))
    after, lines, summary = outs[()]
    assert plans and summary["events"] == CHECK_EVERY + 8000 and summary["matches"] > 100
    assert after[0] == FIRST and len(after) >= 2        # the rates change at event 5000
    assert all(a % CHECK_EVERY == 0 for a in after[1:]) and after[1] == CHECK_EVERY
    every_2000 = outs[("--check-every", "2000")][0]
    assert every_2000[0] == FIRST and len(every_2000) >= 2
    assert all(a % 2000 == 0 for a in every_2000[1:]) and every_2000[1] < CHECK_EVERY
    every_300 = outs[("--check-every", "300")][0]
    assert every_300[0] == FIRST and all(a % 300 == 0 for a in every_300[1:])
    for other in outs.values():
        assert other[1] == lines and other[2] == summary


def test_raycep_local_help_states_the_check_every_default(capsys):
    from raycep.gateway import cli
    assert cli.main(["local", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    from raycep.gateway.cli.local import CHECK_EVERY, FIRST_PLAN_EVENTS
    assert f"default {CHECK_EVERY}" in text and f"min(N, {FIRST_PLAN_EVENTS})" in text


def test_process_columns_blocks_false_is_the_default():
    """Without ``blocks``, ``process_columns`` returns Match objects only."""
    events = cycle_stream(300, "ABCEB")
    with patched() as spy:
        eng = make_engine([("q", ABC, ("c", "a", "b"))])
        out = eng.process_columns(ColumnBatch.from_events(events))
    assert spy.bulk() > 0 and out
    assert all(m.__class__ is Match for m in out)


def test_raycep_local_writes_match_blocks(tmp_path, capsys, monkeypatch):
    """``raycep local`` asks the engine for blocks and writes them as blocks (the lines are
    byte-identical either way, so only a count of ``MatchLines.block`` calls can tell)."""
    from raycep.gateway import cli

    path = tmp_path / "events.csv"
    _phased_csv(path, 12_000, 5000)
    query = tmp_path / "q.cep"
    query.write_text(f"NAME q\n{PHASED}\n")
    calls = []
    block = MatchLines.block

    def counting(self, b, gather=False):
        calls.append(len(b))
        return block(self, b, gather)

    monkeypatch.setattr(MatchLines, "block", counting)
    out = tmp_path / "m.jsonl"
    assert cli.main(["local", "--query", str(query), "--events", str(path),
                     "--out", str(out)]) == 0
    summary = summary_counts(capsys.readouterr().out)
    assert calls and sum(calls) <= summary["matches"]
    assert len(out.read_bytes().splitlines()) == summary["matches"]


def test_first_check_and_check_every_must_be_positive():
    from raycep.cep.errors import PlanningError
    for kwargs in ({"first_check": 0}, {"check_every": 0}, {"first_check": -3}):
        with pytest.raises(PlanningError, match="at least 1"):
            PlannedEngine(Engine(), **kwargs)


def test_a_block_as_fragments(monkeypatch):
    """``pieces(..., gather=True)``: a block's lines as Fragments of at most GATHER_LINES
    lines whose fragments join to the same bytes as the joined pieces."""
    monkeypatch.setattr(raycep.cep.io.output, "GATHER_LINES", 50)
    found = _blocks()[0]
    items = [found[0], *list(found[1])[:3], *found[1:]]       # blocks, and Match objects
    joined = MatchLines().pieces(items)
    gathered = MatchLines().pieces(items, gather=True)
    assert b"".join(joined) == b"".join(bytes(p) if isinstance(p, Fragments) else p
                                        for p in gathered)
    frags = [p for p in gathered if isinstance(p, Fragments)]
    assert len(frags) >= sum(-(-len(b) // 50) for b in items if isinstance(b, MatchBlock))
    for piece in frags:
        assert 0 < bytes(piece).count(b"\n") <= 50
        assert len(piece) > bytes(piece).count(b"\n")         # not joined: fragments
