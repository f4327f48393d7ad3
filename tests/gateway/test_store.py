"""MatchStore: cursors, duplicates, drop-oldest with counters, the JSONL sink and wait()."""
import asyncio
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raycep.gateway.server.store import MatchStore


def _m(i, query="q1"):
    return {"id": f"m{i}", "query": query, "bindings": {"a": i}}


def _ids(result):
    return [r["id"] for r in result["matches"]]


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        MatchStore(capacity=0)


def test_cursors_start_at_one_and_increase_and_caller_dict_is_not_mutated():
    store = MatchStore()
    store.open("q1")
    store.open("q1")  # idempotent: must not reset the stream
    records = [_m(1), _m(2)]
    assert store.put("q1", records) == 2
    assert store.put("q1", [_m(3)]) == 1
    assert "cursor" not in records[0]
    out = store.read("q1")
    assert [r["cursor"] for r in out["matches"]] == [1, 2, 3]
    assert out["matches"][0]["bindings"] == {"a": 1}
    assert out["next"] == 3 and out["head"] == 3 and out["missed"] == 0
    assert store.queries() == ["q1"]


def test_read_since_limit_and_beyond_head():
    store = MatchStore()
    store.open("q1")
    store.put("q1", [_m(i) for i in range(1, 11)])
    page = store.read("q1", since=2, limit=3)
    assert _ids(page) == ["m3", "m4", "m5"] and page["next"] == 5 and page["head"] == 10
    page = store.read("q1", since=page["next"], limit=100)
    assert _ids(page) == [f"m{i}" for i in range(6, 11)] and page["next"] == 10
    empty = store.read("q1", since=50)
    assert empty["matches"] == [] and empty["next"] == 50 and empty["head"] == 10
    assert _ids(store.read("q1", since=-5, limit=1)) == ["m1"]


def test_read_unknown_query_raises_key_error():
    store = MatchStore()
    with pytest.raises(KeyError):
        store.read("nope")
    with pytest.raises(KeyError):
        store.stats("nope")


def test_duplicates_by_id_are_not_appended():
    store = MatchStore()
    store.open("q1")
    assert store.put("q1", [_m(1), _m(2)]) == 2
    assert store.put("q1", [_m(2), _m(3), _m(3)]) == 1
    assert _ids(store.read("q1")) == ["m1", "m2", "m3"]
    stats = store.stats("q1")
    assert stats["duplicates"] == 2 and stats["head"] == 3 and stats["stored"] == 3


def test_drop_oldest_counts_and_reports_missed():
    store = MatchStore(capacity=3)
    store.open("q1")
    assert store.put("q1", [_m(i) for i in range(1, 8)]) == 7
    assert store.stats("q1") == {"stored": 3, "total": 7, "dropped": 4, "duplicates": 0,
                                 "head": 7}
    out = store.read("q1", since=0)
    assert _ids(out) == ["m5", "m6", "m7"] and out["missed"] == 4
    assert store.read("q1", since=2)["missed"] == 2
    assert store.read("q1", since=4)["missed"] == 0
    assert store.read("q1", since=5)["missed"] == 0
    # a dropped id is no longer retained, so its redelivery is appended again
    assert store.put("q1", [_m(1)]) == 1


def test_drop_warning_is_logged_once_per_capacity_drops(caplog):
    store = MatchStore(capacity=5)
    store.open("slow")
    with caplog.at_level(logging.WARNING, logger="raycep.gateway"):
        store.put("slow", [_m(i) for i in range(5)])
        assert not caplog.records
        store.put("slow", [_m(i) for i in range(5, 9)])  # 4 drops
        assert len(caplog.records) == 1
        store.put("slow", [_m(i) for i in range(9, 16)])  # 11 drops in all
    warnings = [r for r in caplog.records if r.name == "raycep.gateway"]
    assert len(warnings) == 3  # drops 1, 6 and 11
    text = warnings[0].getMessage()
    assert "'slow'" in text and "capacity 5" in text and "JSONL" in text and "slow" in text
    assert "dropped 11" in warnings[-1].getMessage()


def test_orphans_for_unknown_and_closed_queries():
    store = MatchStore()
    assert store.put("ghost", [_m(1), _m(2)]) == 0
    store.open("q1")
    store.put("q1", [_m(1)])
    store.close("q1")
    assert store.put("q1", [_m(3)]) == 0
    assert store.orphans == 3
    assert store.queries() == []
    with pytest.raises(KeyError):
        store.read("q1")


def test_reopened_query_does_not_reuse_cursors():
    store = MatchStore()
    store.open("q1")
    store.put("q1", [_m(1), _m(2)])
    store.close("q1")
    store.open("q1")
    store.put("q1", [_m(1)])
    out = store.read("q1")
    assert [r["cursor"] for r in out["matches"]] == [3]
    assert out["missed"] == 0 and store.stats("q1")["total"] == 1


def test_jsonl_sink_keeps_every_match_even_when_dropped(tmp_path):
    path = tmp_path / "sink" / "matches.jsonl"
    store = MatchStore(capacity=2, jsonl_path=str(path))
    store.open("q1")
    store.put("q1", [_m(i) for i in range(1, 6)])
    store.put("q1", [_m(5)])  # duplicate: not written
    lines = path.read_text().splitlines()  # flushed: readable before close_sink
    assert [json.loads(line)["id"] for line in lines] == [f"m{i}" for i in range(1, 6)]
    assert [json.loads(line)["cursor"] for line in lines] == [1, 2, 3, 4, 5]
    # compact JSON: the record as it came, its cursor last
    assert lines[0] == json.dumps({**_m(1), "cursor": 1}, separators=(",", ":"))
    assert store.stats("q1")["dropped"] == 3
    store.close_sink()
    store.put("q1", [_m(6)])  # reopens in append mode
    store.close_sink()
    assert len(path.read_text().splitlines()) == 6


def test_sink_gets_every_record_of_a_put_far_above_capacity_once(tmp_path):
    """A flood in one put: the store keeps the newest ``capacity`` (drop-oldest is for
    readers), the sink gets every record once, repeats within the put included."""
    path = tmp_path / "matches.jsonl"
    store = MatchStore(capacity=10, jsonl_path=str(path))
    store.open("q1")
    records = [_m(i) for i in range(5000)] + [_m(7), _m(4999)]
    assert store.put("q1", records) == 5000
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == [f"m{i}" for i in range(5000)]
    assert store.stats("q1") == {"stored": 10, "total": 5000, "dropped": 4990,
                                 "duplicates": 2, "head": 5000}
    assert _ids(store.read("q1", since=0)) == [f"m{i}" for i in range(4990, 5000)]


def test_a_failed_sink_write_changes_nothing(tmp_path):
    """The sink is written before the store retains anything: when the write fails, the
    caller (the gateway's drain) does not acknowledge, puts again, and the sink then gets
    every record exactly once."""
    store = MatchStore(capacity=3, jsonl_path=str(tmp_path))     # a directory: open fails
    store.open("q1")
    with pytest.raises(OSError):
        store.put("q1", [_m(i) for i in range(5)])
    assert store.stats("q1") == {"stored": 0, "total": 0, "dropped": 0, "duplicates": 0,
                                 "head": 0}
    store.jsonl_path = str(tmp_path / "matches.jsonl")
    assert store.put("q1", [_m(i) for i in range(5)]) == 5
    lines = (tmp_path / "matches.jsonl").read_text().splitlines()
    assert [json.loads(line)["cursor"] for line in lines] == [1, 2, 3, 4, 5]


def test_wait_returns_true_immediately_when_already_ahead():
    store = MatchStore()
    store.open("q1")
    store.put("q1", [_m(1)])
    assert asyncio.run(store.wait("q1", since=0, timeout=0.0)) is True


def test_wait_wakes_on_a_later_put():
    store = MatchStore()  # constructed outside any event loop
    store.open("q1")

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, store.put, "q1", [_m(1)])
        woke = await store.wait("q1", since=0, timeout=5.0)
        return woke, store.read("q1")["head"]

    woke, head = asyncio.run(main())
    assert woke is True and head == 1                 # woken by the put, not the timeout


def test_wait_ignores_puts_at_or_below_since_and_times_out():
    store = MatchStore()
    store.open("q1")
    store.put("q1", [_m(1)])

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, store.put, "q1", [_m(1)])  # duplicate: head stays 1
        return await store.wait("q1", since=1, timeout=0.1)

    assert asyncio.run(main()) is False


def test_wait_returns_false_when_query_closed():
    store = MatchStore()
    store.open("q1")

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, store.close, "q1")
        woke = await store.wait("q1", since=0, timeout=5.0)
        return woke, store.queries()

    woke, open_queries = asyncio.run(main())
    assert woke is False and open_queries == []       # woken by the close
    assert asyncio.run(store.wait("unknown", since=0, timeout=1.0)) is False


def test_a_new_store_on_the_same_sink_does_not_write_its_records_again(tmp_path):
    """A restarted gateway receives the matches its predecessor wrote but had not yet
    acknowledged: the sink's tail is read back, so they are not written twice; a line torn
    by the crash stays a line of its own."""
    sink = tmp_path / "matches.jsonl"
    first = MatchStore(jsonl_path=str(sink))
    first.open("q")
    first.put("q", [{"id": f"m{i}", "query": "q"} for i in range(5)]
              + [{"id": "m0", "query": "q", "retracted": True}])
    first.close_sink()
    with open(sink, "a", encoding="utf-8") as f:
        f.write('{"id": "torn", "qu')                    # a line cut by the crash
    again = MatchStore(jsonl_path=str(sink))
    again.open("q")
    assert again.put("q", [{"id": "m3", "query": "q"},
                           {"id": "m0", "query": "q", "retracted": True},
                           {"id": "m5", "query": "q"}]) == 1
    again.close_sink()
    lines = sink.read_text(encoding="utf-8").splitlines()
    assert lines[-2] == '{"id": "torn", "qu'
    assert [json.loads(line)["id"] for line in lines[:-2] + lines[-1:]] == \
        ["m0", "m1", "m2", "m3", "m4", "m0", "m5"]


@settings(max_examples=200, deadline=None)
@given(pages=st.lists(st.tuples(
    st.sampled_from(["q1", "q2"]), st.booleans(),     # (every record with an id?)
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 30)), st.booleans()),
             max_size=12)), max_size=12),
    capacity=st.integers(1, 8), sink=st.booleans())
def test_put_raw_keeps_what_a_record_by_record_store_keeps(tmp_path_factory, pages, capacity,
                                                          sink):
    """``put_raw`` (a page without duplicates appended at once, else record by record)
    against a plain model: per query, each record not retained when the page came, not
    earlier in its page and not in the sink gets the next cursor; the newest ``capacity``
    are kept; the sink holds every appended record once, as its line."""
    path = tmp_path_factory.mktemp("sink") / "m.jsonl" if sink else None
    store = MatchStore(capacity=capacity, jsonl_path=str(path) if path else None)
    model = {q: {"head": 0, "kept": [], "dups": 0} for q in ("q1", "q2")}
    written, lines = set(), []
    for q in model:
        store.open(q)
    for n, (query, with_ids, items) in enumerate(pages):
        if with_ids:
            items = [x for x in items if x[0] is not None]
        idents, datas = [], []
        for k, (i, retracted) in enumerate(items):
            ident = None if i is None else ("retracted:" if retracted else "") + f"m{i}"
            idents.append(ident)
            datas.append(json.dumps({"query": query, "page": n, "at": k},
                                    separators=(",", ":")).encode())
        m, seen = model[query], set()
        retained = {x for _, x, _ in m["kept"]}
        for ident, data in zip(idents, datas):
            if ident is not None and (ident in retained or ident in seen or ident in written):
                m["dups"] += 1
                continue
            if ident is not None:
                seen.add(ident)
            m["head"] += 1
            m["kept"] = (m["kept"] + [(m["head"], ident, data)])[-capacity:]
            lines.append(data[:-1] + b',"cursor":%d}' % m["head"])
        if sink:
            written |= seen
        assert store.put_raw(query, idents, datas) == len(seen) + sum(
            1 for x in idents if x is None)
    for q, m in model.items():
        got = store.read(q, since=0, limit=100)["matches"]
        assert [(r.pop("cursor"), r) for r in got] == \
            [(c, json.loads(d)) for c, _, d in m["kept"]]
        assert store.stats(q)["duplicates"] == m["dups"]
        assert store.stats(q)["head"] == m["head"]
    if sink:
        assert (path.read_bytes().splitlines() if path.exists() else []) == lines


@given(n=st.integers(0, 40), capacity=st.integers(1, 30), since=st.integers(-2, 45),
       limit=st.integers(0, 45))
def test_read_gives_the_retained_records_after_the_cursor_in_order(n, capacity, since, limit):
    """A page is the retained records with cursor > ``since``, oldest first, at most
    ``limit`` (read from whichever end of the store is nearer)."""
    store = MatchStore(capacity=capacity)
    store.open("q")
    store.put("q", [_m(i, "q") for i in range(1, n + 1)])
    retained = list(range(max(1, n - capacity + 1), n + 1))
    want = [c for c in retained if c > since][:limit]
    page = store.read("q", since, limit)
    assert [m["cursor"] for m in page["matches"]] == want
    assert [m["id"] for m in page["matches"]] == [f"m{c}" for c in want]
