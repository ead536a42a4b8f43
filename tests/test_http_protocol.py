"""servefleet/_private/edge/http_protocol.py: writes in one loop pass leave as one send,
in order, and closing sends what is buffered first."""

from __future__ import annotations

import asyncio

from servefleet._private.edge.http_protocol import CoalescingTransport


class RecordingTransport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.sent.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_writes_in_one_pass_go_out_as_one_send_in_order() -> None:
    real = RecordingTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"")
    transport.write(bytearray(b"body"))
    assert real.sent == []  # not yet: at the end of this pass
    await asyncio.sleep(0)
    assert real.sent == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert real.sent[-1] == b"next"
    assert transport.get_extra_info("peername") == "info:peername"  # the rest is the real one's


async def test_close_sends_what_is_buffered_first() -> None:
    real = RecordingTransport()
    transport = CoalescingTransport(real, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"last words")
    transport.close()
    assert real.sent == [b"last words"] and real.closed
    await asyncio.sleep(0)  # the scheduled flush finds nothing left to send
    assert real.sent == [b"last words"]
