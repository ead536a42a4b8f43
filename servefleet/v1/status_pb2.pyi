import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeploymentStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_STATUS_UNSPECIFIED: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_UPDATING: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_HEALTHY: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_UNHEALTHY: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_DEPLOY_FAILED: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_UPSCALING: _ClassVar[DeploymentStatus]
    DEPLOYMENT_STATUS_DOWNSCALING: _ClassVar[DeploymentStatus]

class ApplicationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPLICATION_STATUS_UNSPECIFIED: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_NOT_STARTED: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_DEPLOYING: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_RUNNING: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_DEPLOY_FAILED: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_UNHEALTHY: _ClassVar[ApplicationStatus]
    APPLICATION_STATUS_DELETING: _ClassVar[ApplicationStatus]
DEPLOYMENT_STATUS_UNSPECIFIED: DeploymentStatus
DEPLOYMENT_STATUS_UPDATING: DeploymentStatus
DEPLOYMENT_STATUS_HEALTHY: DeploymentStatus
DEPLOYMENT_STATUS_UNHEALTHY: DeploymentStatus
DEPLOYMENT_STATUS_DEPLOY_FAILED: DeploymentStatus
DEPLOYMENT_STATUS_UPSCALING: DeploymentStatus
DEPLOYMENT_STATUS_DOWNSCALING: DeploymentStatus
APPLICATION_STATUS_UNSPECIFIED: ApplicationStatus
APPLICATION_STATUS_NOT_STARTED: ApplicationStatus
APPLICATION_STATUS_DEPLOYING: ApplicationStatus
APPLICATION_STATUS_RUNNING: ApplicationStatus
APPLICATION_STATUS_DEPLOY_FAILED: ApplicationStatus
APPLICATION_STATUS_UNHEALTHY: ApplicationStatus
APPLICATION_STATUS_DELETING: ApplicationStatus

class DeploymentStatusInfo(_message.Message):
    __slots__ = ("name", "status", "message", "replica_states", "target_replicas", "version", "queued_requests", "autoscaling", "traffic")
    class ReplicaStatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_STATES_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALING_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: DeploymentStatus
    message: str
    replica_states: _containers.ScalarMap[str, int]
    target_replicas: int
    version: str
    queued_requests: int
    autoscaling: AutoscalingStatus
    traffic: TrafficStatus
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[DeploymentStatus, str]] = ..., message: _Optional[str] = ..., replica_states: _Optional[_Mapping[str, int]] = ..., target_replicas: _Optional[int] = ..., version: _Optional[str] = ..., queued_requests: _Optional[int] = ..., autoscaling: _Optional[_Union[AutoscalingStatus, _Mapping]] = ..., traffic: _Optional[_Union[TrafficStatus, _Mapping]] = ...) -> None: ...

class TrafficStatus(_message.Message):
    __slots__ = ("requests_per_s", "p50_ms", "p99_ms", "errors_per_s")
    REQUESTS_PER_S_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_PER_S_FIELD_NUMBER: _ClassVar[int]
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors_per_s: float
    def __init__(self, requests_per_s: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., errors_per_s: _Optional[float] = ...) -> None: ...

class AutoscalingStatus(_message.Message):
    __slots__ = ("current_replicas", "target_replicas", "load", "desired_replicas", "reason", "policy_error")
    CURRENT_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    DESIRED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_ERROR_FIELD_NUMBER: _ClassVar[int]
    current_replicas: int
    target_replicas: int
    load: float
    desired_replicas: int
    reason: str
    policy_error: str
    def __init__(self, current_replicas: _Optional[int] = ..., target_replicas: _Optional[int] = ..., load: _Optional[float] = ..., desired_replicas: _Optional[int] = ..., reason: _Optional[str] = ..., policy_error: _Optional[str] = ...) -> None: ...

class ApplicationStatusInfo(_message.Message):
    __slots__ = ("name", "status", "message", "deployments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: ApplicationStatus
    message: str
    deployments: _containers.RepeatedCompositeFieldContainer[DeploymentStatusInfo]
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[ApplicationStatus, str]] = ..., message: _Optional[str] = ..., deployments: _Optional[_Iterable[_Union[DeploymentStatusInfo, _Mapping]]] = ...) -> None: ...

class ProxyStatus(_message.Message):
    __slots__ = ("id", "address", "healthy", "last_seen")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    healthy: bool
    last_seen: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., healthy: _Optional[bool] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
