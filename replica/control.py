"""The replica's gRPC control surface (servefleet.v1.ReplicaService).

Called by the controller: GetMetadata while the replica starts and for load,
CheckHealth on every health period, Reconfigure for lightweight config
changes, Drain to stop it. User-code failures in check_health or reconfigure
are answered with an error status whose message names the exception; the
controller counts them as failed health checks.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import grpc

from servefleet.v1 import replica_pb2 as rpb
from servefleet.v1 import replica_pb2_grpc

from .replica import PHASE, Replica
from .user_calls import call_user

logger = logging.getLogger(__name__)


class ReplicaControl(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    async def _check_identity(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        wanted = request.replica_id
        if wanted and wanted != self._replica.settings.replica_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"this is replica {self._replica.settings.replica_id}, "
                                f"not {wanted}")

    async def GetMetadata(self, request: rpb.GetMetadataRequest,
                          context: Any) -> rpb.GetMetadataResponse:
        r = self._replica
        return rpb.GetMetadataResponse(
            phase=r.phase, replica_id=r.settings.replica_id, version=r.settings.version,
            pid=os.getpid(), ongoing_requests=r.admission.ongoing,
            user_config_json=r.user_config_json, max_ongoing_requests=r.admission.max_ongoing,
            error=r.error, traceback=r.traceback)

    async def CheckHealth(self, request: rpb.CheckHealthRequest,
                          context: grpc.aio.ServicerContext) -> rpb.CheckHealthResponse:
        await self._check_identity(request, context)
        r = self._replica
        if r.phase != PHASE.REPLICA_PHASE_READY:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"replica is {PHASE.Name(r.phase).removeprefix('REPLICA_PHASE_')}")
        check = r.deployment.check_health if r.deployment else None
        if check is not None:
            try:
                await call_user(check, r.executor)
            except Exception as e:
                r.metrics.health["error"].inc()
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"check_health raised {type(e).__name__}: {e}")
        r.metrics.health["ok"].inc()
        return rpb.CheckHealthResponse()

    async def Reconfigure(self, request: rpb.ReconfigureRequest,
                          context: grpc.aio.ServicerContext) -> rpb.ReconfigureResponse:
        await self._check_identity(request, context)
        r = self._replica
        if r.phase != PHASE.REPLICA_PHASE_READY:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "replica is not ready")
        try:
            changed = await r.apply_config(request.user_config_json,
                                           request.max_ongoing_requests)
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
        self._replica.request_drain(request.wait_loop_s or None, request.timeout_s or None)
        return rpb.DrainResponse()
