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
  resources again (only a later change is sent); after a NACK, one with the
  NACKed nonce and without `error_detail` is a plain request, whatever
  version it names (the one the client holds);
- the RDS `servefleet-http` sent to a client carries that client's own hop
  pass in a cluster with credentials (hop_header.py), so its version is the
  client's own; every other resource is shared;
- what each client may route by (the EDS response it last ACKed and those
  sent since: applied.py) goes to the leader term's drain fence;
- a request with an old nonce is stale (the client had not seen the latest
  response yet) and only updates the subscription.

A request no xDS client sends (requests.py's checks, an ACK of another
version than its nonce carried, bytes that are no DiscoveryRequest) ends the
stream with INVALID_ARGUMENT naming the field, logged at INFO. A client that
does not read its stream is cut off with RESOURCE_EXHAUSTED once the
requests it sent meanwhile pass requests.py's bounds, and what it queued is
dropped. Client text (node ids, names, NACK messages) is logged only
through errors.one_line.

A standby controller relays the stream to the leader (so a client whose
bootstrap lists every controller reaches the leader through any of them),
passing on the leader's INVALID_ARGUMENT or RESOURCE_EXHAUSTED; a leader
whose term ends, or a standby that knows no leader, ends the stream with
UNAVAILABLE and the leader's address in the trailing metadata, as Watch
does. The client then opens a new stream, which the next leader serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from servefleet._private.wire import HOP_KEY, REPLICAS_KIND, ROUTES_KEY, parse_watch_key

from ..drain_fence import DrainFence
from ..errors import InvalidArgument, cap, one_line
from ..stream_end import close_requests, cut_off
from ..watch import Publisher
from .applied import AppliedEndpoints, held
from .build import build
from .hop_header import StreamPass
from .requests import MAX_NACK_CHARS, MAX_QUEUED_NAMES, MAX_QUEUED_REQUESTS, Inbox, check_request
from .resources import CLUSTER, ENDPOINTS, LISTENER, ROUTE, Resources, response_version

logger = logging.getLogger(__name__)
# Types whose responses carry the whole subscribed set (state of the world).
_WHOLE_SET = (LISTENER, CLUSTER)
_IDLE_CHECK_S = 5.0
# What a NACK's message may fill of a log line.
_LOGGED_NACK_CHARS = 1_000
# The leader's answers to a relayed client's own faults, passed on as they are.
_CLIENT_FAULTS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
_NOT_READING = (f"the client does not read its stream: it sent {MAX_QUEUED_REQUESTS} "
                f"requests or {MAX_QUEUED_NAMES} names while a response waited to be read")


class ResourceCache:
    """The resources of a publisher's current generation, built once for all streams."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._resources = Resources()

    def get(self, publisher: Publisher) -> Resources:
        key = (id(publisher), publisher.generation)
        if key != self._key:
            routes = publisher.snapshot(ROUTES_KEY)
            sets, ids = {}, {}
            for snapshot in publisher.snapshots(REPLICAS_KIND + "/"):
                parsed = parse_watch_key(snapshot.key)
                sets[(parsed.application, parsed.deployment)] = snapshot.replicas
                ids[(parsed.application, parsed.deployment)] = snapshot.snapshot_id
            self._resources = build(routes.routes if routes is not None else None, sets)
            self._resources.snapshot_ids = ids
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
    # The nonce of the response NACKed last: requests carrying it are plain requests.
    nacked_nonce: str = ""
    # Set when the client asked for something new: answer even if unchanged.
    dirty: bool = True
    # What the last response carried, by name (for CSDS; a hop pass redacted).
    sent: dict[str, Any] = field(default_factory=dict)


@dataclass
class XdsClient:
    """One connected xDS client, for status and logs."""

    node_id: str
    peer: str
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)
    # The replica sets it routes by, named to the leader's drain fence.
    applied: AppliedEndpoints | None = None
    # Its hop pass, in the Envoy routes it is sent (None: a cluster without credentials).
    hop: StreamPass | None = None


class AggregatedDiscovery(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def __init__(self, publisher: Callable[[], Publisher | None],
                 can_serve: Callable[[], bool],
                 abort_not_leader: Callable[[grpc.aio.ServicerContext], Any],
                 check: Callable[[grpc.aio.ServicerContext], Any] | None = None,
                 leader: Callable[[], Awaitable[str | None]] | None = None,
                 connect: Callable[[str], grpc.aio.Channel] | None = None,
                 fence: Callable[[], DrainFence | None] | None = None,
                 hop_pass: Callable[[grpc.aio.ServicerContext], StreamPass | None] | None = None
                 ) -> None:
        self._publisher = publisher
        self._can_serve = can_serve
        self._abort_not_leader = abort_not_leader
        self._check = check
        # On a standby: where the leader is, and a channel to it (the relay).
        self._leader = leader
        self._connect = connect
        # The leader term's drain fence, told which replica sets clients route by.
        self._fence = fence or (lambda: None)
        # The hop pass of a stream's client, for its Envoy routes (hop_header.py).
        self._hop_pass = hop_pass or (lambda context: None)
        self._streams = itertools.count(1)
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
        else:
            async for response in self._serve(publisher, request_iterator, context):
                yield response
        if context.code() is None:  # not refused
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
        handler = asyncio.current_task()
        assert handler is not None
        requests = request_iterator.__aiter__()

        async def pump() -> None:
            try:
                async for request in requests:
                    await upstream.write(request)
                await upstream.done_writing()
            except DecodeError as e:
                refusal = _garbage(e)
                logger.info("refused an xDS stream from %s: %s", context.peer(),
                            refusal.message)
                cut_off(handler, context, refusal.code, refusal.message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the leader ended the stream: `follow` or the loop says how

        async def follow() -> None:
            """The leader refused the client (garbage, or it does not read): say so
            now, even while a response to it waits to be read here."""
            code = await upstream.code()
            if code in _CLIENT_FAULTS and context.code() is None:
                cut_off(handler, context, code, await upstream.details() or "")

        tasks = [asyncio.create_task(pump()), asyncio.create_task(follow())]
        logger.info("relaying an xDS stream from %s to the leader %s", context.peer(), leader)
        try:
            async for response in upstream:
                yield response
        except grpc.aio.AioRpcError as e:
            logger.info("the relayed xDS stream ended: %s %s", e.code().name,
                        one_line(e.details() or ""))
            if e.code() in _CLIENT_FAULTS and not context.done():
                context.set_code(e.code())
                context.set_details(e.details() or "")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            upstream.cancel()
            await channel.close()
            await close_requests(requests)

    async def _serve(self, publisher: Publisher, request_iterator: Any,
                     context: grpc.aio.ServicerContext
                     ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        client = XdsClient(node_id="", peer=context.peer(), hop=self._hop_pass(context))
        applied = client.applied = AppliedEndpoints(
            self._fence(), f"xds#{next(self._streams)}@{client.peer}")
        applied.open()
        self.clients[id(client)] = client
        inbox = Inbox()
        handler = asyncio.current_task()
        assert handler is not None
        reader = asyncio.create_task(self._read(request_iterator, inbox, client, context,
                                                handler))
        try:
            seen = -1
            while not publisher.closed and self._can_serve():
                for response in self._responses(client, publisher):
                    yield response
                seen = publisher.generation
                request = await self._next(inbox, publisher, seen)
                if request is _GONE:
                    return
                try:
                    if request is not None:
                        self._take(client, request, self._cache.get(publisher))
                except InvalidArgument as e:
                    logger.info("refused a request of xDS client %s from %s: %s",
                                one_line(client.node_id), client.peer, e.message)
                    context.set_code(e.code)
                    context.set_details(e.message)
                    return
        finally:
            applied.close()
            self.clients.pop(id(client), None)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(self, request_iterator: Any, inbox: Inbox, client: XdsClient,
                    context: grpc.aio.ServicerContext, handler: asyncio.Task[Any]) -> None:
        """Move the client's requests into `inbox`, checked, until it finishes. One no
        client sends ends the stream (INVALID_ARGUMENT), and so does one more than the
        inbox holds: the client does not read its stream (RESOURCE_EXHAUSTED)."""
        requests = request_iterator.__aiter__()
        refusal: tuple[grpc.StatusCode, str] | None = None
        try:
            async for request in requests:
                check_request(request)
                if not inbox.put(request):
                    logger.warning("cut off xDS client %s from %s: it does not read its "
                                   "stream", one_line(client.node_id), client.peer)
                    refusal = (grpc.StatusCode.RESOURCE_EXHAUSTED, _NOT_READING)
                    break
        except (InvalidArgument, DecodeError) as e:
            error = e if isinstance(e, InvalidArgument) else _garbage(e)
            logger.info("refused a request of xDS client %s from %s: %s",
                        one_line(client.node_id), client.peer, error.message)
            refusal = (error.code, error.message)
        finally:
            if refusal is not None:
                cut_off(handler, context, *refusal)
            else:  # the client finished sending, or the stream ends
                inbox.end()
            await close_requests(requests)

    async def _next(self, inbox: Inbox, publisher: Publisher, seen: int) -> Any:
        """The next request, _GONE when the client finished, or None after a change."""
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

    def _take(self, client: XdsClient, request: discovery_pb2.DiscoveryRequest,
              resources: Resources) -> None:
        """Apply a checked request; InvalidArgument for an ACK of another version."""
        if request.node.id and not client.node_id:
            client.node_id = request.node.id
            logger.info("xDS client %s connected from %s", one_line(client.node_id),
                        client.peer)
        sub = client.subscriptions.setdefault(request.type_url, _Subscription())
        nacked = request.HasField("error_detail")
        if request.response_nonce and request.response_nonce != sub.nonce:
            pass  # stale: the client has not seen our latest response yet
        elif request.response_nonce:
            if nacked:
                sub.nack = cap(request.error_detail.message, MAX_NACK_CHARS)
                sub.nacked_nonce = sub.nonce
                logger.warning("xDS client %s refused %s version %s: %s",
                               one_line(client.node_id), request.type_url.rpartition("/")[2],
                               sub.sent_version, one_line(sub.nack, _LOGGED_NACK_CHARS))
            elif request.version_info == sub.sent_version:
                sub.acked_version, sub.nack = request.version_info, ""
            elif request.response_nonce != sub.nacked_nonce:
                # (After a NACK, a client asks on with that nonce and the version it holds.)
                raise InvalidArgument("version_info", f"an ACK carries the version it "
                                      f"acknowledges, {sub.sent_version} for nonce "
                                      f"{sub.nonce}; got {one_line(request.version_info)}")
        if request.type_url == ENDPOINTS and client.applied is not None:
            if request.response_nonce:
                client.applied.answered(request.response_nonce, request.version_info,
                                        accepted=not nacked)
            else:
                known = sorted(n for n in request.resource_names
                               if n in resources.by_type[ENDPOINTS])
                client.applied.resumed(resources, known, request.version_info,
                                       response_version(resources, ENDPOINTS, known))
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
            shown: dict[str, any_pb2.Any] = {}
            if type_url == ROUTE and client.hop is not None:
                trust = publisher.snapshot(HOP_KEY)
                available, shown = client.hop.routes(
                    available, trust.hop if trust is not None else None, client.node_id)
            chosen = sorted(resources.wildcard[type_url]) if sub.wildcard else sorted(
                n for n in sub.names if n in available)
            if not chosen and type_url not in _WHOLE_SET and not sub.dirty:
                continue
            version = response_version(available, type_url, chosen)
            if version == sub.sent_version and not sub.dirty:
                continue
            sub.dirty = False
            if version == sub.sent_version and sub.nonce and not sub.nack and \
                    sub.acked_version == version:
                continue  # asked again for what it has and acknowledged
            sub.sent_version, sub.nonce = version, str(next(self._nonces))
            sub.sent = {n: shown.get(n, available[n].packed) for n in chosen}
            if type_url == ENDPOINTS and client.applied is not None:
                client.applied.sent(sub.nonce, version, held(resources, chosen))
            out.append(discovery_pb2.DiscoveryResponse(
                version_info=version, type_url=type_url, nonce=sub.nonce,
                resources=[available[n].packed for n in chosen]))
        if client.applied is not None:
            client.applied.report(resources)
        return out


def _garbage(error: DecodeError) -> InvalidArgument:
    return InvalidArgument("request", f"not a valid DiscoveryRequest: {error}")


_GONE = object()
