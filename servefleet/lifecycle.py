"""Process plumbing shared by the controller, proxy and replica.

`on_stop_signals`: the first SIGTERM/SIGINT asks the process to drain, a
second exits at once (as uvicorn does). `start_http_server`: uvicorn started
and stopped by its caller (`Server.serve()` would install uvicorn's own
signal handlers, and our processes drain on signals themselves).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)


def on_stop_signals(drain: Callable[[], None]) -> None:
    """Call `drain` on the first SIGTERM/SIGINT; exit at once on the second."""
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received > 1:
            logger.warning("second signal: exiting at once")
            os._exit(1)
        logger.info("received %s", signal.Signals(signum).name)
        drain()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def start_http_server(app: Any, host: str, port: int, **options: Any) -> uvicorn.Server:
    """A listening uvicorn server; OSError if the address cannot be bound.

    Stop it with `await server.shutdown()`. Its once-a-second housekeeping is
    not run: callers set date_header=False or accept a date fixed at start.
    """
    config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning",
                            access_log=False, **options)
    server = uvicorn.Server(config)
    config.load()
    server.lifespan = config.lifespan_class(config)
    try:
        await server.startup()
    except SystemExit:  # uvicorn exits when it cannot bind
        raise OSError(f"cannot listen on {host}:{port}") from None
    await server.on_tick(0)  # sets the default headers
    return server
