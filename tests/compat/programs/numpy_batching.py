"""numpy arrays in and out through handles, and @serve.batch over them."""
import asyncio
from typing import List

import numpy as np

from servefleet import serve


@serve.deployment
class Scaler:
    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.1)
    async def scale(self, arrays: List[np.ndarray]) -> np.ndarray:
        # Ray splits the batch's result along its first axis: one array per caller.
        return np.stack(arrays) * 2

    def total(self, array: np.ndarray) -> np.float64:
        return array.sum()


handle = serve.run(Scaler.bind(), route_prefix=None)
inputs = [np.full((4, 4), i, dtype=np.float32) for i in range(10)]


async def main():
    results = await asyncio.gather(*[handle.scale.remote(a) for a in inputs])
    for i, result in enumerate(results):
        assert isinstance(result, np.ndarray) and result.dtype == np.float32
        assert (result == 2 * i).all()


asyncio.run(main())
big = np.arange(250_000, dtype=np.float32)
assert handle.total.remote(big).result() == big.sum()
serve.shutdown()
print("OK")
