"""Any Python value through handles, from plain synchronous code, on real
processes: arrays out of band, objects, handles and DeploymentResponses as
arguments, the target's exceptions by type, streams of arrays; HTTP
results encoded as Ray Serve encodes them; and the two handle bugs of
issue 34 (handles in a replica calling 127.0.0.1:7373; routers cached across
a shutdown and a new run)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest

import servefleet
from servefleet import HandleError, get_deployment_handle
from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

APPS = str(Path(__file__).resolve().parent / "apps")
sys.path.insert(0, APPS)

import values_app  # noqa: E402 - from APPS

pytestmark = pytest.mark.slow
APPLICATIONS = {"vals": ("arrays_app", "/vals"), "caller": ("caller_app", "/caller"),
                "noparam": ("no_param_app", "/noparam"), "enc": ("encoded_app", "/enc")}


@pytest.fixture
def cluster(sqlite_fleet, tmp_path):
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    controllers = sqlite_fleet.addresses()
    with ControllerClient(controllers, timeout=30) as client:
        client.deploy_applications([apb.ApplicationSpec(
            name=name, import_path=f"values_app:{target}", route_prefix=prefix,
            runtime=dpb.RuntimeOptions(working_dir=APPS))
            for name, (target, prefix) in APPLICATIONS.items()])

        def running() -> bool:
            infos = [client.application_status(name) for name in APPLICATIONS]
            return all(i is not None and i.status == status_pb2.APPLICATION_STATUS_RUNNING
                       for i in infos)
        wait_for(running, 90, "the applications RUNNING")
        yield client, controllers
        servefleet._private.handles.handle.close_routers(controllers)
        client.shutdown()


def test_any_value_through_handles_from_plain_sync_code(cluster) -> None:
    _, controllers = cluster
    arrays = get_deployment_handle("Arrays", "vals", controllers)

    # A 1 MB array goes and comes back whole; values of many kinds travel as they are.
    big = np.random.default_rng(1).random(262144, dtype=np.float32)
    doubled = arrays.scale.remote(big).result(timeout_s=30)
    assert doubled.dtype == np.float32 and np.array_equal(doubled, big * 2)
    args, kwargs = arrays.echo.remote(Fraction(1, 3), {1, 2}, b"\x00raw", complex(1, 2),
                                      point=values_app.Point(1, 2)).result(timeout=30)
    assert args == (Fraction(1, 3), {1, 2}, b"\x00raw", complex(1, 2))
    assert kwargs == {"point": values_app.Point(1, 2)}
    # Arrays arrive over the received bytes (read-only, as Ray's do).
    assert arrays.writable.remote(big).result(timeout_s=30) is False

    # A DeploymentResponse as an argument is resolved first, at the top or nested.
    first = arrays.scale.remote(np.arange(4))
    assert arrays.total.remote(first).result(timeout_s=30) == 12.0
    nested = arrays.echo.remote([first, {"k": arrays.scale.remote(5)}]).result(timeout_s=30)
    assert np.array_equal(nested[0][0][0], np.arange(4) * 2) and nested[0][0][1] == {"k": 10}
    # A generator cannot be an argument: a clear error.
    rows = arrays.options(stream=True).rows.remote(2)
    with pytest.raises(TypeError, match="DeploymentResponseGenerator"):
        arrays.echo.remote(rows).result(timeout_s=30)

    # A handle travels as a handle; sync code in the replica calls it.
    assert np.array_equal(arrays.call_back.remote(arrays, np.ones(3)).result(timeout_s=30),
                          np.full(3, 3.0))

    # The target's exception: its own type, the replica's traceback as the cause.
    with pytest.raises(values_app.Refused, match="no thanks") as raised:
        arrays.refuse.remote("no thanks").result(timeout_s=30)
    assert "in refuse" in str(raised.value.__cause__)
    # One that cannot be pickled: a HandleError with its type and message.
    with pytest.raises(HandleError, match="Locked: holds a lock"):
        arrays.locked.remote().result(timeout_s=30)
    # A value that cannot be pickled fails the call, naming the problem.
    with pytest.raises(TypeError, match="pickle"):
        arrays.echo.remote(lambda_of_a_lock()).result(timeout_s=30)

    # Plain `for` over a stream, arrays as items; an exception ends it.
    assert [r.tolist() for r in arrays.options(stream=True).rows.remote(3)] == [
        [0, 0, 0], [1, 1, 1], [2, 2, 2]]
    got = []
    with pytest.raises(values_app.Refused, match="after one row"):
        for row in arrays.options(stream=True).broken_rows.remote():
            got.append(row)
    assert len(got) == 1

    # Inside a replica, a handle made without controllers calls the replica's
    # own (before: 127.0.0.1:7373, failing after 30 s).
    caller = get_deployment_handle("Caller", "caller", controllers)
    assert caller.remote(5).result(timeout_s=20) == 10.0


def lambda_of_a_lock():
    import threading

    return threading.Lock()


def test_http_results_are_encoded_as_ray_encodes_them(cluster, tmp_path) -> None:
    _, controllers = cluster
    proxy = ProxyProcess(controllers, log_dir=tmp_path).start()
    try:
        url = proxy.url
        wait_for(lambda: httpx.get(f"{url}/noparam", timeout=5).status_code == 200, 30,
                 "the routes at the proxy")
        # A function and a __call__ without a request parameter are called without one.
        assert httpx.get(f"{url}/noparam").text == "no request needed"
        assert httpx.get(f"{url}/vals").json() == {"no": "request"}

        def get(kind: str) -> httpx.Response:
            reply = httpx.get(f"{url}/enc", params={"kind": kind}, timeout=10)
            assert reply.status_code == 200, reply.text
            assert reply.headers["content-type"] == "application/json"
            return reply

        assert get("dataclass").json() == {"x": 1.0, "y": 2.5}
        assert get("array").json() == [[0.0, 1.0], [2.0, 3.0]]
        assert get("scalar").json() == 7
        assert get("pydantic").json() == {"sensor": "t1", "value": 0.5}
        assert get("nested").json() == {"points": [{"x": 0, "y": 1}], "n": 2.0, "s": [3]}
        assert get("tuple").json() == [1, "two"]
        assert get("none").json() is None
    finally:
        proxy.stop()


def test_handles_after_shutdown_and_a_new_run_reach_the_new_cluster() -> None:
    """Routers were cached by loop and application name only: after
    shutdown() and run() in one process, the same application's handle went
    to the old controllers' router ("unknown to the controller")."""
    from servefleet._private.handles import handle_router

    handle_router.DISCOVERY_TIMEOUT_S, before = 10.0, handle_router.DISCOVERY_TIMEOUT_S
    try:
        first = servefleet.run(values_app.arrays_app, name="vals", http_port=0)
        assert first.total.remote(np.arange(3)).result(timeout_s=30) == 3.0
        old = list(first.controllers)
        servefleet.shutdown()
        second = servefleet.run(values_app.arrays_app, name="vals", http_port=0)
        assert second.controllers != old
        assert second.total.remote(np.arange(4)).result(timeout_s=30) == 6.0
        # The old cluster's router is closed when asked, the new one stays.
        servefleet._private.handles.handle.close_routers(old)
        keys = [key for routers in handle_router._routers.values() for key in routers]
        assert ("vals", tuple(old)) not in keys and ("vals", tuple(second.controllers)) in keys
    finally:
        handle_router.DISCOVERY_TIMEOUT_S = before
        servefleet.shutdown()
