"""The cluster equals the engine: the standing guard of every change to sharing, bulk paths,
recovery and rescaling (issue 33); the cluster is re-partitioned (``Client.scale``) between
and during random phases (issue 38).

Random *sets* of queries (a base query and variants of it that differ only in constants,
windows and parameters, plus unrelated queries of other structures; every selection strategy,
negation, Kleene, keyed and global, pessimistic and optimistic) are registered **through the
Python client** of an in-process cluster (real HTTP gateway, 1-3 partition actors and the
global actor) in a random order, some added and removed mid-stream, and the stream is sent in
random batch sizes, by one producer or by several concurrent ones (in order or out of order
within the slack, with duplicates). After ``advance`` and ``drained``, every query's matches
read back from the gateway equal those of the same queries, registered in the same order and
changed at the same points, in one ``Engine`` fed the same events that evaluates each query
on its own (so a bug of the actors' shared evaluation of variants shows); and for the queries present
from the first event to the last they equal the brute-force oracle.

With one in-order producer the multisets of match ids must be equal (and no retraction); with
out-of-order input or several producers the speculative output depends on what each partition
has seen, so the *final* sets (matches minus retractions) are compared, and the output must be
exactly-once: no match reported twice without a retraction in between, no retraction of a match
never reported, none at all for a pessimistic query.
"""
from __future__ import annotations

import dataclasses
import math
import random
import threading
from collections import Counter

from hypothesis import given, note, settings
from hypothesis import strategies as st

from raycep.actors.routing import partition_of
from raycep.cep.event import Event
from raycep.cep.lang import ast as A
from raycep.cep.lang.parser import parse_query
from raycep.cep.match import match_id
from raycep.cep.runtime.engine import Engine
from raycep.cep.store.disorder import DisorderSettings
from raycep.gateway.client import connect
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from cluster_helpers import read_all
from oracle import oracle_matches
from strategies import query_text
from test_disorder import final_keys
from test_sharing import SLOW, bounds, describe, full_span, variant_sets

FAR = 1e6          # the final watermark: past every window, forced


# =========================================================================== the plan

@st.composite
def cluster_cases(draw):
    """A variant set (test_sharing.variant_sets) and how it goes through the cluster: the
    registration order, the batch sizes, the producers, the partitions."""
    case = draw(variant_sets(out_of_order=draw(st.booleans(), label="out of order?"),
                             allow_restore=False), label="case")
    case.cuts = sorted(set(case.cuts) - {0})
    case.order = draw(st.permutations(range(len(case.members))), label="registration order")
    case.batches = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6),
                        label="batch sizes (cycled)")
    case.producers = draw(st.sampled_from((1, 1, 2, 3)), label="producers")
    case.partitions = draw(st.integers(1, 3), label="partitions")
    case.seed = draw(st.integers(0, 2 ** 16), label="interleaving seed")
    # a retention: queries registered mid-stream also see the last seconds before them
    case.retain = draw(st.sampled_from((0.0, 0.0, 0.5, 2.0)), label="retain")
    # batches sent as Arrow tables where their columns allow (each actor gets its rows as
    # columns and evaluates them in bulk), else as events (rows)
    case.tables = draw(st.booleans(), label="tables?")
    # re-partitionings (issue 38): (before phase number, new partitions, during the phase's
    # sends?)
    case.rescales = draw(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3),
                                            st.booleans()), max_size=2), label="rescales")
    if case.slack is not None:        # delays are at most case.slack: with a tie in ts an
        case.slack += 1.0             # event delayed by exactly that would be late
    if case.producers > 1:            # any interleaving stays within the slack: none is late
        span = case.events[-1].ts - case.events[0].ts
        case.slack = max(case.slack or 0.0, span + 1.0)
    return case


def describe_feed(case) -> str:
    return (describe(case) + f"\nregistration order {[case.members[i].name for i in case.order]}"
            f" batches {case.batches} producers {case.producers} "
            f"partitions {case.partitions} tables {case.tables} rescales {case.rescales}")


def changes_at(case, at: int) -> tuple:
    """(members removed, members added) before the event at position ``at``; the added ones
    in the case's registration order."""
    members = [case.members[i] for i in case.order]
    return ([m for m in members if m.removed == at], [m for m in members if m.added == at])


# =========================================================================== the engine

def engine_outputs(case) -> dict:
    """name -> [Match | Retraction] of the queries in one Engine, fed phase by phase, each
    query evaluated on its own (the actors share work among variants: a sharing bug shows)."""
    disorder = None if case.slack is None else DisorderSettings(min_slack=case.slack)
    eng = Engine(key_attr="k" if case.keyed else None, disorder=disorder, sharing=False,
                 retain=case.retain)
    out: dict = {}
    cut = bounds(case)
    for a, b in zip(cut, cut[1:] + [None]):
        removed, added = changes_at(case, a)
        for m in removed:
            eng.remove_query(m.name)
        for m in added:
            eng.add_query(m.query, name=m.name, params=m.params or None, mode=m.mode)
        if b is not None:
            for m in eng.process_many(case.arrivals[a:b]):
                out.setdefault(m.query, []).append(m)
    for m in eng.advance(math.inf):
        out.setdefault(m.query, []).append(m)
    return out


# =========================================================================== the cluster

def batches_of(events: list, sizes: list) -> list:
    out, i, k = [], 0, 0
    while i < len(events):
        n = sizes[k % len(sizes)]
        out.append(events[i:i + n])
        i, k = i + n, k + 1
    return out


def table_of(events: list):
    """``events`` as a pyarrow table (``type``, ``ts``, ``id``, a column per attribute), or
    None where a column would mix kinds of values (a table holds one type per column) or an
    attribute is named like a column of the event itself."""
    import pyarrow as pa
    names = sorted({a for e in events for a in e.attrs})
    if {"type", "ts", "id", "key"} & set(names):
        return None
    columns = {"type": [e.type for e in events], "ts": [e.ts for e in events],
               "id": [e.id for e in events]}
    for name in names:
        values = [e.attrs.get(name) for e in events]
        if len({type(v) for v in values if v is not None}) > 1:
            return None
        columns[name] = values
    try:
        return pa.table(columns)
    except (pa.ArrowException, TypeError, ValueError):
        return None


def send_phase(client_of, case, events: list, rng: random.Random):
    """Send ``events`` in the case's batch sizes: by one producer in order, or by several
    producers at once, each with its own client and source, in a random interleaving (each
    producer's batches in arrival order)."""
    batches = batches_of(events, case.batches)
    if case.tables:
        batches = [table_of(b) or b for b in batches]
    if case.producers == 1:
        client = client_of(0)
        for batch in batches:
            ack = client.send(batch)
            assert ack["bad_rows"] == [] and ack.get("late", 0) == 0, ack
        return
    shares = [[] for _ in range(case.producers)]
    for batch in batches:
        shares[rng.randrange(case.producers)].append(batch)
    errors = []

    def produce(p: int):
        try:
            client = client_of(p)
            for batch in shares[p]:
                ack = client.send(batch, source="producer")
                assert ack["bad_rows"] == [] and ack.get("late", 0) == 0, ack
        except BaseException as exc:          # reported by the test thread
            errors.append(exc)
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(case.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def records_as_outputs(records: list) -> list:
    """Store records as (id, retracted, event ids) in reading order."""
    return [(r["id"], bool(r.get("retracted")), frozenset(_ids(r["events"]))) for r in records]


def _ids(events: dict):
    for value in events.values():
        for e in (value if isinstance(value, list) else (value,)):
            yield e["id"]


def cluster_outputs(case) -> dict:
    """name -> [(match id, retracted)] read back through the client of a new cluster."""
    disorder = None if case.slack is None else DisorderSettings(min_slack=case.slack)
    # every match is read back at the end: the store must hold them all (its capacity per
    # query, drop-oldest beyond it, is a setting: 10,000 by default; a case with untyped
    # variables and sequences of five can give more)
    cluster = InProcessCluster(case.partitions, "k" if case.keyed else None,
                               GatewaySettings(port=0, registry_path=None, plan_every=0,
                                               match_capacity=10 ** 6),
                               disorder=disorder, retain=case.retain)
    cluster.start()
    try:
        return _through(cluster, case)
    finally:
        cluster.stop()


def text_of(query) -> str:
    """The query as text, which must parse back to the same AST (the engine gets the AST)."""
    text = query_text(query)
    assert flat(parse_query(text)) == flat(query), text
    return text


def flat(query):
    """``query`` with nested ANDs of its WHERE flattened (as the parser reads them)."""
    def items(x):
        return [i for c in x.items for i in items(c)] if isinstance(x, A.BoolAnd) else [x]
    if isinstance(query.where, A.BoolAnd):
        return dataclasses.replace(query, where=A.BoolAnd(tuple(items(query.where))))
    return query


def _through(cluster, case) -> dict:
    clients: dict = {}

    def client_of(p: int):
        if p not in clients:
            clients[p] = connect(cluster.url)
        return clients[p]
    control = client_of(0)
    rng = random.Random(case.seed)
    out: dict = {}
    cut = bounds(case)
    phases = len(cut)
    for phase, (a, b) in enumerate(zip(cut, cut[1:] + [None])):
        rescales = [(n, during) for k, n, during in getattr(case, "rescales", ())
                    if k % phases == phase]
        for n, during in rescales:
            if not during:
                control.scale(n)
        during = [n for n, d in rescales if d]
        removed, added = changes_at(case, a)
        if removed:
            assert control.drained(timeout=30)
        for m in removed:
            out[m.name] = records_as_outputs(read_all(control, m.name))
            control.remove(m.name)
        for m in added:
            control.register(text_of(m.query), name=m.name, params=m.params or None,
                             mode=m.mode)
        failed: list = []

        def rescale():
            try:
                for n in during:
                    assert connect(cluster.url).scale(n)["partitions"] == n
            except BaseException as exc:      # noqa: BLE001 (asserted below)
                failed.append(exc)
        scaling = threading.Thread(target=rescale)
        scaling.start()
        if b is not None:
            send_phase(client_of, case, case.arrivals[a:b], rng)
        scaling.join(60)
        assert not scaling.is_alive() and not failed, failed
    last = max(e.ts for e in case.arrivals)
    control.advance(last + FAR, force=True)
    assert control.drained(timeout=30)
    for m in case.members:
        if m.removed is None:
            out[m.name] = records_as_outputs(read_all(control, m.name))
    return out


# =========================================================================== comparing

def final_ids(outputs: list) -> tuple:
    """Apply retractions in order: (final ids, retractions, problems)."""
    live, retractions, problems = set(), 0, []
    for mid, retracted, _ in outputs:
        if retracted:
            retractions += 1
            if mid not in live:
                problems.append(f"retraction of {mid}, never reported")
            live.discard(mid)
        else:
            if mid in live:
                problems.append(f"{mid} reported twice")
            live.add(mid)
    return live, retractions, problems


def as_ids(matches: list) -> list:
    return [(match_id(m), bool(getattr(m, "retracted", False)),
             frozenset(i for _, ids in m.key() for i in (ids if isinstance(ids, tuple) else (ids,))))
            for m in matches]


def oracle_of(case, member) -> set:
    """The oracle's matches of a query: over the whole stream, or, registered mid-stream
    when the latest event time sent was ``since``, those whose last event is after ``since``
    and whose events are all after ``since - retain`` (Engine.add_query)."""
    if not member.added:
        return oracle_matches(member.query, case.events, member.params)
    since = max(e.ts for e in case.arrivals[:member.added])
    seen = [e for e in case.events if e.ts > since - case.retain]
    ts = {e.id: e.ts for e in seen}
    return {k for k in oracle_matches(member.query, seen, member.params)
            if max(ts[i] for _, ids in k
                   for i in (ids if isinstance(ids, tuple) else (ids,))) > since}


def check(case, got: dict, want: dict):
    exact = case.slack is None and case.producers == 1
    for m in case.members:
        g, w = got.get(m.name, []), as_ids(want.get(m.name, []))
        g_final, g_retracted, problems = final_ids(g)
        w_final, _, w_problems = final_ids(w)
        assert not problems, (m.name, problems)
        assert not w_problems, (m.name, "the engine", w_problems)
        if m.mode == "pessimistic":
            assert g_retracted == 0, m.name
        if exact:
            assert Counter(g) == Counter(w), (m.name, "matches differ from the engine's")
        assert g_final == w_final, (m.name, "final matches differ from the engine's",
                                    len(g_final), len(w_final))
    for m in full_span(case) + [m for m in case.members if m.added and m.removed is None]:
        final, _, problems = final_keys(want.get(m.name, []))       # the engine's: its keys
        assert not problems and final == oracle_of(case, m), \
            (m.name, "the oracle")


# =========================================================================== the property

@settings(max_examples=200, deadline=None, suppress_health_check=SLOW)
@given(case=cluster_cases())
def test_every_query_through_the_client_gets_the_engines_matches(case):
    note(describe_feed(case))
    want = engine_outputs(case)
    got = cluster_outputs(case)
    check(case, got, want)


# =========================================================================== the regression

RATIO = ("PATTERN SEQ(A a, ~A n, A b) WHERE [k] AND b.x > a.x * {u} AND n.x < a.x "
         "WITHIN 10 seconds")


def test_variants_registered_one_by_one_through_the_client_keep_their_constants():
    """What the gateway lost (issue 33): variants of one group registered strictest first
    while events flow, each joining after the group was evaluated with a looser constant,
    give through the client exactly what one Engine fed the same way gives, each query
    evaluated on its own (the engine's sharing had the bug: fed this way it lost the same
    matches)."""
    rng = random.Random(5)
    events, price = [], {k: 100.0 for k in range(4)}
    for i in range(400):
        k = rng.randrange(4)
        price[k] = round(price[k] * (1 + rng.gauss(0, 0.01)), 2)
        events.append(Event("A", i * 0.1, {"x": price[k], "k": k}, id=f"e{i}"))
    constants = [round(1.02 - j * 0.002, 3) for j in range(8)]         # strictest first
    cluster = InProcessCluster(2, "k", GatewaySettings(port=0, registry_path=None,
                                                       plan_every=0))
    cluster.start()
    eng = Engine(key_attr="k", sharing=False)
    want: dict = {}
    try:
        client = connect(cluster.url)
        for j, u in enumerate(constants):
            client.register(RATIO.format(u=u), name=f"u{j}")
            eng.add_query(RATIO.format(u=u), name=f"u{j}")
            chunk = events[j * 50:(j + 1) * 50]
            client.send(chunk)
            for m in eng.process_many(chunk):
                want.setdefault(m.query, []).append(match_id(m))
        client.advance(1e6, force=True)
        assert client.drained(timeout=30)
        got = {f"u{j}": sorted(r["id"] for r in read_all(client, f"u{j}"))
               for j in range(len(constants))}
        groups = [g for a in client.stats()["actors"].values() for g in a["groups"]]
        assert any(len(g["queries"]) == len(constants) for g in groups), groups
    finally:
        cluster.stop()
    for m in eng.advance(math.inf):
        want.setdefault(m.query, []).append(match_id(m))
    assert got == {name: sorted(ids) for name, ids in want.items()}
    assert len({len(v) for v in got.values()}) > 2, "the constants must give other matches"


def test_a_removed_pessimistic_query_releases_what_one_engine_released():
    """A case the property test found with new draws (seed 18): in the request holding
    ``e09`` (another key, another actor), ``e02`` comes after it and 4 s behind it. One
    engine scores that, and its adaptive slack grows; the actor did not see ``e09`` and took
    ``e02`` in order, so its watermark ran ahead and released 36 matches of the pessimistic
    SLIDE query before its removal that one engine had not (the gateway now sends the time
    before such a row: ``routing.behind_steps``)."""
    from types import SimpleNamespace
    from test_sharing import Member

    def ev(t, ts, i, k=0):
        return Event(t, float(ts), {"x": 0, "y": 0, "k": k, "s": "p"}, key=k, id=i)
    events = [ev("A", 0, "e01"), ev("B", 0, "e02"), *(ev("A", 0, f"e0{i}") for i in range(3, 9)),
              ev("A", 1, "e00"), ev("A", 4, "e09", k=2), ev("A", 5, "e10"), ev("A", 7, "e11"),
              ev("A", 10, "e12"), ev("A", 10, "e13")]
    by_id = {e.id: e for e in events}
    arrivals = [by_id[i] for i in ("e01", "e03", "e04", "e05", "e06", "e07", "e08", "e00",
                                   "e09", "e00", "e02", "e11", "e12", "e13", "e10")]
    query = parse_query("PATTERN SEQ(a, A b, SEQ(A c, SEQ(A d, A e))) WHERE [k] "
                        "WITHIN W SLIDE 0.5 seconds")
    case = SimpleNamespace(
        events=events, arrivals=arrivals, keyed=True, cuts=[], restore_at=None, slack=9.5,
        evict_every=2, members=[Member("u0", query, {"W": 1}, None, "pessimistic",
                                       added=0, removed=13, variant=False)],
        order=[0], batches=[4], producers=1, partitions=2, seed=4, retain=0.0, tables=False,
        rescales=[])
    assert partition_of(0, 2) != partition_of(2, 2)
    check(case, cluster_outputs(case), engine_outputs(case))
