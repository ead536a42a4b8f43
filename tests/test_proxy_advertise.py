"""`servefleet proxy --advertise HOST[:PORT]`: the address the controllers
list the proxy at (GetStatus, /-/metrics-targets). Without it a proxy that
listens on every interface registers as this host's name, which in a
Kubernetes Pod is the Pod's name and resolves nowhere; the chart gives the
Pod's IP. And --controller-server-name, the name a proxy expects in the
controllers' certificates instead of the address it dials."""

from __future__ import annotations

import httpx
import pytest

from servefleet._private.cli.errors import UsageError
from servefleet._private.cli.proxy_cmd import advertised
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_for
from servefleet.client import ControllerClient


@pytest.mark.parametrize(("flag", "address"), [
    ("10.0.0.7", "10.0.0.7:8000"), ("10.0.0.7:9000", "10.0.0.7:9000"),
    ("proxy-a.internal", "proxy-a.internal:8000"), ("fd00::5", "[fd00::5]:8000"),
    ("[fd00::5]", "[fd00::5]:8000"), ("[fd00::5]:81", "[fd00::5]:81")])
def test_the_port_is_the_listen_port_unless_given(flag: str, address: str) -> None:
    assert advertised(flag, "0.0.0.0:8000") == address
    assert advertised(None, "0.0.0.0:8000") is None


@pytest.mark.parametrize("flag", ["", ":8000", "10.0.0.7:http", "10.0.0.7:70000",
                                  "http://10.0.0.7", "[fd00::5]x", "a b"])
def test_a_bad_address_is_refused_by_name(flag: str) -> None:
    with pytest.raises(UsageError, match=r"^--advertise .*: expected HOST or HOST:PORT"):
        advertised(flag, "0.0.0.0:8000")


def test_the_controllers_list_the_proxy_at_its_advertised_address(tmp_path, cluster) -> None:
    """A proxy on 127.0.0.1 that says it is 127.0.0.9 is listed there, with
    its own port, in GetStatus and among the scrape targets."""
    metrics = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path,
                                   extra_args=["--metrics-listen", metrics]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path,
                         extra_args=["--advertise", "127.0.0.9"])
    client = ControllerClient([controller.address], timeout=30)
    try:
        proxy.start()
        wanted = f"127.0.0.9:{proxy.port}"
        wait_for(lambda: [p.address for p in client.status().proxies] == [wanted], 30,
                 f"the proxy listed at {wanted}")
        groups = httpx.get(f"http://{metrics}/-/metrics-targets").json()
        assert [g["targets"] for g in groups if g["labels"]["component"] == "proxy"] == [[wanted]]
    finally:
        client.close()
        proxy.stop()
        controller.stop()


def test_a_server_name_with_spaces_or_a_port_is_refused(tmp_path) -> None:
    for name in ("controller servefleet", "controller.servefleet:7373", ""):
        proxy = ProxyProcess(["127.0.0.1:1"], log_dir=tmp_path,
                             extra_args=["--controller-server-name", name])
        with pytest.raises(RuntimeError, match="--controller-server-name"):
            proxy.start()
