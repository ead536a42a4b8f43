"""How a handle call reaches a replica, and what comes back.

Routing is the proxy's (servefleet/_private/dataplane/): a `HandleRouter` per event
loop, application and set of controllers keeps the replica sets from the
controllers' Watch stream (the shared WatchClient), and sends each call
through the same forward-with-retry, pools, queue and `max_queued_requests`
backpressure as the proxy; only the framing differs.

The call is an HTTP POST with the header `x-servefleet-method` (the method
to call) whose body is the pickled `(args, kwargs)` (servefleet/_private/handles/values.py;
arrays written to the connection as they are, segment by segment). The
replica answers 200 with the result's frame, 500 with an error frame (what
the target raised), or 4xx/5xx with a JSON `{"error": ...}` or text when the
call never reached the target (no such method, a refusal, a bad body). A
streaming call (header `x-servefleet-stream`) is answered with one
length-prefixed frame per yield, an error frame last if the generator raised.

What the target raised is raised again in the caller, the original type
with the replica's traceback as its cause (as Ray's caller sees an instance
of the original type); when it cannot be unpickled here (its class is not
importable), a HandleError with its type, message and traceback. Routing
failures (no replica, overloaded, unknown deployment) are HandleErrors.

Routers are keyed by their controllers too: after `servefleet.shutdown()`
and a new `servefleet.run()` (another controller), a handle for the same
application name gets a new router, never the old cluster's.
`close_routers` closes the routers of controllers that are gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import pickle
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

import servefleet._private.handles.values as values
from servefleet._private.dataplane.balancer import (
    Overloaded,
    PoolClosed,
    ReplicaPool,
    Unservable,
)
from servefleet._private.dataplane.body import StreamedBody
from servefleet._private.dataplane.forward import MAX_ATTEMPTS, NoReplicaTook, forward
from servefleet._private.dataplane.load_report import LoadReporter
from servefleet._private.dataplane.replica_sets import ReplicaSets
from servefleet._private.dataplane.routers import RequestInfo
from servefleet._private.dataplane.upstream import Response, UpstreamError, UpstreamPool
from servefleet._private.handle_errors import (
    BackPressureError,
    DeploymentUnavailableError,
    HandleError,
)
from servefleet._private.handles.responses import _END
from servefleet._private.observability.logs import REQUEST_ID, new_request_id
from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import client_context
from servefleet._private.security.tls import Credentials
from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import (
    METHOD_HEADER,
    MODEL_ID_HEADER,
    REQUEST_ID_HEADER,
    STREAM_HEADER,
    replicas_key,
)
from servefleet.v1 import watch_pb2

logger = logging.getLogger(__name__)

# How long a first call waits for the target's replica set to be known.
DISCOVERY_TIMEOUT_S = 30.0
# How long close_routers waits for a router on another thread's loop to close.
CLOSE_TIMEOUT_S = 5.0


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a replica, as its text: the
    cause of the exception raised again in the caller."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


def remote_error(details: Any, where: str) -> BaseException:
    """The exception a replica reported (values.error_frame): the original,
    unpickled, with the replica's traceback as its cause; else a HandleError
    with its type, message and traceback text."""
    try:
        type_name, message, traceback_text, pickled = details
    except (TypeError, ValueError):
        return HandleError(f"{where}: an unreadable error report from the replica", 502)
    error: BaseException | None = None
    if pickled is not None:
        try:
            error = pickle.loads(pickled)
        except Exception as e:
            logger.debug("%s raised %s, which cannot be unpickled here: %r", where,
                         type_name, e)
    if not isinstance(error, BaseException):
        error = HandleError(f"{where}: {type_name}: {message}", 500)
    error.__cause__ = RemoteTraceback(traceback_text)
    return error


class _Frames(StreamedBody):
    """A call's frame written segment by segment (values.frame): a numpy
    array's memory goes to the connection as it is, never joined into one
    bytes first. Whole in memory, so it can be sent again to another
    replica."""

    def __init__(self, parts: list[values.Buffer]) -> None:
        super().__init__(b"", _no_receive, 0, values.frame_length(parts))
        self._parts = parts

    @property
    def replayable(self) -> bool:
        return True

    async def chunks(self) -> AsyncIterator[bytes]:
        for part in self._parts:
            yield part  # type: ignore[misc]  # any buffer: the transport takes memoryviews


async def _no_receive() -> dict[str, Any]:
    raise RuntimeError("a handle call's body is in memory")


def _body(parts: list[values.Buffer]) -> bytes | StreamedBody:
    if len(parts) == 1:
        return bytes(parts[0])
    return _Frames(parts)


class HandleRouter:
    """Replica sets of one application's deployments, kept by a Watch stream."""

    def __init__(self, application: str, controllers: Sequence[str]) -> None:
        self.application = application
        # Replicas that serve TLS get this process's certificate (hop_tls.py).
        own = Credentials.from_env(addresses=list(controllers)).tls
        self.upstream = UpstreamPool(tls=client_context(own) if own is not None else None)
        self.replica_sets = ReplicaSets(self.upstream)
        self._changed = asyncio.Event()
        self._watch = WatchClient(list(controllers), [replicas_key(application)],
                                  on_snapshot=self._apply,
                                  kind=watch_pb2.WATCHER_KIND_HANDLE,
                                  watcher_id=f"handle-{uuid.uuid4().hex[:8]}")
        # Calls queued and awaited here count toward the autoscaler's load, as a
        # proxy's do (and a call waiting for a scaled-to-zero deployment wakes it).
        reporter = LoadReporter(self._watch)
        self.replica_sets.on_starved = self.replica_sets.on_applied = reporter.wake
        self._watch.start()
        HOP_PASS.renew(self._watch)  # a replica's own runs already: then nothing new
        self._reporting = asyncio.get_running_loop().create_task(
            reporter.run(self.replica_sets), name=f"load reports of {application}")

    @property
    def controllers(self) -> list[str]:
        return self._watch.addresses

    def _apply(self, snapshot: watch_pb2.Snapshot) -> None:
        self.replica_sets.apply(snapshot)
        self._changed.set()
        self._changed = asyncio.Event()

    async def pool(self, deployment: str) -> ReplicaPool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DISCOVERY_TIMEOUT_S
        while (pool := self.replica_sets.get(self.application, deployment)) is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise HandleError(f"deployment {self.application}/{deployment} is unknown "
                                  f"to the controller (or has no replicas yet) after "
                                  f"{DISCOVERY_TIMEOUT_S:g} s")
            waiting = self._changed
            try:
                await asyncio.wait_for(waiting.wait(), remaining)
            except TimeoutError:
                pass
        return pool

    @staticmethod
    def _headers(method: str, model_id: str, stream: bool) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", values.CONTENT_TYPE), (METHOD_HEADER, method.encode()),
                   (REQUEST_ID_HEADER, (REQUEST_ID.get() or new_request_id()).encode())]
        if stream:
            headers.append((STREAM_HEADER, b"1"))
        if model_id:
            headers.append((MODEL_ID_HEADER, model_id.encode("latin-1")))
        return headers

    async def call(self, deployment: str, method: str, parts: list[values.Buffer],
                   model_id: str = "", routing_key: str = "") -> Any:
        """The result of `method` called with the pickled (args, kwargs) in `parts`."""
        headers = self._headers(method, model_id, stream=False)
        pool = await self.pool(deployment)
        where = f"{deployment}.{method}"
        try:
            status, kind, raw = await forward(pool, self.upstream, "POST", b"/", headers,
                                              _body(parts), _read_answer,
                                              headers[2][1].decode(), model_id,
                                              _routing(pool, model_id, routing_key, method))
        except (Unservable, Overloaded, NoReplicaTook, UpstreamError) as e:
            raise _routing_error(deployment, e) from None
        if kind == values.CONTENT_TYPE:
            magic, value = _load(raw, where)
            if magic == values.ERROR_MAGIC:
                raise remote_error(value, where)
            if status == 200:
                return value
        raise HandleError(f"{where}: {_error_text(raw, status)}", status)

    async def stream(self, deployment: str, method: str, parts: list[values.Buffer],
                     out: asyncio.Queue, model_id: str = "", routing_key: str = "") -> None:
        """Send a streaming call; put each item on `out`, then _END (or the
        exception). Cancelling this closes the connection, which cancels the
        generator at the replica."""
        headers = self._headers(method, model_id, stream=True)
        where = f"{deployment}.{method}"

        async def deliver(response: Response) -> None:
            if (response.status != 200
                    or response.header(b"content-type") != values.STREAM_CONTENT_TYPE):
                status, _, raw = await _read_answer(response)
                raise HandleError(f"{where}: {_error_text(raw, status)}", status)
            pending = bytearray()
            async for chunk in response.chunks():
                pending += chunk
                for raw in values.split_stream(pending):
                    magic, value = _load(raw, where)
                    if magic == values.ERROR_MAGIC:
                        raise remote_error(value, where)
                    await out.put(value)

        try:
            pool = await self.pool(deployment)
            await forward(pool, self.upstream, "POST", b"/", headers, _body(parts), deliver,
                          headers[2][1].decode(), model_id,
                          _routing(pool, model_id, routing_key, method))
            await out.put(_END)
        except (Unservable, Overloaded, NoReplicaTook, UpstreamError) as e:
            await out.put(_routing_error(deployment, e))
        except Exception as e:  # the target's exception, or a HandleError
            await out.put(e)

    async def close(self) -> None:
        self._reporting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reporting
        await self._watch.close()
        self.upstream.close()


def _routing(pool: ReplicaPool, model_id: str, routing_key: str,
             method: str) -> RequestInfo | None:
    """What the deployment's router is told of a call (when it has one)."""
    return None if pool.router is None else RequestInfo(model_id, routing_key, "POST", method)


def _routing_error(deployment: str, e: Exception) -> HandleError:
    """The HandleError for a call no replica served, under the name a Ray
    program catches it by (servefleet.serve.exceptions: BackPressureError,
    DeploymentUnavailableError), which are HandleErrors too. The pool's
    refusals subclass Overloaded, but only a full queue is backpressure."""
    if isinstance(e, Unservable):  # the controller's text says why
        return DeploymentUnavailableError(str(e), deployment)
    if isinstance(e, PoolClosed):
        return DeploymentUnavailableError(f"{deployment} is unavailable: {e}", deployment)
    if isinstance(e, Overloaded):
        return BackPressureError(f"{deployment} is overloaded: {e}")
    if isinstance(e, NoReplicaTook):
        return DeploymentUnavailableError(
            f"no replica of {deployment} took the call after {MAX_ATTEMPTS} attempts",
            deployment)
    if isinstance(e, UpstreamError):
        return HandleError(f"the replica at {e.address} failed: {e}", 502)
    return DeploymentUnavailableError(str(e), deployment)


async def _read_answer(response: Response) -> tuple[int, bytes, bytes]:
    """A call's status, content type and body."""
    return response.status, response.header(b"content-type") or b"", await response.read()


def _load(raw: bytes, where: str) -> tuple[bytes, Any]:
    try:
        return values.load(raw)
    except Exception as e:
        raise HandleError(f"{where}: the answer cannot be unpickled here: "
                          f"{type(e).__name__}: {e}", 502) from e


def _error_text(raw: bytes, status: int) -> str:
    """The error a replica answered as JSON `{"error": ...}`, or its text."""
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "error" in payload:
        return str(payload["error"])
    return raw[:500].decode(errors="replace") or f"HTTP {status}"


# Routers per event loop (a loop that is gone takes its routers with it),
# then per application and controllers.
_RouterKey = tuple[str, tuple[str, ...]]
_routers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_RouterKey, HandleRouter]] = (
    weakref.WeakKeyDictionary())
_lock = threading.Lock()


def router(application: str, controllers: Sequence[str]) -> HandleRouter:
    """The running loop's router for `application` at `controllers`, made on first use."""
    key = (application, tuple(controllers))
    loop = asyncio.get_running_loop()
    with _lock:
        routers = _routers.setdefault(loop, {})
        found = routers.get(key)
        if found is None:
            found = routers[key] = HandleRouter(application, controllers)
        return found


def close_routers(controllers: str | Sequence[str] | None = None) -> None:
    """Close the routers following `controllers` (every router when None), on
    whatever loops they run, e.g. once those controllers are shut down: their
    Watch streams stop retrying. Waits up to CLOSE_TIMEOUT_S for routers on
    other threads' loops; safe from any thread, and from a loop (then closes
    its own routers in the background)."""
    wanted = None
    if controllers is not None:
        wanted = {controllers} if isinstance(controllers, str) else set(controllers)
    closing: list[tuple[asyncio.AbstractEventLoop, HandleRouter]] = []
    with _lock:
        for loop, routers in list(_routers.items()):
            for key, found in list(routers.items()):
                if wanted is None or wanted & set(key[1]) or wanted & set(found.controllers):
                    del routers[key]
                    closing.append((loop, found))
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for loop, found in closing:
        if loop is running:
            loop.create_task(found.close())
        elif loop.is_running():
            done = asyncio.run_coroutine_threadsafe(found.close(), loop)
            with contextlib.suppress(concurrent.futures.TimeoutError, Exception):
                done.result(CLOSE_TIMEOUT_S)
