"""What an ADS stream takes from its client: requests checked, and queued within bounds.

`check_request` refuses, with InvalidArgument naming the field, a request no
xDS client sends: a type this server does not serve, more names than any
cluster has resources, a name, node id, version or nonce longer than any it
hands out. (ads.py also refuses an ACK whose version is not the one its
nonce carried.) A NACK's message is not refused for its length: it is kept
cut to MAX_NACK_CHARS, for status.

`Inbox` holds the requests read from one stream and not yet taken by the
stream's loop. The loop takes each request as soon as it is not writing a
response, so requests queue only while a write waits for the client to
read. A client that sends MAX_QUEUED_REQUESTS requests, or MAX_QUEUED_NAMES
names, meanwhile does not read its stream: `put` says so, the queue is
dropped, and ads.py cuts the stream off (RESOURCE_EXHAUSTED). A client that
reads has a few queued at most (a request per type, an ACK per response).
"""

from __future__ import annotations

import asyncio

from envoy.service.discovery.v3 import discovery_pb2

from ..errors import InvalidArgument, one_line
from .resources import TYPES

# Names in one request. A client names at most every resource of a type,
# and resources are per application or deployment: the Watch stream's bound
# on keys (watch.MAX_WATCH_KEYS) serves here too.
MAX_NAMES_PER_REQUEST = 10_000
# The longest name this server hands out is "servefleet-http/<application>/
# <deployment>", 143 characters (names are at most 63).
MAX_NAME_CHARS = 256
# Node ids are the client's choice (Envoy's --service-node, gRPC's bootstrap).
MAX_NODE_ID_CHARS = 1_024
# Versions and nonces this server sends are 16 and a few characters; a
# client resuming from another server's stream may send that one's version.
MAX_VERSION_CHARS = 256
MAX_NONCE_CHARS = 64
# A NACK's message as kept for status (CSDS); Envoy lists every resource it
# refused, so it is cut, not refused.
MAX_NACK_CHARS = 4_096

# Requests (and names in them) read while the loop was writing and not yet
# taken. Unbounded, 300 requests of 10,000 names on a stream never read grew
# a controller by 87 MB, kept after the stream ended (35 MB in an outside
# probe); with these bounds it is cut off after about 20 of them and its
# memory moved by under 1 MB (tests/test_stream_bounds_process.py).
MAX_QUEUED_REQUESTS = 32
MAX_QUEUED_NAMES = 3 * MAX_NAMES_PER_REQUEST

_SHORT_TYPES = ", ".join(t.rpartition(".")[2] for t in TYPES)


def check_request(request: discovery_pb2.DiscoveryRequest) -> None:
    """InvalidArgument (naming the field) for a request no xDS client sends."""
    if request.type_url not in TYPES:
        raise InvalidArgument("type_url", f"this server serves {_SHORT_TYPES} (v3, "
                              f"type.googleapis.com/envoy.config...), got "
                              f"{one_line(request.type_url)}")
    names = request.resource_names
    if len(names) > MAX_NAMES_PER_REQUEST:
        raise InvalidArgument("resource_names", f"at most {MAX_NAMES_PER_REQUEST} names, "
                              f"got {len(names)}")
    if names and max(map(len, names)) > MAX_NAME_CHARS:
        i, name = next((i, n) for i, n in enumerate(names) if len(n) > MAX_NAME_CHARS)
        raise InvalidArgument(f"resource_names[{i}]", f"at most {MAX_NAME_CHARS} "
                              f"characters, got {len(name)}: {one_line(name)}")
    for field, text, limit in (("node.id", request.node.id, MAX_NODE_ID_CHARS),
                               ("version_info", request.version_info, MAX_VERSION_CHARS),
                               ("response_nonce", request.response_nonce, MAX_NONCE_CHARS)):
        if len(text) > limit:
            raise InvalidArgument(field, f"at most {limit} characters, got {len(text)}: "
                                  f"{one_line(text)}")


class Inbox:
    """The requests of one stream read and not yet taken."""

    def __init__(self) -> None:
        # None: the client finished sending.
        self._queue: asyncio.Queue[discovery_pb2.DiscoveryRequest | None] = asyncio.Queue()
        # Names in the requests queued.
        self.names = 0

    def put(self, request: discovery_pb2.DiscoveryRequest) -> bool:
        """Queue `request`; False, with the queue dropped, when that passes a bound."""
        names = len(request.resource_names)
        if self._queue.qsize() >= MAX_QUEUED_REQUESTS or \
                self.names + names > MAX_QUEUED_NAMES:
            self.drop()
            return False
        self.names += names
        self._queue.put_nowait(request)
        return True

    def end(self) -> None:
        """Nothing more comes."""
        self._queue.put_nowait(None)

    async def get(self) -> discovery_pb2.DiscoveryRequest | None:
        """The next request; None once nothing more comes."""
        item = await self._queue.get()
        if item is not None:
            self.names -= len(item.resource_names)
        return item

    def drop(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        self.names = 0
