"""deploy/prometheus.tls.yml, the Prometheus of the TLS compose file, run for
real (Debian's prometheus and promtool, no Docker) against a controller,
proxy and replica with certificates: the controllers over HTTPS with the
reader certificate `certs issue` writes, the proxy and the replica over
plain HTTP, all found through the controller's /-/metrics-targets."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from servefleet._private.security.certs import init_certs, issue_cert
from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
COMPOSE_CONTROLLERS = ("controller-1:9101", "controller-2:9101", "controller-3:9101")


def config_for(source: Path, certs: Path, controller_metrics: str) -> str:
    """The compose file's config with this test's paths and addresses: the
    certificates' directory for /certs, the one controller for all three."""
    text = source.read_text().replace("/certs/", f"{certs}/")
    for name in COMPOSE_CONTROLLERS:
        assert name in text
        text = text.replace(name, controller_metrics)
    return text


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} here (Debian's prometheus package has it)")
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("prometheus-tls")
    certs = base / "certs"
    init_certs(certs)
    issue_cert(certs, "prometheus", "reader")
    metrics = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{base}/state.db", log_dir=base, certs=certs,
                                   extra_args=["--metrics-listen", metrics])
    controller.start()
    proxy = ProxyProcess([controller.address], log_dir=base,
                         extra_args=["--certs", str(certs), "--admin-paths", "public"])
    client = ControllerClient([controller.address], timeout=30,
                              credentials=controller.credentials)
    try:
        client.deploy(dpb.DeploymentSpec(
            name="Hello", import_path="echo_app:hello", route_prefix="/hello",
            runtime=dpb.RuntimeOptions(working_dir=APPS),
            replica_config=dpb.ReplicaConfig(num_replicas=1)))
        proxy.start()
        yield {"base": base, "certs": certs, "metrics": metrics}
    finally:
        stop_cluster(controller, client, [proxy])


def scraped(port: int, job: str, component: str) -> int:
    try:
        reply = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", timeout=5, params={
            "query": f'up{{job="{job}",component="{component}"}} == 1'})
        return len(reply.json()["data"]["result"])
    except (httpx.HTTPError, KeyError, ValueError):
        return 0


@contextlib.contextmanager
def run_prometheus(cluster: dict, source: Path) -> Iterator[int]:
    config = cluster["base"] / f"{source.stem}.yml"
    config.write_text(config_for(source, cluster["certs"], cluster["metrics"]))
    port = free_port()
    data = cluster["base"] / f"data-{port}"
    with open(cluster["base"] / f"prometheus-{port}.log", "w") as log:
        process = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(30)


def test_the_tls_config_is_valid(cluster: dict) -> None:
    config = cluster["base"] / "checked.yml"
    config.write_text(config_for(ROOT / "deploy/prometheus.tls.yml", cluster["certs"],
                                 cluster["metrics"]))
    done = subprocess.run([tool("promtool"), "check", "config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_scrapes_every_component_of_a_tls_cluster(cluster: dict) -> None:
    with run_prometheus(cluster, ROOT / "deploy/prometheus.tls.yml") as port:
        wait_for(lambda: scraped(port, "servefleet-controllers", "controller") == 1
                 and scraped(port, "servefleet", "proxy") == 1
                 and scraped(port, "servefleet", "replica") == 1, 90,
                 "Prometheus scraping the controller over HTTPS, the proxy and the replica")
