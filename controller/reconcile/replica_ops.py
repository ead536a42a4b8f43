"""The I/O behind the replica reconciler's decisions, one replica at a time.

Each operation returns what it observed (transitions.py) and changes no
argument; the reconciler applies the observation at its next pass.

Starting writes the replica's registry record (fenced) before the runtime
starts it, then writes it again with the runtime handle and addresses: every
replica the runtime runs therefore has a record, and one without is an
orphan. Stopping marks the record `stopping` first, so a new leader finishes
a stop that was under way, drains the replica, has the runtime stop it and
then deletes the record; a replica whose first record was refused for want
of disk space (nothing stored, nothing started) has nothing to stop, and
its stop returns at once instead of waiting for space to mark a record that
does not exist. Probes read a replica's phase while it starts and
its health while it runs; they never change the registry.

NotLeader and store or runtime errors of a stop propagate: the loop retries
the work (loop.py). A start's failure is an observation, since the replica
it was for is then replaced rather than retried.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from base64 import b64encode
from collections.abc import Callable
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from servefleet._private.security.hop import hop_subject
from servefleet._private.security.tokens import REPLICA_TOKEN_PREFIX, digest
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import EXIT_BIND_FAILURE
from servefleet.v1 import records_pb2, replica_pb2

from ..drain_fence import DrainFence
from ..election import FencedStore
from ..errors import NotLeader, StoreDiskFull, Unavailable
from ..goals.spec import target_replicas
from ..hop_keys import HopAuthority
from ..keys import ClusterKeys
from ..runtime import ReplicaLaunch, Runtime
from ..store import Delete, Put
from .planner import config_hash
from .ranks import NO_RANK
from .replica_client import ReplicaCallError, ReplicaClient
from .transitions import (
    Exited,
    HealthChecked,
    Probed,
    Reconfigured,
    Started,
    StartFailed,
    Stopped,
)

logger = logging.getLogger(__name__)
PHASE = replica_pb2.ReplicaPhase


# How long a replica with a Watch stream gets to apply a new config from it
# before the controller sends Reconfigure itself, and how often it looks.
CONFIG_WATCH_GRACE_S = 2.0
CONFIG_POLL_S = 0.05


class ReplicaOps:
    def __init__(self, cluster: str, keys: ClusterKeys, fenced: FencedStore, runtime: Runtime,
                 client: ReplicaClient,
                 controllers: Callable[[], list[str]] | None = None,
                 watching: Callable[[str], bool] | None = None,
                 fence: DrainFence | None = None, hop: HopAuthority | None = None) -> None:
        self.cluster = cluster
        self._keys = keys
        self._fenced = fenced
        self.runtime = runtime
        self.client = client
        # The live controllers' addresses, leader first; handed to new replicas.
        self.controllers = controllers or (lambda: [])
        # Whether a replica (by id) has a Watch stream open to this leader.
        self.watching = watching or (lambda replica_id: False)
        # Holds a drain until the proxies and handles let go of the replica.
        self.fence = fence or DrainFence()
        # Issues each replica its hop pass, and revokes it when it stops.
        self.hop = hop
        # Replicas (by id) whose first registry write was refused for want of
        # disk space: neither stored nor started.
        self._never_registered: set[str] = set()

    def leading(self) -> bool:
        return self._fenced.still_valid()

    def check_leading(self) -> None:
        """Raise NotLeader before a runtime call or replica RPC once leadership may be gone.

        Fenced writes protect the store; this keeps a leader whose lease may
        have lapsed from starting, stopping or reconfiguring replicas meanwhile.
        """
        if not self._fenced.still_valid():
            raise NotLeader(None)

    def _key(self, record: replica_pb2.ReplicaRecord) -> str:
        return self._keys.replica(record.application, record.deployment, record.replica_id)

    async def _put(self, record: replica_pb2.ReplicaRecord) -> None:
        await self._fenced.commit([Put(self._key(record), record.SerializeToString())])

    async def start(self, planned: replica_pb2.ReplicaRecord,
                    goal: records_pb2.DeploymentRecord, now: float) -> Started | StartFailed:
        """Register and launch a replica: Started with its record completed
        (handle, addresses), or StartFailed. NotLeader propagates."""
        with tracing.action("start replica", _attributes(planned)) as span:
            started = await self._start(planned, goal, now)
            if isinstance(started, StartFailed) and span is not None:
                span.set_attribute("servefleet.failure", started.reason)
            return started

    async def _start(self, planned: replica_pb2.ReplicaRecord,
                     goal: records_pb2.DeploymentRecord, now: float) -> Started | StartFailed:
        record = replica_pb2.ReplicaRecord()
        record.CopyFrom(planned)
        try:
            await self._launch(record, goal, now)
        except NotLeader:
            raise
        except Unavailable as e:
            # Not the replica's fault; stopping it clears whatever was written.
            return StartFailed(f"could not start: {e}", counted=False)
        except Exception as e:
            return StartFailed(f"could not start: {type(e).__name__}: {e}")
        return Started(record)

    async def _launch(self, record: replica_pb2.ReplicaRecord,
                      goal: records_pb2.DeploymentRecord, now: float) -> None:
        spec, config = goal.spec, goal.spec.replica_config
        stamp = Timestamp()
        stamp.FromNanoseconds(int(now * 1e9))
        record.created_time.CopyFrom(stamp)
        record.runtime = self.runtime.name
        # Its own credential for Watch and load reports (api/auth.py); the
        # registry holds only the hash, written before the replica can use it.
        token = REPLICA_TOKEN_PREFIX + secrets.token_urlsafe(32)
        record.token_sha256 = digest(token)
        try:
            await self._put(record)
        except StoreDiskFull:
            self._never_registered.add(record.replica_id)
            raise
        self.check_leading()
        launched = await self.runtime.start(ReplicaLaunch(
            cluster=self.cluster, application=record.application, deployment=record.deployment,
            replica_id=record.replica_id, version=record.version,
            working_dir=spec.runtime.working_dir, env=dict(spec.runtime.env),
            image=spec.runtime.image,
            constraints=list(spec.runtime.placement.constraints),
            spread=list(spec.runtime.placement.spread),
            resources={"num_cpus": config.resources.num_cpus,
                       "num_gpus": config.resources.num_gpus,
                       "memory_bytes": float(config.resources.memory_bytes)},
            settings={
                "import_path": spec.import_path,
                "code_hash": record.code_hash,
                # Where its Watch stream finds the leader, now or after a failover.
                "controllers": self.controllers(),
                "init_args_json": spec.init_args_json,
                "init_kwargs_json": spec.init_kwargs_json,
                "user_config_json": config.user_config_json,
                "working_dir": spec.runtime.working_dir,
                "max_ongoing_requests": config.max_ongoing_requests,
                "graceful_shutdown_timeout_s": config.graceful_shutdown_timeout_s,
                "graceful_shutdown_wait_loop_s": config.graceful_shutdown_wait_loop_s,
                "grpc_servicer_functions": list(spec.grpc_servicer_functions),
                # Pickles (servefleet.run of a script), as base64: settings are JSON.
                "by_value_target": b64encode(spec.by_value.target).decode(),
                "by_value_init_args": b64encode(spec.by_value.init_args).decode(),
                "token": token,
                # Ray's replica rank, known to its constructor (ranks.py).
                "rank": record.rank if record.HasField("rank") else -1,
                "world_size": target_replicas(goal),
                **self._hop_settings(record.replica_id),
            }))
        record.handle = launched.handle
        record.control_address = launched.control_address
        record.http_address = launched.http_address
        record.http_tls = launched.http_tls
        record.metrics_address = launched.metrics_address
        record.grpc_address = launched.grpc_address
        await self._put(record)

    def _hop_settings(self, replica_id: str) -> dict[str, Any]:
        """What a replica needs of hop passes (security/hop.py): whether it
        serves only callers with one, the keys to check them by, and its own."""
        if self.hop is None or not self.hop.required:
            return {}
        trust = self.hop.trust()
        hop_pass, expires = self.hop.issue(hop_subject(replica_id), "replica")
        return {"hop_required": True, "hop_pass": hop_pass, "hop_pass_expires": expires,
                "hop_keys": {k.id: b64encode(k.public_key).decode() for k in trust.keys},
                # Refused from its first connection on, before its Watch stream is up.
                "revoked_certs": list(trust.revoked_certificates)}

    async def _drop(self, record: replica_pb2.ReplicaRecord) -> None:
        """Delete the record of a replica that is gone; in the same write, its
        hop pass is revoked (a copy elsewhere is refused)."""
        subjects = [hop_subject(record.replica_id)]
        revocation = self.hop.revocation(subjects) if self.hop is not None else []
        await self._fenced.commit([Delete(self._key(record)), *revocation])
        if revocation:
            assert self.hop is not None
            self.hop.revoked(subjects)

    async def stop(self, record: replica_pb2.ReplicaRecord, wait_loop_s: float,
                   timeout_s: float, fence_s: float = 0.0) -> Stopped:
        """Drain and stop a replica, then drop it from the registry; the drain
        waits up to `fence_s` for the reporters routing to it to let go."""
        with tracing.action("stop replica", _attributes(record)):
            return await self._stop(record, wait_loop_s, timeout_s, fence_s)

    async def _stop(self, record: replica_pb2.ReplicaRecord, wait_loop_s: float,
                    timeout_s: float, fence_s: float) -> Stopped:
        if record.replica_id in self._never_registered:
            self._never_registered.discard(record.replica_id)
            return Stopped()
        if not record.stopping:
            marked = replica_pb2.ReplicaRecord()
            marked.CopyFrom(record)
            marked.stopping = True
            await self._put(marked)
        self.check_leading()
        if record.control_address and fence_s > 0:
            await self.fence.wait((record.application, record.deployment),
                                  record.replica_id, fence_s)
            self.check_leading()
        if record.control_address:
            try:
                await self.client.drain(record.control_address, wait_loop_s, timeout_s,
                                        replica_id=record.replica_id)
            except ReplicaCallError:
                pass  # dead or not listening: the runtime's stop still ends it
        # The drain and the stop each take up to the replica's timeout: a term
        # that ended meanwhile (this leader paused, say) leaves the rest, and
        # the record, to the next one (chaos seed 2: a resumed leader logged a
        # stop 2.6 s into its successor's term).
        self.check_leading()
        # A little beyond the replica's own deadline, so it can exit by itself.
        await self.runtime.stop(record.handle, timeout_s + 2.0)
        self.check_leading()
        logger.info("stopped replica %s of %s/%s", record.replica_id, record.application,
                    record.deployment)
        # In a thread: a runtime may block (the Docker SDK does).
        await asyncio.to_thread(self.runtime.cleanup, record.replica_id)
        if record.control_address:
            await self.client.forget(record.control_address)
        await self._drop(record)
        return Stopped()

    async def forget(self, record: replica_pb2.ReplicaRecord) -> None:
        """Drop the record of a replica that is gone."""
        # In a thread: a runtime may block (the Docker SDK does).
        await asyncio.to_thread(self.runtime.cleanup, record.replica_id)
        await self._drop(record)

    async def exit_reason(self, record: replica_pb2.ReplicaRecord) -> Exited | None:
        """Why the replica is gone, or None if it is still alive."""
        seen = await self.runtime.inspect(record.handle)
        if seen is not None and seen.alive:
            return None
        code = f" with code {seen.exit_code}" if seen and seen.exit_code is not None else ""
        tail = (await asyncio.to_thread(self.runtime.logs, record.replica_id, 8)).strip()
        return Exited(f"replica exited{code}" + (f"; last output:\n{tail}" if tail else ""),
                      bind_failure=seen is not None and seen.exit_code == EXIT_BIND_FAILURE)

    async def probe_starting(self, record: replica_pb2.ReplicaRecord) -> Probed:
        """Has a starting (or recovered) replica become ready, or failed?"""
        if not record.handle:
            return Probed()
        try:
            meta = await self.client.metadata(record.control_address, timeout=2.0)
        except ReplicaCallError:
            exited = await self.exit_reason(record)
            if exited is None:
                return Probed()
            return Probed(failure=exited.reason, bind_failure=exited.bind_failure)
        if meta.replica_id and meta.replica_id != record.replica_id:
            return Probed(failure=f"replica {meta.replica_id} answers on "
                          f"{record.control_address}, not {record.replica_id}",
                          bind_failure=True)
        if meta.phase == PHASE.REPLICA_PHASE_FAILED:
            return Probed(failure=f"{meta.error}\n{meta.traceback.strip()}")
        if meta.phase == PHASE.REPLICA_PHASE_READY:
            return Probed(ready=True, config_hash=config_hash(
                meta.user_config_json, meta.max_ongoing_requests), placed=placed(meta))
        return Probed(loading=meta.phase == PHASE.REPLICA_PHASE_LOADING)

    async def check_health(self, record: replica_pb2.ReplicaRecord,
                           timeout_s: float, suspect: bool = False) -> HealthChecked:
        try:
            await self.client.check_health(record.control_address, timeout_s,
                                           replica_id=record.replica_id)
            return HealthChecked(suspect=suspect)
        except ReplicaCallError as e:
            return HealthChecked(f"health check failed: {e}", suspect=suspect)

    async def reconfigure(self, record: replica_pb2.ReplicaRecord,
                          goal: records_pb2.DeploymentRecord, rank: int) -> Reconfigured:
        """Apply the goal's lightweight config, and the replica's rank (`rank`,
        NO_RANK: none) and world size: Reconfigured with the new config hash
        and placement, or with the error. NotLeader propagates.

        A new rank is written to the replica's record (fenced) before the
        replica hears of it: a leader after this one finds the rank the
        replica may have. A replica with a live Watch stream gets a new config
        from it: when nothing else changed, wait up to CONFIG_WATCH_GRACE_S
        for it to report the new config, then (or at once for a replica
        without a stream) send Reconfigure, which is idempotent and returns
        the user's reconfigure error if there is one.
        """
        config = goal.spec.replica_config
        wanted = config_hash(config.user_config_json, config.max_ongoing_requests)
        world = target_replicas(goal)
        ranked = record
        if rank != NO_RANK and (not record.HasField("rank") or record.rank != rank):
            ranked = replica_pb2.ReplicaRecord()
            ranked.CopyFrom(record)
            ranked.rank = rank
            await self._put(ranked)
            logger.info("replica %s of %s/%s: rank %s -> %d", record.replica_id,
                        record.application, record.deployment,
                        record.rank if record.HasField("rank") else "none", rank)
        try:
            if (ranked is record and self.watching(record.replica_id)
                    and await self._config_arrives(record, wanted, (rank, world))):
                logger.info("replica %s of %s/%s applied its new config from the watch "
                            "stream", record.replica_id, record.application, record.deployment)
                return Reconfigured(wanted, placed=(rank, world), record=ranked)
            self.check_leading()
            await self.client.reconfigure(record.control_address, config.user_config_json,
                                          config.max_ongoing_requests, timeout=30.0,
                                          replica_id=record.replica_id,
                                          rank=None if rank == NO_RANK else rank,
                                          world_size=world)
        except NotLeader:
            raise
        except Exception as e:
            return Reconfigured(error=str(e), record=ranked)
        logger.info("reconfigured replica %s of %s/%s", record.replica_id, record.application,
                    record.deployment)
        return Reconfigured(wanted, placed=(rank, world), record=ranked)

    async def _config_arrives(self, record: replica_pb2.ReplicaRecord, wanted: str,
                              placement: tuple[int, int]) -> bool:
        """Whether the replica reports the `wanted` config within the grace;
        False at once when its rank or world size is not `placement` (the
        Watch stream does not bring those)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFIG_WATCH_GRACE_S
        while loop.time() < deadline:
            try:
                meta = await self.client.metadata(record.control_address, timeout=1.0)
            except ReplicaCallError:
                return False
            if placed(meta) not in (None, placement):
                return False
            if config_hash(meta.user_config_json, meta.max_ongoing_requests) == wanted:
                return True
            await asyncio.sleep(CONFIG_POLL_S)
        return False


def placed(meta: replica_pb2.GetMetadataResponse) -> tuple[int, int] | None:
    """The (rank, world size) a replica reports; None from one that reports
    no world size (it knows nothing of ranks: started before them)."""
    if not meta.world_size:
        return None
    return (meta.rank if meta.HasField("rank") else NO_RANK, meta.world_size)


def _attributes(record: replica_pb2.ReplicaRecord) -> dict[str, str]:
    """What a replica action's span says of the replica (tracing.py)."""
    return {"servefleet.application": record.application,
            "servefleet.deployment": record.deployment,
            "servefleet.replica": record.replica_id, "servefleet.version": record.version}
