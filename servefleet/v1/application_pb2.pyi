import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from servefleet.v1 import deployment_pb2 as _deployment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplicationSpec(_message.Message):
    __slots__ = ("name", "route_prefix", "import_path", "args_json", "runtime", "deployments", "traffic", "no_route", "require_token", "grpc_servicer_functions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROUTE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    IMPORT_PATH_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    NO_ROUTE_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GRPC_SERVICER_FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    route_prefix: str
    import_path: str
    args_json: str
    runtime: _deployment_pb2.RuntimeOptions
    deployments: _containers.RepeatedCompositeFieldContainer[DeploymentOverride]
    traffic: TrafficPolicy
    no_route: bool
    require_token: bool
    grpc_servicer_functions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., route_prefix: _Optional[str] = ..., import_path: _Optional[str] = ..., args_json: _Optional[str] = ..., runtime: _Optional[_Union[_deployment_pb2.RuntimeOptions, _Mapping]] = ..., deployments: _Optional[_Iterable[_Union[DeploymentOverride, _Mapping]]] = ..., traffic: _Optional[_Union[TrafficPolicy, _Mapping]] = ..., no_route: _Optional[bool] = ..., require_token: _Optional[bool] = ..., grpc_servicer_functions: _Optional[_Iterable[str]] = ...) -> None: ...

class DeploymentOverride(_message.Message):
    __slots__ = ("name", "replica_config", "version", "runtime")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICA_CONFIG_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    replica_config: _deployment_pb2.ReplicaConfig
    version: str
    runtime: _deployment_pb2.RuntimeOptions
    def __init__(self, name: _Optional[str] = ..., replica_config: _Optional[_Union[_deployment_pb2.ReplicaConfig, _Mapping]] = ..., version: _Optional[str] = ..., runtime: _Optional[_Union[_deployment_pb2.RuntimeOptions, _Mapping]] = ...) -> None: ...

class TrafficPolicy(_message.Message):
    __slots__ = ("split", "shadow")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    split: _containers.RepeatedCompositeFieldContainer[WeightedDeployment]
    shadow: ShadowTarget
    def __init__(self, split: _Optional[_Iterable[_Union[WeightedDeployment, _Mapping]]] = ..., shadow: _Optional[_Union[ShadowTarget, _Mapping]] = ...) -> None: ...

class WeightedDeployment(_message.Message):
    __slots__ = ("deployment", "weight")
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    deployment: str
    weight: float
    def __init__(self, deployment: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class ShadowTarget(_message.Message):
    __slots__ = ("deployment", "fraction")
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    deployment: str
    fraction: float
    def __init__(self, deployment: _Optional[str] = ..., fraction: _Optional[float] = ...) -> None: ...

class HttpOptions(_message.Message):
    __slots__ = ("host", "port", "request_timeout_s", "max_request_body_bytes")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    request_timeout_s: float
    max_request_body_bytes: int
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., request_timeout_s: _Optional[float] = ..., max_request_body_bytes: _Optional[int] = ...) -> None: ...

class ApplicationRecord(_message.Message):
    __slots__ = ("spec", "generation", "applied_generation", "build_error", "deployment_names", "deleted", "update_time", "failed_generation")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    APPLIED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    BUILD_ERROR_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    spec: ApplicationSpec
    generation: int
    applied_generation: int
    build_error: str
    deployment_names: _containers.RepeatedScalarFieldContainer[str]
    deleted: bool
    update_time: _timestamp_pb2.Timestamp
    failed_generation: int
    def __init__(self, spec: _Optional[_Union[ApplicationSpec, _Mapping]] = ..., generation: _Optional[int] = ..., applied_generation: _Optional[int] = ..., build_error: _Optional[str] = ..., deployment_names: _Optional[_Iterable[str]] = ..., deleted: _Optional[bool] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failed_generation: _Optional[int] = ...) -> None: ...
