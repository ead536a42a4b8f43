"""How many server-streaming calls a bare grpc.aio server takes (docs/watch-streams.md).

    .venv/bin/python bench/stream_cap.py [--streams 4000] [--client-processes 1]

A grpc.aio server in a process of its own serves one method that yields one
message and then waits; clients open `--streams` calls over channels of 100
calls, each channel on its own connection, and count the calls whose first
message arrived within `--wait` seconds. Twice: with gRPC's default limit on
calls waiting for the application (3,000; the rest of a burst is cancelled),
and with the controller's (controller/server.py MAX_PENDING_CALLS).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
from typing import Any

import grpc
from figures import Figure, emit

from servefleet._private.testing import free_port
from servefleet.controller.server import MAX_PENDING_CALLS

METHOD = "/bench.Cap/Stream"
PER_CHANNEL = 100


def _serve(port: int, pending: int | None) -> None:
    async def main() -> None:
        async def stream(request: bytes, context: Any) -> Any:
            yield b"x"
            await asyncio.sleep(3600)

        server = grpc.aio.server(options=[] if pending is None else [
            ("grpc.server.max_pending_requests", pending),
            ("grpc.server.max_pending_requests_hard_limit", pending)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "bench.Cap", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()
    asyncio.run(main())


def _client(port: int, count: int, wait_s: float, results: Any) -> None:
    async def main() -> None:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                              options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range(max(1, count // PER_CHANNEL))]
        opened = 0

        async def one(i: int) -> None:
            nonlocal opened
            call: Any = channels[i % len(channels)].unary_stream(METHOD)(b"")  # type: ignore[arg-type]
            async for _ in call:
                opened += 1
                await asyncio.sleep(3600)

        tasks = [asyncio.create_task(one(i)) for i in range(count)]
        await asyncio.sleep(wait_s)
        results.put(opened)
        await asyncio.sleep(0.5)  # let the queue's feeder thread send it
        del tasks
        os._exit(0)  # thousands of open calls: no orderly teardown needed
    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=4000)
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--wait", type=float, default=15.0, help="seconds to wait for them")
    args = parser.parse_args()
    figures = {}
    for label, pending in (("gRPC's default limit", None),
                           ("the controller's limit", MAX_PENDING_CALLS)):
        opened, asked = count_opened(args.streams, args.client_processes, args.wait, pending)
        print(f"bare grpc.aio server, {label}: {opened:,} of {asked:,} streams opened "
              f"within {args.wait:g} s ({args.client_processes} client processes)")
        figures[f"{label}: streams opened of {asked}"] = Figure(
            [float(opened)], "streams", lower_is_better=False)
    emit(figures)


def count_opened(streams: int, processes: int, wait: float,
                 pending: int | None) -> tuple[int, int]:
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    server = ctx.Process(target=_serve, args=(port, pending))
    server.start()
    results = ctx.Queue()
    share = streams // processes
    clients = [ctx.Process(target=_client, args=(port, share, wait, results))
               for _ in range(processes)]
    try:
        time.sleep(1.5)
        for client in clients:
            client.start()
        opened = sum(results.get(timeout=wait + 60) for _ in clients)
    finally:
        for proc in [*clients, server]:
            proc.kill()
            proc.join()
    return opened, share * len(clients)

if __name__ == "__main__":
    main()
