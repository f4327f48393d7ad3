"""GatewayService: the control plane of a raycep cluster (docs/architecture.md, "Control flow").

It owns the query registry (persisted), the match store (bounded) and the routing table, and
talks to the partition actors, the global actor and the planner through actor handles
(``actors.handles``: Ray actors, or plain objects in one process). Every method that reaches an
actor is async. It is the one coordinator between the actors and the planner: it collects the
actors' statistics, hands them to the planner and installs the plans the planner returns. The HTTP layer (``gateway.server.http``) is a thin translation of requests to these methods.

A query whose equivalence includes the cluster's key attribute (``[symbol]``) runs on every
partition actor, each seeing the events of its keys; any other query runs on the global actor,
which receives every event of the types such queries read (``RoutingTable.global_types``).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import re
import time
from dataclasses import dataclass

import orjson

from raycep.actors.handles import as_handle
from raycep.actors.routing import GLOBAL, RoutingTable
from raycep.cep.errors import (CepError, ConflictError, IngestError, NotFoundError,
                        OverloadedError, QuerySyntaxError, QueryValidationError,
                        UnavailableError, short_repr)
from raycep.cep.event import make_event
from raycep.cep.io.codec import decode_batch, encode_batch, encode_rows, read_header
from raycep.cep.lang.compiler import compile_query
from raycep.cep.lang.parser import parse_queries, parse_query
from raycep.cep.lang.validate import finite
from raycep.cep.store.disorder import check_mode

log = logging.getLogger("raycep.gateway")


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8470
    token: str | None = None
    #: the persisted query registry (None: in memory, lost when the gateway stops); raycep
    #: serve's default is gateway.server.registry.default_registry_path()
    registry_path: str | None = None
    match_capacity: int = 10_000
    matches_jsonl: str | None = None
    drain_every: float = 0.02          # seconds between outbox drains while matches move
    #: the longest pause between two drains while nothing moves (the pause doubles from
    #: drain_every up to this): how late matches caused by producers that write to the actors
    #: directly reach the store after a quiet spell; the gateway's own ingest drains at once
    drain_idle: float = 1.0
    plan_every: float = 2.0            # seconds between planner rounds (0: never)
    drain_limit: int = 10_000
    #: the largest request body (bytes); a larger one is answered 413 (--max-body-bytes)
    max_body_bytes: int = 16 * 2**20
    #: the deepest nesting of arrays/maps in a JSON or msgpack body (--max-depth)
    max_depth: int = 32
    #: the largest query window (WITHIN) accepted at registration, seconds (--max-window)
    max_window: float = 7 * 86400.0
    #: how far ``advance`` may move the watermark past the latest event time the actors have
    #: seen, seconds, unless forced (--max-advance-ahead)
    max_advance_ahead: float = 86400.0
    #: seconds the gateway drains and retries an actor that refuses a batch (its match outbox
    #: is over its limit) before answering 503 OverloadedError
    overload_wait: float = 30.0
    #: undelivered match records an actor's outbox may hold before it refuses new batches
    #: (backpressure; --outbox-capacity)
    outbox_capacity: int = 100_000

    def __post_init__(self):
        if isinstance(self.outbox_capacity, bool) or not isinstance(self.outbox_capacity, int) \
                or self.outbox_capacity < 1:
            raise CepError(f"outbox_capacity must be an integer >= 1, got "
                           f"{self.outbox_capacity!r}")
        for name in ("max_body_bytes", "max_depth", "max_window", "max_advance_ahead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not (0 < value < math.inf):
                raise CepError(f"{name} must be a positive finite number, got {value!r}")


#: the store stream of late events (not a valid query name)
LATE = ":late"

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_NOT_A_REASON = ("Traceback", "File ", "ray::", "During handling", "The above exception")


def plain_text(text: str) -> str:
    """``text`` fit for an error message: ANSI escape sequences (terminal colours) removed,
    any other control character (a stray ESC from a client's path, say) shown escaped
    (``\\x1b``); line breaks stay (caret excerpts)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI.sub("", text))


def type_name(value) -> str:
    """The name of a value's type in messages: JSON's for null, objects and arrays, else
    Python's ("got int", "got array")."""
    return _TYPE_NAMES.get(type(value)) or type(value).__name__


_TYPE_NAMES = {type(None): "null", dict: "object", list: "array", tuple: "array"}


def check_params(params) -> None:
    """Query parameters: a mapping of names to finite numbers, strings or booleans;
    QueryValidationError names the first parameter that is not."""
    if params is None:
        return
    if not isinstance(params, dict):
        raise QueryValidationError(f"params must be a mapping of names to values, got "
                                   f"{type_name(params)}")
    for key, value in params.items():
        if not isinstance(key, str):
            raise QueryValidationError(f"parameter names must be strings, got {key!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not finite(value):
            raise QueryValidationError(f"parameter {key!r} must be a finite number, got "
                                       f"{short_repr(value)}")
        if not isinstance(value, (bool, int, float, str)):
            raise QueryValidationError(f"parameter {key!r} must be a number, a string or a "
                                       f"boolean, got {type_name(value)}")


def event_clock(actor_stats: list) -> float:
    """The latest event time the actors have seen (-inf: none), from their ``stats()``: the
    largest ``max_ts`` of their (source, type) streams; a watermark given with ``advance``
    does not move it (so repeated advances cannot creep ahead)."""
    clock = -math.inf
    for st in actor_stats:
        for s in st.get("disorder", {}).get("streams", {}).values():
            ts = s["max_ts"]
            if ts > clock:
                clock = ts
    return clock


def latest_time(times) -> float | None:
    """The largest finite number among ``times`` (None: none; bad rows are named later)."""
    best = None
    for ts in times:
        if (ts.__class__ is float or ts.__class__ is int) and -math.inf < ts < math.inf \
                and (best is None or ts > best):
            best = ts
    return best


def short_reason(exc: BaseException, limit: int = 300) -> str:
    """``Type: first meaningful line`` of an exception, for an error message: the cause of a
    Ray task error (whose text is a colourised remote traceback), ANSI escapes stripped,
    traceback lines skipped."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        exc = cause
    lines = [ln.strip() for ln in plain_text(str(exc)).splitlines()]
    line = next((ln for ln in lines if ln and not ln.startswith(_NOT_A_REASON)), "")
    line = line if len(line) <= limit else line[:limit - 3] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


class GatewayService:
    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 registry, store, settings: GatewaySettings = GatewaySettings()):
        self.targets = {i: as_handle(h) for i, h in enumerate(partitions)}
        self.targets[GLOBAL] = as_handle(global_actor)
        self.planner = as_handle(planner) if planner is not None else None
        self.key_attr = key_attr
        self.registry = registry
        self.store = store
        self.settings = settings
        self.routing = RoutingTable(len(partitions), key_attr)
        self._scopes: dict = {}            # query id -> "keyed" | "global"
        self._types: dict = {}             # query id -> frozenset of types (None: any)
        self._acks = {t: 0 for t in self.targets}
        self._retain = 0.0                 # the actors' retention (start())
        self._plan_versions: dict = {}     # query -> latest plan version installed
        self._drain_locks = {t: asyncio.Lock() for t in self.targets}
        self._drain_errors: dict = {}      # target -> last drain error (logged once)
        self._batch_ids = itertools.count(1)
        self._started = time.time()
        self.events_in = 0
        self.bad_rows = 0

    # ---------------------------------------------------------------- actors
    async def _call(self, target, method: str, *args):
        """``await handle.call(method, *args)``; an unreachable actor -> UnavailableError,
        raycep errors pass through."""
        handle = self.targets[target] if target != "planner" else self.planner
        try:
            return await handle.call(method, *args)
        except CepError as exc:
            cause = getattr(exc, "cause", None)        # Ray's wrapper: its text is a traceback
            if isinstance(cause, CepError):
                raise cause from None
            raise
        except Exception as exc:
            name = "the planner" if target == "planner" else \
                "the global actor" if target == GLOBAL else f"partition actor {target}"
            raise UnavailableError(f"{name} is unreachable ({method}): "
                                   f"{short_reason(exc)}") from exc

    async def stream_clock(self) -> float:
        """The stream's latest event time: the largest of the actors' clocks (each moves
        with the events it receives and with ``advance``)."""
        return max(await asyncio.gather(*(self._call(t, "clock") for t in self.targets)))

    def _scope_targets(self, scope: str) -> list:
        return [GLOBAL] if scope == "global" else [t for t in self.targets if t != GLOBAL]

    # ---------------------------------------------------------------- start-up
    async def start(self):
        """Converge the actors to the registry: add the registered queries they lack, remove
        the ones the registry does not know (a gateway restart keeps the queries)."""
        self.store.open(LATE)
        for target in self.targets:
            await self._call(target, "set_outbox", True, self.settings.outbox_capacity)
        self._retain = await self._call(GLOBAL, "retention")
        wanted: dict = {}
        for rec in self.registry.all():
            try:
                query = self._parse_one(rec.text)
                scope, types = self._analyse(query, rec.params)
            except CepError as exc:       # a registry written by another version
                log.error("registered query %s no longer compiles, skipped: %s", rec.id, exc)
                continue
            self._scopes[rec.id], self._types[rec.id] = scope, types
            self.store.open(rec.id)
            for t in self._scope_targets(scope):
                wanted.setdefault(t, []).append((rec, query))
            await self._plan_register(rec.id, query, rec.params, scope)
        for target in self.targets:
            have = set(await self._call(target, "queries"))
            for rec, query in wanted.get(target, []):
                if rec.id not in have:
                    await self._call(target, "add_query", rec.id, query, rec.params, None,
                                     rec.mode)
            for name in have - {r.id for r, _ in wanted.get(target, [])}:
                await self._call(target, "remove_query", name)
        self._update_routing()

    def _analyse(self, query, params: dict | None, max_window: float | None = None) -> tuple:
        """(scope, types) of a parsed query: compile it (raising its validation error).
        ``max_window``: refuse a larger WITHIN (checked at registration, not on restore)."""
        cq = compile_query(query, params)
        if max_window is not None and not cq.window <= max_window:     # inf and nan too
            line, column = (query.within.pos or (None, None)) if query.within else (None, None)
            raise QueryValidationError(
                f"the query's window (WITHIN {cq.window:g} seconds) is larger than this "
                f"gateway's maximum of {max_window:g} seconds (raycep serve --max-window)",
                query.text, line, column)
        # strict contiguity is judged over the whole stream, every key's events (SASE+ section
        # 2): a partition actor sees only its keys, so such a query runs on the global actor
        keyed = self.key_attr is not None and self.key_attr in cq.equivalence \
            and query.strategy != "strict_contiguity"
        types = None if None in cq.types else frozenset(cq.types)
        return ("keyed" if keyed else "global"), types

    @staticmethod
    def _parse_one(text: str):
        """The one query of ``text``, parsed once here: the planner and the actors get the
        parsed query (the AST), not the text (each compiles it once)."""
        if not isinstance(text, str):
            raise QueryValidationError(f"text must be a string, got {type_name(text)}")
        if not text.strip():
            raise QueryValidationError("the query text is empty")
        try:
            return parse_query(text.strip().rstrip(";"))
        except QuerySyntaxError:
            try:
                queries = parse_queries(text)
            except CepError:
                queries = ()
            if len(queries) > 1:
                raise QueryValidationError(f"register one query at a time; the text holds "
                                           f"{len(queries)} (separated by ';')") from None
            raise

    def _update_routing(self):
        # with a retention, a keyless query registered later sees the last seconds of every
        # type it reads: the global actor is sent the whole stream
        types: frozenset | None = None if self._retain > 0 else frozenset()
        for qid, scope in self._scopes.items():
            if scope == "global":
                t = self._types[qid]
                types = None if t is None or types is None else types | t
        self.routing = RoutingTable(self.routing.partitions, self.key_attr, types,
                                    self.routing.version + 1)

    async def _plan_register(self, qid, query, params, scope):
        if self.planner is None:
            return
        try:
            await self._call("planner", "register", qid, query, params, None, scope == "keyed",
                             self._plan_versions.get(qid, 0) + 1)
        except CepError as exc:
            if "already planned" not in str(exc):
                raise

    # ---------------------------------------------------------------- queries
    async def register(self, text: str, name: str | None = None,
                       params: dict | None = None, mode: str | None = None) -> dict:
        """Parse, validate and compile ``text``, persist it, install it on its actors.
        ``mode``: optimistic / pessimistic handling of out-of-order events (None: the
        cluster's default). Raises QuerySyntaxError / QueryValidationError (with line and
        column) or ConflictError; on a failure nothing stays registered."""
        query = self._parse_one(text)
        if name is not None and not isinstance(name, str):
            raise QueryValidationError(f"name must be a string, got {type_name(name)}")
        if mode is not None:
            if not isinstance(mode, str):
                raise QueryValidationError(f"mode must be a string (optimistic or "
                                           f"pessimistic), got {type_name(mode)}")
            check_mode(mode)
        check_params(params)
        name = name or query.name
        if name is not None and self.registry.get(name) is not None:
            raise ConflictError(f"a query named {name!r} is already registered; remove it "
                                f"first or choose another name")
        scope, types = self._analyse(query, params, self.settings.max_window)
        rec = self.registry.add(name, text, params or {}, mode)
        done = []
        try:
            await self._plan_register(rec.id, query, rec.params, scope)
            since = await self.stream_clock()     # the query sees the events after it
            targets = list(self._scope_targets(scope))
            results = await asyncio.gather(*(
                self._call(t, "add_query", rec.id, query, rec.params, None, mode, since)
                for t in targets), return_exceptions=True)      # every actor at once
            done = [t for t, r in zip(targets, results) if not isinstance(r, BaseException)]
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        except BaseException:
            for t in done:
                try:
                    await self._call(t, "remove_query", rec.id)
                except CepError:
                    pass
            if self.planner is not None:
                try:
                    await self._call("planner", "unregister", rec.id)
                except CepError:
                    pass
            self.registry.remove(rec.id)
            raise
        self._scopes[rec.id], self._types[rec.id] = scope, types
        self.store.open(rec.id)
        self._update_routing()
        log.info("registered query %s (%s)", rec.id, scope)
        return await self.describe(rec.id)

    async def remove(self, qid: str) -> dict:
        """Stop a query everywhere; the other queries are untouched."""
        if self.registry.get(qid) is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self._scopes.get(qid, "keyed")
        self.registry.remove(qid)
        self._scopes.pop(qid, None)
        self._types.pop(qid, None)
        self._update_routing()
        for t in self._scope_targets(scope):
            try:
                await self._call(t, "remove_query", qid)
            except CepError as exc:
                if not isinstance(exc, UnavailableError) and "no query named" in str(exc):
                    continue
                raise
        if self.planner is not None:
            await self._call("planner", "unregister", qid)
        stats = self.store.stats(qid) if qid in self.store.queries() else {}
        self.store.close(qid)
        log.info("removed query %s", qid)
        return {"id": qid, "removed": True, "matches": stats.get("total", 0)}

    async def describe(self, qid: str, actor_stats: list | None = None) -> dict:
        rec = self.registry.get(qid)
        if rec is None:
            raise NotFoundError(f"no query {qid!r} is registered")
        scope = self._scopes.get(qid)
        if actor_stats is None:
            actor_stats = await self._actor_stats(self._scope_targets(scope or "keyed"))
        merged: dict = {}
        plans = []
        warned = None        # warnings every actor that has seen input gives (cep.runtime.unseen)
        for st in actor_stats:
            q = st.get("queries", {}).get(qid)
            if q is None:
                continue
            if st.get("events"):
                found = set(q.get("warnings", ()))
                warned = found if warned is None else warned & found
            for k, v in q.items():
                if k == "mode":
                    merged[k] = v
                elif k == "plan_version":             # a version, not a count: the newest
                    merged[k] = max(merged.get(k) or 0, v or 0)
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    merged[k] = merged.get(k, 0) + v
            plan = st.get("plans", {}).get(qid)
            if plan:
                plans.append(plan)
        plan = max(plans, key=lambda p: p["version"] or 0) if plans else None
        store = self.store.stats(qid) if qid in self.store.queries() else {}
        status = "running" if scope and plans else "error: not installed on its actors"
        return {"id": rec.id, "text": rec.text, "params": rec.params, "created": rec.created,
                "scope": scope, "status": status, "plan": plan, "stats": merged,
                "matches": store, "warnings": sorted(warned or ())}

    async def queries(self) -> list:
        stats = await self._actor_stats(list(self.targets))
        return [await self.describe(rec.id, stats) for rec in self.registry.all()]

    async def _actor_stats(self, targets) -> list:
        return list(await asyncio.gather(*(self._call(t, "stats") for t in targets)))

    # ---------------------------------------------------------------- events
    async def ingest_body(self, body, source: str = "gateway", batch: bool = False) -> dict:
        """Events from the HTTP API: a msgpack batch (cep.io.codec: bytes, or with ``batch`` its
        unpacked map) or JSON-like rows (a list of mappings, or ``{"events": [...]}``). Bad
        rows are reported and skipped.

        A version-1 batch of array rows (what ``Client.send`` and producers write) is routed
        by each row's type and key and forwarded as it came, without building events here:
        the actors decode and validate each row once, and their bad rows come back named by
        the row's index in this request."""
        if batch or isinstance(body, (bytes, bytearray)):
            header, rows = read_header(body)
            if header["schema_version"] == 1:
                routed = self.routing.route_rows(rows)
                if routed is not None:
                    return await self._forward(routed, len(rows), header["source"],
                                               header["batch_id"])
            batch, problems = decode_batch(header, errors="collect")
            events, source, batch_id = list(batch.events), batch.source, batch.batch_id
        else:
            batch_id = None
            rows = body.get("events") if isinstance(body, dict) else body
            if not isinstance(rows, list):
                raise IngestError("expected a list of events or {\"events\": [...]}")
            if isinstance(body, dict) and isinstance(body.get("source"), str):
                source = body["source"]
            events, problems = [], []
            for i, row in enumerate(rows):
                try:
                    events.append(make_event(row, i, self.key_attr))
                except IngestError as exc:
                    problems.append(exc)
        ack = await self.ingest(events, source, batch_id)
        ack["bad_rows"] = [str(p) for p in problems]
        self.bad_rows += len(problems)
        return ack

    async def _forward(self, routed: dict, n_rows: int, source: str,
                       batch_id: str | None = None) -> dict:
        """Send the rows of ``RoutingTable.route_rows`` to their actors as they came; the acknowledgement
        of ``ingest``, bad rows named by their index in the request (once, also when a row
        went to two actors)."""
        bid = self._actor_batch_id(batch_id)
        payloads = {t: encode_rows(rows, source, f"{bid}:{t}")
                    for t, (rows, _) in routed.items()}
        acks = await self._dispatch(payloads, latest_time(
            r[1] for rows, _ in routed.values() for r in rows))
        bad: dict = {}
        for (target, (_, origin)), ack in zip(routed.items(), acks):
            for row, field, reason in ack.get("bad", ()):
                index = origin[row] if row is not None and 0 <= row < len(origin) else row
                bad.setdefault(index, IngestError(reason, index, field))
        good = n_rows - len(bad)
        self.events_in += good
        self.bad_rows += len(bad)
        return self._merge(list(routed), acks, good, [str(e) for _, e in sorted(
            bad.items(), key=lambda item: -1 if item[0] is None else item[0])])

    def _actor_batch_id(self, batch_id: str | None) -> str:
        """The id of a request's batches to the actors: from the sender's batch id when it
        gave one, so a batch sent again (to this or a restarted gateway) is recognised by
        the actors and not applied twice; else a new one."""
        if batch_id is not None:
            return f"b:{batch_id}"
        return f"{self._started}:{next(self._batch_ids)}"

    async def ingest(self, events: list, source: str = "gateway",
                     batch_id: str | None = None) -> dict:
        """Route ``events`` to their actors (the same routing Spark jobs use), wait for the
        acknowledgements, and move the resulting matches to the store (and sink): the reply
        comes when every match of the request is there. An actor that refuses its batch
        (backpressure: its match outbox is over its limit) is drained and asked again for up
        to ``settings.overload_wait`` seconds, then OverloadedError (503) is raised."""
        routed = self.routing.route(events)
        bid = self._actor_batch_id(batch_id)
        acks = await self._dispatch({
            t: encode_batch(routed[t], source, f"{bid}:{t}") for t in routed},
            latest_time(e.ts for e in events))
        self.events_in += len(events)
        return self._merge(list(routed), acks, len(events),
                           [r for a in acks for r in a["bad_rows"]])

    async def _dispatch(self, payloads: dict, clock: float | None = None) -> list:
        """Send each target its batch, all at once; drain them; their acks, in order.
        ``clock``: the latest event time of the request; the actors with queries that got
        no row of it observe it (PartitionWorker.observe), those with rows after them: every
        actor's event time is the stream's, as in one engine (deferred matches, lateness)."""
        loop = asyncio.get_running_loop()

        async def send(target, batch: bytes) -> dict:
            # backpressure: an actor whose outbox is over its limit refuses the batch without
            # processing it; drain it into the store and ask again, pausing longer each time
            deadline, pause = loop.time() + self.settings.overload_wait, 0.0
            while True:
                try:
                    return await self._call(target, "ingest", batch, None, clock)
                except OverloadedError as exc:
                    if not loop.time() < deadline:          # (a NaN setting: no retry)
                        why = getattr(exc, "cause", None) or exc
                        raise OverloadedError(
                            f"{why} (the gateway drained it and retried for "
                            f"{self.settings.overload_wait:g} s; that actor processed nothing "
                            f"of this request, others may have taken their part: sending it "
                            f"again is safe, events are de-duplicated by id)") from None
                await asyncio.sleep(pause)
                pause = min(0.5, max(0.01, pause * 2))
                await self.drain(target)

        idle = [t for t in self._busy_targets() if t not in payloads] \
            if clock is not None else []
        acks = await asyncio.gather(*(send(t, b) for t, b in payloads.items()),
                                    *(self._call(t, "observe", clock) for t in idle))
        await asyncio.gather(*(self.drain(t) for t in (*payloads, *idle)))
        return acks[:len(payloads)]

    def _busy_targets(self) -> list:
        """The actors some registered query runs on."""
        scopes = set(self._scopes.values())
        return [t for t in self.targets
                if ("global" if t == GLOBAL else "keyed") in scopes]

    @staticmethod
    def _merge(targets: list, acks: list, events: int, bad_rows: list) -> dict:
        return {"events": events,
                "duplicates": sum(a["duplicates"] for a in acks),
                "late": sum(a.get("late", 0) for a in acks),
                "partitions": {str(t): a["events"] for t, a in zip(targets, acks)},
                "matches": sum(a["queued"] + len(a["matches"]) - a.get("late", 0)
                               for a in acks),
                "truncated_triggers": sum(a.get("truncated", 0) for a in acks),
                # actors that had this batch already (a retry): they applied nothing again
                "redelivered": sum(1 for a in acks if a.get("redelivered")),
                "bad_rows": bad_rows}

    async def advance(self, watermark: float, force: bool = False) -> dict:
        """Tell every actor no event with ``ts <= watermark`` will come; releases deferred
        matches (trailing negation). Refused (IngestError): a watermark that is not a finite
        number, and, unless ``force``, one more than ``settings.max_advance_ahead`` past the
        latest event time the actors have seen (every later event would be late)."""
        if isinstance(watermark, bool) or not isinstance(watermark, (int, float)):
            raise IngestError(f"must be a finite number, got {type_name(watermark)}",
                              field="watermark")
        if not finite(watermark):
            raise IngestError(f"must be a finite number, got {short_repr(watermark)}",
                              field="watermark")
        w = float(watermark)
        if not isinstance(force, bool):
            raise IngestError(f"must be true or false, got {type_name(force)}", field="force")
        if not force:
            clock = event_clock(await self._actor_stats(list(self.targets)))
            bound = self.settings.max_advance_ahead
            if w > clock + bound:
                seen = f"latest event time {clock:g}" if clock > -math.inf else \
                    "no event seen yet"
                raise IngestError(
                    f"{w:g} is more than {bound:g} seconds ahead of the cluster's clock "
                    f"({seen}), so every later event would be late; the bound is raycep "
                    f"serve --max-advance-ahead; send force (\"force\": true, "
                    f"client.advance(w, force=True), raycep advance --force) to advance anyway",
                    field="watermark")
        async def advance_one(target) -> int:
            # under the drain lock: the background drain loop cannot move the released
            # matches in between, so the reply counts them
            async with self._drain_locks[target]:
                await self._call(target, "advance", w)
                return await self._drain_locked(target)
        moved = sum(await asyncio.gather(*map(advance_one, self.targets)))
        return {"watermark": w, "matches": moved}

    # ---------------------------------------------------------------- matches
    async def drain(self, target) -> int:
        """Move a target's outbox to the match store (and sink), page by page; returns the
        number of records moved. A page is acknowledged by the next drain call, after it is
        stored (the last one by a call without records), so the outbox ends empty: what it
        holds is never in the store yet, which is what its limit (backpressure) counts."""
        async with self._drain_locks[target]:
            return await self._drain_locked(target)

    async def _drain_locked(self, target) -> int:
        moved = 0
        while True:
            page = await self._call(target, "drain", self._acks[target],
                                    self.settings.drain_limit)
            self.put_matches([orjson.loads(r) for r in page["records"]])
            moved += len(page["records"])
            self._acks[target] = page["last"]
            if not page["pending"]:
                if page["records"]:
                    await self._call(target, "drain", self._acks[target], 0)
                return moved

    async def acknowledge(self):
        """Acknowledge what was stored (a graceful stop), so the next gateway does not receive
        it again; unreachable actors are skipped."""
        for target in self.targets:
            try:
                await self._call(target, "drain", self._acks[target], 0)
            except CepError:
                pass

    async def drain_all(self) -> int:
        results = await asyncio.gather(*(self.drain(t) for t in self.targets),
                                       return_exceptions=True)
        moved = 0
        for target, r in zip(self.targets, results):
            if isinstance(r, BaseException):
                # log a failing actor when its error changes, not on every drain
                if self._drain_errors.get(target) != str(r):
                    log.warning("cannot drain %s: %s", target, r)
                self._drain_errors[target] = str(r)
            else:
                if self._drain_errors.pop(target, None) is not None:
                    log.warning("draining %s works again", target)
                moved += r
        return moved

    def put_matches(self, records: list):
        """Store match, retraction and late-event records (late events under LATE)."""
        by_query: dict = {}
        for rec in records:
            by_query.setdefault(LATE if rec.get("late") else rec["query"], []).append(rec)
        for qid, recs in by_query.items():
            self.store.put(qid, recs)

    def matches(self, qid: str, since: int = 0, limit: int = 1000) -> dict:
        if qid not in self.store.queries() or qid == LATE:
            raise NotFoundError(f"no query {qid!r} is registered")
        return self.store.read(qid, since, limit)

    def late_events(self, since: int = 0, limit: int = 1000) -> dict:
        """The late-events output (events later than the lateness threshold, never used), as
        a page like ``matches``: ``{"matches": [records], "next", "missed", "head"}``."""
        if LATE not in self.store.queries():
            self.store.open(LATE)
        return self.store.read(LATE, since, limit)

    # ---------------------------------------------------------------- planning
    async def plan_round(self) -> dict:
        """One planner round: collect every actor's statistics (concurrently), hand them to the
        planner in one call, install the plans it returns on each query's actors. An
        unreachable actor is left out of the round (logged); the others go on."""
        if self.planner is None or not self._scopes:
            return {}                     # no query: nothing to plan (an idle cluster idles)
        await self._converge_planner()
        targets = list(self.targets)
        reports = await asyncio.gather(*(self._call(t, "report") for t in targets),
                                       return_exceptions=True)
        batch = []
        for target, report in zip(targets, reports):
            if isinstance(report, BaseException):
                log.warning("planner round: no statistics from %s: %s", target, report)
                continue
            for qid, entry in report.items():
                if qid in self._scopes:
                    batch.append((str(target), qid, entry["rates"], entry["tested"],
                                  entry["passed"], entry["keys"]))
        if batch:
            await self._call("planner", "report_many", batch)
        changed = await self._call("planner", "replan")
        await self.install_plans(changed)
        return changed

    async def _converge_planner(self) -> None:
        """Register with the planner the queries it does not know: after a planner restart
        (its state is statistics and plans, rebuilt from the next reports), its plans then
        continue after the versions the actors have."""
        known = set(await self._call("planner", "queries"))
        if known >= self._scopes.keys():
            return                                   # the usual case: no registry read
        missing = [rec for rec in self.registry.all()
                   if rec.id in self._scopes and rec.id not in known]
        for rec in missing:
            await self._plan_register(rec.id, self._parse_one(rec.text), rec.params,
                                      self._scopes[rec.id])
        if missing:
            log.warning("the planner had lost %d queries (restarted?): registered again",
                        len(missing))

    async def install_plans(self, plans: dict) -> None:
        """``set_plan`` on the actors of each query of ``plans`` (``replan``'s result), all at
        once; an actor that fails is logged and does not stop the others."""
        calls = [(t, qid, p) for qid, p in plans.items() if qid in self._scopes
                 for t in self._scope_targets(self._scopes[qid])]
        results = await asyncio.gather(*(
            self._call(t, "set_plan", qid, p["order"], p["version"]) for t, qid, p in calls),
            return_exceptions=True)
        for qid, p in plans.items():
            self._plan_versions[qid] = max(self._plan_versions.get(qid, 0), p["version"])
        for (target, qid, p), r in zip(calls, results):
            if isinstance(r, BaseException):
                log.warning("cannot install plan v%s of %s on %s: %s", p["version"], qid,
                            target, r)

    # ---------------------------------------------------------------- status
    async def health(self) -> dict:
        return {"status": "ok", "partitions": self.routing.partitions,
                "key_attr": self.key_attr, "queries": len(self._scopes),
                "events": self.events_in, "uptime": round(time.time() - self._started, 3)}

    async def stats(self) -> dict:
        actors = await self._actor_stats(list(self.targets))
        late = self.store.stats(LATE) if LATE in self.store.queries() else {}
        return {"gateway": {"events": self.events_in, "bad_rows": self.bad_rows,
                            "pid": os.getpid(),
                            "orphan_matches": self.store.orphans,
                            "late_events": late.get("total", 0)},
                "actors": {str(t): {k: v for k, v in st.items() if k != "queries"}
                           for t, st in zip(self.targets, actors)},
                "routing": self.routing.to_dict()}
