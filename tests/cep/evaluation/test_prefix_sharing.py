"""Shared sub-patterns (cep/evaluation/prefixes.py, issue 15): queries of different structure whose
plans begin with the same steps share the evaluation of those steps, and never change a result.

Random *prefix sets*: a core pattern (2-3 variables, conditions among them) and 2-5 queries
that extend it in different ways (an extra variable anywhere in the pattern with its own
conditions, an extra condition, a negation, a Kleene variable), one strategy and window for
most of them, forced orders that put the core first (so their plans begin alike) or ad hoc
orders, keyed (``[k]``, evaluated per partition) or not, some queries added or removed mid-stream, checkpoint/restore, events fed in chunks.
Every query's matches with sharing on equal those with sharing off and, for queries present
throughout, the oracle. ``WORTH`` is set to 0 (share whatever is asked for twice), ``LIMIT``
and ``KEEP`` sometimes tiny (the unshared fallback and the clearing of kept prefixes run).
"""
from __future__ import annotations

import math
from collections import Counter
from unittest import mock

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import raycep.cep.evaluation.prefixes
from raycep.cep.event import Event
from raycep.cep.lang.parser import parse_query
from raycep.cep.runtime.engine import Engine

from oracle import oracle_matches
from strategies import events_text, streams

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
CORE = (("a", "A"), ("b", "B"), ("c", "C"))
CORE_CONDS = ("a.x < b.x", "b.x >= c.x", "a.x + b.x > 3", "c.y = a.y", "b.x < 4", "a.s = 'p'",
              "c.x != b.x", "a.x * 2 > c.x")
EXT_CONDS = ("e.x < a.x", "e.x > 1", "e.y = b.y", "e.x + c.x < 6", "e.s = c.s", "e.x <= b.x")
STRATEGIES = ("skip_till_any_match",) * 4 + ("skip_till_next_match", "strict_contiguity",
                                              "partition_contiguity")


def _usable(cond: str, names: set) -> bool:
    return all(f"{v}." not in cond or v in names for v in "abce")


@st.composite
def prefix_sets(draw):
    core = [v for v in CORE if draw(st.booleans())] or list(CORE[:2])
    if len(core) == 1:
        core.append(next(v for v in CORE if v not in core))
    core = draw(st.permutations(core))
    names = {n for n, _ in core}
    seq = draw(st.integers(0, 3)) > 0
    conds = draw(st.lists(st.sampled_from([c for c in CORE_CONDS if _usable(c, names)]),
                          min_size=1, max_size=3, unique=True))
    strategy = draw(st.sampled_from(STRATEGIES))
    window = draw(st.sampled_from((2, 3, 5, 8)))
    keyed = draw(st.booleans())
    texts = []
    for k in range(draw(st.integers(2, 5))):
        leaves = [f"{t} {n}" for n, t in core]
        where = ["[k]"] * keyed + list(conds)
        kind = draw(st.sampled_from(("var", "var", "var", "cond", "neg", "kleene", "same")))
        if kind in ("var", "kleene"):
            etype = draw(st.sampled_from("ABCD"))
            leaf = f"{etype}+ e[]" if kind == "kleene" else f"{etype} e"
            at = draw(st.integers(0, len(leaves) - 1)) if seq and draw(st.integers(0, 3)) \
                else draw(st.integers(0, len(leaves)))     # mostly not a SEQ's last (trigger)
            leaves.insert(at, leaf)
            if kind == "var":
                where += draw(st.lists(st.sampled_from(
                    [c for c in EXT_CONDS if _usable(c, names | {"e"})]), max_size=2,
                    unique=True))
        elif kind == "neg" and seq:
            leaves.insert(draw(st.integers(1, len(leaves) - 1)), "~D n")
        elif kind == "cond":
            where.append(draw(st.sampled_from([c for c in CORE_CONDS if _usable(c, names)])))
        own = draw(st.sampled_from(STRATEGIES)) if draw(st.integers(0, 4)) == 0 else strategy
        within = draw(st.sampled_from((2, 3, 5, 8))) if draw(st.integers(0, 4)) == 0 \
            else window
        pattern = f"{'SEQ' if seq else 'AND'}({', '.join(leaves)})"
        texts.append(f"PATTERN {pattern} WHERE {' AND '.join(dict.fromkeys(where))} "
                     f"WITHIN {within} seconds STRATEGY {own}")
    forced = draw(st.integers(0, 2)) > 0
    queries = []
    for k, text in enumerate(texts):
        query = parse_query(text)
        order = None
        if forced:
            core_names = [n for n, _ in core]
            extra = [n for n in ("e",) if f" {n}" in text.split("WHERE")[0]]
            order = tuple(core_names + extra)
        queries.append((f"q{k}", query, order))
        note(f"q{k} order={order}: {text}")
    events = draw(streams(min_events=12, max_events=35, limit_types=("A", "B", "C", "D"),
                          window=8.0, keyed=keyed), label="events")
    n = len(events)
    added = {name: (draw(st.integers(1, n)) if k and draw(st.integers(0, 3)) == 0 else 0)
             for k, (name, _, _) in enumerate(queries)}
    removed = {name: (draw(st.integers(added[name] + 1, n))
                      if k and added[name] < n and draw(st.integers(0, 3)) == 0 else None)
               for k, (name, _, _) in enumerate(queries)}
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=4))))
    restore_at = draw(st.one_of(st.none(), st.integers(0, n)))
    prefixes = raycep.cep.evaluation.prefixes
    limits = draw(st.sampled_from(((prefixes.LIMIT, prefixes.KEEP), (2, 4), (50, 3))))
    return dict(queries=queries, events=events, keyed=keyed, added=added, removed=removed, cuts=cuts,
                restore_at=restore_at, limits=limits)


def run(case, sharing: bool) -> tuple:
    """(name -> Counter of match keys, the prefix statistics)."""
    eng = Engine(key_attr="k" if case["keyed"] else None, sharing=sharing)
    out: dict = {}
    n = len(case["events"])
    marks = sorted({0, n, *case["cuts"], *case["added"].values(),
                    *(r for r in case["removed"].values() if r is not None),
                    *([case["restore_at"]] if case["restore_at"] is not None else [])})
    for a, b in zip(marks, marks[1:] + [None]):
        for name, _, _ in case["queries"]:
            if case["removed"][name] == a:
                eng.remove_query(name)
        for name, query, order in case["queries"]:
            if case["added"][name] == a:
                eng.add_query(query, name=name, order=order)
        if a == case["restore_at"]:
            eng = Engine.restore(eng.snapshot())
        if b is not None:
            for m in eng.process_many(case["events"][a:b]):
                out.setdefault(m.query, Counter())[m.key()] += 1
    for m in eng.advance(math.inf):
        out.setdefault(m.query, Counter())[m.key()] += 1
    return out, eng.stats()["prefixes"]


@settings(max_examples=500, deadline=None, suppress_health_check=SLOW)
@given(case=prefix_sets())
def test_shared_prefixes_never_change_a_querys_matches(case):
    note(events_text(case["events"]))
    limit, keep = case["limits"]
    with mock.patch.object(raycep.cep.evaluation.prefixes, "WORTH", 0), \
            mock.patch.object(raycep.cep.evaluation.prefixes, "LIMIT", limit), \
            mock.patch.object(raycep.cep.evaluation.prefixes, "KEEP", keep):
        shared, stats = run(case, True)
    alone, _ = run(case, False)
    note(f"prefix statistics: {stats}")
    event(f"prefixes reused: {'yes' if stats['reused'] else 'no'}")
    for name, query, _ in case["queries"]:
        assert shared.get(name, Counter()) == alone.get(name, Counter()), name
        if case["added"][name] == 0 and case["removed"][name] is None:
            want = oracle_matches(query, case["events"])
            assert set(shared.get(name, Counter())) == want, name


def ev(etype, ts, eid, **attrs):
    return Event(etype, float(ts), attrs, id=eid)


SHARED = ["PATTERN SEQ(A a, B b, C c) WHERE a.x < b.x AND b.x > c.x WITHIN 10 seconds",
          "PATTERN SEQ(D d, A a, B b, C c) WHERE a.x < b.x AND b.x > c.x AND d.x = a.x "
          "WITHIN 10 seconds",
          "PATTERN SEQ(A a, D d, B b, C c) WHERE a.x < b.x AND b.x > c.x AND d.x > 2 "
          "WITHIN 10 seconds"]


def stream(n: int = 60) -> list:
    return [ev("ABCD"[(i * 7) % 4], i * 0.5, f"e{i}", x=(i * 5) % 7) for i in range(n)]


def test_queries_beginning_alike_share_the_prefix_and_report_it():
    """Forced orders c, b, a, (d): the (c, b, a) prefix... is the whole of the first query,
    so the two extensions share (c, b, a) and the first shares (c, b) with them."""
    orders = [("c", "b", "a"), ("c", "b", "a", "d"), ("c", "b", "a", "d")]
    events = stream()
    with mock.patch.object(raycep.cep.evaluation.prefixes, "WORTH", 0):
        eng = Engine()
        for k, (text, order) in enumerate(zip(SHARED, orders)):
            eng.add_query(text, name=f"q{k}", order=order)
        got = Counter(m.query for m in eng.process_many(events) + eng.advance(math.inf))
        stats = eng.stats()["prefixes"]
    assert stats["shared_prefixes"] >= 1 and stats["reused"] > 0 and stats["materialised"] > 0
    for k, text in enumerate(SHARED):
        want = oracle_matches(parse_query(text), events)
        assert got[f"q{k}"] == len(want) > 0


def test_no_prefix_is_shared_without_sharing_or_with_one_query():
    events = stream()
    for sharing, texts in ((False, SHARED), (True, SHARED[:1])):
        eng = Engine(sharing=sharing)
        for k, text in enumerate(texts):
            eng.add_query(text, name=f"q{k}", order=("c", "b", "a", "d")[:3 + (k > 0)])
        eng.process_many(events)
        assert eng.stats()["prefixes"]["reused"] == 0


def test_a_cheap_prefix_stops_being_shared():
    """With the default WORTH, (c, b) found by one range lookup and one filter per binding is
    judged cheaper to evaluate again than to share: after LEARN materialisations it is not
    shared any more, and matches are unchanged."""
    texts = ["PATTERN SEQ(A a, B b, C c) WHERE b.x > c.x WITHIN 10 seconds",
             "PATTERN SEQ(D d, B b, C c) WHERE b.x > c.x WITHIN 10 seconds"]
    events = stream(400)
    eng = Engine()
    for k, text in enumerate(texts):
        eng.add_query(text, name=f"q{k}", order=("c", "b", "a" if k == 0 else "d"))
    got = Counter(m.query for m in eng.process_many(events) + eng.advance(math.inf))
    stats = eng.stats()["prefixes"]
    assert stats["shared_prefixes"] == 0
    assert stats["materialised"] == raycep.cep.evaluation.prefixes.LEARN
    for k, text in enumerate(texts):
        assert got[f"q{k}"] == len(oracle_matches(parse_query(text), events))
