"""Prometheus metrics from every process, read over real HTTP from a running cluster."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servefleet._private.external_servers import PrometheusServer
from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def samples(url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample at `url`, by (name, labels)."""
    text = httpx.get(url, timeout=5).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= ls)


def healthy(client: ControllerClient) -> bool:
    deps = [dep for app in client.status().applications for dep in app.deployments]
    return bool(deps) and all(d.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY for d in deps)


@pytest.fixture
def cluster_with_metrics(tmp_path, cluster):
    metrics = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path,
                                   extra_args=["--metrics-listen", metrics]).start()
    client = ControllerClient([controller.address], timeout=30)
    proxy = ProxyProcess([controller.address], log_dir=tmp_path)
    try:
        client.deploy(d.DeploymentSpec(name="Metered", import_path="metered_app:metered",
                                       route_prefix="/m",
                                       runtime=d.RuntimeOptions(working_dir=APPS),
                                       replica_config=d.ReplicaConfig(health_check_period_s=0.5)))
        wait_for(lambda: healthy(client), 60, "Metered healthy")
        proxy.start()
        wait_for(lambda: httpx.get(proxy.url + "/m").status_code == 200, 30, "routed")
        yield client, proxy, f"http://{metrics}"
    finally:
        stop_cluster(controller, client, [proxy])


def test_every_process_serves_its_metrics(cluster_with_metrics) -> None:
    client, proxy, controller_http = cluster_with_metrics
    before = value(samples(proxy.url + "/-/metrics"), "servefleet_proxy_requests_total",
                   application="default", deployment="Metered", route="/m", code="200")
    for n in (1, 2, 50):
        assert httpx.get(proxy.url + "/m", params={"n": n}).text == f"n={n}"
    assert httpx.get(proxy.url + "/nowhere").status_code == 404

    at_proxy = samples(proxy.url + "/-/metrics")
    assert value(at_proxy, "servefleet_proxy_requests_total", application="default",
                 deployment="Metered", route="/m", code="200") == before + 3
    assert value(at_proxy, "servefleet_proxy_requests_total", route="", code="404") >= 1
    assert value(at_proxy, "servefleet_proxy_request_duration_seconds_count",
                 deployment="Metered") >= before + 3
    assert ("servefleet_queued_requests", frozenset(
        {("application", "default"), ("deployment", "Metered")})) in at_proxy

    (replica,) = client.replicas(deployment="Metered")
    address = replica.record.metrics_address
    assert address
    at_replica = samples(f"http://{address}/metrics")
    mine = {"application": "default", "deployment": "Metered",
            "replica": replica.record.replica_id}
    assert value(at_replica, "servefleet_replica_requests_total", outcome="ok", **mine) >= 4
    assert value(at_replica, "servefleet_replica_ongoing_requests", **mine) == 0
    wait_for(lambda: value(samples(f"http://{address}/metrics"),
                           "servefleet_replica_health_checks_total", result="ok", **mine) >= 1,
             10, "a health check counted")
    # The user's own metrics, with the replica's labels added.
    assert value(at_replica, "metered_calls_total", size="small", **mine) >= 3
    assert value(at_replica, "metered_calls_total", size="big", **mine) == 1
    assert value(at_replica, "metered_last_n", **mine) == 50
    assert value(at_replica, "metered_n_count", **mine) >= 4

    at_controller = samples(controller_http + "/metrics")
    assert value(at_controller, "servefleet_controller_leader") == 1
    assert value(at_controller, "servefleet_deployments", status="HEALTHY") == 1
    assert value(at_controller, "servefleet_replicas", state="RUNNING") == 1
    assert value(at_controller, "servefleet_watchers", kind="proxy") == 1
    assert value(at_controller, "servefleet_controller_reconcile_seconds_count",
                 reconciler="replicas") >= 1
    assert value(at_controller, "servefleet_store_txn_seconds_count") >= 1
    for (name, labels), _ in at_proxy.items() | at_replica.items() | at_controller.items():
        keys = {k for k, _ in labels}
        assert not keys & {"request_id", "path", "url"}, (name, keys)


def test_the_scrape_targets_follow_the_cluster(cluster_with_metrics) -> None:
    client, proxy, controller_http = cluster_with_metrics
    groups = httpx.get(controller_http + "/-/metrics-targets").json()
    by_component: dict[str, list[str]] = {}
    for group in groups:
        by_component.setdefault(group["labels"]["component"], []).extend(group["targets"])
    assert by_component["controller"] == [controller_http.removeprefix("http://")]
    assert by_component["proxy"] == [proxy.url.removeprefix("http://")]
    (replica,) = client.replicas(deployment="Metered")
    assert by_component["replica"] == [replica.record.metrics_address]
    client.deploy(d.DeploymentSpec(name="Metered", import_path="metered_app:metered",
                                   route_prefix="/m", runtime=d.RuntimeOptions(working_dir=APPS),
                                   replica_config=d.ReplicaConfig(num_replicas=2,
                                                                  health_check_period_s=0.5)))

    def two() -> bool:
        groups = httpx.get(controller_http + "/-/metrics-targets").json()
        return len([g for g in groups if g["labels"]["component"] == "replica"]) == 2

    wait_for(two, 60, "the second replica listed")


def test_a_real_prometheus_finds_and_scrapes_the_cluster(cluster_with_metrics) -> None:
    client, proxy, controller_http = cluster_with_metrics
    prometheus = PrometheusServer(controller_http + "/-/metrics-targets").start()
    try:
        def up(component: str) -> int:
            return len([r for r in prometheus.query(f'up{{component="{component}"}} == 1')])

        wait_for(lambda: up("proxy") and up("replica") and up("controller"), 60,
                 "prometheus scraping the controller, the proxy and the replica")
        query = ('sum(servefleet_proxy_requests_total{deployment="Metered",code="200"})')

        def total() -> float:
            result = prometheus.query(query)
            return float(result[0]["value"][1]) if result else 0.0

        wait_for(lambda: total() > 0, 30, "a first sample of the request counter")
        wait_for(lambda: total() == value(samples(proxy.url + "/-/metrics"),
                                          "servefleet_proxy_requests_total",
                                          deployment="Metered", code="200"), 10, "in step")
        before = total()
        for _ in range(25):
            assert httpx.get(proxy.url + "/m").status_code == 200
        wait_for(lambda: total() == before + 25, 20, "the 25 requests counted in Prometheus")

        # A replica started after Prometheus came up is found and scraped too.
        client.deploy(d.DeploymentSpec(name="Metered", import_path="metered_app:metered",
                                       route_prefix="/m",
                                       runtime=d.RuntimeOptions(working_dir=APPS),
                                       replica_config=d.ReplicaConfig(
                                           num_replicas=2, health_check_period_s=0.5)))
        wait_for(lambda: up("replica") == 2, 60, "the new replica scraped")
    finally:
        logs = prometheus.logs()
        prometheus.stop()
        print(logs[-3000:])
