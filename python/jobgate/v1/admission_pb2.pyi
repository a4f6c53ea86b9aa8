from jobgate.v1 import jobspec_pb2 as _jobspec_pb2
from jobgate.v1 import report_pb2 as _report_pb2
from jobgate.v1 import tao_pb2 as _tao_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Document(_message.Message):
    __slots__ = ("raw", "jobspec", "spec_bundle", "kind", "package", "idempotency_key")
    RAW_FIELD_NUMBER: _ClassVar[int]
    JOBSPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    raw: bytes
    jobspec: _jobspec_pb2.JobSpec
    spec_bundle: _tao_pb2.SpecBundle
    kind: _report_pb2.Kind
    package: bytes
    idempotency_key: str
    def __init__(self, raw: _Optional[bytes] = ..., jobspec: _Optional[_Union[_jobspec_pb2.JobSpec, _Mapping]] = ..., spec_bundle: _Optional[_Union[_tao_pb2.SpecBundle, _Mapping]] = ..., kind: _Optional[_Union[_report_pb2.Kind, str]] = ..., package: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("document", "dry_run")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    document: Document
    dry_run: bool
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class AdmitResponse(_message.Message):
    __slots__ = ("report", "job_id")
    REPORT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    report: _report_pb2.Report
    job_id: str
    def __init__(self, report: _Optional[_Union[_report_pb2.Report, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class AdmitBatchRequest(_message.Message):
    __slots__ = ("documents", "dry_run")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    dry_run: bool
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class AdmitBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AdmitResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[AdmitResponse, _Mapping]]] = ...) -> None: ...

class AdmitStreamRequest(_message.Message):
    __slots__ = ("request_id", "document", "dry_run")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    document: Document
    dry_run: bool
    def __init__(self, request_id: _Optional[str] = ..., document: _Optional[_Union[Document, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class AdmitStreamResponse(_message.Message):
    __slots__ = ("request_id", "report", "job_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    report: _report_pb2.Report
    job_id: str
    def __init__(self, request_id: _Optional[str] = ..., report: _Optional[_Union[_report_pb2.Report, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class RecipeStatusRequest(_message.Message):
    __slots__ = ("lock", "core_version")
    LOCK_FIELD_NUMBER: _ClassVar[int]
    CORE_VERSION_FIELD_NUMBER: _ClassVar[int]
    lock: bytes
    core_version: str
    def __init__(self, lock: _Optional[bytes] = ..., core_version: _Optional[str] = ...) -> None: ...

class RecipeStatusResponse(_message.Message):
    __slots__ = ("status", "message", "catalog_version", "catalog_digest", "catalog_runtime_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CATALOG_VERSION_FIELD_NUMBER: _ClassVar[int]
    CATALOG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CATALOG_RUNTIME_ID_FIELD_NUMBER: _ClassVar[int]
    status: str
    message: str
    catalog_version: str
    catalog_digest: str
    catalog_runtime_id: str
    def __init__(self, status: _Optional[str] = ..., message: _Optional[str] = ..., catalog_version: _Optional[str] = ..., catalog_digest: _Optional[str] = ..., catalog_runtime_id: _Optional[str] = ...) -> None: ...
