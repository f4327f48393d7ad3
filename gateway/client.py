"""The raycep Python client: ``raycep.connect`` (``from raycep import connect``).

    with connect("http://127.0.0.1:8470", token=None) as client:   # or $RAYCEP_GATEWAY
        ...
    client = connect()                 # $RAYCEP_GATEWAY and $RAYCEP_TOKEN, as the CLI
    qid = client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 seconds", name="ab")
    client.send([{"type": "A", "ts": 1.0, "k": "x"}, {"type": "B", "ts": 2.0, "k": "x"}])
    page = client.matches(qid, since=0)          # page.matches, page.next (the next cursor)
    for match in client.subscribe(qid):          # blocks; ends when the query is removed
        ...
    client.remove(qid)

Errors are raycep errors, importable from ``raycep`` (``from raycep import NotFoundError``;
all derive from ``CepError``): ``UnavailableError`` when the gateway cannot be reached,
``AuthenticationError`` for a missing/wrong token, ``QuerySyntaxError`` (with ``line``,
``column``, ``excerpt``) for bad query text, ``QueryValidationError``, ``NotFoundError`` for
unknown queries, ``ConflictError``, ``OverloadedError`` (503, retry later), ``IngestError`` for a
bad event, ``GatewayError`` for the rest (``status``: the HTTP status).
Only the standard library and msgpack are used, so the client needs neither Ray nor aiohttp.
"""
from __future__ import annotations

import http.client
import itertools
import json
import logging
import math
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgpack
import orjson

from raycep.cep.errors import (AuthenticationError, CepError, ConflictError, GatewayError,
                        IngestError, MovingError, NotFoundError, OverloadedError,
                        QuerySyntaxError, QueryValidationError, UnavailableError,
                        error_from_dict, short_repr)
from raycep.cep.event import Event, make_event
from raycep.cep.io.codec import encode_batch, encode_columns
from raycep.cep.io.tables import is_table
from raycep.cep.lang.ast import Query
from raycep.cep.lang.validate import finite

__all__ = ["AuthenticationError", "CepError", "Client", "ConflictError", "GatewayError",
           "IngestError", "MatchPage", "MovingError", "NotFoundError", "OverloadedError",
           "QuerySyntaxError", "QueryValidationError", "UnavailableError", "connect"]

log = logging.getLogger("raycep.client")
MSGPACK = "application/msgpack"
DEFAULT_ADDRESS = "http://127.0.0.1:8470"
#: seconds a kept-alive connection may idle and still be reused (the gateway closes one after
#: 75 s: aiohttp's keepalive_timeout)
KEEP_IDLE = 15.0
KEEPALIVE = 15.0         # seconds between the gateway's keep-alive comments on a stream
#: a table is sent in batches of at most this many rows and about this many bytes (the
#: gateway refuses a body above its max_body_bytes, 16 MiB by default)
TABLE_BATCH_ROWS = 65_536
TABLE_BATCH_BYTES = 8 << 20
_ROW = re.compile(r"^row (\d+)")


@dataclass(frozen=True)
class MatchPage:
    """One read of a query's matches: ``matches`` (dicts with ``cursor`` and ``id``; a
    retraction of an earlier match has its ``id`` and ``"retracted": true``), ``next`` (pass
    it as ``since`` to continue), ``missed`` (matches the bounded store dropped before this
    reader got them), ``head`` (the newest cursor)."""
    matches: list
    next: int
    missed: int = 0
    head: int = 0


class Client:
    """A connection to a raycep gateway (``raycep serve``), made by ``connect``: register and
    remove queries (text or builder queries), send events (``Event``s, mappings, DataFrames
    and Arrow tables), move the watermark, and read matches (pages, a live stream, a
    callback thread). Each call is one HTTP request, over a connection kept alive per
    thread (urllib for live streams); errors are ``CepError``s
    (``UnavailableError`` when the gateway cannot be reached). ``close()`` (or ``with``)
    ends the live streams this client opened; a closed client refuses further calls."""

    def __init__(self, address: str = DEFAULT_ADDRESS, token: str | None = None,
                 timeout: float = 60.0, retry_for: float = 30.0):
        if "://" not in address:
            address = "http://" + address
        self.address = address.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for              # seconds send() retries an unreachable gateway
        self.source = f"client-{os.getpid()}"
        self._run = uuid.uuid4().hex[:12]       # batch ids: <run>:<n>, unique per Client
        self._batches = itertools.count(1)
        self._key_attr = None              # (the gateway's partition key attribute,) once known
        self._streams: set = set()         # open subscription responses (closed by close())
        self._local = threading.local()    # this thread's kept-alive connection (_exchange)
        parts = urllib.parse.urlsplit(self.address)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CepError(f"not a gateway address: {address!r} (expected "
                           f"http://HOST:PORT)")
        self._connection_class = http.client.HTTPSConnection if parts.scheme == "https" \
            else http.client.HTTPConnection
        self._host, self._port, self._prefix = parts.hostname, parts.port, parts.path
        self.closed = False

    def close(self) -> None:
        """End the live streams (``subscribe``, ``listen``) this client opened and this
        thread's kept-alive connection; later calls raise CepError. Closing twice is fine."""
        self.closed = True
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        for resp in list(self._streams):
            try:
                resp.close()
            except OSError:
                pass
        self._streams.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<raycep Client {self.address}{' closed' if self.closed else ''}>"

    # ---------------------------------------------------------------- transport
    def _request(self, method: str, path: str, body=None, raw: bytes | None = None,
                 timeout: float | None = None, stream: bool = False):
        if self.closed:
            raise CepError(f"this client of {self.address} is closed")
        headers = {"Accept": MSGPACK}
        data = None
        if raw is not None:
            data, headers["Content-Type"] = raw, MSGPACK
        elif body is not None:
            data, headers["Content-Type"] = msgpack.packb(body, use_bin_type=True), MSGPACK
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if stream:
            return self._open_stream(method, path, data, headers, timeout)
        status, reason, resp_headers, payload = self._exchange(method, path, data, headers,
                                                               timeout or self.timeout)
        if status >= 400:
            raise _remote_error(status, reason, resp_headers, payload, self.address + path)
        if resp_headers.get_content_type() == MSGPACK:
            return msgpack.unpackb(payload, raw=False)
        return json.loads(payload or b"null")

    def _open_stream(self, method: str, path: str, data, headers: dict,
                     timeout: float | None):
        """A response left open for reading (a live stream: a connection of its own)."""
        req = urllib.request.Request(self.address + path, data=data, method=method,
                                     headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            raise _remote_error(exc.code, exc.reason, exc.headers, exc.read(),
                                exc.geturl() or exc.filename) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            raise self._unreachable(getattr(exc, "reason", exc)) from None

    def _exchange(self, method: str, path: str, data, headers: dict, timeout: float) -> tuple:
        """One request over this thread's kept-alive connection (issue 36: no TCP connection
        set up and torn down per call, at either end); (status, reason, headers, body). A
        kept connection the gateway closed meanwhile is replaced and the request sent once
        more (the gateway had not read it); one idle longer than ``KEEP_IDLE`` seconds is
        not reused."""
        local = self._local
        for attempt in range(2):
            conn = getattr(local, "conn", None)
            if conn is not None and time.monotonic() - local.used > KEEP_IDLE:
                conn.close()
                conn = None
            if conn is None:
                conn = local.conn = self._connection_class(self._host, self._port,
                                                           timeout=timeout)
            reused = conn.sock is not None
            if reused:
                conn.sock.settimeout(timeout)
            else:
                conn.timeout = timeout
            try:
                conn.request(method, self._prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError) as exc:
                conn.close()
                local.conn = None
                if reused and attempt == 0:
                    continue
                raise self._unreachable(exc) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                local.conn = None
                raise self._unreachable(exc) from None
            local.used = time.monotonic()
            if resp.will_close:
                conn.close()
                local.conn = None
            return resp.status, resp.reason, resp.headers, payload
        raise AssertionError("unreachable")

    def _unreachable(self, reason) -> UnavailableError:
        return UnavailableError(f"cannot reach the raycep gateway at {self.address}: {reason} "
                                f"(is `raycep serve` running?)")

    # ---------------------------------------------------------------- API
    def health(self) -> dict:
        out = self._request("GET", "/v1/health")
        self._key_attr = (out.get("key_attr"),)
        return out

    def register(self, text, name: str | None = None, params: dict | None = None,
                 mode: str | None = None) -> str:
        """Register one query, given as text or as a Query built with cep.lang.builder (sent as
        its text, ``str(query)``); returns its id (``name``, the query's ``NAME``, or
        ``q<n>``). ``mode``: ``optimistic`` (emit at once, retract when a late event changes
        a match) or ``pessimistic`` (wait for the watermark, never retract); None: the
        cluster default."""
        if isinstance(text, Query):
            text = str(text)
        elif not isinstance(text, str):
            raise TypeError(f"register() takes query text or a Query (cep.lang.builder), got "
                            f"{type(text).__name__}")
        body = {"text": text, "name": name, "params": params or {}}
        if mode is not None:
            body["mode"] = mode
        return self._request("POST", "/v1/queries", body)["id"]

    def register_many(self, queries, params: dict | None = None,
                      mode: str | None = None) -> list:
        """Register a whole query set in one request, all or nothing; returns the ids in
        order. ``queries``: a query file's text (queries separated by ``;``, each optionally
        ``NAME n``), or a list whose items are query text, a Query (cep.lang.builder), a
        tuple ``(text, name[, params[, mode]])`` or a dict ``{"text", "name"?, "params"?,
        "mode"?}``. ``params`` / ``mode``: for the queries that give none.

        Every query is checked before any is registered: when one does not parse or
        compile, or its name is used twice or already registered, nothing is registered and
        the error (QuerySyntaxError, QueryValidationError, ConflictError) names it: its
        message starts with ``query 'NAME' (#k, line L)`` or ``query #k``, and it carries
        ``index`` (from 1) and ``query`` (the name). The gateway installs the set with one
        call to each actor: 1,000 queries take about as long as a few registered one by one."""
        if isinstance(queries, str):
            body = {"text": queries}
        elif isinstance(queries, Iterable) and not isinstance(queries, (bytes, Mapping)):
            body = {"queries": [_set_entry(q, k) for k, q in enumerate(queries, start=1)]}
        else:
            raise TypeError(f"register_many() takes a query file's text or a list of "
                            f"queries, got {type(queries).__name__}")
        if params:
            body["params"] = params
        if mode is not None:
            body["mode"] = mode
        out = self._request("POST", "/v1/query-set", body)
        return [q["id"] for q in out["registered"]]

    def remove(self, query: str) -> dict:
        return self._request("DELETE", f"/v1/queries/{_q(query)}")

    def remove_many(self, queries) -> list:
        """Remove the queries of ``queries`` (ids) in one request, all or none (an id that
        is not registered is a NotFoundError and nothing is removed); returns ``[{"id",
        "matches"}, ...]`` (the matches each had stored)."""
        if isinstance(queries, str):
            raise TypeError("remove_many() takes a list of query ids (remove() takes one)")
        return self._request("POST", "/v1/query-set/remove", {"ids": list(queries)})["removed"]

    def queries(self) -> list:
        """Every registered query with its status, scope, plan (order, version) and stats."""
        return self._request("GET", "/v1/queries")["queries"]

    def query(self, query: str) -> dict:
        return self._request("GET", f"/v1/queries/{_q(query)}")

    def send(self, events, source: str | None = None, *, ts: str = "ts",
             type: str | None = None, ts_format: str = "s") -> dict:
        """Send events (``raycep.Event`` objects or mappings with ``type``, ``ts`` and
        attributes) as one msgpack batch, or a table; returns the gateway's acknowledgement
        (``events``, ``duplicates``, ``matches``, ...).

        Bad rows are handled as ``POST /v1/events`` handles them: a mapping that is not an
        event is skipped, the others are sent, and the reply's ``bad_rows`` names each skipped
        row (``row I, field ...: why``, I its index in ``events``), also logged as a warning.

        A mapping's partition key is its value of the gateway's key attribute (as on the
        gateway's JSON path and in Spark jobs), so an event gets the same id, and a resent
        event is recognised as a duplicate, whichever path it takes.

        A table (a pandas or polars DataFrame, a pyarrow Table, RecordBatch or
        RecordBatchReader, anything with ``__arrow_c_stream__``) is read as
        ``Engine.process_table`` reads it (``ts``, ``type``, ``ts_format``: cep.io.tables) and
        travels as columns (cep.io.codec schema version 2), in batches of at most
        TABLE_BATCH_ROWS rows and about TABLE_BATCH_BYTES; their acknowledgements are added
        up (``bad_rows`` numbered from the table's first row). A column or event time that
        cannot be read raises IngestError before that batch is sent. Anything else than a
        table or a sequence of Events and mappings raises TypeError."""
        if is_table(events):
            return self._send_table(events, source, ts, type, ts_format)
        if isinstance(events, (str, bytes, bytearray, Mapping, Event)) or \
                not isinstance(events, Iterable):
            raise TypeError(f"send() takes a table or a sequence of Events and mappings, got "
                            f"{_kind(events)}")
        events = list(events)
        for i, e in enumerate(events):
            if not isinstance(e, (Event, Mapping)):
                raise TypeError(f"send() takes Events and mappings: row {i} is "
                                f"{_kind(e)}")
        key_attr = None
        if not all(isinstance(e, Event) for e in events):
            if self._key_attr is None:
                self.health()
            key_attr = self._key_attr[0]
        evs, bad = [], []
        for i, e in enumerate(events):
            if isinstance(e, Event):
                evs.append(e)
                continue
            try:
                evs.append(make_event(e, i, key_attr))
            except IngestError as exc:
                bad.append(str(exc))
        if bad:
            log.warning("client.send: skipped %d bad row(s) of %d: %s", len(bad), len(events),
                        "; ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""))
            if not evs:
                return {"events": 0, "duplicates": 0, "late": 0, "partitions": {},
                        "matches": 0, "truncated_triggers": 0, "bad_rows": bad}
        batch = encode_batch(evs, source or self.source, f"{self._run}:{next(self._batches)}")
        ack = self._send_batch(batch)
        if bad:
            ack["bad_rows"] = bad + list(ack.get("bad_rows", ()))
        return ack

    def _send_table(self, table, source, ts, type, ts_format) -> dict:
        """``send`` of a table: its column batches, one request each."""
        from raycep.cep.io.tables import TableReader
        if self._key_attr is None:
            self.health()
        reader = TableReader(table, key_attr=self._key_attr[0], ts=ts, type=type,
                             ts_format=ts_format)
        ack: dict = {"events": 0, "duplicates": 0, "late": 0, "partitions": {},
                     "matches": 0, "truncated_triggers": 0, "bad_rows": []}
        sent = 0
        for part in reader.tables():
            for piece in _pieces(part):
                batch = encode_columns(piece, source or self.source,
                                       f"{self._run}:{next(self._batches)}")
                _add_ack(ack, self._send_batch(batch), sent)
                sent += piece.num_rows
        return ack

    def _send_batch(self, batch: bytes) -> dict:
        """POST one batch; while the gateway (or an actor behind it) is unreachable, send the
        same batch again with backoff for up to ``retry_for`` seconds (a restarted gateway or
        actor recognises it by its id: nothing is applied twice). OverloadedError is raised
        at once: the gateway has already drained and retried for its ``overload_wait``."""
        deadline = time.monotonic() + self.retry_for
        pause = 0.1
        while True:
            try:
                return self._request("POST", "/v1/events", raw=batch)
            except OverloadedError:
                raise
            except UnavailableError as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("client.send: %s; sending the batch again in %.1f s", exc, pause)
                time.sleep(pause)
                pause = min(2 * pause, 2.0)

    def advance(self, watermark: float, force: bool = False) -> dict:
        """No event with ``ts <= watermark`` will come: releases deferred matches.

        ``watermark`` must be a finite number (IngestError before anything is sent). The
        gateway refuses one more than its ``--max-advance-ahead`` (default a day) past the
        latest event time its actors have seen, since every later event would then be late;
        ``force=True`` advances anyway."""
        if isinstance(watermark, bool) or not isinstance(watermark, (int, float)) \
                or not finite(watermark):
            raise IngestError(f"must be a finite number, got {short_repr(watermark)}",
                              field="watermark")
        body = {"watermark": watermark}
        if force:
            body["force"] = True
        return self._request("POST", "/v1/advance", body)

    def explain(self, query: str) -> dict:
        """What ``query`` is and how it is planned: its branches, the plan in use with its
        estimated cost, the order the planning algorithm would choose now, each condition's
        selectivity (measured or guessed) and counts, its sharing group and evaluation path
        (``raycep explain``; planner.explain.render prints it)."""
        return self._request("GET", f"/v1/queries/{_q(query)}/explain")

    def matches(self, query: str, since: int = 0, limit: int = 1000) -> MatchPage:
        """Matches of ``query`` after cursor ``since`` (oldest first)."""
        page = self._request("GET", f"/v1/queries/{_q(query)}/matches?since={int(since)}"
                                    f"&limit={int(limit)}")
        return MatchPage(page["matches"], page["next"], page.get("missed", 0),
                         page.get("head", 0))

    def matches_many(self, cursors: Mapping, limit: int = 1000, wait: float = 0.0) -> dict:
        """The matches of several queries in one request: ``cursors`` maps each query to the
        cursor to read after (a page's ``next``); returns query -> MatchPage. All or nothing:
        an unknown query raises NotFoundError. ``wait`` (seconds, at most 60): a long poll,
        answered as soon as one of them has a new match (or after ``wait`` with empty
        pages). A reader of many queries polls them with one request, and with ``wait``
        without spinning: each match is read as soon as it is stored."""
        if not isinstance(cursors, Mapping):
            raise TypeError(f"cursors must be a mapping of query -> cursor, got "
                            f"{type(cursors).__name__}")
        body = {"queries": {str(q): int(c) for q, c in cursors.items()}, "limit": int(limit)}
        if wait:
            body["wait"] = wait
        pages = self._request("POST", "/v1/matches", body,
                              timeout=self.timeout + (wait or 0))["pages"]
        return {q: MatchPage(p["matches"], p["next"], p.get("missed", 0), p.get("head", 0))
                for q, p in pages.items()}

    def late_events(self, since: int = 0, limit: int = 1000) -> MatchPage:
        """Events that arrived later than the lateness threshold (never used by any query):
        records ``{"late": true, "id", "source", "reason", "score", "threshold", "watermark",
        "event", "cursor"}`` after cursor ``since``, oldest first."""
        page = self._request("GET", f"/v1/late?since={int(since)}&limit={int(limit)}")
        return MatchPage(page["matches"], page["next"], page.get("missed", 0),
                         page.get("head", 0))

    def routing(self) -> dict:
        return self._request("GET", "/v1/routing")

    def scale(self, partitions: int, timeout: float = 600.0) -> dict:
        """Re-partition the cluster to ``partitions`` actors while it runs: the state of the
        keys (the events in their windows, pending matches, duplicate memory) moves with their
        key groups; sends wait meanwhile, none is lost. Returns ``{"partitions", "before",
        "moved_key_groups", "key_groups", "buffered", "seconds", "version"}``."""
        return self._request("POST", "/v1/scale", {"partitions": partitions}, timeout=timeout)

    def scaling(self) -> dict:
        """``{"partitions", "key_groups", "version", "history"}``: the current number of
        partition actors and the rescales so far."""
        return self._request("GET", "/v1/scale")

    def stats(self) -> dict:
        return self._request("GET", "/v1/stats")

    def drained(self, timeout: float = 60.0, every: float = 0.1) -> bool:
        """Wait until every actor has handed its matches to the gateway (their outboxes are
        empty, e.g. after ``advance``), for up to ``timeout`` seconds; True when they did."""
        deadline = time.monotonic() + timeout
        while True:
            if all(not a.get("outbox") for a in self.stats()["actors"].values()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(every)

    def subscribe(self, query: str, since: int = 0):
        """Iterate over the matches of ``query`` as they arrive (Server-Sent Events), and the
        retractions (records with ``"retracted": true``) of optimistic queries. Ends
        when the query is removed. Matches the store dropped before this reader saw them
        are logged and counted in ``client.missed``."""
        resp = self._request("GET", f"/v1/queries/{_q(query)}/stream?since={int(since)}",
                             timeout=max(self.timeout, 3 * KEEPALIVE), stream=True)
        self.missed = getattr(self, "missed", 0)
        self._streams.add(resp)
        with resp:
            event, data = "message", []
            for raw in _lines(resp, self.address, query):
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith(":"):
                    continue
                if line:
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event":
                        event = value
                    elif field == "data":
                        data.append(value)
                    continue
                payload = json.loads("\n".join(data)) if data else None
                if event in ("match", "retraction"):
                    yield payload
                elif event == "gap":
                    self.missed += payload["missed"]
                    log.warning("subscription to %s missed %d matches (store overflow)",
                                query, payload["missed"])
                elif event == "end":
                    self._streams.discard(resp)
                    return
                event, data = "message", []
        self._streams.discard(resp)

    def listen(self, query: str, callback, since: int = 0) -> threading.Thread:
        """Call ``callback(match)`` for every match of ``query`` on a daemon thread (a
        callback sink); the thread ends when the query is removed."""
        def run():
            try:
                for m in self.subscribe(query, since):
                    callback(m)
            except GatewayError as exc:
                log.warning("listener for %s stopped: %s", query, exc)
        thread = threading.Thread(target=run, name=f"raycep-listen-{query}", daemon=True)
        thread.start()
        return thread


def _set_entry(item, k: int):
    """One item of ``register_many``'s list as the gateway takes it."""
    if isinstance(item, Query):
        return str(item)
    if isinstance(item, (str, Mapping)):
        return item if isinstance(item, str) else dict(item)
    if isinstance(item, tuple) and 1 <= len(item) <= 4:
        text = str(item[0]) if isinstance(item[0], Query) else item[0]
        return dict(zip(("text", "name", "params", "mode"), (text, *item[1:])))
    raise TypeError(f"register_many(): query #{k} must be query text, a Query, a tuple "
                    f"(text, name[, params[, mode]]) or a dict, got {type(item).__name__}")


def strict_json(data, **options) -> str:
    """``json.dumps`` writing strict JSON: a non-finite float (NaN, an infinite watermark)
    becomes null, an unknown type its ``str``."""
    if not options:                      # orjson writes NaN and infinities as null itself
        try:
            return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):      # e.g. an integer beyond 64 bits
            pass
    try:
        return json.dumps(data, default=str, allow_nan=False, **options)
    except ValueError:                   # a NaN or an infinity somewhere: the slow path
        return json.dumps(_finite(data), default=str, allow_nan=False, **options)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _lines(resp, address: str, query: str):
    """The lines of a streaming response; a broken connection -> UnavailableError."""
    try:
        yield from resp
    except (OSError, http.client.HTTPException) as exc:
        raise UnavailableError(f"the subscription to {query!r} at {address} was interrupted: "
                               f"{type(exc).__name__}: {exc}") from None


def _kind(value) -> str:
    cls = type(value)
    module = cls.__module__.partition(".")[0]
    return f"a {cls.__name__}" if module == "builtins" else f"a {module}.{cls.__name__}"


def _pieces(table):
    """A table of the engine's columns cut into pieces of about TABLE_BATCH_BYTES at most:
    one request each, under the gateway's body limit (16 MiB by default). Event times given
    as text (numbers: ts_format "s") travel as numbers (the wire's rule)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    ts = table.column("ts")
    if pa.types.is_string(ts.type) or pa.types.is_large_string(ts.type):
        try:
            table = table.set_column(table.schema.get_field_index("ts"), "ts",
                                     pc.cast(ts, pa.float64()))
        except pa.ArrowInvalid as exc:
            raise IngestError(f"event times that are text must be numbers of seconds, or "
                              f"be read with ts_format='iso' or a strftime pattern: "
                              f"{str(exc).splitlines()[0]}", field="ts") from None
    rows = max(1, min(TABLE_BATCH_ROWS,
                      table.num_rows * TABLE_BATCH_BYTES // max(1, table.nbytes)))
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def _add_ack(total: dict, ack: dict, first_row: int) -> None:
    """Adds the acknowledgement of a table's batch whose first row is ``first_row`` to
    ``total``: counts added up, bad rows renumbered from the table's first row."""
    for name, value in ack.items():
        if name == "bad_rows":
            total[name].extend(_ROW.sub(lambda m: f"row {int(m[1]) + first_row}", row, 1)
                               for row in value)
        elif isinstance(value, dict):
            into = total.setdefault(name, {})
            for key, count in value.items():
                into[key] = into.get(key, 0) + count
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total[name] = total.get(name, 0) + value
        else:
            total[name] = value


def connect(address: str | None = None, token: str | None = None,
            timeout: float = 60.0, retry_for: float = 30.0) -> Client:
    """A client for the gateway at ``address`` (None: ``$RAYCEP_GATEWAY``, else
    http://127.0.0.1:8470, as the ``raycep`` commands) with ``token`` (None:
    ``$RAYCEP_TOKEN``); checks it answers and accepts the token. ``retry_for``: seconds
    ``send`` keeps retrying a batch while the gateway is unreachable (0: fail at once).
    Use it as a context manager (``with connect() as client:``) to close its streams."""
    if address is None:
        address = os.environ.get("RAYCEP_GATEWAY") or DEFAULT_ADDRESS
    if token is None:
        token = os.environ.get("RAYCEP_TOKEN") or None
    client = Client(address, token, timeout, retry_for)
    client.health()
    return client


def _q(query: str) -> str:
    if not isinstance(query, str) or not query:
        raise IngestError(f"a query id must be a non-empty string, got {query!r}")
    return urllib.parse.quote(query, safe="")


def _remote_error(code: int, reason, headers, body: bytes, url: str) -> GatewayError:
    """The raycep error an HTTP error answer carries (``code``, its ``headers`` and
    ``body``), or a GatewayError saying the answer was not a raycep one."""
    try:
        if headers.get_content_type() == MSGPACK:
            data = msgpack.unpackb(body, raw=False)
        else:
            data = json.loads(body)
        err = error_from_dict(data["error"])
    except Exception:
        err = GatewayError(f"{url} answered HTTP {code} {reason or ''} without a raycep "
                           f"error: is the address a raycep gateway (`raycep serve` prints "
                           f"its URL)? body: {body[:200]!r}")
    if isinstance(err, GatewayError):
        err.status = code                     # 413, 405, 500 ... as the gateway answered
    return err
