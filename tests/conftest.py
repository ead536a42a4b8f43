"""Shared fixtures: a real etcd on free loopback ports, and store instances."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from servefleet.controller.store import Store
from servefleet.controller.store.etcd import EtcdStore
from servefleet.controller.store.sqlite import SqliteStore

from servefleet.testing import EtcdServer


@pytest.fixture(scope="session")
def etcd() -> Iterator[EtcdServer]:
    """One etcd for the whole run; tests isolate themselves by cluster name."""
    server = EtcdServer().start()
    try:
        yield server
    finally:
        server.stop()


_counter = itertools.count()


@pytest.fixture
def cluster() -> str:
    """A cluster name no other test uses, so tests can share one etcd."""
    return f"t{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(params=["sqlite", "etcd"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Store]:
    """Each Store implementation in turn: the contract suite runs on both."""
    if request.param == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd")
        instance: Store = EtcdStore([server.endpoint])
    else:
        instance = SqliteStore(tmp_path / "state.db")
    try:
        yield instance
    finally:
        await instance.close()
