"""How a proxy answers an HTTP request its deployment's full queue refuses
(Ray Serve's BackpressureConfig, from the replica set: watch.proto
ReplicaSet.backpressure_*): 503 by default or 429, with a Retry-After
header when the deployment sets one. Only a full queue (balancer.QueueFull)
is answered so: a deployment that cannot serve at all is 503 whatever this
says, as in Ray; gRPC calls refused get RESOURCE_EXHAUSTED, handle calls
BackPressureError."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servefleet.v1 import watch_pb2


@dataclass(frozen=True, slots=True)
class Backpressure:
    status: int = 503
    retry_after_s: float | None = None

    @classmethod
    def of(cls, replicas: watch_pb2.ReplicaSet) -> Backpressure:
        retry = (replicas.backpressure_retry_after_s
                 if replicas.HasField("backpressure_retry_after_s") else None)
        return cls(replicas.backpressure_status_code or 503, retry)

    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """The Retry-After header, in whole seconds rounded up, when set."""
        if self.retry_after_s is None:
            return ()
        return ((b"retry-after", str(math.ceil(self.retry_after_s)).encode()),)
