"""Stop signals while the user's constructor runs.

The constructor runs on the replica's event loop (loader.build_on_loop), as
Ray runs it, and holds that loop until it returns; the loop's own SIGTERM
and SIGINT handlers (lifecycle.on_stop_signals) cannot run meanwhile. A
replica asked to stop then has nothing to drain, so the signal ends the
process at once (exit code 0) instead of waiting for the runtime's forced
stop after its grace period.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("servefleet.replica")


@contextlib.contextmanager
def stop_signals_exit() -> Iterator[None]:
    """SIGTERM and SIGINT exit the process at once while the constructor
    runs (in the main thread, where Python runs signal handlers between the
    constructor's bytecodes); the loop's own handlers are back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum: int, frame: Any) -> None:
        logger.info("%s while loading: exiting", signal.Signals(signum).name)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    before = {signum: signal.signal(signum, exit_now)
              for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
