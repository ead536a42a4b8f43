from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IngressServiceListApplicationsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IngressServiceListApplicationsResponse(_message.Message):
    __slots__ = ("applications",)
    APPLICATIONS_FIELD_NUMBER: _ClassVar[int]
    applications: _containers.RepeatedCompositeFieldContainer[IngressApplication]
    def __init__(self, applications: _Optional[_Iterable[_Union[IngressApplication, _Mapping]]] = ...) -> None: ...

class IngressApplication(_message.Message):
    __slots__ = ("name", "services")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    name: str
    services: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., services: _Optional[_Iterable[str]] = ...) -> None: ...

class HealthzRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthzResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...
