"""Choosing a replica: power of two choices over in-flight counts, with a queue.

Each deployment has a `ReplicaPool`. `acquire()` picks two replicas at random
among those below their `max_ongoing_requests` and takes the less loaded
(Mitzenmacher's power of two choices, as Ray Serve's router does). When every
replica is full, or there is none yet, the request waits in a FIFO queue;
past `max_queued_requests` waiting (-1: no limit) it is refused with
`Overloaded`. A replica that failed a connection is set aside until the next
replica-set snapshot names it again. A request for a multiplexed model
(multiplex.py) goes to a replica that holds it, else to one with room that
holds the fewest models (ties: the model's rendezvous-hash order). A
deployment may name another router (routers.py), asked among the candidates
(for a model's requests too).

Passive health (Envoy's outlier detection, Linkerd's failure accrual): a
replica that holds requests and has begun no answer for a while, while
another replica of the pool answered since, has hung (a deadlock, a stopped
process, a stuck GPU call) as far as this router can tell. It is ejected:
new requests go elsewhere for EJECT_BASE_S, doubling on each repeat up to
EJECT_MAX_S; back from an ejection, it is on probation: one request at a
time until it answers (a circuit breaker's half-open state), so a replica
still hung costs one more request, not a fresh set. "A while" is
STALL_FACTOR times the pool's typical time to an answer, at least
STALL_MIN_S, so a replica that is slow but answers is not ejected, and a
pool where every answer is slow ejects nobody. At most half a pool is
ejected at once, and never its last replica. Requests already at the hung
replica are not cut: they wait for it or for their timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .backpressure import Backpressure
from .routers import ReplicaInfo, RequestInfo, RequestRouter, choose_safely, place_model

logger = logging.getLogger(__name__)
STALL_MIN_S = 1.0
STALL_FACTOR = 10.0
EJECT_BASE_S = 5.0
EJECT_MAX_S = 60.0
MAX_EJECTED_SHARE = 0.5
# Requests that may go to a second replica after a hung one received them,
# unless the deployment lists its own (replica_config.retry_methods).
RETRY_SAFE = frozenset({"GET", "HEAD"})


class Overloaded(Exception):
    """Every replica is busy and the queue is full."""


class QueueFull(Overloaded):
    """max_queued_requests wait already (backpressure.py says how proxies answer)."""


class PoolClosed(Overloaded):
    """The deployment left the route table while requests waited for it."""


class Unservable(Overloaded):
    """No replica of the deployment can come until it changes (it failed to
    deploy, or asks for none): the controller's text says why."""


@dataclass
class Replica:
    replica_id: str
    address: str
    in_flight: int = 0
    # host:port of its gRPC server ("" when the deployment serves no gRPC).
    grpc_address: str = ""
    # The multiplexed models it said it holds in its last answer.
    models: frozenset[str] = frozenset()
    # Passive health: requests sent to it whose answer has not begun (a
    # response being streamed does not count), since when it has not
    # answered (its last answer, or when it went from idle to busy), and its
    # ejections.
    awaiting: int = 0
    waiting_since: float = 0.0
    ejected_until: float = 0.0
    ejections: int = 0
    # The controller's count of checks it made because it was ejected, and
    # passed (replica-set snapshots): when it grows, an ejection ends.
    cleared: int = 0
    # Ejected and not answered since: one request at a time.
    probation: bool = False
    # GETs and HEADs sent to it whose answer has not begun (task -> when
    # sent), the ones cut as held by a hung replica, and the one timer that
    # checks them (forward.py sends those elsewhere).
    held: dict[asyncio.Task[Any], float] = field(default_factory=dict)
    cut: set[asyncio.Task[Any]] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None


@dataclass
class ReplicaPool:
    max_ongoing: int = 5
    max_queued: int = -1
    # How an HTTP request refused by a full queue is answered.
    backpressure: Backpressure = field(default_factory=Backpressure)
    replicas: dict[str, Replica] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)
    # Queued requests, oldest first; each is handed its replica when one frees up.
    _waiters: deque[asyncio.Future[Replica]] = field(default_factory=deque)
    # The model a queued request is for, by id() of its waiter (multiplexing:
    # a freed slot is handed out with the oldest waiter's model in mind).
    _models: dict[int, str] = field(default_factory=dict)
    # Requests handed a replica and not yet released (the load this pool adds).
    ongoing: int = 0
    # Called when a request queues while the pool has no replica at all (scaled
    # to zero): the autoscaler should hear of it now, not at the next report.
    on_starved: Callable[[], None] | None = None
    # (application, deployment), for metrics and logs.
    key: tuple[str, str] = ("", "")
    clock: Callable[[], float] = time.monotonic
    # When any replica last answered, and a moving average of the time from
    # sending a request to its answer's headers.
    last_answer: float = 0.0
    typical_s: float = 0.0
    # Called with the replica on each ejection (metrics).
    on_eject: Callable[[Replica], None] | None = None
    # False: no ejections and no second tries of held GETs (proxy
    # --no-passive-health, to compare).
    passive_health: bool = True
    # Methods whose requests a hung replica holds may go to another replica
    # (forward.py); the deployment's retry_methods.
    retry_methods: frozenset[str] = RETRY_SAFE
    # The controller's word that no replica can come (ReplicaSet.unavailable):
    # requests are refused with it instead of queueing. "" while one can.
    unavailable: str = ""
    # Some of its replicas serve TLS (ReplicaEndpoint.http_tls; the HAProxy
    # engine leaves the deployment to its Python path).
    serves_tls: bool = False
    # A router not power of two's, its (name, kwargs); waiters' routing info.
    router: RequestRouter | None = None
    router_spec: tuple[str, str] = ("", "")
    _routing: dict[int, RequestInfo] = field(default_factory=dict)

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def update(self, endpoints: list[tuple[str, str]], max_ongoing: int,
               max_queued: int, grpc_addresses: dict[str, str] | None = None,
               retry_methods: Iterable[str] = (), cleared: dict[str, int] | None = None,
               unavailable: str = "") -> None:
        """Apply a replica-set snapshot: the controller's word replaces local guesses.
        `endpoints` are (replica id, HTTP address); `grpc_addresses` and
        `cleared` (ReplicaEndpoint.cleared) by replica id; `retry_methods` empty
        means RETRY_SAFE. An ejected replica whose `cleared` grew is back: the
        controller checked it because of an ejection, and it answered.
        `unavailable` (with no endpoints): no replica can come, so the queued
        requests fail with Unservable and new ones are refused."""
        current = dict(self.replicas)
        self.replicas = {rid: current.get(rid) or Replica(rid, addr) for rid, addr in endpoints}
        now = self.clock()
        for rid, addr in endpoints:
            replica = self.replicas[rid]
            replica.address = addr
            replica.grpc_address = (grpc_addresses or {}).get(rid, "")
            count = (cleared or {}).get(rid, 0)
            if count > replica.cleared and replica.ejected_until > now:
                logger.info("%s/%s: replica %s passed the controller's health check: back "
                            "from its ejection", *self.key, rid)
                replica.ejected_until = 0.0  # on probation still: one request at a time
            replica.cleared = count
        self._down.clear()
        self.max_ongoing, self.max_queued = max(1, max_ongoing), max_queued
        self.retry_methods = frozenset(retry_methods) or RETRY_SAFE
        self.unavailable = "" if endpoints else unavailable
        if self.router is not None and set(current) != set(self.replicas):
            self._tell_router()
        if self.unavailable:
            self._fail_waiters(Unservable(self.unavailable))
        self._wake()

    def use_router(self, router: RequestRouter | None, spec: tuple[str, str]) -> None:
        """Route with `router` from now on (None: power of two choices)."""
        self.router, self.router_spec = router, spec
        self._tell_router()

    def _tell_router(self) -> None:
        if self.router is not None:
            choose_safely(self.router, (), RequestInfo(), "/".join(self.key),
                          lambda r: r.replicas_changed(list(self.replicas)))

    def mark_down(self, replica: Replica) -> None:
        self._down.add(replica.replica_id)

    def note_answer(self, replica: Replica, sent_at: float) -> None:
        """A replica answered (its response headers came) a request sent at `sent_at`."""
        now = self.clock()
        replica.waiting_since = self.last_answer = now
        replica.probation = False
        taken = now - sent_at
        self.typical_s = taken if not self.typical_s else 0.9 * self.typical_s + 0.1 * taken

    def stall_s(self) -> float:
        """How long a replica may hold requests without answering before it
        counts as hung (while others answer)."""
        return max(STALL_MIN_S, STALL_FACTOR * self.typical_s)

    def eject(self, replica: Replica, now: float | None = None) -> bool:
        """Set the replica aside for new requests (its period doubling on
        repeats); False when that would pass the share of the pool that may be
        ejected at once (never the last replica)."""
        now = self.clock() if now is None else now
        ejected = sum(r.ejected_until > now for r in self.replicas.values())
        if replica.ejected_until > now or ejected >= int(MAX_EJECTED_SHARE * len(self.replicas)):
            return False
        replica.ejections += 1
        replica.probation = True
        replica.ejected_until = now + min(EJECT_MAX_S,
                                          EJECT_BASE_S * 2 ** (replica.ejections - 1))
        logger.warning("%s/%s: replica %s holds %d requests and answered none for %.1f s "
                       "while others answered: ejected for %.0f s", *self.key,
                       replica.replica_id, replica.in_flight, now - replica.waiting_since,
                       replica.ejected_until - now)
        if self.on_eject is not None:
            self.on_eject(replica)
        return True

    def hold(self, replica: Replica, task: asyncio.Task[Any], sent_at: float) -> None:
        """A GET or HEAD now waits for `replica`'s answer in `task`: if the
        replica turns out hung (it answers nothing, this or anything else,
        for the stall time while another replica answered), the task is
        cancelled and listed in `replica.cut`. One timer per replica, not per
        request: a timer per request would churn the loop's timer heap."""
        replica.held[task] = sent_at
        if replica.timer is None:
            replica.timer = asyncio.get_running_loop().call_later(
                self.stall_s(), self._check_held, replica)

    def release_hold(self, replica: Replica, task: asyncio.Task[Any]) -> bool:
        """The task's wait is over; True when it was cut as held by a hung replica."""
        replica.held.pop(task, None)
        if task in replica.cut:
            replica.cut.discard(task)
            return True
        return False

    def _check_held(self, replica: Replica) -> None:
        replica.timer = None
        if not replica.held:
            return
        now, stall = self.clock(), self.stall_s()
        others_answered = self.last_answer > replica.waiting_since
        wait = stall
        for task, sent_at in list(replica.held.items()):
            quiet = now - max(replica.waiting_since, sent_at)
            if quiet >= stall and others_answered:
                del replica.held[task]
                replica.cut.add(task)
                task.cancel()
            else:
                wait = min(wait, stall - quiet)
        if replica.held:
            replica.timer = asyncio.get_running_loop().call_later(
                max(0.05, wait), self._check_held, replica)

    def unanswering(self, now: float) -> list[Replica]:
        """Replicas not ejected that hold requests and answered none for the
        stall time, whether or not another replica answered meanwhile: those
        this pool may not eject (the last one, or past the share) are reported
        to the controller as suspects (load_report.py) so that it checks them."""
        stall = self.stall_s()
        return [r for r in self.replicas.values()
                if r.awaiting and r.ejected_until <= now and now - r.waiting_since > stall]

    def _eject_hung(self, now: float) -> None:
        stall = self.stall_s()
        for r in self.replicas.values():
            if (r.awaiting and r.ejected_until <= now and now - r.waiting_since > stall
                    and self.last_answer > r.waiting_since):
                self.eject(r, now)

    def _candidates(self, exclude: set[str]) -> list[Replica]:
        now = self.clock()
        if self.passive_health:
            self._eject_hung(now)
        return [r for r in self.replicas.values()
                if r.in_flight < self.max_ongoing and r.replica_id not in self._down
                and r.replica_id not in exclude and r.ejected_until <= now
                and not (r.probation and r.in_flight)]

    def _pick(self, exclude: set[str], model_id: str = "",
              routing: RequestInfo | None = None) -> Replica | None:
        # Excluded replicas (tried already) only when nothing else has room: a
        # retry on the same replica beats waiting for one that may never free up.
        candidates = self._candidates(exclude) or self._candidates(set())
        if not candidates:
            return None
        if self.router is not None:
            chosen = self._routed(candidates, routing or RequestInfo(model_id))
            if chosen is not None:
                return chosen
        if model_id:
            return place_model(candidates, model_id)
        if len(candidates) == 1:
            return candidates[0]
        a, b = random.sample(candidates, 2)
        return a if a.in_flight <= b.in_flight else b

    def _routed(self, candidates: list[Replica], routing: RequestInfo) -> Replica | None:
        """The router's choice among the candidates (None: power of two)."""
        assert self.router is not None
        views = [ReplicaInfo(r.replica_id, r.in_flight, self.max_ongoing, r.models)
                 for r in candidates]
        chosen = choose_safely(self.router, views, routing, "/".join(self.key))
        return next((r for r in candidates if chosen and r.replica_id == chosen.replica_id),
                    None)

    def note_models(self, replica: Replica, header: bytes | None) -> None:
        """What a replica's answer said it holds (`x-servefleet-models`)."""
        replica.models = frozenset(header.decode("latin-1").split(",")) if header \
            else frozenset()

    async def acquire(self, exclude: set[str] | None = None, model_id: str = "",
                      routing: RequestInfo | None = None,
                      on_queue: Callable[[], None] | None = None) -> Replica:
        """A replica with room for one more request; waits in the queue if none
        (calling `on_queue` first: a trace's queue span starts there).

        First come, first served: while others wait, a newcomer queues behind
        them, and a freed slot is handed to the oldest waiter directly.
        """
        if not self._waiters:
            replica = self._pick(exclude or set(), model_id, routing)
            if replica is not None:
                self._busy(replica)
                replica.in_flight += 1
                self.ongoing += 1
                return replica
        if self.unavailable:
            raise Unservable(self.unavailable)
        if 0 <= self.max_queued <= len(self._waiters):
            raise QueueFull(f"{len(self._waiters)} requests already queued")
        waiter: asyncio.Future[Replica] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if model_id:
            self._models[id(waiter)] = model_id
        if routing is not None:
            self._routing[id(waiter)] = routing
        if not self.replicas and self.on_starved is not None:
            self.on_starved()
        if on_queue is not None:
            on_queue()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed a slot as we left: pass it on
            raise
        finally:
            self._models.pop(id(waiter), None)
            self._routing.pop(id(waiter), None)
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _busy(self, replica: Replica) -> None:
        if not replica.in_flight:  # idle until now: not waiting for it before this
            replica.waiting_since = self.clock()

    def close(self) -> None:
        """Fail every queued request: the deployment is no longer served."""
        self._fail_waiters(PoolClosed("the deployment is no longer served"))

    def _fail_waiters(self, error: Overloaded) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        self.ongoing -= 1
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to queued requests, oldest first."""
        while self._waiters:
            first = id(self._waiters[0])
            replica = self._pick(set(), self._models.get(first, ""), self._routing.get(first))
            if replica is None:
                return
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._busy(replica)
                replica.in_flight += 1
                self.ongoing += 1
                waiter.set_result(replica)
