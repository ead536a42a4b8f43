"""GetLogs: replicas' output through the controller, from any runtime.

`LogStream` picks the replicas that match the request among those the
leader observes, sends the last lines of each, and with `follow` polls the
runtime every POLL_S for more (replicas that appear later are picked up,
ones that go away are dropped). Runtime reads block (files, the Docker API),
so they run in a thread. With `request_id`, only that request's lines are
sent, a text record's traceback included (request_lines.py): looked for
among each replica's last MAX_TAIL lines (`servefleet logs --request-id`:
one request through every deployment it crossed). What a call may send, in
bytes and in time, is bounded (log_bounds.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import replica_pb2

from ..errors import FailedPrecondition, InvalidArgument, NotFound
from .log_bounds import GET_LOGS, LogBounds, LogBudget
from .request_lines import RequestLines

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..term import LeaderTerm

POLL_S = 0.5
DEFAULT_TAIL = 100
MAX_TAIL = 10_000
MAX_REQUEST_ID = 256


def _application_of(term: LeaderTerm, application: str, deployment: str) -> str:
    """The application of the named deployment: `application` if it has one
    so named; without one, the only application that has (as ListReplicas
    finds it). NotFound or InvalidArgument otherwise."""
    apps = sorted(r.spec.application for r in term.deployments.live()
                  if r.spec.name == deployment)
    if application:
        if application not in apps:
            raise NotFound(f"no deployment {application}/{deployment}")
        return application
    if not apps:
        raise NotFound(f"no deployment named {deployment} in any application")
    if len(apps) > 1:
        raise InvalidArgument("application", f"deployment {deployment} is in several "
                              f"applications ({', '.join(apps)}): name one")
    return apps[0]


class LogStream:
    def __init__(self, term: LeaderTerm, runtime: Runtime | None,
                 request: api.GetLogsRequest, bounds: LogBounds = GET_LOGS,
                 poll_s: float = POLL_S) -> None:
        """InvalidArgument, NotFound (a named deployment that does not exist) or
        FailedPrecondition (no runtime) for a request that cannot be served."""
        if runtime is None:
            raise FailedPrecondition("this controller runs no replicas (--runtime none)")
        if request.tail_lines > MAX_TAIL:
            raise InvalidArgument("tail_lines", f"at most {MAX_TAIL}, got {request.tail_lines}")
        self._term = term
        self._runtime = runtime
        self._request = request
        self._bounds, self._poll_s = bounds, poll_s
        self._application = request.application
        if request.deployment:
            self._application = _application_of(term, request.application, request.deployment)
        self._tail = request.tail_lines or DEFAULT_TAIL
        if len(request.request_id) > MAX_REQUEST_ID:
            raise InvalidArgument("request_id", f"at most {MAX_REQUEST_ID} characters")

    def _matching(self) -> list[replica_pb2.ReplicaRecord]:
        request = self._request
        found = []
        for (app, name), observation in self._term.observed.deployments.items():
            if self._application and app != self._application:
                continue
            if request.deployment and name != request.deployment:
                continue
            found += [r.record for r in observation.replicas
                      if not request.replica_id or r.record.replica_id == request.replica_id]
        return sorted(found, key=lambda r: r.replica_id)

    async def run(self, serving: Callable[[], bool]) -> AsyncIterator[api.GetLogsResponse]:
        """The lines; TooMuchOutput (log_bounds.py) past the call's bytes."""
        budget = LogBudget(self._bounds)
        cursors: dict[str, str] = {}
        # With a request id: each replica's output read so far, as request_lines.py reads it.
        requests: dict[str, RequestLines] = {}
        request_id = self._request.request_id
        while True:
            records = self._matching()
            for record in records:
                cursor = cursors.get(record.replica_id, "")
                # One request's lines are looked for among the most a read gives.
                read = MAX_TAIL if request_id else self._tail
                text, cursors[record.replica_id] = await asyncio.to_thread(
                    self._runtime.read_logs, record.replica_id, cursor, read)
                lines = text.splitlines()
                if request_id:
                    lines = requests.setdefault(record.replica_id, RequestLines(request_id)
                                                ).take(lines)[-self._tail:]
                for message in budget.messages(record, lines):
                    yield message
            live = {r.replica_id for r in records}
            for gone in set(cursors) - live:
                del cursors[gone]
                requests.pop(gone, None)
            if not self._request.follow or not serving():
                return
            await asyncio.sleep(self._poll_s)
