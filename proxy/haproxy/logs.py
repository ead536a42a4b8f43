"""HAProxy's request log, read back: failed answers for the dashboard, and
the access log with `--access-log`.

HAProxy sends one datagram per logged request to a Unix socket the proxy
process reads (LOG_FORMAT, raw). Without `--access-log` it logs only what
went wrong (`option dontlog-normal`: 5xx answers, timeouts, retries); with
it, every request. A failed answer of a deployment HAProxy served goes to
the recent errors the load reports carry, with its request id, as the
Python proxy's own failures do (those of the Python path are counted
there already and skipped here).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from servefleet._private.dataplane.recent_errors import RecentErrors

from .layout import PYTHON_BACKEND

access = logging.getLogger("servefleet.proxy.access")
# status, backend, total ms, method, path, request id (last: it may hold spaces)
LOG_FORMAT = "%ST %b %Tt %HM %{+Q}HP %[var(txn.rid)]"


class EngineLog(asyncio.DatagramProtocol):
    def __init__(self, errors: RecentErrors,
                 deployment_of: Callable[[str], tuple[str, str, str] | None],
                 access_log: bool = False) -> None:
        self.errors = errors
        # backend -> (application, deployment, route prefix), or None
        self._deployment_of = deployment_of
        self.access_log = access_log
        self._transport: asyncio.DatagramTransport | None = None

    async def listen(self, path: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # uvloop binds no Unix path
        sock.bind(path)
        sock.setblocking(False)
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: self, sock=sock)
        self._transport = transport

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.line(data.decode("latin-1").rstrip("\n"))

    def line(self, text: str) -> None:
        """One logged request (LOG_FORMAT)."""
        parts = text.split(" ", 5)
        if len(parts) < 5 or not parts[0].lstrip("-").isdigit():
            return
        status, backend, total_ms, method, path = int(parts[0]), *parts[1:5]
        request_id = parts[5] if len(parts) > 5 else ""
        if backend == PYTHON_BACKEND:
            return  # the Python path logs and counts its own
        if self.access_log:
            access.info("%s %s %d %sms (haproxy) request_id=%s", method, path.strip('"'),
                        status, total_ms, request_id)
        where = self._deployment_of(backend)
        if status >= 500 and where is not None:
            application, deployment, route = where
            self.errors.add(application, deployment, route, status, "", request_id, "")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
