"""The gateway's HTTP API (aiohttp) and GatewayServer, the object the gateway Ray actor wraps.

Routes (all under ``/v1``; JSON by default, msgpack when the request says
``Content-Type: application/msgpack`` / the client sends ``Accept: application/msgpack``):

  GET    /health                      liveness and counts
  GET    /queries                     every query: status, scope, plan (order, version), stats
  POST   /queries                     {"text", "name"?, "params"?, "mode"?} -> the registered query
  GET    /queries/{id}                one query
  DELETE /queries/{id}                remove it
  GET    /queries/{id}/matches        ?since=CURSOR&limit=N -> {"matches", "next", "missed", "head"}
  GET    /queries/{id}/stream         ?since=CURSOR -> Server-Sent Events
                                      (event: match | retraction | gap | end)
  GET    /late                        ?since=CURSOR&limit=N -> late events, paged like matches

A retraction is the record of the match it cancels (same ``id``) plus ``"retracted": true``.
  POST   /events                      a msgpack batch (cep.codec) or JSON rows
  POST   /advance                     {"watermark": w}
  GET    /routing                     the routing table producers use
  GET    /stats                       gateway and actor counters

With a token configured every request needs ``Authorization: Bearer <token>``; without it the
answer is 401 and nothing changes. Errors are ``{"error": {"type", "message", "line"?, ...}}``.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time

import msgpack
from aiohttp import web

from cep.errors import (AuthenticationError, CepError, IngestError, NotFoundError,
                        error_to_dict, http_status)
from gateway.registry import QueryRegistry
from gateway.service import GatewayService, GatewaySettings
from gateway.store import MatchStore

log = logging.getLogger("raycep.gateway")

MSGPACK = "application/msgpack"
SERVICE = web.AppKey("service", GatewayService)
TOKEN = web.AppKey("token", object)


def _wants_msgpack(request) -> bool:
    return MSGPACK in request.headers.get("Accept", "")


def reply(request, data, status: int = 200) -> web.Response:
    if _wants_msgpack(request):
        return web.Response(body=msgpack.packb(data, use_bin_type=True), status=status,
                            content_type=MSGPACK)
    return web.Response(text=json.dumps(data, default=str), status=status,
                        content_type="application/json")


async def body_of(request, raw_msgpack: bool = False):
    """The request body: msgpack (decoded, or raw bytes with ``raw_msgpack``) or JSON."""
    data = await request.read()
    if request.content_type == MSGPACK:
        if raw_msgpack:
            return data
        try:
            return msgpack.unpackb(data, raw=False)
        except Exception as exc:
            raise IngestError(f"the msgpack body cannot be decoded: {exc}") from None
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError as exc:
        raise IngestError(f"the JSON body is malformed: {exc}") from None


@web.middleware
async def errors_and_auth(request, handler):
    token = request.app[TOKEN]
    try:
        if token is not None:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                raise AuthenticationError("missing or wrong bearer token (send the header "
                                          "'Authorization: Bearer <token>')")
        return await handler(request)
    except CepError as exc:
        resp = reply(request, {"error": error_to_dict(exc)}, http_status(exc))
        if isinstance(exc, AuthenticationError):
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    except web.HTTPNotFound:
        return reply(request, {"error": error_to_dict(NotFoundError(
            f"no route {request.method} {request.path}"))}, 404)


def _int_arg(request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise IngestError(f"query parameter {name!r} must be an integer, got {raw!r}") from None


async def health(request):
    return reply(request, await request.app[SERVICE].health())


async def list_queries(request):
    return reply(request, {"queries": await request.app[SERVICE].queries()})


async def add_query(request):
    body = await body_of(request)
    if not isinstance(body, dict) or "text" not in body:
        raise IngestError("expected {\"text\": <query text>, \"name\"?: ..., \"params\"?: {...}}")
    params = body.get("params") or {}
    if not isinstance(params, dict):
        raise IngestError("params must be a mapping of names to values", field="params")
    mode = body.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise IngestError("mode must be \"optimistic\" or \"pessimistic\"", field="mode")
    info = await request.app[SERVICE].register(body["text"], body.get("name"), params, mode)
    return reply(request, info, 201)


async def get_query(request):
    return reply(request, await request.app[SERVICE].describe(request.match_info["id"]))


async def remove_query(request):
    return reply(request, await request.app[SERVICE].remove(request.match_info["id"]))


def _page(request) -> tuple:
    """``(since, limit)`` of a paged read."""
    return _int_arg(request, "since", 0), _int_arg(request, "limit", 1000)


async def read_matches(request):
    return reply(request, request.app[SERVICE].matches(request.match_info["id"], *_page(request)))


async def read_late(request):
    return reply(request, request.app[SERVICE].late_events(*_page(request)))


async def stream_matches(request):
    """Server-Sent Events: ``match`` and ``retraction`` events (id: cursor), ``gap`` when the
    store dropped
    matches this reader had not read, ``end`` when the query is removed; a comment line every
    ``keepalive`` seconds."""
    service = request.app[SERVICE]
    qid = request.match_info["id"]
    cursor = _int_arg(request, "since", 0)
    service.matches(qid, cursor, 0)                  # 404 before the stream starts
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    store = service.store
    try:
        while True:
            try:
                page = store.read(qid, cursor, 500)
            except KeyError:
                await resp.write(b"event: end\ndata: {\"reason\": \"query removed\"}\n\n")
                break
            if page["missed"]:
                await resp.write(f"event: gap\ndata: {json.dumps({'missed': page['missed']})}"
                                 f"\n\n".encode())
            for m in page["matches"]:
                kind = "retraction" if m.get("retracted") else "match"
                await resp.write(f"id: {m['cursor']}\nevent: {kind}\ndata: "
                                 f"{json.dumps(m, default=str)}\n\n".encode())
            cursor = page["next"]
            if not page["matches"] and not await store.wait(qid, cursor, 15.0):
                if qid not in store.queries():
                    continue                          # next read says "end"
                await resp.write(b": keepalive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return resp


async def post_events(request):
    body = await body_of(request, raw_msgpack=True)
    return reply(request, await request.app[SERVICE].ingest_body(body))


async def post_advance(request):
    body = await body_of(request)
    w = body.get("watermark") if isinstance(body, dict) else None
    if isinstance(w, bool) or not isinstance(w, (int, float)):
        raise IngestError("expected {\"watermark\": <number>}", field="watermark")
    return reply(request, await request.app[SERVICE].advance(w))


async def routing(request):
    return reply(request, request.app[SERVICE].routing.to_dict())


async def stats(request):
    return reply(request, await request.app[SERVICE].stats())


def make_app(service: GatewayService, token: str | None = None) -> web.Application:
    app = web.Application(middlewares=[errors_and_auth], client_max_size=64 * 2**20)
    app[SERVICE] = service
    app[TOKEN] = token
    app.add_routes([
        web.get("/v1/health", health),
        web.get("/v1/queries", list_queries),
        web.post("/v1/queries", add_query),
        web.get("/v1/queries/{id}", get_query),
        web.delete("/v1/queries/{id}", remove_query),
        web.get("/v1/queries/{id}/matches", read_matches),
        web.get("/v1/queries/{id}/stream", stream_matches),
        web.get("/v1/late", read_late),
        web.post("/v1/events", post_events),
        web.post("/v1/advance", post_advance),
        web.get("/v1/routing", routing),
        web.get("/v1/stats", stats),
    ])
    return app


class GatewayServer:
    """The gateway: service + HTTP server + background loops (outbox drain, planner rounds).
    Runs on an asyncio loop: inside an async Ray actor (``gateway_actor``) or a thread."""

    def __init__(self, partitions: list, global_actor, planner, key_attr: str | None,
                 settings: GatewaySettings = GatewaySettings()):
        self.settings = settings
        self.service = GatewayService(
            partitions, global_actor, planner, key_attr,
            QueryRegistry(settings.registry_path),
            MatchStore(settings.match_capacity, settings.matches_jsonl,
                       cursor_base=int(time.time() * 1000) * 1000), settings)
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
        while True:
            moved = await self.service.drain_all()
            if not moved:
                await asyncio.sleep(self.settings.drain_every)

    async def _plan_loop(self):
        while True:
            await asyncio.sleep(self.settings.plan_every)
            try:
                await self.service.plan_round()
            except CepError as exc:
                log.warning("planner round failed: %s", exc)

    async def address(self) -> str:
        return self.url

    async def stop(self):
        for task in self._tasks:
            task.cancel()
        await self.service.acknowledge()
        if self._runner is not None:
            await self._runner.cleanup()
        self.service.registry.close()
        self.service.store.close_sink()


def gateway_actor(**options):
    """The Ray actor class of GatewayServer (an async actor: its loop serves HTTP)."""
    import ray
    return ray.remote(**options)(GatewayServer) if options else ray.remote(GatewayServer)
