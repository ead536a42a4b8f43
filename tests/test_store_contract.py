"""The Store contract, run against etcd and the embedded sqlite store alike."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from servefleet.controller.store import Delete, Guard, LeaseNotFound, Put, Store, StoreOpenError
from servefleet.controller.store.sqlite import SqliteStore


@pytest.fixture
def prefix() -> str:
    return f"/contract/{uuid.uuid4().hex}/"


async def test_put_get_and_revisions(store: Store, prefix: str) -> None:
    before = await store.revision()
    first = await store.txn([], [Put(prefix + "a", b"1")])
    assert first.succeeded and first.revision == before + 1
    kv = await store.get(prefix + "a")
    assert kv is not None and kv.value == b"1"
    assert kv.create_revision == kv.mod_revision == first.revision

    second = await store.txn([], [Put(prefix + "a", b"2")])
    kv2 = await store.get(prefix + "a")
    assert kv2 is not None and kv2.value == b"2"
    assert kv2.create_revision == first.revision
    assert kv2.mod_revision == second.revision == first.revision + 1
    assert await store.get(prefix + "missing") is None


async def test_one_transaction_is_one_revision(store: Store, prefix: str) -> None:
    result = await store.txn([], [Put(prefix + "x", b"x"), Put(prefix + "y", b"y")])
    x, y = await store.get(prefix + "x"), await store.get(prefix + "y")
    assert x and y and x.mod_revision == y.mod_revision == result.revision


async def test_list_prefix_is_sorted_and_exact(store: Store, prefix: str) -> None:
    await store.txn([], [Put(prefix + "b", b"b"), Put(prefix + "a", b"a"),
                         Put(prefix + "a/deep", b"d"), Put(prefix[:-1] + "X", b"outside")])
    keys = [kv.key for kv in await store.list_prefix(prefix)]
    assert keys == [prefix + "a", prefix + "a/deep", prefix + "b"]
    # Prefix matching is case-sensitive and literal (no wildcard characters).
    await store.txn([], [Put(prefix + "%_", b"w")])
    assert [kv.key for kv in await store.list_prefix(prefix + "%")] == [prefix + "%_"]
    assert await store.list_prefix(prefix + "A") == []


async def test_guard_on_create_revision(store: Store, prefix: str) -> None:
    leader = prefix + "leader"
    # create_revision 0 means "absent": the campaign primitive.
    won = await store.txn([Guard(leader, 0)], [Put(leader, b"me")])
    assert won.succeeded
    lost = await store.txn([Guard(leader, 0)], [Put(leader, b"other")])
    assert not lost.succeeded and lost.revision == won.revision
    kv = await store.get(leader)
    assert kv is not None and kv.value == b"me"

    fenced = await store.txn([Guard(leader, won.revision)], [Put(prefix + "data", b"ok")])
    assert fenced.succeeded
    stale = await store.txn([Guard(leader, won.revision - 1)], [Put(prefix + "data", b"bad")])
    assert not stale.succeeded
    data = await store.get(prefix + "data")
    assert data is not None and data.value == b"ok"


async def test_failed_guard_writes_nothing(store: Store, prefix: str) -> None:
    before = await store.revision()
    result = await store.txn([Guard(prefix + "nope", 12345)],
                             [Put(prefix + "a", b"1"), Delete(prefix + "b/", prefix=True)])
    assert not result.succeeded
    assert await store.revision() == before
    assert await store.list_prefix(prefix) == []


async def test_overlapping_operations_are_refused(store: Store, prefix: str) -> None:
    with pytest.raises(ValueError):
        await store.txn([], [Put(prefix + "a", b"1"), Put(prefix + "a", b"2")])
    with pytest.raises(ValueError):
        await store.txn([], [Put(prefix + "a/1", b"1"), Delete(prefix + "a/", prefix=True)])
    assert await store.list_prefix(prefix) == []


async def test_delete_key_and_prefix(store: Store, prefix: str) -> None:
    await store.txn([], [Put(prefix + "a", b""), Put(prefix + "b/1", b""),
                         Put(prefix + "b/2", b""), Put(prefix + "c", b"")])
    await store.txn([], [Delete(prefix + "a")])
    await store.txn([], [Delete(prefix + "b/", prefix=True)])
    assert [kv.key for kv in await store.list_prefix(prefix)] == [prefix + "c"]


async def test_lease_keys_vanish_on_revoke(store: Store, prefix: str) -> None:
    lease = await store.grant_lease(10)
    await store.txn([], [Put(prefix + "leased", b"v", lease=lease), Put(prefix + "plain", b"")])
    kv = await store.get(prefix + "leased")
    assert kv is not None and kv.lease == lease
    assert await store.keepalive(lease) > 0
    await store.revoke_lease(lease)
    assert await store.get(prefix + "leased") is None
    assert await store.get(prefix + "plain") is not None
    assert await store.keepalive(lease) == 0
    await store.revoke_lease(lease)  # unknown leases are ignored


async def test_lease_expires_without_keepalive(store: Store, prefix: str) -> None:
    lease = await store.grant_lease(1)
    await store.txn([], [Put(prefix + "leased", b"v", lease=lease)])
    for _ in range(60):
        if await store.get(prefix + "leased") is None:
            break
        await asyncio.sleep(0.1)
    assert await store.get(prefix + "leased") is None
    assert await store.keepalive(lease) == 0


async def test_keepalive_holds_a_lease(store: Store, prefix: str) -> None:
    lease = await store.grant_lease(1)
    await store.txn([], [Put(prefix + "leased", b"v", lease=lease)])
    for _ in range(8):  # 2.4 s, past the 1 s TTL
        assert await store.keepalive(lease) > 0
        await asyncio.sleep(0.3)
    assert await store.get(prefix + "leased") is not None
    await store.revoke_lease(lease)


async def test_wait_for_change_sees_put_and_delete(store: Store, prefix: str) -> None:
    key = prefix + "watched"
    seen = await store.txn([], [Put(key, b"1")])

    waiter = asyncio.create_task(store.wait_for_change(key, seen.revision, timeout=10))
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await store.txn([], [Put(key, b"2")])
    await asyncio.wait_for(waiter, 5)

    kv = await store.get(key)
    assert kv is not None
    waiter = asyncio.create_task(store.wait_for_change(key, kv.mod_revision, timeout=10))
    await asyncio.sleep(0.2)
    await store.txn([], [Delete(key)])
    await asyncio.wait_for(waiter, 5)


async def test_wait_for_change_times_out(store: Store, prefix: str) -> None:
    seen = await store.txn([], [Put(prefix + "quiet", b"1")])
    loop = asyncio.get_running_loop()
    start = loop.time()
    await store.wait_for_change(prefix + "quiet", seen.revision, timeout=0.3)
    assert loop.time() - start >= 0.25


async def test_put_with_unknown_lease_is_refused(store: Store, prefix: str) -> None:
    before = await store.revision()
    with pytest.raises(LeaseNotFound):
        await store.txn([], [Put(prefix + "k", b"v", lease=987654321)])
    assert await store.get(prefix + "k") is None
    assert await store.revision() == before


async def test_transaction_that_changes_nothing_keeps_the_revision(store: Store,
                                                                   prefix: str) -> None:
    before = await store.revision()
    result = await store.txn([], [Delete(prefix + "absent"), Delete(prefix + "none/", True)])
    assert result.succeeded and result.revision == before
    assert await store.revision() == before


async def test_sqlite_store_on_a_bad_path_fails_to_open(tmp_path) -> None:
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not a sqlite database" * 100)
    for path in (not_a_db, "/proc/no-such-dir/state.db"):
        broken = SqliteStore(path)
        with pytest.raises(StoreOpenError):
            await broken.open()
        await broken.close()
