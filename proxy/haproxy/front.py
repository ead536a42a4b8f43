"""A proxy process with HAProxy in front (`servefleet proxy --engine haproxy`).

HAProxy serves the proxy's HTTP port. The Python proxy app runs behind it
on a loopback port of its own and serves what layout.py sends it (the
admin paths, 404s, token routes, multiplexed models, deployments scaled to
zero, ...), told the client's address and scheme by HAProxy
(`BehindEngine`), so it answers exactly as it would at the edge. Everything
else of the process (the Watch stream, load reports, the gRPC ingress) is
the Python proxy's as always: main.py runs both engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import replace

from starlette.types import ASGIApp, Receive, Scope, Send

from servefleet._private.dataplane.recent_errors import RecentErrors
from servefleet.v1 import watch_pb2

from ..limits import EdgeLimits
from ..state import ProxyState
from . import DEFAULT_BUFFER_BYTES
from .config import CLIENT_HEADER, HOP_BY_HOP_LUA, SCHEME_HEADER, EngineSettings
from .engine import HaproxyEngine
from .logs import EngineLog
from .process import HaproxyProcess


def dechunked(body: bytes) -> bytes:
    """A chunked HTTP/1.1 body's bytes (HAProxy's exporter streams its answer)."""
    out, at = bytearray(), 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            return bytes(out)
        size = int(body[at:end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        at = end + 2 + size + 2


class BehindEngine:
    """The Python proxy app behind HAProxy: its client is the one HAProxy names
    (x-servefleet-client; HAProxy drops any a client sends), not HAProxy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scheme = None
            kept = []
            for name, value in scope["headers"]:
                if name == CLIENT_HEADER:
                    client = value.decode("latin-1")
                elif name == SCHEME_HEADER:
                    scheme = value.decode("latin-1")
                else:
                    kept.append((name, value))
            if client is not None:
                scope = {**scope, "headers": kept, "client": (client, 0)}
                if scheme == "https":
                    scope["scheme"] = "https" if scope["type"] == "http" else "wss"
        await self.app(scope, receive, send)


class HaproxyFront:
    """HAProxy in front of this process's app: its files (configuration, Lua,
    sockets, certificate) in one private directory, its engine loop, its
    request log and exporter."""

    def __init__(self, state: ProxyState, listen: str, limits: EdgeLimits,
                 timeout_s: Callable[[], float], *, trusted: str, drain_timeout_s: float,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 websocket_idle_timeout_s: float = 0.0, threads: int = 0,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES,
                 errors: RecentErrors | None = None, access_log: bool = False) -> None:
        self.process = HaproxyProcess()
        self._log_socket = os.path.join(self.process.directory, "log.sock")
        self.log = EngineLog(RecentErrors() if errors is None else errors, self._deployment_of,
                            access_log)
        self._stats_socket = os.path.join(self.process.directory, "stats.sock")
        lua = os.path.join(self.process.directory, "servefleet.lua")
        with open(lua, "w") as f:
            f.write(HOP_BY_HOP_LUA)
        self._settings = EngineSettings(
            listen=listen, python="", stats=f"unix@{self._stats_socket}", limits=limits,
            trusted=trusted, threads=threads,
            websocket_idle_timeout_s=websocket_idle_timeout_s, lua=lua,
            log=self._log_socket, access_log=access_log, buffer_bytes=buffer_bytes,
            tls_pem=self._pem(tls_cert, tls_key) if tls_cert and tls_key else None)
        self._timeout_s = timeout_s
        self._drain_timeout_s = drain_timeout_s
        self.state = state
        self.engine: HaproxyEngine | None = None
        self._task: asyncio.Task[None] | None = None

    def _pem(self, cert: str, key: str) -> str:
        """HAProxy takes the chain and its key in one file: a private copy."""
        path = os.path.join(self.process.directory, "tls.pem")
        with open(cert) as c, open(key) as k:
            text = c.read().rstrip("\n") + "\n" + k.read()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    async def start(self, python: str) -> None:
        """Start HAProxy in front of the Python app listening at `python`;
        HaproxyError when it cannot start."""
        settings = replace(self._settings, python=python)
        await self.log.listen(self._log_socket)
        self.engine = HaproxyEngine(self.state, settings, self._timeout_s, self.process)
        await self.engine.start()
        self._task = asyncio.create_task(self.engine.run())

    def _deployment_of(self, backend: str) -> tuple[str, str, str] | None:
        return self.engine.deployment_of(backend) if self.engine is not None else None

    def apply(self, snapshot: watch_pb2.Snapshot) -> None:
        """The Watch stream's callback: the proxy's state, then HAProxy's."""
        self.state.apply(snapshot)
        if self.engine is not None:
            self.engine.changed()

    async def metrics(self) -> bytes:
        """HAProxy's own Prometheus metrics (its exporter), or nothing."""
        # RuntimeError: uvloop's, writing to a connection HAProxy closed at once.
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self._stats_socket), 2)
            try:
                writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
                answer = await asyncio.wait_for(reader.read(), 5)
            finally:
                writer.close()
            head, _, body = answer.partition(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0] + b" ":
                return dechunked(body) if b"chunked" in head.lower() else body
        return b""

    async def stop(self) -> None:
        """Stop HAProxy: it stops listening and finishes what it holds."""
        if self._task is not None:
            self._task.cancel()
        await self.process.stop(self._drain_timeout_s)
        self.log.close()
