"""Refusing costs less than accepting (a real controller process): a
DeployApplications far over its bounds is refused before any working dir is
read or hashed, at once, and refused requests leave no memory behind."""

from __future__ import annotations

import time

import grpc
import pytest

from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_ten_thousand_applications_are_refused_at_once_and_cost_nothing(
        tmp_path, cluster) -> None:
    tree = tmp_path / "tree"
    for i in range(200):  # something to hash, were it hashed
        (tree / f"d{i}").mkdir(parents=True)
        (tree / f"d{i}" / "m.py").write_text("x = 1\n" * 100)
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   runtime="none", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", "/"]).start()
    try:
        with ControllerClient([controller.address], timeout=30) as client:
            client.status()
            apps = [apb.ApplicationSpec(
                name=f"a{i}", import_path="m:app", route_prefix=f"/a{i}",
                runtime=dpb.RuntimeOptions(working_dir=str(tree / f"d{i % 200}"),
                                           excludes=[f"x{i}-{j}" for j in range(8)]))
                for i in range(10_000)]
            client.deploy(dpb.DeploymentSpec(name="warm", import_path="m:app",
                                             runtime=apps[0].runtime))  # a call that works
            before = rss_mb(controller.proc.pid)
            for _ in range(12):
                begun = time.monotonic()
                with pytest.raises(ControllerError) as refused:
                    client.deploy_applications(apps)
                took = time.monotonic() - begun
                assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
                assert "at most 100 in one request, got 10000" in refused.value.details
                assert took < 1.0, took  # the bound is the point, not a speed claim
            # 33 working dirs in 33 applications: over the bound on hashing work.
            with pytest.raises(ControllerError, match="at most 32 different working dirs"):
                client.deploy_applications(apps[:33])
            after = rss_mb(controller.proc.pid)
            assert after - before < 30, (before, after)
            assert client.applications().applications == []
            client.shutdown()
    finally:
        controller.stop()
