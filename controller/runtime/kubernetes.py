"""The Kubernetes runtime: each replica a bare Pod made through the API
server (docs/kubernetes.md; the objects: kubernetes_pods.py, the client:
kubernetes_api.py, the Pod cache: kubernetes_watch.py).

- start: the Pod, then its settings Secret owned by it (the Pod waits in
  ContainerCreating until the Secret is there); a create that answers
  AlreadyExists (a retried start) returns the Pod that is there;
- stop: DELETE with gracePeriodSeconds = the timeout (the kubelet sends
  SIGTERM, then SIGKILL), then waits until the cache has no such Pod;
- list, inspect: from the cache (a watch), so the controller's liveness
  sweep costs the API server nothing; inspect asks the API server only for
  a Pod the cache has not seen;
- prune: deletes the cluster's Pods that ended (Succeeded, Failed) and that
  no record in `keep` names (their Secrets go with them);
- logs, read_logs: the Pod log API (the cursor is the RFC 3339 time the last
  read covered, as Docker's is a Unix time).

The replica's TLS files are not carried yet: with replica TLS it refuses to
start, saying so.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime
import json

from servefleet._private.security.tls import TlsFiles

from .base import ReplicaLaunch, RuntimeReplica
from .kubernetes_api import ApiError, KubeApi
from .kubernetes_pods import Owner, build_pod, pod_name, replica_from_pod, selector
from .kubernetes_pods import settings_secret as make_secret
from .kubernetes_watch import PodCache

DEFAULT_IMAGE = "servefleet:latest"
SYNC_TIMEOUT_S = 30.0


class KubernetesRuntime:
    name = "kubernetes"

    def __init__(self, cluster: str, api: KubeApi, image: str = DEFAULT_IMAGE, *,
                 owner: Owner | None = None, pull_policy: str = "IfNotPresent",
                 env: dict[str, str] | None = None,
                 replica_tls: TlsFiles | None = None) -> None:
        if replica_tls is not None:
            raise ValueError("the kubernetes runtime does not carry replicas' TLS files yet: "
                             "run it without replica TLS")
        self._cluster = cluster
        self._api = api
        self._image = image
        self._owner = owner
        self._pull_policy = pull_policy
        self._env = env or {}
        self._cache = PodCache(api, selector(cluster))
        self._watch: asyncio.Task[None] | None = None

    async def _synced(self) -> PodCache:
        if self._watch is None:
            self._watch = asyncio.create_task(self._cache.run())
        await asyncio.wait_for(self._cache.synced(), SYNC_TIMEOUT_S)
        return self._cache

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        await self._synced()
        pod = build_pod(launch, image=self._image, owner=self._owner, env=self._env,
                        pull_policy=self._pull_policy)
        try:
            created = await self._api.create("pods", pod)
        except ApiError as e:
            if e.status != 409:
                raise
            created = next((p for p in self._cache.pods().values()
                            if p["metadata"]["name"] == pod["metadata"]["name"]), pod)
            return replica_from_pod(created)
        secret = make_secret(pod, created["metadata"]["uid"],
                             {"settings.json": json.dumps(launch.settings).encode()})
        try:
            await self._api.create("secrets", secret)
        except ApiError as e:
            if e.status != 409:
                await self._api.delete("pods", pod["metadata"]["name"], grace_s=0)
                raise
        return replica_from_pod(created)

    async def stop(self, handle: str, timeout_s: float) -> None:
        if not handle:
            return
        cache = await self._synced()
        await self._api.delete("pods", handle, grace_s=max(1, round(timeout_s)))
        try:
            await cache.wait_for(lambda pods: handle not in pods, timeout_s + 30)
        except TimeoutError:
            pass  # gone from the API server, not yet from the watch: the next sweep sees it

    async def list(self, cluster: str) -> builtins.list[RuntimeReplica]:
        cache = await self._synced()
        return [r for r in cache.replicas() if r.cluster == cluster and r.alive]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        if not handle:
            return None
        pods = (await self._synced()).pods()
        return replica_from_pod(pods[handle]) if handle in pods else None

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        removed = []
        for replica in (await self._synced()).replicas():
            if replica.cluster == cluster and not replica.alive and replica.replica_id not in keep:
                await self._api.delete("pods", replica.handle, grace_s=0)
                removed.append(replica.replica_id)
        return removed

    def logs(self, replica_id: str, lines: int = 20) -> str:
        return self._api.pod_log(pod_name(self._cluster, replica_id), tail_lines=lines)

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name = pod_name(self._cluster, replica_id)
        if not cursor:
            return self._api.pod_log(name, tail_lines=lines), now
        return self._api.pod_log(name, since_time=cursor), now

    def cleanup(self, replica_id: str) -> None:
        """Nothing: the Secret is the Pod's, and goes with it."""

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def aclose(self) -> None:
        """close, and wait until the watch's connection is closed."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
