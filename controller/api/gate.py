"""The leader gate in front of ControllerService, and how API errors become statuses.

`LeaderGate` answers every ControllerService call with UNAVAILABLE while this
controller is not the serving leader, putting the leader's address in the
trailing metadata (wire.LEADER_METADATA_KEY) so clients can go there. Health
and reflection are not gated: a standby is alive and says so.

A Watch that comes to a standby while the leader it would name does not
take connections (its process is gone: a failover is under way) is held,
not refused: it is served as soon as this controller leads, or refused as
before after HOLD_WATCH_S. Refused, its client would go back and forth
between the dead leader and this standby with a growing back-off (up to
2 s), and reach the new leader seconds after the election; held, every
watcher has its stream open at the election. Held streams go on at random
within HOLD_RELEASE_SPREAD_S of the election, not all in one turn of the
new leader's loop (thousands of streams at once held it past its lease
TTL on a busy machine). A leader that takes connections but does not answer
(stopped, partitioned) is named as before.

`api_method` wraps each RPC: an ApiError becomes its own code and message;
anything else is a bug, logged with its traceback and answered INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc

from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import LEADER_METADATA_KEY

from ..election import LeaderElection
from ..errors import MAX_MESSAGE_CHARS, ApiError, NotLeader, one_line

logger = logging.getLogger(__name__)

SERVICE_NAME = "servefleet.v1.ControllerService"
# Methods whose rejection must be a streaming handler of their own shape.
SERVER_STREAMING = {f"/{SERVICE_NAME}/Watch", f"/{SERVICE_NAME}/GetLogs"}
CLIENT_STREAMING = {f"/{SERVICE_NAME}/StreamLoad"}
WATCH = f"/{SERVICE_NAME}/Watch"
# How long a standby holds a Watch while no leader takes connections: past
# two lease TTLs of 5 s (an election's longest wait), short of a client's
# silence limit (three 5 s heartbeats, watch_client.py).
HOLD_WATCH_S = 12.0
HOLD_RELEASE_SPREAD_S = 1.0
# How long a leader that refused a connection is taken as gone.
PROBE_TTL_S = 0.5
PROBE_TIMEOUT_S = 0.5

R = TypeVar("R")
if TYPE_CHECKING:  # generic only in the stubs
    Handler = grpc.RpcMethodHandler[Any, Any]


def _leader_metadata(leader: str | None) -> tuple[tuple[str, str], ...]:
    return ((LEADER_METADATA_KEY, leader),) if leader else ()


class Leadership:
    """What the gate and the servicer need to know about this controller's role."""

    def __init__(self, election: LeaderElection) -> None:
        self.election = election
        self.identity = election.identity
        self._serving = False
        self._serving_now = asyncio.Event()
        # The last probe of the named leader: (address, monotonic time, refused).
        self._probed: tuple[str, float, bool] = ("", 0.0, False)
        self._probing: asyncio.Task[bool] | None = None

    @property
    def serving(self) -> bool:
        """True only while leading with state loaded for the current term."""
        return self._serving

    @serving.setter
    def serving(self, value: bool) -> None:
        self._serving = value
        if value:
            self._serving_now.set()
        else:
            self._serving_now.clear()

    def can_serve(self) -> bool:
        return self.serving and self.election.lease_valid()

    async def hold_until_serving(self, timeout_s: float = HOLD_WATCH_S) -> bool:
        """While no leader takes connections (none is known, or the one named
        refuses them), wait until this controller serves, then a random part
        of HOLD_RELEASE_SPREAD_S; True if it serves. False at once when a
        leader that takes connections is named."""
        deadline = time.monotonic() + timeout_s
        held = False
        while not self.can_serve():
            left = deadline - time.monotonic()
            if left <= 0 or not await self._leader_gone():
                return False
            held = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, PROBE_TTL_S)):
                    await self._serving_now.wait()
        if held:
            await asyncio.sleep(random.uniform(0, HOLD_RELEASE_SPREAD_S))
        return self.can_serve()

    async def _leader_gone(self) -> bool:
        """Whether the leader this controller knows of refuses connections
        (True as well when it knows of none, or is the leader itself, loading)."""
        leader = self.election.leader
        if leader is None or leader == self.identity:
            return True
        address, at, refused = self._probed
        if address == leader and time.monotonic() - at < PROBE_TTL_S:
            return refused
        if self._probing is None or self._probing.done():
            self._probing = asyncio.ensure_future(self._probe(leader))
        return await asyncio.shield(self._probing)

    async def _probe(self, leader: str) -> bool:
        host, _, port = leader.rpartition(":")
        refused = False
        if port.isdigit():  # else not an address to try: named, as before
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
                writer.close()
            except TimeoutError:
                pass  # it may be alive and slow: named, as before
            except OSError:
                refused = True  # nothing listens there
        self._probed = (leader, time.monotonic(), refused)
        return refused

    async def abort_not_leader(self, context: grpc.aio.ServicerContext) -> None:
        hint = await self.hint()
        await context.abort(grpc.StatusCode.UNAVAILABLE, NotLeader(hint).message,
                            trailing_metadata=_leader_metadata(hint))

    async def hint(self) -> str | None:
        """Where a client should go instead of here, reading the store if unsure."""
        leader = self.election.leader
        if leader is None or leader == self.identity:
            leader = await self.election.lookup_leader()
        return None if leader == self.identity else leader


class LeaderGate(grpc.aio.ServerInterceptor):
    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership
        self._reject_handler: Handler = grpc.unary_unary_rpc_method_handler(self._reject)
        self._reject_stream_handler: Handler = grpc.unary_stream_rpc_method_handler(
            self._reject_stream)
        self._reject_client_stream_handler: Handler = grpc.stream_unary_rpc_method_handler(
            self._reject)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method: str = handler_call_details.method
        if method.startswith(f"/{SERVICE_NAME}/") and not self._leadership.can_serve():
            if method == WATCH and await self._leadership.hold_until_serving():
                return await continuation(handler_call_details)
            if method in SERVER_STREAMING:
                return self._reject_stream_handler
            if method in CLIENT_STREAMING:
                return self._reject_client_stream_handler
            return self._reject_handler
        return await continuation(handler_call_details)

    async def _reject(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        await self._leadership.abort_not_leader(context)

    async def _reject_stream(self, request: bytes,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        await self._leadership.abort_not_leader(context)
        yield None  # never reached: makes this a streaming handler


def refuse(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str,
           trailing: tuple[tuple[str, str], ...] = ()) -> None:
    """Answer with `code` once the handler returns (None, or the end of a stream)."""
    context.set_code(code)
    context.set_details(message)
    if trailing:
        context.set_trailing_metadata(trailing)


# The RPCs that change the goal: each is a trace of its own (or joins the
# caller's, from its traceparent metadata), as are the reconcile actions
# that follow (reconcile/replica_ops.py). Reads and reports are not traced.
TRACED_METHODS = frozenset({"Deploy", "DeleteDeployments", "DeployApplications",
                            "DeleteApplications", "SetTraffic"})


def api_method(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Map ApiError to its status; log and answer INTERNAL for anything else."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any,
                      context: grpc.aio.ServicerContext) -> R:
        # The status is set, not aborted with: grpc.aio keeps what an abort's
        # frames hold, the request among them (about 6 MB for each refused
        # DeployApplications of 10,000 applications, never returned).
        hint: str | None = None
        not_leader = False
        served = tracing.serve(f"ControllerService/{fn.__name__}", tracing.incoming(
            context.invocation_metadata() or ()), {"rpc.system": "grpc",
                                                  "rpc.method": fn.__name__}
        ) if fn.__name__ in TRACED_METHODS else None
        try:
            result = await fn(self, request, context)
            if served is not None:
                served.finish()
            return result
        except ApiError as e:
            code, message = e.code, e.message
            if isinstance(e, NotLeader):
                not_leader, hint = True, e.leader
            else:
                logger.log(logging.DEBUG if e.expected else logging.INFO,
                           "refused %s: %s: %s", fn.__name__, e.code.name,
                            one_line(message, MAX_MESSAGE_CHARS))
        except grpc.aio.AbortError:
            raise  # already answered (a malformed message in a request stream, say)
        except Exception:
            logger.exception("internal error in %s", fn.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error in {fn.__name__}"
        del request
        if served is not None:
            served.set("rpc.grpc.status_code", code.value[0])
            served.set("servefleet.error", message)
            served.finish(failed=True)
        if not_leader:
            hint = hint or await self._leadership.hint()
            message = NotLeader(hint).message
        refuse(context, code, message, _leader_metadata(hint))
        return cast(R, None)

    return wrapper


