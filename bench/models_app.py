"""The digits model (examples/digits/model.onnx) as bench/models.py serves it:
the same ONNX Runtime session and JSON in/out in every variant, so that only
the serving differs.

- `Unbatched`: one `session.run` per request;
- `Batched`: `@batch` stacks concurrent requests into one `session.run`;
- `Ingress` -> `Classifier`: the pipeline, the array through a handle;
- `OneProcess`: the same two steps in one process (the pipeline's baseline);
- `baseline_app`: a plain starlette app, no servefleet (what a user writes by hand).

Threads: one intra-op thread per session unless SERVEFLEET_CPU_THREADS (or
OMP_NUM_THREADS) says more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

try:
    from servefleet import batch
except ImportError:  # under Ray's interpreter (models_ray.py): the same code, Ray's @batch
    from ray.serve import batch  # type: ignore[import-not-found,no-redef]

MODEL = Path(__file__).resolve().parent.parent / "examples" / "digits" / "model.onnx"
MAX_BATCH = 32


def session() -> ort.InferenceSession:
    options = ort.SessionOptions()
    threads = os.environ.get("SERVEFLEET_CPU_THREADS") or os.environ.get("OMP_NUM_THREADS")
    options.intra_op_num_threads = int(threads or 1)
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])


def image(body: bytes) -> np.ndarray:
    """The request's 8x8 image as float32 [64]."""
    return np.asarray(json.loads(body)["image"], dtype=np.float32).reshape(64)


def answer(label: Any, probabilities: np.ndarray) -> dict[str, Any]:
    return {"digit": int(label), "probabilities": probabilities.tolist()}


def run(model: ort.InferenceSession, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels, probabilities = model.run(None, {"X": images})
    return labels, probabilities


class Unbatched:
    def __init__(self) -> None:
        self.model = session()

    async def __call__(self, request: Request) -> dict[str, Any]:
        labels, probabilities = run(self.model, image(await request.body())[None])
        return answer(labels[0], probabilities[0])


class Batched:
    def __init__(self) -> None:
        self.model = session()

    @batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=0.0)
    async def predict(self, images: list[np.ndarray]) -> list[dict[str, Any]]:
        labels, probabilities = run(self.model, np.stack(images))
        return [answer(label, p) for label, p in zip(labels, probabilities, strict=True)]

    async def __call__(self, request: Request) -> dict[str, Any]:
        return await self.predict(image(await request.body()))


class Classifier:
    def __init__(self) -> None:
        self.model = session()

    def predict(self, one: np.ndarray) -> tuple[int, np.ndarray]:
        labels, probabilities = run(self.model, one[None])
        return int(labels[0]), probabilities[0]


class Ingress:
    def __init__(self, classifier: Any) -> None:
        self.classifier = classifier

    async def __call__(self, request: Request) -> dict[str, Any]:
        digit, probabilities = await self.classifier.predict.remote(image(await request.body()))
        return answer(digit, probabilities)


class OneProcess:
    def __init__(self) -> None:
        self.classifier = Classifier()

    async def __call__(self, request: Request) -> dict[str, Any]:
        digit, probabilities = self.classifier.predict(image(await request.body()))
        return answer(digit, probabilities)


async def _baseline(request: Request) -> JSONResponse:
    labels, probabilities = run(_BASELINE_MODEL, image(await request.body())[None])
    return JSONResponse(answer(labels[0], probabilities[0]))


_BASELINE_MODEL = session() if os.environ.get("MODELS_BASELINE") else None
baseline_app = Starlette(routes=[Route("/", _baseline, methods=["POST"])])
