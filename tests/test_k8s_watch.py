"""The Kubernetes runtime's Pod cache (controller/runtime/kubernetes_watch.py)
against a fake watch API (the logic only; tests/test_k8s_cluster.py runs it
against the real API server): list then watch from the list's
resourceVersion, events and bookmarks applied, a watch that ends reopened
from where it was, 410 Gone (as a status or an ERROR event) answered by a
relist that drops what was deleted meanwhile, other failures retried; and
what a Pod is as a RuntimeReplica (adoption after a restart)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from servefleet.controller.runtime import kubernetes_watch
from servefleet.controller.runtime.base import ReplicaLaunch
from servefleet.controller.runtime.kubernetes_pods import build_pod, replica_from_pod
from servefleet.controller.runtime.kubernetes_watch import Gone, PodCache

SELECTOR = "io.servefleet/cluster=prod"


def _pod(name: str, version: str, ip: str = "") -> dict[str, Any]:
    launch = ReplicaLaunch(cluster="prod", application="app", deployment="D", replica_id=name,
                           version="v1", settings={})
    pod = build_pod(launch, image="servefleet:latest")
    pod["metadata"]["resourceVersion"] = version
    pod["status"] = {"phase": "Running", "podIP": ip} if ip else {"phase": "Pending"}
    return pod


class FakeApi:
    """Pods to list; each watch call plays the next script: a list of events,
    an exception raised when the watch opens, or a function giving either."""

    def __init__(self, pods: list[dict[str, Any]], version: str) -> None:
        self.pods, self.version = pods, version
        self.scripts: list[Any] = []
        self.watched: list[str] = []  # the resourceVersion each watch asked for
        self.idle = asyncio.Event()

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        assert selector == SELECTOR
        return list(self.pods), self.version

    async def watch_pods(self, selector: str, resource_version: str):
        assert selector == SELECTOR
        self.watched.append(resource_version)
        if not self.scripts:
            self.idle.set()
            await asyncio.sleep(3600)
        script = self.scripts.pop(0)
        if callable(script):  # changes what a listing finds, then plays its result
            script = script()
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


async def _run(api: FakeApi) -> PodCache:
    """A cache run until the fake has played every script."""
    cache = PodCache(api, SELECTOR)
    task = asyncio.create_task(cache.run())
    try:
        await asyncio.wait_for(api.idle.wait(), 5)
    finally:
        task.cancel()
    return cache


def _names(cache: PodCache) -> list[str]:
    return sorted(pod["metadata"]["name"] for pod in cache.pods().values())


async def test_lists_then_applies_events_and_bookmarks_and_reopens_from_the_last_version(
) -> None:
    api = FakeApi([_pod("a", "10")], "12")
    b = _pod("b", "13")
    b_running = _pod("b", "14", ip="10.0.0.2")
    api.scripts = [
        [{"type": "ADDED", "object": b}, {"type": "MODIFIED", "object": b_running}],
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
         {"type": "DELETED", "object": _pod("a", "21")}],
    ]
    cache = await _run(api)
    assert cache.lists == 1
    assert api.watched == ["12", "14", "21"]  # list's version, then each stream's last
    assert _names(cache) == ["servefleet-prod-b"]
    (replica,) = cache.replicas()
    assert replica.replica_id == "b" and replica.http_address == "10.0.0.2:7401"


@pytest.mark.parametrize("gone", [
    Gone("too old resource version: 12 (30)"),
    [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
])
async def test_gone_relists_and_what_was_deleted_meanwhile_disappears(gone) -> None:
    api = FakeApi([_pod("a", "10"), _pod("b", "11")], "12")

    def meanwhile():  # a deleted and c added while the events were lost
        api.pods, api.version = [_pod("b", "11"), _pod("c", "31")], "32"
        return gone

    api.scripts = [meanwhile]
    cache = await _run(api)
    assert cache.lists == 2
    assert api.watched == ["12", "32"]
    assert _names(cache) == ["servefleet-prod-b", "servefleet-prod-c"]


async def test_other_failures_are_retried_with_a_fresh_listing(monkeypatch) -> None:
    monkeypatch.setattr(kubernetes_watch, "RETRY_S", 0.01)
    api = FakeApi([_pod("a", "10")], "12")
    api.scripts = [ConnectionResetError("stream reset"),
                   [{"type": "ERROR", "object": {"code": 500, "message": "internal"}}],
                   [{"type": "ADDED", "object": _pod("b", "13")}]]
    cache = await _run(api)
    assert cache.lists == 3
    assert _names(cache) == ["servefleet-prod-a", "servefleet-prod-b"]


def test_a_pod_as_a_replica_before_and_after_it_runs_and_once_it_ended() -> None:
    pending = replica_from_pod(_pod("r1", "1"))
    assert pending.alive and pending.control_address == "" and pending.exit_code is None
    assert (pending.cluster, pending.deployment, pending.handle) == (
        "prod", "D", "servefleet-prod-r1")
    running = replica_from_pod(_pod("r1", "2", ip="10.234.1.7"))
    assert (running.control_address, running.metrics_address, running.grpc_address) == (
        "10.234.1.7:7400", "10.234.1.7:7402", "")
    ended = _pod("r1", "3", ip="10.234.1.7")
    ended["status"]["containerStatuses"] = [
        {"name": "replica", "state": {"terminated": {"exitCode": 3}}}]
    done = replica_from_pod(ended)
    assert not done.alive and done.exit_code == 3
    failed = _pod("r1", "4")
    failed["status"] = {"phase": "Failed"}
    assert not replica_from_pod(failed).alive


def test_the_api_client_names_a_server_it_cannot_use() -> None:
    import re
    import ssl

    from servefleet.controller.runtime.kubernetes_api import KubeApi

    wrong = "http://127.0.0.1:6443"
    with pytest.raises(ValueError, match=re.escape(f"must be an https:// URL, not {wrong!r}")):
        KubeApi(wrong, "default", ssl.create_default_context())
