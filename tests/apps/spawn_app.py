"""A deployment that starts subprocesses from its event loop while its own
gRPC calls are in flight, as a model calling a gRPC backend and a command-line
tool would (tests/test_event_loop.py)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from servefleet import deployment

SERVICE = "spawn.Ticks"


async def _ticks(request: bytes, context) -> object:
    while True:
        yield b"tick"
        await asyncio.sleep(0)


async def spawn_while_streaming(n: int) -> list[int]:
    """Start `n` children one by one while a gRPC stream runs flat out in
    this process; each child's exit code (-1000: it did not print)."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Stream": grpc.unary_stream_rpc_method_handler(_ticks)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    ticks: Any = channel.unary_stream(f"/{SERVICE}/Stream")(b"")  # type: ignore[arg-type]

    async def read() -> None:
        async for _ in ticks:
            pass

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.1)
    codes = []
    try:
        for _ in range(n):
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "print('ok')", stdout=asyncio.subprocess.PIPE,
                start_new_session=True)
            out, _ = await child.communicate()
            codes.append(child.returncode if out == b"ok\n" and child.returncode is not None
                         else -1000)
    finally:
        reader.cancel()
        await channel.close()
        await server.stop(0)
    return codes


@deployment
class Spawner:
    async def __call__(self, request) -> dict:
        codes = await spawn_while_streaming(int(request.query_params.get("n", "20")))
        return {"loop": type(asyncio.get_running_loop()).__module__, "codes": codes}


app = Spawner.bind()
