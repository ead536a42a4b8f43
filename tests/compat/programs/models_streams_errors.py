"""Multiplexed models chosen by header, user_config with reconfigure, a
streamed HTTP answer, a function deployment, and a user error through a handle."""
import time
from typing import Dict

import requests
from starlette.requests import Request
from starlette.responses import StreamingResponse

from servefleet import serve


@serve.deployment
class ModelHost:
    @serve.multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str):
        return lambda x: f"{model_id}:{x}"

    async def __call__(self, request: Request) -> str:
        model = await self.get_model(serve.get_multiplexed_model_id())
        return model(request.query_params["x"])


@serve.deployment(user_config={"threshold": 0.5})
class Thresholder:
    def reconfigure(self, config: Dict):
        self.threshold = config["threshold"]

    def __call__(self, request: Request) -> dict:
        return {"above": float(request.query_params["v"]) > self.threshold}


@serve.deployment
class Streamer:
    def numbers(self, n: int):
        for i in range(n):
            yield f"{i}\n"
            time.sleep(0.01)

    def __call__(self, request: Request) -> StreamingResponse:
        return StreamingResponse(self.numbers(int(request.query_params["n"])),
                                 media_type="text/plain")


@serve.deployment
def divide(a: int, b: int) -> float:
    return a / b


serve.run(ModelHost.bind(), name="models", route_prefix="/models")
serve.run(Thresholder.bind(), name="threshold", route_prefix="/threshold")
serve.run(Streamer.bind(), name="stream", route_prefix="/stream")
divider = serve.run(divide.bind(), name="divide", route_prefix=None)

answer = requests.get("http://127.0.0.1:8000/models", params={"x": "1"},
                      headers={"serve_multiplexed_model_id": "m7"})
assert answer.text == "m7:1", answer.text
assert requests.get("http://127.0.0.1:8000/threshold?v=0.7").json() == {"above": True}
with requests.get("http://127.0.0.1:8000/stream?n=5", stream=True) as r:
    lines = [line for line in r.iter_lines(decode_unicode=True) if line]
assert lines == ["0", "1", "2", "3", "4"], lines
assert divider.remote(6, 3).result() == 2.0
try:
    divider.remote(1, 0).result()
except ZeroDivisionError:
    pass
else:
    raise AssertionError("the user's ZeroDivisionError did not reach the caller")
serve.shutdown()
print("OK")
