"""Query groups evaluated in bulk (issue 35): a group's join runs once per chunk of triggers
over its loosest constants (cep.evaluation.bulk), its members are decided over columns
(cep.runtime.members) and their matches come out as one MatchBlock, and the matches of
several queries of one chunk as a MatchMix in the engine's order.

Random groups: 2-8 queries of one SEQ shape of 2-3 variables (or an OR of two sequences, each
conjunct of one branch) whose order comparisons and equalities with a text or a number differ
only in their constants (under ``*``, ``+``, ``-`` or alone), with equalities of two
variables' texts, and sometimes differing in their window, with a negation in the middle, at the
end (its bindings wait for the clock) or none,
under skip-till-any-match, a contiguity strategy or skip-till-next-match (each member
judging its own bindings), keyed or not, next to an unrelated query; streams with
ties and values that are not exact numbers (strings, missing attributes, large ints); fed as
column batches in random chunks. Every query's matches equal, in order, those of ``process``
event by event (sharing on), whose order is the per-trigger one (member by member, each in
enumeration order), and equal those with sharing off and the oracle's.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from unittest import mock

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import raycep.cep.runtime.engine
import raycep.cep.runtime.members
from raycep.cep.event import Event
from raycep.cep.lang.parser import parse_query
from raycep.cep.match import MatchBlock, MatchMix
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.batch import ColumnBatch

from oracle import oracle_matches

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
CONSTANTS = (0, 1, 2, 3, -1, 0.5, 1.25, 2.5)
FACTORS = (0.5, 1, 1.5, 2, 0.75)
ODD = ("p", None, 2 ** 60, True)
TEXTS = ("p", "q", "r", "s")
EQUALS = (0, 1, 2, 3, 2.5)
ODD_TEXT = (1, None, True, 2.5)


@st.composite
def groups(draw):
    """``(queries, order, keyed)``: ``queries`` [(name, text)], the members first."""
    n = draw(st.integers(2, 3), label="variables")
    names = "abc"[:n]
    types = draw(st.permutations("ABC"), label="types")[:n]
    either = draw(st.integers(0, 4), label="OR?") == 0     # OR(SEQ(a, b), SEQ(c, d))
    negation = not either and draw(st.integers(0, 2), label="negation?") == 0
    keyed = draw(st.booleans(), label="keyed")
    shapes = []
    for _ in range(draw(st.integers(1, 3), label="conjuncts")):
        i, j = draw(st.permutations(range(n)), label="pair")[:2]
        x, y = names[i], names[j]
        if either:                          # a conjunct of one branch or the other
            x, y = draw(st.sampled_from([("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")]),
                        label="pair of a branch")
        ax, ay = draw(st.sampled_from("xyz")), draw(st.sampled_from("xyz"))
        op = draw(st.sampled_from(("<", "<=", ">", ">=")))
        form = draw(st.sampled_from(("mul", "add", "sub", "const", "left", "text", "equal",
                                     "join")))
        if form == "join":                  # texts (or numbers) of two variables
            op = draw(st.sampled_from(("=", "!=")))
        shapes.append((x, ax, y, ay, op, form))
    strategy = draw(st.sampled_from(("", "", "", " STRATEGY strict_contiguity",
                                     " STRATEGY partition_contiguity",
                                     " STRATEGY skip_till_next_match")), label="strategy")
    windows = draw(st.booleans(), label="windows differ?") and not negation
    members = draw(st.integers(2, 8), label="members")
    order = tuple(draw(st.permutations(names), label="order"))
    pattern = ", ".join(f"{t} {v}" for t, v in zip(types, names))
    if either:
        order = tuple(draw(st.permutations("abcd"), label="order of both branches"))
        pattern = f"{types[0]} a, {types[1]} b), SEQ(C c, {types[1]} d"
    at_end = negation and draw(st.booleans(), label="negation at the end?")
    if at_end:                          # decided when the window closes (deferred)
        pattern += ", ~D n"
    elif negation:
        pattern = f"{types[0]} {names[0]}, ~D n, " + ", ".join(
            f"{t} {v}" for t, v in zip(types[1:], names[1:]))
    out = []
    for k in range(members):
        conds = ["[k]"] if keyed else []
        for x, ax, y, ay, op, form in shapes:
            c = draw(st.sampled_from(FACTORS if form == "mul" else TEXTS if form == "text"
                                     else EQUALS if form == "equal" else CONSTANTS),
                     label="constant")
            conds.append({"mul": f"{x}.{ax} {op} {y}.{ay} * {c}",
                          "add": f"{x}.{ax} + {c} {op} {y}.{ay}",
                          "sub": f"{x}.{ax} {op} {y}.{ay} - {c}",
                          "const": f"{x}.{ax} {op} {c}",
                          "left": f"{c} {op} {x}.{ax}",
                          "text": f"{x}.v = '{c}'",       # (constants differ: an equality
                          "equal": f"{c} = {x}.{ax}",     # index of the members)
                          "join": f"{x}.v {op} {y}.v"}[form])
        if negation:
            conds.append(f"n.x > {names[-1] if at_end else names[0]}.x")
        window = draw(st.sampled_from((2, 3, 5, 8))) if windows or not k else \
            int(out[0][1].rsplit("WITHIN ", 1)[1].split()[0])
        text = f"SEQ({pattern})" if not either else f"OR(SEQ({pattern}))"
        out.append((f"m{k}", f"PATTERN {text} WHERE {' AND '.join(conds)} "
                             f"WITHIN {window} seconds{strategy}"))
    out.append(("other", f"PATTERN SEQ(A p, B q) WHERE p.x < q.y WITHIN 2 seconds"))
    return out, order, keyed


def stream(seed: int, n: int, keyed: bool, ties: float, odd: float) -> list:
    rng = random.Random(seed)
    texts = random.Random(seed + 1)         # (the other attributes as before texts came)
    events, ts = [], 0.0
    for j in range(n):
        ts += 0 if rng.random() < ties else rng.choice([0.5, 1, 1, 1.5])
        attrs = {"x": rng.randint(0, 6), "y": rng.choice([0, 1, 2.5, 3, 4, 5.5]),
                 "z": rng.randint(-2, 4), "k": rng.randint(0, 2)}
        for a in "xyz":
            if rng.random() < odd:
                _put(attrs, a, rng.choice(ODD))
        attrs["v"] = texts.choice(TEXTS[:3])
        if texts.random() < odd:
            _put(attrs, "v", texts.choice(ODD_TEXT))
        events.append(Event(rng.choice("AABBCCD"), ts, attrs,
                            key=attrs["k"] if keyed else None, id=f"e{j:04d}"))
    return events


def _put(attrs: dict, name: str, value) -> None:
    """``attrs[name] = value``, or no attribute ``name`` for None."""
    if value is None:
        del attrs[name]
    else:
        attrs[name] = value


def engine(queries: list, order: tuple, keyed: bool, sharing: bool = True) -> Engine:
    eng = Engine(key_attr="k" if keyed else None, sharing=sharing)
    for name, text in queries:
        eng.add_query(text, name=name, order=order if name.startswith("m") else
                      ("q", "p") if name == "other" else None)
    return eng


def by_event(eng, events: list) -> list:
    out = [m for ev in events for m in eng.process(ev)]
    return out + eng.advance(math.inf)


def by_columns(eng, events: list, cuts: list, blocks: bool = False) -> list:
    out = []
    for a, b in zip(cuts, cuts[1:]):
        found = eng.process_columns(ColumnBatch.from_events(events[a:b]), blocks=blocks)
        for item in found:
            out.extend(item if item.__class__ in (MatchBlock, MatchMix) else (item,))
    return out + eng.advance(math.inf)


def same_in_bulk(queries: list, order: tuple, keyed: bool, events: list, cuts: list,
                 counted: tuple | None = None) -> list:
    """``events`` fed as column batches cut at ``cuts`` (every chunk in bulk; blocks off and
    on) give the matches of ``process`` event by event, in its order, and the same condition
    counters for the queries ``counted`` (None: all); returns those matches."""
    with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
        first = engine(queries, order, keyed)
        want = by_event(first, events)
        for blocks in (False, True):
            eng = engine(queries, order, keyed)
            got = by_columns(eng, events, cuts, blocks)
            assert [(m.query, m.key()) for m in got] == [(m.query, m.key()) for m in want]
            mine, theirs = eng.stats()["queries"], first.stats()["queries"]
            for name in counted or theirs:
                assert mine[name]["conjuncts"] == theirs[name]["conjuncts"], name
    return want


class Resolved:
    """Counts the bindings decided over columns (MemberColumns.resolve; ``patch()``)."""

    def __init__(self):
        self.bindings = 0

    def patch(self):
        resolve = raycep.cep.runtime.members.MemberColumns.resolve

        def counted(columns, get, first, last, bound):
            self.bindings += len(first)
            return resolve(columns, get, first, last, bound)
        return mock.patch.object(raycep.cep.runtime.members.MemberColumns, "resolve", counted)


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(case=groups(), seed=st.integers(0, 2 ** 16), n=st.integers(20, 120),
       ties=st.sampled_from([0, 0, 0.1]), odd=st.sampled_from([0, 0, 0.05, 0.2]),
       data=st.data())
def test_groups_in_bulk_equal_event_by_event_and_the_oracle(case, seed, n, ties, odd, data):
    queries, order, keyed = case
    events = stream(seed, n, keyed, ties, odd)
    cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=6), label="cuts")})
    note("\n".join(f"{name}: {text}" for name, text in queries) + f"\norder={order}")
    # every condition counted as event by event (what the planner reads)
    got = same_in_bulk(queries, order, keyed, events, cuts)
    alone = by_event(engine(queries, order, keyed, sharing=False), events)
    assert Counter((m.query, m.key()) for m in got) == \
        Counter((m.query, m.key()) for m in alone)
    for name, text in queries[:1]:
        assert {m.key() for m in got if m.query == name} == \
            oracle_matches(parse_query(text), events)


def test_differing_constants_are_decided_in_bulk():
    """Not vacuous: a group of constants and windows over a clean stream has its bindings
    decided over columns, and chunks with two queries' triggers come as a MatchMix."""
    queries = [(f"m{k}", f"PATTERN SEQ(A a, B b) WHERE [k] AND b.x > a.x * {c} AND "
                         f"b.y >= {k} WITHIN {w} seconds")
               for k, (c, w) in enumerate([(0.5, 2), (1, 3), (1.5, 5), (1, 2)])]
    queries.append(("other", "PATTERN SEQ(A p, B q) WHERE p.x < q.y WITHIN 2 seconds"))
    events = stream(3, 600, True, 0, 0)
    spy = Resolved()
    with spy.patch():
        eng = engine(queries, ("b", "a"), True)
        out = eng.process_columns(ColumnBatch.from_events(events), blocks=True)
    assert spy.bindings > 30
    mixes = [item for item in out if item.__class__ is MatchMix]
    assert mixes and {p.query for p in mixes[0].parts} >= {"other"}
    flat = [m for item in out for m in (item if item.__class__ in (MatchBlock, MatchMix)
                                        else (item,))] + eng.advance(math.inf)
    want = by_event(engine(queries, ("b", "a"), True), events)
    assert [(m.query, m.key()) for m in flat] == [(m.query, m.key()) for m in want]
    paths = eng.paths()
    assert all(paths[name]["bulk"] > 0 and paths[name]["why"] is None for name, _ in queries)
    stats = eng.stats()["queries"]
    assert all(stats[name]["matches"] > 0 for name, _ in queries)
    assert {name: stats[name]["matches"] for name, _ in queries} == \
        dict(Counter(m.query for m in want))


def test_int_and_float_constants_over_large_ints():
    """Python's arithmetic is exact on ints and rounds with a float, so truth is monotone in a
    constant only within its class: 2**60 + 1 <= 2**60 fails, 2**60 + 1.25 <= 2**60 holds
    (float(2**60) + 1.25 == 2**60). A group with the constants 0, 1 and 1.25 must not give the
    middle one the matches of its ends (found by the property above, seed 399)."""
    big = 2 ** 60
    queries = [(f"m{k}", f"PATTERN SEQ(A a, C b) WHERE a.y + {c} <= b.x WITHIN 8 seconds")
               for k, c in enumerate((1.25, 0, 1, 0.5))]
    events = [Event("A", 1, {"x": 1, "y": big}, id="a1"),
              Event("C", 2, {"x": big, "y": 0}, id="c1"),
              Event("A", 3, {"x": 1, "y": big - 1}, id="a2"),
              Event("C", 4, {"x": big + 1, "y": 0}, id="c2")]
    alone = by_event(engine(queries, ("a", "b"), False, sharing=False), events)
    want = sorted((m.query, m.key()) for m in alone)
    for order in (("a", "b"), ("b", "a")):
        got = by_event(engine(queries, order, False), events)
        assert sorted((m.query, m.key()) for m in got) == want
        with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
            cols = by_columns(engine(queries, order, False), events, [0, 4], True)
        assert sorted((m.query, m.key()) for m in cols) == want
    for name, text in queries:
        assert {m.key() for m in alone if m.query == name} == \
            oracle_matches(parse_query(text), events)
    first = frozenset({("a", "a1"), ("b", "c1")})
    assert {q for q, key in want if key == first} == {"m0", "m1", "m3"}


def test_a_trigger_of_two_branches_is_taken_with_its_chunk():
    """An OR whose branches share a trigger type (B ends both) evaluates each branch in bulk;
    the chunk's matches of both branches and of a second query are taken at once, no
    trigger processed on its own, in the order of event-by-event processing (branch by
    branch within a trigger)."""
    queries = [(f"m{k}", f"PATTERN OR(SEQ(A a, B b), SEQ(C c, B d)) WHERE [k] AND "
                         f"b.x > a.x * {f} AND d.y > c.y + {k} WITHIN 3 seconds")
               for k, f in enumerate((0.5, 1, 1.5))]
    queries.append(("other", "PATTERN SEQ(A p, B q) WHERE p.x < q.y WITHIN 2 seconds"))
    events = stream(5, 600, True, 0, 0)
    order = ("a", "b", "c", "d")
    eng = engine(queries, order, True)
    with mock.patch.object(Engine, "process", side_effect=AssertionError("one by one")):
        out = eng.process_columns(ColumnBatch.from_events(events), blocks=True)
    flat = [m for item in out for m in (item if item.__class__ in (MatchBlock, MatchMix)
                                        else (item,))] + eng.advance(math.inf)
    want = by_event(engine(queries, order, True), events)
    assert len({m.query for m in want}) == 4
    assert {frozenset(v for v, _ in m.key()) for m in want if m.query == "m0"} == \
        {frozenset("ab"), frozenset("cd")}    # both branches match
    assert [(m.query, m.key()) for m in flat] == [(m.query, m.key()) for m in want]


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(case=groups(), seed=st.integers(0, 2 ** 16), n=st.integers(20, 120),
       ties=st.sampled_from([0, 0, 0.1]), data=st.data())
def test_queries_one_by_one_beside_groups_in_bulk_keep_the_order_of_each_trigger(
        case, seed, n, ties, data):
    """A chunk where some queries evaluate every trigger in bulk and others (a Kleene
    variable: one by one) share trigger types: the first are taken for the chunk at once,
    the others process their triggers, and the matches come in ``process``'s order (trigger
    by trigger, its queries in registration order), whatever that order is; a query with a
    negation at the end releases its matches at the first row after their deadlines, rows
    between triggers included."""
    queries, order, keyed = case
    key = "[k] AND " if keyed else ""
    # (a type no such query takes: its triggers are all taken in bulk, indexed ahead)
    kinds = sorted(data.draw(st.sets(st.sampled_from("ABC")), label="one by one on"))
    kleene = [(f"k{t}", f"PATTERN SEQ(D+ d[], {t} t) WHERE {key}t.x >= d[1].x "
                        f"WITHIN 3 seconds") for t in kinds]
    # a negation at the end: its matches wait for the clock (released between the triggers)
    # (over D: no query is triggered by D, its rows are indexed ahead of the triggers)
    kleene.append(("late", f"PATTERN SEQ(A p, B q, ~D n) WHERE {key}q.x >= p.x AND "
                           f"n.y > q.y WITHIN {data.draw(st.sampled_from((1, 2, 4)))} seconds"))
    for q in kleene:
        queries.insert(data.draw(st.integers(0, len(queries)), label="registered at"), q)
    events = stream(seed, n, keyed, ties, 0)
    cuts = sorted({0, n, *data.draw(st.lists(st.integers(0, n), max_size=4), label="cuts")})
    note("\n".join(f"{name}: {text}" for name, text in queries) + f"\norder={order}")
    # the negation at the end read what it reads event by event: no row ahead
    same_in_bulk(queries, order, keyed, events, cuts, counted=("late",))


def test_a_query_one_by_one_registered_before_a_group_in_bulk_comes_before_it():
    """Not vacuous: on a trigger both match, the Kleene query (registered first, one by one)
    comes before the group (registered after, in bulk), as event by event."""
    queries = [("early", "PATTERN SEQ(D+ d[], B t) WHERE [k] AND t.x >= d[1].x "
                         "WITHIN 3 seconds")]
    queries += [(f"m{k}", f"PATTERN SEQ(A a, B b) WHERE [k] AND b.x > a.x * {c} "
                          f"WITHIN 3 seconds") for k, c in enumerate((0.5, 1))]
    events = stream(11, 400, True, 0, 0)
    spy = Resolved()
    with spy.patch():
        eng = engine(queries, ("b", "a"), True)
        got = [m for item in eng.process_columns(ColumnBatch.from_events(events), blocks=True)
               for m in (item if item.__class__ in (MatchBlock, MatchMix) else (item,))]
    assert spy.bindings > 10                        # the group went through bulk
    want = by_event(engine(queries, ("b", "a"), True), events)
    assert [(m.query, m.key()) for m in got + eng.advance(math.inf)] == \
        [(m.query, m.key()) for m in want]
    ends = {}                                       # per B: the queries it ends a match of
    for m in want:
        ends.setdefault(dict(m.key())["t" if m.query == "early" else "b"], []).append(m.query)
    assert any(qs[0] == "early" and len(set(qs)) > 1 for qs in ends.values())


def test_skip_till_next_match_variants_are_decided_in_bulk():
    """Not vacuous: a group of skip-till-next-match variants joins in bulk and each member
    judges its own (binding, member) pairs: no trigger one by one, the matches and every
    member's condition counters those of event-by-event processing."""
    queries = [(f"m{k}", f"PATTERN SEQ(A a, B b) WHERE [k] AND b.x > a.x * {f} "
                         f"WITHIN 4 seconds STRATEGY skip_till_next_match")
               for k, f in enumerate((0.5, 1, 1.5))]
    events = stream(7, 600, True, 0, 0)
    eng = engine(queries, ("b", "a"), True)
    with mock.patch.object(Engine, "process", side_effect=AssertionError("one by one")):
        out = eng.process_columns(ColumnBatch.from_events(events), blocks=True)
    got = [m for item in out for m in (item if item.__class__ in (MatchBlock, MatchMix)
                                       else (item,))] + eng.advance(math.inf)
    first = engine(queries, ("b", "a"), True)
    want = by_event(first, events)
    assert len(want) > 20
    assert [(m.query, m.key()) for m in got] == [(m.query, m.key()) for m in want]
    paths = eng.paths()
    assert all(paths[name]["bulk"] > 0 and paths[name]["why"] is None for name, _ in queries)
    for name, _ in queries:
        assert eng.stats()["queries"][name]["conjuncts"] == \
            first.stats()["queries"][name]["conjuncts"]


def test_contiguity_is_decided_over_columns():
    """Contiguity decided over columns: a binding with a row of the query's types strictly
    inside breaks, one with a row of another type inside does not, as event by event.
    (A chunk with two rows at one time is processed row by row: no tie reaches the
    columns.)"""
    for strategy in ("strict_contiguity", "partition_contiguity"):
        keyed = strategy == "partition_contiguity"
        queries = [(f"m{k}", f"PATTERN SEQ(A a, B b) WHERE {'[k] AND ' if keyed else ''}"
                             f"b.x >= a.x * {f} WITHIN 5 seconds STRATEGY {strategy}")
                   for k, f in enumerate((0, 0.5))]
        rows = [("A", 1, 1, "e1"), ("B", 1.5, 0, "e2"), ("B", 2, 1, "e3"), ("A", 3, 1, "e4"),
                ("D", 4, 1, "e5"), ("B", 5, 2, "e6"), ("A", 6, 1, "e7"), ("C", 6.5, 1, "e8"),
                ("A", 6.7, 1, "e9"), ("B", 7, 2, "e10"), ("A", 7.5, 1, "e11"),
                ("B", 8, 5, "e12")]
        events = [Event(t, ts, {"x": x, "k": 0}, key=0 if keyed else None, id=i)
                  for t, ts, x, i in rows]
        want = by_event(engine(queries, ("b", "a"), keyed), events)
        eng = engine(queries, ("b", "a"), keyed)
        with mock.patch.object(raycep.cep.runtime.engine, "BULK_TRIGGERS", 1):
            got = by_columns(eng, events, [0, len(events)])
        assert eng.paths()["m0"]["bulk"] > 0
        assert [(m.query, m.key()) for m in got] == [(m.query, m.key()) for m in want]
        found = {frozenset(i for _, i in m.key()) for m in want}
        assert frozenset({"e1", "e3"}) not in found     # e2 (a B) is between
        assert frozenset({"e4", "e6"}) in found         # a D between: not the query's
        assert frozenset({"e9", "e10"}) in found


def test_a_negation_at_the_end_is_joined_in_bulk_and_waits_for_the_clock():
    """Not vacuous: a group whose negation ends the pattern joins its triggers in bulk (the
    bindings then wait for their deadline, released at the first row after it), with the
    matches, their order and the condition counters of event-by-event processing."""
    queries = [(f"m{k}", f"PATTERN SEQ(A a, B b, ~C n) WHERE [k] AND b.x > a.x * {f} AND "
                         f"n.y > b.y WITHIN 3 seconds") for k, f in enumerate((0.5, 1, 1.5))]
    events = stream(13, 600, True, 0, 0)
    first = engine(queries, ("b", "a"), True)
    want = by_event(first, events)
    eng = engine(queries, ("b", "a"), True)
    got = by_columns(eng, events, [0, 300, 600], True)
    assert len(want) > 20
    assert [(m.query, m.key()) for m in got] == [(m.query, m.key()) for m in want]
    paths = eng.paths()
    assert all(paths[name]["bulk"] > 0 and paths[name]["why"] is None for name, _ in queries)
    assert {name: q["conjuncts"] for name, q in eng.stats()["queries"].items()} == \
        {name: q["conjuncts"] for name, q in first.stats()["queries"].items()}


def test_text_constants_and_joins_of_texts_are_decided_in_bulk():
    """Not vacuous: a group whose members differ in a text constant and a number equality
    (``a.v = 'p'``, ``b.z = 2``: each member's an entry of an equality index), joined on two
    variables' texts (``b.v = a.v``), has every trigger evaluated in bulk and its bindings
    decided over columns, with the matches, their order and the condition counters of
    event-by-event processing, and the oracle's."""
    members = [("p", 1), ("q", 2), ("p", 2), ("r", 0), ("q", 1)]
    queries = [(f"m{k}", f"PATTERN SEQ(A a, B b) WHERE [k] AND a.v = '{t}' AND b.v = a.v "
                         f"AND b.z = {z} WITHIN 8 seconds") for k, (t, z) in enumerate(members)]
    queries.append(("neq", "PATTERN SEQ(A a, C c) WHERE a.v != c.v AND c.x > a.x "
                           "WITHIN 3 seconds"))
    events = stream(17, 1500, True, 0, 0)
    spy = Resolved()

    def engine():
        eng = Engine(key_attr="k")
        for name, text in queries:
            eng.add_query(text, name=name, order=("c", "a") if name == "neq" else ("b", "a"))
        return eng
    first = engine()
    want = by_event(first, events)
    eng = engine()
    with spy.patch(), mock.patch.object(Engine, "process",
                                        side_effect=AssertionError("one by one")):
        out = eng.process_columns(ColumnBatch.from_events(events), blocks=True)
    got = [m for item in out for m in (item if item.__class__ in (MatchBlock, MatchMix)
                                       else (item,))] + eng.advance(math.inf)
    assert spy.bindings >= 10
    assert [(m.query, m.key()) for m in got] == [(m.query, m.key()) for m in want]
    paths = eng.paths()
    assert all(paths[name]["bulk"] > 0 and paths[name]["why"] is None for name, _ in queries)
    assert {name: q["conjuncts"] for name, q in eng.stats()["queries"].items()} == \
        {name: q["conjuncts"] for name, q in first.stats()["queries"].items()}
    found = 0
    for name, text in queries:
        mine = {m.key() for m in want if m.query == name}
        assert mine == oracle_matches(parse_query(text), events), name
        found += bool(mine)
    assert found >= 4
