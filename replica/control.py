"""The replica's gRPC control surface (servefleet.v1.ReplicaService).

Called by the controller: GetMetadata while the replica starts and for load,
CheckHealth on every health period, Reconfigure for lightweight config
changes, Drain to stop it. User-code failures in check_health or reconfigure
are answered with an error status whose message names the exception; the
controller counts them as failed health checks.

It runs on the control loop (control_loop.py), not on the loop of the
user's code, so a handler that holds that loop does not fail the checks:

- CheckHealth passes without touching the main loop, unless the user
  defined check_health (an async one runs on the main loop, as Ray runs it
  on the user's, and waits for it), or the main loop has been held for
  longer than the check's own deadline (the controller's
  health_check_timeout_s): then it fails, naming what holds the loop;
- Reconfigure runs the user's reconfigure on the main loop, and brings the
  replica's rank and world size; Drain is handed to it; GetMetadata reads
  the replica's state (its rank and world size too) from here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import grpc

from servefleet.v1 import replica_pb2 as rpb
from servefleet.v1 import replica_pb2_grpc

from .control_loop import ControlLoop
from .loop_watch import LoopWatch
from .replica import PHASE, Replica
from .user_calls import call_user, is_async_callable

logger = logging.getLogger(__name__)


class ReplicaControl(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(self, replica: Replica, control: ControlLoop, watch: LoopWatch) -> None:
        self._replica = replica
        self._control = control
        self._watch = watch

    async def _check_identity(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        wanted = request.replica_id
        if wanted and wanted != self._replica.settings.replica_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"this is replica {self._replica.settings.replica_id}, "
                                f"not {wanted}")

    async def GetMetadata(self, request: rpb.GetMetadataRequest,
                          context: Any) -> rpb.GetMetadataResponse:
        r = self._replica
        placement = r.identity.placement
        return rpb.GetMetadataResponse(
            phase=r.phase, replica_id=r.settings.replica_id, version=r.settings.version,
            pid=os.getpid(), ongoing_requests=r.admission.ongoing,
            user_config_json=r.user_config_json, max_ongoing_requests=r.admission.max_ongoing,
            error=r.error, traceback=r.traceback, rank=placement.rank,
            world_size=placement.world_size)

    async def CheckHealth(self, request: rpb.CheckHealthRequest,
                          context: grpc.aio.ServicerContext) -> rpb.CheckHealthResponse:
        await self._check_identity(request, context)
        r = self._replica
        if r.phase != PHASE.REPLICA_PHASE_READY:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"replica is {PHASE.Name(r.phase).removeprefix('REPLICA_PHASE_')}")
        deadline = context.time_remaining()
        held = self._watch.blocked_for()
        if deadline is not None and held > deadline:
            r.metrics.health["error"].inc()
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, self._held(
                held, f"longer than the check's timeout ({deadline:.0f} s)"))
        check = r.deployment.check_health if r.deployment else None
        if check is not None:
            try:
                if is_async_callable(check):
                    await self._user_check(check, deadline)
                else:  # in a user thread, whatever the main loop does
                    await call_user(check, r.executor)
            except Exception as e:
                r.metrics.health["error"].inc()
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"check_health raised {type(e).__name__}: {e}")
        r.metrics.health["ok"].inc()
        return rpb.CheckHealthResponse()

    async def _user_check(self, check: Any, deadline: float | None) -> None:
        """The user's async check_health on the main loop; when that loop is
        held past the check's deadline, a TimeoutError that says by what."""
        work = asyncio.ensure_future(self._control.on_main(call_user(check,
                                                                     self._replica.executor)))
        try:
            # Answer a moment before the controller gives up, with the reason.
            await asyncio.wait_for(asyncio.shield(work), max(0.05, (deadline or 30.0) - 0.2))
        except TimeoutError:
            work.add_done_callback(lambda f: f.cancelled() or f.exception())
            held = self._watch.blocked_for()
            if held:
                raise TimeoutError(self._held(held, "so check_health could not run")) from None
            raise TimeoutError("check_health did not return in time") from None

    def _held(self, held: float, consequence: str) -> str:
        holder = self._watch.holder()
        return (f"the replica's event loop has been blocked for {held:.1f} s"
                f"{' by ' + holder if holder else ''}, {consequence}")

    async def Reconfigure(self, request: rpb.ReconfigureRequest,
                          context: grpc.aio.ServicerContext) -> rpb.ReconfigureResponse:
        await self._check_identity(request, context)
        r = self._replica
        if r.phase != PHASE.REPLICA_PHASE_READY:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "replica is not ready")
        try:
            changed = await self._control.on_main(r.apply_config(
                request.user_config_json, request.max_ongoing_requests,
                request.rank if request.HasField("rank") else None, request.world_size))
        except Exception as e:
            logger.exception("reconfigure failed")
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"reconfigure raised {type(e).__name__}: {e}")
        if changed:
            logger.info("reconfigured with user_config %s",
                        json.dumps(request.user_config_json)[:200])
        return rpb.ReconfigureResponse()

    async def Drain(self, request: rpb.DrainRequest, context: Any) -> rpb.DrainResponse:
        await self._check_identity(request, context)
        self._control.call_on_main(self._replica.request_drain, request.wait_loop_s or None,
                                   request.timeout_s or None)
        return rpb.DrainResponse()
