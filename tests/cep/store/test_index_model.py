"""Model-based tests of the public behaviour of cep.store.index: ``TimeBuffer`` and
``SharedEventIndex`` against plain Python lists of events in (ts, id) order.

Random operation sequences (hypothesis state machines) insert events (timestamps from a small
set, so ties are frequent; exact duplicates, replays under a given id, late events, long
in-order runs), query ranges, counts and column-wise selections, evict, toggle the index's
partition / every-type buffers and check, after every step, that the buffers hold exactly the
model's events -- the same objects (``is``), in (ts, id) order.

The model computes an event's order key on a twin Event, so the events handed to the index keep
their lazily derived id as the index leaves it.
"""
from __future__ import annotations

import operator
import pickle
import random
from bisect import bisect_left
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from raycep.cep.event import Event, trusted_event
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.index import ALL, ANY_TYPE, SharedEventIndex, TimeBuffer

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
STATEFUL = settings(max_examples=80, stateful_step_count=35, deadline=None,
                    suppress_health_check=SLOW)

#: attribute absent from the event
MISSING = object()
#: ints float64 does not hold exactly, and beyond int64 / uint64
BIG_INTS = (2 ** 53, 2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64,
            2 ** 64 + 1, -(2 ** 64) - 1, 3 ** 50)
FLOATS = (0.5, -1.5, 2.0, 2.5, -0.0, 1e-300, 1e300, float(2 ** 53), float(2 ** 64))
#: numbers float64 holds exactly (2 ** 53 is the largest such int of the flat index's columns)
EXACT = (2 ** 53, -(2 ** 53), 2 ** 53 - 1)
NUMBERS = st.one_of(st.integers(-3, 3), st.sampled_from(FLOATS + EXACT), st.sampled_from(BIG_INTS))
#: attribute values: mostly numbers (so that whole chunks / ranges are numeric), else a bool,
#: a string, None or no attribute
ATTR_VALUES = st.one_of(NUMBERS, NUMBERS, NUMBERS,
                        st.sampled_from([True, False, "x", "", "2", None, MISSING]))
OPS = st.sampled_from([operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
                       operator.ne])
#: a time: ("at", t) from a small set (frequent ties), ("pick", i, d) the ts of the buffered
#: event ``i`` / 256 of the way through the buffer + d, ("end", d) the largest buffered ts + d
TIMES = st.one_of(
    st.tuples(st.just("at"), st.integers(0, 12).map(lambda i: i / 2)),
    st.tuples(st.just("pick"), st.integers(0, 255), st.sampled_from([0.0, 0.0, -0.25, 0.25])),
    st.tuples(st.just("end"), st.sampled_from([0.0, 0.5, 1.0])))

#: in-order runs, drawn from a seed (few choices: quick to shrink); some longer than 128 (a
#: chunk of the chunked index) and than 64 (the first numeric column of the flat one)
SEEDS = st.integers(0, 63)
RUN_LENGTHS = st.sampled_from([1, 2, 3, 8, 20, 70, 140, 260])

TYPES = ("A", "B", "C")
KEYS = (None, "a", "b", 0, 7)


class Rec:
    """An event and its order key ``(ts, id)`` (the id computed on a twin Event). ``src``:
    the (column batch, row) the buffer holds it as, whose Event the buffer must hand out."""

    __slots__ = ("_ev", "src", "ts", "eid", "given")

    def __init__(self, etype: str, ts: float, attrs: dict, key=None, given: str | None = None):
        self._ev = trusted_event(etype, ts, attrs, key, given)   # any value (Event() checks)
        self.src = None
        self.ts = ts
        self.given = given
        self.eid = given if given is not None else trusted_event(etype, ts, dict(attrs), key).id

    @property
    def ev(self) -> Event:
        return self._ev if self.src is None else self.src[0].event(self.src[1])

    @property
    def order(self) -> tuple:
        return (self.ts, self.eid)

    @property
    def ident(self) -> tuple:
        return (self.ev.type, self.ts, self.eid)

    @property
    def content(self) -> tuple:
        """What a derived id is made of."""
        ev = self.ev
        return (ev.type, ev.ts, ev.key, tuple(sorted(ev.attrs.items())))

    def copy(self) -> "Rec":
        """Another object with the same content (and given id): a replayed event."""
        ev = self.ev
        return Rec(ev.type, ev.ts, dict(ev.attrs), ev.key, self.given)

    def __repr__(self):
        return f"Rec({self.ev.type}, {self.ts}, {self.ev.attrs}, key={self.ev.key!r}, " \
               f"id={self.eid})"


def pick(items: list, at: int):
    """The item ``at`` / 256 of the way through ``items``."""
    return items[at * len(items) // 256]


def attrs_of(**values) -> dict:
    return {k: v for k, v in values.items() if v is not MISSING}


def assert_same(got, want: list, what: str):
    """``got`` holds the objects of ``want`` in the same order."""
    got = list(got)
    ok = len(got) == len(want) and all(map(operator.is_, got, want))
    assert ok, f"{what}: got {[(e.type, e.ts) for e in got]}, " \
               f"want {[(e.type, e.ts) for e in want]}"


def contents(buf) -> list:
    return [] if buf is None else list(buf)


def after_all(recs: list, orders: list) -> list:
    """``recs`` in (ts, id) order, each once, without those not after the last of ``orders``
    (what ``extend`` may be given)."""
    last = orders[-1] if orders else None
    run, seen = [], set()
    for rec in sorted(recs, key=lambda r: r.order):
        if (last is None or rec.order > last) and rec.order not in seen:
            seen.add(rec.order)
            run.append(rec)
    return run


def passes(ev: Event, attr: str, op, value) -> bool:
    """The caller's filter (cep.evaluation.evaluator): a number (not a bool) satisfying ``op``."""
    x = ev.attrs.get(attr, MISSING)
    return (x.__class__ is int or x.__class__ is float) and op(x, value)


def check_select(result: tuple, in_range: list, attr: str, op, value):
    """``select``'s contract: ``selected`` satisfy the filter, ``unchecked`` are left to the
    caller, both in buffer order and disjoint, and together with the caller's filter they are
    exactly the range's events that pass; ``in_range`` counts the range."""
    selected, n, unchecked = result
    assert n == len(in_range)
    pos = {id(e): i for i, e in enumerate(in_range)}
    for name, part in (("selected", selected), ("unchecked", unchecked)):
        at = [pos.get(id(e)) for e in part]
        assert None not in at, f"{name} holds an event not in the range (or another object)"
        assert at == sorted(set(at)), f"{name} is not in buffer order (or repeats an event)"
    assert not {id(e) for e in selected} & {id(e) for e in unchecked}
    wrong = [e for e in selected if not passes(e, attr, op, value)]
    assert not wrong, f"selected but fails {op.__name__} {value!r}: {wrong}"
    got = {id(e) for e in selected} | {id(e) for e in unchecked if passes(e, attr, op, value)}
    want = {id(e) for e in in_range if passes(e, attr, op, value)}
    missed = [e for e in in_range if id(e) in want - got]
    assert not missed, f"passes {op.__name__} {value!r} but neither selected nor unchecked: " \
                       f"{missed}"


def run_value(rng: random.Random, kind: str):
    """An attribute value of an in-order run: small ints, numbers float64 holds exactly, any
    numbers, or mostly numbers."""
    if kind == "ints":
        return rng.randint(-3, 3)
    if kind == "exact":
        return rng.choice((rng.randint(-3, 3), rng.choice(FLOATS), rng.choice(EXACT)))
    number = rng.choice((rng.randint(-3, 3), rng.choice(FLOATS + EXACT), rng.choice(BIG_INTS)))
    if kind == "numbers" or rng.random() < 0.9:
        return number
    return rng.choice((True, False, "x", None, MISSING))


# --------------------------------------------------------------------------- TimeBuffer

class Buffered(RuleBasedStateMachine):
    """What both machines share: the model (buffered events in (ts, id) order, the evicted
    ones in eviction order), times picked from it, and events inserted again."""

    def __init__(self):
        super().__init__()
        self.model: list[Rec] = []          # buffered, in (ts, id) order
        self.orders: list[tuple] = []       # their (ts, id)
        self.gone: list[Rec] = []           # every eviction of an event, in eviction order

    @precondition(lambda self: self.model or self.gone)
    @rule(at=st.integers(0, 255), evicted=st.booleans(), same_object=st.booleans())
    def insert_again(self, at, evicted, same_object):
        """A buffered event again (a duplicate: dropped) or a late copy of an evicted one."""
        pool = self.gone if (evicted and self.gone) or not self.model else self.model
        rec = pick(pool, at)
        self._insert(rec if same_object else rec.copy())

    def _time(self, spec) -> float:
        if spec[0] == "at":
            return spec[1]
        if not self.model:
            return 0.0
        if spec[0] == "end":
            return self.model[-1].ts + spec[1]
        return pick(self.model, spec[1]).ts + spec[2]


class TimeBufferMachine(Buffered):
    """One TimeBuffer against a list of events in (ts, id) order."""

    def __init__(self):
        super().__init__()
        self.buf = TimeBuffer()

    def _insert(self, rec: Rec):
        k = bisect_left(self.orders, rec.order)
        fresh = k == len(self.orders) or self.orders[k] != rec.order
        assert self.buf.insert(rec.ev) is fresh, rec
        if fresh:
            self.model.insert(k, rec)
            self.orders.insert(k, rec.order)

    @rule(when=TIMES, v=ATTR_VALUES, w=ATTR_VALUES, given=st.none() | st.integers(0, 3))
    def insert(self, when, v, w, given):
        given = None if given is None else f"g{given}"
        self._insert(Rec("A", self._time(when), attrs_of(v=v, w=w), None, given))

    @rule(seed=SEEDS, n=RUN_LENGTHS, step=st.sampled_from([0.0, 0.5, 1.0]),
          kind=st.sampled_from(["ints", "exact", "numbers", "mixed"]),
          bulk=st.sampled_from([False, True, "rows"]))
    def in_order_run(self, seed, n, step, kind, bulk):
        """A run of events from the largest buffered ts on (ties at a ``step`` of 0), inserted
        one by one or, after the last buffered event and in (ts, id) order, by ``extend`` (of
        Events, or of the rows of a column batch, made into Events only when read)."""
        if len(self.model) > 600:
            n = min(n, 10)
        rng = random.Random(seed)
        ts = self.model[-1].ts if self.model else 0.0
        recs = []
        for _ in range(n):
            ts += rng.choice((0.0, step, step))
            given = f"r{rng.randint(0, 5)}" if rng.random() < 0.2 else None
            recs.append(Rec("A", ts, attrs_of(v=run_value(rng, kind)), None, given))
        if not bulk:
            for rec in recs:
                self._insert(rec)
            return
        run = after_all(recs, self.orders)
        if not run:
            return
        if bulk == "rows":
            batch = ColumnBatch.from_events([r.ev for r in run])
            self.buf.extend_rows(batch, list(range(len(run))), [r.ts for r in run])
            for i, rec in enumerate(run):
                rec.src = (batch, i)
        else:
            self.buf.extend([r.ev for r in run], [r.ts for r in run])
        self.model.extend(run)
        self.orders.extend(r.order for r in run)

    @rule(a=TIMES, b=TIMES, attr=st.sampled_from(["v", "v", "w"]), op=OPS, value=NUMBERS)
    def query(self, a, b, attr, op, value):
        lo, hi = sorted((self._time(a), self._time(b)))
        want = [r.ev for r in self.model[bisect_left(self.orders, (lo,)):]
                if r.ts <= hi]
        assert_same(self.buf.range(lo, hi), want, f"range({lo}, {hi})")
        assert self.buf.count(lo, hi) == len(want)
        check_select(self.buf.select(lo, hi, attr, op, value), want, attr, op, value)
        if lo < hi:
            assert self.buf.range(hi, lo) == []

    @rule(when=TIMES, with_sink=st.booleans())
    def evict(self, when, with_sink):
        cutoff = self._time(when)
        k = bisect_left(self.orders, (cutoff,))
        if with_sink:
            sink: list = []
            assert self.buf.evict_before(cutoff, sink) == k
            assert_same([ev for part in sink for ev in part], [r.ev for r in self.model[:k]],
                         f"sink of evict_before({cutoff})")
        else:
            assert self.buf.evict_before(cutoff) == k
        self.gone.extend(self.model[:k])
        del self.model[:k], self.orders[:k]

    @invariant()
    def same_as_model(self):
        assert len(self.buf) == len(self.model)
        assert_same(self.buf, [r.ev for r in self.model], "iteration")
        assert self.buf.first_ts() == (self.model[0].ts if self.model else None)


def test_time_buffer_against_a_sorted_list():
    run_state_machine_as_test(TimeBufferMachine, settings=STATEFUL)


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(values=st.lists(NUMBERS, min_size=1, max_size=8) | st.lists(ATTR_VALUES, min_size=1,
                                                                   max_size=8),
       n=st.sampled_from([3, 70, 300]), op=OPS, value=NUMBERS,
       cut=st.tuples(st.integers(0, 310), st.integers(0, 310)), late=st.booleans())
def test_select_compares_like_python(values, n, op, value, cut, late):
    """``select`` over numeric (or mixed) attribute values, in order or inserted backwards,
    agrees with Python's comparison of the value (ints beyond 2 ** 53 compared exactly)."""
    events = [trusted_event("A", float(i // 2), attrs_of(v=values[i % len(values)]), None,
                            f"e{i:03d}")
              for i in range(n)]
    buf = TimeBuffer()
    for ev in reversed(events) if late else events:
        assert buf.insert(ev)
    lo, hi = sorted(c / 2 for c in cut)
    want = [e for e in events if lo <= e.ts <= hi]
    check_select(buf.select(lo, hi, "v", op, value), want, "v", op, value)


# --------------------------------------------------------------------------- SharedEventIndex

@st.composite
def keyed_events(draw):
    """``(type, key, v, given id or None)``: given ids name the type and key, so a given id
    is repeated only by a replay (possibly with other attributes: the first one wins)."""
    etype = draw(st.sampled_from(TYPES))
    key = draw(st.sampled_from(KEYS))
    given = draw(st.none() | st.integers(0, 3))
    return etype, key, draw(st.integers(0, 3)), \
        None if given is None else f"{etype}/{key}/{given}"


def keyed_rec(etype, key, v, given, ts) -> Rec:
    attrs = {"v": v} if key is None else {"v": v, "k": key}
    return Rec(etype, ts, attrs, key, given)


def evicted_idents(lists) -> Counter:
    """(type, ts, id) of the events of ``evicted_events()`` lists (pickled copies: computing
    their ids leaves the index's events as they are)."""
    return Counter((e.type, e.ts, e.id) for part in pickle.loads(pickle.dumps(lists))
                   for e in part)


class IndexMachine(Buffered):
    """One SharedEventIndex (key attribute ``k``) against a list of events in (ts, id) order
    and the flags keep_all / keep_keys / keep_any."""

    def __init__(self):
        super().__init__()
        self.idents: set = set()            # their (type, ts, id)
        self.last_call: list[Rec] = []      # what the last evict_before dropped
        self.keep_all, self.keep_keys, self.keep_any = True, True, False
        self.duplicates = self.inserted = self.evicted = 0
        self.fresh = 0                      # numbers new events
        self.journal: dict = {}             # list number -> pickled list (a checkpoint's file)
        self.written = 0

    @initialize(remember=st.sampled_from([100_000, 5]),
                keep_all=st.sampled_from([True, True, False]),
                keep_keys=st.sampled_from([True, True, False]),
                keep_any=st.sampled_from([False, False, True]))
    def start(self, remember, keep_all, keep_keys, keep_any):
        """An index with ``remember`` evicted events remembered, its flags set while empty."""
        self.remember = remember
        self.idx = SharedEventIndex("k", remember_ids=remember)
        self.set_keep_all(keep_all)
        self.set_keep_keys(keep_keys)
        if keep_any:
            self.enable_any(0)

    def _add(self, rec: Rec):
        k = bisect_left(self.orders, rec.order)
        self.model.insert(k, rec)
        self.orders.insert(k, rec.order)
        self.idents.add(rec.ident)

    def _insert(self, rec: Rec):
        fresh = rec.ident not in self.idents
        assert self.idx.insert(rec.ev) is fresh, rec
        if fresh:
            self._add(rec)
            self.inserted += 1
        else:
            self.duplicates += 1

    def _new(self, ts: float) -> Rec:
        """An event never seen: new content, sometimes a new given id."""
        self.fresh += 1
        etype, key = TYPES[self.fresh % 3], KEYS[self.fresh % 5]
        attrs = {"v": 99, "fresh": self.fresh} | ({} if key is None else {"k": key})
        return Rec(etype, ts, attrs, key, f"new{self.fresh}" if self.fresh % 2 else None)

    # ----------------------------------------------------------------- inserts

    @rule(when=TIMES, spec=keyed_events())
    def insert(self, when, spec):
        self._insert(keyed_rec(*spec, self._time(when)))

    @rule(seed=SEEDS, n=RUN_LENGTHS, step=st.sampled_from([0.0, 0.5, 1.0]))
    def extend(self, seed, n, step):
        """An in-order run after the last buffered event, in (ts, id) order."""
        if len(self.model) > 500:
            n = min(n, 10)
        rng = random.Random(seed)
        ts = self.model[-1].ts if self.model else 0.0
        recs = []
        for _ in range(n):
            ts += rng.choice((0.0, step, step))
            etype, key = rng.choice(TYPES), rng.choice(KEYS)
            given = f"{etype}/{key}/{rng.randint(0, 3)}" if rng.random() < 0.2 else None
            recs.append(keyed_rec(etype, key, rng.randint(0, 3), given, ts))
        run = after_all(recs, self.orders)
        if not run:
            return
        self.idx.extend([r.ev for r in run], [r.ev.type for r in run], [r.ts for r in run])
        for rec in run:
            self._add(rec)
        self.inserted += len(run)

    # ----------------------------------------------------------------- flags

    @rule(keep=st.booleans())
    def set_keep_all(self, keep):
        self.idx.set_keep_all(keep)
        if not keep:
            self.keep_keys = True
        self.keep_all = keep

    @rule(keep=st.booleans())
    def set_keep_keys(self, keep):
        self.idx.set_keep_keys(keep)
        self.keep_keys = keep or not self.keep_all

    @rule(now=st.integers(0, 3))
    def enable_any(self, now):
        """(Once in four: the every-type buffers stay, and ``extend`` then inserts one by
        one.)"""
        if now:
            return
        self.idx.enable_any()
        self.keep_any = True

    # ----------------------------------------------------------------- eviction

    @rule(when=TIMES)
    def evict(self, when):
        cutoff = self._time(when)
        k = bisect_left(self.orders, (cutoff,))
        assert self.idx.evict_before(cutoff) == k
        self.evicted += k
        self.last_call = self.model[:k]
        self.gone.extend(self.last_call)
        for rec in self.last_call:
            self.idents.discard(rec.ident)
        del self.model[:k], self.orders[:k]
        # late copies of some of the events just evicted (as their buffers left them)
        for rec in self.last_call[:: max(1, k // 3)]:
            if rec.ident not in self.idents:
                late = rec.copy().ev
                assert not self.idx.contains(late), rec
                assert self.idx.seen_before(late) or not self._remembered(rec), rec
        # a checkpoint: the lists not written yet (actors/recovery.py)
        live_from, total = self.idx.evicted_span()
        new_from, new = self.idx.evicted_events(self.written)
        first, lists = self.idx.evicted_events()
        assert first == live_from and first + len(lists) == total
        assert new_from == max(first, self.written)
        assert evicted_idents(new) == evicted_idents(lists[new_from - first:])
        # what is remembered: evicted events only, all of them or at least ``remember``
        remembered = evicted_idents(lists)
        gone = Counter(r.ident for r in self.gone)
        assert not remembered - gone, "remembers events that were never evicted"
        if self.remember >= len(self.gone):
            assert remembered == gone
        else:
            assert sum(remembered.values()) >= self.remember
        for i, part in enumerate(new):
            self.journal[new_from + i] = pickle.dumps(list(part))
        self.written = total

    def _remembered(self, rec: Rec) -> bool | None:
        """Whether ``seen_before`` must know ``rec`` (evicted, not buffered again); None when
        the index may have forgotten it (fewer than ``remember`` events are remembered)."""
        if self.remember >= len(self.gone):
            return True
        if len(self.last_call) <= self.remember and any(r is rec for r in self.last_call):
            return True
        return None

    @rule(at=st.integers(0, 255), which=st.sampled_from(["buffered", "evicted", "new"]),
          copy=st.booleans(), when=TIMES)
    def seen_before(self, at, which, copy, when):
        idx = self.idx
        if which == "buffered" and self.model:
            rec = pick(self.model, at)
            ev = rec.copy().ev if copy else rec.ev
            assert idx.contains(ev) and idx.seen_before(ev), rec
        elif which == "evicted" and self.gone:
            rec = pick(self.gone, at)
            ev = rec.copy().ev if copy else rec.ev
            if rec.ident in self.idents:
                assert idx.contains(ev) and idx.seen_before(ev), rec
            else:
                assert not idx.contains(ev), rec
                if self._remembered(rec):
                    assert idx.seen_before(ev), rec
        else:
            ev = self._new(self._time(when)).ev
            assert not idx.contains(ev) and not idx.seen_before(ev)

    @precondition(lambda self: self.gone)
    @rule(pickled=st.booleans(), from_journal=st.booleans())
    def restore_evicted(self, pickled, from_journal):
        """A fresh index given the remembered evicted events (a snapshot's, possibly pickled,
        or the lists a checkpoint wrote one by one) answers ``seen_before`` the same way."""
        first, lists = self.idx.evicted_events()
        if from_journal:
            lists = [pickle.loads(self.journal[i]) for i in range(first, first + len(lists))]
        elif pickled:
            first, lists = pickle.loads(pickle.dumps((first, lists)))
        fresh = SharedEventIndex("k", remember_ids=self.remember)
        fresh.remember_evicted(first, lists)
        assert fresh.evicted_span() == self.idx.evicted_span()
        assert evicted_idents(fresh.evicted_events()[1]) == evicted_idents(lists)
        for rec in self.gone[-60:]:
            if rec.ident not in self.idents:
                copy = rec.copy().ev
                assert fresh.seen_before(copy) == self.idx.seen_before(copy), rec
        # (an event with the content of an evicted one is seen before whatever its id: see
        # cep.store.index._fingerprint)
        evicted = {r.ident for r in self.gone} | {r.content for r in self.gone}
        for rec in self.model[:20]:
            if rec.ident not in evicted and rec.content not in evicted:
                assert not fresh.seen_before(rec.copy().ev), rec
        assert not fresh.seen_before(self._new(self.gone[-1].ts).ev)

    # ----------------------------------------------------------------- the whole state

    @invariant()
    def same_as_model(self):
        if not hasattr(self, "idx"):
            return
        idx = self.idx
        assert (idx.keep_all, idx.keep_keys, idx.keep_any) == \
            (self.keep_all, self.keep_keys, self.keep_any)
        evs = [r.ev for r in self.model]
        assert len(idx) == len(evs)
        assert {t: n for t, n in idx.counts().items() if n} == Counter(e.type for e in evs)
        got = list(idx.events())
        assert len(got) == len(evs) and {id(e) for e in got} == {id(e) for e in evs}, \
            "events(): not each buffered event once"
        # the buffers: (partition, type) -> events in (ts, id) order
        want: dict = {(part, etype): [] for part in (ALL,) + KEYS[1:]
                      for etype in TYPES + (ANY_TYPE,)}
        for ev in evs:
            parts = (ALL,) if ev.key is None or self.keep_all else ()
            parts += (ev.key,) if ev.key is not None and self.keep_keys else ()
            for part in parts:
                want[part, ev.type].append(ev)
                if self.keep_any:
                    want[part, ANY_TYPE].append(ev)
        for (part, etype), events in want.items():
            assert_same(contents(idx.buffer(part, etype)), events, f"buffer({part!r}, {etype})")
        keys = {e.key for e in evs if e.key is not None}
        assert idx.partitions() == (len(keys) if self.keep_keys else 0)
        assert (idx.duplicates, idx.inserted, idx.evicted) == \
            (self.duplicates, self.inserted, self.evicted)


def test_shared_index_against_a_sorted_list():
    run_state_machine_as_test(IndexMachine, settings=STATEFUL)
