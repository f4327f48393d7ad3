"""Outboxes.drain shared by concurrent callers (issue 36): a caller never takes the result of
a drain that began before it came, so its records are stored when its drain returns.

An actor double whose ``drain`` computes its page when called and answers only when the test
lets it: the order of events at a real actor (a drain call served before an ingest that
finishes while the answer travels back) made deterministic."""
import asyncio

import orjson

from raycep.gateway.server.drain import Outboxes
from raycep.gateway.server.settings import GatewaySettings
from raycep.gateway.server.store import MatchStore


class _Actor:
    def __init__(self):
        self.outbox: list = []          # (seq, record bytes)
        self.seq = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls = 0

    def add(self, n: int) -> list:
        ids = []
        for _ in range(n):
            self.seq += 1
            ids.append(f"m{self.seq}")
            self.outbox.append((self.seq, orjson.dumps({"id": f"m{self.seq}", "query": "q"})))
        return ids

    async def drain(self, ack: int, limit: int) -> dict:
        self.calls += 1
        self.outbox = [(s, r) for s, r in self.outbox if s > ack]
        page = self.outbox[:limit]
        answer = {"records": [r for _, r in page], "names": ["q"], "queries": [0] * len(page),
                  "ids": [orjson.loads(r)["id"] for _, r in page],
                  "last": page[-1][0] if page else ack, "pending": len(self.outbox) > limit}
        await self.gate.wait()
        return answer


class _Actors:
    def __init__(self, actor):
        self.actor = actor
        self.targets = {0: actor}

    async def call(self, target, method, *args):
        return await getattr(self.targets[target], method)(*args)


def _stored(store) -> set:
    return {orjson.loads(r)["id"] if isinstance(r, (bytes, str)) else r["id"]
            for r in store.read("q", 0, 10_000)["matches"]}


def test_a_caller_waits_for_a_drain_that_starts_after_it_came():
    async def scenario():
        actor = _Actor()
        store = MatchStore()
        store.open("q")
        boxes = Outboxes(_Actors(actor), store, GatewaySettings(port=0, registry_path=None))
        first_ids = actor.add(3)
        actor.gate.clear()
        first = asyncio.ensure_future(boxes.drain(0))      # its page computed, held back
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert actor.calls == 1
        late_ids = actor.add(2)                             # an ingest done meanwhile
        second = asyncio.ensure_future(boxes.drain(0))      # must not take the first's result
        third = asyncio.ensure_future(boxes.drain(0))       # shares the second
        await asyncio.sleep(0)
        actor.gate.set()
        await first
        assert set(first_ids) <= _stored(store)
        await second
        assert set(late_ids) <= _stored(store)
        await third
        for _ in range(5):                                  # the last acknowledgement
            await asyncio.sleep(0)
        assert actor.outbox == []
        return actor.calls

    calls = asyncio.run(scenario())
    # first: a page and its acknowledgement; second and third together: the same
    assert calls == 4
