"""Async tests in this folder run twice: on asyncio's loop and on uvloop's.
The proxy and the replicas run on uvloop (servefleet/_private/lifecycle.py), code
that calls a handle on whichever loop it brings; the two differ in ways that
matter to protocol code (uvloop's transports are not asyncio.Transport
instances, for one)."""

from __future__ import annotations

import asyncio

import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
