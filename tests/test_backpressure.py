"""Ray's BackpressureConfig: the option, the controller's check of it, and
the answer proxies give from the replica set (dataplane/backpressure.py)."""

from __future__ import annotations

import pytest

from servefleet._private.configuration.option_checks import OptionError
from servefleet._private.configuration.options import to_override
from servefleet._private.dataplane.backpressure import Backpressure
from servefleet.controller.errors import InvalidArgument
from servefleet.controller.goals.spec import normalize_spec
from servefleet.serve.config import BackpressureConfig
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import watch_pb2


def test_the_option_takes_rays_class_or_its_fields() -> None:
    given = BackpressureConfig(status_code=429, retry_after_s=2.5)
    for value in (given, {"status_code": 429, "retry_after_s": 2.5}):
        backpressure = to_override("d", {"backpressure_config": value}).replica_config.backpressure
        assert (backpressure.status_code, backpressure.retry_after_s) == (429, 2.5)
    # Ray's defaults, given or not, set nothing: the controller's default is 503.
    untouched = to_override("d", {"backpressure_config": BackpressureConfig()}).replica_config
    assert not untouched.HasField("backpressure")
    with pytest.raises(OptionError, match="status_code: must be one of 503, 429, got 500"):
        to_override("d", {"backpressure_config": {"status_code": 500}})
    with pytest.raises(OptionError, match="unknown key"):
        to_override("d", {"backpressure_config": {"status": 429}})
    with pytest.raises(ValueError, match="must be 503 or 429"):
        BackpressureConfig(status_code=404)
    with pytest.raises(ValueError, match="retry_after_s"):
        BackpressureConfig(retry_after_s=-1)


def spec(status: int = 0, retry: float | None = None) -> d.DeploymentSpec:
    backpressure = d.BackpressureConfig(status_code=status)
    if retry is not None:
        backpressure.retry_after_s = retry
    return d.DeploymentSpec(name="M", import_path="m:M",
                            replica_config=d.ReplicaConfig(backpressure=backpressure))


def test_the_controller_checks_it_and_keeps_only_what_differs_from_the_default() -> None:
    assert not normalize_spec(spec(503)).replica_config.HasField("backpressure")
    kept = normalize_spec(spec(429, 0.5)).replica_config.backpressure
    assert (kept.status_code, kept.retry_after_s) == (429, 0.5)
    with pytest.raises(InvalidArgument, match=r"backpressure\.status_code"):
        normalize_spec(spec(404))
    with pytest.raises(InvalidArgument, match=r"backpressure\.retry_after_s"):
        normalize_spec(spec(429, -1.0))


def test_the_proxys_answer_comes_from_the_replica_set() -> None:
    assert Backpressure.of(watch_pb2.ReplicaSet()) == Backpressure(503, None)
    assert Backpressure(503, None).headers() == ()
    chosen = Backpressure.of(watch_pb2.ReplicaSet(backpressure_status_code=429,
                                                  backpressure_retry_after_s=2.1))
    assert chosen.status == 429
    assert chosen.headers() == ((b"retry-after", b"3"),)  # rounded up, as Ray does
