"""A handwritten-digit classifier: the ONNX model train.py wrote, served with
ONNX Runtime, concurrent requests batched into one `session.run`.

Deployed by examples/digits/config.yaml as the application `digits`:

    curl --data-binary @examples/digits/samples/3.png -H 'content-type: image/png' \\
        http://127.0.0.1:8000/digits
    curl -d '{"image": [64 numbers from 0 to 16]}' http://127.0.0.1:8000/digits

HTTP in: a PNG, or JSON `{"image": [[8 rows of 8 numbers 0-16]]}` (digit_images.py
says exactly what is read). Out: `{"digit": 3, "probabilities": [10 floats]}`,
with the size of the batch the request ran in as the header `x-batch-size`.
A body that is not such an image is a 400 `{"error": "..."}` naming the problem.

Through a handle, `predict(image)` takes a numpy array of 64 numbers (8x8 or
flat) and answers the same fields, plus `batch_size` and `received` (the type,
dtype and shape of the argument as it arrived: pipeline.py shows it).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
from digit_images import ImageError, image_from_body
from starlette.responses import JSONResponse

from servefleet import batch, deployment

MODEL = Path(__file__).resolve().parent / "model.onnx"


def cpu_threads() -> int:
    """The threads one replica's model may use: OMP_NUM_THREADS when set (servefleet's
    process and Docker runtimes set it from the deployment's `num_cpus`, or share
    the host's cores among its replicas), else 1."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def open_session(path: Path) -> ort.InferenceSession:
    """One ONNX Runtime session of `path` using cpu_threads() intra-op threads (and
    no inter-op pool: the graph is a chain), so four replicas on two cores do not
    each start a thread per core."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = cpu_threads()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(session: ort.InferenceSession, images: np.ndarray) -> list[dict]:
    """The model on float32 images [N, 64]: one answer per image."""
    labels, probabilities = session.run(None, {session.get_inputs()[0].name: images})
    return [{"digit": int(label), "probabilities": [float(p) for p in row]}
            for label, row in zip(labels, probabilities, strict=True)]


def describe(value: object) -> dict:
    """What arrived: type, and dtype and shape for an array."""
    if isinstance(value, np.ndarray):
        return {"type": "ndarray", "dtype": str(value.dtype), "shape": list(value.shape)}
    return {"type": type(value).__name__}


@deployment(max_ongoing_requests=64)
class DigitClassifier:
    """One InferenceSession per replica, made when the replica starts."""

    def __init__(self) -> None:
        self.session = open_session(MODEL)

    async def predict(self, image: np.ndarray) -> dict:
        """The digit in `image` (64 numbers 0-16, any float or int dtype); ValueError
        for anything else."""
        received = describe(image)
        if not isinstance(image, np.ndarray) or image.size != 64 or image.dtype.kind not in "fiu":
            raise ValueError(f"predict takes a numeric numpy array of 64 values, got {received}")
        answer = await self._batched(image.reshape(64).astype(np.float32, copy=False))
        return {**answer, "received": received}

    # A batch of 32 runs in well under a millisecond with this model, so it runs
    # on the replica's event loop; a model taking tens of milliseconds would
    # rather `await asyncio.to_thread(run, ...)`.
    @batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _batched(self, images: list[np.ndarray]) -> list[dict]:
        answers = run(self.session, np.stack(images))
        return [{**answer, "batch_size": len(images)} for answer in answers]

    async def __call__(self, request) -> JSONResponse:
        try:
            image = image_from_body(await request.body(), request.headers.get("content-type", ""))
        except ImageError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        answer = await self.predict(image)
        return JSONResponse({"digit": answer["digit"], "probabilities": answer["probabilities"]},
                            headers={"x-batch-size": str(answer["batch_size"])})


app = DigitClassifier.bind()
