"""Routes and deployments that cannot serve, and the text their requests get (pure).

A request for a deployment with no replica waits in the proxy's (or
handle's) queue while a replica can still come: one is starting, the
autoscaler is bringing the deployment back from zero, a failed replica is
being replaced. When none can come until the user changes something, waiting
only hangs the client, so the controller says so in the deployment's replica
set (`ReplicaSet.unavailable`) or, for an application whose build failed, in
its route (`Route.unavailable`), and proxies and handles answer at once:
HTTP 503, gRPC UNAVAILABLE, a HandleError. The text names the application,
its status and the last error; `servefleet status` has the whole of it.

No replica can come, or none soon, when:

- the deployment is DEPLOY_FAILED (its replicas failed to start so often
  that the controller stopped trying until the goal changes) and none of an
  earlier version still serves;
- no replica serves and the last start of its current goal failed: the
  controller retries with its backoff (up to min(3 x num_replicas, 20)
  starts, which can take minutes), but every start runs the same code and
  the next is likely to fail as the last did, so callers get that error at
  once, as Ray Serve's get DeploymentUnavailableError, instead of waiting
  through the retries. A replica of the goal starting at that moment is not
  waited for. Once one runs (or an older version serves), requests flow again;
- it asks for 0 replicas and does not autoscale;
- its application's latest build failed and no earlier build was applied.
"""

from __future__ import annotations

from servefleet._private.messages import error_summary
from servefleet.v1 import application_pb2, records_pb2, status_pb2

from .goals.spec import target_replicas


def deployment_unavailable(record: records_pb2.DeploymentRecord,
                           planned: tuple[status_pb2.DeploymentStatus, str] | None,
                           serving: int, start_error: str = "") -> str:
    """Why no replica of the deployment can come ("" when one can, or serves).

    `planned` is the replica planner's (status, message) for the record's
    current goal (None before the first plan); `serving` counts the replicas
    that take traffic now; `start_error` is the error of the goal's last
    start when it failed (planner.Plan.start_error, "" when it did not).
    """
    if serving or record.deleted:
        return ""
    app, name = record.spec.application, record.spec.name
    config = record.spec.replica_config
    if not config.HasField("autoscaling_config") and target_replicas(record) == 0:
        return (f"application {app}: deployment {name} has num_replicas 0 and does not "
                "autoscale, so no replica serves it")
    if planned is not None and planned[0] == status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED:
        return (f"application {app} cannot serve: deployment {name} is DEPLOY_FAILED: "
                f"{error_summary(planned[1])} (servefleet status {app} has all of it)")
    if start_error:
        return (f"application {app} cannot serve: deployment {name} is unavailable: no "
                f"replica of it runs and its last start failed: {error_summary(start_error)} "
                f"(the controller keeps retrying; servefleet status {app} has all of it)")
    return ""


def application_unavailable(record: application_pb2.ApplicationRecord) -> str:
    """Why an application built by DeployApplications cannot serve at all: its
    latest build failed and none was applied before ("" otherwise)."""
    if record.deleted or record.failed_generation != record.generation:
        return ""
    if record.applied_generation:  # an earlier build's deployments still serve
        return ""
    name = record.spec.name
    return (f"application {name} is DEPLOY_FAILED: its build failed: "
            f"{error_summary(record.build_error)} (servefleet status {name} has all of it)")
