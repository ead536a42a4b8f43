"""examples/digits end to end: train.py's models served by real controller,
proxy and replica processes from examples/digits/config.yaml, checked against
the same ONNX files run in this process.

One fleet for the module (starting five replicas is most of the time): the
example's code and config are copied to a temporary folder, train.py trains
there (about two seconds), and the config deploys all three applications.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]
import pytest
import yaml
from PIL import Image

from servefleet._private.configuration.config_file import load_config
from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import replica_pb2

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "digits"
RUNNING = replica_pb2.REPLICA_STATE_RUNNING
ARRAY = {"type": "ndarray", "dtype": "float32", "shape": [8, 8]}


@dataclass
class Digits:
    url: str
    client: ControllerClient
    folder: Path  # the trained copy of examples/digits
    train: Any    # its train.py, imported
    images: np.ndarray  # the held-out images, float32 [50, 64]
    expected: list[dict]  # model.onnx's answers for them, in this process

    def png(self, index: int) -> bytes:
        out = io.BytesIO()
        self.train.to_png(self.images[index]).save(out, format="PNG")
        return out.getvalue()

    def as_json(self, index: int) -> dict:
        return {"image": self.images[index].reshape(8, 8).tolist()}


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"digits_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answers(model: Path, images: np.ndarray) -> list[dict]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"X": images.astype(np.float32)})
    return [{"digit": int(label), "probabilities": row.tolist()}
            for label, row in zip(labels, probabilities, strict=True)]


def same(answer: dict, expected: dict) -> bool:
    return (answer["digit"] == expected["digit"]
            and np.allclose(answer["probabilities"], expected["probabilities"], atol=1e-6))


def quick_scaling(folder: Path, target: int) -> Path:
    """The example's config, with the pipeline's classifier scaling at `target`
    requests held after half a second. The fixture deploys a target no test's
    burst reaches; the scaling test lowers it to one (the tiny model holds few at
    the load a test makes): autoscaling settings change without a rollout."""
    config = yaml.safe_load((folder / "config.yaml").read_text())
    [pipeline] = [a for a in config["applications"] if a["name"] == "digits-pipeline"]
    pipeline["deployments"] = [{"name": "PipelineClassifier", "autoscaling_config": {
        "min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": target,
        "metrics_interval_s": 0.5, "look_back_period_s": 1, "upscale_delay_s": 0.5,
        "downscale_delay_s": 600}}]
    path = folder / "test-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Digits]:
    tmp = tmp_path_factory.mktemp("digits")
    folder = tmp / "digits"
    folder.mkdir()
    for path in [*EXAMPLE.glob("*.py"), EXAMPLE / "config.yaml"]:
        shutil.copy(path, folder)
    train = _import(folder / "train.py")
    train.main(folder)
    _, _, images, _ = train.split()
    cluster = f"digits-{os.getpid()}"
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster=cluster,
                                   runtime="process", log_dir=tmp,
                                   extra_args=["--allow-working-dir", "/"]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy_applications(load_config(str(quick_scaling(folder, 1000))).applications)
        probe = {"image": images[0].tolist()}
        for route, headers in (("/digits", {}), ("/digits-pipeline", {}),
                               ("/digits-tenants", {"serve_multiplexed_model_id": "tenant-a"})):
            wait_for(lambda r=route, h=headers: httpx.post(  # type: ignore[misc]
                proxy.url + r, json=probe, headers=h, timeout=10).status_code == 200,
                60, route)
        expected = answers(folder / "model.onnx", images)
        yield Digits(proxy.url, client, folder, train, images, expected)
    finally:
        stop_cluster(controller, client, [proxy], kill_replicas=True)


def test_every_held_out_image_gets_the_models_answer_as_json_and_as_png(digits) -> None:
    assert len(digits.images) == 50
    with httpx.Client(base_url=digits.url, timeout=10) as http:
        for i, expected in enumerate(digits.expected):
            by_json = http.post("/digits", json=digits.as_json(i))
            by_png = http.post("/digits", content=digits.png(i),
                               headers={"content-type": "image/png"})
            assert by_json.status_code == by_png.status_code == 200, (by_json.text, by_png.text)
            assert same(by_json.json(), expected), (i, by_json.json(), expected)
            assert same(by_png.json(), expected), (i, by_png.json(), expected)
        # The sample files the README posts (no content type: the signature says PNG),
        # and a flat list of 64 numbers.
        for sample in sorted((digits.folder / "samples").glob("*.png")):
            answer = http.post("/digits", content=sample.read_bytes()).json()
            first = int(np.flatnonzero(digits.train.split()[3] == int(sample.stem))[0])
            assert same(answer, digits.expected[first]), sample.name
        flat = http.post("/digits", json={"image": digits.images[7].tolist()}).json()
        assert same(flat, digits.expected[7])


def test_bodies_that_are_not_8x8_images_are_400s_naming_the_problem(digits) -> None:
    def png(width: int, height: int) -> bytes:
        out = io.BytesIO()
        Image.new("L", (width, height), 255).save(out, format="PNG")
        return out.getvalue()

    cases: list[tuple[dict[str, Any], str]] = [
        ({"json": {"image": [[0] * 8] * 7}}, "wrong image size: expected 8x8 numbers"),
        ({"json": {"image": [1, 2, 3]}}, "got shape [3]"),
        ({"json": {"image": [[17] * 8] * 8}}, "from 0 to 16"),
        ({"json": {"picture": []}}, 'has no "image"'),
        ({"content": png(10, 7), "headers": {"content-type": "image/png"}},
         "wrong image size: 10x7 pixels"),
        ({"content": png(4, 4)}, "wrong image size: 4x4 pixels"),
        ({"content": b"not an image", "headers": {"content-type": "image/png"}},
         "not a PNG image"),
        ({"content": b"hello", "headers": {"content-type": "text/plain"}},
         "the body (text/plain) is neither a PNG image nor JSON"),
        ({"content": b""}, "the body is empty"),
    ]
    with httpx.Client(base_url=digits.url, timeout=10) as http:
        for route in ("/digits", "/digits-pipeline"):
            for request, problem in cases:
                reply = http.post(route, **request)
                assert reply.status_code == 400, (route, request, reply.text)
                assert problem in reply.json()["error"], (route, problem, reply.text)


async def _burst(url: str, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        return await asyncio.gather(*[http.post(url, json=body) for body in bodies])


def test_concurrent_requests_run_as_batches_and_each_gets_its_own_answer(digits) -> None:
    order = [i % 50 for i in range(64)]
    sizes: list[int] = []
    for _ in range(3):  # one burst nearly always batches; scheduling may spread one out
        replies = asyncio.run(_burst(digits.url + "/digits",
                                     [digits.as_json(i) for i in order]))
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
        for i, reply in zip(order, replies, strict=True):
            assert same(reply.json(), digits.expected[i]), i
        sizes += [int(r.headers["x-batch-size"]) for r in replies]
        if max(sizes) > 1:
            break
    assert 1 < max(sizes) <= 32, sizes


def test_the_pipeline_hands_the_classifier_a_float32_array(digits) -> None:
    replies = asyncio.run(_burst(digits.url + "/digits-pipeline",
                                 [digits.as_json(i) for i in range(50)]))
    for i, reply in enumerate(replies):
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["received"] == ARRAY, answer  # an array, not a list, after the hop
        assert same(answer, digits.expected[i]), i
    png = httpx.post(digits.url + "/digits-pipeline", content=digits.png(3), timeout=10).json()
    assert png["received"] == ARRAY and same(png, digits.expected[3])


def test_five_tenants_on_two_replicas_each_answered_by_its_own_model(digits) -> None:
    tenants = digits.train.TENANTS
    assert len(tenants) == 5
    image = digits.images[:5]
    own = {t: answers(digits.folder / "tenants" / f"{t}.onnx", image) for t in tenants}
    # Each tenant's model is its own: no two give the same probabilities.
    assert len({json.dumps(own[t][0]["probabilities"]) for t in tenants}) == 5
    loads: dict[int, int] = {}
    seen: list[tuple[str, int]] = []

    def ask(tenant: str, i: int) -> None:
        reply = httpx.post(digits.url + "/digits-tenants", json=digits.as_json(i),
                           headers={"serve_multiplexed_model_id": tenant}, timeout=10)
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["tenant"] == tenant, answer  # read from the model file itself
        assert same(answer, own[tenant][i]), (tenant, i, answer)
        loads[answer["replica"]] = answer["loads"]
        seen.append((tenant, answer["replica"]))

    # Four tenants fit (2 replicas x 2 models): each loads once, then stays put.
    # (The fixture's probe loaded tenant-a; it may move once, as in test_multiplex.)
    four = tenants[:4]
    for round_ in range(4):
        for tenant in four:
            ask(tenant, round_)
    assert sum(loads.values()) <= 5, loads
    settled = seen[len(four):]  # after the first round, each stays where it loaded
    assert all(len({r for t, r in settled if t == tenant}) == 1 for tenant in four), seen
    # A fifth evicts one; asking all five again still gets each its own model.
    for i, tenant in enumerate(tenants):
        ask(tenant, i)
    assert len(loads) == 2, loads
    with httpx.Client(base_url=digits.url, timeout=10) as http:
        assert http.post("/digits-tenants", json=digits.as_json(0)).status_code == 400
        nobody = http.post("/digits-tenants", json=digits.as_json(0),
                           headers={"serve_multiplexed_model_id": "tenant-z"})
        assert nobody.status_code == 404 and "tenant-z" in nobody.json()["error"]


def test_the_pipelines_classifier_scales_to_two_replicas_under_load_losing_nothing(
        digits) -> None:
    """Last in the module: it leaves two classifier replicas behind."""
    def classifiers() -> int:
        return sum(r.state == RUNNING for r in digits.client.replicas(
            application="digits-pipeline", deployment="PipelineClassifier"))

    def ids() -> set[str]:
        return {r.record.replica_id for r in digits.client.replicas(
            application="digits-pipeline", deployment="PipelineClassifier")}

    assert classifiers() == 1
    before = ids()
    digits.client.deploy_applications(
        load_config(str(quick_scaling(digits.folder, 1))).applications)
    time.sleep(2)  # a rollout would have started a replica by now
    assert ids() == before  # a new target, not a new version: no rollout
    failures: list[str] = []
    served: list[int] = []

    async def load() -> None:
        stop = asyncio.Event()

        async def client(http: httpx.AsyncClient, k: int) -> None:
            while not stop.is_set():
                i = (k + len(served)) % 50
                reply = await http.post("/digits-pipeline", json=digits.as_json(i))
                if reply.status_code != 200 or not same(reply.json(), digits.expected[i]):
                    failures.append(f"{i}: {reply.status_code} {reply.text[:200]}")
                served.append(i)

        async def until_two() -> None:
            try:
                for _ in range(300):  # 30 s
                    if await asyncio.to_thread(classifiers) == 2:
                        await asyncio.sleep(1)  # traffic on both
                        return
                    await asyncio.sleep(0.1)
            finally:
                stop.set()

        async with httpx.AsyncClient(base_url=digits.url, timeout=30,
                                     limits=httpx.Limits(max_connections=32)) as http:
            await asyncio.gather(until_two(), *[client(http, k) for k in range(32)])

    asyncio.run(load())
    assert failures == [] and classifiers() == 2, (failures[:5], len(served))


def test_the_models_threads_follow_the_replicas_environment(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # as the replica's working_dir is
    classifier = _import(EXAMPLE / "classifier.py")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert classifier.cpu_threads() == 3
    for unusable in ("0", "-2", "many"):
        monkeypatch.setenv("OMP_NUM_THREADS", unusable)
        assert classifier.cpu_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert classifier.cpu_threads() == 1
