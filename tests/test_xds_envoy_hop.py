"""An Envoy fed by the controller's xDS reaches replicas of a cluster with
credentials (issue 52's regression of the Envoy data plane): a real
controller with tokens, real replicas on loopback, an ADS stream as Envoy
opens it, and real HTTP requests to the replica addresses its EDS names,
with the headers its RDS tells Envoy to add."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import httpx
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc

from servefleet._private.security import tokens
from servefleet._private.security.hop import HOP_HEADER
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.controller.xds.resources import CLUSTER, ENDPOINTS, ROUTE
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

APPS = str(Path(__file__).parent / "apps")
pytestmark = pytest.mark.slow


class Envoy:
    """The ADS stream of an Envoy with the bootstrap of docs/xds.md: RDS
    `servefleet-http`, CDS by wildcard, then EDS of every cluster."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self.call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources(
            metadata=Credentials(token=token).metadata)
        self.latest: dict[str, discovery_pb2.DiscoveryResponse] = {}
        self.changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for response in self.call:
            self.latest[response.type_url] = response
            self.changed.set()
            # ACK, as Envoy does; a new CDS names the clusters whose EDS it wants.
            await self.call.write(discovery_pb2.DiscoveryRequest(
                type_url=response.type_url, version_info=response.version_info,
                response_nonce=response.nonce, resource_names=self._names(response.type_url)))
            if response.type_url == CLUSTER:
                await self.call.write(discovery_pb2.DiscoveryRequest(
                    type_url=ENDPOINTS, resource_names=self._names(ENDPOINTS)))

    def _names(self, type_url: str) -> list[str]:
        if type_url == ROUTE:
            return ["servefleet-http"]
        if type_url == ENDPOINTS and CLUSTER in self.latest:
            return sorted(_unpack(r, cluster_pb2.Cluster).name
                          for r in self.latest[CLUSTER].resources)
        return []

    async def start(self) -> None:
        await self.call.write(discovery_pb2.DiscoveryRequest(type_url=CLUSTER))
        await self.call.write(discovery_pb2.DiscoveryRequest(
            type_url=ROUTE, resource_names=["servefleet-http"]))

    async def until(self, check, timeout: float = 30.0):
        """Wait until `check()` gives something true, and return it."""
        async def loop():
            while not (found := check()):
                self.changed.clear()
                await self.changed.wait()
            return found
        return await asyncio.wait_for(loop(), timeout)

    def routes(self) -> route_pb2.RouteConfiguration | None:
        response = self.latest.get(ROUTE)
        return _unpack(response.resources[0], route_pb2.RouteConfiguration) if response else None

    def hop_pass(self) -> str | None:
        routes = self.routes()
        found = [h.header.value for h in routes.request_headers_to_add
                 if h.header.key == HOP_HEADER] if routes else []
        return found[0] if found else None

    def addresses(self) -> list[str]:
        response = self.latest.get(ENDPOINTS)
        if response is None:
            return []
        out = []
        for resource in response.resources:
            for locality in _unpack(resource, endpoint_pb2.ClusterLoadAssignment).endpoints:
                for lb in locality.lb_endpoints:
                    socket = lb.endpoint.address.socket_address
                    out.append(f"{socket.address}:{socket.port_value}")
        return out

    def close(self) -> None:
        self.call.cancel()
        self._reader.cancel()


def _unpack(packed, message):
    out = message()
    assert packed.Unpack(out)
    return out


async def _get(address: str, hop: str | None) -> httpx.Response:
    """A request as Envoy forwards one of /hdr to a replica."""
    headers = {"x-servefleet-route-prefix": "/hdr"}
    if hop is not None:
        headers[HOP_HEADER] = hop
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(f"http://{address}/hdr", headers=headers)


async def test_an_envoy_with_a_proxy_token_reaches_replicas_and_a_readers_does_not(
        tmp_path, cluster) -> None:
    token_file = tmp_path / "tokens"
    issued = {name: tokens.create(token_file, name, role) for name, role in (
        ("edge", "proxy"), ("looker", "reader"), ("admin-1", "admin"))}
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=[
                                       "--auth-tokens", str(token_file),
                                       "--allow-working-dir", "/"]).start()
    channel = grpc.aio.insecure_channel(controller.address)
    edge = looker = None
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=issued["admin-1"])) as client:
            client.deploy_applications([apb.ApplicationSpec(
                name="hdr", import_path="headers_app:app", route_prefix="/hdr",
                runtime=d.RuntimeOptions(working_dir=APPS))])
            wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                                 for r in client.replicas("hdr")), 90, "a running replica")
            edge, looker = Envoy(channel, issued["edge"]), Envoy(channel, issued["looker"])
            await edge.start()
            await looker.start()
            (address,) = await edge.until(edge.addresses)
            hop = await edge.until(edge.hop_pass)
            routes = edge.routes()
            assert routes is not None and HOP_HEADER in routes.request_headers_to_remove

            # What Envoy forwards with that header is served; without, refused.
            served = await _get(address, hop)
            assert served.status_code == 200, served.text
            refused = await _get(address, None)
            assert refused.status_code == 401 and HOP_HEADER in refused.text
            # A reader's Envoy gets the same routes without a pass.
            await looker.until(looker.routes)
            await looker.until(looker.addresses)
            assert looker.hop_pass() is None

            # CSDS lists the edge's routes with the value of its pass redacted.
            status = await csds_pb2_grpc.ClientStatusDiscoveryServiceStub(
                channel).FetchClientStatus(csds_pb2.ClientStatusRequest(),
                                           metadata=Credentials(token=issued["admin-1"]).metadata)
            assert hop not in str(status) and "redacted" in str(status)
            assert hop not in controller.logs()

            # The token revoked (SIGHUP): its stream ends, and the pass its
            # Envoy holds is refused by the replica from the next `hop` snapshot.
            tokens.revoke(token_file, "edge")
            controller.signal(signal.SIGHUP)
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(edge._reader, 20)
            assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED

            async def revoked() -> bool:
                answer = await _get(address, hop)
                return answer.status_code == 401 and "revoked" in answer.text
            for _ in range(100):
                if await revoked():
                    break
                await asyncio.sleep(0.2)
            assert await revoked()
            client.shutdown()
    finally:
        for stream in (edge, looker):
            if stream is not None:
                stream.close()
        await channel.close()
        controller.stop()
