import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from servefleet.v1 import application_pb2 as _application_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatcherKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCHER_KIND_UNSPECIFIED: _ClassVar[WatcherKind]
    WATCHER_KIND_PROXY: _ClassVar[WatcherKind]
    WATCHER_KIND_REPLICA: _ClassVar[WatcherKind]
    WATCHER_KIND_HANDLE: _ClassVar[WatcherKind]
WATCHER_KIND_UNSPECIFIED: WatcherKind
WATCHER_KIND_PROXY: WatcherKind
WATCHER_KIND_REPLICA: WatcherKind
WATCHER_KIND_HANDLE: WatcherKind

class WatchRequest(_message.Message):
    __slots__ = ("watcher_id", "kind", "address", "known", "heartbeat_s")
    class KnownEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_S_FIELD_NUMBER: _ClassVar[int]
    watcher_id: str
    kind: WatcherKind
    address: str
    known: _containers.ScalarMap[str, str]
    heartbeat_s: float
    def __init__(self, watcher_id: _Optional[str] = ..., kind: _Optional[_Union[WatcherKind, str]] = ..., address: _Optional[str] = ..., known: _Optional[_Mapping[str, str]] = ..., heartbeat_s: _Optional[float] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("snapshot", "heartbeat")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    heartbeat: Heartbeat
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("key", "snapshot_id", "deleted", "routes", "replicas", "config", "hop")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    key: str
    snapshot_id: str
    deleted: bool
    routes: RouteTable
    replicas: ReplicaSet
    config: DeploymentConfig
    hop: HopTrust
    def __init__(self, key: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., deleted: _Optional[bool] = ..., routes: _Optional[_Union[RouteTable, _Mapping]] = ..., replicas: _Optional[_Union[ReplicaSet, _Mapping]] = ..., config: _Optional[_Union[DeploymentConfig, _Mapping]] = ..., hop: _Optional[_Union[HopTrust, _Mapping]] = ...) -> None: ...

class HopTrust(_message.Message):
    __slots__ = ("required", "keys", "revoked", "revoked_certificates")
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    REVOKED_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    required: bool
    keys: _containers.RepeatedCompositeFieldContainer[HopKey]
    revoked: _containers.RepeatedCompositeFieldContainer[RevokedHopSubject]
    revoked_certificates: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, required: _Optional[bool] = ..., keys: _Optional[_Iterable[_Union[HopKey, _Mapping]]] = ..., revoked: _Optional[_Iterable[_Union[RevokedHopSubject, _Mapping]]] = ..., revoked_certificates: _Optional[_Iterable[str]] = ...) -> None: ...

class HopKey(_message.Message):
    __slots__ = ("id", "public_key")
    ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    id: str
    public_key: bytes
    def __init__(self, id: _Optional[str] = ..., public_key: _Optional[bytes] = ...) -> None: ...

class RevokedHopSubject(_message.Message):
    __slots__ = ("subject", "until", "revoked_at")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    subject: str
    until: _timestamp_pb2.Timestamp
    revoked_at: _timestamp_pb2.Timestamp
    def __init__(self, subject: _Optional[str] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RouteTable(_message.Message):
    __slots__ = ("routes", "request_timeout_s", "max_request_body_bytes", "grpc_routes")
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GRPC_ROUTES_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    request_timeout_s: float
    max_request_body_bytes: int
    grpc_routes: _containers.RepeatedCompositeFieldContainer[GrpcRoute]
    def __init__(self, routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ..., request_timeout_s: _Optional[float] = ..., max_request_body_bytes: _Optional[int] = ..., grpc_routes: _Optional[_Iterable[_Union[GrpcRoute, _Mapping]]] = ...) -> None: ...

class GrpcRoute(_message.Message):
    __slots__ = ("application", "deployment", "services", "require_token", "streaming_methods", "split", "unavailable", "request_router", "request_router_kwargs_json", "client_streaming_methods")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STREAMING_METHODS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STREAMING_METHODS_FIELD_NUMBER: _ClassVar[int]
    application: str
    deployment: str
    services: _containers.RepeatedScalarFieldContainer[str]
    require_token: bool
    streaming_methods: _containers.RepeatedScalarFieldContainer[str]
    split: _containers.RepeatedCompositeFieldContainer[_application_pb2.WeightedDeployment]
    unavailable: str
    request_router: str
    request_router_kwargs_json: str
    client_streaming_methods: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, application: _Optional[str] = ..., deployment: _Optional[str] = ..., services: _Optional[_Iterable[str]] = ..., require_token: _Optional[bool] = ..., streaming_methods: _Optional[_Iterable[str]] = ..., split: _Optional[_Iterable[_Union[_application_pb2.WeightedDeployment, _Mapping]]] = ..., unavailable: _Optional[str] = ..., request_router: _Optional[str] = ..., request_router_kwargs_json: _Optional[str] = ..., client_streaming_methods: _Optional[_Iterable[str]] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("route_prefix", "application", "deployment", "split", "shadow", "require_token", "unavailable", "request_router", "request_router_kwargs_json")
    ROUTE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    route_prefix: str
    application: str
    deployment: str
    split: _containers.RepeatedCompositeFieldContainer[_application_pb2.WeightedDeployment]
    shadow: _application_pb2.ShadowTarget
    require_token: bool
    unavailable: str
    request_router: str
    request_router_kwargs_json: str
    def __init__(self, route_prefix: _Optional[str] = ..., application: _Optional[str] = ..., deployment: _Optional[str] = ..., split: _Optional[_Iterable[_Union[_application_pb2.WeightedDeployment, _Mapping]]] = ..., shadow: _Optional[_Union[_application_pb2.ShadowTarget, _Mapping]] = ..., require_token: _Optional[bool] = ..., unavailable: _Optional[str] = ..., request_router: _Optional[str] = ..., request_router_kwargs_json: _Optional[str] = ...) -> None: ...

class ReplicaSet(_message.Message):
    __slots__ = ("application", "deployment", "endpoints", "max_ongoing_requests", "max_queued_requests", "retry_methods", "unavailable", "request_router", "request_router_kwargs_json", "backpressure_status_code", "backpressure_retry_after_s")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_METHODS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    application: str
    deployment: str
    endpoints: _containers.RepeatedCompositeFieldContainer[ReplicaEndpoint]
    max_ongoing_requests: int
    max_queued_requests: int
    retry_methods: _containers.RepeatedScalarFieldContainer[str]
    unavailable: str
    request_router: str
    request_router_kwargs_json: str
    backpressure_status_code: int
    backpressure_retry_after_s: float
    def __init__(self, application: _Optional[str] = ..., deployment: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[ReplicaEndpoint, _Mapping]]] = ..., max_ongoing_requests: _Optional[int] = ..., max_queued_requests: _Optional[int] = ..., retry_methods: _Optional[_Iterable[str]] = ..., unavailable: _Optional[str] = ..., request_router: _Optional[str] = ..., request_router_kwargs_json: _Optional[str] = ..., backpressure_status_code: _Optional[int] = ..., backpressure_retry_after_s: _Optional[float] = ...) -> None: ...

class ReplicaEndpoint(_message.Message):
    __slots__ = ("replica_id", "http_address", "grpc_address", "cleared", "http_tls")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    HTTP_TLS_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    http_address: str
    grpc_address: str
    cleared: int
    http_tls: bool
    def __init__(self, replica_id: _Optional[str] = ..., http_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., cleared: _Optional[int] = ..., http_tls: _Optional[bool] = ...) -> None: ...

class DeploymentConfig(_message.Message):
    __slots__ = ("user_config_json", "max_ongoing_requests", "version", "code_hash")
    USER_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CODE_HASH_FIELD_NUMBER: _ClassVar[int]
    user_config_json: str
    max_ongoing_requests: int
    version: str
    code_hash: str
    def __init__(self, user_config_json: _Optional[str] = ..., max_ongoing_requests: _Optional[int] = ..., version: _Optional[str] = ..., code_hash: _Optional[str] = ...) -> None: ...
