"""A layout (layout.py) and its servers as haproxy.cfg text (pure).

How servefleet's semantics map onto HAProxy's (docs/guides/haproxy.md has the table):

- a route is `path` equal to its prefix or beginning with prefix + "/"; the
  first rule that matches, longest prefix first, sets `txn.route`;
- a deployment is a backend, each replica a server whose `maxconn` is
  max_ongoing_requests; `balance leastconn` sends a request to the server
  with the fewest in flight among those with room (what power of two
  choices approximates; HAProxy's `random(2)` may draw a full server and
  wait for it while another has room); past every maxconn requests wait in
  the backend's queue, and past max_queued_requests they get at once the
  answer the Python path gives (`queue()` in the frontend): the
  deployment's backpressure_config status (503 or 429) and Retry-After;
- a replica's own refusal (loading, draining, full with other senders) is
  answered 425 to HAProxy, which retries it on another server
  (`retry-on conn-failure 425`, `option redispatch 1`) and says 503 after
  the last try; a refused connection is retried the same way;
- health: an HTTP check every CHECK_INTERVAL_S that the replica answers
  itself (x-servefleet-check); a replica that holds its checks unanswered
  (SIGSTOP) is DOWN after `fall` of them, and a refused connection marks
  it down at once (`observe layer4`);
- the proxy's own paths (/-/healthz, /-/routes, /-/metrics) go to the
  Python path, which answers them, even when a route (one at /) would take
  them;
- the request id is kept or made (a random prefix per configuration, the
  time and the worker's request counter) and returned, x-forwarded-for and -proto are
  set as the Python proxy sets them, and no client's x-servefleet-* header
  passes.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from servefleet._private.dataplane.body import BodyTooLarge
from servefleet._private.security.hop import HOP_HEADER
from servefleet._private.wire import (
    CHECK_HEADER,
    MODEL_ID_HEADER,
    OWN_HEADER_PREFIX,
    REFUSAL_STATUS_HEADER,
    REQUEST_ID_HEADER,
    ROUTE_PREFIX_HEADER,
)

from ..access import ADMIN_PATHS
from ..limits import EdgeLimits
from . import DEFAULT_BUFFER_BYTES
from .layout import PYTHON_BACKEND, Backend, Layout, Server
from .logs import LOG_FORMAT

# The Python proxy behind HAProxy learns the client's address and scheme from these.
CLIENT_HEADER = OWN_HEADER_PREFIX + b"client"
SCHEME_HEADER = OWN_HEADER_PREFIX + b"scheme"
CHECK_INTERVAL_S = 1.0
# Checks unanswered in a row before a replica is DOWN, and answered to be UP again.
CHECK_FALL = 2
CHECK_RISE = 1
# Reloads an old worker may outlive while it still holds connections.
OLD_WORKERS = 20
# The part of HAProxy's buffer kept for the headers it adds.
REWRITE_BYTES = 1024
# Tries of a request no replica took (HAProxy's `retries`: after the first).
RETRIES = 3
# Connections to a replica are kept and reused. These are HAProxy's defaults
# for a server of the configuration file (an idle pool of any size, half of
# it closed every 5 s), written out because HAProxy 2.6 (Debian 12's) does
# not give them to a server added at run time: `add server` starts it with
# both at 0, so it keeps no idle connection and opens one per request
# (measured, async no-op at 16 connections: about a quarter of the
# requests/s of the same replica as a server of the file, p99 120-200 ms;
# `show servers conn` says purge_delay 0 and idle_lim 0). `max-reuse`, the one other such
# default, `add server` refuses; it limits only multiplexed (h2) connections.
IDLE_POOL = "pool-max-conn -1 pool-purge-delay 5s"
# The paths the proxy answers itself, before any route (proxy/app.py).
OWN_PATHS = ("/-/healthz", *sorted(ADMIN_PATHS))


@dataclass(frozen=True)
class EngineSettings:
    """What of the proxy's flags HAProxy's configuration says."""

    listen: str  # HOST:PORT of the HTTP port
    python: str  # HOST:PORT of the Python proxy behind HAProxy
    stats: str  # where HAProxy's Prometheus exporter listens (unix@PATH or HOST:PORT)
    limits: EdgeLimits = field(default_factory=EdgeLimits)
    trusted: str = "127.0.0.1,::1"  # --forwarded-allow-ips
    tls_pem: str | None = None  # certificate chain and key, one PEM file
    threads: int = 0  # 0: HAProxy's default (one per CPU it may run on)
    websocket_idle_timeout_s: float = 0.0
    # HAProxy's buffer (tune.bufsize): a request's head must fit in it, less
    # REWRITE_BYTES (--engine-buffer-bytes).
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    lua: str = ""  # the path of HOP_BY_HOP_LUA, written where HAProxy reads it
    log: str = ""  # the Unix datagram socket HAProxy logs requests to (logs.py)
    access_log: bool = False  # log every request, not only those that went wrong


# Headers a client's Connection header names are hop-by-hop (RFC 9110 7.6.1)
# and stop at the proxy, as the Python proxy drops them; HAProxy drops only
# the standard ones. Rare (clients name none), so it runs only when a
# Connection header names a header.
HOP_BY_HOP_LUA = """\
core.register_action("drop_hop_by_hop", { "http-req" }, function(txn)
  local kept = {}
  for _, value in pairs(txn.http:req_get_headers()["connection"] or {}) do
    for token in string.gmatch(value, "[^,%s]+") do
      local name = string.lower(token)
      if name == "keep-alive" or name == "close" or name == "upgrade" then
        table.insert(kept, name)
      else
        txn.http:req_del_header(name)
      end
    end
  end
  txn.http:req_del_header("connection")
  if #kept > 0 then txn.http:req_set_header("connection", table.concat(kept, ", ")) end
end)
"""
# The request id on the answers HAProxy makes itself.
_RID = f" hdr {REQUEST_ID_HEADER.decode()} %[var(txn.rid)]"
_ERRORS = {502: "a replica's answer could not be read", 503: "no replica could take the request",
           504: "no answer from the replica in time"}
# A Connection header with a token other than keep-alive, close and upgrade.
_NAMES_A_HEADER = r"(^|,)\s*(?!(keep-alive|close|upgrade)\s*(,|$))[^,\s]"


def address(host_port: str) -> str:
    """HOST:PORT as HAProxy writes addresses ("[::1]:80" -> "ipv6@::1:80");
    unix@PATH as it is."""
    if host_port.startswith("unix@"):
        return host_port
    host, _, port = host_port.rpartition(":")
    if host.startswith("["):
        return f"ipv6@{host[1:-1]}:{port}"
    return f"{host or '0.0.0.0'}:{port}"


def request_id_prefix() -> str:
    """16 random hex digits, new for every configuration: the request ids
    HAProxy makes are this and its worker's request counter, which starts
    again at 0 in the worker a reload starts."""
    return secrets.token_hex(8)


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def server_line(name: str, server: Server) -> str:
    """A server's arguments, the same in the file and in `add server`: a
    server added at run time inherits nothing (no `default-server`, not all
    of HAProxy's defaults), so every setting is written here."""
    return (f"{name} {address(server.address)} maxconn {server.maxconn} check "
            f"inter {_ms(CHECK_INTERVAL_S)} fall {CHECK_FALL} rise {CHECK_RISE} "
            f"observe layer4 error-limit 1 on-error mark-down {IDLE_POOL}")


def _global(settings: EngineSettings) -> list[str]:
    lines = ["global", "    master-worker", f"    lua-load {shlex.quote(settings.lua)}",
             # An old worker (after a reload) serves what it holds to its end:
             # a stream or WebSocket of another route outlives a reload. After
             # OLD_WORKERS more reloads it is stopped. (The proxy's own stop
             # bounds its drain: process.py.)
             f"    mworker-max-reloads {OLD_WORKERS}",
             # A head (request line and headers) must fit in one buffer, less
             # the room HAProxy keeps for the headers it adds (REWRITE_BYTES).
             # Measured (CPU per request of HAProxy's worker, async no-op):
             # a 66 KiB buffer cost about 8 us more than 16 KiB, of some 35.
             f"    tune.bufsize {settings.buffer_bytes}",
             f"    tune.maxrewrite {REWRITE_BYTES}", "    tune.http.maxhdr 256"]
    if settings.log:
        lines.append(f"    log {shlex.quote(settings.log)} len 4096 format raw local0 info")
    if settings.limits.max_connections:
        lines.append(f"    maxconn {settings.limits.max_connections}")
    if settings.threads:
        lines.append(f"    nbthread {settings.threads}")
    return lines


def _defaults(layout: Layout, settings: EngineSettings) -> list[str]:
    limits = settings.limits
    tunnel = 24 * 3600  # WebSockets: an idle limit is the Python path's (_frontend)
    return ["defaults", "    mode http",
            # At a reload the old worker keeps its idle client connections and
            # answers the next request on each with "Connection: close",
            # instead of closing them under a client that may be sending.
            "    option idle-close-on-response",
            "    timeout connect 2s",
            f"    timeout client {_ms(max(limits.header_timeout_s, 60))}",
            f"    timeout http-request {_ms(limits.header_timeout_s)}",
            f"    timeout http-keep-alive {_ms(limits.keep_alive_timeout_s)}",
            f"    timeout server {_ms(layout.timeout_s)}",
            f"    timeout queue {_ms(layout.timeout_s)}",
            f"    timeout tunnel {_ms(tunnel)}",
            "    timeout client-fin 1s", "    timeout server-fin 1s",
            f"    timeout check {_ms(CHECK_INTERVAL_S)}",
            # HAProxy's own answers carry the request id too (the replicas'
            # echo it): set here, not by a rule run on every response.
            *(f"    http-error status {status} content-type text/plain string "
              f"{_quoted(text)}{_RID}" for status, text in _ERRORS.items())]


def _reaches(prefix: str, path: str) -> bool:
    """Whether a route at `prefix` takes `path` (RouteTable.match's rule)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def _trusted_acl(trusted: str) -> str:
    entries = [e.strip() for e in trusted.split(",") if e.strip()]
    if "*" in entries:
        return "    acl fwd_trusted always_true"
    return "    acl fwd_trusted src " + " ".join(entries) if entries else \
        "    acl fwd_trusted always_false"


def _frontend(layout: Layout, settings: EngineSettings) -> list[str]:
    limits = settings.limits
    bind = f"    bind {address(settings.listen)}"
    if settings.tls_pem:
        bind += f" ssl crt {shlex.quote(settings.tls_pem)} alpn http/1.1"
    rid = REQUEST_ID_HEADER.decode()
    logging = [] if not settings.log else [
        "    log global", f"    log-format {_quoted(LOG_FORMAT)}",
        *([] if settings.access_log else ["    option dontlog-normal"])]
    lines = ["frontend servefleet", bind, *logging,
             f"    http-request del-header {OWN_HEADER_PREFIX.decode()} -m beg",
             "    http-request lua.drop_hop_by_hop "
             f"if {{ req.fhdr(connection) -m reg -i {_NAMES_A_HEADER} }}",
             # A new id: this configuration's random prefix, the second and the
             # worker's request counter, which wraps at 2^32 (HAProxy's `uuid`
             # cost about 1.5 us more per request).
             f"    http-request add-header {rid} {request_id_prefix()}%{{+X}}Ts%{{+X}}rt "
             f"unless {{ req.hdr({rid}) -m found }}",
             f"    http-request set-var(txn.rid) req.hdr({rid})",
             _trusted_acl(settings.trusted),
             "    acl fwd_proto_ok req.hdr(x-forwarded-proto) -i http https",
             # The listener is TLS or not: its scheme, unless a trusted balancer said one.
             "    http-request set-header x-forwarded-proto "
             f"{'https' if settings.tls_pem else 'http'} if !fwd_trusted || !fwd_proto_ok"]
    # Past the buffer no head is read at all (HAProxy's 400): a longer limit needs no rule.
    head_room = settings.buffer_bytes - REWRITE_BYTES
    if limits.max_url_bytes < head_room:
        lines.append("    http-request return status 414 content-type text/plain lf-string "
                     + _quoted(f"the request target is %[url,length] bytes; the limit is "
                               f"{limits.max_url_bytes} (--max-url-bytes)")
                     + f"{_RID} if {{ url,length gt {limits.max_url_bytes} }}")
    if limits.max_header_bytes < head_room:  # else: the buffer's 400
        lines.append("    http-request return status 431 content-type text/plain lf-string "
                     + _quoted(f"the request's headers are %[req.hdrs,length] bytes; the limit "
                               f"is {limits.max_header_bytes} (--max-header-bytes)")
                     + f"{_RID} if {{ req.hdrs,length gt {limits.max_header_bytes} }}")
    # HAProxy runs every http-request rule before any use_backend: they come last.
    # The Python path takes multiplexed models, chunked bodies (their size
    # counted as they stream, for the body limit) and, with an idle timeout,
    # WebSockets (HAProxy would end an idle one with no close frame).
    choices = [f"    use_backend {PYTHON_BACKEND} if "
               f"{{ req.hdr({MODEL_ID_HEADER.decode()}) -m found }}",
               f"    use_backend {PYTHON_BACKEND} if {{ req.hdr(transfer-encoding) -m found }}"]
    if settings.websocket_idle_timeout_s:
        choices.append(f"    use_backend {PYTHON_BACKEND} if {{ req.hdr(upgrade) -i websocket }}")
    too_large = BodyTooLarge(layout.max_body_bytes)
    if any(_reaches(r.prefix, path) for r in layout.routes for path in OWN_PATHS):
        # A route number no route has: the proxy's own paths take no route's
        # rules and go to the Python path (default_backend), which answers
        # them. Written only when a route (one at /, say) would take them.
        lines.append(f"    http-request set-var(txn.route) int(-1) "
                     f"if {{ path {' '.join(OWN_PATHS)} }}")
    for i, route in enumerate(layout.routes):
        prefix = route.prefix
        match = "" if prefix == "/" else \
            f" {{ path {_quoted(prefix)} }} || {{ path_beg {_quoted(prefix + '/')} }}"
        unset = "!{ var(txn.route) -m found }"
        if match:
            lines.append(f"    http-request set-var(txn.route) int({i}) "
                         f"if {unset}{match.replace(' || ', f' || {unset} ')}")
        else:
            lines.append(f"    http-request set-var(txn.route) int({i}) if {unset}")
    for i, route in enumerate(layout.routes):
        if not route.backends:
            continue  # the Python path (default_backend)
        on = f"route{i}"
        lines += [f"    acl {on} var(txn.route) -m int eq {i}",
                  f"    http-request add-header {ROUTE_PREFIX_HEADER.decode()} "
                  f"{_quoted(route.prefix)} if {on}",
                  "    http-request return status 413 content-type text/plain string "
                  f"{_quoted(str(too_large))}{_RID} "
                  f"if {on} {{ req.hdr_val(content-length) gt {layout.max_body_bytes} }}"]
        if len(route.backends) > 1:
            lines.append(f"    http-request set-var(txn.roll) rand(10000) if {on}")
        low = 0
        for backend, high in route.backends:
            roll = "" if len(route.backends) == 1 else \
                f" {{ var(txn.roll) -m int ge {low} }} {{ var(txn.roll) -m int lt {high} }}"
            lines += _queue_full(next(b for b in layout.backends if b.name == backend),
                                 f"{on}{roll}")
            choices.append(f"    use_backend {backend} if {on}{roll} "
                           f"{{ nbsrv({backend}) gt 0 }}")
            low = high
    return [*lines, *choices, f"    default_backend {PYTHON_BACKEND}"]


def _queue_full(backend: Backend, when: str) -> list[str]:
    """The answer to a request past the backend's max_queued_requests, as the
    Python path gives it (proxy/app.py, dataplane/backpressure.py): the
    deployment's backpressure status (503 or 429), its Retry-After, and the
    same text. With no queue allowed (0), a request no server has room for
    now is refused so; with no limit (-1), none is."""
    if backend.max_queued < 0:
        return []
    full = (f"{{ queue({backend.name}) ge {backend.max_queued} }}" if backend.max_queued else
            # Free slots of the servers up; the backend's `timeout queue 1ms`
            # still refuses a request that lost a race for the last one.
            f"{{ be_conn_free({backend.name}) le 0 }} {{ nbsrv({backend.name}) gt 0 }}")
    text = f"{backend.deployment} is overloaded: {backend.max_queued} requests already queued"
    headers = "".join(f" hdr {name.decode()} {value.decode()}"
                      for name, value in backend.backpressure.headers())
    return [f"    http-request return status {backend.backpressure.status} content-type "
            f"{_quoted('text/plain; charset=utf-8')} string {_quoted(text)}{_RID}{headers} "
            f"if {when} {full}"]


def _backend(name: str, max_queued: int, servers: Mapping[str, Server],
             hop_pass: str = "") -> list[str]:
    lines = [f"backend {name}", "    balance leastconn", "    option forwardfor",
             "    option httpchk",
             f"    http-check send meth GET uri / hdr {CHECK_HEADER.decode()} 1",
             "    http-check expect status 200",
             f"    retries {RETRIES}", "    option redispatch 1",
             "    retry-on conn-failure 425",
             f"    http-request add-header {REFUSAL_STATUS_HEADER.decode()} 425",
             "    http-response set-status 503 if { status 425 }"]
    if hop_pass:  # who this proxy is, to replicas of a cluster with credentials
        lines.append(f"    http-request set-header {HOP_HEADER} {_quoted(hop_pass)}")
    if max_queued == 0:  # no queue: a request no replica can take now is refused
        lines.append("    timeout queue 1ms")
    lines += [f"    server {server_line(server, servers[server])}" for server in sorted(servers)]
    return lines


def _python_backend(settings: EngineSettings) -> list[str]:
    # The Python proxy bounds its own exchanges (its request and answer-start
    # timeouts) and queues requests for deployments scaled to zero.
    return [f"backend {PYTHON_BACKEND}", "    timeout server 24h", "    timeout queue 24h",
            f"    http-request set-header {CLIENT_HEADER.decode()} %[src]",
            f"    http-request set-header {SCHEME_HEADER.decode()} https if {{ ssl_fc }}",
            f"    server python {address(settings.python)}"]


def _stats(settings: EngineSettings) -> list[str]:
    return ["frontend servefleet_stats", f"    bind {address(settings.stats)}",
            "    http-request use-service prometheus-exporter if { path /metrics }",
            "    http-request return status 404"]


def render(layout: Layout, servers: Mapping[str, Mapping[str, Server]],
           settings: EngineSettings) -> str:
    """haproxy.cfg for `layout` with `servers` (backend -> name -> server)."""
    sections = [_global(settings), _defaults(layout, settings),
                _frontend(layout, settings), _python_backend(settings), _stats(settings)]
    sections += [_backend(b.name, b.max_queued, servers.get(b.name, {}), layout.hop_pass)
                 for b in layout.backends]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"
