"""The gateway's HTTP API (aiohttp) and GatewayServer, the object the gateway Ray actor wraps.

Routes (all under ``/v1``; JSON by default, msgpack when the request says
``Content-Type: application/msgpack`` / the client sends ``Accept: application/msgpack``):

  GET    /health                      liveness and counts
  GET    /queries                     every query: status, scope, plan (order, version), stats
  POST   /queries                     {"text", "name"?, "params"?, "mode"?} -> the registered query
  POST   /query-set                   {"text": query file} or {"queries": [text or {"text",
                                      "name"?, "params"?, "mode"?}]}, "params"?, "mode"? ->
                                      {"registered": [{"id", "scope"}]}: all or nothing
  POST   /query-set/remove            {"ids": [...]} -> {"removed": [{"id", "matches"}]}
  GET    /queries/{id}                one query
  DELETE /queries/{id}                remove it
  GET    /queries/{id}/explain        its branches, plan in use and cost, the order the planner
                                      would choose now, each condition's selectivity and counts
  GET    /queries/{id}/matches        ?since=CURSOR&limit=N -> {"matches", "next", "missed", "head"}
  POST   /matches                     {"queries": {id: CURSOR, ...}, "limit": N, "wait": s} ->
                                      {"pages": {id: page, ...}}: several queries' pages in
                                      one request (``wait``: a long poll)
  GET    /queries/{id}/stream         ?since=CURSOR -> Server-Sent Events
                                      (event: match | retraction | gap | end)
  GET    /late                        ?since=CURSOR&limit=N -> late events, paged like matches

A retraction is the record of the match it cancels (same ``id``) plus ``"retracted": true``.
  POST   /events                      a msgpack batch (cep.io.codec) or JSON rows
  POST   /advance                     {"watermark": w, "force"?: bool}
  GET    /routing                     the routing table producers use
  POST   /scale                       {"partitions": n}: re-partition to n actors, the keys'
                                      state moving with their key groups (gateway/server/scaling.py)
  GET    /scale                       partitions, key groups, routing version, rescales so far,
                                      the autoscaler's settings and decisions (or null)
  GET    /stats                       gateway and actor counters

Outside ``/v1``: ``GET /metrics`` (Prometheus text exposition, gateway/server/metrics.py),
``GET /healthz`` (liveness) and ``GET /readyz`` (started and every actor answering; 503
otherwise): the two probes answer without a token and without details. ``GET /`` (and
``/console``): the console, a page whose calls carry the token typed in it.

With a token configured every request needs ``Authorization: Bearer <token>`` (the scheme in
any case, RFC 7235); without it the answer is 401 and nothing changes.

Every answer is a JSON (or msgpack) body; errors are ``{"error": {"type", "message",
"line"?, ...}}``, a client's mistake always with a 4xx: 400 for a malformed or mistyped
body (JSON's non-standard ``NaN``/``Infinity`` tokens included), a body nested deeper than
``max_depth`` or a bad query-string argument, 413 for a body above ``max_body_bytes``,
404/405 for an unknown route or method. An unexpected failure is a 500 with a generic message
(the details go to the log). JSON replies are strict JSON: a non-finite float (an
``Infinity`` watermark in ``/v1/stats``) is written as ``null``; msgpack replies carry it as
the float it is.
"""
from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import time
from importlib import resources

import msgpack
from aiohttp import web

from raycep.cep.errors import (AuthenticationError, CepError, GatewayError, IngestError,
                        NotFoundError, error_to_dict, http_status)
from raycep.cep.lang.validate import short_repr
from raycep.gateway.client import strict_json as dumps
from raycep.gateway.server.messages import plain_text, type_name
from raycep.gateway.server.metrics import CONTENT_TYPE
from raycep.gateway.server.query_sets import file_entries, list_entries
from raycep.gateway.server.registry import QueryRegistry
from raycep.gateway.server.service import GatewayService, GatewaySettings
from raycep.gateway.server.store import MatchStore

log = logging.getLogger("raycep.gateway")

MSGPACK = "application/msgpack"
SERVICE = web.AppKey("service", GatewayService)
TOKEN = web.AppKey("token", object)
SETTINGS = web.AppKey("settings", GatewaySettings)
#: the largest cursor / limit in a query string (a signed 64-bit integer)
MAX_INT_ARG = 2**63 - 1


# --------------------------------------------------------------------------- replies

def _wants_msgpack(request) -> bool:
    return MSGPACK in request.headers.get("Accept", "")


def reply(request, data, status: int = 200) -> web.Response:
    if _wants_msgpack(request):
        return web.Response(body=msgpack.packb(data, use_bin_type=True, default=str),
                            status=status, content_type=MSGPACK)
    return web.Response(text=dumps(data), status=status, content_type="application/json")


def error_reply(request, exc: CepError, status: int | None = None) -> web.Response:
    body = error_to_dict(exc)
    for key in ("message", "reason", "excerpt"):
        if isinstance(body.get(key), str):
            body[key] = plain_text(body[key])
    return reply(request, {"error": body}, status or http_status(exc))


def _status_error(status: int, message: str) -> GatewayError:
    err = GatewayError(message)
    err.status = status
    return err


# --------------------------------------------------------------------------- bodies

def _too_large(limit: int) -> GatewayError:
    return _status_error(413, f"the request body is larger than this gateway's limit of "
                              f"{limit} bytes (raycep serve --max-body-bytes)")


def _too_deep(limit: int) -> IngestError:
    return IngestError(f"the body nests arrays/maps deeper than this gateway's limit of "
                       f"{limit} levels (raycep serve --max-depth)")


def _reject_constant(token: str):
    raise IngestError(f"the JSON body holds {token}, which is not JSON (send a finite number, "
                      f"or null)")


def check_depth(obj, limit: int) -> None:
    """IngestError when ``obj`` nests lists/maps more than ``limit`` deep: one pass over its
    containers, level by level (no recursion)."""
    level = [obj] if type(obj) is dict or type(obj) is list else []
    for _ in range(limit):
        level = [v for o in level for v in (o.values() if type(o) is dict else o)
                 if type(v) is dict or type(v) is list]
        if not level:
            return
    raise _too_deep(limit)


async def body_of(request):
    """The request body, decoded: msgpack or JSON.

    Bounded before anything is built from it: the size (``max_body_bytes``, 413, checked on
    the declared length before reading), msgpack lengths (``unpackb`` limits every string,
    array and map by the body's length) and the nesting (``max_depth``, 400; a body too deep
    for the decoders' own stacks gets the same answer)."""
    settings = request.app[SETTINGS]
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None
    if request.content_type == MSGPACK:
        try:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except msgpack.StackError:
            raise _too_deep(settings.max_depth) from None
        except Exception as exc:         # msgpack raises ValueError, TypeError, its own ...
            raise IngestError(f"the msgpack body cannot be decoded: "
                              f"{str(exc) or type(exc).__name__}") from None
        check_depth(obj, settings.max_depth)
        return obj
    if not data:
        return {}
    try:
        obj = json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise _too_deep(settings.max_depth) from None
    except ValueError as exc:            # JSONDecodeError, UnicodeDecodeError
        raise IngestError(f"the JSON body is malformed: {exc}") from None
    check_depth(obj, settings.max_depth)
    return obj


def _object(body, fields: dict, required: tuple = ()) -> dict:
    """A JSON-object body with only the known ``fields`` (name -> description)."""
    if not isinstance(body, dict):
        raise IngestError(f"expected a JSON object {{{', '.join(fields)}}}, got "
                          f"{type_name(body)}")
    for key in body:
        if key not in fields:
            raise IngestError(f"unknown field {key!r} (known: {', '.join(fields)})")
    for key in required:
        if key not in body:
            raise IngestError(f"missing field {key!r}: {fields[key]}", field=key)
    return body


def _int_arg(request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if raw.isascii() else None
    except ValueError:
        value = None
    if value is None or not 0 <= value <= MAX_INT_ARG:
        raise IngestError(f"query parameter {name!r} must be an integer from 0 to "
                          f"{MAX_INT_ARG}, got {raw[:100]!r}")
    return value


# --------------------------------------------------------------------------- middleware

def _authorized(request, token: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case (RFC 7235); the token is
    compared in constant time."""
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    match = hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"),
                                token.encode("utf-8"))
    return match and scheme.lower() == "bearer"


@web.middleware
async def errors_and_auth(request, handler):
    """Authentication, and every failure as a JSON error body: raycep errors with their
    status, aiohttp's own (no route, method, body size) as 4xx, anything else a logged 500."""
    token = request.app[TOKEN]
    began = time.perf_counter()
    try:
        if token is not None and request.path not in OPEN_PATHS and \
                not _authorized(request, token):
            raise AuthenticationError("missing or wrong bearer token (send the header "
                                      "'Authorization: Bearer <token>')")
        return await handler(request)
    except CepError as exc:
        resp = error_reply(request, exc)
        if isinstance(exc, AuthenticationError):
            resp.headers["WWW-Authenticate"] = "Bearer"
        if getattr(exc, "retry_after", None):         # backpressure (OverloadedError)
            resp.headers["Retry-After"] = str(exc.retry_after)
        return resp
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if isinstance(exc, web.HTTPNotFound):
            err = NotFoundError(f"no route {request.method} {request.path}")
        elif isinstance(exc, web.HTTPMethodNotAllowed):
            err = _status_error(405, f"{request.method} is not allowed on {request.path} "
                                     f"(allowed: {', '.join(sorted(exc.allowed_methods))})")
        elif isinstance(exc, web.HTTPRequestEntityTooLarge):
            err = _too_large(request.app[SETTINGS].max_body_bytes)
        else:
            err = _status_error(exc.status, exc.reason)
        resp = error_reply(request, err, exc.status)
        if "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        return error_reply(request, _status_error(
            500, "internal error in the gateway (details are in its log)"), 500)
    finally:
        route = request.match_info.route.resource
        request.app[SERVICE].metrics.observe_request(
            request.method, route.canonical if route is not None else "unmatched",
            time.perf_counter() - began)


# --------------------------------------------------------------------------- handlers

async def health(request):
    return reply(request, await request.app[SERVICE].health())


async def healthz(request):
    """Liveness, without a token and without details: the gateway answers."""
    return web.Response(text="ok\n")


async def readyz(request):
    """Readiness, without a token and without details: started, and every actor answers."""
    if await request.app[SERVICE].ready():
        return web.Response(text="ready\n")
    return web.Response(text="not ready\n", status=503)


@functools.cache
def _console_page() -> bytes:
    return resources.files("raycep.gateway.server").joinpath("console.html").read_bytes()


async def console(request):
    """The console (gateway/server/console.html, read once): one page, no build step; its
    calls to the API carry the token typed in it."""
    return web.Response(body=_console_page(), content_type="text/html", charset="utf-8")


async def metrics(request):
    """Prometheus text exposition (gateway/server/metrics.py)."""
    return web.Response(body=await request.app[SERVICE].metrics_text(),
                        headers={"Content-Type": CONTENT_TYPE})


async def list_queries(request):
    return reply(request, {"queries": await request.app[SERVICE].queries()})


QUERY_FIELDS = {"text": "the query text", "name": "its id (optional)",
                "params": "parameter values (optional)",
                "mode": "optimistic or pessimistic (optional)"}


async def add_query(request):
    body = _object(await body_of(request), QUERY_FIELDS, required=("text",))
    info = await request.app[SERVICE].register(body["text"], body.get("name"),
                                               body.get("params"), body.get("mode"))
    return reply(request, info, 201)


SET_FIELDS = {"text": "a query file's text (queries separated by ';')",
              "queries": "an array of query texts or {text, name?, params?, mode?} objects",
              "params": "parameter values of the queries that give none (optional)",
              "mode": "optimistic or pessimistic, for the queries that give none (optional)"}


async def add_query_set(request):
    """A query set, all or nothing (gateway.server.query_sets)."""
    body = _object(await body_of(request), SET_FIELDS)
    if ("text" in body) == ("queries" in body):
        raise IngestError("give either 'text' (a query file) or 'queries' (an array), not "
                          "both or neither")
    params, mode = body.get("params"), body.get("mode")
    entries = file_entries(body["text"], params, mode) if "text" in body else \
        list_entries(body["queries"], params, mode)
    return reply(request, await request.app[SERVICE].register_many(entries), 201)


async def remove_query_set(request):
    body = _object(await body_of(request), {"ids": "the ids of the queries to remove"},
                   required=("ids",))
    return reply(request, await request.app[SERVICE].remove_many(body["ids"]))


async def get_query(request):
    return reply(request, await request.app[SERVICE].describe(request.match_info["id"]))


async def explain_query(request):
    return reply(request, await request.app[SERVICE].explain(request.match_info["id"]))


async def remove_query(request):
    return reply(request, await request.app[SERVICE].remove(request.match_info["id"]))


def _page(request) -> tuple:
    """``(since, limit)`` of a paged read."""
    return _int_arg(request, "since", 0), _int_arg(request, "limit", 1000)


async def read_matches(request):
    return reply(request, request.app[SERVICE].matches(request.match_info["id"], *_page(request)))


#: the paths answered without a token (the probes: no details; the console's page: no data,
#: its calls carry the token the user types)
OPEN_PATHS = frozenset(("/healthz", "/readyz", "/", "/console"))

#: the fields of POST /v1/matches
READ_FIELDS = {"queries": "an object: query id -> the cursor to read after (0: from the start)",
               "limit": "the most matches per query (default 1000)",
               "wait": "seconds to wait for a match when none is there yet (default 0, at "
                       "most 60): a long poll"}
#: the longest wait of a long poll (POST /v1/matches)
MAX_READ_WAIT = 60.0
#: the most queries one POST /v1/matches reads
MAX_READ_QUERIES = 10_000


async def read_many(request):
    """The matches of several queries in one request: ``{"queries": {id: since, ...},
    "limit": n, "wait": seconds}`` -> ``{"pages": {id: page, ...}}`` (each page as GET
    .../matches gives it); all or nothing (an unknown query: 404 naming it). With ``wait``,
    a long poll: the answer comes as soon as one of the queries has a match past its
    cursor, or after ``wait`` seconds with empty pages."""
    body = _object(await body_of(request), READ_FIELDS, required=("queries",))
    cursors, limit, wait = body["queries"], body.get("limit", 1000), body.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or \
            not 0 <= wait <= MAX_READ_WAIT:
        raise IngestError(f"'wait' must be a number of seconds from 0 to {MAX_READ_WAIT:g}, "
                          f"got {short_repr(wait)}", field="wait")
    if not isinstance(cursors, dict):
        raise IngestError(f"'queries' must be an object of query id -> cursor, got "
                          f"{type_name(cursors)}", field="queries")
    if len(cursors) > MAX_READ_QUERIES:
        raise IngestError(f"'queries' names {len(cursors)} queries; at most "
                          f"{MAX_READ_QUERIES} per request", field="queries")
    for name, value in (("limit", limit), *cursors.items()):
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= MAX_INT_ARG:
            raise IngestError(f"{'limit' if name == 'limit' else f'the cursor of {name!r}'}"
                              f" must be an integer from 0 to {MAX_INT_ARG}, got "
                              f"{short_repr(value)}", field="limit" if name == "limit"
                              else "queries")
    service = request.app[SERVICE]
    cursors = {str(q): since for q, since in cursors.items()}
    for q in cursors:
        service.matches(q, 0, 0)                    # 404 before waiting
    if wait:
        await service.store.wait_any(cursors, float(wait))
    return reply(request, {"pages": {q: service.matches(q, since, limit)
                                     for q, since in cursors.items()}})


async def read_late(request):
    return reply(request, request.app[SERVICE].late_events(*_page(request)))


async def stream_matches(request):
    """Server-Sent Events: ``match`` and ``retraction`` events (id: cursor), ``gap`` when the
    store dropped
    matches this reader had not read, ``end`` when the query is removed; a comment line every
    ``keepalive`` seconds. Data lines are strict JSON like every reply."""
    service = request.app[SERVICE]
    qid = request.match_info["id"]
    cursor = _int_arg(request, "since", 0)
    service.matches(qid, cursor, 0)                  # 404 before the stream starts
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    store = service.store
    following = service.metrics.subscribers.labels(qid)
    following.inc()
    try:
        while True:
            try:
                page = store.read(qid, cursor, 500)
            except KeyError:
                await resp.write(b"event: end\ndata: {\"reason\": \"query removed\"}\n\n")
                break
            if page["missed"]:
                await resp.write(f"event: gap\ndata: {dumps({'missed': page['missed']})}"
                                 f"\n\n".encode())
            for m in page["matches"]:
                kind = "retraction" if m.get("retracted") else "match"
                await resp.write(f"id: {m['cursor']}\nevent: {kind}\ndata: "
                                 f"{dumps(m)}\n\n".encode())
            cursor = page["next"]
            if not page["matches"] and not await store.wait(qid, cursor, 15.0):
                if qid not in store.queries():
                    continue                          # next read says "end"
                await resp.write(b": keepalive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        following.dec()
    return resp


async def post_events(request):
    body = await body_of(request)        # a msgpack batch comes unpacked (and depth-checked)
    return reply(request, await request.app[SERVICE].ingest_body(
        body, batch=request.content_type == MSGPACK))


ADVANCE_FIELDS = {"watermark": "a finite number", "force": "true to pass the "
                  "max-advance-ahead bound (optional)"}


async def post_advance(request):
    body = _object(await body_of(request), ADVANCE_FIELDS, required=("watermark",))
    return reply(request, await request.app[SERVICE].advance(body["watermark"],
                                                             body.get("force", False)))


async def routing(request):
    return reply(request, request.app[SERVICE].routing.to_dict())


SCALE_FIELDS = {"partitions": "the number of partition actors, from 1 to the cluster's key "
                              "groups"}


async def post_scale(request):
    body = _object(await body_of(request), SCALE_FIELDS, required=("partitions",))
    return reply(request, await request.app[SERVICE].scale(body["partitions"]))


async def get_scale(request):
    service = request.app[SERVICE]
    return reply(request, {"partitions": service.routing.partitions,
                           "key_groups": service.routing.key_groups,
                           "version": service.routing.version, "history": service.scaling(),
                           "autoscale": service.autoscale()})


async def stats(request):
    return reply(request, await request.app[SERVICE].stats())


def make_app(service: GatewayService, token: str | None = None) -> web.Application:
    settings = service.settings
    app = web.Application(middlewares=[errors_and_auth],
                          client_max_size=settings.max_body_bytes)
    app[SERVICE] = service
    app[TOKEN] = token
    app[SETTINGS] = settings
    app.add_routes([
        web.get("/v1/health", health),
        web.get("/healthz", healthz),
        web.get("/readyz", readyz),
        web.get("/metrics", metrics),
        web.get("/", console),
        web.get("/console", console),
        web.get("/v1/queries", list_queries),
        web.post("/v1/queries", add_query),
        web.post("/v1/query-set", add_query_set),
        web.post("/v1/query-set/remove", remove_query_set),
        web.get("/v1/queries/{id}", get_query),
        web.delete("/v1/queries/{id}", remove_query),
        web.get("/v1/queries/{id}/matches", read_matches),
        web.get("/v1/queries/{id}/explain", explain_query),
        web.post("/v1/matches", read_many),
        web.get("/v1/queries/{id}/stream", stream_matches),
        web.get("/v1/late", read_late),
        web.post("/v1/events", post_events),
        web.post("/v1/advance", post_advance),
        web.get("/v1/routing", routing),
        web.post("/v1/scale", post_scale),
        web.get("/v1/scale", get_scale),
        web.get("/v1/stats", stats),
    ])
    return app


class GatewayServer:
    """The gateway: service + HTTP server + background loops (outbox drain, planner rounds).
    Runs on an asyncio loop: inside an async Ray actor (``gateway/runtime.py``) or a thread."""

    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 settings: GatewaySettings = GatewaySettings(), spawner=None):
        """``spawner``: how the runtime starts and stops partition actors (``raycep
        scale``; gateway/server/scaling.py), None where it cannot."""
        self.settings = settings
        self.service = GatewayService(
            partitions, global_actor, planner, key_attr,
            QueryRegistry(settings.registry_path),
            MatchStore(settings.match_capacity, settings.matches_jsonl,
                       cursor_base=int(time.time() * 1000) * 1000), settings, spawner)
        self._runner = None
        self._tasks: list = []
        self.url = None

    async def start(self) -> str:
        """Attach to the actors, restore the registry, listen; returns the base URL."""
        await self.service.start()
        self._runner = web.AppRunner(make_app(self.service, self.settings.token),
                                     access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port,
                           reuse_address=True)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.settings.host}:{port}"
        self._tasks = [asyncio.ensure_future(self._drain_loop())]
        if self.settings.plan_every > 0:
            self._tasks.append(asyncio.ensure_future(self._plan_loop()))
        log.info("gateway listening on %s", self.url)
        return self.url

    async def _drain_loop(self):
        """Move the actors' outboxes to the store: every ``drain_every`` s while records move,
        the pause doubling up to ``drain_idle`` s while none do (issue 33: a 20 ms poll of
        every actor kept an idle cluster at ~0.27 cores). The gateway's own ingest and
        advance drain before they answer; this loop picks up what producers that write to
        the actors directly (Spark, ``raycep ingest``) cause."""
        fast = self.settings.drain_every
        slow = max(fast, self.settings.drain_idle)
        pause = fast
        while True:
            if await self.service.drain_all():
                pause = fast
                continue
            await asyncio.sleep(pause)
            pause = min(pause * 2, slow)

    async def _plan_loop(self):
        while True:
            await asyncio.sleep(self.settings.plan_every)
            try:
                await self.service.plan_round()
            except CepError as exc:
                log.warning("planner round failed: %s", exc)

    async def address(self) -> str:
        return self.url

    async def routing(self) -> dict:
        """The routing table (what ``GET /v1/routing`` answers), for producers inside the
        Ray cluster (Spark's push tasks after a re-partitioning)."""
        return self.service.routing.to_dict()

    async def stop(self):
        for task in self._tasks:
            task.cancel()
        await self.service.stop_autoscale()
        await self.service.acknowledge()
        if self._runner is not None:
            await self._runner.cleanup()
        self.service.registry.close()
        self.service.store.close_sink()
