"""The replica process on its own: load failures, draining, forced exit."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import ReplicaProcess
from servefleet.controller.runtime import ReplicaLaunch
from servefleet.controller.runtime.process import ProcessRuntime
from servefleet.v1 import replica_pb2

APPS = str(Path(__file__).parent / "apps")
PHASE = replica_pb2.ReplicaPhase


@pytest.fixture
def replicas(tmp_path):
    started: list[ReplicaProcess] = []

    def start(import_path: str, **settings) -> ReplicaProcess:
        replica = ReplicaProcess(tmp_path, import_path, working_dir=APPS, **settings)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.close()


@pytest.mark.parametrize(("import_path", "expected"), [
    ("no_such_module:App", "ModuleNotFoundError"),
    ("echo_app:Missing", "has no attribute"),
])
def test_load_failure_is_reported_then_the_replica_exits(replicas, import_path,
                                                          expected) -> None:
    replica = replicas(import_path)
    meta = replica.wait_phase(PHASE.REPLICA_PHASE_FAILED)
    assert expected in meta.error and "Traceback" in meta.traceback
    replica.stub.Drain(replica_pb2.DrainRequest(wait_loop_s=0.05, timeout_s=5))
    assert replica.proc.wait(15) == 1


def test_the_date_header_is_the_time_of_the_response(replicas) -> None:
    replica = replicas("echo_app:hello")
    replica.wait_phase(PHASE.REPLICA_PHASE_READY)
    started = time.time()
    time.sleep(2.2)
    reply = httpx.get(f"http://127.0.0.1:{replica.http}/")
    assert reply.status_code == 200
    # Second resolution: the date is at least the whole second two seconds on.
    assert parsedate_to_datetime(reply.headers["date"]).timestamp() >= int(started) + 2


def test_sigterm_waits_for_in_flight_requests(replicas) -> None:
    replica = replicas("echo_app:slow", graceful_shutdown_wait_loop_s=0.1,
                       graceful_shutdown_timeout_s=10)
    replica.wait_phase(PHASE.REPLICA_PHASE_READY)
    result: dict[str, object] = {}

    def call() -> None:
        reply = httpx.get(f"http://127.0.0.1:{replica.http}/", params={"s": "1.5"}, timeout=20)
        result["status"], result["text"] = reply.status_code, reply.text

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.5)
    replica.proc.send_signal(signal.SIGTERM)
    caller.join(20)
    assert result == {"status": 200, "text": "slept"}
    assert replica.proc.wait(15) == 0


def test_a_draining_replica_serves_one_wait_loop_then_refuses(replicas) -> None:
    """Ray Serve's order: a caller that has not yet applied the replica set
    without this replica (an HAProxy engine whose update lags, with no other
    replica to retry on) is served during the first wait loop; after it, new
    requests get the clean refusal while those in flight finish."""
    replica = replicas("echo_app:slow", graceful_shutdown_wait_loop_s=1.5,
                       graceful_shutdown_timeout_s=20)
    replica.wait_phase(PHASE.REPLICA_PHASE_READY)
    url = f"http://127.0.0.1:{replica.http}/"
    held: dict[str, int] = {}
    holder = threading.Thread(target=lambda: held.update(status=httpx.get(
        url, params={"s": "4"}, timeout=20).status_code), daemon=True)
    holder.start()
    time.sleep(0.3)
    replica.stub.Drain(replica_pb2.DrainRequest(wait_loop_s=1.5, timeout_s=20))
    early = httpx.get(url, params={"s": "0"}, timeout=10)
    assert (early.status_code, early.text) == (200, "slept")
    time.sleep(2.0)  # past the first wait loop; the held request is in flight still
    late = httpx.get(url, params={"s": "0"}, timeout=10)
    assert late.status_code == 503 and late.headers["x-servefleet-rejected"] == "draining"
    holder.join(20)
    assert held == {"status": 200}
    assert replica.proc.wait(15) == 0


def test_drain_is_forced_after_the_timeout(replicas) -> None:
    replica = replicas("echo_app:slow", graceful_shutdown_wait_loop_s=0.1,
                       graceful_shutdown_timeout_s=30)
    replica.wait_phase(PHASE.REPLICA_PHASE_READY)
    caller = threading.Thread(target=lambda: httpx.get(
        f"http://127.0.0.1:{replica.http}/", params={"s": "60"}, timeout=90), daemon=True)
    caller.start()
    time.sleep(0.5)
    started = time.monotonic()
    # The drain request's timeout overrides the replica's own 30 s.
    replica.stub.Drain(replica_pb2.DrainRequest(wait_loop_s=0.1, timeout_s=1))
    replica.proc.wait(15)
    assert time.monotonic() - started < 10, "the replica waited past its drain timeout"


async def test_runtimes_in_different_dirs_do_not_see_each_others_replicas(tmp_path) -> None:
    mine = ProcessRuntime(tmp_path / "a", "shared-name")
    theirs = ProcessRuntime(tmp_path / "b", "shared-name")
    launched = await mine.start(ReplicaLaunch(
        cluster="shared-name", application="a", deployment="d", replica_id="r1",
        version="v", working_dir=APPS, settings={"import_path": "echo_app:hello"}))
    try:
        assert [r.replica_id for r in await mine.list("shared-name")] == ["r1"]
        assert await theirs.list("shared-name") == []
    finally:
        await mine.stop(launched.handle, 5)
    assert await mine.list("shared-name") == []
    mine.close()
    theirs.close()


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode()


async def test_the_zygote_forks_replicas_that_are_found_and_report_exit_codes(
        tmp_path) -> None:
    import asyncio

    # Deep enough that the socket's full path would not fit a socket address.
    deep = tmp_path / ("runtime-dir-" + "x" * 90)
    runtime = ProcessRuntime(deep, "zy")

    def launch(replica_id: str, **settings) -> ReplicaLaunch:
        return ReplicaLaunch(cluster="zy", application="a", deployment="d",
                             replica_id=replica_id, version="v", working_dir=APPS,
                             settings=settings or {"import_path": "echo_app:hello"})

    started = [await runtime.start(launch("r0"))]  # starts the zygote (r0: a new process)
    try:
        for _ in range(200):  # the zygote imports, then listens
            if list((deep / "zy").glob("zygote-*.sock")):
                break
            await asyncio.sleep(0.05)
        started.append(await runtime.start(launch("r1")))
        forked_pid = int(started[1].handle.partition(":")[0])
        assert "servefleet.replica.zygote" in _cmdline(forked_pid), "r1 was not forked"
        # Found by its identity record, as a new leader's runtime would find it.
        other = ProcessRuntime(deep, "zy")
        assert {r.replica_id for r in await other.list("zy")} == {"r0", "r1"}
        # A forked replica that exits on its own: the zygote records its exit code.
        broken = await runtime.start(launch("r2", bogus_setting=1))
        for _ in range(200):
            seen = await runtime.inspect(broken.handle)
            if seen is not None and not seen.alive:
                break
            await asyncio.sleep(0.05)
        assert seen is not None and (seen.alive, seen.exit_code) == (False, 2)  # bad settings
    finally:
        for replica in started:
            await runtime.stop(replica.handle, 5)
        runtime.close()
    assert await runtime.list("zy") == []


def test_a_zygote_whose_controller_is_already_gone_exits(tmp_path) -> None:
    """A controller killed while its zygote was still importing: the zygote is
    init's child by the time it listens, and used to take init for the
    controller and serve forever (found left over after a failover test)."""
    import subprocess
    import sys

    gone = subprocess.Popen(["true"])
    gone.wait()
    zygote = subprocess.Popen([sys.executable, "-m", "servefleet.replica.zygote",
                               "--state-dir", str(tmp_path), "--parent-pid", str(gone.pid)])
    try:
        assert zygote.wait(30) == 0
    finally:
        zygote.kill()


COUNT_SIGNALS = """
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
print("ready", flush=True)
sys.stdin.readline()
count = 0
while signal.sigtimedwait({signal.SIGRTMIN}, 0.5) is not None:
    count += 1
print(count, flush=True)
"""


@pytest.mark.parametrize("own_group", [True, False])
def test_a_stopped_replica_is_signalled_once(own_group: bool) -> None:
    """The runtime signals a replica's process group, and the replica itself
    only when it leads none. It used to do both: the replica took the second
    SIGTERM for "stop now" and cut its calls in flight (proxyless gRPC callers
    saw "Stream removed" during scale-downs). A real-time signal, which queues
    where SIGTERM may merge, counts the deliveries."""
    import subprocess
    import sys

    from servefleet.controller.runtime.process import _signal_group

    with subprocess.Popen([sys.executable, "-c", COUNT_SIGNALS], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True,
                          start_new_session=own_group) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            _signal_group(child.pid, signal.SIGRTMIN)
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "1"
        finally:
            child.kill()


async def test_replicas_bind_and_are_reached_at_the_runtimes_host(tmp_path) -> None:
    """--replica-host: proxies in another network namespace or on another host
    reach process replicas at that address, not at loopback's first."""
    runtime = ProcessRuntime(tmp_path, "hosted", host="127.0.0.7")
    launched = await runtime.start(ReplicaLaunch(
        cluster="hosted", application="a", deployment="d", replica_id="r1", version="v",
        working_dir=APPS, settings={"import_path": "echo_app:hello"}))
    try:
        assert launched.http_address.startswith("127.0.0.7:")
        assert launched.control_address.startswith("127.0.0.7:")
        port = int(launched.http_address.rpartition(":")[2])
        async with httpx.AsyncClient(timeout=2) as client:
            answer = None
            for _ in range(300):  # up once it answers; not at 127.0.0.1
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.post(f"http://127.0.0.7:{port}/", json={})
                    if answer.status_code != 503:
                        break
                await asyncio.sleep(0.1)
            assert answer is not None and answer.status_code == 200
            with pytest.raises(httpx.ConnectError):
                await client.post(f"http://127.0.0.1:{port}/", json={})
    finally:
        await runtime.stop(launched.handle, 5)
        runtime.close()
