"""An ASGI deployment that streams a line every 50 ms for 20 s, or until its
client is gone (tests/test_cert_revocation.py: a stream that a revocation ends)."""

from __future__ import annotations

import asyncio


async def ticks(scope, receive, send) -> None:
    await receive()  # the request
    gone = asyncio.ensure_future(receive())  # the next message: http.disconnect
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    for n in range(400):
        if gone.done():
            return
        await send({"type": "http.response.body", "body": b"tick %d\n" % n, "more_body": True})
        await asyncio.sleep(0.05)
    gone.cancel()
    await send({"type": "http.response.body", "body": b""})
