"""Hand-worked examples for the brute-force oracle (tests/oracle.py), and a cross-check of its
two independent skip_till_any_match evaluators (enumeration vs NFA^b) on random inputs."""
from __future__ import annotations

import dataclasses

from hypothesis import given, note, settings, HealthCheck

from raycep.cep.event import Event
from raycep.cep.lang import ast as A
from raycep.cep.match import match_key

from oracle import enumerate_matches, nfa_matches, oracle_matches
from strategies import kleene_under_and, events_text, query_and_stream, query_text

ANY, NEXT, PART, STRICT = A.STRATEGIES


# --------------------------------------------------------------------------- helpers

def ev(name: str, ts=None, **attrs) -> Event:
    """``ev("A1")`` is an event of type A at ts 1 with id "A1"; ids order ties."""
    etype = name.rstrip("0123456789")
    return Event(etype, float(ts if ts is not None else int(name[len(etype):])), attrs, id=name)


def V(t, name, kleene=False, negated=False):
    return A.EventVar(t, name, kleene, negated)


def at(var, attr, base=None, offset=0):
    return A.Attr(var, attr, None if base is None else A.KIndex(base, offset))


def cmp(op, left, right):
    right = right if not isinstance(right, (int, float, str)) else A.Literal(right)
    return A.Compare(op, left, right)


def q(pattern, *conjs, within=10, equiv=(), strategy=ANY):
    where = None if not conjs else conjs[0] if len(conjs) == 1 else A.BoolAnd(tuple(conjs))
    return A.Query(pattern, where, tuple(equiv), A.Duration(A.Literal(within), 1.0),
                   strategy=strategy)


def m(**bind) -> frozenset:
    """A match key from var=Event or var=[Event, ...]."""
    return match_key({k: (tuple(v) if isinstance(v, list) else v) for k, v in bind.items()})


def run(query, events, strategy=None, params=None) -> set:
    if strategy is not None:
        query = dataclasses.replace(query, strategy=strategy)
    return oracle_matches(query, events, params)


def both_any(query, events, params=None) -> set:
    """skip_till_any_match by enumeration, asserting the NFA^b gives the same."""
    got = enumerate_matches(query, events, params)
    assert nfa_matches(query, events, params, ANY) == got
    return got


# --------------------------------------------------------------------------- SEQ, window

def test_seq_with_predicates():
    A1, B2, C3, A4, C5 = ev("A1", x=1), ev("B2", x=3), ev("C3", x=2), ev("A4", x=5), ev("C5", x=0)
    query = q(A.Seq((V("A", "a"), V("B", "b"), V("C", "c"))),
              cmp("<", at("a", "x"), at("b", "x")), cmp(">", at("b", "x"), at("c", "x")))
    events = [A1, B2, C3, A4, C5]
    assert both_any(query, events) == {m(a=A1, b=B2, c=C3), m(a=A1, b=B2, c=C5)}
    assert both_any(dataclasses.replace(query, within=A.Duration(A.Literal(3))), events) == \
        {m(a=A1, b=B2, c=C3)}


def test_limecep_example_window():
    A1, A2, B3, C4, A5, B6, C7 = (ev(n) for n in ("A1", "A2", "B3", "C4", "A5", "B6", "C7"))
    query = q(A.Seq((V("A", "a"), V("B", "b"), V("C", "c"))), within=3)
    events = [A1, A2, B3, C4, A5, B6, C7]
    assert both_any(query, events) == {m(a=A1, b=B3, c=C4), m(a=A2, b=B3, c=C4),
                                       m(a=A5, b=B6, c=C7)}


def test_window_param_and_unit():
    A1, B3 = ev("A1"), ev("B3")
    pattern = A.Seq((V("A", "a"), V("B", "b")))
    query = A.Query(pattern, within=A.Duration(A.Param("W"), 60.0))
    assert oracle_matches(query, [A1, B3], {"W": 1 / 60}) == set()
    assert oracle_matches(query, [A1, B3], {"W": 0.05}) == {m(a=A1, b=B3)}


def test_ties_are_ordered_by_id():
    a, b = Event("A", 5.0, {}, id="2"), Event("B", 5.0, {}, id="1")
    query = q(A.Seq((V("A", "a"), V("B", "b"))))
    assert both_any(query, [b, a]) == set()              # B(5,"1") is before A(5,"2")
    assert both_any(q(A.Seq((V("B", "b"), V("A", "a")))), [b, a]) == {m(a=a, b=b)}


# --------------------------------------------------------------------------- Kleene

def test_kleene_increasing():
    A1, B2, B3, B4, C5 = ev("A1"), ev("B2", x=1), ev("B3", x=3), ev("B4", x=2), ev("C5")
    query = q(A.Seq((V("A", "a"), V("B", "b", kleene=True), V("C", "c"))),
              cmp(">", at("b", "x", "i"), at("b", "x", "i", -1)))
    events = [A1, B2, B3, B4, C5]
    assert both_any(query, events) == {m(a=A1, b=bs, c=C5) for bs in
                                       ([B2], [B3], [B4], [B2, B3], [B2, B4])}
    # skip-till-next: b must start at B2 and must take B3; B4 is ignored (2 < 3)
    assert run(query, events, NEXT) == {m(a=A1, b=[B2], c=C5), m(a=A1, b=[B2, B3], c=C5)}
    # strict: B4 breaks every run (cannot be taken, cannot be ignored)
    assert run(query, events, STRICT) == set()
    assert run(query, [A1, B2, B3, C5], STRICT) == {m(a=A1, b=[B2, B3], c=C5)}
    assert run(query, [A1, B2, B3, C5], PART) == {m(a=A1, b=[B2, B3], c=C5)}


def test_kleene_aggregates_and_indices():
    B1, B2, B3, B4 = ev("B1", x=4), ev("B2", x=1), ev("B3", x=3), ev("B4", x=6)
    b = V("B", "b", kleene=True)
    events = [B1, B2, B3, B4]

    def subsets(*conjs):
        return both_any(q(A.Seq((b,)), *conjs), events)

    def key(*es):
        return m(b=list(es))

    # b[i].x > avg(b[..i-1].x): checked for i = 2..LEN
    got = subsets(cmp(">", at("b", "x"), A.Aggregate("avg", "b", "x", A.KIndex("i", -1))))
    assert key(B1, B4) in got and key(B2, B3, B4) in got and key(B1, B2) not in got
    assert key(B1, B3, B4) not in got                     # 3 > 4 fails
    # NEXT(b.x) > b.x, i.e. b[i+1].x > b[i].x for i = 1..LEN-1: increasing sequences
    nxt = subsets(cmp(">", at("b", "x", "i", 1), at("b", "x")))
    assert nxt == subsets(cmp(">", at("b", "x", "i"), at("b", "x", "i", -1)))
    # FIRST/LAST, LEN, count, sum
    assert subsets(cmp("<", at("b", "x", "first"), at("b", "x", "last"))) == \
        {key(B1, B4), key(B2, B3), key(B2, B4), key(B3, B4), key(B1, B2, B4), key(B1, B3, B4),
         key(B2, B3, B4), key(B1, B2, B3, B4)}
    assert subsets(cmp("=", A.Len("b"), 3)) == \
        {key(B1, B2, B3), key(B1, B2, B4), key(B1, B3, B4), key(B2, B3, B4)}
    assert subsets(cmp(">=", A.Aggregate("count", "b", None), 4)) == {key(B1, B2, B3, B4)}
    assert subsets(cmp("=", A.Aggregate("sum", "b", "x"), 10)) == {key(B1, B4), key(B2, B3, B4)}
    # a bare b.x is b[i].x: every element
    assert subsets(cmp(">", at("b", "x"), 2)) == {key(B1), key(B3), key(B4), key(B1, B3),
                                                 key(B1, B4), key(B3, B4), key(B1, B3, B4)}


def test_kleene_skip_till_next_differs_from_any():
    A1, A2, A3, B4 = ev("A1", x=1), ev("A2", x=3), ev("A3", x=2), ev("B4")
    query = q(A.Seq((V("A", "a", kleene=True), V("B", "b"))),
              cmp(">", at("a", "x", "i"), at("a", "x", "i", -1)))
    events = [A1, A2, A3, B4]
    assert both_any(query, events) == {m(a=s, b=B4) for s in
                                       ([A1], [A2], [A3], [A1, A2], [A1, A3])}
    # under skip-till-next the run that holds [A1] must take A2 (no [A1, A3]); [A1] alone
    # still matches: the proceed edge may be taken right after A1
    assert run(query, events, NEXT) == {m(a=s, b=B4) for s in ([A1], [A2], [A3], [A1, A2])}


def test_skip_till_next_ignore_proceed_nondeterminism():
    A1, B2, A3, B4 = ev("A1", x=1), ev("B2"), ev("A3", x=2), ev("B4")
    query = q(A.Seq((V("A", "a", kleene=True), V("B", "b"))),
              cmp(">", at("a", "x", "i"), at("a", "x", "i", -1)), strategy=NEXT)
    # the run at a[i] holding [A1] may ignore B2 (it fails the take condition) and proceed
    # afterwards, so [A1] also pairs with B4
    assert oracle_matches(query, [A1, B2, A3, B4]) == {
        m(a=[A1], b=B2), m(a=[A1, A3], b=B4), m(a=[A1], b=B4), m(a=[A3], b=B4)}
    # strict contiguity: a proceed has to happen right before the B is read
    assert run(query, [A1, B2, A3, B4], STRICT) == {m(a=[A1], b=B2), m(a=[A3], b=B4)}


# --------------------------------------------------------------------------- negation

def test_negation_in_the_middle():
    A1, C2, B3, A4, C5 = ev("A1", x=1), ev("C2"), ev("B3", x=2), ev("A4"), ev("C5")
    pattern = A.Seq((V("A", "a"), V("B", "n", negated=True), V("C", "c")))
    events = [A1, C2, B3, A4, C5]
    assert both_any(q(pattern), events) == {m(a=A1, c=C2), m(a=A4, c=C5)}
    # only a B with the same x as a counts
    assert both_any(q(pattern, cmp("=", at("n", "x"), at("a", "x"))), events) == \
        {m(a=A1, c=C2), m(a=A4, c=C5), m(a=A1, c=C5)}


def test_leading_negation_limecep():
    S1, R3, S4, S5 = ev("STEPS1"), ev("ROOM3"), ev("STEPS4"), ev("STEPS5")
    pattern = A.Seq((V("ROOM", "a", negated=True), V("STEPS", "b", kleene=True)))
    events = [S1, R3, S4, S5]
    assert both_any(q(pattern, within=5), events) == \
        {m(b=[S1]), m(b=[S1, S4]), m(b=[S1, S5]), m(b=[S1, S4, S5])}
    # the witness must fit into the window together with the match
    assert both_any(q(pattern, within=1), events) == {m(b=[S1]), m(b=[S5]), m(b=[S4, S5])}


def test_trailing_negation_judged_on_whole_stream():
    A1, B2, C4, A5, B6, C11 = ev("A1", x=0), ev("B2"), ev("C4", x=0), ev("A5"), ev("B6"), \
        ev("C11")
    pattern = A.Seq((V("A", "a"), V("B", "b"), V("C", "n", negated=True)))
    events = [A1, B2, C4, A5, B6, C11]
    assert both_any(q(pattern, within=4), events) == {m(a=A5, b=B6)}
    assert both_any(q(pattern, cmp(">", at("n", "x"), at("a", "x")), within=4), events) == \
        {m(a=A1, b=B2), m(a=A5, b=B6)}


def test_negation_inside_and_and_equivalence_on_witness():
    A1, B2, C3, B4 = ev("A1", k=1), ev("B2", k=1), ev("C3", k=2), ev("B4", k=2)
    pattern = A.And((V("A", "a"), V("B", "b"), V("C", "n", negated=True)))
    events = [A1, B2, C3, B4]
    # without [k]: C3 is within the window of every match
    assert both_any(q(pattern, within=3), events) == set()
    # with [k]: C3 (k=2) is no witness for a k=1 match; A1/B4 differ in k
    assert both_any(q(pattern, within=3, equiv=("k",)), events) == {m(a=A1, b=B2)}


# --------------------------------------------------------------------------- AND / OR

def test_and_any_order():
    A1, B2, A3, B6 = ev("A1"), ev("B2"), ev("A3"), ev("B6")
    query = q(A.And((V("A", "a"), V("B", "b"))), within=2)
    assert both_any(query, [A1, B2, A3, B6]) == {m(a=A1, b=B2), m(a=A3, b=B2)}


def test_and_interleaves_under_any_match():
    B1, A2, B3 = ev("B1", x=1), ev("A2"), ev("B3", x=2)
    query = q(A.And((V("A", "a"), V("B", "b", kleene=True))))
    got = enumerate_matches(query, [B1, A2, B3])
    assert m(a=A2, b=[B1, B3]) in got                      # a inside the iteration
    assert len(got) == 3
    # a Kleene variable is one block of a linear extension in the NFA^b
    assert m(a=A2, b=[B1, B3]) not in nfa_matches(query, [B1, A2, B3], strategy=ANY)


def test_or_binds_one_branch_and_drops_foreign_conjuncts():
    A1, C2, B3, C4 = ev("A1", x=2), ev("C2", x=0), ev("B3"), ev("C4", x=1)
    pattern = A.Or((A.Seq((V("A", "a"), V("B", "b"))), V("C", "c")))
    query = q(pattern, cmp(">", at("a", "x"), 1), cmp("=", at("c", "x"), 0))
    assert both_any(query, [A1, C2, B3, C4]) == {m(a=A1, b=B3), m(c=C2)}


def test_untyped_variable_matches_any_type_and_no_event_twice():
    A1, B2 = ev("A1"), ev("B2")
    query = q(A.And((V(None, "a"), V(None, "b"))))
    assert both_any(query, [A1, B2]) == {m(a=A1, b=B2), m(a=B2, b=A1)}


def test_and_under_other_strategies_uses_linear_extensions():
    B1, A2, B3 = ev("B1"), ev("A2"), ev("B3")
    query = q(A.And((V("A", "a"), V("B", "b"))))
    assert run(query, [B1, A2, B3], NEXT) == {m(a=A2, b=B1), m(a=A2, b=B3)}
    B1, B2, A3 = ev("B1"), ev("B2"), ev("A3")
    assert run(query, [B1, B2, A3], NEXT) == {m(a=A3, b=B1), m(a=A3, b=B2)}
    assert run(query, [B1, B2, A3], STRICT) == {m(a=A3, b=B2)}


def test_query_stream_spans_all_or_branches():
    A1, C2, B3 = ev("A1"), ev("C2"), ev("B3")
    pattern = A.Or((A.Seq((V("A", "a"), V("B", "b"))), V("C", "c")))
    # C is a positive type of the query, so C2 breaks the strict contiguity of A1 B3
    assert run(q(pattern), [A1, C2, B3], STRICT) == {m(c=C2)}
    assert run(q(pattern), [A1, C2, B3], NEXT) == {m(c=C2), m(a=A1, b=B3)}


def test_duplicate_events_count_once():
    A1, B2 = ev("A1"), ev("B2")
    copy = Event("B", 2.0, {}, id="B2")
    query = q(A.Seq((V("A", "a"), V("B", "b"))))
    assert run(query, [A1, B2, copy], STRICT) == {m(a=A1, b=B2)}
    assert both_any(query, [A1, B2, copy]) == {m(a=A1, b=B2)}


# --------------------------------------------------------------------------- expressions

def test_failing_evaluation_is_false_and_short_circuit():
    A1, A2 = ev("A1", x=1, s="u"), ev("A2", s="v")        # A2 has no x
    a = A.Seq((V("A", "a"),))
    assert both_any(q(a, cmp(">=", at("a", "x"), 0)), [A1, A2]) == {m(a=A1)}
    assert both_any(q(a, A.BoolNot(cmp(">=", at("a", "x"), 5))), [A1, A2]) == {m(a=A1)}
    assert both_any(q(a, cmp("!=", at("a", "s"), 3)), [A1, A2]) == set()   # str vs number
    assert both_any(q(a, cmp(">", A.BinOp("/", A.Literal(1), at("a", "x")), 0)),
                    [ev("A1", x=0), A2]) == set()                       # division by zero
    either = A.BoolOr((cmp("=", at("a", "s"), "v"), cmp(">", at("a", "x"), 0)))
    assert both_any(q(a, either), [A1, A2]) == {m(a=A1), m(a=A2)}


def test_type_and_ts_attributes():
    A1, A2 = ev("A1", type="special"), ev("A2")
    a = A.Seq((V("A", "a"),))
    assert both_any(q(a, cmp("=", at("a", "type"), "A")), [A1, A2]) == {m(a=A2)}
    assert both_any(q(a, cmp(">", at("a", "ts"), 1.5)), [A1, A2]) == {m(a=A2)}


# --------------------------------------------------------------------------- strategies

def test_strategies_on_a1_a2_b3():
    A1, A2, B3 = ev("A1"), ev("A2"), ev("B3")
    query = q(A.Seq((V("A", "a"), V("B", "b"))))
    events = [A1, A2, B3]
    assert run(query, events, ANY) == {m(a=A1, b=B3), m(a=A2, b=B3)}
    assert run(query, events, NEXT) == {m(a=A1, b=B3), m(a=A2, b=B3)}
    assert run(query, events, STRICT) == {m(a=A2, b=B3)}
    assert run(query, events, PART) == {m(a=A2, b=B3)}     # no [attr]: like strict


def test_partition_and_strict_contiguity_with_equivalence():
    A1, A2, B3, B4 = ev("A1", k=1), ev("A2", k=2), ev("B3", k=1), ev("B4", k=2)
    query = q(A.Seq((V("A", "a"), V("B", "b"))), equiv=("k",))
    events = [A1, A2, B3, B4]
    assert run(query, events, ANY) == {m(a=A1, b=B3), m(a=A2, b=B4)}
    assert run(query, events, PART) == {m(a=A1, b=B3), m(a=A2, b=B4)}
    assert run(query, events, NEXT) == {m(a=A1, b=B3), m(a=A2, b=B4)}
    assert run(query, events, STRICT) == set()
    same = [ev("A1", k=1), ev("A2", k=1), ev("B3", k=1)]
    assert run(query, same, PART) == {m(a=same[1], b=same[2])}
    assert run(query, same, NEXT) == {m(a=same[0], b=same[2]), m(a=same[1], b=same[2])}


def test_strict_contiguity_ignores_types_outside_the_query():
    A1, D2, C3, B4 = ev("A1"), ev("D2"), ev("C3"), ev("B4")
    pattern = A.Seq((V("A", "a"), V("C", "n", negated=True), V("B", "b")))
    # D is no type of the query, C only of a negated variable: neither breaks contiguity
    assert run(q(pattern), [A1, D2, B4], STRICT) == {m(a=A1, b=B4)}
    assert run(q(pattern), [A1, C3, B4], STRICT) == set()               # negation rejects
    assert run(q(A.Seq((V("A", "a"), V("B", "b")))), [A1, C3, B4], STRICT) == {m(a=A1, b=B4)}


def test_skip_till_next_with_predicate_on_begin():
    A1, B2, B3 = ev("A1", x=5), ev("B2", x=1), ev("B3", x=7)
    query = q(A.Seq((V("A", "a"), V("B", "b"))), cmp(">", at("b", "x"), at("a", "x")))
    events = [A1, B2, B3]
    assert run(query, events, NEXT) == {m(a=A1, b=B3)}   # B2 fails the begin edge: ignored
    assert run(query, events, STRICT) == set()


# --------------------------------------------------------------------------- cross-check

@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query_and_stream())
def test_nfa_any_match_equals_enumeration(qpe):
    query, params, events = qpe
    note(query_text(query))
    note(f"params={params}\n{events_text(events)}")
    expected = enumerate_matches(query, events, params)
    got = nfa_matches(query, events, params, ANY)
    if kleene_under_and(query.pattern):
        assert got <= expected             # the NFA^b cannot interleave around a Kleene block
    else:
        assert got == expected
