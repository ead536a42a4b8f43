"""Request bodies on their way to a replica: whole when small, streamed when large.

A body up to BUFFER_BYTES is read whole before a replica is chosen, so a
replica that never received the request can be replaced by another (and a
shadow deployment gets its copy). A larger body is a `StreamedBody`: its first
BUFFER_BYTES are held, the rest is pulled from the client only as the replica
takes it, so a 1 GB upload costs the proxy a buffer, not a gigabyte. It can
still go to another replica while nothing past the held part was pulled
(`replayable`): a refused connection is retried; a replica that fails after
that is a 502, as for any request it may have acted on.

`limit` (http_options.max_request_body_bytes) bounds both kinds: a declared
Content-Length over it is refused before anything is read, a chunked body
when its running count passes it (`BodyTooLarge`; the proxy answers 413).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

BUFFER_BYTES = 1 << 20

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes "
                         "(http_options.max_request_body_bytes)")
        self.limit = limit


class ClientGone(Exception):
    """The client disconnected while its body was being read."""


class StreamedBody:
    def __init__(self, held: bytes, receive: Receive, limit: int,
                 length: int | None) -> None:
        self.held = held
        self.length = length  # the client's Content-Length, if it sent one
        self._receive = receive
        self._limit = limit
        self.pulled = False  # read past `held`: the body can no longer be sent again
        self._done = False
        self.finished = asyncio.Event()  # every byte was read from the client

    @property
    def replayable(self) -> bool:
        return not self.pulled

    async def chunks(self) -> AsyncIterator[bytes]:
        """The held part, then the rest as the client sends it."""
        if not self.replayable:
            raise RuntimeError("a streamed body can be sent only once past its held part")
        yield self.held
        count = len(self.held)
        while not self._done:
            message = await self._receive()
            self.pulled = True
            if message["type"] == "http.disconnect":
                raise ClientGone("the client went away while sending its body")
            chunk = message.get("body", b"")
            count += len(chunk)
            if count > self._limit:
                raise BodyTooLarge(self._limit)
            self._done = not message.get("more_body")
            if self._done:
                self.finished.set()
            if chunk:
                yield chunk


def replayable(body: bytes | StreamedBody) -> bool:
    return isinstance(body, bytes) or body.replayable


async def read_body(receive: Receive, limit: int,
                    length: int | None) -> bytes | StreamedBody:
    """The whole body when it is at most BUFFER_BYTES, else a StreamedBody.

    Raises BodyTooLarge (before reading, when `length` says so) and ClientGone.
    """
    if length is not None and length > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone("the client went away while sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
        if size > BUFFER_BYTES:
            return StreamedBody(b"".join(chunks), receive, limit, length)
