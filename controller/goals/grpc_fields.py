"""The gRPC fields of a spec: servicer functions, services, streaming RPCs.

`grpc_servicer_functions` are import paths a user gives; `grpc_services`,
`grpc_streaming_methods` and `grpc_client_streaming_methods` are the
build's findings (output only), checked all the same since a client may
send anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import InvalidArgument

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
IMPORT_PATH_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*$")
SERVICE_NAME_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
MAX_GRPC_SERVICES = 32


def check_grpc(field: str, functions: Sequence[str], services: Sequence[str] = (),
               streaming: Sequence[str] = (), client_streaming: Sequence[str] = ()) -> None:
    """grpc_servicer_functions are import paths, each once; grpc_services are
    full service names; grpc_streaming_methods and grpc_client_streaming_methods
    are /Service/Method paths, the latter a part of the former."""
    for name, paths in (("grpc_streaming_methods", streaming),
                        ("grpc_client_streaming_methods", client_streaming)):
        for i, path in enumerate(paths):
            service, _, method = path[1:].rpartition("/")
            if (not path.startswith("/") or not SERVICE_NAME_RE.fullmatch(service)
                    or not re.fullmatch(_IDENT, method) or len(path) > 512 or i >= 4096):
                raise InvalidArgument(f"{field}.{name}[{i}]",
                                      f"must be a method path (/package.Service/Method), at "
                                      f"most 4096 of them, got {path[:200]!r}")
    for i, path in enumerate(client_streaming):
        if path not in streaming:
            raise InvalidArgument(f"{field}.grpc_client_streaming_methods[{i}]",
                                  f"{path!r} is not in grpc_streaming_methods (a client-"
                                  "streaming RPC streams)")
    if len(functions) > MAX_GRPC_SERVICES or len(services) > MAX_GRPC_SERVICES:
        raise InvalidArgument(f"{field}.grpc_servicer_functions",
                              f"at most {MAX_GRPC_SERVICES} services, got {len(functions)}")
    for i, path in enumerate(functions):
        if not IMPORT_PATH_RE.fullmatch(path) or len(path) > 512:
            raise InvalidArgument(f"{field}.grpc_servicer_functions[{i}]",
                                  "must look like 'package.module_pb2_grpc:add_XServicer_to_"
                                  f"server', got {path[:200]!r}")
        if path in functions[:i]:
            raise InvalidArgument(f"{field}.grpc_servicer_functions[{i}]",
                                  f"{path!r} is listed twice")
    for i, name in enumerate(services):
        if not SERVICE_NAME_RE.fullmatch(name) or len(name) > 512:
            raise InvalidArgument(f"{field}.grpc_services[{i}]",
                                  f"must be a full gRPC service name (package.Service), got "
                                  f"{name[:200]!r}")
