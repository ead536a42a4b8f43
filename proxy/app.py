"""The proxy's ASGI app: route, pick a replica, forward, stream the answer back.

Per request:

1. `/-/healthz`, `/-/routes` and `/-/metrics` are answered by the proxy
   itself, the last two only to whom `--admin-paths` lets in (access.py); a
   path no route prefix matches gets 404 naming the known prefixes.
2. A body past the cluster's http_options.max_request_body_bytes gets 413
   (dataplane/body.py). A body up to 1 MiB is read once, whole (it may have
   to go to a second replica); a larger one streams to the replica as the
   client sends it. (Heads past the limits never get here: edge.py.)
3. The request is forwarded with `x-request-id` kept or created, and none of
   the client's `x-servefleet-*` headers (the cluster's own), by the
   forward-with-retry proxies share with handles (servefleet/_private/dataplane/):
   a replica is chosen by its deployment's pool; when all are full the
   request queues, and past max_queued_requests it gets 503. A request no
   replica received in MAX_ATTEMPTS tries gets 503; one that failed after it
   was sent gets 502 and is not retried, since the replica may have acted on it.
4. The response streams back chunk by chunk (answers.py); one that came
   whole with its head goes on as the replica's bytes.

With a traffic policy on the route, step 3 first picks the deployment by
weight, and a fraction of requests is also copied to the shadow deployment
once the body is read: that copy runs on its own, its answer is read and
dropped, and its failures are only logged. Streamed bodies get no shadow copy.

The replica learns which route prefix matched from `x-servefleet-route-prefix`
(ASGI apps are served under it as their root_path), and the name of the
token the proxy checked from `x-servefleet-caller`.

`request_timeout_s` bounds the whole exchange: 504 when it runs out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial

from starlette.types import Message, Receive, Scope, Send

from servefleet._private import envelope
from servefleet._private.dataplane.balancer import (
    Overloaded,
    QueueFull,
    ReplicaPool,
    Unservable,
)
from servefleet._private.dataplane.body import BodyTooLarge, ClientGone, StreamedBody, read_body
from servefleet._private.dataplane.forward import MAX_ATTEMPTS, NoReplicaTook, forward
from servefleet._private.dataplane.upstream import NotDelivered, UpstreamError, UpstreamPool
from servefleet._private.edge.deadlines import Deadlines
from servefleet._private.edge.disconnect import CancelOnDisconnect
from servefleet._private.edge.ws import deny
from servefleet._private.observability.exposition import send_metrics
from servefleet._private.observability.logs import REQUEST_ID
from servefleet._private.security.tokens import TokenTable
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import MODEL_ID_HEADER, REQUEST_ID_HEADER

from .access import ADMIN_PATHS, AdminAccess, bearer_name
from .answers import Started, refuse_token, reply, stream_back
from .forwarded import Forwarded
from .metrics import CLIENT_LEFT, ProxyMetrics
from .routes import DEFAULT_ANSWER_START_S, RouteTable, Target
from .state import FIRST_SYNC_WAIT_S, ProxyState
from .upstream_request import raw_target, routing_info, upstream_headers
from .websocket import WebSockets

logger = logging.getLogger(__name__)
access = logging.getLogger("servefleet.proxy.access")

SHADOW_TIMEOUT_S = 30.0
NOT_SYNCED = (f"the proxy has had no route table from a controller yet "
              f"(waited {FIRST_SYNC_WAIT_S:g}s)")
# Shadow copies in flight per proxy; past it (or while the shadow's own queue
# is not empty) copies are dropped: a shadow must never cost the real traffic.
MAX_SHADOWS = 64
class BadRequest(Exception):
    """The request cannot be understood: 400 with this message."""


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length; BadRequest for one that is not a number."""
    for k, v in headers:
        if k == b"content-length":
            if not v.strip().isdigit():
                raise BadRequest(f"content-length {v[:40]!r} is not a number")
            return int(v)
    return None


class ProxyApp:
    def __init__(self, pools: Callable[[str, str], ReplicaPool | None],
                 routes: Callable[[], RouteTable], upstream: UpstreamPool,
                 request_timeout_s: float | None = None,
                 tokens: Callable[[], TokenTable | None] = lambda: None) -> None:
        self._pools = pools
        # The tokens of --http-tokens (None: none), for routes that require one
        # and for the admin paths.
        self._tokens = tokens
        self._routes = routes
        self._upstream = upstream
        self._timeout = request_timeout_s
        # Without a request timeout, the bound on the wait for an answer's start.
        self.answer_start_s = DEFAULT_ANSWER_START_S
        self._deadlines = Deadlines()  # the default answer-start bounds, on one timer
        self.draining = False
        # The Watch state (main.py): until its first routes and replica sets
        # came, a request waits for them (not a 404 for a route that exists).
        self.first_sync: ProxyState | None = None
        # Shadow copies under way (held so they are not garbage-collected).
        self._shadows: set[asyncio.Task[None]] = set()
        self.metrics = ProxyMetrics()
        self.traffic = self.metrics.traffic.summary
        # One line per routed request (logger servefleet.proxy.access), with its id.
        self.access_log = False
        # Count requests for /-/metrics and the load reports' traffic figures.
        self.metrics_enabled = True
        # Open WebSockets (websocket.py); their idle limit is --websocket-idle-timeout-s.
        self.websockets = WebSockets(tls_for=upstream.tls_for)
        # x-forwarded-for and -proto for replicas (--forwarded-allow-ips).
        self.forwarded = Forwarded()
        # Who may read /-/routes and /-/metrics (--admin-paths).
        self.admin = AdminAccess()
        # More for /-/metrics: an HAProxy engine's own (haproxy/front.py).
        self.more_metrics: Callable[[], Awaitable[bytes]] | None = None


    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._websocket(scope, receive, send)
            return
        path: str = scope["path"]
        request_id, trace_headers = envelope.read_or_new(scope["headers"])
        REQUEST_ID.set(request_id)  # this request's task only: its log lines carry it
        if path.startswith("/-/") and (path == "/-/healthz" or path in ADMIN_PATHS):
            await self._own_path(scope, send, path)
            return
        # A plain attribute test per request; the coroutine only while starting.
        sync = self.first_sync
        if sync is not None and not sync.synced and not await self._synced(send, request_id):
            return
        target = self._routes().match(path)
        if target is None:
            known = ", ".join(sorted(self._routes().as_json())) or "none yet"
            await reply(send, 404, f"no route matches {path!r}; route prefixes: {known}",
                        request_id)
            self.metrics.answered("", "", "", 404, 0.0)
            return
        # Not sampled: on to the replica with no trace headers (tracing.py).
        served = None if not tracing.decide(trace_headers, marks=False) else tracing.serve_decided(
            f"{scope['method']} {target.route_prefix}", trace_headers, {
                "http.request.method": scope["method"], "http.route": target.route_prefix,
                "url.path": path, "servefleet.application": target.application,
                "servefleet.request_id": request_id, "servefleet.model_id": next(
                    (v.decode("latin-1") for k, v in scope["headers"] if k == MODEL_ID_HEADER),
                    "")})
        if not self.metrics_enabled and served is None:  # --no-metrics: nothing counted
            await self._serve_route(scope, receive, send, target, request_id, Started())
            return
        begun = time.perf_counter()
        started = Started()

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.code = message["status"]
            await send(message)

        try:
            await self._serve_route(scope, receive, noting, target, request_id, started)
        finally:
            seconds = time.perf_counter() - begun
            code = started.code or CLIENT_LEFT
            if self.metrics_enabled:  # first: a failure's trace id is the span's, still current
                self.metrics.answered(target.application, started.deployment,
                                      target.route_prefix, code, seconds)
            if served is not None:
                served.set("servefleet.deployment", started.deployment)
                served.finish(code)
            if self.access_log:
                access.info("%s %s %d %.1fms %s/%s", scope["method"], path, code,
                            seconds * 1e3, target.application, started.deployment)

    async def _synced(self, send: Send, request_id: str) -> bool:
        """Whether the proxy knows its routes (waiting for the first ones if
        it is just starting); False after answering 503 when they did not come."""
        state = self.first_sync
        if state is None or state.synced or await state.wait_synced():
            return True
        await reply(send, 503, NOT_SYNCED, request_id)
        return False

    async def _own_path(self, scope: Scope, send: Send, path: str) -> None:
        """/-/healthz for anyone; /-/routes and /-/metrics for whom --admin-paths lets in."""
        if path == "/-/healthz":
            await reply(send, 503 if self.draining else 200,
                        "draining" if self.draining else "ok")
            return
        refusal = self.admin.refusal(scope, self._tokens())
        if refusal is not None:
            await reply(send, refusal[0], refusal[1], extra=refusal[2])
        elif path == "/-/routes":
            await reply(send, 200, json.dumps(self._routes().as_json()),
                        content_type=b"application/json")
        else:
            await send_metrics(send, await self.more_metrics() if self.more_metrics else b"")

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route a WebSocket handshake as an HTTP request is routed (the same
        checks and refusals, as HTTP answers), then relay it (websocket.py)."""
        request_id, trace_headers = envelope.read_or_new(scope["headers"])
        REQUEST_ID.set(request_id)
        if self.first_sync is not None and not self.first_sync.synced \
                and not await self.first_sync.wait_synced():
            await deny(scope, send, 503, NOT_SYNCED,
                       headers=[(REQUEST_ID_HEADER, request_id.encode("latin-1"))])
            return
        target = self._routes().match(scope["path"])
        caller = bearer_name(scope, self._tokens()) if target and target.require_token \
            else None
        pool = self._pools(target.application, target.pick()) if target else None
        problem = (
            (503, "the proxy is draining") if self.draining else
            (404, f"no route matches {scope['path']!r}") if target is None else
            (401, "this route needs a bearer token (authorization: Bearer TOKEN)")
            if target.require_token and caller is None else
            (503, target.unavailable) if target.unavailable else
            (503, f"{target.application} has no replicas known yet") if pool is None else None)
        if problem is not None or target is None or pool is None:
            await deny(scope, send, *(problem or (503, "")),
                       headers=[(REQUEST_ID_HEADER, request_id.encode("latin-1"))])
            return
        served = tracing.serve(f"WebSocket {target.route_prefix}", trace_headers, {
            "http.route": target.route_prefix, "url.path": scope["path"],
            "servefleet.application": target.application,
            "servefleet.deployment": pool.key[1], "servefleet.request_id": request_id},
            marks=False)
        headers = upstream_headers(scope, request_id, target.route_prefix, self.forwarded,
                                   caller) + tracing.hop_headers(served and served.span)
        error: BaseException | None = None
        try:
            await self.websockets.serve(
                scope, receive, send, pool, headers, raw_target(scope),
                self._timeout or self._routes().request_timeout_s or None, request_id)
        except BaseException as e:
            error = e
            raise
        finally:
            if served is not None:
                served.finish(0, error if isinstance(error, Exception) else None)

    async def _serve_route(self, scope: Scope, receive: Receive, send: Send, target: Target,
                           request_id: str, started: Started) -> None:
        caller = None
        if target.require_token:
            caller = bearer_name(scope, self._tokens())
            if caller is None:
                await refuse_token(scope, send, request_id)
                return
        if target.unavailable:  # the application cannot serve at all
            await reply(send, 503, target.unavailable, request_id)
            return
        deployment = started.deployment = target.pick()
        pool = self._pools(target.application, deployment)
        if pool is None:
            await reply(send, 503, f"{target.application}/{deployment} has no "
                        "replicas known yet", request_id)
            return
        shadow = target.shadow()
        shadow_pool = self._pools(target.application, shadow) if shadow else None
        headers = upstream_headers(scope, request_id, target.route_prefix, self.forwarded,
                                    caller)
        # The proxy's own --request-timeout-s, else the cluster's http_options,
        # bound the whole exchange; without either, the wait for the answer's start.
        timeout = self._timeout or self._routes().request_timeout_s or None
        # In this task. The default bound, on nearly every request and lifted as
        # the answer begins, is on the proxy's one timer (_private/edge/deadlines.py:
        # at most 50 ms late); a limit set by the user is exact.
        if timeout is None:
            started.until_start = self._deadlines.bound(self.answer_start_s)
        try:
            async with started.until_start or asyncio.timeout(timeout):
                await self._forward_until_disconnect(scope, receive, send, pool, headers,
                                                     request_id, started, shadow_pool)
        except TimeoutError:
            limit = timeout or self.answer_start_s
            logger.warning("request %s timed out after %ss", request_id, limit)
            if not started.value:  # else the answer can only be cut short
                await reply(send, 504, f"no answer within {limit:g}s" + (
                    "" if timeout else " for the answer to begin (the default; "
                    "http_options.request_timeout_s sets a limit of your own)"), request_id)
        except Unservable as e:
            await reply(send, 503, str(e), request_id)
        except QueueFull as e:  # answered as the deployment's backpressure_config says
            await reply(send, pool.backpressure.status, f"{deployment} is overloaded: {e}",
                        request_id, extra=pool.backpressure.headers())
        except Overloaded as e:
            await reply(send, 503, f"{deployment} is overloaded: {e}", request_id)
        except BodyTooLarge as e:
            if not started.value:
                await reply(send, 413, str(e), request_id)
        except BadRequest as e:
            await reply(send, 400, str(e), request_id)
        except (ConnectionResetError, ClientGone):
            pass  # the client left; nothing to answer

    async def _forward_until_disconnect(self, scope: Scope, receive: Receive, send: Send,
                                        pool: ReplicaPool, headers: list[tuple[bytes, bytes]],
                                        request_id: str, started: Started,
                                        shadow_pool: ReplicaPool | None) -> None:
        """Forward; if the client leaves first, cancel, which closes the connection to
        the replica, and the replica cancels the request in turn."""
        limit = self._routes().max_request_body_bytes
        body = await read_body(receive, limit, _content_length(scope["headers"]))
        if shadow_pool is not None:
            copy = (isinstance(body, bytes) and len(self._shadows) < MAX_SHADOWS
                    and shadow_pool.queued == 0)
            ProxyMetrics.shadow(*shadow_pool.key, sent=copy)
            if copy:
                assert isinstance(body, bytes)
                task = asyncio.create_task(self._mirror(scope, body, headers, shadow_pool,
                                                        request_id))
                self._shadows.add(task)
                task.add_done_callback(self._shadows.discard)
        finished = body.finished if isinstance(body, StreamedBody) else None
        with CancelOnDisconnect(scope, receive, after=finished) as gone:
            try:
                await self._forward(scope, body, headers, send, pool, request_id, started)
            except asyncio.CancelledError:
                if not gone.left:
                    raise  # cancelled from outside (the request timeout, shutdown)
                # The client's departure, handled: the task is no longer being cancelled.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                logger.info("request %s: the client went away; cancelled", request_id)

    async def _mirror(self, scope: Scope, body: bytes, headers: list[tuple[bytes, bytes]],
                      pool: ReplicaPool, request_id: str) -> None:
        """Send a copy to the shadow deployment; read its answer and drop it."""
        try:
            async with asyncio.timeout(self._timeout or self._routes().request_timeout_s
                                       or SHADOW_TIMEOUT_S):
                replica = await pool.acquire()
                try:
                    response = await self._upstream.request(
                        replica.address, scope["method"], raw_target(scope), headers, body)
                    try:
                        await response.read()
                    finally:
                        response.release()
                finally:
                    pool.release(replica)
        except (Overloaded, NotDelivered, UpstreamError, TimeoutError) as e:
            logger.debug("request %s: shadow copy dropped: %s", request_id, e)

    async def _forward(self, scope: Scope, body: bytes | StreamedBody,
                       headers: list[tuple[bytes, bytes]],
                       send: Send, pool: ReplicaPool, request_id: str,
                       started: Started) -> None:
        model = next((v for k, v in scope["headers"] if k == MODEL_ID_HEADER), b"")
        try:
            await forward(pool, self._upstream, scope["method"], raw_target(scope), headers,
                          body, partial(stream_back, scope, send, request_id, started),
                          request_id, model.decode("latin-1"),
                          None if pool.router is None else routing_info(scope, model))
        except UpstreamError as e:
            await reply(send, 502, f"replica failed: {e}", request_id)
        except NoReplicaTook:
            await reply(send, 503, f"no replica took the request after {MAX_ATTEMPTS} "
                        "attempts", request_id)
