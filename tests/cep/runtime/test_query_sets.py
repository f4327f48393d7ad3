"""Sets of queries evaluated together over one shared index, against each query evaluated alone
and the oracle: random query sets (every selection strategy, forced plan orders, keyed or not),
some queries removed mid-stream, a checkpoint/restore at a random point, events fed in chunks
(``process_many``). Every query's matches in the shared engine equal the same query alone (and,
for a query present to the end, the oracle)."""
from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from raycep.cep.lang import ast as A
from raycep.cep.runtime.engine import Engine

from oracle import oracle_matches
from strategies import events_text, queries, query_and_stream, query_text

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def feed(eng: Engine, events: list, out: dict):
    for m in eng.process_many(events):
        out.setdefault(m.query, []).append(m.key())


@st.composite
def query_sets(draw):
    """(events, keyed, [(name, query, params, order, removed_at or None)], restore_at)."""
    keyed = draw(st.booleans(), label="keyed")
    first, params, events = draw(query_and_stream(keyed=keyed), label="first query, stream")
    drawn = [(first, params)]
    for _ in range(draw(st.integers(1, 3), label="more queries")):
        drawn.append(draw(queries(allow_kleene=False, equivalence=True if keyed else None),
                          label="query"))
    n = len(events)
    out = []
    for k, (q, p) in enumerate(drawn):
        q = dataclasses.replace(q, strategy=draw(st.sampled_from(A.STRATEGIES),
                                                 label="strategy"))
        order = None
        positive = [v.name for v in A.event_vars(q.pattern) if not v.negated]
        if draw(st.booleans(), label="forced order?"):
            order = tuple(draw(st.permutations(positive), label="order"))
        removed = draw(st.one_of(st.none(), st.integers(0, n)), label="removed at") if k else None
        out.append((f"q{k}", q, p, order, removed))
    restore_at = draw(st.one_of(st.none(), st.integers(0, n)), label="restore at")
    return events, keyed, out, restore_at


def run(events, keyed, members, restore_at=None) -> dict:
    """Matches per query: the members registered before the first event, each removed before
    the event at its index, the engine checkpointed and restored before ``restore_at``."""
    eng = Engine(key_attr="k" if keyed else None)
    for name, q, p, order, _ in members:
        eng.add_query(q, name=name, params=p or None, order=order)
    cuts = sorted({0, len(events), *(r for *_, r in members if r is not None),
                   *([restore_at] if restore_at is not None else [])})
    out: dict = {}
    for a, b in zip(cuts, cuts[1:] + [None]):
        for name, *_, removed in members:
            if removed == a and name in eng.managers:
                eng.remove_query(name)
        if a == restore_at:
            eng = Engine.restore(eng.snapshot())
        if b is not None:
            feed(eng, events[a:b], out)
    for m in eng.advance(math.inf):
        out.setdefault(m.query, []).append(m.key())
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=SLOW)
@given(case=query_sets())
def test_each_query_of_a_set_matches_as_if_alone(case):
    events, keyed, members, restore_at = case
    note("\n".join(f"{name} order={order} removed at {removed}:\n{query_text(q)}"
                   for name, q, _, order, removed in members))
    note(f"keyed={keyed} restore at {restore_at}\n{events_text(events)}")
    together = run(events, keyed, members, restore_at)
    for member in members:
        name, q, p, _, removed = member
        alone = run(events, keyed, [member])
        assert together.get(name, []) == alone.get(name, []), name
        if removed is None:
            assert set(together.get(name, [])) == oracle_matches(q, events, p), name
