"""The HTTP edge: how much of a server one client may hold while it sends a
request. The proxy's edge (proxy/edge.py) and every HTTP port of a replica
(replica/edge.py) use it, each naming its limits as its users set them.

uvicorn's httptools protocol checks no size while a request's head arrives
(httptools keeps a header's bytes until the header ends: a client sent 32 MiB
of one header before the app could answer 431), sets no time limit on a head,
and takes every connection. `EdgeProtocol` (servefleet's protocol,
http_protocol.py, plus these checks), per connection:

1. counts a head's bytes as they arrive and refuses once the request target
   passes `max_url_bytes` (414) or the header lines pass `max_header_bytes`
   (431). A chunk that could pass a limit is parsed a slice at a time, so at
   most SLICE bytes past a limit are ever held. A complete head is measured
   exactly (each header's name, value and 4 bytes of ": " and CRLF), but
   only when its bytes could pass a limit: a small head costs one addition;
2. with a body limit (`HeadClock.body_limit`, which says per request, from
   its headers, how many body bytes it may send, or None for no limit),
   answers 413 before the app sees a request whose Content-Length passes it,
   and, for a chunked body that passes it later, 413 if no answer has begun
   (the app then sees the client leave), else closes the connection;
3. answers 408 and closes when a head has not all come `header_timeout_s`
   after its first byte (after the connection opened, for the first
   request); `HeadClock` looks at open heads a few times per timeout. An idle
   connection between requests is closed after uvicorn's keep-alive timeout
   (`keep_alive_timeout_s`);
4. past `max_connections` open connections (WebSockets included), answers a
   new connection 503 at once, before it sends anything, and closes it.

A refusal is an HTTP answer with `connection: close`. The connection is then
half-closed, and what the client still sends is read and dropped for up to
LINGER_S, so the client reads the answer, not a reset (nginx's lingering
close); it no longer counts against `max_connections`.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import httptools

from servefleet._private.edge.http_protocol import CoalescingHttpToolsProtocol
from servefleet._private.edge.limits import EdgeLimits

logger = logging.getLogger(__name__)

# A chunk that could pass a limit is parsed this much at a time.
SLICE = 16 * 1024
# Besides the target: the method, two spaces, the version and CRLF (generously).
REQUEST_LINE_BYTES = 32
# How long a refused connection is read (and dropped) so the answer is read.
LINGER_S = 5.0

Headers = Sequence[tuple[bytes, bytes]]


class HeadClock:
    """Times out heads that take too long, for every EdgeProtocol of one
    server: one task looks at the open ones a few times per timeout, so a
    request costs no timer of its own. It also holds what the protocols say
    in their refusals: `server` names the process ("proxy", "replica"),
    `setting` how a field of EdgeLimits (or max_request_body_bytes) is set
    there, and `busy` are header lines added to the 503 past the connection
    cap. `body_limit`: from a request's headers, the body bytes it may send
    (None: no limit); None: bodies are the app's business."""

    def __init__(self, limits: EdgeLimits, *, server: str, setting: Callable[[str], str],
                 busy: bytes = b"",
                 body_limit: Callable[[Headers], int | None] | None = None) -> None:
        self.limits = limits
        self.server = server
        self.setting = setting
        self.busy = busy
        self.body_limit = body_limit
        self.open: set[EdgeProtocol] = set()
        self._task: asyncio.Task[None] | None = None

    def protocol(self) -> Any:
        """What uvicorn's `http` option takes: makes an EdgeProtocol per connection."""
        return partial(EdgeProtocol, clock=self)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="head-clock")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        every = min(1.0, self.limits.header_timeout_s / 4)
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for protocol in list(self.open):
                try:
                    protocol.time_out_head(now)
                except Exception:  # a bug: the other connections are still timed
                    logger.exception("timing out a request head")


def _answer(status: int, text: str, default_headers: list[tuple[bytes, bytes]],
            extra: bytes = b"") -> bytes:
    body = text.encode()
    return b"".join([
        b"HTTP/1.1 %d %s\r\n" % (status, http.HTTPStatus(status).phrase.encode()),
        *(b"%s: %s\r\n" % header for header in default_headers),
        b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n" % len(body),
        extra, b"connection: close\r\n\r\n", body])


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; the refusal is on the protocol."""


class EdgeProtocol(CoalescingHttpToolsProtocol):
    """servefleet's HTTP protocol with the edge's limits (the module docstring)."""

    def __init__(self, *args: Any, clock: HeadClock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock = clock
        limits = self._limits = clock.limits
        # Heads up to this many bytes pass both limits unmeasured.
        self._fast = min(limits.max_url_bytes, limits.max_header_bytes)
        # Between a message's end (or the connection's start) and its head's end.
        self._in_head = True
        # The head's bytes so far; short of the truth only for a head that
        # began in a chunk with the end of the message before it (`_unknown`).
        self._head_bytes = 0
        # When the head (or the wait for the first one) began; None: not timed.
        self._head_since: float | None = None
        # This chunk starts a head: a message beginning in it is that head's.
        self._began = False
        # A head began mid-chunk, its first bytes uncounted: measure it exactly.
        self._unknown = False
        # What to answer when a parser callback stops the parse.
        self._refusal: tuple[int, str] | None = None
        # Refused: what arrives is dropped until the connection closes.
        self._dropping = False
        # The body bytes this request may send (None: no limit), and those it sent.
        self._body_max: int | None = None
        self._body_seen = 0
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self._limits.max_connections
        if cap and len(self.connections) > cap:
            clock = self._clock
            self._refuse(503, f"this {clock.server} has {cap} connections open, its limit "
                              f"({clock.setting('max_connections')}); try again later",
                         b"retry-after: 1\r\n" + clock.busy)
            return
        self._head_since = self.loop.time()
        self._clock.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._clock.open.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        self._unset_keepalive_if_required()
        if not self._in_head:
            self._began = False
        elif self._head_bytes + len(data) > self._fast:
            self._feed_in_slices(memoryview(data))
            return
        else:  # _count, inline: the path of every request
            self._began = not self._head_bytes
            if self._head_since is None:
                self._head_since = self.loop.time()
            self._head_bytes += len(data)
        self._feed(data)

    def _count(self, size: int) -> None:
        """Note `size` more bytes about to be parsed."""
        if self._in_head:
            self._began = not self._head_bytes
            if self._head_since is None:
                self._head_since = self.loop.time()
            self._head_bytes += size
        else:
            self._began = False

    def _feed_in_slices(self, data: memoryview) -> None:
        """Parse `data` a slice at a time while in a head, checking the limits
        after each, so a head past them is refused before more is held."""
        while data:
            piece = data[:SLICE] if self._in_head else data
            data = data[len(piece):]
            self._count(len(piece))
            if not self._feed(piece):
                return
            if self._in_head and self._head_bytes > self._fast:
                refusal = self._head_refusal(complete=False)
                if refusal is not None:
                    self._refuse(*refusal)
                    return

    def _feed(self, data: bytes | memoryview) -> bool:
        """uvicorn's `data_received` after its keep-alive bookkeeping, with the
        edge's refusals; False when parsing has ended (error, refusal, upgrade)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._dropping or self.transport.is_closing():
                pass  # refused by the callback itself
            elif self._refusal is not None:
                self._refuse(*self._refusal)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        return True

    def _head_refusal(self, complete: bool) -> tuple[int, str] | None:
        """414 or 431 with why, for the head so far; None when within the limits."""
        limits, setting = self._limits, self._clock.setting
        url = len(getattr(self, "url", b""))
        at_least = "" if complete else "at least "
        if url > limits.max_url_bytes:
            return 414, (f"the request target is {at_least}{url} bytes; the limit is "
                         f"{limits.max_url_bytes} ({setting('max_url_bytes')})")
        headers = (sum(len(k) + len(v) + 4 for k, v in self.headers) if complete
                   else self._head_bytes - url - REQUEST_LINE_BYTES)
        if headers > limits.max_header_bytes:
            return 431, (f"the request's headers are {at_least}{headers} bytes; the limit is "
                         f"{limits.max_header_bytes} ({setting('max_header_bytes')})")
        return None

    def _body_refusal(self, limit: int | None) -> tuple[int, str] | None:
        """413 with why when the declared Content-Length passes `limit`; else
        None, the body to be counted as it comes (a chunked one has no length)."""
        self._body_max, self._body_seen = limit, 0
        if limit is None:
            return None
        declared = next((v for k, v in self.headers if k == b"content-length"), b"")
        # llhttp took only digits, and one length
        if declared and int(declared) > limit:
            return 413, self._too_large(f"is {int(declared)} bytes", limit)
        return None

    def _too_large(self, size: str, limit: int) -> str:
        return (f"the request body {size}; the limit is {limit} "
                f"({self._clock.setting('max_request_body_bytes')})")

    # Parser callbacks (httptools), around uvicorn's own.

    def on_message_begin(self) -> None:
        if self._began:
            self._began = False
        else:  # a second message in one chunk: its first bytes were not counted
            self._unknown = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_since = None
        if self._unknown or self._head_bytes > self._fast:
            self._unknown = False
            self._refusal = self._head_refusal(complete=True)
        body_limit = self._clock.body_limit
        if self._refusal is None and body_limit is not None:
            self._refusal = self._body_refusal(body_limit(self.headers))
        if self._refusal is not None:
            raise _Refused  # the parser stops; _feed answers
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._body_max is not None:
            self._body_seen += len(body)
            if self._body_seen > self._body_max:
                self._refuse_body(self._body_max)
                raise _Refused  # the parser stops; the refusal is made
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes, self._began = True, 0, False
        self._body_max = None
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._clock.open.discard(self)  # a WebSocket now: no more heads
        super().handle_websocket_upgrade()

    def time_out_head(self, now: float) -> None:
        """Called by the HeadClock: 408 (or, before any byte, a bare close)
        when the head began longer ago than the timeout."""
        since = self._head_since
        if since is None or now - since < self._limits.header_timeout_s or self._dropping \
                or self.transport.is_closing():
            return
        self._head_since = None
        if not self._head_bytes:
            self._clock.open.discard(self)
            self.transport.close()  # nothing said: nothing to answer
            return
        self._refuse(408, f"the request's head did not all come within "
                          f"{self._limits.header_timeout_s:g}s "
                          f"({self._clock.setting('header_timeout_s')})")

    def _refuse_body(self, limit: int) -> None:
        """The body of the request being served passed its limit: the app's
        `receive` now says the client left (what it sends is dropped), and
        the client gets 413 if no answer has begun, else a closed connection."""
        cycle = self.cycle
        cycle.disconnected = True
        cycle.message_event.set()
        if cycle.response_started:
            self._dropping = True
            self.transport.close()
            return
        self._refuse(413, self._too_large(f"passed {limit} bytes", limit))

    def _refuse(self, status: int, text: str, extra: bytes = b"") -> None:
        """Answer `status` and close, reading and dropping what still comes."""
        if self.transport.is_closing():
            return
        self._in_head = False
        self._head_since = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            # A pipelined head while an answer is being written: end the
            # connection after that answer, reading nothing more meanwhile.
            cycle.keep_alive = False
            self.flow.pause_reading()
            return
        self._dropping = True
        self._clock.open.discard(self)
        self.connections.discard(self)  # no longer counts against the cap
        logger.debug("%s %d: %s", self.client, status, text)
        self.transport.write(_answer(status, text, self.server_state.default_headers, extra))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_S, self.transport.close)
