"""The replica's HTTP server app: admission, the call into user code, the response.

Admission comes first and never reaches user code: while loading or draining,
and when `max_ongoing_requests` requests are already in flight, a request is
answered 503 with the header `x-servefleet-rejected` (loading, draining,
overloaded). The proxy reads that header as "never delivered" and may retry
the request on another replica. An HAProxy engine, which retries by status
only, asks for 425 instead (x-servefleet-refusal-status), and its health
checks (x-servefleet-check) are answered here too, 503 only while loading or
draining.

A user function or `__call__` returns str (text/plain), bytes, a dict or list
(JSON), a starlette Response, or a sync or async generator (streamed chunk by
chunk). Sync code runs in the replica's thread pool. An exception in user code
is logged with its traceback and answered 500 naming the exception; but one
that says a deployment it called through a handle could not serve
(DeploymentUnavailableError, BackPressureError) is answered 503 with it.

`x-request-id` is taken from the request or made up, echoed on the response
and put in the log lines; the request's trace context (envelope.py) is
current while user code runs, and with tracing on the replica's handling
and the user code are spans (tracing.py, user_calls.py).

A request with the header `x-servefleet-method` is a handle call
(servefleet/_private/handles/handle_router.py), not an HTTP request for the user's code: its
body is the pickled (args, kwargs) of the named method (servefleet/_private/handles/values.py),
and the answer is the result's frame, an error frame (500) with what the
method raised and its traceback, or `{"error": ...}` (4xx/5xx) when the call
never reached it. It passes the same admission. Proxies strip the header
from their clients' requests.

Security: this port therefore unpickles what callers send with that header,
as Ray's workers unpickle their callers' arguments. In a cluster with
credentials every request first shows the caller is the cluster's
(hop_gate.py: a hop pass, or a TLS port's client certificate; a handle call
needs a pass of a role that may run code), else 401 before anything of it
is read; a cluster without credentials (the local default) trusts whoever
reaches the port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

import servefleet._private.handles.values as values
from servefleet._private.batching.multiplex import MODEL_ID, loaded_model_ids
from servefleet._private.edge.disconnect import CancelOnDisconnect
from servefleet._private.handle_errors import unserved
from servefleet._private.observability.logs import REQUEST_ID
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import (
    MODELS_HEADER,
    REJECTED_HEADER,
    REQUEST_ID_HEADER,
    ROUTE_PREFIX_HEADER,
)

from .answers import (
    FrameAnswer,
    close_generator,
    pickled_items,
    plain_answer,
    refusal_status,
    sent_raw,
    takes_request,
    to_response,
)
from .asgi_calls import call_asgi
from .handle_calls import arguments, method_of
from .head import Head
from .hop_gate import HopGate, without_pass
from .loader import UserDeployment
from .metrics import ReplicaMetrics
from .user_calls import in_thread, is_async_callable, traced
from .user_threads import UserThreads
from .websocket import OpenSockets, serve_websocket

logger = logging.getLogger(__name__)
# starlette takes response headers as str.
_REJECTED = REJECTED_HEADER.decode()


_DISCONNECTED = object()


def _under_route_prefix(scope: Scope, prefix: str | None = None) -> Scope:
    """Serve an ASGI app under the route prefix the proxy matched (`prefix`,
    else read from the headers): as its root_path, the way ASGI servers
    mount an app (Starlette and FastAPI then route on the rest of the path
    and build URLs with the prefix)."""
    if prefix is None:
        prefix = next((v.decode("latin-1") for k, v in scope["headers"]
                       if k == ROUTE_PREFIX_HEADER), "")
    if not prefix or prefix == "/":
        return scope
    scope = {**scope, "root_path": scope.get("root_path", "") + prefix}
    if scope["path"] == prefix:  # "/api" is the app's "/"
        scope["path"] = prefix + "/"
        scope["raw_path"] = scope["path"].encode()
    return scope


def _refusal(message: str, status: int) -> Response:
    """A handle call that never reached the method (handle_router reads `error`)."""
    return JSONResponse({"error": message}, status)


class Admission:
    """Counts requests in flight and decides whether a new one may start."""

    def __init__(self, max_ongoing: int) -> None:
        self.max_ongoing = max_ongoing
        self.ongoing = 0
        self.ready = False
        # Told to drain: still serving requests for one wait loop (replica.py),
        # but no new WebSocket, which would outlive it.
        self.leaving = False
        self.draining = False

    def refusal(self, websocket: bool = False) -> str | None:
        if self.draining or (websocket and self.leaving):
            return "draining"
        if not self.ready:
            return "loading"
        if self.ongoing >= self.max_ongoing:
            return "overloaded"
        return None


class ReplicaApp:
    """The ASGI app uvicorn serves in a replica."""

    def __init__(self, admission: Admission, executor: concurrent.futures.Executor,
                 replica_id: str, metrics: ReplicaMetrics | None = None) -> None:
        self.admission = admission
        self.metrics = metrics or ReplicaMetrics("", "", replica_id, lambda: admission.ongoing)
        self.executor = executor
        # What every span of this replica says of it (tracing.py).
        self.span_attributes = self.metrics.span_attributes
        # Plain `def` handlers run here (user_threads.py: cheaper than the executor per call).
        self.threads = UserThreads(max(8, admission.max_ongoing), "user-http")
        self.replica_id = replica_id
        self.deployment: UserDeployment | None = None
        # Open WebSockets of an ASGI ingress (websocket.py), closed when draining.
        self.websockets = OpenSockets()
        # Turns handle markers in JSON into handles (replica.py sets it; handle
        # calls' arguments are pickled, with handles that unpickle as handles).
        self.decode_args: Callable[[Any], Any] = lambda value: value
        # Who may call (hop_gate.py); None: anyone (a cluster without credentials).
        self.hop_gate: HopGate | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                refused = self.hop_gate.refusal(Head(scope["headers"]).hop) \
                    if self.hop_gate is not None else None
                if refused is not None:  # closed before it is accepted: a 403
                    self.metrics.rejected["unauthenticated"].inc()
                    await send({"type": "websocket.close", "code": 1008, "reason": refused})
                    return
                await serve_websocket(self, _under_route_prefix(without_pass(scope)), receive,
                                      send)
            elif scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        reason = self.admission.refusal()
        head = Head(scope["headers"])
        if head.check:
            # An engine's health check: up while it takes requests, full or not.
            down = reason if reason != "overloaded" else None
            await PlainTextResponse(down or "ok", 503 if down else 200)(scope, receive, send)
            return
        if self.hop_gate is not None:
            refused = self.hop_gate.refusal(head.hop, head.method is not None)
            if refused is not None:  # before anything of the request is read
                self.metrics.rejected["unauthenticated"].inc()
                await PlainTextResponse(refused, 401, headers={
                    "connection": "close", "www-authenticate": "servefleet-hop"})(
                    scope, receive, send)
                return
            if head.hop is not None:
                scope = without_pass(scope)
        if reason is not None:
            self.metrics.rejected[reason].inc()
            headers = {_REJECTED: reason}
            if reason == "draining":
                headers["connection"] = "close"  # do not reuse a connection to a leaving replica
            await PlainTextResponse(f"replica {self.replica_id} is {reason}",
                                    status_code=refusal_status(scope),
                                    headers=headers)(scope, receive, send)
            return
        request_id = head.made_id(scope)
        REQUEST_ID.set(request_id)  # this request's task only: its log lines carry it
        if head.model_id is not None:
            MODEL_ID.set(head.model_id)
        # Only proxies and handles come here, and they decided (tracing.py).
        served = None if not tracing.decide(head.trace, roots=False) else \
            tracing.serve_decided(self._span_name(scope, head), head.trace, {
                **self.span_attributes, "servefleet.request_id": request_id,
                "servefleet.model_id": head.model_id})
        self.admission.ongoing += 1
        started = time.perf_counter()
        try:
            if served is None:
                ok = await self._serve(scope, receive, send, head)
            else:
                ok = await self._serve_traced(scope, receive, send, head, served)
            (self.metrics.ok if ok else self.metrics.error).inc()
            self.metrics.duration.observe(time.perf_counter() - started)
        finally:
            self.admission.ongoing -= 1

    def _span_name(self, scope: Scope, head: Head) -> str:
        """The replica's span: `Deployment.method` for a handle call, else
        `Deployment` and the HTTP method."""
        deployment = self.span_attributes.get("servefleet.deployment") or "replica"
        if head.method is not None:
            return f"{deployment}.{head.method}"
        return f"{deployment} {scope['method']}"

    async def _serve_traced(self, scope: Scope, receive: Receive, send: Send,
                            head: Head, served: tracing.Served) -> bool:
        code = [0]

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                code[0] = message["status"]
            await send(message)

        try:
            ok = await self._serve(scope, receive, noting, head)
        except BaseException as e:
            served.finish(code[0], e if isinstance(e, Exception) else None)
            raise
        served.finish(code[0] or (200 if ok else 500))
        return ok

    async def _serve(self, scope: Scope, receive: Receive, send: Send, head: Head) -> bool:
        """Answer the request; False when user code raised."""
        request_id = head.request_id
        deployment = self.deployment
        assert deployment is not None, "admission lets requests in only once loaded"

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                headers.append((REQUEST_ID_HEADER, request_id.encode("latin-1")))
                models = loaded_model_ids()
                if models:  # what this replica holds, for the routers (multiplex.py)
                    headers.append((MODELS_HEADER, ",".join(models).encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        if head.method is not None:
            answer = await self._handle_call(deployment, head.method, scope, receive, head)
            if answer is not None:
                await answer(scope, receive, send_with_id)
            return answer is None or answer.status_code < 500
        try:
            if deployment.is_asgi:  # cancelled if its caller leaves first (asgi_calls.py)
                await call_asgi(deployment.target, _under_route_prefix(scope, head.route_prefix),
                                receive, send_with_id, request_id)
                return True
            if deployment.target is None:
                response: Response = PlainTextResponse(
                    "this deployment has no __call__: reach it through a handle", 404)
            else:
                # Ray calls a __call__ or function that takes no request without one.
                args: tuple[Request, ...] = ()
                if head.has_body or takes_request(deployment.target):
                    request = Request(scope, receive)
                    if head.has_body:
                        await request.body()  # cached for the user; receive() now only
                    else:  # signals a disconnect
                        request._body = b""  # Starlette's cache of the body: none to wait for
                    args = (request,) if takes_request(deployment.target) else ()
                result = await self._call_until_disconnect(deployment.target, args, {},
                                                           scope, receive, request_id)
                if result is _DISCONNECTED:
                    return True
                plain = plain_answer(result)
                if plain is not None:
                    body, content_type = plain
                    if sent_raw(scope, body, content_type, request_id):
                        return True
                    await send_with_id({"type": "http.response.start", "status": 200,
                                        "headers": [(b"content-length", b"%d" % len(body)),
                                                    (b"content-type", content_type)]})
                    await send_with_id({"type": "http.response.body", "body": body})
                    return True
                response = to_response(result)
        except ClientDisconnect:  # its body was being read (here or by user code)
            logger.info("request %s: the caller went away before its body came", request_id)
            return True
        except Exception as e:
            if unserved(e):  # a deployment it called could not serve (Ray answers 503 too)
                logger.warning("request %s: %s: %s", request_id, type(e).__name__, e)
                answer = PlainTextResponse(f"{type(e).__name__}: {e}", 503)
            else:
                logger.exception("request %s failed in user code", request_id)
                answer = PlainTextResponse(f"error in user code: {type(e).__name__}: {e}", 500)
            await answer(scope, receive, send_with_id)
            return False
        await response(scope, receive, send_with_id)
        return True

    async def _handle_call(self, deployment: UserDeployment, method: str, scope: Scope,
                           receive: Receive, head: Head) -> Any:
        """Run a handle call; the answer to send (a FrameAnswer or a
        Response), or None when the caller left before it."""
        request_id, stream = head.request_id, head.stream
        fn = method_of(deployment, method)
        if fn is None:
            return _refusal(f"the deployment has no method {method!r} to call", 404)
        try:
            args, kwargs = arguments(values.load(await Request(scope, receive).body())[1])
        except ClientDisconnect:
            return None
        except Exception as e:
            logger.warning("request %s: a handle call body that cannot be unpickled: %r",
                           request_id, e)
            return _refusal(f"bad handle call body: {type(e).__name__}: {e}", 400)
        try:
            result = await self._call_until_disconnect(fn, args, kwargs, scope, receive,
                                                       request_id)
            if result is _DISCONNECTED:
                return None
            generator = inspect.isgenerator(result) or inspect.isasyncgen(result)
            if stream and generator:
                return StreamingResponse(pickled_items(result, request_id, method),
                                         media_type=values.STREAM_CONTENT_TYPE.decode())
            if generator:
                await close_generator(result)
                return _refusal(f"{method} is a generator: call it with "
                                "handle.options(stream=True)", 400)
            if stream:
                return _refusal(f"{method} is not a generator: call it without stream=True",
                                400)
            try:
                return FrameAnswer(values.frame(result))
            except Exception as e:
                raise TypeError(f"the result of {method} ({type(result).__name__}) cannot be "
                                f"pickled: {e}") from e
        except Exception as e:
            logger.exception("request %s: handle call %s failed", request_id, method)
            return FrameAnswer([values.error_frame(e, traceback.format_exc())], 500)

    async def _call_until_disconnect(self, target: Any, args: Any, kwargs: dict[str, Any],
                                     scope: Scope, receive: Receive, request_id: str) -> Any:
        """Run user code; cancel it if the caller goes away first.

        Async user code is cancelled at its next await. Sync code in the thread
        pool cannot be stopped: its result is dropped, but the request keeps
        its admission slot until the thread is done, so the replica never runs
        more than max_ongoing_requests calls at once.
        """
        thread: asyncio.Future[Any] | None = None
        with CancelOnDisconnect(scope, receive) as gone:
            try:
                if is_async_callable(target):
                    return await traced(target(*args, **kwargs))
                thread = self.threads.call(in_thread(functools.partial(target, *args, **kwargs)))
                result = await asyncio.shield(thread)
                return (await result) if inspect.isawaitable(result) else result
            except asyncio.CancelledError:
                if not gone.left:
                    raise  # cancelled from outside (shutdown)
                logger.info("request %s: the caller went away; cancelled", request_id)
        if thread is not None and not thread.done():
            await asyncio.wait({thread})
        return _DISCONNECTED

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
