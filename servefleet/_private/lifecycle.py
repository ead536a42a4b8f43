"""Process plumbing shared by the controller, proxy and replica.

`on_stop_signals`: the first SIGTERM/SIGINT asks the process to drain, a
second exits at once (as uvicorn does). `start_http_server`: uvicorn started
and stopped by its caller (`Server.serve()` would install uvicorn's own
signal handlers, and our processes drain on signals themselves).
`can_bind`: whether an address is free to listen on. `notify_ready`: tell
the supervisor that the process listens (systemd's readiness protocol).
`run`: a proxy's or replica's main coroutine on uvloop. `raise_open_file_limit`:
as many file descriptors as the process may have (a proxy holds two per
request: its client's and its replica's).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from ssl import SSLContext
from typing import Any, TypeVar

import uvicorn

logger = logging.getLogger(__name__)
T = TypeVar("T")
LOOP_ENV = "SERVEFLEET_EVENT_LOOP"


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop (a dependency of servefleet), unless
    SERVEFLEET_EVENT_LOOP=asyncio asks for the standard loop. For the proxy
    and the replica, which spend most of a request in their loop: uvloop's
    sockets and callbacks cost much less than asyncio's (docs/data-plane.md).

    uvloop starts a subprocess with fork() where asyncio uses vfork: a process
    with gRPC calls in flight needs gRPC's fork support off from its start
    (replica_command.REPLICA_ENV), or the child can crash in gRPC's fork
    handlers before it execs. The controller, which starts build processes
    while its own gRPC calls run, stays on asyncio."""
    if os.environ.get(LOOP_ENV, "uvloop") == "asyncio":
        return asyncio.run(main)
    import uvloop

    return uvloop.run(main)


def on_stop_signals(drain: Callable[[], None]) -> None:
    """Call `drain` on the first SIGTERM/SIGINT; exit at once on the second."""
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received > 1:
            logger.warning("second signal: exiting at once")
            os._exit(1)
        logger.info("received %s", signal.Signals(signum).name)
        drain()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


class HttpServer(uvicorn.Server):
    """uvicorn's Server, started and stopped by its caller (`start_http_server`).

    uvicorn's own main loop is not run, so this keeps what it did that still
    matters: the Date header, renewed at each second (RFC 9110 wants the time
    the response was made, not the time the server started).
    """

    _date_clock: asyncio.Task[None] | None = None

    def keep_date_current(self) -> None:
        self._date_clock = asyncio.create_task(self._renew_date(), name="http-date")

    async def _renew_date(self) -> None:
        while True:
            await asyncio.sleep(1.0 - time.time() % 1.0 + 0.001)  # just past the second
            await self.on_tick(0)  # counter 0: renews the default headers

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._date_clock is not None:
            self._date_clock.cancel()
        await super().shutdown(sockets)


async def start_http_server(app: Any, host: str, port: int, reuse_port: bool = False,
                            ssl: SSLContext | None = None, **options: Any) -> HttpServer:
    """A listening uvicorn server; OSError if the address cannot be bound.
    With `reuse_port` other processes may listen on the same address too
    (SO_REUSEPORT: the kernel spreads new connections over them); with `ssl`
    it serves TLS with that context (made by the caller: uvicorn's own takes
    file names, which a replica can no longer read).

    Stop it with `await server.shutdown()`.
    """
    from servefleet._private.edge.http_protocol import CoalescingHttpToolsProtocol

    options.setdefault("http", CoalescingHttpToolsProtocol)  # one send per response
    config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning",
                            access_log=False, **options)
    server = HttpServer(config)
    config.load()
    if ssl is not None:
        config.ssl = ssl
    server.lifespan = config.lifespan_class(config)
    sockets = [_shared_socket(host, port)] if reuse_port else None
    try:
        await server.startup(sockets)
    except SystemExit:  # uvicorn exits when it cannot bind
        raise OSError(f"cannot listen on {host}:{port}") from None
    await server.on_tick(0)  # sets the default headers
    if config.date_header:
        server.keep_date_current()
    return server


def _shared_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(sockaddr)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def can_bind(address: str) -> bool:
    """Whether a server could listen on HOST:PORT now (the port is free)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, ValueError):
        return True  # let the server say what is wrong with it
    for family, kind, proto, _, sockaddr in infos[:1]:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError:
                return False
    return True


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT binds only loopback (a name is resolved; an unknown
    name or the wildcard counts as not loopback)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def raise_open_file_limit(most: int = 1 << 20) -> int:
    """Raise this process's soft limit on open files to its hard limit (at
    most `most`), as Go programs do at start; the soft limit now. The soft
    limit is often 1,024 while the hard one is far higher (systemd's default
    is 1024:524288): it is left for programs that need more to raise."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as e:
            logger.warning("cannot raise the open-file limit to %d: %s", wanted, e)
    return most if soft == resource.RLIM_INFINITY else soft


NOTIFY_ENV = "NOTIFY_SOCKET"


def notify_ready(status: str) -> None:
    """Tell the supervisor that this process now serves.

    systemd's sd_notify protocol: a "READY=1" datagram to the Unix socket
    named by $NOTIFY_SOCKET ("@name" is an abstract socket). `servefleet up`
    starts its controller and proxy this way, so it knows that its own
    children hold their ports; a systemd unit can use `Type=notify`. The
    variable is removed, so processes started later (replicas) do not send
    a readiness of their own. Without the variable this does nothing.
    """
    address = os.environ.pop(NOTIFY_ENV, "")
    if not address:
        return
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(target)
            sock.sendall(f"READY=1\nSTATUS={status}".encode())
    except OSError as e:
        logger.warning("cannot notify %s that this process is ready: %s", address, e)
