"""deploy/docker-compose.yml, brought up for real with the host-network override.

etcd runs from an image made here from Debian's etcd binary (no registry);
servefleet from the image scripts/docker-image builds. Skipped without a
Docker engine, unless SERVEFLEET_DOCKER_TESTS=required.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import PLAIN, Credentials, TlsFiles
from servefleet._private.testing import free_port, wait_for
from servefleet.client import ControllerClient, ControllerUnreachable

pytestmark = [pytest.mark.slow, pytest.mark.serial]
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from nemesis.docker_engine import DockerUnavailable, binary_image  # noqa: E402

IMAGE = os.environ.get("SERVEFLEET_TEST_IMAGE", "servefleet:latest")
ETCD_IMAGE = "servefleet-etcd:test"
PROMETHEUS_IMAGE = "servefleet-prometheus:test"


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("SERVEFLEET_DOCKER_TESTS") == "required":
        pytest.fail(f"Docker tests are required here, but {reason}")
    pytest.skip(reason)


def _compose_command() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    _unavailable("neither `docker compose` nor docker-compose is installed")
    return []


@contextlib.contextmanager
def _compose(tmp_path: Path, files: list[Path], env: dict[str, str]):
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        _unavailable("no Docker engine answers")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        _unavailable(f"the image {IMAGE} is missing: run scripts/docker-image")
    _etcd_image(tmp_path)
    _prometheus_image(tmp_path)
    ports = {name: free_port() for name in ("SF_ETCD_PORT", "SF_ETCD_PEER_PORT", "SF_C1_PORT",
                                             "SF_C2_PORT", "SF_C3_PORT", "SF_P1_PORT",
                                             "SF_P2_PORT", "SF_M1_PORT", "SF_M2_PORT",
                                             "SF_M3_PORT", "SF_PROM_PORT")}
    prometheus_config = tmp_path / "prometheus.yml"
    prometheus_config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: servefleet\n"
        "    http_sd_configs:\n" + "".join(
            f"      - {{url: 'http://127.0.0.1:{ports[k]}/-/metrics-targets', "
            "refresh_interval: 1s}\n" for k in ("SF_M1_PORT", "SF_M2_PORT", "SF_M3_PORT")))
    project = f"sf{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "SF_CLUSTER": project,
           "SERVEFLEET_IMAGE": IMAGE, "ETCD_IMAGE": ETCD_IMAGE,
           "PROMETHEUS_IMAGE": PROMETHEUS_IMAGE,
           "SF_PROMETHEUS_CONFIG": str(prometheus_config), **env}
    base = [*_compose_command(), "-p", project, "-f", str(ROOT / "deploy/docker-compose.yml"),
            "-f", str(ROOT / "deploy/docker-compose.host.yml")]
    for extra in files:
        base += ["-f", str(extra)]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *args], env=env, capture_output=True, text=True,
                              timeout=300, check=check)

    try:
        up = run("up", "-d", check=False)
        assert up.returncode == 0, up.stderr[-3000:]
        yield run, ports, project
    finally:
        logs = run("logs", "--no-color", check=False).stdout
        run("down", "-v", "--timeout", "5", check=False)
        subprocess.run(f"docker ps -aq --filter label=io.servefleet.cluster={project} "
                       "| xargs -r docker rm -f", shell=True, capture_output=True)
        print(logs[-6000:])


@pytest.fixture
def compose(tmp_path):
    with _compose(tmp_path, [], {}) as running:
        yield running


# The host-network proxies exist only in docker-compose.host.yml: the TLS
# override (written for the published-ports proxies) does not name them.
HOST_PROXIES_TLS = """
version: "3.8"
services:
  host-proxy-1: &certs
    environment: {SERVEFLEET_CERTS: /certs}
    volumes: ["${SF_CERTS_DIR}:/certs:ro"]
  host-proxy-2: *certs
"""


@pytest.fixture
def compose_tls(tmp_path):
    certs = tmp_path / "certs"
    init_certs(certs)
    extra = tmp_path / "host-proxies-tls.yml"
    extra.write_text(HOST_PROXIES_TLS)
    with _compose(tmp_path, [ROOT / "deploy/docker-compose.tls.yml", extra],
                  {"SF_TLS": "s", "SF_CERTS_DIR": str(certs)}) as running:
        yield (*running, certs)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, params={"text": "a great day"}, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _binary_image(tmp_path: Path, tag: str, binary: str, package: str,
                  tail: str = "ENTRYPOINT []") -> None:
    """A Debian binary in the servefleet image (no registry here), built once."""
    try:
        binary_image(tag, binary, package, tmp_path, base=IMAGE, tail=tail)
    except DockerUnavailable as e:
        _unavailable(str(e))


def _etcd_image(tmp_path: Path) -> None:
    _binary_image(tmp_path, ETCD_IMAGE, "etcd", "etcd-server")


def _prometheus_image(tmp_path: Path) -> None:
    _binary_image(tmp_path, PROMETHEUS_IMAGE, "prometheus", "prometheus",
                  'RUN mkdir -p /prometheus\nENTRYPOINT ["/usr/local/bin/prometheus"]')


def test_the_cluster_comes_up_and_survives_killing_the_leader(compose) -> None:
    run, ports, _ = compose
    controllers = [f"127.0.0.1:{ports[k]}" for k in ("SF_C1_PORT", "SF_C2_PORT", "SF_C3_PORT")]
    proxies = [f"http://127.0.0.1:{ports[k]}/sentiment" for k in ("SF_P1_PORT", "SF_P2_PORT")]

    wait_for(lambda: all(_answers(url) for url in proxies), 180,
             "the example through both proxies")
    assert httpx.get(proxies[0], params={"text": "a great day"}).json()["label"] == "positive"

    # Prometheus (in the compose file) finds and scrapes the replica through
    # the controllers' /-/metrics-targets.
    def scraped(component: str) -> int:
        try:
            reply = httpx.get(f"http://127.0.0.1:{ports['SF_PROM_PORT']}/api/v1/query",
                              params={"query": f'up{{component="{component}"}} == 1'},
                              timeout=5)
            return len(reply.json()["data"]["result"])
        except (httpx.HTTPError, KeyError, ValueError):
            return 0

    # The example runs 2 replicas (examples/sentiment.py).
    wait_for(lambda: scraped("replica") == 2 and scraped("proxy") == 2
             and scraped("controller") == 3, 60, "Prometheus scraping the compose cluster")

    with ControllerClient(controllers, timeout=30) as client:
        leader = client.status().leader
    service = f"controller-{controllers.index(leader) + 1}"
    container = run("ps", "-q", service).stdout.strip()
    assert container, f"no container for {service}"

    failures: list[str] = []
    sent = 0
    stop = threading.Event()

    def traffic() -> None:
        nonlocal sent
        with httpx.Client(timeout=10) as http:
            while not stop.is_set():
                for url in proxies:
                    sent += 1
                    try:
                        reply = http.get(url, params={"text": "good"})
                        if reply.status_code != 200:
                            failures.append(f"{reply.status_code} {reply.text[:100]}")
                    except httpx.HTTPError as e:
                        failures.append(repr(e))
                time.sleep(0.01)

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        time.sleep(1)
        subprocess.run(["docker", "kill", container], check=True, capture_output=True)
        with ControllerClient([c for c in controllers if c != leader], timeout=60) as client:
            wait_for(lambda: client.status().leader not in ("", leader), 60, "a new leader")
        time.sleep(2)
    finally:
        stop.set()
        worker.join(30)
    print(f"{sent} requests while the leader was killed; {len(failures)} failed")
    assert not failures, failures[:5]


def test_the_tls_variant_serves_with_certificates_only(compose_tls) -> None:
    _, ports, _, certs = compose_tls
    controllers = [f"127.0.0.1:{ports[k]}" for k in ("SF_C1_PORT", "SF_C2_PORT", "SF_C3_PORT")]
    proxies = [f"http://127.0.0.1:{ports[k]}/sentiment" for k in ("SF_P1_PORT", "SF_P2_PORT")]
    wait_for(lambda: all(_answers(url) for url in proxies), 180,
             "the example through both proxies, every gRPC hop on mutual TLS")
    admin = Credentials(TlsFiles.from_dir(certs, "admin"))
    with ControllerClient(controllers, timeout=30, credentials=admin) as client:
        status = client.status()
        assert status.leader in controllers
        assert [p for p in status.proxies if p.healthy]
    with pytest.raises(ControllerUnreachable):
        with ControllerClient(controllers, timeout=2, credentials=PLAIN) as plain:
            plain.status()
