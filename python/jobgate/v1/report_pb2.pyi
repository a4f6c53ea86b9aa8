from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    KIND_JOBSPEC: _ClassVar[Kind]
    KIND_SPEC_BUNDLE: _ClassVar[Kind]
    KIND_JOB_RECORD: _ClassVar[Kind]
    KIND_BEST_REC: _ClassVar[Kind]
KIND_UNSPECIFIED: Kind
KIND_JOBSPEC: Kind
KIND_SPEC_BUNDLE: Kind
KIND_JOB_RECORD: Kind
KIND_BEST_REC: Kind

class Violation(_message.Message):
    __slots__ = ("rule", "field", "message", "severity", "line", "column", "default_severity")
    RULE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SEVERITY_FIELD_NUMBER: _ClassVar[int]
    rule: str
    field: str
    message: str
    severity: str
    line: int
    column: int
    default_severity: str
    def __init__(self, rule: _Optional[str] = ..., field: _Optional[str] = ..., message: _Optional[str] = ..., severity: _Optional[str] = ..., line: _Optional[int] = ..., column: _Optional[int] = ..., default_severity: _Optional[str] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("kind", "verdict", "violations")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    verdict: str
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    def __init__(self, kind: _Optional[str] = ..., verdict: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ...) -> None: ...
