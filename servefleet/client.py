"""The controller client: the SDK's and the CLI's way to the leader.

`ControllerClient` takes every controller address it knows. A call goes to
the last known leader; a standby's UNAVAILABLE carries the leader's address
(trailing metadata `servefleet-leader`) and the call is sent there at once.
With no hint (no leader elected yet, a controller down, a call timed out) the
client tries the next address, backing off with jitter, until `timeout`
seconds have passed. Every controller RPC is idempotent, so retrying a call
whose outcome is unknown is safe. Callers never need to know who leads.

Errors: `ControllerError` carries the gRPC code and the server's message
(INVALID_ARGUMENT names the field); `ControllerUnreachable` (a subclass) means
no controller answered as leader within the timeout. With `refused_after`
set, a client whose every address refuses connections gives up after that
many seconds instead, with `NoControllerRunning` (a subclass of that): a
controller that answers but has no leader yet is still waited for.
"""

from __future__ import annotations

import builtins
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from servefleet._private.configuration.config_file import load_config
from servefleet._private.security.tls import Credentials, TlsFiles
from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import LEADER_METADATA_KEY, resolve_addresses
from servefleet.v1 import application_pb2, controller_pb2_grpc, deployment_pb2, records_pb2
from servefleet.v1 import controller_pb2 as api

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


__all__ = ["ControllerClient", "ControllerError", "ControllerUnreachable", "Credentials",
           "NoControllerRunning", "TlsFiles", "WatchClient", "load_config",
           "resolve_addresses"]


class ControllerError(Exception):
    """The controller refused or failed a call."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ControllerUnreachable(ControllerError):
    """No controller answered as the leader before the timeout."""


class NoControllerRunning(ControllerUnreachable):
    """Every address refused connections for `refused_after` seconds."""


def _not_delivered(details: str) -> bool:
    """True for failures that show the call was never acted on."""
    return "not the leader" in details or "failed to connect" in details.lower()


def _refused(details: str) -> bool:
    """True when nothing listens at the address (gRPC's connect error)."""
    return "connection refused" in details.lower()


def _leader_hint(error: grpc.RpcError) -> str | None:
    # (key, value) pairs at run time; the stubs type them as opaque _Metadatum.
    metadata: Any = error.trailing_metadata() or ()
    for key, value in metadata:
        if key == LEADER_METADATA_KEY and value:
            return str(value)
    return None


class ControllerClient:
    def __init__(self, addresses: str | Sequence[str] | None = None, *,
                 timeout: float = 30.0, rpc_timeout: float = 5.0,
                 refused_after: float | None = None,
                 credentials: Credentials | None = None) -> None:
        self.addresses = resolve_addresses(addresses)
        # TLS files and token; default: from the environment (SERVEFLEET_CERTS
        # with DIR/admin.crt, SERVEFLEET_CLUSTER_*, SERVEFLEET_TOKEN).
        self.credentials = credentials if credentials is not None else Credentials.from_env(
            addresses=self.addresses)
        self.timeout = timeout
        self.rpc_timeout = rpc_timeout
        # Seconds of every address refusing connections before giving up
        # (NoControllerRunning); None: keep trying until `timeout`.
        self.refused_after = refused_after
        self._current = 0
        self._channels: dict[str, grpc.Channel] = {}

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def _stub(self, address: str) -> controller_pb2_grpc.ControllerServiceStub:
        if address not in self._channels:
            # Quick reconnects: a controller that is restarting or newly elected
            # should be reached within a fraction of a second, not gRPC's default 1 s+.
            self._channels[address] = self.credentials.channel(address, [
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000)])
        return controller_pb2_grpc.ControllerServiceStub(self._channels[address])

    def call(self, method: str, request: Any, *, retry_unknown: bool = True) -> Any:
        """Call `method` on the leader, following hints and retrying as described above.

        With `retry_unknown=False` a failure that may have reached the
        controller (a deadline, a dropped connection) is raised instead of
        retried; only refusals by a standby and refused connections are.
        """
        start = time.monotonic()
        deadline = start + self.timeout
        attempt = 0
        hints_followed = 0
        last_error = "no attempt made"
        refusing: set[str] = set()  # addresses that refused since any other answer
        while True:
            address = self.addresses[self._current]
            remaining = deadline - time.monotonic()
            try:
                return getattr(self._stub(address), method)(
                    request, timeout=max(0.05, min(self.rpc_timeout, remaining)),
                    metadata=self.credentials.metadata)
            except grpc.RpcError as e:
                code = e.code()
                details = e.details() or ""
                if code not in _RETRYABLE or (not retry_unknown and not _not_delivered(details)):
                    raise ControllerError(code, details) from None
                last_error = f"{address}: {details}"
                hint = _leader_hint(e)
                refusing = refusing | {address} if _refused(details) else set()
            if (self.refused_after is not None and refusing >= set(self.addresses)
                    and time.monotonic() - start >= self.refused_after):
                raise NoControllerRunning(
                    grpc.StatusCode.UNAVAILABLE,
                    f"no controller is running at {', '.join(self.addresses)} "
                    "(connection refused)")
            if time.monotonic() >= deadline:
                raise ControllerUnreachable(
                    grpc.StatusCode.UNAVAILABLE,
                    f"no controller leader reachable at {', '.join(self.addresses)} within "
                    f"{self.timeout:g}s (last error: {last_error})")
            if hint and hint != address:
                if hint not in self.addresses:
                    self.addresses.append(hint)
                self._current = self.addresses.index(hint)
                hints_followed += 1
                if hints_followed <= 2:
                    continue  # a fresh hint is worth an immediate try; stale ones back off
            else:
                self._current = (self._current + 1) % len(self.addresses)
                hints_followed = 0
            attempt += 1
            backoff = min(1.0, 0.05 * 2 ** min(attempt, 5)) * random.uniform(0.5, 1.0)
            time.sleep(max(0.0, min(backoff, deadline - time.monotonic())))

    def stream(self, method: str, request: Any) -> Iterator[Any]:
        """A server-streaming call on the leader (found with a GetStatus first).
        ControllerError when the stream is refused or breaks."""
        self.call("GetStatus", api.GetStatusRequest())  # settles on the leader
        responses = getattr(self._stub(self.addresses[self._current]), method)(
            request, metadata=self.credentials.metadata)
        try:
            yield from responses
        except grpc.RpcError as e:
            raise ControllerError(e.code(), e.details() or "") from None
        finally:
            responses.cancel()

    # -- the API --------------------------------------------------------------

    def deploy(self, spec: deployment_pb2.DeploymentSpec) -> api.DeployResponse:
        return self.call("Deploy", api.DeployRequest(spec=spec))

    def delete(self, names: Sequence[str], application: str = "") -> list[str]:
        reply = self.call("DeleteDeployments",
                          api.DeleteDeploymentsRequest(application=application, names=names))
        return list(reply.deleted)

    def get(self, name: str, application: str = "") -> records_pb2.DeploymentRecord:
        reply = self.call("GetDeployment",
                          api.GetDeploymentRequest(application=application, name=name))
        return reply.deployment

    def list(self, *, include_deleted: bool = False,
             application: str = "") -> list[records_pb2.DeploymentRecord]:
        reply = self.call("ListDeployments", api.ListDeploymentsRequest(
            include_deleted=include_deleted, application=application))
        return list(reply.deployments)

    def replicas(self, application: str = "", deployment: str = "") -> builtins.list:
        """ReplicaInfo of the matching replicas, as the controller observes them."""
        reply = self.call("ListReplicas", api.ListReplicasRequest(
            application=application, deployment=deployment))
        return list(reply.replicas)

    def status(self) -> api.GetStatusResponse:
        return self.call("GetStatus", api.GetStatusRequest())

    def deploy_applications(self, applications: Sequence[application_pb2.ApplicationSpec], *,
                            partial: bool = False,
                            http_options: application_pb2.HttpOptions | None = None
                            ) -> api.DeployApplicationsResponse:
        """Declare applications; unless `partial`, unlisted ones are deleted."""
        request = api.DeployApplicationsRequest(applications=applications, partial=partial)
        if http_options is not None:
            request.http_options.CopyFrom(http_options)
        return self.call("DeployApplications", request)

    def applications(self) -> api.ListApplicationsResponse:
        return self.call("ListApplications", api.ListApplicationsRequest())

    def delete_applications(self, names: Sequence[str]) -> builtins.list[str]:
        reply = self.call("DeleteApplications", api.DeleteApplicationsRequest(names=names))
        return list(reply.deleted)

    def set_traffic(self, application: str, traffic: application_pb2.TrafficPolicy) -> None:
        self.call("SetTraffic", api.SetTrafficRequest(application=application, traffic=traffic))

    def application_status(self, name: str):
        """The ApplicationStatusInfo of `name` in GetStatus, or None."""
        return next((a for a in self.status().applications if a.name == name), None)

    def logs(self, application: str = "", deployment: str = "", replica_id: str = "",
             tail_lines: int = 0, follow: bool = False,
             request_id: str = "") -> Iterator[api.GetLogsResponse]:
        """Replicas' output (GetLogs): the last lines, then new ones with
        `follow`; with `request_id`, only that request's lines."""
        return self.stream("GetLogs", api.GetLogsRequest(
            application=application, deployment=deployment, replica_id=replica_id,
            tail_lines=tail_lines, follow=follow, request_id=request_id))

    def hop_pass(self) -> api.GetHopPassResponse:
        """A hop pass for this client's credentials (GetHopPass): what its
        requests to replicas carry in a cluster with credentials."""
        return self.call("GetHopPass", api.GetHopPassRequest())

    def shutdown(self) -> None:
        # Not retried once it may have arrived: a retry reaching the next leader
        # would make that controller exit too.
        self.call("Shutdown", api.ShutdownRequest(), retry_unknown=False)
