"""Ray Serve 2.5x's BackpressureConfig: past max_queued_requests, HTTP callers
get the status it names (429 here) with a Retry-After header, and handle
callers get BackPressureError."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

import requests

from servefleet import serve
from servefleet.serve.config import BackpressureConfig
from servefleet.serve.exceptions import BackPressureError


@serve.deployment(
    max_ongoing_requests=1,
    max_queued_requests=1,
    backpressure_config=BackpressureConfig(status_code=429, retry_after_s=2.5),
)
class Slow:
    async def __call__(self, *args) -> str:
        await asyncio.sleep(1.5)
        return "done"


handle = serve.run(Slow.bind())
assert requests.get("http://127.0.0.1:8000/").text == "done"

# One runs, one waits in the queue, the rest are refused at once.
with ThreadPoolExecutor(5) as pool:
    replies = list(pool.map(lambda _: requests.get("http://127.0.0.1:8000/"), range(5)))
codes = sorted(r.status_code for r in replies)
assert codes == [200, 200, 429, 429, 429], codes
refused = [r for r in replies if r.status_code == 429]
assert all(r.headers["retry-after"] == "3" for r in refused), [r.headers for r in refused]

# A handle's own queue refuses the same way, with Ray's exception.
running, queued = handle.remote(), handle.remote()
try:
    handle.remote().result()
except BackPressureError:
    pass
else:
    raise AssertionError("a third call was not refused")
assert running.result() == queued.result() == "done"

serve.shutdown()
print("OK")
