"""Passive health with real processes: a SIGSTOPped replica behind a proxy
and behind handles, a pool's lone replica, and a slow replica that answers
(the balancer's logic alone is in test_passive_health.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

APPS = str(Path(__file__).parent / "apps")


@contextlib.contextmanager
def two_slow_replicas(fleet, tmp_path, *proxy_args: str) -> Iterator[tuple]:
    """A controller (process runtime), two replicas of echo_app:Slow
    (max_ongoing_requests 4) and a proxy with `proxy_args`, serving:
    yields (client, proxy, URL of a 20 ms request, the first replica's record)."""
    import httpx

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    fleet.start(1, runtime="process")
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        client.deploy(d.DeploymentSpec(
            name="Slow", import_path="echo_app:Slow", route_prefix="/slow",
            runtime=d.RuntimeOptions(working_dir=APPS),
            # The check of a replica a proxy reports waits this long (30 s by
            # default: a busy replica answers late, not never).
            replica_config=d.ReplicaConfig(num_replicas=2, max_ongoing_requests=4,
                                           health_check_timeout_s=2)))
        proxy = ProxyProcess(fleet.addresses(), log_dir=tmp_path,
                             extra_args=list(proxy_args)).start()
        try:
            wait_for(lambda: len([r for r in client.replicas()
                                  if r.state == replica_pb2.REPLICA_STATE_RUNNING]) == 2, 60,
                     "2 replicas RUNNING")
            url = proxy.url + "/slow?s=0.02"
            wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
            yield client, proxy, url, client.replicas()[0].record
        finally:
            proxy.stop()
            client.shutdown()


@pytest.mark.slow
def test_a_stopped_replica_stops_getting_requests(sqlite_fleet, engine, tmp_path) -> None:
    """Two replicas behind a proxy under load from 8 clients; one is SIGSTOPped
    (hung, not dead: its connections stay open). It is ejected, and the GETs
    it holds go to the other replica once it has held them for the stall
    time while the other answered: no client sees an error, only latency.
    The proxy tells the controller, which replaces it within seconds."""
    import os
    import re
    import signal
    import time

    import httpx
    from loadgen import SteadyLoad

    from servefleet._private.testing import wait_for
    from servefleet.v1 import replica_pb2

    stopped = 0
    with two_slow_replicas(sqlite_fleet, tmp_path, "--engine", engine,
                           "--request-timeout-s", "4") as (client, proxy, url, victim):
        try:
            def replaced() -> bool:
                running = [r.record.replica_id for r in client.replicas()
                           if r.state == replica_pb2.REPLICA_STATE_RUNNING]
                return len(running) == 2 and victim.replica_id not in running
            with SteadyLoad(url, concurrency=8) as load:
                time.sleep(2)
                before = load.ok
                stopped = int(victim.handle.split(":")[0])
                os.kill(stopped, signal.SIGSTOP)
                hung_at = time.monotonic()
                # The proxy reports the ejection; the controller checks the
                # replica at once (its health_check_timeout_s, 2 s) and, as
                # another replica serves, replaces it on that one failure.
                # Periodic checks (every 10 s, 3 failures) would take longer.
                wait_for(replaced, 20, "the hung replica replaced")
                replaced_in = time.monotonic() - hung_at
                time.sleep(max(0.0, 10 - replaced_in))
            answered = load.ok - before
            slowest = max(load.latencies[-answered:])
            print(f"hung replica: {answered} answered in 10 s (slowest {slowest:.2f} s), "
                  f"{len(load.bad)} failed: {load.bad[:6]}; replaced in {replaced_in:.1f} s")
            if load.bad:
                print("\n".join(line for line in proxy.logs().splitlines()
                                if "WARNING" in line or "replicas" in line)[-4000:])
            assert answered > 100  # the other replica kept serving all 8 clients
            if engine == "haproxy":
                # HAProxy's checks hold it DOWN within 2 s and no request goes
                # there after; the ones it held when it stopped (at most its 4
                # slots) wait for their timeout: HAProxy cannot move a request
                # it sent (docs/guides/haproxy.md). Replaced as fast: reported.
                assert len(load.bad) <= 4 and all(b.startswith("504") for b in load.bad)
                return
            # Without passive health: its 4 slots' worth failed with 504 at
            # each 4 s timeout, a fresh 4 each time.
            assert load.bad == []
            assert slowest < 4  # moved on before the request timeout
            metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text

            def total(name: str, labels: str = "") -> float:
                return sum(float(v) for found, v in re.findall(
                    rf"^{name}\{{([^}}]*)\}} (\S+)$", metrics, re.M) if labels in found)
            assert total("servefleet_ejections_total") >= 1
            assert total("servefleet_retries_total", 'reason="hung"') >= 1
        finally:
            if stopped:
                os.kill(stopped, signal.SIGCONT)


@pytest.mark.slow
@pytest.mark.parametrize("retry_posts", [False, True], ids=["default", "retry_methods-POST"])
def test_handles_stop_calling_a_stopped_replica(sqlite_fleet, tmp_path, retry_posts) -> None:
    """The same through handles: Front calls Adder (2 replicas) twice per
    request; one Adder is SIGSTOPped. Handle calls are POSTs, by default not
    sent twice: those it holds fail at the request timeout, and the handle's
    router ejects it and reports it, so later calls go to the other Adder and
    the controller replaces the stopped one. With Adder's retry_methods
    listing POST, the calls it holds go to the other Adder: none fails."""
    import os
    import signal
    import time
    from pathlib import Path

    from loadgen import SteadyLoad

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import application_pb2 as apb
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy_applications([apb.ApplicationSpec(
            name="calc", import_path="graph_app:app", route_prefix="/calc",
            runtime=d.RuntimeOptions(working_dir=str(Path(__file__).parent / "apps")),
            deployments=[apb.DeploymentOverride(name="Adder", replica_config=d.ReplicaConfig(
                retry_methods=["POST"] if retry_posts else [], health_check_timeout_s=2))])])
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=["--request-timeout-s", "4"]).start()
        stopped = 0

        def adders() -> list[str]:
            return [r.record.replica_id for r in client.replicas(deployment="Adder")
                    if r.state == replica_pb2.REPLICA_STATE_RUNNING]
        try:
            wait_for(lambda: len(adders()) == 2, 60, "2 Adders RUNNING")
            url = proxy.url + "/calc?x=1"
            wait_for(lambda: httpx_ok(url), 30, "the route")
            (victim,) = [r.record for r in client.replicas(deployment="Adder")
                         if r.record.replica_id == adders()[0]]
            with SteadyLoad(url, concurrency=8) as load:
                time.sleep(2)
                stopped = int(victim.handle.split(":")[0])
                os.kill(stopped, signal.SIGSTOP)
                hung_at = time.monotonic()
                wait_for(lambda: len(adders()) == 2 and victim.replica_id not in adders(), 20,
                         "the stopped Adder replaced")
                replaced_in = time.monotonic() - hung_at
                # What it held times out 4 s after the stop; nothing fails after.
                time.sleep(max(0.0, hung_at + 5.5 - time.monotonic()))
                failed_by_then = len(load.bad)
                time.sleep(3)
            print(f"handles: {len(load.bad)} failed {load.bad[:4]}; replaced in "
                  f"{replaced_in:.1f} s")
            if retry_posts:
                assert load.bad == []
            else:
                # At most what it held when it stopped (Adder's max_ongoing_requests, 5).
                assert len(load.bad) <= 5 and all(b.startswith("504") for b in load.bad)
                assert len(load.bad) == failed_by_then  # none after those it held
        finally:
            if stopped:
                os.kill(stopped, signal.SIGCONT)
            proxy.stop()
            client.shutdown()


@pytest.mark.slow
def test_a_lone_stopped_replica_is_replaced(sqlite_fleet, tmp_path) -> None:
    """One replica, SIGSTOPped under load. It is not ejected (the pool would be
    empty): requests wait for it or time out. The proxy reports it as a
    suspect and the controller checks it at once, and again every 5 s while
    reported; being the only replica, it is replaced after three failed
    checks in a row, not on one (a busy replica must not lose its model),
    but well before its periodic checks (10 s apart) would have; then
    requests succeed again."""
    import os
    import signal
    import time
    from pathlib import Path

    from loadgen import SteadyLoad

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(d.DeploymentSpec(
            name="Slow", import_path="echo_app:Slow", route_prefix="/slow",
            runtime=d.RuntimeOptions(working_dir=str(Path(__file__).parent / "apps")),
            replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=4,
                                           health_check_timeout_s=2,
                                           health_check_period_s=60)))
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=["--request-timeout-s", "4"]).start()
        stopped = 0

        def running() -> list[str]:
            return [r.record.replica_id for r in client.replicas()
                    if r.state == replica_pb2.REPLICA_STATE_RUNNING]
        try:
            wait_for(lambda: len(running()) == 1, 60, "the replica RUNNING")
            url = proxy.url + "/slow?s=0.02"
            wait_for(lambda: httpx_ok(url), 30, "the route")
            victim = client.replicas()[0].record
            with SteadyLoad(url, concurrency=4) as load:
                time.sleep(1)
                stopped = int(victim.handle.split(":")[0])
                os.kill(stopped, signal.SIGSTOP)
                hung_at = time.monotonic()
                wait_for(lambda: running() and victim.replica_id not in running(), 40,
                         "the stopped replica replaced")
                replaced_in = time.monotonic() - hung_at
                time.sleep(2)
                ok_before = load.ok
                time.sleep(2)
                ok_after = load.ok - ok_before
            print(f"lone replica: replaced in {replaced_in:.1f} s; {len(load.bad)} failed "
                  f"{load.bad[:4]}; {ok_after} answered in the last 2 s")
            assert replaced_in < 30
            failed = [line for line in sqlite_fleet.dump_logs().splitlines()
                      if victim.replica_id in line and "failed: 'health check" in line]
            assert failed and "3 times in a row" in failed[0], failed
            assert all(b.startswith(("504", "503")) for b in load.bad)
            assert ok_after > 20  # served by the new replica
        finally:
            if stopped:
                os.kill(stopped, signal.SIGCONT)
            proxy.stop()
            client.shutdown()


@pytest.mark.slow
def test_a_slow_replica_that_answers_keeps_serving_a_smaller_share(sqlite_fleet,
                                                                   tmp_path) -> None:
    """Two replicas, one 10x slower than the other (200 ms against 20 ms),
    8 clients through the proxy: nothing is ejected or retried as hung, and
    the balancer alone (least in flight of two) sends the slow one less."""
    import asyncio
    import json
    import re
    from pathlib import Path

    import httpx

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(d.DeploymentSpec(
            name="Lopsided", import_path="echo_app:Lopsided", route_prefix="/l",
            init_args_json=json.dumps([str(tmp_path / "slow-one")]),
            runtime=d.RuntimeOptions(working_dir=str(Path(__file__).parent / "apps")),
            replica_config=d.ReplicaConfig(num_replicas=2, max_ongoing_requests=8)))
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
        try:
            wait_for(lambda: len([r for r in client.replicas()
                                  if r.state == replica_pb2.REPLICA_STATE_RUNNING]) == 2, 60,
                     "2 replicas RUNNING")
            wait_for(lambda: httpx_ok(proxy.url + "/l"), 30, "the route")
            answers: list[bool] = []
            failed: list[int] = []

            async def load() -> None:
                async with httpx.AsyncClient(timeout=10) as http:
                    end = asyncio.get_running_loop().time() + 6

                    async def worker() -> None:
                        while asyncio.get_running_loop().time() < end:
                            response = await http.get(proxy.url + "/l")
                            if response.status_code == 200:
                                answers.append(response.json()["slow"])
                            else:
                                failed.append(response.status_code)
                    await asyncio.gather(*[worker() for _ in range(8)])
            asyncio.run(load())
            metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text
            ejections = sum(float(v) for v in re.findall(
                r"^servefleet_ejections_total\{[^}]*\} (\S+)$", metrics, re.M))
            hung = sum(float(v) for v in re.findall(
                r'^servefleet_retries_total\{[^}]*reason="hung"[^}]*\} (\S+)$', metrics, re.M))
            share = sum(answers) / len(answers)
            print(f"slow replica: {share:.0%} of {len(answers)} answers; ejections "
                  f"{ejections:.0f}, hung retries {hung:.0f}")
            assert failed == [] and ejections == 0 and hung == 0
            assert any(answers) and share < 0.3  # an even split would be 0.5
        finally:
            proxy.stop()
            client.shutdown()


def httpx_ok(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_a_replica_that_answers_the_controllers_check_comes_back_early(sqlite_fleet,
                                                                       tmp_path) -> None:
    """A replica that hangs for a moment (SIGSTOP, then SIGCONT once the proxy
    ejected it) answers the check the controller makes because of the
    ejection; the replica set it publishes then says so, and the proxy takes
    the replica back before its ejection period (5 s) would have ended. The
    replica is not replaced."""
    import os
    import re
    import signal
    import time

    import httpx
    from loadgen import SteadyLoad

    from servefleet._private.dataplane.balancer import EJECT_BASE_S
    from servefleet._private.testing import wait_for
    from servefleet.v1 import replica_pb2

    stopped = 0
    with two_slow_replicas(sqlite_fleet, tmp_path) as (client, proxy, url, victim):
        victim_pid = int(victim.handle.split(":")[0])
        try:
            def ejections() -> float:
                metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text
                return sum(float(v) for v in re.findall(
                    r"^servefleet_ejections_total\{[^}]*\} (\S+)$", metrics, re.M))
            with SteadyLoad(url, concurrency=4):
                time.sleep(1)
                os.kill(victim_pid, signal.SIGSTOP)
                stopped = victim_pid
                wait_for(lambda: ejections() >= 1, 20, "the stopped replica ejected")
                ejected_at = time.monotonic()
                os.kill(victim_pid, signal.SIGCONT)
                stopped = 0
                wait_for(lambda: "passed the controller's health check" in proxy.logs(), 20,
                         "the proxy taking the replica back")
                back_in = time.monotonic() - ejected_at

                def answered_by_victim() -> bool:
                    pids = {httpx.get(url, timeout=5).json()["pid"] for _ in range(8)}
                    return victim_pid in pids
                wait_for(answered_by_victim, 10, "the replica serving again")
            print(f"ejected, then back {back_in:.1f} s later (its period: {EJECT_BASE_S} s)")
            assert back_in < EJECT_BASE_S
            running = {r.record.replica_id for r in client.replicas()
                       if r.state == replica_pb2.REPLICA_STATE_RUNNING}
            assert victim.replica_id in running  # checked and kept, not replaced
        finally:
            if stopped:
                os.kill(stopped, signal.SIGCONT)
