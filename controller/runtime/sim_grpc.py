"""A unary gRPC server on HTTP/2 (h2) that tells callers apart by the address they dialled.

The sim host (sim_host.py) answers the ReplicaService of thousands of
simulated replicas on one port. Each replica gets a loopback address of its
own (127.64.0.0/10; Linux delivers all of 127/8 to `lo`), so its
control_address is `127.a.b.c:PORT` as a real replica's is `127.0.0.1:PORT`,
and the controller holds one channel (one TCP connection) per replica, as it
does for real ones. grpc.aio's server does not say which local address a
call came in on; asyncio's transport does, hence this small server of our
own. It takes what the controller sends: unary calls, no compression.

The socket binds every address but is bound to the `lo` device
(SO_BINDTODEVICE), so only loopback traffic reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded, StreamReset
from h2.exceptions import ProtocolError

logger = logging.getLogger(__name__)


class CallError(Exception):
    """A gRPC status other than OK, with its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# (local address, method path, request bytes) -> response bytes; raises CallError.
Handler = Callable[[str, str, bytes], Awaitable[bytes]]

# gRPC status codes used here (grpc.StatusCode values).
UNKNOWN, FAILED_PRECONDITION, UNIMPLEMENTED, UNAVAILABLE = 2, 9, 12, 14


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, connections: set[_Connection]) -> None:
        self._handler = handler
        self._connections = connections
        self._h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self._transport: asyncio.Transport | None = None
        self._local = ""
        self._paths: dict[int, str] = {}
        self._bodies: dict[int, bytearray] = {}
        self._calls: dict[int, asyncio.Task[None]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._local = transport.get_extra_info("sockname")[0]
        self._connections.add(self)
        self._h2.initiate_connection()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        for task in self._calls.values():
            task.cancel()
        self._calls.clear()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except ProtocolError:
            self._flush()
            if self._transport is not None:
                self._transport.close()
            return
        for event in events:
            if isinstance(event, RequestReceived):
                path = next((v for k, v in event.headers or () if k == b":path"), b"")
                self._paths[event.stream_id] = path.decode(errors="replace")
                self._bodies[event.stream_id] = bytearray()
            elif isinstance(event, DataReceived):
                self._bodies.setdefault(event.stream_id, bytearray()).extend(event.data)
                self._h2.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
            elif isinstance(event, StreamEnded):
                stream = event.stream_id
                body = bytes(self._bodies.pop(stream, b""))
                self._calls[stream] = asyncio.create_task(
                    self._call(stream, self._paths.pop(stream, ""), body[5:]))
            elif isinstance(event, StreamReset):
                # The caller gave up (its deadline): a hung call ends here.
                task = self._calls.pop(event.stream_id, None)
                if task is not None:
                    task.cancel()
            elif isinstance(event, ConnectionTerminated):
                if self._transport is not None:
                    self._transport.close()
        self._flush()

    async def _call(self, stream: int, path: str, request: bytes) -> None:
        try:
            reply = await self._handler(self._local, path, request)
        except CallError as e:
            self._answer(stream, e.code, e.message, None)
        except asyncio.CancelledError:
            return
        except Exception as e:  # a bug of the sim: the caller sees it as UNKNOWN
            logger.exception("sim call %s failed", path)
            self._answer(stream, UNKNOWN, f"{type(e).__name__}: {e}", None)
        else:
            self._answer(stream, 0, "", reply)
        finally:
            self._calls.pop(stream, None)

    def _answer(self, stream: int, code: int, message: str, reply: bytes | None) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        head = [(":status", "200"), ("content-type", "application/grpc")]
        trailers = [("grpc-status", str(code))]
        if message:
            trailers.append(("grpc-message", quote(message, safe=" ")))
        try:
            if reply is None:  # trailers only
                self._h2.send_headers(stream, head + trailers, end_stream=True)
            else:
                self._h2.send_headers(stream, head)
                self._h2.send_data(stream, struct.pack(">BI", 0, len(reply)) + reply)
                self._h2.send_headers(stream, trailers, end_stream=True)
        except ProtocolError:
            return  # the stream was reset meanwhile
        self._flush()


class LoopbackGrpcServer:
    """Serves `handler` on `port` (0: a free one) of every loopback address."""

    def __init__(self, handler: Handler, port: int = 0) -> None:
        self._handler = handler
        self._wanted_port = port
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[_Connection] = set()
        self.port = 0

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
        except OSError as e:
            sock.close()
            raise OSError(f"the sim host binds its port to the loopback device and "
                          f"could not ({e}); it needs Linux 5.7 or later") from None
        sock.bind(("0.0.0.0", self._wanted_port))
        sock.listen(4096)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self._handler, self.connections), sock=sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                if connection._transport is not None:
                    connection._transport.close()
            await self._server.wait_closed()
            self._server = None
