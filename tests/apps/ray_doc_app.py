"""A Ray Serve program as Ray's documentation writes one, imports swapped
(tests/test_up.py serves it with `servefleet up ray_doc_app:app`, as Ray's
`serve run ray_doc_app:app` would): a bare `import starlette` before an
annotation with `starlette.requests.Request` (Ray's import loads that
module), and a `@serve.batch` method returning a numpy array (Ray splits any
sequence of the batch's length). No `from __future__ import annotations`:
the annotation is evaluated as the replica imports the module, as in Ray."""

import numpy as np
import starlette

from servefleet import serve


@serve.deployment
class Doubler:
    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def __call__(self, numbers: list[int]) -> np.ndarray:
        return np.array(numbers) * 2


@serve.deployment
class Ingress:
    def __init__(self, doubler) -> None:
        self.doubler = doubler

    async def __call__(self, request: starlette.requests.Request) -> dict:
        return {"doubled": await self.doubler.remote(int(request.query_params["x"]))}


app = Ingress.bind(Doubler.bind())
