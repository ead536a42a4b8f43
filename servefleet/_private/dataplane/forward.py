"""Forward-with-retry: send a request to one of a deployment's replicas.

The one loop both proxies and handles run (docs/design.md, "one way to reach a
replica"); they differ only in framing: what they send, and what `deliver`
does with the answer (stream it to an HTTP client, or read a handle call's
JSON).

Per attempt:

1. the pool gives a replica with room (balancer.py): it may queue, and
   raises `Overloaded` past `max_queued_requests`;
2. the request goes to it over a pooled connection (upstream.py);
3. a request the replica never received is tried on another one: the
   connection was refused, a kept-alive connection turned out closed, or the
   replica answered 503 with `x-servefleet-rejected` (loading, draining,
   overloaded). A replica that refused the connection or is draining is on
   its way out: it is set aside until the controller's next replica set
   (`set_aside`), and the try costs no attempt; with no other replica to
   try, the request waits in the queue for that set, as a request for a
   deployment scaled to zero waits for its first replica (a rollout whose
   new replicas the caller has not heard of yet fails nothing). The other
   reasons are the replica's own state: after MAX_ATTEMPTS of those,
   `NoReplicaTook`;
4. any other answer goes to `deliver`, while the replica's slot and the
   connection are held, so its in-flight count covers the whole response.

Each attempt carries the request's trace context (tracing.py): with tracing
on, it is a "send to replica" span of its own, naming the replica and, when
the replica did not take the request, why; a wait in the queue is a "queue"
span.

A failure after the request was sent (`UpstreamError`) is not retried: the
replica may have acted on it. The exception: a GET or HEAD (or a method the
deployment's retry_methods lists) that its replica holds without answering
while other replicas answer (a hung replica, see `_request`) goes to another
replica, and the hung one is ejected. Nor is a
streamed body once part of it past the held buffer was sent (body.py): it
cannot be sent again. Cancelling the caller closes the connection, which
makes the replica cancel the request in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import MODELS_HEADER, REJECTED_HEADER

from .balancer import Replica, ReplicaPool
from .body import StreamedBody, replayable
from .metrics import RETRIES, retry_reason
from .routers import RequestInfo
from .upstream import NotDelivered, Response, UpstreamError, UpstreamPool

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
# Why a replica did not take a request (metrics.retry_reason) when it means the
# replica is leaving: it is set aside until the next replica set, at no attempt's cost.
SET_ASIDE = frozenset({"refused", "draining"})

T = TypeVar("T")


class NoReplicaTook(Exception):
    """MAX_ATTEMPTS replicas did not take the request for reasons of their own
    (busy, hung), not because they were leaving."""


def set_aside(pool: ReplicaPool, replica: Replica, tried: set[str], reason: str) -> int:
    """Note a try that `replica` did not take, for `reason`
    (metrics.retry_reason); the attempts it costs: 0 when the replica is
    leaving (it is set aside until the next replica set), else 1."""
    tried.add(replica.replica_id)
    RETRIES.labels(*pool.key, reason).inc()
    if reason in SET_ASIDE:
        pool.mark_down(replica)
        return 0
    return 1


class HungReplica(Exception):
    """A request safe to send again got no answer from its replica while other
    replicas answered: it goes to another one."""


async def _request(pool: ReplicaPool, upstream: UpstreamPool, replica: Replica, method: str,
                   target: bytes, headers: list[tuple[bytes, bytes]],
                   body: bytes | StreamedBody, sent_at: float) -> Response:
    """upstream.request; a request safe to send twice (by its method: GET and
    HEAD unless the deployment's retry_methods say otherwise; with a body held
    whole) is held with the pool (balancer.py `hold`): when its replica
    answered nothing (this or any other request) for the pool's stall time
    while another replica answered since, the try is cancelled (its
    connection closed, so the replica cancels the request if it ever wakes)
    and HungReplica raised. Without that evidence the try goes on: a
    deployment whose answers are all slow is not cut."""
    if method not in pool.retry_methods or not replayable(body) or not pool.passive_health:
        return await upstream.request(replica.address, method, target, headers, body)
    task = asyncio.current_task()
    assert task is not None
    pool.hold(replica, task, sent_at)
    cut = False
    try:
        return await upstream.request(replica.address, method, target, headers, body)
    except asyncio.CancelledError:
        cut = pool.release_hold(replica, task)
        if not cut:
            raise
        task.uncancel()
        raise HungReplica() from None
    finally:
        if not cut:
            pool.release_hold(replica, task)


async def forward(pool: ReplicaPool, upstream: UpstreamPool, method: str, target: bytes,
                  headers: list[tuple[bytes, bytes]], body: bytes | StreamedBody,
                  deliver: Callable[[Response], Awaitable[T]], request_id: str = "",
                  model_id: str = "", routing: RequestInfo | None = None) -> T:
    """What `deliver` returns for the first answer a replica gave.

    Raises `Overloaded` (from the pool), `NoReplicaTook`, `UpstreamError`
    (the exchange failed after sending; its `address` names the replica),
    and whatever `deliver` raises.
    """
    tried: set[str] = set()
    attempt = spent = 0
    while spent < MAX_ATTEMPTS:
        attempt += 1
        if not tracing.recording():
            replica = await pool.acquire(exclude=tried, model_id=model_id, routing=routing)
            span = None
            passed = tracing.PASSED.get()  # a client's trace context, passed on as it came
            hop = headers + list(passed) if passed else headers
        else:
            replica = await _acquire_traced(pool, tried, model_id, routing)
            span = tracing.child("send to replica", {
                "servefleet.replica": replica.replica_id, "servefleet.attempt": attempt,
                "server.address": replica.address}, kind="CLIENT")
            hop = headers + tracing.hop_headers(span)
        not_taken = ""
        try:
            sent_at = pool.clock()
            replica.awaiting += 1  # until its answer begins (passive health, balancer.py)
            try:
                response = await _request(pool, upstream, replica, method, target, hop,
                                          body, sent_at)
            finally:
                replica.awaiting -= 1
            pool.note_answer(replica, sent_at)
            pool.note_models(replica, response.header(MODELS_HEADER))
            try:
                if (response.status == 503 and replayable(body)
                        and (reason := response.header(REJECTED_HEADER))):
                    # Refused unread; drain the short body so the connection stays usable.
                    with contextlib.suppress(UpstreamError):
                        await response.read()
                    raise NotDelivered(reason.decode(errors="replace"))
                if span is not None:
                    span.set_attribute("http.response.status_code", response.status)
                return await deliver(response)
            finally:
                response.release()
        except HungReplica:
            not_taken = "hung"
            spent += set_aside(pool, replica, tried, not_taken)
            pool.eject(replica)
            logger.warning("request %s: %s answered nothing while others answered; trying "
                           "another replica (attempt %d)", request_id, replica.replica_id,
                           attempt)
        except NotDelivered as e:
            not_taken = str(e)
            spent += set_aside(pool, replica, tried, retry_reason(e.refused, not_taken))
            logger.info("request %s not taken by %s (%s); attempt %d", request_id,
                        replica.replica_id, e, attempt)
        except BaseException as e:
            if span is not None:
                tracing.end(span, e if isinstance(e, Exception) else None)
                span = None
            raise
        finally:
            pool.release(replica)
            if span is not None:
                tracing.end(span, None, {"servefleet.retry.reason": not_taken})
    raise NoReplicaTook(f"no replica took it after {MAX_ATTEMPTS} attempts")


async def _acquire_traced(pool: ReplicaPool, tried: set[str], model_id: str,
                          routing: RequestInfo | None) -> Replica:
    """pool.acquire, with a "queue" span when the request had to wait."""
    queued_at: list[int] = []
    error: BaseException | None = None
    try:
        return await pool.acquire(exclude=tried, model_id=model_id, routing=routing,
                                  on_queue=lambda: queued_at.append(time.time_ns()))
    except BaseException as e:
        error = e
        raise
    finally:
        if queued_at:
            tracing.end(tracing.child("queue", {"servefleet.deployment": pool.key[1]},
                                      start_ns=queued_at[0]),
                        error if isinstance(error, Exception) else None)
