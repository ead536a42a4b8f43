"""Streaming through handles, for real: a generator's yields cross processes
as they come, and a consumer that leaves cancels the generator."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from servefleet import HandleError, get_deployment_handle
from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

APPS = str(Path(__file__).resolve().parent / "apps")
pytestmark = pytest.mark.slow


def test_streams_cross_processes_and_cancel_at_the_source(sqlite_fleet, tmp_path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    controllers = sqlite_fleet.addresses()
    proxy = ProxyProcess(controllers, log_dir=tmp_path).start()
    with ControllerClient(controllers, timeout=30) as client:
        try:
            client.deploy_applications([apb.ApplicationSpec(
                name="st", route_prefix="/st", import_path="stream_app:build",
                args_json=json.dumps({"marks": str(marks)}),
                runtime=dpb.RuntimeOptions(working_dir=APPS))])

            def running() -> bool:
                info = client.application_status("st")
                return info is not None and \
                    info.status == status_pb2.APPLICATION_STATUS_RUNNING
            wait_for(running, 60, "st RUNNING")
            url = proxy.url + "/st"
            wait_for(lambda: httpx.get(url, params={"n": 1}, timeout=5).status_code == 200, 30)

            # The ingress streams the downstream generator to the HTTP client as it goes.
            arrivals = []
            with httpx.stream("GET", url, params={"n": 6}, timeout=30) as reply:
                started = time.perf_counter()
                for line in reply.iter_lines():
                    if line:
                        arrivals.append((line, time.perf_counter() - started))
            assert [a for a, _ in arrivals] == [f"t{i}" for i in range(6)]
            assert arrivals[-1][1] - arrivals[0][1] > 0.2  # not gathered, then sent

            # An HTTP client that leaves cancels the generator two processes away.
            with httpx.stream("GET", url, params={"n": 1000}, timeout=30) as reply:
                lines = reply.iter_lines()
                assert next(lines) == "t0"
            wait_for(lambda: any(marks.iterdir()), 10, "the cancellation reaching Tokens")

            async def from_outside() -> tuple[list, list]:
                tokens = get_deployment_handle("Tokens", "st", controllers)
                every = [t async for t in tokens.options(stream=True).tokens.remote(3, 0.0)]
                stream = tokens.options(stream=True).tokens.remote(1000)
                first = [await stream.__anext__()]
                await stream.aclose()  # leaving early: cancels at the replica
                with pytest.raises(HandleError, match=r"call it with handle\.options"):
                    await tokens.tokens.remote(2)
                with pytest.raises(HandleError, match="not a generator"):
                    async for _ in tokens.options(stream=True).plain.remote():
                        pass
                front = get_deployment_handle("Front", "st", controllers)
                return every + first, await front.collect.remote(4)

            before = len(list(marks.iterdir()))
            got, collected = asyncio.run(from_outside())
            assert got == ["t0", "t1", "t2", "t0"] and collected == [0, 1, 2, 3]
            wait_for(lambda: len(list(marks.iterdir())) > before, 10, "aclose reaching Tokens")
        finally:
            proxy.stop()
            client.shutdown()
