import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_STATE_UNSPECIFIED: _ClassVar[ReplicaState]
    REPLICA_STATE_STARTING: _ClassVar[ReplicaState]
    REPLICA_STATE_RUNNING: _ClassVar[ReplicaState]
    REPLICA_STATE_STOPPING: _ClassVar[ReplicaState]
    REPLICA_STATE_RECOVERING: _ClassVar[ReplicaState]

class ReplicaPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_PHASE_UNSPECIFIED: _ClassVar[ReplicaPhase]
    REPLICA_PHASE_LOADING: _ClassVar[ReplicaPhase]
    REPLICA_PHASE_READY: _ClassVar[ReplicaPhase]
    REPLICA_PHASE_FAILED: _ClassVar[ReplicaPhase]
    REPLICA_PHASE_DRAINING: _ClassVar[ReplicaPhase]
REPLICA_STATE_UNSPECIFIED: ReplicaState
REPLICA_STATE_STARTING: ReplicaState
REPLICA_STATE_RUNNING: ReplicaState
REPLICA_STATE_STOPPING: ReplicaState
REPLICA_STATE_RECOVERING: ReplicaState
REPLICA_PHASE_UNSPECIFIED: ReplicaPhase
REPLICA_PHASE_LOADING: ReplicaPhase
REPLICA_PHASE_READY: ReplicaPhase
REPLICA_PHASE_FAILED: ReplicaPhase
REPLICA_PHASE_DRAINING: ReplicaPhase

class ReplicaRecord(_message.Message):
    __slots__ = ("replica_id", "application", "deployment", "slot", "version", "code_hash", "runtime", "handle", "control_address", "http_address", "created_time", "stopping", "metrics_address", "grpc_address", "token_sha256", "http_tls", "rank")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CODE_HASH_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SHA256_FIELD_NUMBER: _ClassVar[int]
    HTTP_TLS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    application: str
    deployment: str
    slot: int
    version: str
    code_hash: str
    runtime: str
    handle: str
    control_address: str
    http_address: str
    created_time: _timestamp_pb2.Timestamp
    stopping: bool
    metrics_address: str
    grpc_address: str
    token_sha256: str
    http_tls: bool
    rank: int
    def __init__(self, replica_id: _Optional[str] = ..., application: _Optional[str] = ..., deployment: _Optional[str] = ..., slot: _Optional[int] = ..., version: _Optional[str] = ..., code_hash: _Optional[str] = ..., runtime: _Optional[str] = ..., handle: _Optional[str] = ..., control_address: _Optional[str] = ..., http_address: _Optional[str] = ..., created_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stopping: _Optional[bool] = ..., metrics_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., token_sha256: _Optional[str] = ..., http_tls: _Optional[bool] = ..., rank: _Optional[int] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("record", "state", "message")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    record: ReplicaRecord
    state: ReplicaState
    message: str
    def __init__(self, record: _Optional[_Union[ReplicaRecord, _Mapping]] = ..., state: _Optional[_Union[ReplicaState, str]] = ..., message: _Optional[str] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetadataResponse(_message.Message):
    __slots__ = ("phase", "replica_id", "version", "pid", "ongoing_requests", "user_config_json", "max_ongoing_requests", "error", "traceback", "rank", "world_size")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    USER_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    phase: ReplicaPhase
    replica_id: str
    version: str
    pid: int
    ongoing_requests: int
    user_config_json: str
    max_ongoing_requests: int
    error: str
    traceback: str
    rank: int
    world_size: int
    def __init__(self, phase: _Optional[_Union[ReplicaPhase, str]] = ..., replica_id: _Optional[str] = ..., version: _Optional[str] = ..., pid: _Optional[int] = ..., ongoing_requests: _Optional[int] = ..., user_config_json: _Optional[str] = ..., max_ongoing_requests: _Optional[int] = ..., error: _Optional[str] = ..., traceback: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ...) -> None: ...

class CheckHealthRequest(_message.Message):
    __slots__ = ("replica_id",)
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    def __init__(self, replica_id: _Optional[str] = ...) -> None: ...

class CheckHealthResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReconfigureRequest(_message.Message):
    __slots__ = ("user_config_json", "max_ongoing_requests", "replica_id", "rank", "world_size")
    USER_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    user_config_json: str
    max_ongoing_requests: int
    replica_id: str
    rank: int
    world_size: int
    def __init__(self, user_config_json: _Optional[str] = ..., max_ongoing_requests: _Optional[int] = ..., replica_id: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ...) -> None: ...

class ReconfigureResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("wait_loop_s", "timeout_s", "replica_id")
    WAIT_LOOP_S_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    wait_loop_s: float
    timeout_s: float
    replica_id: str
    def __init__(self, wait_loop_s: _Optional[float] = ..., timeout_s: _Optional[float] = ..., replica_id: _Optional[str] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
