"""The Kubernetes runtime: each replica a bare Pod made through the API
server (docs/kubernetes.md; the objects: kubernetes_pods.py, the client:
kubernetes_api.py, the Pod cache: kubernetes_watch.py, which API server and
namespace: kubernetes_config.py).

- start: the deployment's owner, a ConfigMap made on its first start (read
  again at each start, so one deleted in Kubernetes, its Pods with it, is
  made anew); the Pod, owned by it; the Pod's Secret (settings.json, and the
  replica's TLS files with replica TLS), owned by the Pod. The Pod waits in
  ContainerCreating until the Secret is there. Then start waits until the
  Pod has an IP (its addresses), at most `address_timeout_s`: a Pod the
  scheduler cannot place, or that gets no sandbox, is deleted and the start
  fails with the Pod's reason (the controller's backoff applies). A create
  that answers AlreadyExists (a retried start) goes on with the Pod there.
- a lost node (kubernetes_nodes.py: a kubelet that does not take a Pod
  bound to its node): a start's Pod there is made again elsewhere, the
  Pods there are reported gone, and stopping one deletes it at once;
- stop: the controller calls it after its drain (reconcile/replica_ops.py:
  the drain fence, then the Drain RPC, then stop). DELETE with
  gracePeriodSeconds = the timeout (the kubelet sends SIGTERM, then
  SIGKILL), then it waits until the cache has no such Pod; when the
  deployment has no Pod left, its ConfigMap is deleted;
- list, inspect: from the cache (a watch), so the controller's liveness
  sweep costs the API server nothing; a new leader's first `list` is the
  adoption (reconcile/inventory.py matches the Pods with its registry);
- prune: deletes the cluster's Pods that ended (Succeeded, Failed) and that
  no record in `keep` names (their Secrets go with them), and the
  ConfigMaps of deployments without Pods; gives the others --kube-owner's
  object as their owner where they lack it;
- logs, read_logs: the Pod log API (the cursor is the RFC 3339 time the last
  read covered, as Docker's is a Unix time).

Owner ConfigMaps are made and deleted under a lock per deployment, and a
ConfigMap is deleted only when the API server (not the cache, which may lag
a Pod just made) lists no Pod of its deployment: a Pod is never made with
an owner that is being deleted (the garbage collector would delete it).

With `owner` (--kube-owner KIND/NAME, kubernetes_owner.py), each ConfigMap
is owned in turn by that object (the chart's controllers' Deployment), its
uid read when a ConfigMap is made, or found without it (one an earlier
controller made): deleting the owner deletes the ConfigMaps, their Pods and
the Pods' Secrets.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import logging
from typing import Any

from servefleet._private.security.hop_tls import replica_serves_tls
from servefleet._private.security.tls import TlsFiles

from .base import ReplicaLaunch, RuntimeReplica
from .docker import RuntimeStartError, _inherited_env
from .kubernetes_api import ApiError, KubeApi
from .kubernetes_nodes import ACK_TIMEOUT_S, LostNodes, acknowledged, avoiding, node_of
from .kubernetes_owner import OwnerRef, read_owner
from .kubernetes_pods import (
    PULL_POLICIES,
    Owner,
    build_pod,
    deployment_owner,
    identity,
    owner_name,
    owner_of,
    pending_reason,
    pod_name,
    replica_from_pod,
    secret_files,
    selector,
    waiting_reason,
)
from .kubernetes_pods import settings_secret as make_secret
from .kubernetes_watch import PodCache
from .threads import thread_env

logger = logging.getLogger(__name__)
DEFAULT_IMAGE = "servefleet:latest"
SYNC_TIMEOUT_S = 30.0
# Scheduling, mounting the Secret and the Pod's sandbox; pulling the image
# comes after the IP and counts against the deployment's startup timeout.
ADDRESS_TIMEOUT_S = 120.0


class _NodeLost(Exception):
    """The node a start's Pod was bound to did not take it."""


class KubernetesRuntime:
    name = "kubernetes"

    def __init__(self, cluster: str, api: KubeApi, image: str = DEFAULT_IMAGE, *,
                 pull_policy: str = "IfNotPresent", env: dict[str, str] | None = None,
                 replica_tls: TlsFiles | None = None, http_tls: str = "auto",
                 address_timeout_s: float = ADDRESS_TIMEOUT_S,
                 ack_timeout_s: float = ACK_TIMEOUT_S, lost_nodes: LostNodes | None = None,
                 owner: OwnerRef | None = None) -> None:
        if pull_policy not in PULL_POLICIES:
            raise ValueError(f"--kube-pull-policy {pull_policy!r}: one of "
                             f"{', '.join(PULL_POLICIES)}")
        self._cluster = cluster
        self._api = api
        self._image = image
        self._pull_policy = pull_policy
        self._env = _inherited_env() if env is None else env
        self._replica_tls = replica_tls
        # Pods listen on every interface of their own: TLS on their HTTP port
        # unless --replica-tls off (hop_tls.py).
        self._http_tls = replica_serves_tls(http_tls, replica_tls, "0.0.0.0")
        self._address_timeout_s = address_timeout_s
        self._ack_timeout_s = ack_timeout_s
        self._lost = lost_nodes or LostNodes()
        self._cache = PodCache(api, selector(cluster))
        self._watch: asyncio.Task[None] | None = None
        self._owner_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._above = owner  # what owns the deployments' ConfigMaps (--kube-owner)

    async def _synced(self) -> PodCache:
        if self._watch is None:
            self._watch = asyncio.create_task(self._cache.run())
        await asyncio.wait_for(self._cache.synced(), SYNC_TIMEOUT_S)
        return self._cache

    def _lock(self, application: str, deployment: str) -> asyncio.Lock:
        return self._owner_locks.setdefault((application, deployment), asyncio.Lock())

    async def _owner(self, application: str, deployment: str) -> Owner:
        """The deployment's ConfigMap, made if it is not there (owned in turn
        by --kube-owner's object, given one)."""
        wanted = deployment_owner(self._cluster, application, deployment)
        name = wanted["metadata"]["name"]
        found = await self._api.get("configmaps", name)
        if found is None:
            if self._above is not None:
                wanted["metadata"]["ownerReferences"] = [await self._above_reference()]
            try:
                found = await self._api.create("configmaps", wanted)
            except ApiError as e:
                if e.status != 409 or (found := await self._api.get("configmaps", name)) is None:
                    raise
        if found.get("data") != wanted["data"]:
            raise RuntimeStartError(f"the ConfigMap {name} is not this deployment's owner "
                                    f"(its data: {found.get('data')}); delete or rename it")
        if self._above is not None and not self._names_above(found):
            found = await self._adopt(found)
        return owner_of(found)

    async def _adopt(self, config_map: dict[str, Any]) -> dict[str, Any]:
        """A ConfigMap made without --kube-owner's object (by an earlier
        controller) given it as one more owner."""
        references = config_map["metadata"].get("ownerReferences") or []
        return await self._api.patch("configmaps", config_map["metadata"]["name"], {
            "metadata": {"ownerReferences": [*references, await self._above_reference()]}})

    async def _above_reference(self) -> dict[str, Any]:
        """The ownerReference to --kube-owner's object as it is now."""
        assert self._above is not None
        try:
            return await read_owner(self._api, self._above, self._api.namespace)
        except LookupError as e:
            raise RuntimeStartError(str(e)) from None

    def _names_above(self, config_map: dict[str, Any]) -> bool:
        """Whether the ConfigMap names --kube-owner's object (by kind and
        name: its uid is read only to make a reference)."""
        assert self._above is not None
        return any((r.get("kind"), r.get("name")) == (self._above.kind, self._above.name)
                   for r in config_map["metadata"].get("ownerReferences") or [])

    async def _release_owner(self, application: str, deployment: str) -> None:
        """Delete the deployment's ConfigMap if the API server lists no Pod of it."""
        async with self._lock(application, deployment):
            if not await self._api.list_objects(
                    "pods", selector(self._cluster, application, deployment)):
                await self._api.delete("configmaps",
                                       owner_name(self._cluster, application, deployment))

    def _env_of(self, launch: ReplicaLaunch) -> dict[str, str]:
        cpus = float(launch.resources.get("num_cpus", 0) or 0)
        threads = thread_env(launch.env, cpus, 1, 1) if cpus > 0 else {}
        return {**self._env, **threads}

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        await self._synced()
        # Built first: a placement or resources it cannot express fail the
        # start before anything is made.
        pod = build_pod(launch, image=self._image, env=self._env_of(launch),
                        http_tls=self._http_tls, pull_policy=self._pull_policy)
        try:
            return await self._start(launch, avoiding(pod, self._lost.names()))
        except _NodeLost as lost:
            logger.warning("replica %s: node %s did not take its Pod within %.0f s; the node "
                           "is taken for lost, the Pod made again on another", launch.replica_id,
                           lost, self._ack_timeout_s)
        try:
            return await self._start(launch, avoiding(pod, self._lost.names()))
        except _NodeLost as lost:
            raise RuntimeStartError(f"Pod {pod['metadata']['name']}: node {lost} did not take "
                                    f"it within {self._ack_timeout_s:.0f} s either; deleted "
                                    "it") from None

    async def _start(self, launch: ReplicaLaunch, pod: dict[str, Any]) -> RuntimeReplica:
        name = pod["metadata"]["name"]
        async with self._lock(launch.application, launch.deployment):
            owner = await self._owner(launch.application, launch.deployment)
            pod["metadata"]["ownerReferences"] = [owner.reference()]
            try:
                created: dict[str, Any] | None = await self._api.create("pods", pod)
            except ApiError as e:
                if e.status != 409:
                    raise
                created = await self._api.get("pods", name)  # a retried start's Pod
        if created is None:
            raise RuntimeStartError(f"Pod {name} was there, then gone: start again")
        secret = make_secret(pod, created["metadata"]["uid"],
                             secret_files(launch.settings, self._replica_tls))
        try:
            await self._api.create("secrets", secret)
        except ApiError as e:
            if e.status != 409:
                await self._api.delete("pods", name, grace_s=0)
                raise
        return replica_from_pod(await self._placed(name))

    async def _placed(self, name: str) -> dict[str, Any]:
        """The Pod once it has an IP (or ended); deleted when it has none in
        time, or when the node it is bound to did not take it (_NodeLost)."""
        def placed(pods: dict[str, dict[str, Any]]) -> bool:
            pod = pods.get(name)
            return pod is not None and (bool((pod.get("status") or {}).get("podIP"))
                                        or not replica_from_pod(pod).alive)

        first = min(self._ack_timeout_s, self._address_timeout_s)
        try:
            await self._cache.wait_for(placed, first)
            return self._cache.pods()[name]
        except TimeoutError:
            pod = self._cache.pods().get(name)
            if pod is not None and node_of(pod) and not acknowledged(pod):
                await self._forget_pod(name)
                self._lost.mark(node_of(pod))
                raise _NodeLost(node_of(pod)) from None
        try:
            await self._cache.wait_for(placed, self._address_timeout_s - first)
        except TimeoutError:
            reason = pending_reason(self._cache.pods().get(name))
            await self._api.delete("pods", name, grace_s=0)
            raise RuntimeStartError(f"Pod {name} got no address within "
                                    f"{self._address_timeout_s:.0f} s ({reason}); "
                                    "deleted it") from None
        return self._cache.pods()[name]

    async def _forget_pod(self, name: str) -> None:
        """Delete a Pod no kubelet took, at once, with its Secret (so that a
        Pod made again under the name gets a Secret of its own)."""
        await self._api.delete("pods", name, grace_s=0)
        await self._api.delete("secrets", name)
        with contextlib.suppress(TimeoutError):
            await self._cache.wait_for(lambda pods: name not in pods, SYNC_TIMEOUT_S)

    def _report(self, pod: dict[str, Any]) -> RuntimeReplica:
        replica = replica_from_pod(pod)
        if replica.alive and self._lost.holds(pod):
            return dataclasses.replace(replica, alive=False)
        return replica

    async def stop(self, handle: str, timeout_s: float) -> None:
        if not handle:
            return
        cache = await self._synced()
        pod = cache.pods().get(handle)
        # On a lost node no kubelet would ever confirm a graceful deletion:
        # deleted at once, also when the node is found lost while this waits.
        lost = self._lost.holds(pod)
        await self._api.delete("pods", handle, grace_s=0 if lost else max(1, round(timeout_s)))
        deadline = asyncio.get_running_loop().time() + timeout_s + 30
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                await cache.wait_for(lambda pods: handle not in pods, min(1.0, max(0.0, left)))
                break
            except TimeoutError:
                if left <= 1.0:
                    return  # gone from the API server, not from the watch: prune releases its owner
            if not lost and self._lost.holds(cache.pods().get(handle)):
                lost = True
                await self._api.delete("pods", handle, grace_s=0)
        if pod is not None:
            who = identity(pod["metadata"])
            await self._release_owner(who["application"], who["deployment"])

    async def list(self, cluster: str) -> builtins.list[RuntimeReplica]:
        cache = await self._synced()
        replicas = [self._report(pod) for pod in cache.pods().values()]
        return [r for r in replicas if r.cluster == cluster and r.alive]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        if not handle:
            return None
        pods = (await self._synced()).pods()
        return self._report(pods[handle]) if handle in pods else None

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        removed = []
        cache = await self._synced()
        for replica in cache.replicas():
            if replica.cluster == cluster and not replica.alive and replica.replica_id not in keep:
                await self._api.delete("pods", replica.handle, grace_s=0)
                removed.append(replica.replica_id)
        with_pods = {(r.application, r.deployment) for r in cache.replicas()}
        for config_map in await self._api.list_objects("configmaps", selector(cluster)):
            who = identity(config_map["metadata"])
            if (who["application"], who["deployment"]) not in with_pods:
                await self._release_owner(who["application"], who["deployment"])
            elif self._above is not None and not self._names_above(config_map):
                await self._adopt(config_map)
        return removed

    def logs(self, replica_id: str, lines: int = 20) -> str:
        """The Pod's last lines; for a container that never started, why (the
        cache's copy of the Pod, read from this thread: a dict copy is atomic)."""
        name = pod_name(self._cluster, replica_id)
        text = self._api.pod_log(name, tail_lines=lines)
        if not text and (why := waiting_reason(self._cache.pods().get(name))):
            return f"(the container has not started: {why})"
        return text

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
