"""The dashboard in a real headless browser (Debian's chromium through
chromedriver), and its JSON, against a running cluster."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

import httpx
import pytest

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


def spec(replicas: int) -> d.DeploymentSpec:
    return d.DeploymentSpec(name="Hello", import_path="echo_app:hello", route_prefix="/hello",
                            runtime=d.RuntimeOptions(working_dir=APPS),
                            replica_config=d.ReplicaConfig(num_replicas=replicas,
                                                           graceful_shutdown_wait_loop_s=0.1))


def healthy(client: ControllerClient, running: int) -> bool:
    deps = [dep for app in client.status().applications for dep in app.deployments]
    return len(deps) == 1 and deps[0].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY and \
        deps[0].replica_states.get("RUNNING", 0) == running


@pytest.fixture
def dashboard(tmp_path, cluster):
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=["--metrics-listen", http]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path)
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy(spec(1))
        wait_for(lambda: healthy(client, 1), 60, "Hello healthy")
        proxy.start()
        yield client, f"http://{http}", proxy
    finally:
        stop_cluster(controller, client, [proxy])


def test_the_json_snapshot(dashboard) -> None:
    client, base, proxy = dashboard
    wait_for(lambda: httpx.get(base + "/api/status").json()["proxies"], 20, "the proxy listed")
    data = httpx.get(base + "/api/status").json()
    (app,) = data["applications"]
    assert (app["name"], app["route_prefix"], app["status"]) == ("default", "/hello", "RUNNING")
    (dep,) = app["deployments"]
    (replica,) = dep["replicas"]
    assert replica["state"] == "RUNNING" and replica["uptime_s"] >= 0
    assert replica["replica_id"] == client.replicas()[0].record.replica_id
    assert data["leader"] in data["controllers"] and data["errors"] == []
    assert data["recent_errors"] == []
    assert "traffic" not in dep  # no requests yet
    for _ in range(20):
        assert httpx.get(proxy.url + "/hello").status_code == 200

    def traffic() -> dict | None:
        return httpx.get(base + "/api/status").json()["applications"][0]["deployments"][0] \
            .get("traffic")

    # The 20 requests in the proxy's 5 s window, once its next report is in.
    seen = wait_for(lambda: (t := traffic()) and t["requests_per_s"] >= 3.99 and t, 4,
                    "the proxy's figures in the snapshot")
    assert seen["requests_per_s"] == pytest.approx(20 / 5, rel=0.01)
    assert 0 < seen["p50_ms"] <= seen["p99_ms"] and seen["errors_per_s"] == 0
    # The history: a point every interval_s, with the requests in one of them.
    history = wait_for(lambda: (h := httpx.get(base + "/api/history").json())["deployments"]
                       and max(h["deployments"][0]["requests_per_s"]) > 0 and h, 20,
                       "a point with the requests in the history")
    (series,) = history["deployments"]
    assert (series["application"], series["deployment"]) == ("default", "Hello")
    assert history["span_s"] == 900 and history["interval_s"] == 5
    assert len(series["t"]) == len(series["running"]) == len(series["p99_ms"]) >= 1
    assert series["running"][-1] == 1


def _browser():
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        if os.environ.get("SERVEFLEET_BROWSER_TESTS") == "skip":
            pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver)")
        pytest.fail("chromium and chromium-driver are needed: scripts/setup installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def test_the_page_follows_a_scale_change_without_a_reload(dashboard, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    client, base, _ = dashboard
    browser = _browser()
    try:
        browser.get(base + "/-/dashboard")

        # Read in one script: the page re-renders every second, so an element
        # found by one call can be gone (stale) by the next.
        def running() -> str | None:
            return browser.execute_script(
                "const e = document.querySelector('[data-deployment=\"default/Hello\"]');"
                "return e ? e.dataset.running : null;")

        wait_for(lambda: running() == "1", 20, "the deployment on the page")
        assert "RUNNING" in browser.find_element(By.ID, "applications").text
        browser.execute_script("window.sameDocument = 42")
        browser.save_screenshot(str(tmp_path / "dashboard-1.png"))
        client.deploy(spec(2))
        wait_for(lambda: running() == "2", 60, "two replicas on the page")
        assert browser.execute_script("return window.sameDocument") == 42  # no reload
        rows = browser.execute_script(
            "return document.querySelectorAll('#applications table tr').length;")
        assert rows == 3  # a header and two replicas
        browser.save_screenshot(str(tmp_path / "dashboard-2.png"))
        assert (tmp_path / "dashboard-2.png").stat().st_size > 0
    finally:
        browser.quit()


def _chart(browser, name: str) -> dict | None:
    """A chart's data attributes and path, read in one script (the page re-renders)."""
    return browser.execute_script(
        "const svg = document.querySelector('svg[data-chart=\"' + arguments[0] + '\"]');"
        "if (!svg) return null;"
        "return {points: Number(svg.dataset.points), last: svg.dataset.last,"
        "        max: Number(svg.dataset.max),"
        "        d: svg.querySelector('path').getAttribute('d')};", name)


def test_the_page_draws_traffic_and_lists_failed_requests(dashboard, tmp_path) -> None:
    _, base, proxy = dashboard
    browser = _browser()
    stop = threading.Event()

    def load() -> None:  # about 20 requests a second through the real proxy
        with httpx.Client(timeout=10) as http:
            while not stop.wait(0.05):
                http.get(proxy.url + "/hello")

    sender = threading.Thread(target=load, daemon=True)
    try:
        browser.get(base + "/-/dashboard")
        before = wait_for(lambda: (c := _chart(browser, "default/Hello/requests"))
                          and c["points"] >= 1 and c, 30, "the requests chart")
        assert before["max"] == 0  # no requests yet: a flat line
        replicas = _chart(browser, "default/Hello/replicas")
        assert replicas and replicas["last"] == "1"
        sender.start()
        after = wait_for(lambda: (c := _chart(browser, "default/Hello/requests"))
                         and c["max"] > 5 and c, 40, "the requests chart to rise")
        assert after["d"] != before["d"] and after["points"] > before["points"]
        latency = _chart(browser, "default/Hello/latency")
        assert latency and latency["max"] > 0
        browser.save_screenshot(str(tmp_path / "dashboard-traffic.png"))

        request_id = f"dashboard-{uuid.uuid4().hex[:12]}"
        failed = httpx.get(proxy.url + "/hello?fail=1", headers={"x-request-id": request_id},
                           timeout=10)
        assert failed.status_code == 500 and failed.headers["x-request-id"] == request_id

        def listed() -> list | None:
            return browser.execute_script(
                "const tr = document.querySelector('#recent-errors tr[data-request-id=\"'"
                " + arguments[0] + '\"]');"
                "return tr ? [...tr.cells].map(c => c.textContent) : null;", request_id)

        cells = wait_for(listed, 20, "the failed request among the recent errors")
        assert cells[1:5] == ["default/Hello", "/hello", "500", request_id]
        assert cells[5] == "\u2013"  # a dash: not traced (tracing is off)
        errors = wait_for(lambda: (c := _chart(browser, "default/Hello/errors"))
                          and c["max"] > 0 and c, 40, "the errors chart to rise")
        assert errors["d"]
        browser.execute_script("document.getElementById('recent-errors').scrollIntoView()")
        browser.save_screenshot(str(tmp_path / "dashboard-errors.png"))
    finally:
        stop.set()
        browser.quit()
