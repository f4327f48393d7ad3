"""Seeded synthetic workloads: a query for the lazy engine (text), the same query for the eager
baseline (Python predicates), and a stream generator.

Streams: event types arrive as independent Poisson processes with the given rates (events per
second of event time), so ``ts`` is strictly increasing; every event has a partition attribute
``k`` (uniform over ``keys`` values, also the event's partition key) and a numeric attribute
``v`` drawn uniformly from its type's range. Event ids are explicit (``e0000000042``), so no
content hashing happens anywhere in the measured code. The same seed gives the same stream.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from benchmarks.eager_nfa import EagerQuery, NegVar, Var
from raycep.cep.event import Event

KEY = "k"


@dataclass(frozen=True)
class StreamSpec:
    rates: dict                     # type -> events per second of event time
    keys: int = 50                  # distinct values of the partition attribute
    values: dict = field(default_factory=dict)   # type -> (lo, hi) of attribute v
    seed: int = 1

    @property
    def rate(self) -> float:
        return float(sum(self.rates.values()))


def stream(spec: StreamSpec, n_events: int, seed: int | None = None):
    """Yield ``n_events`` Events of ``spec`` (lazily: memory runs build them on the fly)."""
    rng = random.Random(spec.seed if seed is None else seed)
    types = list(spec.rates)
    cum, acc = [], 0.0
    for t in types:
        acc += spec.rates[t]
        cum.append(acc)
    total = acc
    keys = spec.keys
    ranges = [spec.values.get(t, (0.0, 100.0)) for t in types]
    choose = rng.choices
    expo, rand, randrange = rng.expovariate, rng.random, rng.randrange
    idx = list(range(len(types)))
    ts = 0.0
    for i in range(n_events):
        nxt = ts + expo(total)
        ts = nxt if nxt > ts else ts + 1e-9
        j = choose(idx, cum_weights=cum)[0]
        lo, hi = ranges[j]
        k = randrange(keys)
        v = round(lo + (hi - lo) * rand(), 4)
        yield Event(types[j], ts, {KEY: k, "v": v}, key=k, id=f"e{i:010d}")


def generate(spec: StreamSpec, n_events: int, seed: int | None = None) -> list:
    return list(stream(spec, n_events, seed))


@dataclass(frozen=True)
class Workload:
    name: str
    text: str                       # query text for the lazy engine
    eager: EagerQuery               # the same query for the eager baseline
    spec: StreamSpec
    events: int                     # stream length of the full run
    quick_events: int               # stream length with --quick
    eager_budget: float = 60.0      # seconds the eager baseline may run (full run)
    note: str = ""

    @property
    def window(self) -> float:
        return self.eager.window

    def with_window(self, window: float) -> "Workload":
        return replace(self, eager=replace(self.eager, window=window),
                       text=self.text.replace(f"WITHIN {self.eager.window:g} seconds",
                                              f"WITHIN {window:g} seconds"))


# --------------------------------------------------------------------------- queries

def seq3_query(window: float) -> tuple:
    text = ("PATTERN SEQ(A a, B b, C c) WHERE [k] AND a.v < b.v AND b.v > c.v "
            f"WITHIN {window:g} seconds")
    eager = EagerQuery("seq3", (
        Var("a", "A"),
        Var("b", "B", checks=(lambda m, e: m[0].attrs["v"] < e.attrs["v"],)),
        Var("c", "C", checks=(lambda m, e: m[1].attrs["v"] > e.attrs["v"],)),
    ), window=window, key=KEY)
    return text, eager


def kleene_query(window: float) -> tuple:
    text = ("PATTERN SEQ(A a, B+ b[], C c) WHERE [k] AND b[i].v >= 80 AND b[i].v > b[i-1].v "
            f"AND a.v > c.v WITHIN {window:g} seconds")
    eager = EagerQuery("kleene", (
        Var("a", "A"),
        Var("b", "B", kleene=True, elem_checks=(
            lambda m, p: m[1][p].attrs["v"] >= 80,
            lambda m, p: p == 0 or m[1][p].attrs["v"] > m[1][p - 1].attrs["v"],
        )),
        Var("c", "C", checks=(lambda m, e: m[0].attrs["v"] > e.attrs["v"],)),
    ), window=window, key=KEY)
    return text, eager


def negation_query(window: float) -> tuple:
    text = ("PATTERN SEQ(A a, ~B b, C c) WHERE [k] AND a.v < c.v AND b.v > a.v "
            f"WITHIN {window:g} seconds")
    eager = EagerQuery("negation", (
        Var("a", "A"),
        Var("c", "C", checks=(lambda m, e: m[0].attrs["v"] < e.attrs["v"],)),
    ), window=window, key=KEY, negations=(
        NegVar("b", "B", pos=1, checks=(lambda m, x: x.attrs["v"] > m[0].attrs["v"],)),
    ))
    return text, eager


# --------------------------------------------------------------------------- workloads

#: A, B, C at 50:10:1 events/s; C readings are high, so ``b.v > c.v`` is selective (~0.5%):
#: matches stay rare while ``a.v < b.v`` (50%) makes many (a, b) partial matches.
SKEWED = StreamSpec(rates={"A": 50, "B": 10, "C": 1}, keys=50,
                    values={"A": (0, 100), "B": (0, 100), "C": (99, 100)}, seed=7)
#: the same with C readings even higher: ~10x fewer matches (how the speed-up depends on output)
SKEWED_RARE = replace(SKEWED, values={"A": (0, 100), "B": (0, 100), "C": (99.9, 100)})
UNIFORM = StreamSpec(rates={"A": 50, "B": 10, "C": 1}, keys=20,
                     values={"A": (0, 100), "B": (0, 100), "C": (0, 100)}, seed=11)


def _workload(name, make, window, spec, events, quick, budget, note) -> Workload:
    text, eager = make(window)
    return Workload(name, text, eager, spec, events, quick, budget, note)


def workloads() -> list:
    return [
        _workload("seq3-60s", seq3_query, 60, SKEWED, 300_000, 40_000, 60.0,
                  "skewed SEQ-3, 50 keys, 60 s window"),
        _workload("seq3-600s", seq3_query, 600, SKEWED, 150_000, 60_000, 45.0,
                  "skewed SEQ-3, 50 keys, 600 s window"),
        _workload("seq3-600s-rare", seq3_query, 600, SKEWED_RARE, 100_000, 50_000, 30.0,
                  "as seq3-600s, C.v~U(99.9,100): ~10x fewer matches (sensitivity)"),
        _workload("kleene-10s", kleene_query, 10, UNIFORM, 200_000, 30_000, 60.0,
                  "SEQ(A, B+, C), element-wise b.v >= 80 and increasing, 20 keys"),
        _workload("negation-30s", negation_query, 30, UNIFORM, 200_000, 30_000, 60.0,
                  "SEQ(A, ~B, C), 20 keys"),
    ]


def by_name(name: str) -> Workload:
    for w in workloads():
        if w.name == name:
            return w
    raise KeyError(name)
