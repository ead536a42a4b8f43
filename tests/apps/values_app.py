"""For tests/test_handle_values.py: deployments whose handle calls carry
arrays, objects, handles and exceptions, and HTTP answers of many types."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pydantic

from servefleet import deployment, get_deployment_handle


@dataclass
class Point:
    x: float
    y: float


class Refused(ValueError):
    """Raised in a replica; the caller sees this type."""


class Locked(Exception):
    """Cannot be pickled (it holds a lock): the caller gets a HandleError."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class Reading(pydantic.BaseModel):
    sensor: str
    value: float


@deployment(max_ongoing_requests=16)
class Arrays:
    def echo(self, *args, **kwargs):
        return args, kwargs

    def scale(self, a, by=2):
        return a * by

    def total(self, a) -> float:
        return float(np.asarray(a).sum())

    def writable(self, a) -> bool:
        return bool(a.flags.writeable)

    def refuse(self, why: str) -> None:
        raise Refused(why)

    def locked(self) -> None:
        raise Locked("holds a lock")

    def rows(self, n: int):
        for i in range(n):
            yield np.full(3, i, dtype=np.int64)

    def broken_rows(self):
        yield np.zeros(2)
        raise Refused("after one row")

    def call_back(self, other, x):
        """Sync code in a replica calling a handle it was given as an argument."""
        return other.scale.remote(x, by=3).result(timeout_s=30)

    def __call__(self):
        """HTTP without a request parameter: called without one."""
        return {"no": "request"}


@deployment
class Caller:
    """Makes a handle without controllers inside a replica: it must call this
    replica's own controllers (not 127.0.0.1:7373)."""

    async def __call__(self, n: int) -> float:
        arrays = get_deployment_handle("Arrays", "vals")
        return await arrays.total.remote(np.arange(n))


@deployment
def no_param():
    return "no request needed"


@deployment
class Encoded:
    def __call__(self, request):
        kind = request.query_params["kind"]
        return {
            "dataclass": lambda: Point(1.0, 2.5),
            "array": lambda: np.arange(4, dtype=np.float32).reshape(2, 2),
            "scalar": lambda: np.int64(7),
            "pydantic": lambda: Reading(sensor="t1", value=0.5),
            "nested": lambda: {"points": [Point(0, 1)], "n": np.float64(2.0), "s": {3}},
            "tuple": lambda: (1, "two"),
            "none": lambda: None,
        }[kind]()


arrays_app = Arrays.bind()
caller_app = Caller.bind()
no_param_app = no_param.bind()
encoded_app = Encoded.bind()
