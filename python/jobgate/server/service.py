"""The servicers: map messages to the gate and the store, and failures to status codes."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from jobgate.config import Config
from jobgate.server import recipes
from jobgate.server.auth import Authenticator
from jobgate.server.gate import KIND_NAMES, Gate
from jobgate.server.metrics import Metrics
from jobgate.store import JobNotFound, JobStore, TerminalState
from jobgate.store.base import TERMINAL
from jobgate.v1 import admission_pb2, admission_pb2_grpc, job_pb2, jobs_pb2, jobs_pb2_grpc, report_pb2


def bad_request(context: grpc.ServicerContext, field: str, description: str) -> None:
    """INVALID_ARGUMENT with google.rpc.BadRequest details naming the field."""
    detail = error_details_pb2.BadRequest(field_violations=[error_details_pb2.BadRequest.FieldViolation(field=field, description=description)])
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=f"{field}: {description}")
    status.details.add().Pack(detail)
    context.abort_with_status(rpc_status.to_status(status))


def report_message(report) -> report_pb2.Report:
    return report_pb2.Report(
        kind=report.kind,
        verdict=report.verdict,
        violations=[report_pb2.Violation(rule=v.rule, field=v.field, message=v.message, severity=v.severity) for v in report.violations],
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class BatchEncoder:
    """AdmitBatchResponse bytes without a message object per item: the response of a
    clean report is the same for every document of its kind, so it is encoded once."""

    def __init__(self) -> None:
        self._clean: dict[tuple[str, str], bytes] = {}

    def item(self, report, job_id: str = "") -> bytes:
        if not report.violations and not job_id:
            key = (report.kind, report.verdict)
            cached = self._clean.get(key)
            if cached is None:
                cached = self._clean[key] = _field(1, admission_pb2.AdmitResponse(report=report_message(report)).SerializeToString())
            return cached
        return _field(1, admission_pb2.AdmitResponse(report=report_message(report), job_id=job_id).SerializeToString())

    def response(self, reports) -> bytes:
        return b"".join(self.item(r) for r in reports)


def document_bytes(document: admission_pb2.Document, context: grpc.ServicerContext, field: str) -> tuple[bytes, str | None]:
    """The bytes the core checks: raw bytes as sent, or the typed message's JSON form."""
    kind = KIND_NAMES.get(document.kind)
    which = document.WhichOneof("body")
    if which == "raw":
        return document.raw, kind
    if which == "jobspec":
        return orjson.dumps(json_format.MessageToDict(document.jobspec)), kind or "jobspec"
    if which == "spec_bundle":
        return orjson.dumps(json_format.MessageToDict(document.spec_bundle)), kind or "spec_bundle"
    bad_request(context, f"{field}.body", "a document needs raw bytes, a jobspec or a spec_bundle")
    raise AssertionError("unreachable")


def timed(rpc: str):
    """Times a unary handler and counts it in flight, in the servicer's own metrics."""

    def wrap(handler):
        @functools.wraps(handler)
        def inner(servicer, request, context):
            metrics = servicer.metrics
            gauge = metrics.in_flight.labels(rpc)
            gauge.inc()
            start = time.perf_counter()
            try:
                return handler(servicer, request, context)
            finally:
                metrics.latency.labels(rpc).observe(time.perf_counter() - start)
                gauge.dec()

        return inner

    return wrap


class AdmissionService(admission_pb2_grpc.AdmissionServiceServicer):
    def __init__(self, config: Config, gate: Gate, auth: Authenticator, metrics: Metrics | None = None) -> None:
        self.config, self.gate, self.auth = config, gate, auth
        self.metrics = metrics or Metrics()
        self.encoder = BatchEncoder()

    @timed("Admit")
    def Admit(self, request, context):  # noqa: N802 - gRPC method names
        account = self.auth.account(context)
        data, kind = document_bytes(request.document, context, "document")
        result = self.gate.admit(data, kind, account, dry_run=request.dry_run, package=request.document.package)
        self.metrics.report("Admit", result.report)
        return admission_pb2.AdmitResponse(report=report_message(result.report), job_id=result.job_id)

    @timed("AdmitBatch")
    def AdmitBatch(self, request: bytes, context):  # noqa: N802 - bytes in, bytes out (see add_admission_service)
        account = self.auth.account(context)
        limit = self.gate.config.limits.max_batch
        # The gateway case, a dry run of raw documents: decoded, checked and encoded by
        # the core in one call, with no Python object per document.
        fast = self.gate.check_batch_request(request, account, limit)  # one limit for the call, even across a reload
        if fast is not None:
            self._batch_size(fast.documents, limit, context)
            self.metrics.counts("AdmitBatch", fast.verdicts, fast.rules)
            return fast.response
        try:
            message = admission_pb2.AdmitBatchRequest.FromString(request)
        except DecodeError:
            bad_request(context, "request", "is not an encoded jobgate.v1.AdmitBatchRequest")
        self._batch_size(len(message.documents), limit, context)
        items = [(*document_bytes(d, context, f"documents[{i}]"), d.package) for i, d in enumerate(message.documents)]
        kinds = {k for _, k, _ in items}
        if message.dry_run and len(kinds) <= 1 and not any(p for _, _, p in items):
            reports = self.gate.check_many([d for d, _, _ in items], next(iter(kinds), None), account)
            self.metrics.reports("AdmitBatch", reports)
            return self.encoder.response(reports)
        # Item by item: quota is consumed in item order; a passed deadline stops the batch.
        results = []
        for data, kind, package in items:
            if not context.is_active():
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"the deadline passed after {len(results)} of {len(items)} documents")
            r = self.gate.admit(data, kind, account, dry_run=message.dry_run, package=package)
            self.metrics.report("AdmitBatch", r.report)
            results.append(self.encoder.item(r.report, r.job_id))
        return b"".join(results)

    def _batch_size(self, documents: int, limit: int, context: grpc.ServicerContext) -> None:
        if documents > limit:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"the batch holds {documents} documents; at most {limit} per call (limits.max_batch)")
        self.metrics.batch_size.observe(documents)

    def AdmitStream(self, request_iterator, context):  # noqa: N802
        account = self.auth.account(context)
        gauge = self.metrics.in_flight.labels("AdmitStream")
        gauge.inc()
        try:
            for request in request_iterator:
                data, kind = document_bytes(request.document, context, "document")
                r = self.gate.admit(data, kind, account, dry_run=request.dry_run, package=request.document.package)
                self.metrics.report("AdmitStream", r.report)
                yield admission_pb2.AdmitStreamResponse(request_id=request.request_id, report=report_message(r.report), job_id=r.job_id)
        finally:
            gauge.dec()

    @timed("RecipeStatus")
    def RecipeStatus(self, request, context):  # noqa: N802
        self.auth.account(context)
        status, message, catalog = recipes.status(self.gate.config, request.lock, request.core_version)
        return admission_pb2.RecipeStatusResponse(status=status, message=message, **catalog)


def add_admission_service(service: AdmissionService, server: grpc.Server) -> None:
    """Registers AdmissionService as the generated code would, except that AdmitBatch
    takes and answers encoded bytes: its dry-run path hands the request to the core
    whole (Validator.check_batch_request), and its general path encodes the response
    item by item (BatchEncoder)."""
    m = admission_pb2
    handlers = {
        "Admit": grpc.unary_unary_rpc_method_handler(service.Admit, request_deserializer=m.AdmitRequest.FromString, response_serializer=m.AdmitResponse.SerializeToString),
        "AdmitBatch": grpc.unary_unary_rpc_method_handler(service.AdmitBatch, request_deserializer=None, response_serializer=None),
        "AdmitStream": grpc.stream_stream_rpc_method_handler(service.AdmitStream, request_deserializer=m.AdmitStreamRequest.FromString, response_serializer=m.AdmitStreamResponse.SerializeToString),
        "RecipeStatus": grpc.unary_unary_rpc_method_handler(service.RecipeStatus, request_deserializer=m.RecipeStatusRequest.FromString, response_serializer=m.RecipeStatusResponse.SerializeToString),
    }
    name = m.DESCRIPTOR.services_by_name["AdmissionService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)


def record_message(record: dict) -> job_pb2.JobRecord:
    clean = {k: v for k, v in record.items() if not k.startswith("_")}
    return json_format.ParseDict(clean, job_pb2.JobRecord())


class JobService(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, store: JobStore, auth: Authenticator) -> None:
        self.store, self.auth = store, auth

    def GetJob(self, request, context):  # noqa: N802
        self.auth.account(context)
        try:
            return jobs_pb2.GetJobResponse(job=record_message(self.store.get(request.job_id)))
        except JobNotFound:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r}")

    def ListJobs(self, request, context):  # noqa: N802
        self.auth.account(context)
        size = request.page_size or 50
        if not 0 < size <= 1000:
            bad_request(context, "page_size", "must be between 1 and 1000")
        if request.page_token and not request.page_token.isdigit():
            bad_request(context, "page_token", "is not a token this server issued")
        terminal = request.terminal if request.HasField("terminal") else None
        rows = self.store.list(state=request.state, project=request.project, owner=request.owner, terminal=terminal, limit=size + 1, after=request.page_token)
        token = str(rows[size - 1]["_seq"]) if len(rows) > size else ""
        return jobs_pb2.ListJobsResponse(jobs=[record_message(r) for r in rows[:size]], next_page_token=token)

    def MarkJob(self, request, context):  # noqa: N802
        self.auth.account(context)
        try:
            record = self.store.mark(request.job_id, request.state, request.message, request.source or "agent", request.backend_ref, request.err_class)
        except JobNotFound:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r}")
        except TerminalState as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ValueError as e:
            bad_request(context, "state" if "state" in str(e) else "source" if "source" in str(e) else "err_class", str(e))
        return jobs_pb2.MarkJobResponse(job=record_message(record))

    def WatchJob(self, request, context) -> Iterator[job_pb2.Transition]:  # noqa: N802
        self.auth.account(context)
        try:
            self.store.get(request.job_id)
        except JobNotFound:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r}")
        seen = 0
        while context.is_active():
            for n, t in self.store.transitions(request.job_id, after=seen):
                seen = n
                yield job_pb2.Transition(**t)
                if t["state"] in TERMINAL:
                    return
            time.sleep(0.1)
