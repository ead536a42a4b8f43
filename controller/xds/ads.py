"""The leader's Aggregated Discovery Service (xDS, state of the world).

Proxyless gRPC clients (and Envoy) open one `StreamAggregatedResources`
stream and subscribe, per type URL, to resource names (resources.py builds
them from the Watch publisher's snapshots, once per publisher generation,
shared by every stream). Per stream and type this keeps what the client
asked for and what it was last sent:

- a response goes out when the subscription changes or the resources under
  it do: for LDS and CDS every subscribed resource that exists (state of
  the world: one missing from a response does not exist); for RDS and EDS
  the subscribed ones that exist;
- the version is a digest of the response's content, so a client that
  reconnects to a new leader with the same state is sent the same version;
- a request carrying the last nonce is an ACK, or with `error_detail` a
  NACK: logged, kept for status, and never answered by sending the same
  resources again (only a later change is sent);
- a request with an old nonce is stale (the client had not seen the latest
  response yet) and only updates the subscription.

A standby controller relays the stream to the leader (so a client whose
bootstrap lists every controller reaches the leader through any of them);
a leader whose term ends, or a standby that knows no leader, ends the stream
with UNAVAILABLE and the leader's address in the trailing metadata, as Watch
does. The client then opens a new stream, which the next leader serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from servefleet.wire import REPLICAS_KIND, ROUTES_KEY, parse_watch_key

from ..watch import Publisher
from .build import build
from .resources import CLUSTER, LISTENER, TYPES, Resources

logger = logging.getLogger(__name__)
# Types whose responses carry the whole subscribed set (state of the world).
_WHOLE_SET = (LISTENER, CLUSTER)
_IDLE_CHECK_S = 5.0


class ResourceCache:
    """The resources of a publisher's current generation, built once for all streams."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._resources = Resources()

    def get(self, publisher: Publisher) -> Resources:
        key = (id(publisher), publisher.generation)
        if key != self._key:
            routes = publisher.snapshot(ROUTES_KEY)
            sets = {}
            for snapshot in publisher.snapshots(REPLICAS_KIND + "/"):
                parsed = parse_watch_key(snapshot.key)
                sets[(parsed.application, parsed.deployment)] = snapshot.replicas
            self._resources = build(routes.routes if routes is not None else None, sets)
            self._key = key
        return self._resources


@dataclass
class _Subscription:
    names: set[str] = field(default_factory=set)
    wildcard: bool = False
    sent_version: str = ""
    nonce: str = ""
    acked_version: str = ""
    nack: str = ""
    # Set when the client asked for something new: answer even if unchanged.
    dirty: bool = True
    # What the last response carried, by name (for CSDS).
    sent: dict[str, Any] = field(default_factory=dict)


@dataclass
class XdsClient:
    """One connected xDS client, for status and logs."""

    node_id: str
    peer: str
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)


class AggregatedDiscovery(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def __init__(self, publisher: Callable[[], Publisher | None],
                 can_serve: Callable[[], bool],
                 abort_not_leader: Callable[[grpc.aio.ServicerContext], Any],
                 check: Callable[[grpc.aio.ServicerContext], Any] | None = None,
                 leader: Callable[[], Awaitable[str | None]] | None = None,
                 connect: Callable[[str], grpc.aio.Channel] | None = None) -> None:
        self._publisher = publisher
        self._can_serve = can_serve
        self._abort_not_leader = abort_not_leader
        self._check = check
        # On a standby: where the leader is, and a channel to it (the relay).
        self._leader = leader
        self._connect = connect
        self._cache = ResourceCache()
        self._nonces = itertools.count(1)
        self.clients: dict[int, XdsClient] = {}

    async def StreamAggregatedResources(self, request_iterator: Any,
                                        context: grpc.aio.ServicerContext
                                        ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        if self._check is not None:
            await self._check(context)
        publisher = self._publisher()
        if publisher is None or not self._can_serve():
            # A standby relays the stream to the leader: a client whose
            # bootstrap lists every controller reaches the leader through any.
            leader = await self._leader() if self._leader is not None else None
            if leader is not None and self._connect is not None:
                async for response in self._relay(leader, request_iterator, context):
                    yield response
            await self._abort_not_leader(context)
            return
        async for response in self._serve(publisher, request_iterator, context):
            yield response
        await self._abort_not_leader(context)

    async def _relay(self, leader: str, request_iterator: Any,
                     context: grpc.aio.ServicerContext
                     ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        """Pass the stream on to the leader until either side ends it."""
        assert self._connect is not None
        metadata = tuple((k, v) for k, v in context.invocation_metadata() or ()
                         if k == "authorization")
        channel = self._connect(leader)
        upstream = ads_pb2_grpc.AggregatedDiscoveryServiceStub(
            channel).StreamAggregatedResources(metadata=metadata)

        async def pump() -> None:
            async for request in request_iterator:
                await upstream.write(request)
            await upstream.done_writing()

        pumping = asyncio.create_task(pump())
        logger.info("relaying an xDS stream from %s to the leader %s", context.peer(), leader)
        try:
            async for response in upstream:
                yield response
        except grpc.aio.AioRpcError as e:
            logger.info("the relayed xDS stream ended: %s %s", e.code().name, e.details())
        finally:
            pumping.cancel()
            upstream.cancel()
            await channel.close()

    async def _serve(self, publisher: Publisher, request_iterator: Any,
                     context: grpc.aio.ServicerContext
                     ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        client = XdsClient(node_id="", peer=context.peer())
        self.clients[id(client)] = client
        inbox: asyncio.Queue[discovery_pb2.DiscoveryRequest | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    await inbox.put(request)
            finally:
                await inbox.put(None)

        reader = asyncio.create_task(read())
        try:
            seen = -1
            while not publisher.closed and self._can_serve():
                for response in self._responses(client, publisher):
                    yield response
                seen = publisher.generation
                request = await self._next(inbox, publisher, seen)
                if request is _GONE:
                    return
                if isinstance(request, discovery_pb2.DiscoveryRequest):
                    self._take(client, request)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self.clients.pop(id(client), None)

    async def _next(self, inbox: asyncio.Queue, publisher: Publisher, seen: int) -> Any:
        """The next request, _GONE when the client left, or None after a change."""
        getting = asyncio.ensure_future(inbox.get())
        changing = asyncio.ensure_future(publisher.wait_change(seen, _IDLE_CHECK_S))
        done, _ = await asyncio.wait({getting, changing}, return_when=asyncio.FIRST_COMPLETED)
        changing.cancel()
        if getting in done:
            request = getting.result()
            return _GONE if request is None else request
        getting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getting
        return None

    def _take(self, client: XdsClient, request: discovery_pb2.DiscoveryRequest) -> None:
        if request.node.id and not client.node_id:
            client.node_id = request.node.id
            logger.info("xDS client %s connected from %s", client.node_id, client.peer)
        if request.type_url not in TYPES:
            logger.info("xDS client %s asked for %s, which this server does not serve",
                        client.node_id, request.type_url)
            return
        sub = client.subscriptions.setdefault(request.type_url, _Subscription())
        if request.response_nonce and request.response_nonce != sub.nonce:
            pass  # stale: the client has not seen our latest response yet
        elif request.response_nonce:
            if request.HasField("error_detail"):
                sub.nack = request.error_detail.message
                logger.warning("xDS client %s refused %s version %s: %s", client.node_id,
                               request.type_url.rpartition("/")[2], sub.sent_version,
                               sub.nack)
            else:
                sub.acked_version, sub.nack = request.version_info, ""
        names = set(request.resource_names)
        wildcard = not names and request.type_url in _WHOLE_SET
        if names != sub.names or wildcard != sub.wildcard or not request.response_nonce:
            sub.names, sub.wildcard, sub.dirty = names, wildcard, True

    def _responses(self, client: XdsClient,
                   publisher: Publisher) -> list[discovery_pb2.DiscoveryResponse]:
        resources = self._cache.get(publisher)
        out = []
        for type_url, sub in client.subscriptions.items():
            available = resources.by_type[type_url]
            chosen = sorted(resources.wildcard[type_url]) if sub.wildcard else sorted(
                n for n in sub.names if n in available)
            if not chosen and type_url not in _WHOLE_SET and not sub.dirty:
                continue
            digest = hashlib.sha256()
            for name in chosen:
                digest.update(f"{name}={available[name].version};".encode())
            version = digest.hexdigest()[:16]
            if version == sub.sent_version and not sub.dirty:
                continue
            sub.dirty = False
            if version == sub.sent_version and sub.nonce and not sub.nack and \
                    sub.acked_version == version:
                continue  # asked again for what it has and acknowledged
            sub.sent_version, sub.nonce = version, str(next(self._nonces))
            sub.sent = {n: available[n].packed for n in chosen}
            out.append(discovery_pb2.DiscoveryResponse(
                version_info=version, type_url=type_url, nonce=sub.nonce,
                resources=[available[n].packed for n in chosen]))
        return out


_GONE = object()
