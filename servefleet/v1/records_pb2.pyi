import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from servefleet.v1 import deployment_pb2 as _deployment_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeploymentRecord(_message.Message):
    __slots__ = ("spec", "version", "code_hash", "start_time", "end_time", "deleted", "update_time", "autoscale")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CODE_HASH_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALE_FIELD_NUMBER: _ClassVar[int]
    spec: _deployment_pb2.DeploymentSpec
    version: str
    code_hash: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    deleted: bool
    update_time: _timestamp_pb2.Timestamp
    autoscale: AutoscaleDecision
    def __init__(self, spec: _Optional[_Union[_deployment_pb2.DeploymentSpec, _Mapping]] = ..., version: _Optional[str] = ..., code_hash: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deleted: _Optional[bool] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., autoscale: _Optional[_Union[AutoscaleDecision, _Mapping]] = ...) -> None: ...

class AutoscaleDecision(_message.Message):
    __slots__ = ("target_replicas", "reason", "decided_time")
    TARGET_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_TIME_FIELD_NUMBER: _ClassVar[int]
    target_replicas: int
    reason: str
    decided_time: _timestamp_pb2.Timestamp
    def __init__(self, target_replicas: _Optional[int] = ..., reason: _Optional[str] = ..., decided_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
