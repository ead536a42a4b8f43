from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Chunk(_message.Message):
    __slots__ = ("seq", "data", "text")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    data: bytes
    text: str
    def __init__(self, seq: _Optional[int] = ..., data: _Optional[bytes] = ..., text: _Optional[str] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("count", "bytes", "replica", "in_order")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    IN_ORDER_FIELD_NUMBER: _ClassVar[int]
    count: int
    bytes: int
    replica: str
    in_order: bool
    def __init__(self, count: _Optional[int] = ..., bytes: _Optional[int] = ..., replica: _Optional[str] = ..., in_order: _Optional[bool] = ...) -> None: ...
