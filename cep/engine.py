"""Engine: one shared event index and many pattern managers, push-based.

``process(event) -> matches``, ``advance(watermark) -> matches``, ``snapshot()``/``restore()``.
Queries are added and removed at any time between two events. The index keeps what the largest
registered window needs behind the event-time clock (plus what pending work still reads).
"""
from __future__ import annotations

import math

from cep import ast
from cep.compiler import compile_query
from cep.errors import CepError, QueryValidationError
from cep.event import Event
from cep.index import SharedEventIndex
from cep.manager import ManagerSettings, PatternManager

EVICT_EVERY = 4096


class Engine:
    def __init__(self, key_attr: str | None = None, settings: ManagerSettings | None = None,
                 retention_slack: float = 0.0):
        self.index = SharedEventIndex(key_attr)
        self.settings = settings or ManagerSettings()
        self.retention_slack = retention_slack
        self.managers: dict = {}          # name -> PatternManager
        self._sources: dict = {}          # name -> (Query, params)
        self._by_type: dict = {}          # event type -> [PatternManager]
        self._any: list = []              # managers triggered by every type
        self._busy: set = set()           # managers with matches or triggers waiting
        self.clock = -math.inf
        self.late_events = 0

    # ---------------------------------------------------------------- queries
    def add_query(self, query, name: str | None = None, params: dict | None = None,
                  order: tuple | None = None) -> str:
        """Register a query (text or ``cep.ast.Query``); returns its name."""
        if isinstance(query, str):
            from cep.parser import parse_query
            query = parse_query(query)
        if not isinstance(query, ast.Query):
            raise QueryValidationError(f"expected query text or a Query, got {type(query).__name__}")
        name = name or query.name or f"q{len(self.managers) + 1}"
        if name in self.managers:
            raise QueryValidationError(f"a query named {name!r} is already registered")
        cq = compile_query(query, params)
        manager = PatternManager(name, cq, self.index, order, self.settings)
        manager.clock = self.clock
        self.managers[name] = manager
        self._sources[name] = (query, dict(params or {}))
        if None in cq.types:
            self.index.enable_any()
        self._reindex()
        return name

    def remove_query(self, name: str):
        """Unregister a query; its pending matches are dropped with it."""
        if name not in self.managers:
            raise CepError(f"no query named {name!r} is registered")
        self._busy.discard(self.managers.pop(name))
        del self._sources[name]
        self._reindex()

    def _reindex(self):
        """Dispatch each event type to the queries it can trigger; keep the all-partitions
        buffers only while some query reads across partitions."""
        self._by_type, self._any = {}, []
        for m in self.managers.values():
            if None in m.trigger_types:
                self._any.append(m)
            for t in m.trigger_types - {None}:
                self._by_type.setdefault(t, []).append(m)
        for t, ms in self._by_type.items():
            ms.extend(m for m in self._any if m not in ms)
        self.index.set_keep_all(not self.managers or any(
            not m.partitioned or m.cq.strategy != "skip_till_any_match"
            for m in self.managers.values()))

    @property
    def horizon(self) -> float:
        """How far behind the clock events are kept: the largest window (+ slide, + slack)."""
        return max((m.cq.window + (m.cq.slide or 0.0) for m in self.managers.values()),
                   default=0.0) + self.retention_slack

    # ---------------------------------------------------------------- input
    def process(self, event: Event) -> list:
        """Index ``event`` and return the matches it completes (and those it releases)."""
        index = self.index
        if not index.insert(event):
            return []
        out: list = []
        if event.ts > self.clock:
            self.clock = event.ts
            if self._busy:
                for m in list(self._busy):
                    out.extend(m.tick(event.ts))
                    if not m.busy:
                        self._busy.discard(m)
        elif event.ts < self.clock:
            self.late_events += 1
        for m in self._by_type.get(event.type, self._any):
            found = m.process(event)
            if found:
                out.extend(found)
            if m.busy:
                self._busy.add(m)
        if not index.inserted % EVICT_EVERY:
            self.evict()
        return out

    def advance(self, watermark: float) -> list:
        """No event with ``ts <= watermark`` will arrive any more."""
        out: list = []
        for m in self.managers.values():
            out.extend(m.advance(watermark))
        self._busy = {m for m in self.managers.values() if m.busy}
        if watermark > self.clock:
            self.clock = watermark
        if math.isfinite(watermark):
            self.evict()
        return out

    @property
    def events(self) -> int:
        """Events processed (duplicates not counted)."""
        return self.index.inserted

    def evict(self) -> int:
        """Drop events no registered query can use any more."""
        if not self.managers or not math.isfinite(self.clock):
            return 0
        cutoff = self.clock - self.horizon
        for m in self.managers.values():
            floor = m.retention_floor()
            if floor is not None and floor < cutoff:
                cutoff = floor
        return self.index.evict_before(cutoff)

    # ---------------------------------------------------------------- state
    def stats(self) -> dict:
        return {
            "events": self.events, "late_events": self.late_events, "buffered": len(self.index),
            "duplicates": self.index.duplicates, "evicted": self.index.evicted,
            "queries": {name: m.stats() for name, m in self.managers.items()},
        }

    def snapshot(self) -> dict:
        """Everything needed to continue elsewhere: events, queries, plans, pending matches."""
        return {
            "key_attr": self.index.key_attr, "clock": self.clock, "events_seen": self.events,
            "events": list(self.index.events()),
            "queries": {name: {"query": q, "params": p, "state": self.managers[name].snapshot()}
                        for name, (q, p) in self._sources.items()},
        }

    @classmethod
    def restore(cls, snap: dict, settings: ManagerSettings | None = None) -> "Engine":
        engine = cls(snap["key_attr"], settings)
        for name, entry in snap["queries"].items():
            engine.add_query(entry["query"], name=name, params=entry["params"])
            engine.managers[name].restore(entry["state"])
        for ev in snap["events"]:
            engine.index.insert(ev)
        engine.clock = snap["clock"]
        engine.index.inserted = snap["events_seen"]
        engine._busy = {m for m in engine.managers.values() if m.busy}
        return engine
