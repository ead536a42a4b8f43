"""The replica process: `python -m servefleet.replica --config-file F ...`.

Lifecycle:

1. startup: bind the gRPC control port and the HTTP port (both chosen by the
   runtime), so the controller can follow the replica from its first second;
2. load: import the user's code and run the constructor in a worker thread,
   then `reconfigure(user_config)` when one is set. Success: phase READY and
   requests are admitted. Failure: phase FAILED with the exception and its
   traceback for the controller to read (GetMetadata), kept until the
   controller drains the replica or FAILED_LINGER_S passes;
3. follow config: the replica watches `config/<app>/<deployment>` on the
   controllers it was given (the shared WatchClient follows the leader) and
   applies each new user_config and max_ongoing_requests meant for its
   version and code. The controller's Reconfigure RPC applies the same
   config when no stream delivered it; applying is idempotent, so whichever
   comes second does nothing;
4. drain, on the Drain RPC or SIGTERM/SIGINT: refuse new requests, wait for
   in-flight ones, checking every graceful_shutdown_wait_loop_s, for at most
   graceful_shutdown_timeout_s; then exit. A second signal exits at once.

Identity (cluster, application, deployment, replica id, version) is on the
command line, so the process runtime can find its replicas by listing
processes. Exit codes (servefleet/wire.py): 0 after a drain, 1 after a load
failure or a crash, 2 bad settings, 3 when a port cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import grpc

from servefleet import handle
from servefleet.lifecycle import on_stop_signals, start_http_server
from servefleet.v1 import replica_pb2 as rpb
from servefleet.v1 import replica_pb2_grpc, watch_pb2
from servefleet.watch_client import WatchClient
from servefleet.wire import EXIT_BAD_SETTINGS, EXIT_BIND_FAILURE, EXIT_FAILED, config_key

from . import loader
from .control import ReplicaControl
from .http import Admission, ReplicaApp, call_user

logger = logging.getLogger("servefleet.replica")
PHASE = rpb.ReplicaPhase
FAILED_LINGER_S = 60.0


@dataclass
class ReplicaSettings:
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
    # Controller addresses for the config Watch stream; none: no stream.
    controllers: list[str] = field(default_factory=list)


class Replica:
    def __init__(self, settings: ReplicaSettings) -> None:
        self.settings = settings
        self.phase = PHASE.REPLICA_PHASE_LOADING
        self.error = ""
        self.traceback = ""
        self.user_config_json = ""
        self.deployment: loader.UserDeployment | None = None
        self.admission = Admission(settings.max_ongoing_requests)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(8, settings.max_ongoing_requests), thread_name_prefix="user")
        self.app = ReplicaApp(self.admission, self.executor, settings.replica_id)
        self.app.decode_args = self.decode
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
            # Bound deployments among the init args arrive as handles.
            args = self.decode(json.loads(s.init_args_json) if s.init_args_json else [])
            kwargs = self.decode(json.loads(s.init_kwargs_json) if s.init_kwargs_json else {})
            loop = asyncio.get_running_loop()
            obj = await loop.run_in_executor(self.executor, loader.import_attr, s.import_path,
                                             s.working_dir)
            self.deployment = await loop.run_in_executor(
                self.executor, loader.build, obj, args, kwargs, bool(s.user_config_json))
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
        self.app.deployment = self.deployment
        self.admission.ready = True
        self.phase = PHASE.REPLICA_PHASE_READY
        logger.info("replica %s ready: %s version %s", s.replica_id, s.import_path, s.version)
        self._follow_config()

    async def apply_user_config(self, user_config_json: str) -> None:
        reconfigure = self.deployment.reconfigure if self.deployment else None
        if reconfigure is not None:
            config = json.loads(user_config_json) if user_config_json else None
            await call_user(reconfigure, self.executor, config)
        self.user_config_json = user_config_json

    # -- 3. follow config ---------------------------------------------------------

    async def apply_config(self, user_config_json: str, max_ongoing_requests: int) -> bool:
        """Apply a lightweight config once loaded; True if user_config changed.

        Serialized and idempotent: the Watch stream and the Reconfigure RPC
        may both deliver the same config. Raises what the user's reconfigure
        raises, leaving the previous user_config in force.
        """
        async with self._config_lock:
            if max_ongoing_requests:
                self.admission.max_ongoing = max_ongoing_requests
            if user_config_json == self.user_config_json:
                return False
            await self.apply_user_config(user_config_json)
            return True

    def on_config_snapshot(self, snapshot: watch_pb2.Snapshot) -> None:
        """WatchClient callback: queue the config if it is meant for this replica."""
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
        self.admission.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        logger.info("draining: %d requests in flight", self.admission.ongoing)
        # As Ray Serve's replicas do, wait one loop before the first check:
        # callers that have not yet learned of the stop get a clean refusal
        # (503, Connection: close) instead of a connection closed under them.
        while loop.time() < deadline:
            await asyncio.sleep(min(self._wait_loop_s, max(0.0, deadline - loop.time())))
            if self.admission.ongoing == 0:
                break
        if self.admission.ongoing:
            logger.warning("graceful shutdown timed out with %d requests in flight",
                           self.admission.ongoing)


async def run(settings: ReplicaSettings) -> int:
    replica = Replica(settings)
    # No SO_REUSEPORT: a port another replica holds must fail the bind
    # (EXIT_BIND_FAILURE), not be shared with it.
    control = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    replica_pb2_grpc.add_ReplicaServiceServicer_to_server(ReplicaControl(replica), control)
    try:
        control.add_insecure_port(f"{settings.host}:{settings.control_port}")
    except RuntimeError:
        print(f"replica: cannot bind control port {settings.control_port}", file=sys.stderr)
        return EXIT_BIND_FAILURE
    await control.start()
    try:
        # The date header is set once at start, not refreshed.
        http = await start_http_server(replica.app, settings.host, settings.http_port)
    except OSError:
        print(f"replica: cannot bind HTTP port {settings.http_port}", file=sys.stderr)
        await control.stop(0)
        return EXIT_BIND_FAILURE
    on_stop_signals(replica.request_drain)
    handle.use_loop(asyncio.get_running_loop())  # for handle calls from sync user code

    watch = None
    if settings.controllers:
        watch = WatchClient(settings.controllers,
                            [config_key(settings.application, settings.deployment)],
                            on_snapshot=replica.on_config_snapshot,
                            kind=watch_pb2.WATCHER_KIND_REPLICA,
                            address=f"{settings.host}:{settings.http_port}",
                            watcher_id=settings.replica_id)
        watch.start()
    loading = asyncio.create_task(replica.load())
    await replica.wait_and_drain()
    loading.cancel()
    if watch is not None:
        await watch.close()
    http.force_exit = replica.admission.ongoing > 0
    http.config.timeout_graceful_shutdown = 1
    await http.shutdown()
    await control.stop(0.5)
    replica.executor.shutdown(wait=False, cancel_futures=True)
    failed = replica.phase == PHASE.REPLICA_PHASE_FAILED
    logger.info("replica %s exiting", settings.replica_id)
    return EXIT_FAILED if failed else 0


def parse_args(argv: list[str] | None = None) -> ReplicaSettings:
    parser = argparse.ArgumentParser(prog="servefleet-replica")
    for flag in ("cluster", "application", "deployment", "replica-id", "version"):
        parser.add_argument(f"--{flag}", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--config-file", required=True,
                        help="JSON: import_path, init args, user_config, limits")
    args = parser.parse_args(argv)
    with open(args.config_file) as f:
        spec: dict[str, Any] = json.load(f)
    return ReplicaSettings(
        cluster=args.cluster, application=args.application, deployment=args.deployment,
        replica_id=args.replica_id, version=args.version, host=args.host,
        control_port=args.control_port, http_port=args.http_port, **spec)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = parse_args(argv)
    except (OSError, ValueError, TypeError) as e:
        print(f"replica: bad settings: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    code = EXIT_FAILED
    try:
        code = asyncio.run(run(settings))
    except BaseException:
        logger.exception("replica crashed")
    logging.shutdown()
    # Exit now: a user thread stuck in a constructor or a sync handler must not
    # keep the process alive past its drain timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
