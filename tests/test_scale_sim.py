"""The sim runtime and the scale benchmark's small point (docs/scale.md).

The sim host is a real process answering the ReplicaService over real gRPC
(the controller's own replica client calls it); the benchmark's --quick
point runs a real controller pair on a real etcd. Speeds are not checked
here, only that each piece does what the benchmark relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from servefleet._private.wire import ROUTES_KEY, replicas_key
from servefleet.controller.reconcile.replica_client import GrpcReplicaClient, ReplicaCallError
from servefleet.controller.runtime.base import ReplicaLaunch
from servefleet.controller.runtime.sim import SimRuntime, socket_path
from servefleet.controller.state_publisher import StatePublisher
from servefleet.controller.watch import Publisher
from servefleet.v1 import application_pb2, deployment_pb2, records_pb2, replica_pb2

ROOT = Path(__file__).resolve().parent.parent
PHASE = replica_pb2.ReplicaPhase


@pytest.fixture
def sim_dir(tmp_path):
    log = tmp_path / "sim-host.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "servefleet.controller.runtime.sim_host",
                                 "--socket", str(socket_path(tmp_path)),
                                 "--ready-delay-s", "0.3"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not socket_path(tmp_path).exists():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    yield tmp_path
    proc.terminate()
    proc.wait(10)


def launch(replica_id: str, deployment: str = "d") -> ReplicaLaunch:
    return ReplicaLaunch(cluster="c", application="app", deployment=deployment,
                         replica_id=replica_id, version="v1",
                         settings={"user_config_json": '{"a": 1}', "max_ongoing_requests": 7})


async def test_sim_replicas_answer_the_controllers_calls_as_real_ones_do(sim_dir):
    runtime, client = SimRuntime(sim_dir), GrpcReplicaClient()
    try:
        one, two = await runtime.start(launch("r1")), await runtime.start(launch("r2"))
        # One port, an address each: the controller holds a channel per replica.
        assert one.control_address != two.control_address
        assert one.control_address.rpartition(":")[2] == two.control_address.rpartition(":")[2]
        meta = await client.metadata(one.control_address, 2.0)
        assert (meta.phase, meta.replica_id) == (PHASE.REPLICA_PHASE_LOADING, "r1")
        with pytest.raises(ReplicaCallError, match="replica is LOADING"):
            await client.check_health(one.control_address, 2.0, replica_id="r1")
        await asyncio.sleep(0.35)
        meta = await client.metadata(two.control_address, 2.0)
        assert (meta.phase, meta.replica_id, meta.max_ongoing_requests) == (
            PHASE.REPLICA_PHASE_READY, "r2", 7)
        await client.check_health(one.control_address, 2.0, replica_id="r1")
        with pytest.raises(ReplicaCallError, match="this is replica r1, not r2"):
            await client.check_health(one.control_address, 2.0, replica_id="r2")
        await client.reconfigure(one.control_address, '{"a": 2}', 3, 2.0, replica_id="r1")
        assert (await client.metadata(one.control_address, 2.0)).user_config_json == '{"a": 2}'

        await runtime._ask({"op": "act", "action": "unhealthy", "replica_ids": ["r1"]})
        with pytest.raises(ReplicaCallError, match="sim: unhealthy"):
            await client.check_health(one.control_address, 2.0, replica_id="r1")
        await runtime._ask({"op": "act", "action": "hang", "replica_ids": ["r2"]})
        with pytest.raises(ReplicaCallError, match="timed out"):
            await client.metadata(two.control_address, 0.3)

        await runtime._ask({"op": "act", "action": "exit", "replica_ids": ["r2"]})
        gone = await runtime.inspect(two.handle)
        assert gone is not None and (gone.alive, gone.exit_code) == (False, 1)
        with pytest.raises(ReplicaCallError, match="no replica"):
            await client.metadata(two.control_address, 2.0)

        await client.drain(one.control_address, 0.01, 1.0, replica_id="r1")
        assert (await client.metadata(one.control_address, 2.0)).phase == \
            PHASE.REPLICA_PHASE_DRAINING
        await asyncio.sleep(0.2)
        drained = await runtime.inspect(one.handle)
        assert drained is not None and (drained.alive, drained.exit_code) == (False, 0)
        assert await runtime.list("c") == []
    finally:
        await client.close()
        runtime.close()


async def test_a_sim_replica_fails_its_start_on_command_then_exits(sim_dir):
    runtime, client = SimRuntime(sim_dir), GrpcReplicaClient()
    try:
        await runtime._ask({"op": "set", "values": {"fail_next_starts": 1}})
        failed, fine = await runtime.start(launch("r1")), await runtime.start(launch("r2"))
        meta = await client.metadata(failed.control_address, 2.0)
        assert meta.phase == PHASE.REPLICA_PHASE_FAILED
        assert "start failed on command" in meta.error
        assert (await client.metadata(fine.control_address, 2.0)).phase == \
            PHASE.REPLICA_PHASE_LOADING
        await asyncio.sleep(1.2)
        gone = await runtime.inspect(failed.handle)
        assert gone is not None and (gone.alive, gone.exit_code) == (False, 1)
    finally:
        await client.close()
        runtime.close()


async def test_a_new_leaders_runtime_lists_the_replicas_another_started(sim_dir):
    first, second = SimRuntime(sim_dir), SimRuntime(sim_dir)
    try:
        started = await first.start(launch("r1"))
        await first.start(launch("r2", deployment="e"))
        first.close()
        listed = {r.replica_id: r for r in await second.list("c")}
        assert set(listed) == {"r1", "r2"}
        assert listed["r1"].control_address == started.control_address
        assert (listed["r2"].application, listed["r2"].deployment) == ("app", "e")
        assert await second.list("another cluster") == []
        await second.stop(started.handle, 1.0)
        assert {r.replica_id for r in await second.list("c")} == {"r2"}
    finally:
        second.close()


async def test_a_call_cancelled_before_its_answer_leaves_the_next_its_own(tmp_path):
    """The controller cancels runtime calls (a probe replaced by a stop, a term
    ending). A call cancelled after its request went out left its answer to
    be read by the next call: a start got a list, and two replicas one
    address. A host that answers late shows it."""
    async def late_host(reader, writer):
        while line := await reader.readline():
            await asyncio.sleep(0.1)
            request = json.loads(line)
            answer = [] if request["op"] == "list" else {
                "replica_id": request["launch"]["replica_id"], "cluster": "c",
                "application": "app", "deployment": "d", "version": "v1",
                "handle": "h", "control_address": "127.64.0.9:1", "http_address": ""}
            writer.write(json.dumps({"ok": answer}).encode() + b"\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(late_host, str(socket_path(tmp_path)))
    runtime = SimRuntime(tmp_path)
    try:
        assert await runtime.list("c") == []
        listing = asyncio.create_task(runtime.list("c"))
        await asyncio.sleep(0.02)  # sent, not answered
        listing.cancel()
        started = await runtime.start(launch("r9"))
        assert started.replica_id == "r9"
    finally:
        runtime.close()
        await asyncio.sleep(0.2)  # the host's side of each connection ends
        server.close()
        await server.wait_closed()


async def test_bad_requests_are_refused_naming_the_problem(sim_dir, tmp_path_factory):
    runtime = SimRuntime(sim_dir)
    try:
        await runtime.start(launch("r1"))
        with pytest.raises(RuntimeError, match="replica r1 runs already"):
            await runtime.start(launch("r1"))
        with pytest.raises(RuntimeError, match="action 'explode': one of exit"):
            await runtime._ask({"op": "act", "action": "explode", "replica_ids": ["r1"]})
        with pytest.raises(RuntimeError, match="no live replica r9"):
            await runtime._ask({"op": "act", "action": "exit", "replica_ids": ["r9"]})
        with pytest.raises(RuntimeError, match="unknown setting 'delay'"):
            await runtime._ask({"op": "set", "values": {"delay": 1}})
    finally:
        runtime.close()
    nowhere = SimRuntime(tmp_path_factory.mktemp("no-host"))
    with pytest.raises(OSError, match=r"no sim host at .*sim-host\.sock.*start python -m"):
        await nowhere.list("c")


@pytest.mark.slow
def test_the_benchmarks_quick_point_measures_every_figure():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--quick"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH-FIGURES "))
    figures = json.loads(line.removeprefix("BENCH-FIGURES "))
    prefix = "scale 20 replicas, 5 watchers: "
    for name in ("controller CPU", "controller RSS", "Deploy p99", "Deploy to every watcher p99",
                 "ready to every watcher p99", "exit to every watcher p99",
                 "autoscaling: decision", "failover: first update at every watcher",
                 "failover: every replica adopted"):
        value = figures[prefix + name]["samples"][0]
        assert math.isfinite(value) and value > 0, (name, value)


# -- what one change costs (docs/scale.md, "What breaks first") -----------------------


def test_a_replica_change_republishes_its_deployment_without_rebuilding_the_routes():
    """A replica becoming ready republished the route table, built from every
    deployment: each change cost O(deployments). The routes are rebuilt only
    when what they take of the deployment changed, or it came or went."""
    records = {("app", f"d{i}"): records_pb2.DeploymentRecord(spec=deployment_pb2.DeploymentSpec(
        application="app", name=f"d{i}", route_prefix=f"/d{i}")) for i in range(5)}
    running: dict[tuple[str, str], list] = {key: [] for key in records}
    full_reads, route_builds = [], []

    def goals():
        full_reads.append(1)
        return [r for _, r in sorted(records.items())]

    def http_options():  # read once per route table built
        route_builds.append(1)
        return application_pb2.HttpOptions()

    publisher = Publisher()
    state = StatePublisher(publisher, goals, lambda app, name: running[(app, name)],
                           http_options=http_options, goal=lambda app, name: records.get(
                               (app, name)))
    state.refresh_all()
    full_reads.clear()
    route_builds.clear()

    running[("app", "d3")] = [SimpleNamespace(
        record=replica_pb2.ReplicaRecord(replica_id="d3-1", http_address="127.0.0.1:1"),
        view=SimpleNamespace(cleared=0))]
    state.refresh("app", "d3")
    assert (full_reads, route_builds) == ([], [])
    endpoints = publisher.snapshot(replicas_key("app", "d3")).replicas.endpoints
    assert [e.replica_id for e in endpoints] == ["d3-1"]

    def prefixes() -> list[str]:
        return [r.route_prefix for r in publisher.snapshot(ROUTES_KEY).routes.routes]

    records[("app", "d3")].spec.route_prefix = "/three"
    state.refresh("app", "d3")
    assert prefixes() == ["/d0", "/d1", "/d2", "/d4", "/three"]
    del records[("app", "d1")]
    state.refresh("app", "d1")
    assert prefixes() == ["/d0", "/d2", "/d4", "/three"]
    assert publisher.snapshot(replicas_key("app", "d1")) is None
    records[("app", "d9")] = records_pb2.DeploymentRecord(spec=deployment_pb2.DeploymentSpec(
        application="app", name="d9", route_prefix="/d9"))
    running[("app", "d9")] = []
    state.refresh("app", "d9")
    assert "/d9" in prefixes()
