"""Clients that leave while their embeddings wait behind a running batch,
through real processes (a controller, a proxy, the OpenAI ingress and an
embedding model's replica): the ingress replica stops counting their
requests toward its max_ongoing_requests at once, so a new request is taken
(not a 503 "no replica took the request") while the batch still runs; and
their inputs leave the model's batch queue, so they never reach the model.

The model (tests/apps/held_encoder.py) holds each run while the file `hold`
exists and notes every run's inputs, so the test decides when the batch
ends and sees what ran."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from servefleet._private.configuration.config_file import load_config
from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster, wait_for
from servefleet.client import ControllerClient

APPS = str(Path(__file__).parent / "apps")
INGRESS_SLOTS = 4  # the ingress's max_ongoing_requests, from ingress_options


@dataclass
class Cluster:
    url: str  # the proxy's
    client: ControllerClient
    marks: Path

    def ongoing(self, deployment: str) -> float:
        """What the deployment's one replica counts as in flight now (its /metrics)."""
        [replica] = self.client.replicas(deployment=deployment)
        text = httpx.get(f"http://{replica.record.metrics_address}/metrics", timeout=10).text
        return next(sample.value for family in text_string_to_metric_families(text)
                    for sample in family.samples
                    if sample.name == "servefleet_replica_ongoing_requests")

    def runs(self) -> list[str]:
        path = self.marks / "runs"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("embeddings-disconnect")
    marks = tmp / "marks"
    marks.mkdir()
    config = tmp / "held.yaml"
    config.write_text(yaml.safe_dump({"applications": [{
        "name": "held", "route_prefix": "/", "import_path": "servefleet.llm:build_openai_app",
        "runtime_env": {"working_dir": APPS},
        "args": {"ingress_options": {"max_ongoing_requests": INGRESS_SLOTS},
                 "embedding_configs": [{
                     "model_id": "held", "model": "held_encoder:HeldEncoder",
                     "model_kwargs": {"marks": str(marks)},
                     # As many as the ingress: a slot the ingress's handle
                     # router kept for a departed call would leave E waiting.
                     "deployment_config": {"max_ongoing_requests": INGRESS_SLOTS}}]}}]}))
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster=f"held-{os.getpid()}",
                                   runtime="process", log_dir=tmp,
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy_applications(load_config(str(config)).applications)
        wait_for(lambda: httpx.post(proxy.url + "/v1/embeddings", timeout=10, json={
            "model": "held", "input": "ready"}).status_code == 200, 90, "the held model")
        yield Cluster(proxy.url, client, marks)
    finally:
        (marks / "hold").unlink(missing_ok=True)
        stop_cluster(controller, client, [proxy], kill_replicas=True)


async def _wait(predicate, what: str, timeout: float = 20) -> None:
    await asyncio.to_thread(wait_for, predicate, timeout, what)


def test_clients_leaving_behind_a_batch_free_the_ingress_and_leave_the_queue(cluster) -> None:
    (cluster.marks / "hold").touch()
    before = len(cluster.runs())

    async def embed(http: httpx.AsyncClient, text: str) -> httpx.Response:
        return await http.post(cluster.url + "/v1/embeddings",
                               json={"model": "held", "input": text})

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as http:
            first = asyncio.create_task(embed(http, "A"))
            await _wait(lambda: cluster.runs()[before:] == ["A"], "A's batch to run")
            queued = [asyncio.create_task(embed(http, text)) for text in "BCD"]
            # The ingress holds all four; the model's replica has B, C, D queued.
            await _wait(lambda: cluster.ongoing("OpenAIIngress") == INGRESS_SLOTS,
                        "the ingress to be full")
            await _wait(lambda: cluster.ongoing("EmbeddingServer_held") == INGRESS_SLOTS,
                        "the model's replica to hold the four")
            for task in (first, *queued):
                task.cancel()  # the clients leave: their connections close
            await asyncio.gather(first, *queued, return_exceptions=True)
        await _wait(lambda: cluster.ongoing("OpenAIIngress") == 0,
                    "the ingress replica to stop counting the requests whose clients left")
        await _wait(lambda: cluster.ongoing("EmbeddingServer_held") == 0,
                    "the model's replica to stop counting them")
        # A's batch still runs (the model's thread cannot be stopped) and
        # yet a new request is taken: it waits for the next batch.
        assert cluster.runs()[before:] == ["A"]
        async with httpx.AsyncClient(timeout=60) as http:
            late = asyncio.create_task(embed(http, "E"))
            await _wait(lambda: cluster.ongoing("OpenAIIngress") == 1, "E at the ingress")
            (cluster.marks / "hold").unlink()
            return await late

    late = asyncio.run(scenario())
    assert late.status_code == 200, late.text
    assert len(late.json()["data"]) == 1
    # B, C and D left the queue before any batch took them.
    assert cluster.runs()[before:] == ["A", "E"]
