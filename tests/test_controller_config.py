"""ControllerConfig: the flag checks and the advertised address."""

from __future__ import annotations

import socket

import pytest

from servefleet.controller.config import ControllerConfig


def test_the_advertised_address_is_the_listen_address_unless_it_binds_everything() -> None:
    assert ControllerConfig("etcd://10.1.2.3:2379", listen="127.0.0.5:7000").advertised() \
        == "127.0.0.5:7000"
    assert ControllerConfig("etcd://127.0.0.1:2379", listen="0.0.0.0:7000",
                            advertise="ctl-1:7373").advertised() == "ctl-1:7373"


def test_binding_everything_advertises_the_address_that_reaches_the_store() -> None:
    # A controller in a Swarm stack listens on 0.0.0.0 of its node: others
    # must reach it where its node reaches etcd, not at a container's name.
    assert ControllerConfig("etcd://127.0.0.1:2379,10.9.9.9:2379",
                            listen="0.0.0.0:7373").advertised() == "127.0.0.1:7373"
    assert ControllerConfig("etcds://[::1]:2379", listen="[::]:7373").advertised() \
        == "[::1]:7373"
    # No network address to go by: the host's name.
    assert ControllerConfig("sqlite:///tmp/x.db", listen="0.0.0.0:7373").advertised() \
        == f"{socket.gethostname()}:7373"
    assert ControllerConfig("etcd://no-such-host.invalid:2379",
                            listen="0.0.0.0:7373").advertised() \
        == f"{socket.gethostname()}:7373"


def test_the_metrics_target_is_reachable_where_metrics_bind_everything() -> None:
    # The compose file's controllers: --advertise controller-1:7373 and
    # --metrics-listen 0.0.0.0:9101 listed 0.0.0.0:9101 to Prometheus.
    config = ControllerConfig("etcd://etcd:2379", listen="0.0.0.0:7373",
                              advertise="controller-1:7373", metrics_listen="0.0.0.0:9101")
    assert config.metrics_advertised() == "controller-1:9101"
    assert ControllerConfig("etcd://etcd:2379", advertise="[::1]:7373",
                            metrics_listen="[::]:9101").metrics_advertised() == "[::1]:9101"
    assert ControllerConfig("etcd://etcd:2379", metrics_listen="127.0.0.2:9101"
                            ).metrics_advertised() == "127.0.0.2:9101"
    assert ControllerConfig("etcd://etcd:2379").metrics_advertised() is None


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("listen", "nowhere", "--listen"), ("advertise", "host:0", "--advertise"),
    ("metrics_listen", ":80", "--metrics-listen"), ("runtime", "k8s", "--runtime"),
    ("docker_code", "copy", "--docker-code"), ("lease_ttl", 0.1, "--lease-ttl"),
    ("replica_host", "localhost:80", "--replica-host"),
])
def test_a_wrong_setting_is_named(field: str, value: object, flag: str) -> None:
    config = ControllerConfig("etcd://127.0.0.1:2379")
    setattr(config, field, value)
    with pytest.raises(ValueError, match=flag):
        config.validate()
