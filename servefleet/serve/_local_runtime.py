"""One deployment of a local-testing-mode application, in this process.

Each `LocalReplica` owns an event loop in a thread of its own, as a replica
owns its process's loop: its constructor, async methods, `@serve.batch`
queues and multiplexed models live there, and one deployment blocking its
loop does not stall another (a sync method calling `.result()` on a handle
to the next deployment waits for that deployment's loop, not its own). Sync
methods run in the replica's thread pool, as in a servefleet replica.

Every call sets, for the user's code, the context a replica would:
`serve.get_replica_context()` (context.LOCAL_REPLICA) and
`serve.get_multiplexed_model_id()` (multiplex.MODEL_ID). Arguments are
handled as a real call handles them: a DeploymentResponse among them is
awaited and replaced by its result; the rest are pickled and unpickled
(cloudpickle), so what could not travel to a replica fails here too.
Method names follow servefleet's replicas: `__call__` and public methods;
a function deployment has only `__call__`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
import uuid
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from servefleet._private.batching.multiplex import MODEL_ID
from servefleet._private.handles.responses import DeploymentResponseGenerator
from servefleet._private.ray_reconfigure import reconfigure_arguments

from ._context import LOCAL_REPLICA, DeploymentID, ReplicaContext, ReplicaID
from ._local_handle import END, LocalDeploymentResponse
from .exceptions import RayServeException
from .schema import ReplicaRank

# How long stopping a replica waits for its tasks to end once cancelled.
STOP_TIMEOUT_S = 5.0


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(type(fn), "__call__", None))  # noqa: B004 - the method, not callability


class LocalReplica:
    def __init__(self, application: str, name: str, target: Any, args: tuple, kwargs: dict,
                 user_config: Any = None, has_user_config: bool = False,
                 max_concurrency: int | None = None) -> None:
        self.application, self.name = application, name
        # Calls at once (a deployment-scoped actor's: local_testing.py); None: no limit.
        self._limit = None if max_concurrency is None else asyncio.Semaphore(max_concurrency)
        # One replica per deployment here: rank 0 of 1.
        self.context = ReplicaContext(ReplicaID(uuid.uuid4().hex[:8],
                                                DeploymentID(name, application)), None,
                                      ReplicaRank(0), 1)
        self.instance: Any = None
        self.is_class = inspect.isclass(target)
        self.loop = asyncio.new_event_loop()
        self.executor = concurrent.futures.ThreadPoolExecutor(
            16, thread_name_prefix=f"serve-local-{name}")
        self._thread = threading.Thread(target=self._run, name=f"serve-local-{name}-loop",
                                        daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(
                self._construct(target, args, kwargs, user_config, has_user_config),
                self.loop).result()
        except BaseException:
            self.stop()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    # -- the user's object --------------------------------------------------------

    async def _construct(self, target: Any, args: tuple, kwargs: dict, user_config: Any,
                         has_user_config: bool) -> None:
        LOCAL_REPLICA.set(self.context)
        args, kwargs = await self._arguments(args, kwargs)
        if self.is_class:
            if inspect.iscoroutinefunction(target.__init__):  # Ray allows async __init__
                instance = target.__new__(target)
                await instance.__init__(*args, **kwargs)
            else:
                instance = target(*args, **kwargs)
        else:
            if args or kwargs:
                raise TypeError(f"deployment {self.name} is a function: it takes no init args "
                                "(bind() it without arguments)")
            instance = target
        self.instance = self.context.servable_object = instance
        if has_user_config:
            reconfigure = getattr(instance, "reconfigure", None) if self.is_class else None
            if reconfigure is None:
                raise ValueError(f"deployment {self.name} has a user_config but no "
                                 "reconfigure() method")
            args, kwargs = reconfigure_arguments(reconfigure, user_config, 0)
            result = reconfigure(*args, **kwargs)
            if inspect.isawaitable(result):
                await result

    def _method(self, name: str) -> Any:
        if name == "__call__":
            if not callable(self.instance):
                raise RayServeException(f"deployment {self.name} has no __call__ method; "
                                        "call one of its methods (handle.<method>.remote())")
            return self.instance
        if not self.is_class:
            raise RayServeException(f"deployment {self.name} is a function: only __call__ "
                                    f"can be called, not {name!r}")
        found = None if name.startswith("_") else getattr(self.instance, name, None)
        if not callable(found):
            public = sorted(n for n in dir(type(self.instance))
                            if not n.startswith("_") and callable(getattr(self.instance, n)))
            raise RayServeException(f"deployment {self.name} has no method {name!r} "
                                    f"(its methods: {', '.join(public) or 'none'})")
        return found

    # -- calls ----------------------------------------------------------------------

    def call(self, method: str, args: tuple, kwargs: dict, model_id: str,
             stream: bool) -> concurrent.futures.Future:
        """Start a call on the replica's loop: its result, or with `stream`
        the opened generator (for next_item)."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, DeploymentResponseGenerator):
                raise TypeError("a streaming response cannot be passed to another handle "
                                "call: iterate it and pass its items")
        if self.loop.is_closed():
            raise RayServeException(f"deployment {self.name} was stopped")
        work = self._open if stream else self._call
        return asyncio.run_coroutine_threadsafe(work(method, args, kwargs, model_id), self.loop)

    async def _arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Responses awaited, then everything pickled round-trip."""
        async def resolve(value: Any) -> Any:
            return await value if isinstance(value, LocalDeploymentResponse) else value

        args = tuple([await resolve(a) for a in args])
        kwargs = {k: await resolve(v) for k, v in kwargs.items()}
        return cloudpickle.loads(cloudpickle.dumps((args, kwargs)))

    async def _call(self, method: str, args: tuple, kwargs: dict, model_id: str) -> Any:
        if self._limit is None:
            return await self._run_call(method, args, kwargs, model_id)
        async with self._limit:
            return await self._run_call(method, args, kwargs, model_id)

    async def _enter(self, method: str, args: tuple, kwargs: dict,
                     model_id: str) -> tuple[Any, tuple, dict]:
        LOCAL_REPLICA.set(self.context)
        MODEL_ID.set(model_id)
        args, kwargs = await self._arguments(args, kwargs)
        return self._method(method), args, kwargs

    async def _invoke(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        if _is_async(fn):
            return await fn(*args, **kwargs)
        context = contextvars.copy_context()
        result = await self.loop.run_in_executor(
            self.executor, functools.partial(context.run, fn, *args, **kwargs))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _run_call(self, method: str, args: tuple, kwargs: dict, model_id: str) -> Any:
        fn, args, kwargs = await self._enter(method, args, kwargs, model_id)
        if inspect.isasyncgenfunction(fn):
            raise TypeError(f"{self.name}.{method} is a generator: call it with "
                            "handle.options(stream=True)")
        result = await self._invoke(fn, args, kwargs)
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            await _close(result, self)
            raise TypeError(f"{self.name}.{method} returned a generator: call it with "
                            "handle.options(stream=True)")
        return result

    async def _open(self, method: str, args: tuple, kwargs: dict, model_id: str) -> Any:
        fn, args, kwargs = await self._enter(method, args, kwargs, model_id)
        items = fn(*args, **kwargs) if inspect.isasyncgenfunction(fn) else \
            await self._invoke(fn, args, kwargs)
        if not (inspect.isgenerator(items) or inspect.isasyncgen(items)):
            raise TypeError(f"{self.name}.{method} was called with handle.options(stream=True) "
                            "but did not return a generator")
        return items

    def next_item(self, opened: concurrent.futures.Future) -> concurrent.futures.Future:
        """The stream's next item, or END."""
        return asyncio.run_coroutine_threadsafe(self._next(opened), self.loop)

    async def _next(self, opened: concurrent.futures.Future) -> Any:
        LOCAL_REPLICA.set(self.context)
        items = await asyncio.wrap_future(opened)
        if inspect.isasyncgen(items):
            try:
                return await items.__anext__()
            except StopAsyncIteration:
                return END
        context = contextvars.copy_context()
        return await self.loop.run_in_executor(
            self.executor, functools.partial(context.run, next, items, END))

    def close_stream(self, opened: concurrent.futures.Future) -> None:
        """Stop a stream its consumer left: the generator is closed (or, not yet
        open, the call cancelled)."""
        if self.loop.is_closed():
            return
        if not opened.done():
            opened.cancel()
            return
        if opened.exception() is None:
            with_items = opened.result()
            self.loop.call_soon_threadsafe(
                lambda: self.loop.create_task(_close(with_items, self)))

    # -- stopping -------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel what runs, stop the loop and its thread (idempotent)."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop).result(STOP_TIMEOUT_S)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        self.executor.shutdown(wait=False, cancel_futures=True)


async def _close(items: Any, replica: LocalReplica) -> None:
    if inspect.isasyncgen(items):
        await items.aclose()
    else:
        await replica.loop.run_in_executor(replica.executor, items.close)


async def _cancel_tasks() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
