"""Telling the leader the load a proxy or handle router puts on each deployment.

Every `period_s` (and at once when a request queues for a deployment that
has no replica: `wake()`, the start from zero), the reporter sends the
leader one report with, per deployment, the requests queued in its pool
and those sent to replicas and not answered yet. Reports go over one
StreamLoad stream to the leader (a message costs the controller a fraction
of a call); a new stream is opened when the leader changes or the stream
ends. These sums are the
autoscaler's load signal (controller/load_reports.py). A deployment is
listed while it has load, and once more after, with zeros, so the leader
hears that it ended; a report that finds nothing to say is not sent. A
report also names the replicas this process has ejected (passive health),
and those it suspects but may not eject (a pool's last replica), which the
controller health-checks at once. A proxy's reports also carry its recent
traffic per deployment (traffic.py) and the answers that failed since its
previous report (recent_errors.py), for GetStatus and the dashboard. A
proxy that drives HAProxy (proxy/haproxy/) adds what HAProxy holds and did
(`engine`), summed with its own pools'. Reports also name the replica sets
requests go by (all of them on a new stream, then what changed; none once
the process drains), so the leader drains a replica only once no caller
routes to it (controller/drain_fence.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from servefleet._private.watch_client import WatchClient
from servefleet.v1 import controller_pb2, controller_pb2_grpc

from .replica_sets import ReplicaSets

logger = logging.getLogger(__name__)
REPORT_PERIOD_S = 0.5
# After the leader refuses the report stream (a token without the role to
# report), the next stream waits this long, doubling up to the second figure.
REFUSED_BACKOFF_S = (1.0, 30.0)
# (requests, window seconds, p50 ms, p99 ms, failed requests): TrafficWindow.summary's.
Traffic = tuple[int, float, float, float, int]


@dataclass
class EngineLoad:
    """Load outside the process's own pools: an HAProxy engine's."""

    # (queued, ongoing) by "application/deployment"
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Replicas its health checks hold down.
    ejected: list[str] = field(default_factory=list)
    traffic: dict[str, Traffic] = field(default_factory=dict)


def merge_traffic(ours: dict[str, Traffic], theirs: dict[str, Traffic]) -> dict[str, Traffic]:
    """Both sources' traffic per deployment: the rates (requests and failures
    per second) added, over our window; the latencies of the busier source."""
    out = dict(ours)
    for key, (n, window, p50, p99, failed) in theirs.items():
        if key not in out:
            out[key] = (n, window, p50, p99, failed)
            continue
        m, w, q50, q99, f = out[key]
        w, window = w or 1.0, window or 1.0
        latencies = (q50, q99) if m / w >= n / window else (p50, p99)
        out[key] = (round(m + n * w / window), w, *latencies, round(f + failed * w / window))
    return out


def ejected_replicas(sets: ReplicaSets) -> list[str]:
    """The replicas this process has ejected now (passive health, balancer.py)."""
    return sorted(r.replica_id for pool in sets.pools.values() for r in pool.replicas.values()
                  if r.ejected_until > pool.clock())


def suspected_replicas(sets: ReplicaSets) -> list[str]:
    """The replicas holding requests unanswered past the stall time that this
    process has not ejected (it may not: the last of a pool, say)."""
    return sorted(r.replica_id for pool in sets.pools.values() if pool.passive_health
                  for r in pool.unanswering(pool.clock()))


class LoadReporter:
    def __init__(self, watcher: WatchClient, period_s: float = REPORT_PERIOD_S,
                 traffic: Callable[[], dict[str, Traffic]] | None = None,
                 errors: Callable[[], list[controller_pb2.RecentError]] | None = None,
                 engine: Callable[[], Awaitable[EngineLoad]] | None = None,
                 applied: Callable[[], dict[str, str]] | None = None) -> None:
        self._watcher = watcher
        # The replica sets requests go by, when not the pools' (an HAProxy
        # engine's servers: HaproxyEngine.applied), as ReplicaSets.applied names them.
        self._applied = applied
        # An HAProxy engine's load (proxy/haproxy/engine.py), added to the pools'.
        self._engine = engine
        # A proxy's recent requests per deployment (traffic.py), sent along.
        self._traffic = traffic
        # A proxy's failed answers since it last took them (recent_errors.py).
        self._errors = errors
        # The replicas ejected or suspected at the last report (balancer.py).
        self._ejected: list[str] = []
        self._period_s = period_s
        self._wake = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._channel_to = ""
        self._outbox: asyncio.Queue[controller_pb2.StreamLoadRequest | None] = asyncio.Queue()
        self._stream: asyncio.Task[bool] | None = None
        self._last: dict[str, tuple[int, int]] = {}
        # The replica sets this stream was told of (None: all of them go in
        # the next report, which opens a stream).
        self._applied_sent: dict[str, str] | None = None
        self._leaving = False
        # After a refused stream: when the next may open, and the wait before it.
        self._retry_at: float | None = None
        self._backoff_s = 0.0
        self._opened_at = 0.0

    def wake(self) -> None:
        """Report now rather than at the end of the period."""
        self._wake.set()

    def leave(self) -> None:
        """This process takes no new request (a draining proxy): say at once
        that it routes by no replica set, so no drain waits for it."""
        self._leaving = True
        self.wake()

    def routed_by(self, sets: ReplicaSets) -> dict[str, str]:
        """The replica sets requests go by, as ReplicaSets.applied names them."""
        if self._leaving:
            return {}
        return dict(self._applied() if self._applied is not None else sets.applied)

    def counts(self, sets: ReplicaSets, engine: EngineLoad | None = None
               ) -> dict[str, tuple[int, int]]:
        """(queued, ongoing) by "application/deployment", for the pools with load
        now or in the last report."""
        now = {f"{a}/{n}": (pool.queued, pool.ongoing) for (a, n), pool in sets.pools.items()}
        for key, (queued, ongoing) in (engine.counts if engine else {}).items():
            q, o = now.get(key, (0, 0))
            now[key] = (q + queued, o + ongoing)
        report = {k: v for k, v in now.items() if any(v) or any(self._last.get(k, (0, 0)))}
        report.update({k: (0, 0) for k, v in self._last.items() if any(v) and k not in now})
        self._last = now
        return report

    async def run(self, sets: ReplicaSets) -> None:
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._period_s)
                self._wake.clear()
                engine = await self._engine_load()
                report = self.counts(sets, engine)
                traffic = self._traffic() if self._traffic is not None else {}
                ejected, suspected = ejected_replicas(sets), suspected_replicas(sets)
                if engine is not None:
                    traffic = merge_traffic(traffic, engine.traffic)
                    ejected = sorted(set(ejected) | set(engine.ejected))
                had, self._ejected = bool(self._ejected), ejected + suspected
                if not self._watcher.connected.is_set():
                    continue  # failures held meanwhile: the latest go with the next report
                errors = self._errors() if self._errors is not None else []
                applied = self.routed_by(sets)
                if self._applied_sent is not None and self._stream_lost():
                    self._applied_sent = None  # a new stream (a new leader) hears them all
                if report or traffic or self._ejected or had or errors or \
                        applied != self._applied_sent:
                    await self._send(report, traffic, ejected, suspected, errors, applied)
        finally:
            await self._close()

    async def _engine_load(self) -> EngineLoad | None:
        if self._engine is None:
            return None
        try:
            return await self._engine()
        except Exception as e:  # HAProxy reloading or gone: its part waits for the next report
            logger.debug("no load from the engine: %s", e)
            return None

    async def _send(self, report: dict[str, tuple[int, int]],
                    traffic: dict[str, Traffic] | None = None,
                    ejected: list[str] | None = None,
                    suspected: list[str] | None = None,
                    errors: list[controller_pb2.RecentError] | None = None,
                    applied: dict[str, str] | None = None) -> None:
        leader = self._watcher.leader_address()
        if self._held_off(leader):
            return  # the leader refuses our reports: they would go nowhere
        if self._stream is None or self._stream_lost():
            self._applied_sent = None  # a new stream starts from nothing
            await self._close()
            self._channel = self._watcher.credentials.aio_channel(leader)
            self._channel_to = leader
            self._outbox = asyncio.Queue()
            self._opened_at = asyncio.get_running_loop().time()
            self._stream = asyncio.create_task(self._run_stream(
                self._channel, self._outbox, self._watcher.credentials.metadata))
        self._outbox.put_nowait(controller_pb2.StreamLoadRequest(
            report=controller_pb2.ReportLoadRequest(
                reporter_id=self._watcher.watcher_id,
                queued={k: q for k, (q, _) in report.items()},
                ongoing={k: o for k, (_, o) in report.items()},
                traffic={k: controller_pb2.DeploymentTraffic(
                    requests=n, window_s=w, p50_ms=p50, p99_ms=p99, errors=failed)
                    for k, (n, w, p50, p99, failed) in (traffic or {}).items()},
                ejected=ejected or [], suspected=suspected or [],
                recent_errors=errors or [],
                applied=None if applied is None else self._applied_message(applied))))

    def _held_off(self, leader: str) -> bool:
        """Whether the leader refused the last stream and the next must wait:
        REFUSED_BACKOFF_S, doubling while refusals go on. A new leader, a
        stream that ended otherwise, or one taken for longer than the longest
        wait starts over."""
        stream = self._stream
        if stream is None or not stream.done():
            if stream is not None and \
                    asyncio.get_running_loop().time() - self._opened_at > REFUSED_BACKOFF_S[1]:
                self._backoff_s = 0.0  # taken for a while: a later refusal starts over
            return False
        refused = not stream.cancelled() and stream.exception() is None and stream.result()
        if not refused or leader != self._channel_to:
            self._retry_at, self._backoff_s = None, 0.0
            return False
        now = asyncio.get_running_loop().time()
        if self._retry_at is None:
            first, most = REFUSED_BACKOFF_S
            self._backoff_s = min(max(first, self._backoff_s * 2), most)
            self._retry_at = now + self._backoff_s
            logger.warning("the leader %s refused this process's load reports; trying again "
                           "in %.0f s", leader, self._backoff_s)
        if now < self._retry_at:
            return True
        self._retry_at = None
        return False

    def _stream_lost(self) -> bool:
        """The report stream ended, or the leader it goes to is no longer the leader."""
        return self._stream is not None and (
            self._stream.done() or self._watcher.leader_address() != self._channel_to)

    def _applied_message(self, applied: dict[str, str]
                         ) -> controller_pb2.AppliedReplicaSets | None:
        """What `applied` changes in what the stream was told (None: nothing)."""
        sent, self._applied_sent = self._applied_sent, applied
        if sent is None:
            return controller_pb2.AppliedReplicaSets(snapshot_ids=applied, replace=True)
        changed = {k: v for k, v in applied.items() if sent.get(k) != v}
        changed.update({k: "" for k in sent if k not in applied})
        return controller_pb2.AppliedReplicaSets(snapshot_ids=changed) if changed else None

    @staticmethod
    async def _run_stream(channel: grpc.aio.Channel, outbox: asyncio.Queue[
            controller_pb2.StreamLoadRequest | None],
            metadata: tuple[tuple[str, str], ...]) -> bool:
        """Run one report stream; whether the leader refused it."""
        async def messages() -> AsyncIterator[controller_pb2.StreamLoadRequest]:
            while (message := await outbox.get()) is not None:
                yield message

        try:
            await controller_pb2_grpc.ControllerServiceStub(channel).StreamLoad(
                messages(), metadata=metadata)
        except grpc.aio.AioRpcError as e:
            refused = e.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                   grpc.StatusCode.PERMISSION_DENIED)
            logger.log(logging.WARNING if refused else logging.DEBUG,
                       "load report stream ended: %s", e.details())
            return refused
        return False

    async def _close(self) -> None:
        if self._stream is not None and not self._stream.done():
            self._outbox.put_nowait(None)  # ends the stream cleanly
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._stream, 2)
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
