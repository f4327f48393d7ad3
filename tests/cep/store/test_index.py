"""The shared event index: ordering, late inserts, duplicates, ranges, eviction."""
import random

from raycep.cep.event import Event
from raycep.cep.store.index import ALL, SharedEventIndex, TimeBuffer

CHUNK = 128     # sizes below are multiples of what used to be a chunk of the buffer


def ev(t, ts, key=None, eid=None, **attrs):
    return Event(t, float(ts), attrs, key, eid)


def test_in_order_and_late_inserts_keep_ts_id_order():
    rng = random.Random(7)
    events = [ev("A", rng.randint(0, 500), eid=f"e{i:05d}") for i in range(5 * CHUNK)]
    buf = TimeBuffer()
    for e in events:
        assert buf.insert(e)
    assert len(buf) == len(events)
    assert [e.order for e in buf] == sorted(e.order for e in events)


def test_duplicates_are_dropped_by_type_ts_and_id():
    idx = SharedEventIndex()
    a = ev("A", 1, x=1)
    assert idx.insert(a)
    assert not idx.insert(ev("A", 1, x=1))          # same content -> same derived id
    assert idx.insert(ev("A", 1, x=2))              # different content
    assert idx.insert(ev("B", 2, eid="k"))
    assert not idx.insert(ev("B", 2, eid="k"))      # given id, replayed
    assert idx.duplicates == 2
    assert len(idx) == 3


def test_range_and_count_by_bisection():
    buf = TimeBuffer()
    for i in range(3000):
        buf.insert(ev("A", i))
    got = buf.range(100, 1200)
    assert [e.ts for e in got] == [float(i) for i in range(100, 1201)]
    assert buf.count(100, 1200) == 1101
    assert buf.range(5000, 6000) == [] and buf.count(-10, -1) == 0


def test_partition_buffers_and_eviction():
    idx = SharedEventIndex(key_attr="k")
    for i in range(100):
        idx.insert(ev("A", i, key=i % 4, k=i % 4))
    assert len(idx.buffer(ALL, "A")) == 100
    assert len(idx.buffer(1, "A")) == 25
    dropped = idx.evict_before(50)
    assert dropped == 50 and len(idx) == 50
    assert all(e.ts >= 50 for e in idx.buffer(2, "A"))
    idx.evict_before(1000)
    assert idx.buffer(ALL, "A") is None and len(idx) == 0


def test_any_type_buffer_is_built_on_demand():
    idx = SharedEventIndex()
    idx.insert(ev("A", 1))
    idx.insert(ev("B", 2))
    idx.enable_any()
    idx.insert(ev("C", 3))
    assert [e.type for e in idx.buffer(ALL, None)] == ["A", "B", "C"]


def test_select_compares_column_wise_like_a_plain_filter():
    import operator
    rng = random.Random(11)
    buf = TimeBuffer()
    kinds = [lambda: rng.randint(0, 9), lambda: rng.random() * 10]
    for i in range(6 * CHUNK):
        # most chunks hold numbers only; a few values of other kinds make some chunks fall back
        attrs = {"v": rng.choice(kinds)()}
        if i in (700, 1900):
            attrs = {"v": "text"}
        if i in (1200,):
            attrs = {}
        if i in (2600,):
            attrs = {"v": True}
        buf.insert(ev("A", i * 0.5, eid=f"e{i:05d}", **attrs))
    for op in (operator.lt, operator.le, operator.gt, operator.ge):
        for lo, hi, value in ((0, 10_000, 4.5), (100.25, 900, 3), (333, 1500.5, 7.0)):
            selected, n, unchecked = buf.select(lo, hi, "v", op, value)
            in_range = buf.range(lo, hi)
            assert n == len(in_range)
            assert all(e in in_range for e in selected + unchecked)
            checked = [e for e in in_range if e not in unchecked]
            assert selected == [e for e in checked if op(e.attrs["v"], value)]
            # every chunk with a non-number (and the growing last chunk) is left to the caller
            for e in in_range:
                if e.attrs.get("v").__class__ not in (int, float):
                    assert e in unchecked


def test_per_key_buffers_exist_only_while_a_query_reads_per_key():
    """Without a partitioned query a keyed event is indexed once (under ALL); a partitioned
    query added later finds the buffered events under their keys (the buffers are rebuilt),
    so, with a retention that lets it read them (Engine.add_query), it matches exactly as if
    it had been registered from the start."""
    from raycep.cep.runtime.engine import Engine

    rnd = random.Random(5)
    keys = [rnd.choice("xy") for _ in range(400)]
    events = [Event(rnd.choice("AB"), float(i), {"v": rnd.randrange(5), "k": k}, key=k)
              for i, k in enumerate(keys)]
    glob = "PATTERN SEQ(A a, B b) WHERE a.v < b.v WITHIN 5 seconds"
    keyed = "PATTERN SEQ(A a, B b) WHERE [k] AND a.v < b.v WITHIN 5 seconds"
    eng = Engine(key_attr="k", retain=10.0)
    eng.add_query(glob, name="g")
    for ev in events[:200]:
        eng.process(ev)
    assert not eng.index.keep_keys
    assert {p for p, _ in eng.index._buffers} == {ALL}
    eng.add_query(keyed, name="p")
    assert eng.index.keep_keys and eng.index.partitions() == 2
    late = [m for ev in events[200:] for m in eng.process(ev) if m.query == "p"]
    ref = Engine(key_attr="k")
    ref.add_query(keyed, name="p")
    expect = [m for i, ev in enumerate(events) for m in ref.process(ev) if i >= 200]
    assert {m.key() for m in late} == {m.key() for m in expect} and expect
    eng.remove_query("p")
    assert not eng.index.keep_keys and eng.index.partitions() == 0


def test_evicted_rows_come_from_the_columns_without_making_events():
    """What a checkpoint writes of evicted events (``EvictedRows.rows``): each event's
    ``[type, ts, key, attrs, id]`` as its Event would give it (absent attributes, given and
    derived ids, keys), read from its batch's columns without making the Event; a row whose
    Event was made (the truth for its row) gives that one's."""
    from raycep.cep.event import event_row
    from raycep.cep.store.batch import ColumnBatch
    from raycep.cep.store.index import EvictedRows
    source = [Event("A", 1.0, {"x": 1, "s": "p"}, key="k1", id="a1"),
              Event("B", 2.0, {"x": 2.5}, key="k2"),
              Event("A", 3.0, {"s": "q", "y": True}, key="k1", id="a3"),
              Event("B", 4.0, {}, key=None)]
    batch = ColumnBatch.from_events(source)
    rows = EvictedRows([e.ts for e in source], [None] * 4, [batch] * 4, [0, 1, 2, 3])
    made = batch.event(2)                            # made elsewhere: the truth for row 2
    made.attrs["s"] = "changed"
    got = rows.rows()
    assert [batch.objs[i] is None for i in range(4)] == [True, True, False, True]
    want = [event_row(e) for e in source]
    want[2] = event_row(made)
    assert got == want and got[1][4] is None and got[0][2] == "k1"
    assert got == [event_row(e) for e in rows.events()]
