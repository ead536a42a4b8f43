"""Property: random specs sent to Deploy never crash the controller or half-write.

Against a real controller process on the test etcd. For every spec:
- the reply is OK or a deliberate refusal (never INTERNAL or UNKNOWN);
- a refusal changes nothing in etcd; an OK changes at most the one record
  it names, which then holds the version the reply reported;
- the controller still answers health checks and GetStatus afterwards.
"""

from __future__ import annotations

import asyncio
import json
import math

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from servefleet._private.testing import ControllerProcess
from servefleet.controller.goals.grpc_fields import IMPORT_PATH_RE
from servefleet.controller.goals.spec import NAME_RE
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store.etcd import EtcdStore
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, records_pb2
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow

REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.ALREADY_EXISTS}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
uint32 = st.integers(0, 2**32 - 1)
any_float = st.floats(allow_nan=True, allow_infinity=True)


def _present(**fields):
    return {k: v for k, v in fields.items() if v is not None}


def _optional(strategy):
    return st.one_of(st.none(), strategy)


# Each field has a strategy of values the rules accept and one of anything the
# wire allows. A spec is all-valid, valid but for one wild field, or all wild,
# so accepted and refused deploys are both common.
VALID = {
    "name": st.sampled_from(["Model", "m-1", "Other"]),
    "application": st.sampled_from(["", "app", "default"]),
    "import_path": st.from_regex(IMPORT_PATH_RE, fullmatch=True),
    "init_args_json": st.one_of(st.just(""), st.lists(json_values, max_size=3).map(json.dumps)),
    "init_kwargs_json": st.one_of(st.just(""), st.dictionaries(st.text(max_size=5), json_values,
                                                               max_size=3).map(json.dumps)),
    "user_config_json": st.one_of(st.just(""), json_values.map(json.dumps)),
    "num_replicas": _optional(st.integers(0, 20)),
    "max_ongoing_requests": _optional(st.integers(1, 1000)),
    "max_queued_requests": _optional(st.integers(-1, 1000)),
    "health_check_period_s": _optional(st.floats(0.1, 100)),
    "version": st.sampled_from(["", "v1", "v2"]),
    "prev_version": st.sampled_from(["", "", "v1"]),
    "route_prefix": st.sampled_from([None, "/", "/a", "/a/b"]),
    "autoscaling": st.none(),
}
# JSON texts that parse in Python but cannot be stored as JSON.
AWKWARD_JSON = st.sampled_from(['"\\ud800"', "1e400", "[1e999]", "NaN", '{"a": Infinity}'])

WILD = {
    "name": st.one_of(st.text(max_size=70), st.sampled_from(["Model\n", "Model\r", "-x"])),
    "application": st.text(max_size=70),
    "import_path": st.text(max_size=30),
    "init_args_json": st.one_of(st.text(max_size=20), AWKWARD_JSON.map(lambda t: f"[{t}]")),
    "init_kwargs_json": st.one_of(st.text(max_size=20), json_values.map(json.dumps)),
    "user_config_json": st.one_of(st.text(max_size=20), AWKWARD_JSON),
    "num_replicas": uint32,
    "max_ongoing_requests": uint32,
    "max_queued_requests": st.integers(-(2**31), 2**31 - 1),
    "health_check_period_s": any_float,
    "version": st.text(max_size=140),
    "prev_version": st.text(max_size=10),
    "route_prefix": st.one_of(st.text(max_size=12), st.sampled_from(["/a\n", "/a/", "a"])),
    "autoscaling": st.builds(
        lambda mn, mx, target: d.AutoscalingConfig(**_present(
            min_replicas=mn, max_replicas=mx, target_ongoing_requests=target)),
        _optional(st.integers(0, 30)), _optional(st.integers(0, 30)), _optional(any_float)),
}


def _spec(f: dict) -> d.DeploymentSpec:
    config = d.ReplicaConfig(**_present(
        num_replicas=f["num_replicas"], max_ongoing_requests=f["max_ongoing_requests"],
        max_queued_requests=f["max_queued_requests"], user_config_json=f["user_config_json"],
        health_check_period_s=f["health_check_period_s"], autoscaling_config=f["autoscaling"]))
    return d.DeploymentSpec(**_present(
        name=f["name"], application=f["application"], import_path=f["import_path"],
        init_args_json=f["init_args_json"], init_kwargs_json=f["init_kwargs_json"],
        replica_config=config, version=f["version"], prev_version=f["prev_version"],
        route_prefix=f["route_prefix"]))


def _specs_from(choices: dict) -> st.SearchStrategy[d.DeploymentSpec]:
    return st.fixed_dictionaries(choices).map(_spec)


specs = st.one_of(
    _specs_from(VALID),
    st.sampled_from(sorted(VALID)).flatmap(lambda wild: _specs_from({**VALID, wild: WILD[wild]})),
    _specs_from(WILD),
)


def _no_constants(name: str) -> None:
    raise AssertionError(f"stored JSON holds {name}")


def snapshot(endpoint: str, cluster: str) -> dict[str, tuple[int, bytes]]:
    async def read() -> dict[str, tuple[int, bytes]]:
        store = EtcdStore([endpoint])
        try:
            kvs = await store.list_prefix(ClusterKeys(cluster).deployments)
            return {kv.key: (kv.mod_revision, kv.value) for kv in kvs}
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture(scope="module")
def controller(etcd, tmp_path_factory):
    proc = ControllerProcess(etcd.url, cluster="property", runtime="none",
                             log_dir=tmp_path_factory.mktemp("property")).start()
    deadline_ok = False
    for _ in range(200):
        if proc.is_leader():
            deadline_ok = True
            break
        asyncio.run(asyncio.sleep(0.05))
    assert deadline_ok, proc.logs()
    yield proc
    proc.stop()


# The strategies use no `random`; Hypothesis's check that the global random
# state did not move while it drew sees other threads too (a background
# thread an earlier test in the same pytest-xdist worker left behind, using
# `random` for a jitter), and failed a CI run so.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=specs)
def test_random_specs(controller: ControllerProcess, etcd, spec: d.DeploymentSpec) -> None:
    before = snapshot(etcd.endpoint, "property")
    with grpc.insecure_channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        try:
            reply = stub.Deploy(api.DeployRequest(spec=spec), timeout=10)
            error = None
        except grpc.RpcError as e:
            reply, error = None, e
        after = snapshot(etcd.endpoint, "property")
        event("refused: " + error.code().name if error else f"ok, updating={reply.updating}")
        if error is not None:
            assert error.code() in REFUSALS, (error.code(), error.details())
            assert after == before, "a refused deploy changed the store"
        else:
            key = ClusterKeys("property").deployment(spec.application or "default", spec.name)
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert changed == ({key} if reply.updating else set())
            record = records_pb2.DeploymentRecord.FromString(after[key][1])
            assert record.version == reply.version and not record.deleted
            config = record.spec.replica_config
            assert math.isfinite(config.health_check_period_s)
            # What was accepted obeys the rules, and its JSON is strict JSON.
            assert NAME_RE.fullmatch(record.spec.name)
            for text in (record.spec.init_args_json, record.spec.init_kwargs_json,
                         config.user_config_json):
                if text:
                    json.loads(text, parse_constant=_no_constants)
                    text.encode("utf-8")
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1
        stub.GetStatus(api.GetStatusRequest(), timeout=5)
