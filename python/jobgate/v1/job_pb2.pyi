from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobRecord(_message.Message):
    __slots__ = ("schema_version", "id", "platform", "backend_ref", "image", "network_arch", "action", "results_dir", "storage_tier", "upload_excludes", "submitted_at", "transitions", "terminal_state", "terminal_write_by", "err_class", "retry_of", "parent_job", "redacted")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    BACKEND_REF_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_ARCH_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_DIR_FIELD_NUMBER: _ClassVar[int]
    STORAGE_TIER_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_EXCLUDES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_WRITE_BY_FIELD_NUMBER: _ClassVar[int]
    ERR_CLASS_FIELD_NUMBER: _ClassVar[int]
    RETRY_OF_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    id: str
    platform: str
    backend_ref: _struct_pb2.Value
    image: str
    network_arch: str
    action: str
    results_dir: str
    storage_tier: str
    upload_excludes: _containers.RepeatedScalarFieldContainer[str]
    submitted_at: str
    transitions: _containers.RepeatedCompositeFieldContainer[Transition]
    terminal_state: _struct_pb2.Value
    terminal_write_by: _struct_pb2.Value
    err_class: _struct_pb2.Value
    retry_of: _struct_pb2.Value
    parent_job: _struct_pb2.Value
    redacted: bool
    def __init__(self, schema_version: _Optional[int] = ..., id: _Optional[str] = ..., platform: _Optional[str] = ..., backend_ref: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., image: _Optional[str] = ..., network_arch: _Optional[str] = ..., action: _Optional[str] = ..., results_dir: _Optional[str] = ..., storage_tier: _Optional[str] = ..., upload_excludes: _Optional[_Iterable[str]] = ..., submitted_at: _Optional[str] = ..., transitions: _Optional[_Iterable[_Union[Transition, _Mapping]]] = ..., terminal_state: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., terminal_write_by: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., err_class: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., retry_of: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., parent_job: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., redacted: _Optional[bool] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ("ts", "state", "message", "source")
    TS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ts: str
    state: str
    message: str
    source: str
    def __init__(self, ts: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...
