"""bench/embeddings.py's model on Ray Serve: POST /v1/embeddings in OpenAI's
shape, the same model code (bench/embeddings_model.py), one replica, Ray's
own batching (@serve.batch, at most 32 sentences, no wait: as servefleet's). Run by the Python
given as --ray-python; prints "READY <port>" once it answers, then serves
until SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    import numpy as np
    import ray  # type: ignore[import-not-found]
    from ray import serve  # type: ignore[import-not-found]
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @serve.deployment(num_replicas=1, max_ongoing_requests=128)
    class Embedder:
        def __init__(self) -> None:
            sys.path.insert(0, str(HERE))
            from embeddings_model import Encoder, answer
            self.encoder, self.answer = Encoder(), answer

        @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)
        async def run(self, sequences: list[list[int]]) -> list:
            return list(await asyncio.to_thread(self.encoder.embed, sequences))

        async def __call__(self, request: Request) -> JSONResponse:
            body = await request.json()
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            ids = await asyncio.to_thread(self.encoder.tokenize, texts)
            vectors = np.stack(await asyncio.gather(*(self.run(s) for s in ids)))
            return JSONResponse(self.answer(vectors, sum(len(s) for s in ids)))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: os.environ[k] for k in ("EMBEDDINGS_ONNX", "EMBEDDINGS_TOKENIZER")}
    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE), **env}})
    stop = False

    def leave(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, leave)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(Embedder.bind(), name="embeddings", route_prefix="/v1/embeddings")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/embeddings", method="POST",
            data=json.dumps({"model": "all-MiniLM-L6-v2", "input": "warm up"}).encode())
        urllib.request.urlopen(request, timeout=120).read()
        print(f"READY {port}", flush=True)
        while not stop:
            time.sleep(0.2)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
