"""The controller's calls to replicas' ReplicaService, one channel per replica.

Every call has a deadline; any failure (unreachable, timed out, an error
status) raises ReplicaCallError with a message fit for a status line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

import grpc

from servefleet._private.security.tls import PLAIN, Credentials
from servefleet.v1 import replica_pb2 as rpb
from servefleet.v1 import replica_pb2_grpc

Metadata = tuple[tuple[str, str], ...]


class ReplicaCallError(Exception):
    pass


class ReplicaClient(Protocol):
    async def metadata(self, address: str, timeout: float) -> rpb.GetMetadataResponse: ...

    async def check_health(self, address: str, timeout: float, replica_id: str = "") -> None: ...

    async def reconfigure(self, address: str, user_config_json: str,
                          max_ongoing_requests: int, timeout: float,
                          replica_id: str = "", rank: int | None = None,
                          world_size: int = 0) -> None: ...

    async def drain(self, address: str, wait_loop_s: float, timeout_s: float,
                    replica_id: str = "") -> None: ...

    async def forget(self, address: str) -> None: ...


# A replica is probed from its first moments, before it listens; gRPC's
# default reconnect backoff (1 s, growing) would delay seeing it ready by a
# second or more. These keep retries quick while it starts.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class GrpcReplicaClient:
    def __init__(self, credentials: Credentials = PLAIN,
                 hop_metadata: Callable[[], Metadata] = tuple) -> None:
        # With TLS: the controller's certificate, expecting the replicas' role name.
        self._credentials = credentials
        # The leader's hop pass as metadata, for replicas of a cluster with
        # tokens and no TLS (replica/hop_gate.py); () elsewhere.
        self._hop_metadata = hop_metadata
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> replica_pb2_grpc.ReplicaServiceStub:
        if address not in self._channels:
            self._channels[address] = self._credentials.aio_channel(address, CHANNEL_OPTIONS)
        return replica_pb2_grpc.ReplicaServiceStub(self._channels[address])

    async def _call(self, address: str, method: str, request: object, timeout: float) -> object:
        try:
            return await getattr(self._stub(address), method)(
                request, timeout=timeout, metadata=self._hop_metadata())
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ReplicaCallError(f"{method} timed out after {timeout:g}s") from None
            raise ReplicaCallError(e.details() or e.code().name) from None

    async def metadata(self, address: str, timeout: float) -> rpb.GetMetadataResponse:
        reply = await self._call(address, "GetMetadata", rpb.GetMetadataRequest(), timeout)
        assert isinstance(reply, rpb.GetMetadataResponse)
        return reply

    async def check_health(self, address: str, timeout: float, replica_id: str = "") -> None:
        await self._call(address, "CheckHealth", rpb.CheckHealthRequest(replica_id=replica_id),
                         timeout)

    async def reconfigure(self, address: str, user_config_json: str,
                          max_ongoing_requests: int, timeout: float,
                          replica_id: str = "", rank: int | None = None,
                          world_size: int = 0) -> None:
        await self._call(address, "Reconfigure", rpb.ReconfigureRequest(
            user_config_json=user_config_json, max_ongoing_requests=max_ongoing_requests,
            replica_id=replica_id, rank=rank, world_size=world_size), timeout)

    async def drain(self, address: str, wait_loop_s: float, timeout_s: float,
                    replica_id: str = "") -> None:
        await self._call(address, "Drain", rpb.DrainRequest(
            wait_loop_s=wait_loop_s, timeout_s=timeout_s, replica_id=replica_id), 2.0)

    async def forget(self, address: str) -> None:
        """Close the channel to a replica that is gone."""
        channel = self._channels.pop(address, None)
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
