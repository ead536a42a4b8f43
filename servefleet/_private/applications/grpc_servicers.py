"""What a generated `add_XServicer_to_server` function registers, without a server.

A user declares the gRPC services a deployment implements by the import
paths of their generated `add_XServicer_to_server(servicer, server)`
functions (Ray Serve's `grpc_servicer_functions`), as `module:function` or
in Ray's dotted form `pkg.mod_pb2_grpc.add_XServicer_to_server`
(servefleet/_private/configuration/import_paths.py). Calling one with a
recording server and a servicer that answers any attribute tells, per RPC,
its full path (`/package.Service/Method`), whether requests and responses
stream, and the message (de)serialisers, so the replica can serve the user's
methods with grpc.aio and the build can name the services, without any of
the user's protos in servefleet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servefleet._private.applications.user_code import import_user_object
from servefleet._private.configuration.import_paths import colon_form
from servefleet.replica.loader import LoadError


@dataclass(frozen=True)
class Rpc:
    service: str  # package.Service
    method: str  # Method: the deployment method called
    request_streaming: bool
    response_streaming: bool
    request_deserializer: Callable[[bytes], Any] | None
    response_serializer: Callable[[Any], bytes] | None

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method}"


class _AnyServicer:
    """Hands out each RPC's name where the generated code takes servicer.Method."""

    def __getattr__(self, name: str) -> str:
        return name


class _Recorder:
    """The part of grpc.Server that generated add functions call."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, Any]] = {}

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.services[service] = handlers

    def add_generic_rpc_handlers(self, generic_handlers: Any) -> None:
        # Older generated code registers only this; grpc's own generic handler
        # keeps its service name and method handlers.
        for handler in generic_handlers:
            name, methods = getattr(handler, "_name", None), getattr(handler, "_method_handlers",
                                                                     None)
            if isinstance(name, str) and isinstance(methods, dict) and name not in self.services:
                self.services[name] = {path.rsplit("/", 1)[-1]: h for path, h in methods.items()}


def rpcs_of(import_path: str, working_dir: str = "") -> list[Rpc]:
    """The RPCs the generated function at `import_path` registers.

    LoadError naming the import path when it is not such a function;
    UserCodeError (servefleet/_private/applications/user_code.py) when the path leaves user code.
    """
    add = import_user_object(colon_form(import_path), working_dir)
    if not callable(add):
        raise LoadError(f"grpc_servicer_functions: {import_path!r} is not a function")
    recorder = _Recorder()
    try:
        add(_AnyServicer(), recorder)
    except Exception as e:
        raise LoadError(f"grpc_servicer_functions: {import_path!r} is not a generated "
                        f"add_XServicer_to_server function ({type(e).__name__}: {e})") from None
    if not recorder.services:
        raise LoadError(f"grpc_servicer_functions: {import_path!r} registered no service")
    return [Rpc(service=service, method=method,
                request_streaming=bool(h.request_streaming),
                response_streaming=bool(h.response_streaming),
                request_deserializer=h.request_deserializer,
                response_serializer=h.response_serializer)
            for service, handlers in recorder.services.items()
            for method, h in handlers.items()]


@dataclass(frozen=True)
class Services:
    """What the build tells the controller about an ingress's gRPC services."""

    names: list[str]  # full service names, in order, each once
    streaming: list[str]  # paths of the RPCs that stream (requests or responses)
    client_streaming: list[str]  # of those, the RPCs whose requests stream


def services_of(import_paths: list[str], working_dir: str = "") -> Services:
    """The services the functions register, and which of their RPCs stream."""
    found = Services([], [], [])
    for path in import_paths:
        for rpc in rpcs_of(path, working_dir):
            if rpc.service not in found.names:
                found.names.append(rpc.service)
            if rpc.request_streaming or rpc.response_streaming:
                found.streaming.append(rpc.path)
            if rpc.request_streaming:
                found.client_streaming.append(rpc.path)
    return found
