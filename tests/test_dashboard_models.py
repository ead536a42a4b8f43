"""The dashboard's model figures against a running cluster: a replica that
records the llm_* metrics, requests through a proxy, the figures in
/api/status and on the page (headless Chromium)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_dashboard import _browser

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
# What apps/llm_metrics_app.py records per request: 3 prompt tokens, 8 tokens
# generated, the first after 30 ms (in the 25-50 ms bucket), then 7 ms apart
# (in the 5-10 ms bucket).
PROMPT_TOKENS, TOKENS = 3, 8


def healthy(client: ControllerClient) -> bool:
    deps = [dep for app in client.status().applications for dep in app.deployments]
    return len(deps) == 1 and deps[0].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY


@pytest.fixture
def llm_cluster(tmp_path, cluster):
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=["--metrics-listen", http]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path)
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy(d.DeploymentSpec(
            name="Chat", import_path="llm_metrics_app:generate", route_prefix="/chat",
            runtime=d.RuntimeOptions(working_dir=APPS),
            replica_config=d.ReplicaConfig(num_replicas=1, graceful_shutdown_wait_loop_s=0.1)))
        wait_for(lambda: healthy(client), 60, "Chat healthy")
        proxy.start()
        wait_for(lambda: httpx.get(proxy.url + "/chat").status_code == 200, 30, "routed")
        yield f"http://{http}", proxy
    finally:
        stop_cluster(controller, client, [proxy])


def test_the_models_figures_in_the_snapshot_and_on_the_page(llm_cluster, tmp_path) -> None:
    base, proxy = llm_cluster

    def send(tiny: int, big: int) -> None:
        for model in ["tiny"] * tiny + ["big"] * big:
            assert httpx.get(proxy.url + "/chat", params={"model": model}).status_code == 200

    def models() -> dict[str, dict[str, Any]]:
        (dep,) = httpx.get(base + "/api/status").json()["applications"][0]["deployments"]
        return {m["model"]: m for m in dep.get("models", [])}

    # Polling the snapshot is what starts scrapes (one per 2 s): a first one
    # after both models' series exist, then none while the measured requests
    # go out, then the next one sees all of them as the window's increase.
    send(1, 1)
    polling_until = time.monotonic() + 2.5
    while time.monotonic() < polling_until:
        models()
        time.sleep(0.2)
    time.sleep(0.3)
    send(20, 10)
    seen = wait_for(lambda: (m := models()) and m.get("tiny", {}).get("first_tokens") == 20
                    and m, 15, "the 30 requests in the model figures")
    tiny, big = seen["tiny"], seen["big"]
    assert big["first_tokens"] == 10 and tiny["replicas"] == 1 and tiny["window_s"] > 0
    # One bucket holds every observation: Prometheus' histogram_quantile
    # interpolates inside it.
    assert tiny["ttft_p50_ms"] == pytest.approx(37.5)
    assert tiny["ttft_p99_ms"] == pytest.approx(49.75)
    assert tiny["tpot_p50_ms"] == pytest.approx(7.5)
    window = 20 * TOKENS / tiny["generated_tokens_per_s"]
    assert 0 < window <= tiny["window_s"] + 0.1
    assert tiny["prompt_tokens_per_s"] == pytest.approx(20 * PROMPT_TOKENS / window, rel=1e-3)
    assert big["generated_tokens_per_s"] == pytest.approx(10 * TOKENS / window, rel=1e-3)

    browser = _browser()
    try:
        browser.get(base + "/-/dashboard")
        rows = wait_for(lambda: browser.execute_script(
            "const t = document.querySelector('table[data-models=\"default/Chat\"]');"
            "return t ? Array.from(t.querySelectorAll('tr[data-model]'),"
            " r => [r.dataset.model, r.cells[1].textContent, r.cells[4].textContent]) : null;"),
            20, "the models table on the page")
        assert [r[0] for r in rows] == ["big", "tiny"]
        for _, first_token, tokens_per_s in rows:
            assert first_token.endswith(" ms")
            assert tokens_per_s.replace(".", "", 1).isdigit()
        browser.save_screenshot(str(tmp_path / "dashboard-models.png"))
    finally:
        browser.quit()
