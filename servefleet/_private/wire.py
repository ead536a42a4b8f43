"""The names that cross a process boundary, each defined once.

Proxies, handles, replicas, the controller and SDK clients are separate
processes (and may be other languages): a header, metadata key, Watch key or
exit code one of them writes, another reads. Such a name lives here and
nowhere else; the formats are public (watch.proto, the README), so changing
one is a protocol change.

HTTP header names are lower-case bytes, as ASGI and the upstream client
carry them (`.decode()` gives the str form).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

# -- HTTP headers on the data hop (proxy or handle -> replica) ---------------------

# The request's id, kept end to end: taken from the client, else made up by the
# first hop (proxy, handle or replica), and echoed on the response.
REQUEST_ID_HEADER = b"x-request-id"
# W3C trace context (servefleet/_private/tracing/spans.py): accepted from clients,
# passed on by every hop next to x-request-id; the same names as gRPC metadata.
TRACEPARENT_HEADER = b"traceparent"
TRACESTATE_HEADER = b"tracestate"
TRACE_HEADERS = frozenset({TRACEPARENT_HEADER, TRACESTATE_HEADER})
# On a replica's 503: it refused the request unread, so it may be retried on
# another replica; the value says why (loading, draining, overloaded).
REJECTED_HEADER = b"x-servefleet-rejected"
# On a request from a data plane that retries by status only (HAProxy's
# retry-on, proxy/haproxy/): the status the replica answers its own refusal
# with instead of 503 (the value, "425"), so that the engine retries exactly
# the requests the replica never took and no 503 of the user's code.
REFUSAL_STATUS_HEADER = b"x-servefleet-refusal-status"
# A health check (an HAProxy engine's, proxy/haproxy/): the replica answers it
# itself, never calling user code: 200 while it takes requests (even when
# full), 503 while loading or draining.
CHECK_HEADER = b"x-servefleet-check"
# Marks a handle call; the value is the method to call (a proxy never forwards
# it). Its body is pickled (servefleet/_private/handles/values.py): replicas unpickle it.
METHOD_HEADER = b"x-servefleet-method"
# The model a request is for (multiplex.py); Ray Serve's header name.
MODEL_ID_HEADER = b"serve_multiplexed_model_id"
# What a deployment's request router may key on (docs/routing.md): HTTP header, gRPC metadata.
ROUTING_KEY_HEADER = b"x-servefleet-routing-key"
# On a replica's answer: the models it holds now, comma-separated (routers
# send a model's requests where it is loaded).
MODELS_HEADER = b"x-servefleet-models"
# On a handle call: stream the generator method's yields back as
# length-prefixed pickled frames (servefleet/_private/handles/values.py), not one answer.
STREAM_HEADER = b"x-servefleet-stream"
# The route prefix the proxy matched; an ASGI deployment is served under it as
# its root_path (a proxy sets it, never forwards a client's).
ROUTE_PREFIX_HEADER = b"x-servefleet-route-prefix"
# On routes that require a token: the name of the caller's token, which the
# proxy checked and kept (a proxy sets it, never forwards a client's).
CALLER_HEADER = b"x-servefleet-caller"
# Every header (and gRPC metadata key) with this prefix is the cluster's own:
# a proxy drops the ones a client sends, whatever follows the prefix, and adds
# its own (as Envoy drops x-envoy-* from untrusted clients).
OWN_HEADER_PREFIX = b"x-servefleet-"

# -- gRPC ------------------------------------------------------------------------

# gRPC ingress (proxy -> replica), as metadata keys (lower case, as gRPC sends them):
# the application a call is for (Ray Serve's key), set by the caller;
APPLICATION_METADATA_KEY = "application"
# the request id, as x-request-id is for HTTP;
REQUEST_ID_METADATA_KEY = "x-request-id"
# on a replica's refusal (RESOURCE_EXHAUSTED, UNAVAILABLE), trailing: it never
# processed the call, which may go to another replica; the value says why.
REJECTED_METADATA_KEY = "x-servefleet-rejected"
# on a call whose requests stream, initial: the replica took it (user code
# will read the messages). Before it, a proxy sends none of the client's
# messages, so a refusal leaves the call whole to try on another replica.
ADMITTED_METADATA_KEY = "x-servefleet-admitted"
# gRPC Python ends a server's request stream the same way when the client
# half-closes and when it cancels; the cancellation follows (measured: within
# 1.5 ms, 200 cancels at 20 at a time). A proxy or replica waits this long
# after the end before taking it for the client's half-close.
STREAM_END_GRACE_S = 0.01

# The largest request message a replica's gRPC ingress takes: gRPC's default
# receive limit, which the replica's server keeps (replica/main.py sets none).
# The proxy's gRPC ingress refuses larger ones itself (RESOURCE_EXHAUSTED
# naming it) rather than forward what every replica would refuse.
GRPC_MAX_REQUEST_BYTES = 4 * 1024 * 1024

# Trailing metadata on a standby's UNAVAILABLE: the leader's address, to go to.
LEADER_METADATA_KEY = "servefleet-leader"
# The environment variable naming the controllers (ADDR[,ADDR...]) for the SDK and CLI.
ENV_CONTROLLER = "SERVEFLEET_CONTROLLER"
# Where a controller listens, and clients look, when nothing else is said.
DEFAULT_CONTROLLER_PORT = 7373
DEFAULT_CONTROLLER = f"127.0.0.1:{DEFAULT_CONTROLLER_PORT}"


def resolve_addresses(addresses: str | Sequence[str] | None = None) -> list[str]:
    """Addresses from the argument, else $SERVEFLEET_CONTROLLER, else the default.

    A string may hold several addresses separated by commas.
    """
    if addresses is None:
        addresses = os.environ.get(ENV_CONTROLLER) or DEFAULT_CONTROLLER
    if isinstance(addresses, str):
        addresses = addresses.split(",")
    found = [a.strip() for a in addresses if a.strip()]
    if not found:
        raise ValueError("no controller address given")
    return found


# Where a proxy listens, and `servefleet up` tells users to send requests, by default.
DEFAULT_HTTP = "127.0.0.1:8000"

# -- Replica exit codes (read by the runtimes and the controller) -----------------

# The user's code failed to load (its error is read over GetMetadata first), or
# the replica crashed.
EXIT_FAILED = 1
# Bad command line or settings file: the runtime's mistake.
EXIT_BAD_SETTINGS = 2
# A port the runtime chose was taken: not the user's fault; start it elsewhere.
EXIT_BIND_FAILURE = 3

# -- The replica zygote (replica/zygote.py <-> controller/runtime/zygote.py) --------

# In the zygote's state directory: the socket it takes fork requests on (named
# by the zygote's pid: controllers sharing a runtime directory each have their
# own), and the folder of <pid>.json (a forked replica's identity) and
# <pid>.exit (its exit code), shared by all of them.
ZYGOTE_SOCKET = "zygote-{pid}.sock"
ZYGOTE_PROCS_DIR = "procs"

# -- Watch keys (watch.proto) ----------------------------------------------------

# The route table.
ROUTES_KEY = "routes"
# `replicas/<app>/<deployment>`: one deployment's ready replicas.
REPLICAS_KIND = "replicas"
# `config/<app>/<deployment>`: one deployment's lightweight config, for its replicas.
CONFIG_KIND = "config"
# What replicas check callers' hop passes against (security/hop.py).
HOP_KEY = "hop"
_KEY_SHAPES = ("must be 'routes', 'hop', 'replicas/<app>/<deployment>', "
               "'config/<app>/<deployment>' or a prefix of these ending in '/'")


class WatchKey(NamedTuple):
    """A parsed Watch key; for a prefix, `deployment` (and maybe `application`) is ""."""

    kind: str
    application: str = ""
    deployment: str = ""

    @property
    def is_prefix(self) -> bool:
        return self.kind not in (ROUTES_KEY, HOP_KEY) and not self.deployment


def _key(kind: str, application: str, deployment: str) -> str:
    if "/" in application or "/" in deployment or (deployment and not application):
        raise ValueError(f"no {kind} key for application {application!r}, "
                         f"deployment {deployment!r}")
    return f"{kind}/{application}/{deployment}" if application else f"{kind}/"


def replicas_key(application: str = "", deployment: str = "") -> str:
    """`replicas/<app>/<deployment>`; without a deployment, the prefix of an
    application's keys, without both, of every application's. ValueError for
    a name with "/", or a deployment without its application."""
    return _key(REPLICAS_KIND, application, deployment)


def config_key(application: str = "", deployment: str = "") -> str:
    """`config/<app>/<deployment>`, or a prefix, as `replicas_key` does."""
    return _key(CONFIG_KIND, application, deployment)


def parse_watch_key(key: str) -> WatchKey:
    """The parts of a Watch key or key prefix; ValueError saying the shapes
    allowed when `key` is none of them."""
    if key in (ROUTES_KEY, HOP_KEY):
        return WatchKey(key)
    kind, slash, rest = key.partition("/")
    if kind in (REPLICAS_KIND, CONFIG_KIND) and slash:
        if not rest:
            return WatchKey(kind)
        application, _, deployment = rest.partition("/")
        if application and (deployment or key.endswith("/")) and "/" not in deployment:
            return WatchKey(kind, application, deployment)
    raise ValueError(f"watch key {key!r}: {_KEY_SHAPES}")


def check_watch_key(key: str) -> str | None:
    """Why `key` is not a Watch key or key prefix, or None if it is one."""
    try:
        parse_watch_key(key)
    except ValueError:
        return _KEY_SHAPES
    return None
