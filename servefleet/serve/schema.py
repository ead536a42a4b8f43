"""`servefleet.serve.schema`: the shapes `serve.status()` returns,
LoggingConfig, and the config-file classes (config_schema.py), under Ray
Serve's names.

`ServeStatus` and its parts are dataclasses with Ray's fields; the status
enums are `str` enums, so `status.applications["default"].status ==
"RUNNING"` holds as in Ray. servefleet's own statuses map onto them in
status.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from servefleet._private.replica_context import ReplicaRank

from ._config_schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema
from ._options import OptionsModel

__all__ = ["ApplicationStatus", "ApplicationStatusOverview", "DeploymentSchema",
           "DeploymentStatus", "DeploymentStatusOverview", "DeploymentStatusTrigger",
           "EncodingType", "LoggingConfig", "ProxyStatus", "ReplicaRank", "ReplicaState",
           "ServeApplicationSchema", "ServeDeploySchema", "ServeStatus"]


class ApplicationStatus(StrEnum):
    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(StrEnum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


class DeploymentStatusTrigger(StrEnum):
    """What brought a deployment to its status."""

    UNSPECIFIED = "UNSPECIFIED"
    CONFIG_UPDATE_STARTED = "CONFIG_UPDATE_STARTED"
    CONFIG_UPDATE_COMPLETED = "CONFIG_UPDATE_COMPLETED"
    UPSCALE_COMPLETED = "UPSCALE_COMPLETED"
    DOWNSCALE_COMPLETED = "DOWNSCALE_COMPLETED"
    AUTOSCALING = "AUTOSCALING"
    REPLICA_STARTUP_FAILED = "REPLICA_STARTUP_FAILED"
    HEALTH_CHECK_FAILED = "HEALTH_CHECK_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DELETING = "DELETING"


class ReplicaState(StrEnum):
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    PENDING_MIGRATION = "PENDING_MIGRATION"


class ProxyStatus(StrEnum):
    STARTING = "STARTING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"


class EncodingType(StrEnum):
    TEXT = "TEXT"
    JSON = "JSON"


@dataclass
class DeploymentStatusOverview:
    """One deployment's status: replica counts by state and a message."""

    status: DeploymentStatus
    status_trigger: DeploymentStatusTrigger
    replica_states: dict[ReplicaState | str, int]
    message: str


@dataclass
class ApplicationStatusOverview:
    """One application's status and its deployments' (by name)."""

    status: ApplicationStatus
    message: str
    last_deployed_time_s: float
    deployments: dict[str, DeploymentStatusOverview]


@dataclass(eq=True)
class ServeStatus:
    """The proxies (by id) and the applications (by name) of the cluster."""

    proxies: dict[str, ProxyStatus] = field(default_factory=dict)
    applications: dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: float | None = None


class LoggingConfig(OptionsModel):
    """Ray's logging options for an application or deployment. servefleet
    keeps each process's log in its own format; these are accepted so that
    a Ray program runs, and checked, but not applied."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "encoding": EncodingType.TEXT,
        "log_level": "INFO",
        "logs_dir": None,
        "enable_access_log": True,
        "additional_log_standard_attrs": [],
    }

    def _validate(self) -> None:
        try:
            object.__setattr__(self, "encoding", EncodingType(self.encoding))
        except ValueError:
            raise ValueError(f"LoggingConfig.encoding: expected TEXT or JSON, got "
                             f"{self.encoding!r}") from None
        levels = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        level = self.log_level
        if isinstance(level, int) and not isinstance(level, bool):
            return
        if not isinstance(level, str) or level.upper() not in levels:
            raise ValueError(f"LoggingConfig.log_level: expected one of {', '.join(levels)}, "
                             f"got {level!r}")
