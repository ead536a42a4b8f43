"""Deployment handles: calling another deployment's methods from Python.

    result = await handle.remote(1, x=2)          # its __call__
    result = await handle.add.remote(1)           # a named method
    response = handle.remote(1); ...; await response   # calls run concurrently
    total = handle.add.remote(handle.remote(1)).result()  # from a plain script
    async for token in handle.options(stream=True).tokens.remote(5): ...

In a replica, every bound deployment among the init args arrives as a
handle (servefleet/_private/applications/api.py marks them). Outside, `get_deployment_handle`
makes one; inside a replica, one made without controllers calls that
replica's own controllers (replica_context), as Ray's handles reach their
own cluster.

Values are any Python values, pickled (servefleet/_private/handles/values.py; arrays out of
band). A handle pickles as a handle. A `DeploymentResponse` among the
arguments (at the top, or inside lists, tuples and dicts) is awaited first
and its result sent in its place, as Ray resolves them; a
`DeploymentResponseGenerator` or a bound deployment cannot be an argument
(TypeError naming it). The framing, routing and errors are
handle_router.py's; which loop runs a call is handle_loop.py's: async code
awaits on its own loop, sync code blocks on `.result()` or iterates with
`for` while the call runs on the replica's loop or a private one.

A call made while a request is served carries that request's id and trace
context (envelope.py), taken when `remote()` is called: the called
replica's log lines show the same request id, and with tracing on the call
is a span ("call Deployment.method") in the request's trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import servefleet._private.handle_loop as handle_loop
import servefleet._private.handles.values as values
import servefleet._private.replica_context as replica_context
from servefleet._private.applications.api import HANDLE_MARKER, Application
from servefleet._private.applications.api import Deployment as BoundDeployment
from servefleet._private.envelope import Carried
from servefleet._private.handle_loop import use_loop
from servefleet._private.handles.handle_router import close_routers, router
from servefleet._private.handles.responses import DeploymentResponse, DeploymentResponseGenerator
from servefleet._private.ray_handle_options import note_handle_options
from servefleet._private.wire import resolve_addresses

__all__ = ["DeploymentHandle", "close_routers", "decode", "get_deployment_handle", "use_loop"]


def _own_controllers(controllers: str | Sequence[str] | None) -> list[str]:
    """The given controllers; else, in a replica, its own; else
    $SERVEFLEET_CONTROLLER or the default (wire.resolve_addresses)."""
    if controllers is None:
        here = replica_context.current()
        if here is not None and here.controllers:
            return list(here.controllers)
    return resolve_addresses(controllers)


class DeploymentHandle:
    def __init__(self, deployment: str, application: str = "default",
                 controllers: str | Sequence[str] | None = None,
                 method: str = "__call__", stream: bool = False,
                 multiplexed_model_id: str = "", routing_key: str = "") -> None:
        self.deployment = deployment
        self.application = application
        self.controllers = _own_controllers(controllers)
        self.method = method
        self.stream = stream
        self.multiplexed_model_id = multiplexed_model_id
        # What the deployment's request router may key on (docs/routing.md).
        self.routing_key = routing_key

    @property
    def deployment_name(self) -> str:
        return self.deployment

    @property
    def app_name(self) -> str:
        return self.application

    def options(self, *, method_name: str | None = None, stream: bool | None = None,
                multiplexed_model_id: str | None = None,
                routing_key: str | None = None, use_new_handle_api: bool | None = None,
                _prefer_local_routing: bool | None = None,
                _by_reference: bool | None = None) -> DeploymentHandle:
        """A handle calling another method, or (stream=True) a generator method
        whose yields `remote()` returns as an iterator, or for a multiplexed
        model (sent where it is loaded; multiplex.py), or with a key for the
        deployment's request router (a prompt, a session: docs/routing.md).
        Ray's `use_new_handle_api`, `_prefer_local_routing` and `_by_reference`
        are accepted; what servefleet does not do is said once (ray_handle_options.py)."""
        note_handle_options(use_new_handle_api, _prefer_local_routing, _by_reference)
        return self._copy(method_name or self.method, self.stream if stream is None else stream,
                          self.multiplexed_model_id if multiplexed_model_id is None
                          else multiplexed_model_id,
                          self.routing_key if routing_key is None else routing_key)

    def _copy(self, method: str, stream: bool, multiplexed_model_id: str,
              routing_key: str) -> DeploymentHandle:
        """A handle to the same deployment that calls as given (`options`);
        a subclass (local testing mode's handle) makes one of its own kind."""
        return DeploymentHandle(self.deployment, self.application, self.controllers, method,
                                stream, multiplexed_model_id, routing_key)

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """A DeploymentResponse (await it, or `.result()`), or with stream=True
        a DeploymentResponseGenerator. Returns at once: the arguments are
        pickled (after any DeploymentResponse among them is resolved) as the
        call starts; a value that cannot be pickled fails the call."""
        if self.stream:
            return self._remote_stream(args, kwargs)

        carried = Carried()

        async def call() -> Any:
            with carried.entered(self._span_name(), self._span_attributes()):
                parts = await call_frame(args, kwargs)
                return await router(self.application, self.controllers).call(
                    self.deployment, self.method, parts, self.multiplexed_model_id,
                    self.routing_key)

        loop = handle_loop.loop_of_caller()
        if loop is not None:
            return DeploymentResponse(loop.create_task(call()))
        return DeploymentResponse(asyncio.run_coroutine_threadsafe(
            call(), handle_loop.loop_for_sync_code()))

    def _remote_stream(self, args: tuple, kwargs: dict) -> DeploymentResponseGenerator:
        carried = Carried()

        async def start(out: asyncio.Queue) -> None:
            with carried.entered(self._span_name(), self._span_attributes()):
                try:
                    parts = await call_frame(args, kwargs)
                except Exception as e:
                    await out.put(e)
                    return
                await router(self.application, self.controllers).stream(
                    self.deployment, self.method, parts, out, self.multiplexed_model_id,
                    self.routing_key)

        if handle_loop.loop_of_caller() is not None:
            return DeploymentResponseGenerator(start, None)
        return DeploymentResponseGenerator(start, handle_loop.loop_for_sync_code())

    def _span_name(self) -> str:
        return f"call {self.deployment}.{self.method}"

    def _span_attributes(self) -> dict[str, Any]:
        return {"servefleet.application": self.application,
                "servefleet.deployment": self.deployment, "servefleet.method": self.method,
                "servefleet.model_id": self.multiplexed_model_id,
                "servefleet.stream": self.stream}

    def __reduce__(self) -> tuple[Any, tuple]:
        return (_rebuilt, (self.deployment, self.application, tuple(self.controllers),
                           self.method, self.stream, self.multiplexed_model_id,
                           self.routing_key))

    def _servefleet_marker(self) -> dict[str, Any]:
        return {HANDLE_MARKER: {"deployment": self.deployment,
                                "application": self.application}}

    def __repr__(self) -> str:
        return f"DeploymentHandle({self.application}/{self.deployment}.{self.method})"


def _rebuilt(deployment: str, application: str, controllers: tuple[str, ...], method: str,
             stream: bool, model_id: str, routing_key: str = "") -> DeploymentHandle:
    """A handle unpickled: in a replica it calls that replica's controllers
    (the ones it can reach), elsewhere the ones it was made with."""
    here = replica_context.current()
    if here is not None and here.controllers:
        controllers = here.controllers
    return DeploymentHandle(deployment, application, controllers, method, stream, model_id,
                            routing_key)


async def call_frame(args: tuple, kwargs: dict) -> list[values.Buffer]:
    """(args, kwargs) pickled for a call, each DeploymentResponse among them
    replaced by its awaited result (what it raised fails this call)."""
    pending: dict[int, DeploymentResponse] = {}
    resolved: dict[int, Any] = {}

    def override(obj: Any) -> Any:
        if isinstance(obj, DeploymentResponse):
            if id(obj) in resolved:
                return (_passed_on, (resolved[id(obj)],))
            pending[id(obj)] = obj
            return (_passed_on, (None,))
        if isinstance(obj, DeploymentResponseGenerator):
            raise TypeError("a DeploymentResponseGenerator (a streaming call's items) cannot "
                            "be passed to a handle call: iterate it, and pass the items")
        if isinstance(obj, Application | BoundDeployment):
            raise TypeError("a bound deployment cannot be passed in a handle call; pass its "
                            "handle")
        return NotImplemented

    parts = values.frame((args, kwargs), override)
    if not pending:
        return parts
    results = await asyncio.gather(*(response for response in pending.values()))
    resolved.update(zip(pending, results, strict=True))
    return values.frame((args, kwargs), override)


def _passed_on(value: Any) -> Any:
    """Unpickles a resolved DeploymentResponse as its result."""
    return value


def decode(value: Any, application: str, controllers: Sequence[str]) -> Any:
    """JSON data with handle markers turned into handles (init args, which
    travel as JSON: api.encode)."""
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
    """A handle to a running deployment, from async code, sync code or a
    replica. The controllers default to the replica's own inside a replica,
    else $SERVEFLEET_CONTROLLER, else 127.0.0.1:7373. ValueError for an
    empty controller list."""
    return DeploymentHandle(deployment, application, controllers)
