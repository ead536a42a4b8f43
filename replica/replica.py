"""One replica's state and what moves it from phase to phase.

`Replica` holds the phase (LOADING, READY, FAILED, DRAINING), the user's
deployment, admission and the config in force, and does the steps that
change them:

- load: import the user's code (in a worker thread) and run the constructor
  on the replica's loop, as Ray does (loader.build_on_loop: code there may
  use the running loop; an `async def __init__` is awaited), then
  `reconfigure(user_config)` when one is set. Success: READY, and
  requests are admitted. Failure: FAILED, with the exception and its
  traceback kept for the controller (GetMetadata) until it drains the
  replica or FAILED_LINGER_S passes;
- follow config: apply each new user_config and max_ongoing_requests meant
  for this replica's version and code, from the Watch stream or the
  Reconfigure RPC; applying is idempotent, so whichever comes second does
  nothing. Reconfigure also brings the replica's rank and world size when
  they change (the controller's: controller/reconcile/ranks.py); a new rank
  calls `reconfigure(user_config, rank)` when a user_config is set and
  reconfigure takes a rank, as Ray Serve does (ray_reconfigure.py);
- drain: serve for one graceful_shutdown_wait_loop_s (callers that have
  not yet heard of the stop), then refuse new requests and wait for those
  in flight, checking every wait loop, for at most graceful_shutdown_timeout_s.

The process around it (ports, signals, the Watch stream, exit codes) is
main.py's; its gRPC face is control.py's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import traceback
from base64 import b64decode
from dataclasses import dataclass, field
from typing import Any

from servefleet._private import replica_context
from servefleet._private.applications import ingress
from servefleet._private.applications.api import HANDLE_MARKER
from servefleet._private.batching.batch import batch_sizes
from servefleet._private.handles import handle
from servefleet._private.ray_reconfigure import reconfigure_arguments, takes_rank
from servefleet._private.replica_context import ReplicaIdentity
from servefleet._private.security.revocation import RevokedSerials
from servefleet._private.wire import HOP_KEY
from servefleet.v1 import replica_pb2 as rpb
from servefleet.v1 import watch_pb2

from . import loader
from .grpc_ingress import GrpcIngress
from .hop_gate import HopGate
from .http import Admission, ReplicaApp
from .loading_signals import stop_signals_exit
from .loop_watch import LoopWatch
from .metrics import ReplicaMetrics
from .user_calls import call_user

logger = logging.getLogger("servefleet.replica")
PHASE = rpb.ReplicaPhase
FAILED_LINGER_S = 60.0


@dataclass
class ReplicaSettings:
    """What the runtime tells a replica: its identity and ports on the command
    line, the rest in its settings file (main.parse_args)."""

    cluster: str
    application: str
    deployment: str
    replica_id: str
    version: str
    host: str
    control_port: int
    http_port: int
    import_path: str
    init_args_json: str = ""
    init_kwargs_json: str = ""
    user_config_json: str = ""
    working_dir: str = ""
    max_ongoing_requests: int = 5
    graceful_shutdown_timeout_s: float = 20.0
    graceful_shutdown_wait_loop_s: float = 2.0
    # The deployment's code hash this replica runs (with `version`, which
    # config snapshots are meant for it).
    code_hash: str = ""
    # Where /metrics is served (0: not at all).
    metrics_port: int = 0
    # Where the user's gRPC services are served (0: not at all), and their
    # generated add_XServicer_to_server functions (import paths).
    grpc_port: int = 0
    # 1: serve the HTTP port with TLS, the cluster's certificates in `tls`
    # required of callers (hop_tls.py).
    http_tls: int = 0
    grpc_servicer_functions: list[str] = field(default_factory=list)
    # Code and init args sent by value (a DeploymentSpec's by_value), base64;
    # "": import `import_path`, parse the JSON init args.
    by_value_target: str = ""
    by_value_init_args: str = ""
    # Controller addresses for the config Watch stream; none: no stream.
    controllers: list[str] = field(default_factory=list)
    # Mutual TLS ({"ca", "cert", "key"} paths): the control server accepts
    # only controllers' certificates; calls to the controllers present it.
    tls: dict[str, str] | None = None
    # With `tls`: the name the controllers' certificates carry, checked
    # instead of the address dialled ("": the address). The Kubernetes
    # runtime gives it: controllers' Pod IPs are named by no certificate.
    controller_server_name: str = ""
    # This replica's own token for its calls to the controllers (issued by the
    # leader that started it; it may watch only its own deployment's config).
    token: str = ""
    # "UID:GID" to run as once the settings, key and token are read (the
    # process runtime's sandbox: runtime/sandbox.py); "": stay as started.
    run_as: str = ""
    # Hop passes (servefleet/_private/security/hop.py), in a cluster with
    # credentials: whether callers must show one, the cluster's public keys
    # (id -> base64) to check them by, and this replica's own pass (for its
    # handle calls) with when it expires.
    hop_required: bool = False
    hop_keys: dict[str, str] = field(default_factory=dict)
    hop_pass: str = ""
    hop_pass_expires: float = 0.0
    # Serial numbers of client certificates refused on every TLS port
    # (security/revocation.py); the Watch stream's `hop` key brings changes.
    revoked_certs: list[str] = field(default_factory=list)
    # Its rank among its deployment's replicas (-1: none given) and their
    # target count, as the controller assigned them when it started it.
    rank: int = -1
    world_size: int = 0


class Replica:
    def __init__(self, settings: ReplicaSettings) -> None:
        self.settings = settings
        # Client certificates refused on every TLS port (main.py): the
        # settings' list, then each `hop` trust's.
        self.revoked_certs = RevokedSerials(settings.revoked_certs)
        self.identity = ReplicaIdentity(settings.cluster, settings.application,
                                        settings.deployment, settings.replica_id,
                                        tuple(settings.controllers))
        self.identity.placement.rank = settings.rank if settings.rank >= 0 else None
        self.identity.placement.world_size = settings.world_size
        replica_context.set_current(self.identity)
        self.phase = PHASE.REPLICA_PHASE_LOADING
        self.error = ""
        self.traceback = ""
        self.user_config_json = ""
        self.deployment: loader.UserDeployment | None = None
        self.admission = Admission(settings.max_ongoing_requests)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(8, settings.max_ongoing_requests), thread_name_prefix="user")
        self.metrics = ReplicaMetrics(settings.application, settings.deployment,
                                      settings.replica_id, lambda: self.admission.ongoing)
        self.app = ReplicaApp(self.admission, self.executor, settings.replica_id, self.metrics)
        self.app.decode_args = self.decode
        # The user's gRPC services (grpc_ingress.py), when the deployment has any.
        self.grpc = GrpcIngress(self.admission, self.executor, settings.replica_id, self.metrics)
        # In a cluster with credentials, only its own callers (hop_gate.py).
        self.hop_gate = HopGate(True, settings.hop_keys, bool(settings.http_tls)) \
            if settings.hop_required else None
        self.app.hop_gate = self.grpc.hop_gate = self.hop_gate
        self.grpc_services: list[str] = []
        # The main loop's watch (main.py), told when the constructor held the loop.
        self.loop_watch: LoopWatch | None = None
        self._drain = asyncio.Event()
        self._config_lock = asyncio.Lock()
        # The newest config from the Watch stream not yet applied.
        self._pending_config: watch_pb2.DeploymentConfig | None = None
        self._following: asyncio.Task[None] | None = None
        self._wait_loop_s = settings.graceful_shutdown_wait_loop_s
        self._timeout_s = settings.graceful_shutdown_timeout_s

    def decode(self, value: Any) -> Any:
        """JSON data with handle markers made handles to this application's deployments."""
        return handle.decode(value, self.settings.application, self.settings.controllers)

    # -- 2. load ----------------------------------------------------------------

    async def load(self) -> None:
        s = self.settings
        try:
            loop = asyncio.get_running_loop()
            # In a worker thread: unpickling and imports run user code.
            args, kwargs = await loop.run_in_executor(self.executor, self._init_args)
            if s.by_value_target:
                obj = await loop.run_in_executor(self.executor, loader.unpickle_target,
                                                 b64decode(s.by_value_target), s.working_dir)
            else:
                obj = await loop.run_in_executor(self.executor, loader.import_attr,
                                                 s.import_path, s.working_dir)
            if s.grpc_servicer_functions:
                self.grpc_services = await loop.run_in_executor(
                    self.executor, self.grpc.register, s.grpc_servicer_functions, s.working_dir)
            self.deployment = await self._construct(obj, args, kwargs)
            # An ingress app's startup handlers, before the replica says it is ready:
            # one that fails fails the load, as Ray's does.
            await ingress.start_app(self.deployment.instance)
            if s.user_config_json:
                await self.apply_user_config(s.user_config_json)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self.traceback = traceback.format_exc()
            self.phase = PHASE.REPLICA_PHASE_FAILED
            logger.error("replica %s failed to load %s:\n%s", s.replica_id, s.import_path,
                         self.traceback)
            asyncio.get_running_loop().call_later(FAILED_LINGER_S, self._drain.set)
            return
        self._warn_about_batches()
        self.app.deployment = self.deployment
        self.grpc.deployment = self.deployment
        self.identity.servable[:] = [self.deployment.instance]
        self.admission.ready = True
        self.phase = PHASE.REPLICA_PHASE_READY
        logger.info("replica %s ready: %s version %s", s.replica_id, s.import_path, s.version)
        self._follow_config()

    async def _construct(self, obj: Any, args: list[Any], kwargs: dict[str, Any]
                         ) -> loader.UserDeployment:
        """The user's object, built on this loop (loader.build_on_loop). A
        plain constructor holds the loop while it runs, as in Ray: nothing is
        served yet, and the control loop answers the controller meanwhile; the
        loop watch is told, so that the hold is not reported as a handler's.
        A stop signal meanwhile, which the held loop could not handle, ends
        the process at once: there is nothing to drain."""
        with stop_signals_exit():
            try:
                return await loader.build_on_loop(obj, args, kwargs,
                                                  bool(self.settings.user_config_json))
            finally:
                if self.loop_watch is not None:
                    self.loop_watch.excuse()

    def _init_args(self) -> tuple[list[Any], dict[str, Any]]:
        """The constructor's arguments; bound deployments among them arrive as handles."""
        s = self.settings
        if s.by_value_init_args:
            return loader.unpickle_init_args(
                b64decode(s.by_value_init_args), s.working_dir,
                lambda marker: self.decode({HANDLE_MARKER: marker}))
        args = self.decode(json.loads(s.init_args_json) if s.init_args_json else [])
        kwargs = self.decode(json.loads(s.init_kwargs_json) if s.init_kwargs_json else {})
        return args, kwargs

    def _warn_about_batches(self) -> None:
        """Batches cannot fill past max_ongoing_requests: say so (batching.py)."""
        assert self.deployment is not None
        for name, size in batch_sizes(self.deployment.instance).items():
            if size > self.admission.max_ongoing:
                logger.warning("%s: @batch(max_batch_size=%d) but max_ongoing_requests is %d: "
                               "a batch never holds more than %d calls; raise "
                               "max_ongoing_requests to at least %d", name, size,
                               self.admission.max_ongoing, self.admission.max_ongoing, size)

    async def apply_user_config(self, user_config_json: str) -> None:
        reconfigure = self.deployment.reconfigure if self.deployment else None
        if reconfigure is not None:
            config = json.loads(user_config_json) if user_config_json else None
            args, kwargs = reconfigure_arguments(reconfigure, config,
                                                 self.identity.placement.rank)
            await call_user(functools.partial(reconfigure, **kwargs) if kwargs else reconfigure,
                            self.executor, *args)
        self.user_config_json = user_config_json

    # -- 3. follow config ---------------------------------------------------------

    async def apply_config(self, user_config_json: str, max_ongoing_requests: int,
                           rank: int | None = None, world_size: int = 0) -> bool:
        """Apply a lightweight config once loaded; True if the user's
        reconfigure was called (a new user_config, or a new rank for a
        reconfigure that takes one). `rank` None and `world_size` 0 keep those
        in force.

        Serialized and idempotent: the Watch stream and the Reconfigure RPC
        may both deliver the same config. Raises what the user's reconfigure
        raises, leaving the previous user_config in force (the new rank and
        world size stay: they are the controller's, not the user's).
        """
        async with self._config_lock:
            if max_ongoing_requests:
                self.admission.max_ongoing = max_ongoing_requests
            placement = self.identity.placement
            if world_size:
                placement.world_size = world_size
            new_rank = rank is not None and rank != placement.rank
            if new_rank:
                logger.info("rank %s -> %d (world size %d)", placement.rank, rank,
                            placement.world_size)
                placement.rank = rank
            reconfigure = self.deployment.reconfigure if self.deployment else None
            tell_rank = (new_rank and bool(self.user_config_json) and reconfigure is not None
                         and takes_rank(reconfigure))
            if user_config_json == self.user_config_json and not tell_rank:
                return False
            try:
                await self.apply_user_config(user_config_json)
            except Exception:
                self.metrics.reconfigured["error"].inc()
                raise
            self.metrics.reconfigured["ok"].inc()
            return True

    def on_config_snapshot(self, snapshot: watch_pb2.Snapshot) -> None:
        """WatchClient callback: queue the config if it is meant for this
        replica; the `hop` key's trust goes to the gate and the revoked
        certificates."""
        if snapshot.key == HOP_KEY:
            if snapshot.HasField("hop"):
                self.revoked_certs.replace(snapshot.hop.revoked_certificates)
            if self.hop_gate is not None and snapshot.HasField("hop"):
                self.hop_gate.on_trust(snapshot.hop)
            return
        config = snapshot.config
        if snapshot.deleted or (config.version, config.code_hash) != (
                self.settings.version, self.settings.code_hash):
            return  # a newer version's config: replicas that run it apply it
        self._pending_config = config
        self._follow_config()

    def _follow_config(self) -> None:
        if (self._pending_config is not None and self.phase == PHASE.REPLICA_PHASE_READY
                and (self._following is None or self._following.done())):
            self._following = asyncio.create_task(self._apply_pending())

    async def _apply_pending(self) -> None:
        while self._pending_config is not None and self.phase == PHASE.REPLICA_PHASE_READY:
            config, self._pending_config = self._pending_config, None
            try:
                if await self.apply_config(config.user_config_json,
                                           config.max_ongoing_requests):
                    logger.info("applied user_config %s from the watch stream",
                                config.user_config_json[:200])
            except Exception:
                # The controller sees the old config in GetMetadata and sends
                # Reconfigure, whose error it reports; nothing to do here.
                logger.exception("reconfigure from the watch stream failed")

    # -- 4. drain ---------------------------------------------------------------

    def request_drain(self, wait_loop_s: float | None = None,
                      timeout_s: float | None = None) -> None:
        if wait_loop_s:
            self._wait_loop_s = wait_loop_s
        if timeout_s is not None:
            self._timeout_s = timeout_s
        self._drain.set()

    async def wait_and_drain(self) -> None:
        await self._drain.wait()
        if self.phase != PHASE.REPLICA_PHASE_FAILED:
            self.phase = PHASE.REPLICA_PHASE_DRAINING
        self.admission.leaving = True
        await self.app.websockets.close_all()  # 1001 at once: their clients reconnect elsewhere
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        logger.info("draining: %d requests in flight", self.admission.ongoing)
        # As Ray Serve's replicas do, serve one wait loop before the first
        # check: the controller left this replica out of the replica set,
        # and waited for the callers that report what they applied
        # (controller/drain_fence.py), before asking it to drain; a caller
        # that has not applied that set yet (one that does not report it, or
        # past the controller's bound) is served rather than refused. Then new
        # requests get a clean refusal (503 with x-servefleet-rejected,
        # retried elsewhere) while those in flight finish.
        await asyncio.sleep(min(self._wait_loop_s, max(0.0, deadline - loop.time())))
        self.admission.draining = True
        while self.admission.ongoing and loop.time() < deadline:
            await asyncio.sleep(min(self._wait_loop_s, max(0.0, deadline - loop.time())))
        if self.admission.ongoing:
            logger.warning("graceful shutdown timed out with %d requests in flight",
                           self.admission.ongoing)
        if self.deployment is not None:
            try:
                await ingress.stop_app(self.deployment.instance)
            except Exception:
                logger.exception("the ingress app's shutdown handlers failed")

