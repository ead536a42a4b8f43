"""A ServeApplication's status, from what the controller knows of it.

    status:
      phase: RUNNING            # the application's status, or INVALID / CONFLICT
      application: sentiment
      observedGeneration: 3     # the object's generation this status is about
      replicas: 2/2             # ready/target over its deployments
      readyReplicas: 2
      targetReplicas: 2
      message: ""
      conditions:
        - {type: Ready, status: "True", reason: Running, ...}
        - {type: Progressing, status: "False", reason: Running, ...}
        - {type: Reconciling, ...}      # kstatus's pair (Flux's health checks):
        - {type: Stalled, ...}          # Progressing again, and "someone must act"
      deployments:
        - {name: Model, status: HEALTHY, readyReplicas: 2, targetReplicas: 2}

The phase is the application's status as GetStatus reports it (RUNNING,
DEPLOYING, DEPLOY_FAILED, UNHEALTHY, NOT_STARTED, DELETING), except that a
spec refused before anything was stored (by the validator, the deploy
policy, a route another application serves) is INVALID, and an object that
cannot have the application it names is CONFLICT; in both, the application
(if any) runs on as it was, and its deployments are still shown. Ready is
True only when the application is RUNNING at the object's generation;
Progressing while it is being applied or deployed. Reconciling (the same
as Progressing) and Stalled (INVALID, CONFLICT, DEPLOY_FAILED) are the
conditions kstatus reads (Flux's health checks, `kubectl wait`-like tools
of cli-utils), which know no Ready of a kind they do not know. A condition's
lastTransitionTime moves only when its status does (Kubernetes' rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servefleet.v1 import status_pb2

from .objects import ServeApp

_REASONS = {"RUNNING": "Running", "DEPLOYING": "Deploying", "DEPLOY_FAILED": "DeployFailed",
            "UNHEALTHY": "Unhealthy", "NOT_STARTED": "NotStarted", "DELETING": "Deleting",
            "INVALID": "InvalidSpec", "CONFLICT": "Conflict"}
_PROGRESSING = ("DEPLOYING", "NOT_STARTED")
# Phases that need someone to act (a new spec, another name): kstatus's Stalled.
_STALLED = ("INVALID", "CONFLICT", "DEPLOY_FAILED")
_APP_PREFIX = "APPLICATION_STATUS_"
_DEPLOYMENT_PREFIX = "DEPLOYMENT_STATUS_"


@dataclass(frozen=True)
class Known:
    """What the controller knows of one object, besides the object itself."""

    holds: str = ""  # the application it owns (or keeps while invalid)
    conflict: str = ""  # why it cannot have the application it names
    refused: str = ""  # why the controller refused its current generation
    # The object's generation last applied (0: none in this term).
    applied_generation: int = 0
    app: status_pb2.ApplicationStatusInfo | None = None


def build_status(obj: ServeApp, known: Known, previous: dict[str, Any] | None,
                 now: str) -> dict[str, Any]:
    """The status to write; `previous` (the object's current status) keeps
    the conditions' transition times; `now` is an RFC 3339 time."""
    app = known.app
    if obj.spec is None or known.refused:
        phase, message, observed = "INVALID", obj.error or known.refused, obj.generation
    elif known.conflict:
        phase, message, observed = "CONFLICT", known.conflict, obj.generation
    elif known.applied_generation != obj.generation or app is None:
        phase, message, observed = "DEPLOYING", "", known.applied_generation
    else:
        phase = status_pb2.ApplicationStatus.Name(app.status).removeprefix(_APP_PREFIX)
        message, observed = app.message, obj.generation
    reason = _REASONS.get(phase, phase.title())
    if phase == "INVALID" and obj.spec is not None:
        reason = "Rejected"  # valid as written; refused by the controller's rules
    deployments = [_deployment(d) for d in app.deployments] if app is not None else []
    ready = sum(d["readyReplicas"] for d in deployments)
    target = sum(d["targetReplicas"] for d in deployments)
    status: dict[str, Any] = {
        "phase": phase, "application": known.holds or obj.application,
        "replicas": f"{ready}/{target}", "readyReplicas": ready, "targetReplicas": target,
        "message": message,
        "conditions": _conditions(phase, reason, message, observed, previous, now),
        "deployments": deployments}
    if observed:
        status["observedGeneration"] = observed
    if obj.warnings:
        status["warnings"] = list(obj.warnings)
    return status


def _deployment(info: status_pb2.DeploymentStatusInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.name,
        "status": status_pb2.DeploymentStatus.Name(info.status).removeprefix(_DEPLOYMENT_PREFIX),
        "readyReplicas": info.replica_states.get("RUNNING", 0),
        "targetReplicas": info.target_replicas}
    if info.message:
        out["message"] = info.message
    return out


def _conditions(phase: str, reason: str, message: str, observed: int,
                previous: dict[str, Any] | None, now: str) -> list[dict[str, Any]]:
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []
              if isinstance(c, dict)}
    out = []
    for kind, true in (("Ready", phase == "RUNNING"), ("Progressing", phase in _PROGRESSING),
                       ("Reconciling", phase in _PROGRESSING), ("Stalled", phase in _STALLED)):
        status = "True" if true else "False"
        old = before.get(kind) or {}
        condition: dict[str, Any] = {
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": (old.get("lastTransitionTime") or now)
            if old.get("status") == status else now}
        if observed:
            condition["observedGeneration"] = observed
        out.append(condition)
    return out
