"""The streams' bounds in a real controller process: its memory (VmRSS) while
an xDS client that does not read is cut off and after, and after refused
Watch requests; and its log, which shows client text on one line and no
traceback for garbage. (tests/test_stream_bounds.py has the rest, in-process.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2
from test_stream_bounds import ADS, FORGED, SMALL_WINDOW, assert_cut_off, ended, send_until

from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient
from servefleet.controller.xds.resources import CLUSTER, ENDPOINTS
from servefleet.v1 import controller_pb2_grpc, watch_pb2
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
# Growth allowed for what a controller allocates anyway (a few MB here); the
# unbounded queues these tests were written against grew it by 87 MB (xDS)
# and 130 MB (12 refused Watch requests).
TOLERANCE_MB = 20
# A line the controller logged at ERROR, or a traceback's first line.
ERROR_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (ERROR|CRITICAL) |^Traceback")


def errors_logged(controller: ControllerProcess) -> list[str]:
    return [line for line in controller.log_path.read_text().splitlines()
            if ERROR_LINE.match(line)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def controller(tmp_path, cluster) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                             runtime="none", log_dir=tmp_path).start()
    try:
        with ControllerClient([proc.address], timeout=30) as client:
            client.status()
        yield proc
    finally:
        proc.stop()


def test_an_unread_xds_stream_is_cut_off_and_its_memory_returned(controller) -> None:
    with ControllerClient([controller.address], timeout=30) as client:
        for i in range(100):  # a CDS wildcard answer of ~13 KB
            client.deploy(dpb.DeploymentSpec(name=f"D{i}", import_path="m:C",
                                             route_prefix=f"/r{i}"))
    assert controller.proc is not None
    pid = controller.proc.pid

    def cut_off() -> bool:
        return "does not read its stream" in controller.log_path.read_text()

    async def scenario() -> tuple[float, float, float, int]:
        async with grpc.aio.insecure_channel(controller.address,
                                             options=SMALL_WINDOW) as channel:
            stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
            warm = stub.StreamAggregatedResources()  # caches built, as for any client
            for i in range(2):
                await warm.write(discovery_pb2.DiscoveryRequest(
                    type_url=CLUSTER, resource_names=[f"a/{j}" for j in range(10_000 * i)]))
                await asyncio.wait_for(warm.read(), 10)
            warm.cancel()
            before = rss_mb(pid)
            call = stub.StreamAggregatedResources()
            written = await send_until(call, cut_off, "silent")
            during = rss_mb(pid)
            assert_cut_off(await ended(call))
        await asyncio.sleep(0.5)
        return before, during, rss_mb(pid), written

    before, during, after, written = asyncio.run(scenario())
    assert written < 300, "never cut off"
    assert during - before < TOLERANCE_MB, (before, during)
    assert after - before < TOLERANCE_MB, (before, after)
    assert not errors_logged(controller)


def test_client_text_is_logged_on_one_line_and_garbage_leaves_no_traceback(
        controller) -> None:
    async def scenario() -> list[grpc.aio.AioRpcError]:
        async with grpc.aio.insecure_channel(controller.address) as channel:
            stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
            call = stub.StreamAggregatedResources()
            first = discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS, resource_names=["x"])
            first.node.id = "node" + FORGED
            await call.write(first)
            response = await asyncio.wait_for(call.read(), 10)
            await call.write(discovery_pb2.DiscoveryRequest(
                type_url=ENDPOINTS, resource_names=["x"], response_nonce=response.nonce,
                error_detail=status_pb2.Status(code=3, message="bad" + FORGED)))
            garbage = [channel.stream_stream(ADS)(), stub.StreamAggregatedResources(),
                       stub.StreamAggregatedResources()]
            await garbage[0].write(b"\xff\xff\xff\xff garbage")
            await garbage[1].write(discovery_pb2.DiscoveryRequest(type_url="x" + FORGED))
            await garbage[2].write(discovery_pb2.DiscoveryRequest(
                type_url=CLUSTER, resource_names=["n" * 100_000 + FORGED]))
            errors = [await ended(g) for g in garbage]
            call.cancel()
            return errors

    errors = asyncio.run(scenario())
    assert [e.code() for e in errors] == [grpc.StatusCode.INVALID_ARGUMENT] * 3
    lines = controller.log_path.read_text().splitlines()
    assert not [line for line in lines if line.startswith("2026-01-01 00:00:00 ERROR forged")]
    nack = [line for line in lines if "\\n2026-01-01 00:00:00 ERROR forged" in line
            and " refused " in line]
    assert nack and len(nack[0]) < 2_000, nack
    assert not errors_logged(controller)


def test_refused_watch_requests_leave_no_memory_behind(controller) -> None:
    assert controller.proc is not None
    pid = controller.proc.pid
    long = "x" * 300

    async def scenario() -> tuple[float, float]:
        async with grpc.aio.insecure_channel(
                controller.address, options=[("grpc.max_send_message_length", 8 << 20)]
                ) as channel:
            stub = controller_pb2_grpc.ControllerServiceStub(channel)

            async def refused(i: int) -> None:  # ~3 MB: too many keys, or one bad key
                known = ({f"replicas/a{i}/{long}{j}": "" for j in range(10_001)} if i % 2
                         else {f"bad{i}/{long}{j}": "" for j in range(10_000)})
                error = await ended(stub.Watch(watch_pb2.WatchRequest(known=known)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

            for i in range(2):  # the first take what parsing such a request takes
                await refused(i)
            before = rss_mb(pid)
            for i in range(12):
                await refused(i)
            await asyncio.sleep(0.5)
            return before, rss_mb(pid)

    before, after = asyncio.run(scenario())
    assert after - before < TOLERANCE_MB, (before, after)
