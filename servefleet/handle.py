"""Deployment handles: calling another deployment's methods from Python.

    result = await handle.remote(1, x=2)          # its __call__
    result = await handle.add.remote(1)           # a named method
    response = handle.remote(1); ...; await response   # calls run concurrently
    async for token in handle.options(stream=True).tokens.remote(5): ...

In a replica, every bound deployment among the init args arrives as a
handle (servefleet/api.py marks them). Outside, `get_deployment_handle`
makes one. A handle call is an HTTP POST to one of the target's replicas,
with header `x-servefleet-method` and a JSON body `{"args": [...],
"kwargs": {...}}`; the replica answers `{"result": ...}` or an error with
its message. Arguments and results are JSON values, or handles (sent as
markers and rebuilt on the other side); nothing is pickled.

Routing is the proxy's (servefleet/dataplane/): a `HandleRouter` per
application and event loop keeps the replica sets from the controller's
Watch stream (the shared WatchClient), and sends each call through the same
forward-with-retry, pools, queue and `max_queued_requests` backpressure as
the proxy; only the framing differs.

Sync code (a deployment's plain `def` method, run in a thread) can call
`handle.remote(...).result()`: the call runs on the replica's event loop.

A streaming call (`options(stream=True)`, for a generator method) sends the
header `x-servefleet-stream`; the replica answers one JSON line per yield,
and the handle hands them out as they come, reading at most STREAM_BUFFER
ahead of its consumer. A consumer that stops early cancels the call, which
closes its connection, which cancels the generator at the replica.
`.result()` of a unary call waits DEFAULT_RESULT_TIMEOUT_S (60 s) unless
given a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

from servefleet.api import HANDLE_MARKER, encode
from servefleet.client import resolve_addresses
from servefleet.dataplane.balancer import Overloaded, ReplicaPool, Unservable
from servefleet.dataplane.forward import MAX_ATTEMPTS, NoReplicaTook, forward
from servefleet.dataplane.load_report import LoadReporter
from servefleet.dataplane.replica_sets import ReplicaSets
from servefleet.dataplane.upstream import Response, UpstreamError, UpstreamPool
from servefleet.logs import new_request_id
from servefleet.responses import (
    _END,
    DeploymentResponse,
    DeploymentResponseGenerator,
    HandleError,
)
from servefleet.v1 import watch_pb2
from servefleet.watch_client import WatchClient
from servefleet.wire import (
    METHOD_HEADER,
    MODEL_ID_HEADER,
    REQUEST_ID_HEADER,
    STREAM_HEADER,
    replicas_key,
)

logger = logging.getLogger(__name__)

# How long a first call waits for the target's replica set to be known.
DISCOVERY_TIMEOUT_S = 30.0



class HandleRouter:
    """Replica sets of one application's deployments, kept by a Watch stream."""

    def __init__(self, application: str, controllers: Sequence[str]) -> None:
        self.application = application
        self.upstream = UpstreamPool()
        self.replica_sets = ReplicaSets(self.upstream)
        self._changed = asyncio.Event()
        self._watch = WatchClient(list(controllers), [replicas_key(application)],
                                  on_snapshot=self._apply,
                                  kind=watch_pb2.WATCHER_KIND_HANDLE,
                                  watcher_id=f"handle-{uuid.uuid4().hex[:8]}")
        # Calls queued and awaited here count toward the autoscaler's load, as a
        # proxy's do (and a call waiting for a scaled-to-zero deployment wakes it).
        reporter = LoadReporter(self._watch)
        self.replica_sets.on_starved = reporter.wake
        self._watch.start()
        self._reporting = asyncio.get_running_loop().create_task(
            reporter.run(self.replica_sets), name=f"load reports of {application}")

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

    async def call(self, deployment: str, method: str, args: tuple, kwargs: dict,
                   model_id: str = "") -> Any:
        body = json.dumps({"args": encode(list(args), _no_bound, "handle call args"),
                           "kwargs": encode(kwargs, _no_bound, "handle call kwargs")}).encode()
        request_id = new_request_id()
        headers = [(b"content-type", b"application/json"), (METHOD_HEADER, method.encode()),
                   (REQUEST_ID_HEADER, request_id.encode())]
        if model_id:
            headers.append((MODEL_ID_HEADER, model_id.encode("latin-1")))
        pool = await self.pool(deployment)
        try:
            status, payload = await forward(pool, self.upstream, "POST", b"/", headers, body,
                                            _read_answer, request_id, model_id)
        except Unservable as e:
            raise HandleError(str(e), 503) from None
        except Overloaded as e:
            raise HandleError(f"{deployment} is overloaded: {e}", 503) from None
        except NoReplicaTook:
            raise HandleError(f"no replica of {deployment} took the call after {MAX_ATTEMPTS} "
                              "attempts", 503) from None
        except UpstreamError as e:
            raise HandleError(f"the replica at {e.address} failed: {e}", 502) from None
        if status == 200:
            return decode(payload.get("result"), self.application, self._watch.addresses)
        raise HandleError(f"{deployment}.{method}: {payload.get('error', status)}", status)

    async def stream(self, deployment: str, method: str, args: tuple, kwargs: dict,
                     out: asyncio.Queue, model_id: str = "") -> None:
        """Send a streaming call; put each item on `out`, then _END (or a
        HandleError). Cancelling this closes the connection, which cancels
        the generator at the replica."""
        body = json.dumps({"args": encode(list(args), _no_bound, "handle call args"),
                           "kwargs": encode(kwargs, _no_bound, "handle call kwargs")}).encode()
        request_id = new_request_id()
        headers = [(b"content-type", b"application/json"), (METHOD_HEADER, method.encode()),
                   (STREAM_HEADER, b"1"), (REQUEST_ID_HEADER, request_id.encode())]
        if model_id:
            headers.append((MODEL_ID_HEADER, model_id.encode("latin-1")))

        async def deliver(response: Response) -> None:
            if response.status != 200:
                status, payload = await _read_answer(response)
                raise HandleError(f"{deployment}.{method}: {payload.get('error', status)}",
                                  status)
            pending = b""
            async for chunk in response.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    item = json.loads(line)
                    if "error" in item:
                        raise HandleError(f"{deployment}.{method}: {item['error']}", 500)
                    await out.put(decode(item.get("item"), self.application,
                                         self._watch.addresses))

        try:
            pool = await self.pool(deployment)
            await forward(pool, self.upstream, "POST", b"/", headers, body, deliver, request_id,
                          model_id)
            await out.put(_END)
        except Unservable as e:
            await out.put(HandleError(str(e), 503))
        except Overloaded as e:
            await out.put(HandleError(f"{deployment} is overloaded: {e}", 503))
        except NoReplicaTook:
            await out.put(HandleError(f"no replica of {deployment} took the call after "
                                      f"{MAX_ATTEMPTS} attempts", 503))
        except UpstreamError as e:
            await out.put(HandleError(f"the replica at {e.address} failed: {e}", 502))
        except HandleError as e:
            await out.put(e)

    async def close(self) -> None:
        self._reporting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reporting
        await self._watch.close()
        self.upstream.close()


async def _read_answer(response: Response) -> tuple[int, dict]:
    """A handle call's status and JSON answer (the error text when not JSON)."""
    raw = await response.read()
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:
        payload = {"error": raw[:500].decode(errors="replace")}
    return response.status, payload if isinstance(payload, dict) else {}


def _no_bound(app: Any) -> str:
    raise TypeError("a bound deployment cannot be passed in a handle call; pass its handle")


# Routers per event loop and application (a replica has one loop); a loop
# that is gone takes its routers with it.
_routers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, HandleRouter]] = (
    weakref.WeakKeyDictionary())
_replica_loop: asyncio.AbstractEventLoop | None = None


def use_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The loop that sync code's handle calls run on (the replica's)."""
    global _replica_loop
    _replica_loop = loop


def _router(application: str, controllers: Sequence[str]) -> HandleRouter:
    routers = _routers.setdefault(asyncio.get_running_loop(), {})
    router = routers.get(application)
    if router is None:
        router = routers[application] = HandleRouter(application, controllers)
    return router


class DeploymentHandle:
    def __init__(self, deployment: str, application: str = "default",
                 controllers: str | Sequence[str] | None = None,
                 method: str = "__call__", stream: bool = False,
                 multiplexed_model_id: str = "") -> None:
        self.deployment = deployment
        self.application = application
        self.controllers = resolve_addresses(controllers)
        self.method = method
        self.stream = stream
        self.multiplexed_model_id = multiplexed_model_id

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                multiplexed_model_id: str | None = None) -> DeploymentHandle:
        """A handle calling another method, or (stream=True) a generator method
        whose yields `remote()` returns as an iterator, or for a multiplexed
        model (sent where it is loaded; multiplex.py)."""
        return DeploymentHandle(self.deployment, self.application, self.controllers,
                                method_name or self.method,
                                self.stream if stream is None else stream,
                                self.multiplexed_model_id if multiplexed_model_id is None
                                else multiplexed_model_id)

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """A DeploymentResponse (await it, or `.result()`), or with stream=True
        a DeploymentResponseGenerator."""
        if self.stream:
            return self._remote_stream(args, kwargs)

        async def call() -> Any:
            router = _router(self.application, self.controllers)
            return await router.call(self.deployment, self.method, args, kwargs,
                                     self.multiplexed_model_id)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            return DeploymentResponse(loop.create_task(call()))
        if _replica_loop is None or _replica_loop.is_closed():
            raise RuntimeError("handle calls need an event loop: call them from async code, "
                               "or from a deployment's code in a replica")
        return DeploymentResponse(asyncio.run_coroutine_threadsafe(call(), _replica_loop))

    def _remote_stream(self, args: tuple, kwargs: dict) -> DeploymentResponseGenerator:
        async def start(out: asyncio.Queue) -> None:
            router = _router(self.application, self.controllers)
            await router.stream(self.deployment, self.method, args, kwargs, out,
                                self.multiplexed_model_id)

        try:
            asyncio.get_running_loop()
            return DeploymentResponseGenerator(start, None)
        except RuntimeError:
            pass
        if _replica_loop is None or _replica_loop.is_closed():
            raise RuntimeError("handle calls need an event loop: call them from async code, "
                               "or from a deployment's code in a replica")
        return DeploymentResponseGenerator(start, _replica_loop)

    def _servefleet_marker(self) -> dict[str, Any]:
        return {HANDLE_MARKER: {"deployment": self.deployment,
                                "application": self.application}}

    def __repr__(self) -> str:
        return f"DeploymentHandle({self.application}/{self.deployment}.{self.method})"


def decode(value: Any, application: str, controllers: Sequence[str]) -> Any:
    """JSON data with handle markers turned into handles."""
    if isinstance(value, list):
        return [decode(v, application, controllers) for v in value]
    if isinstance(value, dict):
        marker = value.get(HANDLE_MARKER)
        if len(value) == 1 and isinstance(marker, dict) and "deployment" in marker:
            return DeploymentHandle(marker["deployment"], marker.get("application", application),
                                    controllers)
        return {k: decode(v, application, controllers) for k, v in value.items()}
    return value


def get_deployment_handle(deployment: str, application: str = "default",
                          controllers: str | Sequence[str] | None = None) -> DeploymentHandle:
    """A handle to a running deployment, from any asyncio program (the controllers
    default to $SERVEFLEET_CONTROLLER or 127.0.0.1:7373)."""
    return DeploymentHandle(deployment, application, controllers)
