"""Deployments that cannot serve (tests/test_unservable.py): one whose
replicas fail to start, ones that call it through a handle (a class, a
FastAPI app), and a module that fails at import when told to."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from fastapi import FastAPI

from servefleet import deployment
from servefleet.serve import ingress

# The gRPC service these deployments name is the classifier example's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
if os.environ.get("FAILING_APP_IMPORT_ERROR"):
    raise ImportError("the build cannot import this: a dependency is missing")


class Broken:
    def __init__(self, delay_s: float = 0.0) -> None:
        time.sleep(delay_s)
        raise RuntimeError("model file missing: weights.bin")


class Quotes:
    """Fails quoting a secret of its environment, as careless code does."""

    def __init__(self) -> None:
        raise RuntimeError(f"cannot log in with key {os.environ.get('API_KEY')}")


class Slow:
    """Answers after `s` seconds; `stream=1` streams one line a `s`/4 instead."""

    async def __call__(self, request):
        pause = float(request.query_params.get("s", "3"))
        if request.query_params.get("stream"):
            async def lines():
                for i in range(4):
                    yield f"line {i}\n"
                    await asyncio.sleep(pause / 4)
            return lines()
        await asyncio.sleep(pause)
        return "finally"


class Caller:
    """Calls Broken through a handle, over HTTP (__call__) and gRPC (the
    classifier example's Predict), and lets what the call raises through."""

    def __init__(self, model) -> None:
        self.model = model

    async def __call__(self, request):
        return await self.model.remote()

    async def Predict(self, request):
        return await self.model.remote()


api = FastAPI()


@ingress(api)
class ApiCaller:
    def __init__(self, model) -> None:
        self.model = model

    @api.get("/")
    async def root(self):
        return await self.model.remote()


app = deployment(Broken).bind()  # for a config file
caller = deployment(Caller).bind(deployment(Broken).bind(0.2))
api_caller = deployment(ApiCaller).bind(deployment(Broken).bind(0.2))
