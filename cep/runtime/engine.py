"""Engine: one shared event index and many pattern managers, push-based.

``process(event, source) -> matches``, ``advance(watermark) -> matches``, ``take_late()``,
``snapshot()``/``restore()``. Queries are added and removed at any time between two events.
The index keeps what the largest registered window needs behind the watermark (plus what
pending work still reads).

Out-of-order input (cep.store.disorder): an event behind the clock is scored; a late one (above its
stream's threshold, or older than what the engine can still use exactly: ``_floor``) is kept
for ``take_late()`` and used by no query; a copy of a buffered or recently evicted event is a
duplicate and dropped; any other is indexed and the optimistic queries correct their results
(``Retraction`` records, then new matches).
Pessimistic queries are released as the watermark moves.

With ``sharing`` (the default) queries that differ only in constants are evaluated as one
group (cep.runtime.groups): ``managers[name]`` is then the group's manager, shared by its members.
"""
from __future__ import annotations

import logging
import math
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import compress
from operator import and_, attrgetter, le, or_
from time import perf_counter

from raycep.cep.errors import CepError, QueryValidationError
from raycep.cep.evaluation.manager import ManagerSettings, PatternManager
from raycep.cep.evaluation.prefixes import SharedPrefixes
from raycep.cep.event import Event, keyed_event, keyed_events
from raycep.cep.lang import ast
from raycep.cep.lang.compiler import compile_query
from raycep.cep.match import MatchBlock, MatchMix
from raycep.cep.runtime.groups import GroupManager, signature
from raycep.cep.runtime.unseen import Seen, Teller, never_held, reads
from raycep.cep.store.disorder import (DEFAULT_SOURCE, DisorderSettings, DisorderTracker, LateEvent,
                                       check_mode)
from raycep.cep.store.index import SharedEventIndex

log = logging.getLogger("raycep")

EVICT_EVERY = 4096
#: the fewest triggers in a chunk evaluated in bulk (cep.evaluation.bulk): below, numpy's per-call
#: cost is more than the evaluator's per-trigger cost
BULK_TRIGGERS = 2
_TYPE, _TS = attrgetter("type"), attrgetter("ts")


def check_retain(retain) -> float:
    """A retention (``Engine(retain=...)``, ``raycep serve --retain``): seconds of event time
    the index keeps behind the watermark even when no query needs them, so a query
    registered later finds that much history (its first matches may use events from before
    its registration). A finite number >= 0; 0 (the default) keeps only what the registered
    queries' windows need, and nothing with no query."""
    if isinstance(retain, bool) or not isinstance(retain, (int, float)) \
            or not (0 <= retain < math.inf):
        raise CepError(f"retain must be a finite number of seconds >= 0, got {retain!r}")
    return float(retain)


class Engine:
    """A complex event processing engine in this process: queries (text, a builder
    ``Query``) registered and removed at any time, events in, matches out.

        engine = Engine(key_attr="symbol")           # events keyed by their symbol attribute
        engine.add_query("PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND "
                         "b.price > a.price * 1.01 WITHIN 30 seconds", name="jump")
        matches = engine.process_many(events)       # Event objects, in arrival order
        matches += engine.process_table(df)         # a DataFrame / Arrow table
        matches += engine.advance(math.inf)         # the end: windows close, pending released

    ``key_attr``: the attribute that partitions the stream (queries with ``[key_attr]``
    evaluate per key); ``disorder``: out-of-order handling (``DisorderSettings``: slack,
    lateness); ``mode``: ``optimistic`` (report at once, retract when a late event changes
    a result) or ``pessimistic`` (wait for the watermark); ``sharing``: evaluate queries that
    differ only in constants as one group; ``retain``: seconds of events kept for queries
    registered later. ``stats()``, ``warnings()`` and ``take_late()`` tell what happened.
    """

    def __init__(self, key_attr: str | None = None, settings: ManagerSettings | None = None,
                 retention_slack: float = 0.0, disorder: DisorderSettings | None = None,
                 mode: str | None = None, sharing: bool = True, retain: float = 0.0):
        self.sharing = sharing
        self.retain = check_retain(retain)
        self.disorder = DisorderTracker(disorder)
        self.index = SharedEventIndex(key_attr, self.disorder.settings.remember_ids)
        self._prefixes = SharedPrefixes(self.index)   # shared sub-patterns (evaluation.prefixes)
        self.settings = settings or ManagerSettings()
        self.retention_slack = retention_slack
        self.mode = check_mode(mode)      # the default disorder mode of new queries
        self.managers: dict = {}          # query name -> the PatternManager evaluating it
        self._evaluators: dict = {}       # manager name -> manager (each once)
        self._groups: dict = {}           # group signature -> GroupManager
        self._keys: dict = {}             # query name -> its group signature
        self._orders: dict = {}           # query name -> forced plan order
        self._stale: list = []            # groups whose members changed (GroupManager.refresh)
        self._sources: dict = {}          # name -> (Query, params)
        self._by_type: dict = {}          # event type -> [PatternManager]
        self._any: list = []              # managers triggered by every type
        self._busy: set = set()           # managers with matches or triggers waiting
        self._route: dict = {}            # _dispatch's _by_type (_triggered: some aside)
        self._marks = None                # _dispatch notes (manager, matches) here
        self._floored: set = set()        # managers of queries registered mid-stream whose
                                          # floor (add_query's since) may still bind
        self._starts: dict = {}           # query -> its (floor, since) at registration
        self._pessimistic: list = []      # managers released by the watermark
        self._optimistic: list = []
        self.clock = -math.inf
        self._open_at = -math.inf         # a clock observe() set, no event at it yet
        self._front = None                # the last event in (ts, id) order, or its
                                          # (column batch, row): see .front
        self._released = -math.inf        # the watermark the pessimistic managers have seen
        self._kept_from = -math.inf       # the index may lack events a window before this
        self._promised = -math.inf        # advance(w): nothing at or before w comes any more
        self.late_events = 0              # sent to the late output
        self.out_of_order = 0             # accepted behind the clock
        self._copies = 0                  # out-of-order copies (the index counts the others)
        self.late: deque = deque()        # LateEvents for take_late()
        self.late_dropped = 0             # late events beyond late_capacity (counted, warned)
        self._seen = Seen()               # types/attributes the queries read, confirmed
        self._reads: dict = {}            # name -> {type: attributes} the query reads
        self._wanted: dict = {}           # the union of _reads
        self._considered: dict = {}       # name -> events of its types when it was added
        self._teller = Teller()           # warnings told to Python's warnings (cep.runtime.unseen)
        self.journal = None               # a list: events indexed behind the clock are
                                          # noted there (incremental checkpoints, changes_since)
        self._reindex()                   # no query yet: keyed events indexed once

    # ---------------------------------------------------------------- queries
    def add_query(self, query, name: str | None = None, params: dict | None = None,
                  order: tuple | None = None, mode: str | None = None,
                  since: float | None = None) -> str:
        """Register a query (text or ``cep.lang.ast.Query``); returns its name. ``mode``:
        ``optimistic`` or ``pessimistic`` handling of out-of-order input (None: the engine's
        default).

        Registered mid-stream, when the stream's latest event time is ``since`` (None: this
        engine's clock), a query reports the matches completed by events after ``since``;
        they use no event older than the last ``retain`` seconds before it, whatever else
        the index still holds for other queries (so one engine and a cluster of actors,
        which hold different events, give it the same matches). Registered before the first
        event, it sees them all."""
        if isinstance(query, str):
            from raycep.cep.lang.parser import parse_query
            query = parse_query(query)
        if not isinstance(query, ast.Query):
            raise QueryValidationError(f"expected query text or a Query, got {type(query).__name__}")
        name = name or query.name or f"q{len(self.managers) + 1}"
        if name in self.managers:
            raise QueryValidationError(f"a query named {name!r} is already registered")
        self._add(query, name, params, order, mode, start=self._start_at(since))
        return name

    def _start_at(self, since: float | None) -> tuple:
        """``(floor, since)`` of a query registered at ``since``: it reads events after
        ``floor`` and evaluates triggers after ``since``."""
        if since is None:
            since = self.clock
        elif isinstance(since, bool) or not isinstance(since, (int, float)) \
                or math.isnan(since):
            raise CepError(f"since must be an event time (a number), got {since!r}")
        if not math.isfinite(since):
            return -math.inf, -math.inf
        return since - self.retain, float(since)

    def _add(self, query, name: str, params, order, mode, group: str | None = None,
             start: tuple = (-math.inf, -math.inf)):
        cq = compile_query(query, params)
        mode = check_mode(mode) if mode is not None else self.mode
        self._starts[name] = start            # (snapshots: the same groups on restore)
        if self.sharing:
            key, member = signature(query, params or {}, cq, mode, order, name, start)
            manager = self._groups.get(key)
            if manager is None:
                group = group or name
                while group in self._evaluators:
                    group += "'"
                manager = self._groups[key] = GroupManager(group, self.index, self.settings,
                                                           mode, order, member)
            else:
                manager.join(member)
            self._keys[name] = key
            self._stale.append(manager)
        else:
            manager = PatternManager(name, cq, self.index, order, self.settings, mode)
            manager.floor, manager.since = start
        if start[1] > -math.inf:
            self._floored.add(manager)
        if manager.name not in self._evaluators:
            manager.clock = self.clock
            self._evaluators[manager.name] = manager
        self.managers[name] = manager
        self._orders[name] = order
        self._sources[name] = (query, dict(params or {}))
        self._reads[name] = wanted = reads(query)
        self._considered[name] = self._type_events(cq.types, self.disorder.type_events())
        for t, attrs in wanted.items():
            self._wanted[t] = self._wanted.get(t, frozenset()) | attrs
        if None in cq.types:
            self.index.enable_any()
        self._reindex()

    def remove_query(self, name: str):
        """Unregister a query; its pending matches are dropped with it."""
        if name not in self.managers:
            raise CepError(f"no query named {name!r} is registered")
        manager = self.managers.pop(name)
        key = self._keys.pop(name, None)
        if key is None or manager.leave(name):
            del self._evaluators[manager.name]
            self._groups.pop(key, None)
            self._busy.discard(manager)
            self._floored.discard(manager)
        else:
            self._stale.append(manager)
        del self._orders[name]
        del self._starts[name]
        del self._sources[name]
        del self._reads[name]
        del self._considered[name]
        self._wanted = {}
        for wanted in self._reads.values():
            for t, attrs in wanted.items():
                self._wanted[t] = self._wanted.get(t, frozenset()) | attrs
        self._reindex()

    def _reindex(self):
        """Dispatch each event type to the queries it can trigger; keep the all-partitions
        buffers only while some query reads across partitions."""
        self._by_type, self._any = {}, []
        self._route = self._by_type
        managers = self._evaluators.values()
        self._pessimistic = [m for m in managers if m.pessimistic]
        self._optimistic = [m for m in managers if not m.pessimistic]
        self._rank = {m: k for k, m in enumerate(self._optimistic)}
        # whether a trigger's evaluation may read events after it (SLIDE): then rows are
        # not indexed ahead of the triggers (process_columns). (A negation at the end is
        # decided at the trigger up to its time only, Evaluation.until, and at the deadline
        # over the window only: rows ahead are not read.)
        self._reads_ahead = any(m.cq.slide for m in managers)
        for m in managers:
            if None in m.trigger_types:
                self._any.append(m)
            for t in m.trigger_types - {None}:
                self._by_type.setdefault(t, []).append(m)
        for t, ms in self._by_type.items():
            ms.extend(m for m in self._any if m not in ms)
        prefixes = self._prefixes if self.sharing and len(self._evaluators) > 1 else None
        if prefixes is not None:
            prefixes.reset()
        for m in managers:
            m.prefixes = prefixes
        self.index.set_keep_all(not managers or any(
            not m.partitioned or m.cq.strategy != "skip_till_any_match" for m in managers))
        self.index.set_keep_keys(any(m.partitioned for m in managers))

    @property
    def evaluators(self) -> dict:
        """Manager name -> manager, each once (a group's manager evaluates all its members)."""
        return self._evaluators

    @property
    def horizon(self) -> float:
        """How far behind the clock events are kept: the largest window (+ slide, + slack),
        and at least ``retain`` seconds (0 with no query and no retention: nothing is kept)."""
        need = max((m.cq.window + (m.cq.slide or 0.0) for m in self._evaluators.values()),
                   default=0.0) + self.retention_slack
        return need if need >= self.retain else self.retain

    # ---------------------------------------------------------------- input
    def process(self, event: Event, source: str = DEFAULT_SOURCE) -> list:
        """Index ``event`` and return the matches it completes or releases, and the
        Retractions and new matches of the corrections it causes (optimistic queries)."""
        if event.__class__ is not Event:
            from raycep.cep.io.tables import refuse_table     # a table (process_table) or no event
            refuse_table(event)
        if self._stale:
            self._refresh()
        if self.index.key_attr is not None:        # the attribute is the key (cep.event)
            event = keyed_event(event, self.index.key_attr)
        ts = event.ts
        if ts > self.clock or (ts == self.clock and (
                ts == self._open_at or (self._front is not None and event.id > self.front.id))):
            self._open_at = -math.inf
            self.disorder.on_time(ts, source, event.type)
            if not self.index.insert(event):
                return []                 # a copy of the last event (counted by the index)
            self._front = event
            out: list = []
            if ts > self.clock:
                self.clock = ts
                if self._busy:
                    for m in self._in_order(self._busy):
                        out.extend(m.tick(ts))
                        if not m.busy:
                            self._busy.discard(m)
            self._dispatch(event, out)
        else:
            out = self._out_of_order(event, source)
        if self._pessimistic and self.disorder.watermark > self._released:
            out.extend(self._release())
        if not self.index.inserted % EVICT_EVERY:
            self.evict()
        if self._teller.due(self.index.inserted, ts):
            self._tell(False)
        return out

    def process_many(self, events: list, source: str = DEFAULT_SOURCE) -> list:
        """``process`` of each event in turn: the same outputs in the same order and the same
        state after. Runs of in-order events that no query is triggered by, while no query
        waits for the clock (and none is pessimistic), are indexed per type in bulk, their
        disorder bookkeeping done once per run (lazy evaluation: only a trigger event starts
        work; RCEP, "All that Incremental is not Efficient: Towards Recomputation Based Complex Event Processing for Expensive Queries",
        section 2, steps 1-2). Where runs end is found with C-level
        maps over the events' types and times."""
        if self._stale:
            self._refresh()
        if not isinstance(events, list):
            from raycep.cep.io.tables import is_table
            if is_table(events):                    # a DataFrame, an Arrow table, ...
                return self.process_table(events, source=source)
            events = list(events)
        if self.index.key_attr is not None:        # the attribute is the key (cep.event)
            events = keyed_events(events, self.index.key_attr)
        if self._pessimistic or self._any:
            out: list = []
            for ev in events:
                out.extend(self.process(ev, source))
            return out
        types, times = list(map(_TYPE, events)), list(map(_TS, events))
        _, stops = self._stops(types, times, 0, len(events))
        out = self._walk(events.__getitem__, stops, times, 0, len(events), source,
                         lambda a, b: self._indexed_run(events[a:b], types[a:b], times[a:b],
                                                        source))
        if events and self._teller.due(self.index.inserted, times[0]):
            self._tell(False)
        return out

    def _stops(self, types: list, times: list, lo: int, hi: int) -> tuple:
        """``(triggers, stops)`` among rows ``lo`` to ``hi - 1``: the rows of a type some
        query is triggered by, and those plus the rows not after the row before them (found
        with C-level maps); both ascending. (A column batch has them at hand:
        ``process_columns``.)"""
        part = times[lo:hi]
        triggers = list(compress(range(lo, hi), map(self._by_type.__contains__, types[lo:hi])))
        behind = list(compress(range(lo + 1, hi), map(le, part[1:], part)))
        return triggers, sorted(set(triggers).union(behind)) if behind else triggers

    def _walk(self, one, stops: list, times: list, i: int, hi: int, source: str, run) -> list:
        """Rows ``i`` to ``hi - 1`` in turn: ``process(one(row))`` for each stop, for a row
        behind the clock and while a query waits for the clock; ``run(a, b)`` indexes the
        rows ``a`` to ``b - 1`` between them in bulk (cut where eviction is due)."""
        out: list = []
        index = self.index
        for stop in (*stops, hi):
            while i < stop:
                if self._busy or times[i] <= self.clock:     # see every clock step / behind it
                    out.extend(self.process(one(i), source))
                    i += 1
                    continue
                end = min(stop, i + EVICT_EVERY - index.inserted % EVICT_EVERY)
                run(i, end)
                if not index.inserted % EVICT_EVERY:
                    self.evict()
                i = end
            if stop < hi:
                out.extend(self.process(one(stop), source))
                i = stop + 1
        return out

    def process_columns(self, batch, lo: int = 0, hi: int | None = None,
                        source: str = DEFAULT_SOURCE, blocks: bool = False) -> list:
        """``process_many`` of rows ``lo`` to ``hi - 1`` of column batch ``batch``
        (cep.store.batch.ColumnBatch): the same outputs in the same order and the same state after.
        The rows of a bulk run are indexed as (batch, row) without an Event; an Event is made
        for a row processed on its own (a trigger, a tie, one behind the clock) or read by a
        query (issue 14: Events only for the rows that are used). ``blocks``: matches found
        in bulk may come as a ``cep.match.MatchBlock`` entry of the list, standing for its
        matches in order (``cep.io.output.MatchLines`` writes them without Match objects)."""
        if hi is None:
            hi = len(batch)
        if self._stale:
            self._refresh()
        if batch.keys is None and self.index.key_attr is not None:
            batch.key_by(self.index.key_attr)       # (a producer's batch without a key column)
        if self._pessimistic or self._any:
            return self.process_many(batch.events(range(lo, hi)), source)
        times = batch.times
        triggers = batch.rows_of(self._by_type, lo, hi)
        behind = batch.behind(lo, hi)
        stops = sorted(set(triggers).union(behind)) if behind else triggers
        out: list = []
        i = lo
        prepared: list = []
        # (stops is triggers: no row is behind the one before it)
        if stops is triggers and lo < hi and times[lo] > self.clock \
                and not self.index.keep_any:
            if not self._reads_ahead:
                i = self._ahead(batch, lo, hi, triggers, source, out, blocks)
            else:
                prepared = self._prepare_all(batch, lo, hi, triggers)
        try:
            todo = stops[bisect_left(stops, i):] if i > lo else stops
            if todo:
                batch.events(todo)              # each is processed: made in bulk
            out += self._walk(batch.event, todo, times, i, hi, source,
                              lambda a, b: self._indexed_rows(batch, a, b, source))
        finally:
            for m in prepared:
                m.unprepare()
        return out

    def _prepare_all(self, batch, lo: int, hi: int, triggers: list) -> list:
        """Bulk evaluation (``_prepare``) of the triggers among rows ``lo`` to ``hi - 1`` (in
        order after the clock) when the rows are then processed one by one: some query
        waits for the clock or reads past its trigger (a negation at the end, SLIDE), so
        the rows cannot be indexed ahead for good. They are indexed while the queries that
        can evaluate in bulk look, and taken back; each result is taken when its trigger is
        processed (the index then holds what it held for the bulk evaluation up to the
        trigger's time)."""
        if len(triggers) < BULK_TRIGGERS:
            return []
        groups = batch.groups(lo, hi)
        fired = {t: g for t, g in groups.items() if t in self._by_type}
        if not any(m.can_prepare(fired) for t in fired for m in self._by_type[t]):
            return []
        ahead = {t: g for t, g in groups.items() if t not in fired}
        index, inserted = self.index, self.index.inserted
        if ahead:
            index.extend_rows(batch, ahead)
        try:
            return self._prepare(batch, batch.events(triggers), fired)
        finally:
            index.truncate_after(ahead, self.clock)
            index.inserted = inserted

    def process_table(self, table, *, ts: str = "ts", type: str | None = None,
                      ts_format: str = "s", source: str = DEFAULT_SOURCE) -> list:
        """``process_many`` of the rows of a table: a pandas or polars DataFrame, a pyarrow
        Table, RecordBatch or RecordBatchReader, or anything with ``__arrow_c_stream__``
        (its columns: cep.io.tables). ``ts``: the event-time column; ``type``: the event-type
        column, or (naming no column) every row's type; ``ts_format``: how numbers and text
        in the event-time column are written (s, ms, us, ns, iso or a strftime pattern;
        timestamps are read as they are). Read in column batches (``process_columns``)."""
        from raycep.cep.io.tables import TableReader
        out: list = []
        for batch in TableReader(table, key_attr=self.index.key_attr, ts=ts, type=type,
                                 ts_format=ts_format):
            out += self.process_columns(batch, source=source)
        return out

    def _ahead(self, batch, lo: int, hi: int, triggers: list, source: str, out: list,
               blocks: bool = False) -> int:
        """``process_columns`` of rows ``lo`` to ``hi - 1`` (in order after the clock, event
        times increasing, no SLIDE query) with every non-trigger row indexed at once, ahead
        of the triggers: an evaluation reads events up to its trigger's time only, so it
        cannot see the rows after it. Before each trigger (and each eviction, and each
        release of a query waiting for the clock) the clock, the watermark and the count of
        inserted events are set to what they are after the rows before it. Returns the row
        the caller goes on from (``lo``: nothing was done ahead; else ``hi``)."""
        groups = batch.groups(lo, hi)
        ahead = {t: g for t, g in groups.items() if t not in self._by_type}
        made = batch.events(triggers)                     # in bulk: each is processed
        index = self.index
        inserted = index.inserted
        if ahead:
            index.extend_rows(batch, ahead)
            index.inserted = inserted                     # counted as each is reached
        fired = {t: g for t, g in groups.items() if t not in ahead}
        prepared = self._prepare(batch, made, fired)
        if not ahead and not prepared:
            return lo
        try:
            # (a query waiting for the clock is ticked row by row: _triggered)
            found = None if self._busy else self._take(prepared, made, fired)
            if found is None:
                return self._triggered(batch, lo, hi, triggers, made, ahead, inserted, source,
                                       out, prepared, blocks)
            self._indexed_triggers(batch, lo, hi, triggers, made, ahead, inserted, source,
                                   fired)
            if blocks and found.__class__ in (MatchBlock, MatchMix):
                out.append(found)
            else:
                out += found
            return hi
        finally:
            for m in prepared:
                m.unprepare()

    def _take(self, prepared: list, made: list, fired: dict):
        """The matches of the triggers ``made`` (``fired``: their rows by type) when every
        query they trigger evaluated all of its in bulk (``prepared``), in the order
        ``process`` of each would give them (trigger by trigger, its queries in turn): a
        MatchBlock, a MatchMix or a list; None, and nothing taken, otherwise."""
        managers = {m: [] for t in fired for m in self._by_type[t]}
        if not managers or len(prepared) != len(managers):
            return None
        if len(managers) == 1:
            return prepared[0].take_prepared(made)
        types = [t.type for t in made]
        for i, typ in enumerate(types):
            for m in self._by_type[typ]:
                managers[m].append(i)
        # a manager's triggers: ``made`` itself when it takes them all (its chunk of results
        # is then taken whole, PatternManager.take_prepared)
        mine = {m: made if len(at) == len(made) else list(map(made.__getitem__, at))
                for m, at in managers.items()}
        if not all(m.ready_for(mine[m]) for m in managers):
            return None
        import numpy as np                                # a column batch: numpy is there
        width = max(len(self._by_type[t]) for t in fired)
        parts, keys = [], []
        for m, at in managers.items():
            counts: list = []
            found = m.take_prepared(mine[m], counts)
            if not len(found):
                continue
            # per match: its trigger, then the manager's place among that type's
            rank = {typ: self._by_type[typ].index(m) for typ in {types[i] for i in at}}
            ranks = rank[types[at[0]]] if len(rank) == 1 else \
                np.asarray([rank[types[i]] for i in at])
            keys.append(np.repeat(np.asarray(at) * width + ranks, counts))
            parts.append(found)
        if len(parts) < 2:
            return parts[0] if parts else []
        order = np.argsort(np.concatenate(keys), kind="stable")
        sizes = [len(p) for p in parts]
        which = np.repeat(np.arange(len(parts)), sizes)[order]
        at = np.concatenate([np.arange(k) for k in sizes])[order]
        return MatchMix(parts, which, at)

    def _indexed_triggers(self, batch, lo: int, hi: int, triggers: list, made: list,
                          ahead: dict, inserted: int, source: str, fired: dict):
        """The rest of ``_ahead`` when one manager evaluated every trigger in bulk and took
        the matches: index the triggers, evict where the inserted count says (with the clock
        and watermark of then: the evaluations are done) and set the clock, watermark and
        disorder statistics after the last row, as ``_triggered`` leaves them."""
        index, times = self.index, batch.times
        index.extend_rows(batch, fired)             # as rows: their columns stay at hand
        n = hi - lo
        for j in range(EVICT_EVERY - inserted % EVICT_EVERY, n + 1, EVICT_EVERY):
            self._advance_to(lo + j - 1, times, inserted + j)
            self.evict()
        self._advance_to(hi - 1, times, inserted + n)
        self._front = (batch, hi - 1)
        self.disorder.on_time_groups(source, fired, times[hi - 1])
        self.disorder.on_time_groups(source, ahead, times[hi - 1])

    def _prepare(self, batch, triggers: list, fired: dict) -> list:
        """Evaluate ``triggers`` (``fired``: their rows by type) in bulk where a query can
        (PatternManager.prepare, cep.evaluation.bulk), when there are at least BULK_TRIGGERS of
        them; returns the managers asked. The triggers are in the index while the managers look
        (a query may read their type: each evaluation reads up to its trigger only) and are
        taken back after (each is indexed when it is processed)."""
        if len(triggers) < BULK_TRIGGERS:
            return []
        managers = [m for m in {m: None for t in fired for m in self._by_type[t]}
                    if m.can_prepare(fired)]
        if not managers:
            return []
        index, inserted = self.index, self.index.inserted
        index.extend_rows(batch, fired)
        by_type: dict = {}
        for t in triggers:
            got = by_type.get(t.type)
            if got is None:
                by_type[t.type] = [t]
            else:
                got.append(t)
        if len(by_type) == 1:               # the list itself: a manager keeps its results whole
            by_type = dict.fromkeys(by_type, triggers)
        try:
            for m in managers:
                m.prepare(triggers, by_type)
        finally:
            index.truncate_after(fired, self.clock)
            index.inserted = inserted
        return managers

    def _quiet(self, made: list, prepared: list, taking=()) -> list | None:
        """Per trigger of ``made``: whether every query it triggers evaluated it in bulk
        without a match (PatternManager.quiet): it is then indexed ahead like the rows of
        other types, never processed on its own. Only the types whose queries were all asked
        and do not all take their triggers at once (``taking``: those are skipped whole) are
        looked at; None where there is no such type."""
        asked = set(prepared)
        by_type = self._by_type
        kinds = {t.type for t in made}
        open_ = {typ for typ in kinds if all(m in asked for m in by_type[typ]) and
                 not all(m in taking for m in by_type[typ])}
        if not open_:
            return None
        masks = {m: m.quiet_mask(made) for typ in open_ for m in by_type[typ]}
        if len(kinds) == 1:                              # one set of queries for them all
            managers = by_type[next(iter(kinds))]
            quiet = masks[managers[0]]
            for m in managers[1:]:
                quiet = list(map(and_, quiet, masks[m]))
            return quiet
        return [t.type in open_ and all(masks[m][k] for m in by_type[t.type])
                for k, t in enumerate(made)]

    def _take_quiet(self, quiet: list, source: str, taking=()):
        """The ``quiet`` triggers (in order) are done: their queries count them (those
        ``taking`` theirs at the end of the chunk aside, ``_triggered``), the disorder
        statistics see them."""
        kinds = {t.type for t in quiet}
        if len(kinds) == 1:
            kind = next(iter(kinds))
            for m in self._by_type[kind]:
                if m not in taking:
                    m.take_quiet(quiet)
            self.disorder.on_time_groups(source, {kind: (quiet, (quiet[-1].ts,))},
                                         quiet[-1].ts)
            return
        per: dict = {}
        for t in quiet:
            for m in self._by_type[t.type]:
                if m not in taking:
                    per.setdefault(m, []).append(t)
        for m, ts in per.items():
            m.take_quiet(ts)
        self.disorder.on_time_run(source, [t.type for t in quiet], [t.ts for t in quiet])

    def _taking(self, made: list, prepared: list) -> dict:
        """The managers of ``prepared`` that evaluated every one of their triggers among
        ``made`` in bulk and keep their order (PatternManager.ready_for: their results are
        taken for the chunk at once, ``_triggered``), each with its triggers' positions in
        ``made``."""
        if not prepared:
            return {}
        asked = set(prepared)
        at: dict = {}
        for i, t in enumerate(made):
            for m in self._by_type[t.type]:
                if m in asked:
                    got = at.get(m)
                    if got is None:
                        at[m] = [i]
                    else:
                        got.append(i)
        return {m: where for m, where in at.items()
                if m.ready_for(made if len(where) == len(made)
                               else list(map(made.__getitem__, where)))}

    def _triggered(self, batch, lo: int, hi: int, triggers: list, made: list, ahead: dict,
                   inserted: int, source: str, out: list, prepared: list = (),
                   blocks: bool = False) -> int:
        """The trigger loop of ``_ahead``. Triggers that every query they trigger evaluated
        in bulk without a match (``_quiet``), or that only queries which evaluated all of
        theirs in bulk trigger (``_taking``), are counted, not processed, and indexed in
        runs just before each trigger processed (which is then appended to its buffer: an
        insert among later rows would cut the buffer's cached columns each time); a trigger
        processed is given to the other queries only. A query waiting for the
        clock (a negation at the end: it reads no row ahead of its trigger's time, and a
        deferred match is decided over its window only) releases what is due at the first
        row after each deadline (``_released``). The matches of the queries that evaluated
        all of theirs in bulk are taken at the end, in the order ``process`` of each row
        gives (``_took``). Returns ``hi``."""
        index, disorder, times = self.index, self.disorder, batch.times
        taking = self._taking(made, prepared)
        # (a trigger is quiet when each of its managers was asked: with all of them taking
        # theirs, only the triggers of types whose managers all take are, skipped below)
        skip = self._quiet(made, prepared, taking) if prepared and \
            len(taking) < len(prepared) else None
        if taking:
            whole = {t.type for t in made}
            whole = {typ for typ in whole if all(m in taking for m in self._by_type[typ])}
            if whole:
                only = [t.type in whole for t in made]
                skip = only if skip is None else list(map(or_, skip, only))
        rows, everyone = triggers, made
        if skip is not None and any(skip):
            still = [t for t, q in zip(made, skip) if q]
            still_rows = list(compress(triggers, skip))
            stamps = [t.ts for t in still]
            live = [k for k, q in enumerate(skip) if not q]
            triggers, made = [triggers[k] for k in live], [made[k] for k in live]
            at = ahead_of = 0                 # the next skipped trigger taken, indexed
        else:
            still = ()
        marks = given = None
        if taking:
            self._route = {typ: [m for m in ms if m not in taking]
                           for typ, ms in self._by_type.items()}
            self._marks = marks = []                      # (manager, matches) per dispatch
            given = []                                    # (key, matches) per piece of out
            width = max(len(ms) for ms in self._by_type.values()) + 1
            rank = {typ: {m: j + 1 for j, m in enumerate(ms)}
                    for typ, ms in self._by_type.items()}
        pos, base = lo, len(out)
        try:
            for k, r in enumerate((*triggers, hi)):
                if still:                 # the skipped ones before r indexed now: a trigger
                    #                           processed is then appended, not inserted
                    end = len(still) if r == hi else bisect_left(stamps, times[r], ahead_of)
                    if end > ahead_of:
                        _index_rows(index, batch, still_rows[ahead_of:end], still[ahead_of:end])
                        ahead_of = end
                if r > pos:                               # rows indexed ahead before r
                    inserted = self._passed(batch, pos, r, inserted, out, given,
                                            width if taking else 0)
                if still:                                 # the skipped ones before r
                    end = len(still) if r == hi else bisect_left(stamps, times[r], at)
                    if end > at:
                        self._take_quiet(still[at:end], source, taking)
                        at = end
                if r == hi:
                    break
                found = self.process(made[k], source)
                if found:
                    out.extend(found)
                    if marks is not None:
                        ticked = len(found) - sum(c for _, c in marks)
                        if ticked:                        # released before the dispatch
                            given.append((r * width, ticked))
                        ranks = rank[made[k].type]
                        given += [(r * width + ranks[m], c) for m, c in marks]
                if marks:
                    marks.clear()
                inserted = index.inserted
                pos = r + 1
        finally:
            if taking:
                self._route = self._by_type
                self._marks = None
        if taking:
            self._took(taking, rows, everyone, given, out, base, width, rank, blocks)
        if ahead:
            disorder.on_time_groups(source, ahead, times[hi - 1])
        return hi

    def _passed(self, batch, pos: int, r: int, inserted: int, out: list, given,
                width: int) -> int:
        """Rows ``pos`` to ``r - 1`` (indexed ahead) are passed: the clock, watermark and
        count of inserted events go through them, evicting where the count says, and the
        queries waiting for the clock release what is due at the first row after each
        deadline (before an eviction there, as ``process`` does); the released matches go
        to ``out`` (``given``: keyed by row, before the row's dispatch). Returns the
        inserted count after ``r - 1``."""
        times = batch.times
        i = pos
        evict_at = pos + EVICT_EVERY - inserted % EVICT_EVERY - 1   # the next row evicting
        busy = self._busy
        while busy:
            due = min(m.due_at for m in busy)
            q = bisect_right(times, due, i, r)
            if q >= r:
                break
            while evict_at < q:
                self._advance_to(evict_at, times, inserted + evict_at - pos + 1)
                self.evict()
                evict_at += EVICT_EVERY
            self._advance_to(q, times, inserted + q - pos + 1)
            self._front = (batch, q)
            now = times[q]
            got: list = []
            for m in self._in_order(busy):
                got.extend(m.tick(now))
                if not m.busy:
                    busy.discard(m)
            if got:
                out.extend(got)
                if given is not None:
                    given.append((q * width, len(got)))
            i = q + 1
        while evict_at < r:
            self._advance_to(evict_at, times, inserted + evict_at - pos + 1)
            self.evict()
            evict_at += EVICT_EVERY
        inserted += r - pos
        self._advance_to(r - 1, times, inserted)
        self._front = (batch, r - 1)
        return inserted

    def _took(self, taking: dict, rows: list, made: list, given: list, out: list, base: int,
              width: int, rank: dict, blocks: bool):
        """The end of ``_triggered``: each manager ``taking`` its results takes those of its
        triggers (``made``, at ``rows``); they are merged with what the others gave (``out``
        from ``base`` on; ``given``: per piece, its key and length) in ``process``'s order:
        row by row (key ``row * width``: released before the row's dispatch, then ``+ rank``
        of each of its managers, in turn)."""
        import numpy as np                                # a column batch: numpy is there
        parts, keys = [], []
        rows = np.asarray(rows, dtype=np.intp)
        for m, where in taking.items():
            counts: list = []
            mine = made if len(where) == len(made) else list(map(made.__getitem__, where))
            found = m.take_prepared(mine, counts)
            if not len(found):
                continue
            at = rows[where] if len(where) < len(rows) else rows
            ranks = np.fromiter((rank[made[i].type][m] for i in where), dtype=np.intp,
                                count=len(where))
            keys.append(np.repeat(at * width + ranks, counts))
            parts.append(found)
        if not parts:
            return
        if len(out) > base:
            parts.append(out[base:])
            del out[base:]
            keys.append(np.repeat(np.asarray([g for g, _ in given], dtype=np.intp),
                                  [c for _, c in given]))
        if len(parts) == 1:
            found = parts[0]
        else:
            order = np.argsort(np.concatenate(keys), kind="stable")
            sizes = [len(p) for p in parts]
            which = np.repeat(np.arange(len(parts)), sizes)[order]
            at = np.concatenate([np.arange(k) for k in sizes])[order]
            found = MatchMix(parts, which, at)
        if blocks and found.__class__ in (MatchBlock, MatchMix):
            out.append(found)
        else:
            out += found

    def _advance_to(self, row: int, times: list, inserted: int):
        """Clock, watermark and inserted count as after in-order row ``row``."""
        self.clock = ts = times[row]
        wm = ts - self.disorder.slack
        if wm > self.disorder.watermark:
            self.disorder.watermark = wm
        self.index.inserted = inserted

    @property
    def front(self) -> Event | None:
        """The last event in (ts, id) order (None before the first)."""
        front = self._front
        if front.__class__ is tuple:
            front = self._front = front[0].event(front[1])
        return front

    def _in_order(self, busy: set) -> list:
        """The waiting managers in registration order (a set's order follows memory
        addresses: the outputs of one clock step would come in a different order each run)."""
        return sorted(busy, key=self._rank.__getitem__) if len(busy) > 1 else list(busy)

    def _indexed_run(self, run: list, types: list, times: list, source: str):
        """Index ``run`` (in-order events after the clock, none of them a trigger: no
        duplicate) and set the clock, front and disorder statistics after it."""
        self.index.extend(run, types, times)
        self.disorder.on_time_run(source, types, times)
        self.clock = times[-1]
        self._front = run[-1]

    def _indexed_rows(self, batch, a: int, b: int, source: str):
        """``_indexed_run`` of rows ``a`` to ``b - 1`` of a column batch, without Events."""
        groups = batch.groups(a, b)
        self.index.extend_rows(batch, groups)
        self.disorder.on_time_groups(source, groups, batch.times[b - 1])
        self.clock = batch.times[b - 1]
        self._front = (batch, b - 1)            # made when needed (.front)

    def _dispatch(self, event: Event, out: list):
        marks = self._marks
        for m in self._route.get(event.type, self._any):
            began = perf_counter()
            found = m.process(event)
            m.times.add(perf_counter() - began)
            if found:
                out.extend(found)
                if marks is not None:
                    marks.append((m, len(found)))
            if m.busy and not m.pessimistic:
                self._busy.add(m)

    def _out_of_order(self, event: Event, source: str) -> list:
        """An event behind the clock (or at it, before the last one in (ts, id) order)."""
        verdict = self.disorder.out_of_order(event.ts, source, event.type, self.clock,
                                             *self._floor())
        if verdict is not None:
            if self.index.seen_before(event):
                self._copies += 1
            else:
                self._late(LateEvent(event, source, verdict[0], verdict[1], verdict[2],
                                     self.disorder.watermark))
            return []
        if self.index.contains(event):
            self._copies += 1
            return []
        revisers = [m for m in self._optimistic if m.relevant(event)]
        before = {id(m): m.emitted_around(event) for m in revisers if not m.monotone(event)}
        self.index.insert(event)
        if self.journal is not None:
            self.journal.append(event)
        self.out_of_order += 1
        out: list = self._catch_up(revisers + self._route.get(event.type, self._any))
        for m in revisers:
            out.extend(m.revise(event, before.get(id(m))))
            if m.busy:                    # corrected deferred matches wait for the clock
                self._busy.add(m)
        self._dispatch(event, out)
        return out

    def _catch_up(self, managers: list) -> list:
        """Move the clocks of ``managers`` to the engine's before an out-of-order event
        reaches them: a query sees the clock move only with its own triggers, so one not
        sent the events that moved it would otherwise wait for a slide or a negation's
        deadline the engine has passed (a SLIDE trigger arriving after its interval
        ended is evaluated at once; a deferred binding past its deadline is decided), and
        what waits would depend on the arrival order. The matches that waited (none: busy
        queries follow the clock)."""
        out: list = []
        for m in managers:
            if m.clock < self.clock and not m.pessimistic:
                out.extend(m.tick(self.clock))
        return out

    def _floor(self) -> tuple:
        """The oldest event time the engine can still use exactly, and why."""
        floor, why = self._kept_from, "older than the events the index still keeps"
        if self._pessimistic and self._released > floor:
            floor, why = self._released, "behind the watermark the pessimistic queries reached"
        if self._promised > floor:
            floor, why = self._promised, "at or before a watermark given with advance()"
        return floor, why

    def _late(self, late: LateEvent):
        self.late_events += 1
        if len(self.late) >= self.disorder.settings.late_capacity:
            if not self.late_dropped:
                log.warning("late-events output full (%d): the oldest are dropped, only "
                            "counted (call Engine.take_late())", len(self.late))
            self.late.popleft()
            self.late_dropped += 1
        self.late.append(late)

    def take_late(self) -> list:
        """The late events since the last call (LateEvent records), oldest first."""
        out = list(self.late)
        self.late.clear()
        return out

    def _release(self) -> list:
        """The watermark moved: release what the pessimistic managers held before it."""
        wm = self._released = self.disorder.watermark
        out: list = []
        for m in self._pessimistic:
            out.extend(m.release(wm))
        return out

    def advance(self, watermark: float) -> list:
        """No event with ``ts <= watermark`` will arrive any more (a later one is late).
        ``inf`` ends the stream; NaN or a non-number raises IngestError."""
        if self._stale:
            self._refresh()
        self.disorder.advance(watermark)
        promised = math.nextafter(watermark, math.inf) if math.isfinite(watermark) \
            else watermark
        if promised > self._promised:
            self._promised = promised
        out: list = []
        for m in self._optimistic:
            out.extend(m.advance(watermark))
        if self._pessimistic and self.disorder.watermark > self._released:
            out.extend(self._release())
        self._busy = {m for m in self._optimistic if m.busy}
        if watermark > self.clock:
            self.clock = watermark
        self._open_at = -math.inf
        if math.isfinite(watermark):
            self.evict()
        self._tell(not math.isfinite(watermark))
        return out

    def due(self) -> list:
        """The matches waiting for the clock that are due at the clock as it is: after a
        restore that moved it past them (the merge of a re-partitioning's shares takes the
        latest of their clocks, cep.runtime.rescale), as ``observe`` releases them when the
        clock moves."""
        out: list = []
        if self._busy:
            for m in self._in_order(self._busy):
                out.extend(m.tick(self.clock))
                if not m.busy:
                    self._busy.discard(m)
        if self._pessimistic and self.disorder.watermark > self._released:
            out.extend(self._release())
        return out

    def observe(self, clock: float) -> list:
        """The stream's event time reached ``clock`` elsewhere (events of other partitions,
        or of types this engine is not sent: the gateway tells each partition actor the
        latest event time of every batch). The clock moves there as an event's would: the
        deferred matches whose window closed are released, the watermark follows (an event
        later behind it is out of order, or late, here as in one engine), and an event at
        ``clock`` itself is still in order. No effect when ``clock`` is not ahead."""
        if self._stale:
            self._refresh()
        if not clock > self.clock or not math.isfinite(clock):
            return []
        self.clock = self._open_at = clock
        wm = clock - self.disorder.slack
        if wm > self.disorder.watermark:
            self.disorder.watermark = wm
        return self.due()

    @property
    def duplicates(self) -> int:
        """Copies dropped: of buffered events, and of recently evicted ones."""
        return self.index.duplicates + self._copies

    @property
    def events(self) -> int:
        """Events processed (duplicates and late events not counted)."""
        return self.index.inserted

    def evict(self) -> int:
        """Drop events no registered query can use any more: those a window before the
        watermark (two windows for optimistic queries with deferred negation, whose
        corrections re-read one window on either side of a late event), but never those of
        the last ``retain`` seconds. With no query and no retention every event up to the
        watermark goes (and a later copy of one is recognised as a duplicate or reported
        late, never indexed again).

        Called every EVICT_EVERY events inserted (``process``, and where bulk runs are cut
        in ``process_many`` / ``process_columns``), at each finite ``advance``, and by the
        partition actors after each batch."""
        if not math.isfinite(self.clock):
            return 0
        kept = min(self.clock, self.disorder.watermark)
        if not math.isfinite(kept):
            return 0
        reach = max((m.cq.window for m in self._optimistic if m.has_deferred), default=0.0)
        horizon = self.horizon
        if not self._evaluators and not horizon:
            cutoff = floor = math.nextafter(kept, math.inf)      # no query: keep nothing
        else:
            cutoff, floor = kept - horizon - reach, kept
        if floor > self._kept_from:
            self._kept_from = floor
        if self._floored:
            self._floored = {m for m in self._floored if m.expire_floor(self._kept_from)}
        for m in self._evaluators.values():
            floor = m.retention_floor()
            if floor is not None and floor < cutoff:
                cutoff = floor
        if self._seen.missing(self._wanted):       # look before they go (see cep.runtime.unseen)
            self._seen.observe(self._wanted, self.index.events_of, -math.inf, cutoff)
        return self.index.evict_before(cutoff)

    def mark(self) -> tuple:
        """``(ts, ids)``: where the index stands (the last event in (ts, id) order and the ids
        of the events at its time), for ``changes_since``."""
        front = self.front if self._front is not None else None
        ts = front.ts if front is not None else -math.inf
        return ts, self.index.ids_at(ts)

    def changes_since(self, mark: tuple) -> list:
        """The events indexed since ``mark`` (``mark()`` then) and still buffered: those at or
        after its time that it did not see, and those ``journal`` noted behind it (set
        ``journal = []`` at the mark; clear it once the changes are saved). Costs the
        change, not the buffered events (actors/recovery.py, incremental checkpoints)."""
        ts, ids = mark
        out = self.index.since(ts, frozenset(ids))
        if self.journal:
            floor = self.index.floor
            out += [e for e in self.journal if floor <= e.ts < ts]
        return out

    def warnings(self) -> dict:
        """``{query: [warning, ...]}`` for queries that read an event type or attribute the
        input has not had so far, or with a condition that failed on every evaluation so far
        (nothing before the first event). Each is also told once to Python's ``warnings``
        (cep.runtime.unseen.Teller)."""
        return {name: [text for _, text in found] for name, found in self._causes().items()}

    def _causes(self) -> dict:
        """``{query: [(cause, warning)]}`` of ``warnings``."""
        if not self.events:
            return {}
        if self._seen.missing(self._wanted):
            self._seen.observe(self._wanted, self.index.events_of)
        out = {}
        for name, wanted in self._reads.items():
            found = self._seen.causes(wanted) + never_held(self.managers[name].cq.conjuncts)
            if found:
                out[name] = found
        return out

    def _tell(self, ended: bool):
        """Tell the warnings not told yet (cep.runtime.unseen.Teller: once per query and cause)."""
        if not ended and not self._teller.ready(self.clock, self._evaluators.values()):
            return                        # no window passed yet: nothing looked at
        found = self._causes()
        if found:
            windows = {name: self.managers[name].cq.window for name in found}
            self._teller.tell(found, windows, self.clock, ended)

    # ---------------------------------------------------------------- state
    def _refresh(self):
        """Rebuild the constant indexes of the groups whose members changed."""
        for m in self._stale:
            m.refresh()
        self._stale.clear()

    def stats(self) -> dict:
        warnings = self.warnings()
        by_manager = {name: m.stats() for name, m in self._evaluators.items()}
        queries = {}
        for name, m in self.managers.items():
            queries[name] = qstats = dict(by_manager[m.name])
            if name in self._keys:
                qstats["matches"] = m.member_matches.get(name, 0)
                qstats["group"] = m.name
        for name, found in warnings.items():
            queries[name]["warnings"] = found
        self._partial_work(queries)
        return {
            "events": self.events, "late_events": self.late_events,
            "out_of_order": self.out_of_order, "buffered": len(self.index),
            "duplicates": self.duplicates,
            "evicted": self.index.evicted, "late_dropped": self.late_dropped,
            "disorder": self.disorder.stats(),
            "clock": self.clock, "queries": queries, "groups": self.groups(),
            "prefixes": self._prefixes.stats(),
            "paths": self.paths(),
        }

    def _partial_work(self, queries: dict) -> None:
        """Add to each query's stats the ``events`` of its types seen since it was added
        (events considered) and the ``window_events`` of its types the index holds within
        its window before the clock (the events its next triggers can read)."""
        seen = self.disorder.type_events()
        span = {}                           # query -> (its types, its window)
        for name, m in self.managers.items():
            queries[name]["events"] = self._type_events(m.cq.types, seen) - \
                self._considered[name]
            span[name] = (frozenset(m.cq.types), m.cq.window)
        held = self.index.window_counts(
            {key: (key[0], self.clock - key[1], self.clock) for key in set(span.values())})
        for name, key in span.items():
            queries[name]["window_events"] = held[key]

    @staticmethod
    def _type_events(types, seen: dict) -> int:
        """Events of ``types`` (None among them: every type) in ``seen`` (type -> events)."""
        if None in types:
            return sum(seen.values())
        return sum(seen.get(t, 0) for t in types)

    def paths(self) -> dict:
        """Per query, how its triggers were evaluated: ``{"bulk": n, "per_trigger": n, "why":
        text or None}`` (PatternManager.path): in bulk over columns, a chunk's triggers
        together (cep.evaluation.bulk), or one by one, and what in the query keeps it from
        bulk evaluation."""
        self._refresh()
        return {name: m.path() for name, m in self.managers.items()}

    def seconds(self) -> dict:
        """Per query, the seconds its evaluator spent evaluating (a query group's members: the
        group's). Apart from ``stats()``, which stays the same for the same input."""
        self._refresh()
        return {name: m.seconds for name, m in self.managers.items()}

    def timings(self) -> dict:
        """Per query, the histogram of its evaluator's call seconds
        (cep.evaluation.timing.EvalTimes.as_dict; a query group's members: the group's).
        Apart from ``stats()``, which stays the same for the same input."""
        self._refresh()
        return {name: m.times.as_dict() for name, m in self.managers.items()}

    def groups(self) -> list:
        """One entry per evaluator: ``{"name", "queries": [members in join order], "varying":
        [conjuncts whose constants differ, "WITHIN" if windows do]}``."""
        self._refresh()
        return [m.group_info() if isinstance(m, GroupManager) else
                {"name": m.name, "queries": [m.name], "varying": []}
                for m in self._evaluators.values()]

    def snapshot(self, evicted: bool = True, events: bool = True) -> dict:
        """Everything needed to continue elsewhere: events, queries, plans, pending matches,
        and (``evicted``) the remembered evicted events (a checkpoint keeps them apart,
        actors/recovery.py). ``events=False``: without the buffered events (None; a
        checkpoint saves them incrementally, ``changes_since``)."""
        self._refresh()
        return {
            "key_attr": self.index.key_attr, "clock": self.clock, "events_seen": self.events,
            "retain": self.retain, "index_floor": self.index.floor,
            "events": list(self.index.events()) if events else None,
            "evicted": self.index.evicted_events() if evicted else None,
            "front": self.front, "open_at": self._open_at,
            "disorder": self.disorder.snapshot(),
            "floors": (self._released, self._kept_from, self._promised),
            "settings": self.disorder.settings, "mode": self.mode,
            "counters": (self.late_events, self.out_of_order, self._copies,
                         self.late_dropped),
            "late": list(self.late),
            "sharing": self.sharing,
            "queries": {name: {"query": q, "params": p, "mode": self.managers[name].mode,
                               "order": self._orders[name],
                               "start": list(self._starts[name])}
                        for name, (q, p) in self._sources.items()},
            "evaluators": [{"name": g["name"], "queries": g["queries"],
                            "state": self._evaluators[g["name"]].snapshot()}
                           for g in self.groups()],
        }

    @classmethod
    def restore(cls, snap: dict, settings: ManagerSettings | None = None,
                index: SharedEventIndex | None = None) -> "Engine":
        """The engine of ``snap``; ``index``: an index that holds more of its events (the
        keys that stay with a partition actor on a re-partitioning, cep.runtime.rescale),
        taken over, ``snap``'s events and remembered evicted ones added to it."""
        engine = cls(snap["key_attr"], settings, disorder=snap["settings"], mode=snap["mode"],
                     sharing=snap["sharing"], retain=snap.get("retain", 0.0))
        queries = snap["queries"]
        for group in snap["evaluators"]:         # each group rebuilt in its join order
            for name in group["queries"]:
                entry = queries[name]
                engine._add(entry["query"], name, entry["params"], entry["order"],
                            entry["mode"], group["name"],
                            tuple(entry.get("start", (-math.inf, -math.inf))))
            engine.managers[group["queries"][0]].restore(group["state"])
        engine.managers = {name: engine.managers[name] for name in queries}
        engine._sources = {name: engine._sources[name] for name in queries}
        engine._reindex()
        if index is not None:
            engine.index.take_over(index)
            engine.index.merge_in(snap["events"] or [])
        else:
            for ev in snap["events"] or ():
                engine.index.insert(ev)
        engine.index.floor = max(engine.index.floor, snap.get("index_floor", -math.inf))
        if snap.get("evicted") is not None:
            if index is None:
                engine.index.remember_evicted(*snap["evicted"])
            else:
                engine.index.add_evicted(snap["evicted"][1])
        engine.clock = snap["clock"]
        engine._front = snap["front"]
        engine._open_at = snap.get("open_at", -math.inf)
        engine.disorder.restore(snap["disorder"])
        engine._released, engine._kept_from, engine._promised = snap["floors"]
        (engine.late_events, engine.out_of_order, engine._copies,
         engine.late_dropped) = snap["counters"]
        engine.late.extend(snap["late"])
        engine.index.inserted = snap["events_seen"]
        engine._busy = {m for m in engine._optimistic if m.busy}
        return engine


def reference_match_ids(queries, events, key_attr: str | None = None) -> dict:
    """``{query name: set of match ids}`` of named ``queries`` (parsed) over ``events`` in one
    Engine, the end of the stream closing every window: what ``raycep local`` finds, the
    reference the cluster's output is checked against (``raycep demo``, tests, benchmarks)."""
    from raycep.cep.match import match_id
    engine = Engine(key_attr=key_attr)
    for q in queries:
        engine.add_query(q, name=q.name)
    out = {q.name: set() for q in queries}
    for m in engine.process_many(list(events)) + engine.advance(math.inf):
        out[m.query].add(match_id(m))
    return out


def _index_rows(index, batch, rows: list, made: list) -> None:
    """Index rows ``rows`` of ``batch`` (their events ``made``, in time order, after every
    indexed event) as rows, by type; the inserted count is left as it was (the rows are
    counted as each is reached)."""
    groups: dict = {}
    for r, t in zip(rows, made):
        group = groups.get(t.type)
        if group is None:
            group = groups[t.type] = ([], [])
        group[0].append(r)
        group[1].append(t.ts)
    inserted = index.inserted
    index.extend_rows(batch, groups)                  # as rows: their columns stay at hand
    index.inserted = inserted
