"""A deployment that answers with the connection its request came over
(tests/test_haproxy_engine.py: connections to replicas are reused). Run with
FORWARDED_ALLOW_IPS empty in its runtime env, the replica trusts no proxy's
x-forwarded-for, so `request.client` is the TCP peer: the proxy's end of
the connection, one port per connection."""

from __future__ import annotations

import os


async def peer(request) -> dict:
    return {"pid": os.getpid(), "port": request.client.port}
