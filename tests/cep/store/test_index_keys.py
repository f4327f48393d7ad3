"""SharedEventIndex per partition key (re-partitioning, issue 38): ``key_events`` gives the
events of some keys, ``drop_keys`` forgets them, ``take_over``, ``merge_in`` and ``add_evicted``
move what one index holds into another. In every buffer layout (per key, all partitions, both, every
type too), events indexed one by one or as column-batch rows: the index left equals one
built from the events that stay, and one that takes it over answers as it did."""
from __future__ import annotations

import random

import pytest

from raycep.cep.event import Event
from raycep.cep.store.batch import ColumnBatch
from raycep.cep.store.index import ALL, SharedEventIndex

LAYOUTS = [  # (keep_all, keep_keys, keep_any)
    (False, True, False), (True, True, False), (True, False, False), (True, True, True)]


def stream(seed: int, n: int = 300) -> list:
    rng = random.Random(seed)
    out, ts = [], 0.0
    for j in range(n):
        ts += rng.choice([0.0, 0.5, 1.0])
        key = rng.choice(["a", "b", "c", "d", None])
        attrs = {"x": rng.randint(0, 9)}
        if key is not None:
            attrs["k"] = key
        out.append(Event(rng.choice("ABC"), ts, attrs, key=key,
                         id=f"e{j}" if rng.random() < 0.5 else None))
    return sorted(out, key=lambda e: (e.ts, e.id))        # (ts, id) order, as indexed


def index(layout: tuple, events: list, rows: bool) -> SharedEventIndex:
    keep_all, keep_keys, keep_any = layout
    idx = SharedEventIndex("k")
    idx.set_keep_all(keep_all)
    idx.set_keep_keys(keep_keys)
    if keep_any:
        idx.enable_any()
    if rows:
        batch = ColumnBatch.from_events(events)
        batch.key_by("k")
        idx.extend_rows(batch, batch.groups(0, len(events)))
    else:
        for ev in events:
            idx.insert(ev)
    return idx


def held(idx: SharedEventIndex) -> dict:
    """Every buffer's events, as (ts, id) in order."""
    return {k: [(e.ts, e.id) for e in buf] for k, buf in idx._buffers.items() if len(buf)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_keys_dropped_and_taken_over_leave_what_the_events_that_stay_build(layout, rows, seed):
    events = stream(seed)
    idx = index(layout, events, rows)
    assert idx.keys() == {e.key for e in events}
    moving = {"a", "c", None} if seed == 1 else {"b"}
    got = idx.key_events(moving)
    assert sorted((e.ts, e.id) for e in got) == \
        sorted((e.ts, e.id) for e in events if e.key in moving)      # each once
    assert [e.ts for e in got] == sorted(e.ts for e in got)          # in time order
    stay = [e for e in events if e.key not in moving]
    assert idx.drop_keys(moving) == len(events) - len(stay)
    assert held(idx) == held(index(layout, stay, False))
    assert len(idx) == len(stay) and idx.keys() == {e.key for e in stay}
    other = index(layout, [], False)
    other.take_over(idx)
    other.merge_in(got)                  # (the events of one time in another order too)
    assert held(other) == held(index(layout, events, False))
    assert [e.ts for e in other.events_of("A", -1, 1e9)] is not None
    assert other.buffer(ALL, "A") is not None or not layout[0]


def test_evicted_events_added_are_remembered_numbered_after_and_the_oldest_forgotten_first():
    events = stream(3)
    idx = index((False, True, False), events, False)
    idx.evict_before(40.0)
    gone = [e for e in events if e.ts < 40.0]
    other = index((False, True, False), [], False)
    extra = [Event("A", 5.0 + j, {"k": "z", "x": j}, key="z", id=f"z{j}") for j in range(10)]
    other.take_over(idx)
    other.add_evicted([extra])
    assert all(other.seen_before(e) for e in gone + extra)
    assert not other.seen_before(Event("A", 5.0, {"k": "z", "x": 99}, key="z", id="new"))
    # the lists added are numbered after those it had (a checkpoint writes them as new);
    # over the limit, the oldest lists are forgotten first
    first, total = other.evicted_span()
    assert total == idx.evicted_span()[1] + 1 and other._gone[-1].events() == extra
    oldest = other._gone[0]
    other.remember_ids = other._gone_n - len(oldest) + 1     # room for all but that list
    other.add_evicted([[Event("B", 39.0, {"k": "y", "x": 1}, key="y", id="y0")]])
    assert oldest not in other._gone and other.evicted_span()[0] == first + 1
    assert all(other.seen_before(e) for e in extra) and other.seen_before(gone[-1])


@pytest.mark.parametrize("before", LAYOUTS)
@pytest.mark.parametrize("after", LAYOUTS)
@pytest.mark.parametrize("rows", [False, True])
def test_an_index_of_another_layout_is_taken_over_in_the_layout_of_the_one_taking_it(
        before, after, rows):
    """A re-partitioning's actor keeps its index while its queries may have changed it: an
    every-type buffer kept once a query needed it (kept after that query is removed, as a
    live index keeps it), the all-partitions or per-key buffers changed. The index taken
    over holds what one of the new layout built from the same events holds (with the
    every-type buffers where either kept them)."""
    events = stream(4)
    old = index(before, events, rows)
    new = index(after, [], False)
    new.take_over(old)
    want = index((after[0], after[1], after[2] or before[2]), events, False)
    assert held(new) == held(want)
    assert (new.keep_all, new.keep_keys, new.keep_any) == \
        (want.keep_all, want.keep_keys, want.keep_any)
    later = Event("A", 1e6, {"k": "a", "x": 1}, key="a", id="later")
    new.insert(later)
    want.insert(later)
    assert held(new) == held(want)


def test_an_index_keyed_by_another_attribute_is_refused():
    from raycep.cep.errors import CepError
    with pytest.raises(CepError, match="keyed by 'k'"):
        SharedEventIndex("sym").take_over(index(LAYOUTS[0], stream(5, 20), False))
