"""Single-variable conditions decided over columns (issue 35, "one rule against CORE"): text and
number equalities in the bulk plan (raycep.cep.evaluation.bulk), a trigger's own conditions
screened in bulk for every plan (``bulk.screen``: the triggers that fail them are counted and
indexed ahead, never processed one by one), and, trigger by trigger, a Kleene variable's
element-wise conditions and a first text filter compared over a buffer's columns
(``Evaluation._columnar_unary`` / ``_selected_text``).

Each path is checked the same way: ``Engine.process_columns`` in random chunks gives what
``Engine.process`` of each event gives (matches and their order, every conjunct counter, the
state after) and, with no match cap, what the brute-force oracle gives; values that are no
text or no exact number (the evaluator fails the comparison there) are in the stream, so the
fallbacks run too. Spies check that the new paths did the work, so these tests cannot pass
with them switched off."""
from __future__ import annotations

import random
from unittest import mock

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import raycep.cep.evaluation.bulk
import raycep.cep.evaluation.evaluator
from raycep.cep.evaluation.evaluator import Evaluation
from raycep.cep.evaluation.manager import ManagerSettings
from raycep.cep.event import Event, trusted_event
from raycep.cep.lang.parser import parse_query

from oracle import oracle_matches
from test_bulk import assert_same, by_columns, by_event, cut, make_engine, outcome, patched

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
TEXTS = ("p", "q", "r", "zz")
ODD_TEXT = (1, 2.5, True, None)            # None: the attribute is missing
STRATEGIES = ("skip_till_any_match",) * 4 + ("skip_till_next_match", "partition_contiguity",
                                             "strict_contiguity")


class Counted:
    """Wraps a function: how many calls, and how many gave a result (not None)."""

    def __init__(self, fn):
        self.fn, self.calls, self.results = fn, 0, 0

    def __call__(self, *args, **kw):
        got = self.fn(*args, **kw)
        self.calls += 1
        self.results += got is not None
        return got


class spied:
    """``bulk.screen``, ``Evaluation._columnar_unary`` and ``_selected_text`` counted, every
    range compared over columns (COLUMNAR_MIN 1)."""

    def __enter__(self):
        self.screen = Counted(raycep.cep.evaluation.bulk.screen)
        self.unary = Counted(Evaluation._columnar_unary)
        self.text = Counted(Evaluation._selected_text)
        unary, text = self.unary, self.text
        self._patches = [
            mock.patch.object(raycep.cep.evaluation.bulk, "screen", self.screen),
            mock.patch.object(Evaluation, "_columnar_unary",
                              lambda ev, *a: unary(ev, *a)),
            mock.patch.object(Evaluation, "_selected_text", lambda ev, *a: text(ev, *a)),
            mock.patch.object(raycep.cep.evaluation.evaluator, "COLUMNAR_MIN", 1)]
        for p in self._patches:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in reversed(self._patches):
            p.stop()


def stream(seed: int, n: int, odd: float, ties: float = 0.0) -> list:
    """In-order events of types A-D (and some E), ids ascending: ``t`` a text, ``x``/``y``
    small ints; with probability ``odd`` ``t`` is no text (or missing) and ``x`` no exact
    number."""
    rng = random.Random(seed)
    out, ts = [], 0.0
    for j in range(n):
        ts += 0 if rng.random() < ties else rng.choice([0.5, 1, 1, 1.5])
        attrs = {"t": rng.choice(TEXTS[:3]), "x": rng.randint(0, 4), "y": rng.randint(0, 4)}
        if rng.random() < odd:
            value = rng.choice(ODD_TEXT)
            if value is None:
                del attrs["t"]
            else:
                attrs["t"] = value
        if rng.random() < odd:
            attrs["x"] = rng.choice(["p", True, 2 ** 53 + 1])
        out.append(trusted_event(rng.choice("AAABBBCCCDDE"), ts, attrs, id=f"e{j:05d}"))
    return out


def _condition(draw, v: str, kleene: bool) -> str:
    kind = draw(st.sampled_from(["text", "text", "number", "order"]))
    if kind == "text":
        op = draw(st.sampled_from(["=", "=", "!="]))
        left, right = f"{v}.t", repr(draw(st.sampled_from(TEXTS)))
    elif kind == "number":
        op = draw(st.sampled_from(["=", "!="]))
        left, right = f"{v}.x", str(draw(st.sampled_from([0, 1, 2, 2.0, 2.5])))
    else:
        op = draw(st.sampled_from(["<", "<=", ">", ">="]))
        left, right = f"{v}.y", str(draw(st.integers(0, 4)))
    if draw(st.booleans()):
        left, right = right, left
    return f"{left} {op} {right}"


@st.composite
def filter_queries(draw):
    """``(text, names)``: SEQ of 2-4 variables (two of one type at times), at most one Kleene variable
    (anywhere, the last too), 0-2 single-variable conditions per variable (text and number
    equalities, order comparisons), sometimes a condition between two variables (text
    equality or order), any selection strategy (mostly skip-till-any-match)."""
    n = draw(st.integers(2, 4), label="variables")
    types = list(draw(st.permutations("ABCD"), label="types")[:n])
    if draw(st.integers(0, 2)) == 0:        # two variables of one type (a bound is then in
        i, j = sorted(draw(st.permutations(range(n)))[:2])    # the range's buffer)
        types[i] = types[j]
    names = "abcd"[:n]
    k = draw(st.sampled_from([None, None, *range(n)]), label="Kleene")
    conds = []
    for i, v in enumerate(names):
        for _ in range(draw(st.integers(0, 2))):
            conds.append(_condition(draw, v, i == k))
    if draw(st.integers(0, 3)) == 0:
        i, j = sorted(draw(st.permutations(range(n)))[:2])
        if k not in (i, j):
            conds.append(draw(st.sampled_from([f"{names[i]}.t = {names[j]}.t",
                                               f"{names[i]}.y < {names[j]}.y"])))
    window = draw(st.sampled_from([2, 3, 4.5, 6]), label="window")
    parts = [f"{t}{'+' if i == k else ''} {v}{'[]' if i == k else ''}"
             for i, (t, v) in enumerate(zip(types, names))]
    text = f"PATTERN SEQ({', '.join(parts)})"
    if conds:
        text += " WHERE " + " AND ".join(conds)
    text += f" WITHIN {window} seconds"
    strategy = draw(st.sampled_from(STRATEGIES), label="strategy")
    if strategy != "skip_till_any_match":
        text += f" STRATEGY {strategy}"
    return text, names


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(query=filter_queries(), order_seed=st.randoms(use_true_random=False),
       seed=st.integers(0, 2 ** 20), n=st.integers(10, 120),
       odd=st.sampled_from([0.0, 0.0, 0.05, 0.2]), ties=st.sampled_from([0, 0, 0.1]),
       cap=st.sampled_from([None, None, None, 3]),
       evict_every=st.sampled_from([5, 17, 4096]))
def test_filters_over_columns_equal_process_of_each_event_and_the_oracle(
        query, order_seed, seed, n, odd, ties, cap, evict_every):
    text, names = query
    order = tuple(order_seed.sample(names, len(names)))
    events = stream(seed, n, odd, ties)
    chunks = cut(random.Random(seed + 1), events)
    note(f"{text}\norder={order} cap={cap} chunks={[len(c) for c in chunks]}")
    kw = dict(settings=ManagerSettings(max_matches_per_trigger=cap))
    setup = [("q", text, order)]
    with spied() as spy, patched(evict_every=evict_every) as bulk_spy:
        ref = make_engine(setup, **kw)
        want = outcome(ref, by_event(ref, events))
        assert not spy.screen.calls and not bulk_spy.calls     # process() never goes bulk
        assert not spy.unary.results and not spy.text.results  # nor over columns
        eng = make_engine(setup, **kw)
        got = outcome(eng, by_columns(eng, chunks))
    note(f"screen {spy.screen.calls}, bulk {bulk_spy.bulk()}, Kleene over columns "
         f"{spy.unary.results}/{spy.unary.calls}, text {spy.text.results}/{spy.text.calls}")
    assert_same(got, want)
    if cap is None:
        keys = [k for _, k in got[1]]
        assert len(set(keys)) == len(keys), "a match reported twice"
        assert set(keys) == oracle_matches(parse_query(text), events), "oracle disagrees"


def _run(text: str, order: tuple, events: list, size: int):
    with spied() as spy, patched() as bulk_spy:
        ref = make_engine([("q", text, order)])
        want = outcome(ref, by_event(ref, events))
        eng = make_engine([("q", text, order)])
        got = outcome(eng, by_columns(eng, [events[k:k + size]
                                            for k in range(0, len(events), size)]))
    assert_same(got, want)
    return spy, bulk_spy, eng, want


def test_a_bound_of_the_range_s_type_is_left_out_over_columns():
    """SEQ(A a, B+ b[], A c) triggered at c: a's range ends at the trigger itself (in the
    same buffer), which the columns leave out as ``candidates`` does."""
    events = stream(11, 300, 0.0)
    text = "PATTERN SEQ(A a, B+ b[], A c) WHERE a.t = 'p' AND b.t = 'q' AND c.t = 'r' " \
           "WITHIN 7 seconds"
    spy, _, _, want = _run(text, ("c", "a", "b"), events, 100)
    assert spy.text.results and spy.unary.results
    assert want[1] and set(k for _, k in want[1]) == oracle_matches(parse_query(text), events)


def test_the_new_paths_do_the_work_on_a_clean_stream():
    """Not vacuous: text filters in the bulk plan, the screen of a Kleene query's trigger,
    its candidates and a first text filter compared over columns, all used on a stream of
    texts; the matches are the oracle's."""
    events = stream(7, 400, 0.0)
    seq = "PATTERN SEQ(A a, B b, C c) WHERE a.t = 'p' AND b.t != 'q' AND c.t = 'r' " \
          "WITHIN 6 seconds"
    spy, bulk_spy, _, want = _run(seq, ("c", "b", "a"), events, 100)
    assert bulk_spy.bulk() and not bulk_spy.left() and not spy.screen.calls
    assert set(k for _, k in want[1]) == oracle_matches(parse_query(seq), events)
    kleene = "PATTERN SEQ(A a, B+ b[], C c) WHERE a.t = 'p' AND b.t = 'q' AND b.y >= 1 " \
             "AND c.t = 'r' WITHIN 4 seconds"
    spy, bulk_spy, eng, want = _run(kleene, ("c", "a", "b"), events, 100)
    assert not bulk_spy.calls and spy.screen.calls
    assert spy.unary.results and spy.text.results
    assert want[1] and set(k for _, k in want[1]) == oracle_matches(parse_query(kleene), events)
    path = eng.paths()["q"]
    assert path["bulk"] > path["per_trigger"] > 0        # most triggers fail c.t = 'r'


def test_a_trigger_that_is_no_text_goes_to_the_evaluator():
    """A trigger whose ``t`` is a number or missing: the evaluator counts the failed
    comparison (``failed``), the bulk screen leaves it alone; the rest is screened."""
    events = stream(3, 200, 0.0)
    for k, value in ((10, 5), (21, None), (33, True)):
        attrs = dict(events[k].attrs)
        if value is None:
            del attrs["t"]
        else:
            attrs["t"] = value
        events[k] = Event("C", events[k].ts, attrs, id=events[k].id)
    text = "PATTERN SEQ(A a, B+ b[], C c) WHERE c.t = 'r' AND b.t = 'q' WITHIN 3 seconds"
    spy, _, eng, want = _run(text, ("c", "a", "b"), events, 50)
    assert spy.screen.calls
    conj = {c["text"]: c for c in want[2][0]["queries"]["q"]["conjuncts"]}
    assert conj["c.t = 'r'"]["failed"] == 3
