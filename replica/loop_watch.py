"""Whether the replica's event loop is turning, and what holds it when it is not.

User `async def` code runs on the replica's loop (user_calls.py). A handler
that does blocking work there (a synchronous model call, `time.sleep`,
parsing a large body) holds every other request of the replica, its streams
and its Watch stream until it returns. `LoopWatch` makes that visible:

1. the loop beats every BEAT_S (a timer on it); a beat that comes
   BLOCK_WARN_S or more late means something held the loop that long;
2. while a beat is overdue, a sampler on another thread (the control loop's,
   control_loop.py) looks at the loop's thread once and notes what holds
   it: the innermost coroutine of user code on its stack (the handler) and
   the innermost line of user code;
3. the late beat logs a warning naming that handler, how long it held the
   loop and the fix (a plain `def`, which runs in a thread, or the blocking
   call moved off the loop), at most once per REPEAT_S for each handler.

`blocked_for()` is how long the loop has been held right now, for the
health check (control.py): it is answered on the control loop, so a held
loop no longer fails it, unless held past the check's own timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType

logger = logging.getLogger("servefleet.replica")

BEAT_S = 0.25
# How late a beat must be to be worth a warning: below this, a synchronous
# model call inside `async def` (Ray's own @serve.batch examples make them)
# costs latency but is how many people write handlers.
BLOCK_WARN_S = 1.0
# How long a beat must be overdue before the sampler looks (a sample costs
# one walk of the loop thread's stack).
SAMPLE_AFTER_S = 0.2
SAMPLE_S = 0.1
REPEAT_S = 60.0

_CORO_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _not_user_roots() -> tuple[str, ...]:
    """Where code that is not the user's lives: servefleet (with replica/,
    proxy/ and controller/ beside it), the standard library, site-packages."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import servefleet

    roots = {os.path.dirname(os.path.abspath(servefleet.__file__)) + os.sep,
             os.path.join(here, "replica") + os.sep}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            roots.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(roots))


class LoopWatch:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id = 0
        self._beat_at = clock()
        # (the beat it was taken after, what held the loop), from the sampler.
        self._sample: tuple[float, str] | None = None
        # handler -> (when last warned, holds since not warned about)
        self._warned: dict[str, tuple[float, int]] = {}
        self._roots = _not_user_roots()
        self._user_files: dict[str, bool] = {}

    # -- 1. the beat, on the watched loop -----------------------------------------

    def start(self) -> None:
        """Watch the running loop (call from inside it)."""
        self._loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self._beat_at = self._clock()
        self._loop.call_later(BEAT_S, self._beat)

    def _beat(self) -> None:
        now, before, sample = self._clock(), self._beat_at, self._sample
        self._beat_at = now
        held = now - before - BEAT_S
        if held >= BLOCK_WARN_S:
            self._warn(held, sample[1] if sample and sample[0] == before else "", now)
        assert self._loop is not None
        self._loop.call_later(BEAT_S, self._beat)

    def excuse(self) -> None:
        """Forget the hold under way (call on the loop, before it turns again):
        one that is expected, such as the user's constructor, is not reported."""
        self._beat_at = self._clock()

    def blocked_for(self) -> float:
        """How long the loop has been held now (0 while it turns)."""
        return max(0.0, self._clock() - self._beat_at - BEAT_S)

    # -- 2. the sampler, on another thread -----------------------------------------

    def sample(self) -> None:
        """Note what holds the loop, once per overdue beat (call every SAMPLE_S
        from another thread)."""
        beat_at = self._beat_at
        if self._clock() - beat_at - BEAT_S < SAMPLE_AFTER_S or (
                self._sample is not None and self._sample[0] == beat_at):
            return
        frame = sys._current_frames().get(self._thread_id)
        self._sample = (beat_at, self.describe(frame) if frame is not None else "")

    def holder(self) -> str:
        """What holds the loop now, if the sampler saw it ("" if not)."""
        sample = self._sample
        return sample[1] if sample and sample[0] == self._beat_at and self.blocked_for() else ""

    def describe(self, frame: FrameType) -> str:
        """The handler on `frame`'s stack (the innermost coroutine of user code)
        and the innermost line of user code, e.g. "Model.__call__ (app.py:14)"
        or "Model.__call__ (app.py:14, in predict at model.py:30)"."""
        handler = inner = None
        f: FrameType | None = frame
        while f is not None and handler is None:
            if self._is_user(f.f_code):
                inner = inner or f
                if f.f_code.co_flags & _CORO_FLAGS:
                    handler = f
            f = f.f_back
        if handler is None:
            return "" if inner is None else f"{inner.f_code.co_qualname} ({_where(inner)})"
        text = f"{handler.f_code.co_qualname} ({_where(handler)}"
        if inner is not None and inner is not handler:
            text += f", in {inner.f_code.co_qualname} at {_where(inner)}"
        return text + ")"

    def _is_user(self, code: CodeType) -> bool:
        known = self._user_files.get(code.co_filename)
        if known is None:
            path = os.path.abspath(code.co_filename)
            known = not code.co_filename.startswith("<") and not path.startswith(self._roots)
            self._user_files[code.co_filename] = known
        return known

    # -- 3. the warning ---------------------------------------------------------------

    def _warn(self, held: float, holder: str, now: float) -> None:
        key = holder or "?"
        last, since = self._warned.get(key, (-REPEAT_S, 0))
        if now - last < REPEAT_S:
            self._warned[key] = (last, since + 1)
            return
        self._warned[key] = (now, 0)
        more = f" ({since} more times since the last warning)" if since else ""
        if holder:
            logger.warning(
                "the event loop was blocked for %.1f s by %s%s: an async def handler that "
                "does blocking work holds every other request of this replica (and its "
                "health checks wait for it). Make it a plain def (servefleet runs those in "
                "threads), or run the blocking call off the loop: await "
                "asyncio.to_thread(fn, ...) or await loop.run_in_executor(None, fn, ...)",
                held, holder, more)
        else:
            logger.warning(
                "the event loop was blocked for %.1f s%s by one call that held Python's "
                "interpreter lock throughout, so no stack could be sampled (decoding or "
                "encoding a large value, or a C extension that does not release the lock)",
                held, more)


def _where(frame: FrameType) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
