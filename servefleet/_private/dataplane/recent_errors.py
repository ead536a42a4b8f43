"""The failed answers a proxy gave since its last load report (for the dashboard).

`add` is called once per failed answer (HTTP status 500 or above, a gRPC
ingress call ending with a code other than OK) with its request and trace
ids; `take` is called with each load report (load_report.py) and returns
the failures added since the previous `take`, oldest first. At most
MAX_ERRORS are held, the latest: a storm of errors costs a bounded deque,
and DeploymentTraffic.errors (traffic.py) still counts every one. An id a
client made up is cut to MAX_ID characters and a route to MAX_ROUTE, so a
report always passes the controller's checks (controller/load_reports.py).
Pure, with an injectable clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from servefleet.v1 import controller_pb2

MAX_ERRORS = 20
MAX_ID = 128
MAX_ROUTE = 256

# (unix time, application, deployment, route, HTTP status, gRPC code name,
# request id, trace id): a tuple, as building a message costs more and most
# held failures are pushed out unsent in a storm.
_Held = tuple[float, str, str, str, int, str, str, str]


class RecentErrors:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._held: deque[_Held] = deque(maxlen=MAX_ERRORS)

    def add(self, application: str, deployment: str, route: str, http_status: int,
            grpc_code: str, request_id: str, trace_id: str) -> None:
        """One failed answer: an HTTP status (grpc_code "") or a gRPC code name
        (http_status 0)."""
        self._held.append((self._clock(), application, deployment, route[:MAX_ROUTE],
                           http_status, grpc_code, request_id[:MAX_ID], trace_id))

    def take(self) -> list[controller_pb2.RecentError]:
        """The failures since the last call, oldest first; then none are held."""
        held, self._held = self._held, deque(maxlen=MAX_ERRORS)
        return [controller_pb2.RecentError(
            time_unix_s=at, application=application, deployment=deployment, route=route,
            http_status=status, grpc_code=code, request_id=request_id, trace_id=trace_id)
            for at, application, deployment, route, status, code, request_id, trace_id in held]

    def __len__(self) -> int:
        return len(self._held)
