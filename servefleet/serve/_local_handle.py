"""Handles and responses of local testing mode (local_testing.py).

They are servefleet's DeploymentHandle, DeploymentResponse and
DeploymentResponseGenerator (isinstance holds, so type checks in user
code pass), with every method replaced: a call goes to a deployment running
in this process (`LocalReplica` in local_runtime.py, each on an event loop
of its own) instead of through a router. What Ray's local testing mode
does, these do:

- `.result(timeout_s=None)` waits (for ever by default) from sync code and
  is refused inside a running event loop, where it would block the loop;
  a timeout raises TimeoutError and leaves the call running;
- `await response` in async code, on any loop;
- `response.cancel()` cancels the call: waiting on it then raises
  RequestCancelledError;
- a streaming handle's `remote()` gives a generator for `for` and
  `async for`, pulled one item at a time.

A local handle pickles as its application, deployment and options, and
unpickles to the handle of the same local deployment (arguments are
pickled round-trip, as in a real call).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from typing import Any, Protocol

from servefleet._private.handles.handle import DeploymentHandle
from servefleet._private.handles.responses import DeploymentResponse, DeploymentResponseGenerator

from .exceptions import RayServeException, RequestCancelledError


class LocalReplica(Protocol):
    """What a handle calls: _local_runtime.LocalReplica, which makes this
    module's responses (a protocol, not an import of it)."""

    def call(self, method: str, args: tuple, kwargs: dict, model_id: str,
             stream: bool) -> concurrent.futures.Future: ...

    def next_item(self, opened: concurrent.futures.Future) -> concurrent.futures.Future: ...

    def close_stream(self, opened: concurrent.futures.Future) -> None: ...


# What next_item gives at the end of a stream (StopAsyncIteration cannot
# travel through a future).
END: Any = object()
# The local deployments of this process, by (application, deployment).
REPLICAS: dict[tuple[str, str], LocalReplica] = {}
# Their deployment-scoped actors, by (application, deployment): actor name ->
# the name of the local deployment that runs it (local_testing.py).
ACTORS: dict[tuple[str, str], dict[str, str]] = {}
# Ray's handle.options() arguments that mean nothing in one process.
# (routing_key: one local replica, nothing to route.)
_IGNORED_OPTIONS = ("use_new_handle_api", "_prefer_local_routing", "_by_reference",
                    "_request_protocol", "_source", "routing_key")


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LocalDeploymentResponse(DeploymentResponse):
    """The pending result of a local call."""

    def __init__(self, future: concurrent.futures.Future, request_id: str) -> None:
        self._future = self._local = future
        self.request_id = request_id

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> Any:
        try:
            return await asyncio.wrap_future(self._local)
        except asyncio.CancelledError:
            if self._local.cancelled():
                raise RequestCancelledError(self.request_id) from None
            raise

    def result(self, timeout_s: float | None = None, *, timeout: Any = None,
               _skip_asyncio_check: bool = False) -> Any:
        """The call's result; at most `timeout_s` seconds (None: no limit)."""
        limit = timeout_s if timeout_s is not None else timeout
        if not _skip_asyncio_check and _in_event_loop():
            raise RuntimeError("result() blocks, and is not allowed inside an asyncio event "
                               "loop: use `await response` instead")
        try:
            return self._local.result(limit)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no result within {limit:g} s") from None
        except concurrent.futures.CancelledError:
            raise RequestCancelledError(self.request_id) from None

    def cancel(self) -> None:
        self._local.cancel()

    def cancelled(self) -> bool:
        return self._local.cancelled()


class LocalDeploymentResponseGenerator(DeploymentResponseGenerator):
    """The items of a local streaming call, pulled one at a time from the
    generator running in the deployment's loop."""

    def __init__(self, replica: LocalReplica, opened: concurrent.futures.Future,
                 request_id: str) -> None:
        self._replica, self._opened, self.request_id = replica, opened, request_id
        self._done = False

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        if _in_event_loop():
            raise RuntimeError("`for` over a streaming response blocks, and is not allowed "
                               "inside an asyncio event loop: use `async for` instead")
        if self._done:
            raise StopIteration
        try:
            item = self._replica.next_item(self._opened).result()
        except concurrent.futures.CancelledError:
            self._done = True
            raise RequestCancelledError(self.request_id) from None
        if item is END:
            self._done = True
            raise StopIteration
        return item

    def __aiter__(self) -> LocalDeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await asyncio.wrap_future(self._replica.next_item(self._opened))
        except asyncio.CancelledError:
            if self._opened.cancelled():
                self._done = True
                raise RequestCancelledError(self.request_id) from None
            raise
        if item is END:
            self._done = True
            raise StopAsyncIteration
        return item

    def cancel(self) -> None:
        self._done = True
        self._replica.close_stream(self._opened)

    async def aclose(self) -> None:
        self.cancel()

    def close(self) -> None:
        self.cancel()

    def __del__(self) -> None:
        if not getattr(self, "_done", True):
            self.cancel()


class LocalDeploymentHandle(DeploymentHandle):
    """A handle to a deployment of a local-testing-mode application."""

    def __init__(self, application: str, deployment: str, method: str = "__call__",
                 stream: bool = False, multiplexed_model_id: str = "") -> None:
        self.application, self.deployment = application, deployment
        self.controllers: list[str] = []
        self.method, self.stream = method, stream
        self.multiplexed_model_id = multiplexed_model_id
        self.routing_key = ""  # one local replica: nothing to route

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                multiplexed_model_id: str | None = None, **ignored: Any) -> DeploymentHandle:
        """DeploymentHandle.options, taking (and ignoring) Ray's options that
        mean nothing in one process; TypeError for any other."""
        unknown = [name for name in ignored if name not in _IGNORED_OPTIONS]
        if unknown:
            raise TypeError(f"handle.options() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        return super().options(method_name=method_name, stream=stream,
                               multiplexed_model_id=multiplexed_model_id,
                               use_new_handle_api=ignored.get("use_new_handle_api"),
                               _prefer_local_routing=ignored.get("_prefer_local_routing"),
                               _by_reference=ignored.get("_by_reference"))

    def _copy(self, method: str, stream: bool, multiplexed_model_id: str,
              routing_key: str) -> LocalDeploymentHandle:
        return LocalDeploymentHandle(self.application, self.deployment, method, stream,
                                     multiplexed_model_id)

    def _replica(self) -> LocalReplica:
        replica = REPLICAS.get((self.application, self.deployment))
        if replica is None:
            raise RayServeException(f"deployment {self.deployment!r} of application "
                                    f"{self.application!r} is not running in this process "
                                    "(deleted, or serve.shutdown() was called)")
        return replica

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """A LocalDeploymentResponse, or with stream=True a generator of the items."""
        request_id = uuid.uuid4().hex
        replica = self._replica()
        future = replica.call(self.method, args, kwargs, self.multiplexed_model_id,
                              self.stream)
        if self.stream:
            return LocalDeploymentResponseGenerator(replica, future, request_id)
        return LocalDeploymentResponse(future, request_id)

    def __reduce__(self) -> Any:
        return (LocalDeploymentHandle, (self.application, self.deployment, self.method,
                                        self.stream, self.multiplexed_model_id))

    def _servefleet_marker(self) -> dict[str, Any]:
        raise TypeError("a local-testing-mode handle cannot be sent to a servefleet cluster")

    def __repr__(self) -> str:
        return f"LocalDeploymentHandle({self.application}/{self.deployment}.{self.method})"
