"""Request bodies: whole when small, streamed past BUFFER_BYTES, bounded by the limit (pure)."""

from __future__ import annotations

import pytest

from servefleet._private.dataplane.body import (
    BUFFER_BYTES,
    BodyTooLarge,
    ClientGone,
    StreamedBody,
    read_body,
    replayable,
)


def client(*chunks: bytes, disconnect: bool = False):
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                for i, c in enumerate(chunks)]
    if disconnect:
        messages[-1]["more_body"] = True
        messages.append({"type": "http.disconnect"})
    it = iter(messages)

    async def receive():
        return next(it)

    return receive


async def collect(body: StreamedBody) -> bytes:
    return b"".join([c async for c in body.chunks()])


async def test_small_bodies_are_read_whole() -> None:
    body = await read_body(client(b"ab", b"cd"), limit=100, length=None)
    assert body == b"abcd" and replayable(body)


async def test_large_bodies_stream_and_can_be_resent_until_pulled() -> None:
    big = b"x" * (BUFFER_BYTES + 1)
    body = await read_body(client(big, b"tail", b"end"), limit=10 * BUFFER_BYTES, length=None)
    assert isinstance(body, StreamedBody) and body.held == big
    first = body.chunks()
    assert await first.__anext__() == big  # only the held part so far
    assert body.replayable
    assert await collect(body) == big + b"tailend"
    assert not body.replayable
    with pytest.raises(RuntimeError):
        await collect(body)


async def test_the_limit_is_enforced_before_reading_and_while_streaming() -> None:
    with pytest.raises(BodyTooLarge, match="max_request_body_bytes"):
        await read_body(client(b""), limit=10, length=11)
    with pytest.raises(BodyTooLarge):
        await read_body(client(b"123456", b"789012"), limit=10, length=None)
    body = await read_body(client(b"x" * (BUFFER_BYTES + 1), b"y" * 10),
                           limit=BUFFER_BYTES + 5, length=None)
    assert isinstance(body, StreamedBody)
    with pytest.raises(BodyTooLarge):
        await collect(body)


async def test_a_client_that_leaves_mid_body_is_client_gone() -> None:
    with pytest.raises(ClientGone):
        await read_body(client(b"ab", disconnect=True), limit=100, length=None)
    body = await read_body(client(b"x" * (BUFFER_BYTES + 1), disconnect=True),
                           limit=10 * BUFFER_BYTES, length=None)
    assert isinstance(body, StreamedBody)
    with pytest.raises(ClientGone):
        await collect(body)
