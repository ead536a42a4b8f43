import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from servefleet.v1 import application_pb2 as _application_pb2
from servefleet.v1 import deployment_pb2 as _deployment_pb2
from servefleet.v1 import records_pb2 as _records_pb2
from servefleet.v1 import replica_pb2 as _replica_pb2
from servefleet.v1 import status_pb2 as _status_pb2
from servefleet.v1 import watch_pb2 as _watch_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeployRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _deployment_pb2.DeploymentSpec
    def __init__(self, spec: _Optional[_Union[_deployment_pb2.DeploymentSpec, _Mapping]] = ...) -> None: ...

class DeployResponse(_message.Message):
    __slots__ = ("version", "updating")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATING_FIELD_NUMBER: _ClassVar[int]
    version: str
    updating: bool
    def __init__(self, version: _Optional[str] = ..., updating: _Optional[bool] = ...) -> None: ...

class DeleteDeploymentsRequest(_message.Message):
    __slots__ = ("application", "names")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    application: str
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, application: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteDeploymentsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class GetDeploymentRequest(_message.Message):
    __slots__ = ("application", "name")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    application: str
    name: str
    def __init__(self, application: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetDeploymentResponse(_message.Message):
    __slots__ = ("deployment",)
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    deployment: _records_pb2.DeploymentRecord
    def __init__(self, deployment: _Optional[_Union[_records_pb2.DeploymentRecord, _Mapping]] = ...) -> None: ...

class ListDeploymentsRequest(_message.Message):
    __slots__ = ("include_deleted", "application")
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    include_deleted: bool
    application: str
    def __init__(self, include_deleted: _Optional[bool] = ..., application: _Optional[str] = ...) -> None: ...

class ListDeploymentsResponse(_message.Message):
    __slots__ = ("deployments",)
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    deployments: _containers.RepeatedCompositeFieldContainer[_records_pb2.DeploymentRecord]
    def __init__(self, deployments: _Optional[_Iterable[_Union[_records_pb2.DeploymentRecord, _Mapping]]] = ...) -> None: ...

class ListReplicasRequest(_message.Message):
    __slots__ = ("application", "deployment")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    application: str
    deployment: str
    def __init__(self, application: _Optional[str] = ..., deployment: _Optional[str] = ...) -> None: ...

class ListReplicasResponse(_message.Message):
    __slots__ = ("replicas",)
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedCompositeFieldContainer[_replica_pb2.ReplicaInfo]
    def __init__(self, replicas: _Optional[_Iterable[_Union[_replica_pb2.ReplicaInfo, _Mapping]]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("applications", "proxies", "cluster", "leader", "controllers")
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    PROXIES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[_status_pb2.ApplicationStatusInfo]
    proxies: _containers.RepeatedCompositeFieldContainer[_status_pb2.ProxyStatus]
    cluster: str
    leader: str
    controllers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, applications: _Optional[_Iterable[_Union[_status_pb2.ApplicationStatusInfo, _Mapping]]] = ..., proxies: _Optional[_Iterable[_Union[_status_pb2.ProxyStatus, _Mapping]]] = ..., cluster: _Optional[str] = ..., leader: _Optional[str] = ..., controllers: _Optional[_Iterable[str]] = ...) -> None: ...

class ReportLoadRequest(_message.Message):
    __slots__ = ("reporter_id", "queued", "ongoing", "traffic", "ejected", "suspected", "recent_errors", "applied")
    class QueuedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class OngoingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class TrafficEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DeploymentTraffic
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DeploymentTraffic, _Mapping]] = ...) -> None: ...
    REPORTER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    ONGOING_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    EJECTED_FIELD_NUMBER: _ClassVar[int]
    SUSPECTED_FIELD_NUMBER: _ClassVar[int]
    RECENT_ERRORS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    reporter_id: str
    queued: _containers.ScalarMap[str, int]
    ongoing: _containers.ScalarMap[str, int]
    traffic: _containers.MessageMap[str, DeploymentTraffic]
    ejected: _containers.RepeatedScalarFieldContainer[str]
    suspected: _containers.RepeatedScalarFieldContainer[str]
    recent_errors: _containers.RepeatedCompositeFieldContainer[RecentError]
    applied: AppliedReplicaSets
    def __init__(self, reporter_id: _Optional[str] = ..., queued: _Optional[_Mapping[str, int]] = ..., ongoing: _Optional[_Mapping[str, int]] = ..., traffic: _Optional[_Mapping[str, DeploymentTraffic]] = ..., ejected: _Optional[_Iterable[str]] = ..., suspected: _Optional[_Iterable[str]] = ..., recent_errors: _Optional[_Iterable[_Union[RecentError, _Mapping]]] = ..., applied: _Optional[_Union[AppliedReplicaSets, _Mapping]] = ...) -> None: ...

class AppliedReplicaSets(_message.Message):
    __slots__ = ("snapshot_ids", "replace")
    class SnapshotIdsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_IDS_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    snapshot_ids: _containers.ScalarMap[str, str]
    replace: bool
    def __init__(self, snapshot_ids: _Optional[_Mapping[str, str]] = ..., replace: _Optional[bool] = ...) -> None: ...

class DeploymentTraffic(_message.Message):
    __slots__ = ("requests", "window_s", "p50_ms", "p99_ms", "errors")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    requests: int
    window_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    def __init__(self, requests: _Optional[int] = ..., window_s: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., errors: _Optional[int] = ...) -> None: ...

class RecentError(_message.Message):
    __slots__ = ("time_unix_s", "application", "deployment", "route", "http_status", "grpc_code", "request_id", "trace_id")
    TIME_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    time_unix_s: float
    application: str
    deployment: str
    route: str
    http_status: int
    grpc_code: str
    request_id: str
    trace_id: str
    def __init__(self, time_unix_s: _Optional[float] = ..., application: _Optional[str] = ..., deployment: _Optional[str] = ..., route: _Optional[str] = ..., http_status: _Optional[int] = ..., grpc_code: _Optional[str] = ..., request_id: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...

class ReportLoadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamLoadRequest(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: ReportLoadRequest
    def __init__(self, report: _Optional[_Union[ReportLoadRequest, _Mapping]] = ...) -> None: ...

class StreamLoadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShutdownResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLogsRequest(_message.Message):
    __slots__ = ("application", "deployment", "replica_id", "tail_lines", "follow", "request_id")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    application: str
    deployment: str
    replica_id: str
    tail_lines: int
    follow: bool
    request_id: str
    def __init__(self, application: _Optional[str] = ..., deployment: _Optional[str] = ..., replica_id: _Optional[str] = ..., tail_lines: _Optional[int] = ..., follow: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetLogsResponse(_message.Message):
    __slots__ = ("replica_id", "application", "deployment", "lines")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    application: str
    deployment: str
    lines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, replica_id: _Optional[str] = ..., application: _Optional[str] = ..., deployment: _Optional[str] = ..., lines: _Optional[_Iterable[str]] = ...) -> None: ...

class DeployApplicationsRequest(_message.Message):
    __slots__ = ("applications", "partial", "http_options", "dry_run")
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    HTTP_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[_application_pb2.ApplicationSpec]
    partial: bool
    http_options: _application_pb2.HttpOptions
    dry_run: bool
    def __init__(self, applications: _Optional[_Iterable[_Union[_application_pb2.ApplicationSpec, _Mapping]]] = ..., partial: _Optional[bool] = ..., http_options: _Optional[_Union[_application_pb2.HttpOptions, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class DeployApplicationsResponse(_message.Message):
    __slots__ = ("changed", "deleted")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    changed: _containers.RepeatedScalarFieldContainer[str]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, changed: _Optional[_Iterable[str]] = ..., deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class ListApplicationsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListApplicationsResponse(_message.Message):
    __slots__ = ("applications", "http_options")
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    HTTP_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[_application_pb2.ApplicationRecord]
    http_options: _application_pb2.HttpOptions
    def __init__(self, applications: _Optional[_Iterable[_Union[_application_pb2.ApplicationRecord, _Mapping]]] = ..., http_options: _Optional[_Union[_application_pb2.HttpOptions, _Mapping]] = ...) -> None: ...

class DeleteApplicationsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteApplicationsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted: _Optional[_Iterable[str]] = ...) -> None: ...

class SetTrafficRequest(_message.Message):
    __slots__ = ("application", "traffic")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    application: str
    traffic: _application_pb2.TrafficPolicy
    def __init__(self, application: _Optional[str] = ..., traffic: _Optional[_Union[_application_pb2.TrafficPolicy, _Mapping]] = ...) -> None: ...

class SetTrafficResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetHopPassRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetHopPassResponse(_message.Message):
    __slots__ = ("expires", "subject")
    PASS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    expires: _timestamp_pb2.Timestamp
    subject: str
    def __init__(self, expires: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., subject: _Optional[str] = ..., **kwargs) -> None: ...
