"""Which event loop a handle call runs on.

- In a replica's async code: the replica's loop, the running one.
- In a replica's sync code (a plain `def` method, run in a thread): the
  replica's loop (`use_loop`, set by replica/main.py at start).
- Anywhere else (a plain script, a notebook, a driver's own asyncio code): a
  private loop in a daemon thread, started on first use, as Ray's driver
  runs its router in a loop of its own. The caller blocks on `.result()`,
  iterates with `for`, or awaits from its own loop. A driver's loops come
  and go (each `asyncio.run` makes one): routers, with their connections
  and Watch streams, stay on the private loop and are shared by all of them.
"""

from __future__ import annotations

import asyncio
import threading

_replica_loop: asyncio.AbstractEventLoop | None = None
_private_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def use_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The loop that sync code's handle calls run on (the replica's)."""
    global _replica_loop
    _replica_loop = loop


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def loop_of_caller() -> asyncio.AbstractEventLoop | None:
    """The running loop when a call may run on it (a replica's, or the private
    loop itself: a handle call made inside another call); None when the call
    goes to `loop_for_sync_code()` (a driver's loop, or none)."""
    loop = running_loop()
    if loop is not None and (loop is _replica_loop or loop is _private_loop):
        return loop
    return None


def loop_for_sync_code() -> asyncio.AbstractEventLoop:
    """The replica's loop when there is one, else the private loop."""
    if _replica_loop is not None and not _replica_loop.is_closed():
        return _replica_loop
    return private_loop()


def private_loop() -> asyncio.AbstractEventLoop:
    """The private loop, started on first use. Its thread is a daemon: it
    never keeps a script from exiting."""
    global _private_loop
    with _lock:
        if _private_loop is None or _private_loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="servefleet-handles", daemon=True).start()
            ready.wait()
            _private_loop = loop
        return _private_loop
