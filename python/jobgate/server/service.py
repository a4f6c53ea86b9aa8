"""The servicers: map messages to the gate and the store, and failures to status codes.

Every request arrives as bytes and is decoded here, so that a request that is not
one is INVALID_ARGUMENT with a google.rpc.BadRequest naming it, like every other
malformed request. A store that is down is UNAVAILABLE, a full disk
RESOURCE_EXHAUSTED, and anything unforeseen INTERNAL with a reference to the log:
no caller ever sees an address, SQL or a Python traceback.

Every call is made as its caller, within its grant (`grants`): the RPCs its roles do
not allow are PERMISSION_DENIED before any document is looked at, the jobs it may not
see are NOT_FOUND, and admission is handed its projects.

A real admission may carry an idempotency key (`Document.idempotency_key`): it is read
and the request fingerprinted here (BLAKE3 of kind, document and package), a retry is
answered with the first admission's response, and a key reused by another request is
ALREADY_EXISTS naming the first job (`gate.KeyReused`).
"""

from __future__ import annotations

import errno
import logging
import math
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import blake3
import grpc
import orjson
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

import jobgate
from jobgate.config import Config
from jobgate.server import errors, recipes
from jobgate.server.auth import Authenticator
from jobgate.server.errors import bad_request
from jobgate.server.gate import KIND_NAMES, Admission, Gate, KeyReused, NotLaunchable
from jobgate.server.grants import NOT_VISIBLE, PROJECT, Caller
from jobgate.server.metrics import Metrics
from jobgate.server.streams import SHUTTING_DOWN, Watches
from jobgate.store import (
    JobNotFound,
    JobStore,
    RecordFull,
    Remembered,
    StoreFull,
    StoreUnavailable,
    TerminalState,
    Unstorable,
)
from jobgate.store.base import MAX_IDEMPOTENCY_KEY_BYTES, TERMINAL
from jobgate.v1 import admission_pb2, job_pb2, jobs_pb2, report_pb2

log = logging.getLogger("jobgate.server")

# A ListJobs page, encoded, at most: gRPC's default receive limit, so that any client
# can read any page. A page always holds at least one record.
PAGE_BYTES = 4 << 20
# Records read from the store at a time while a page fills.
PAGE_CHUNK = 50
# A page token is the sequence number of the page's last record, in decimal.
PAGE_TOKEN = re.compile(r"[0-9]{1,18}")
# The report violation of a JobSpec outside its account's projects.
FORBIDDEN = "forge.project.forbidden"


@contextmanager
def failures_mapped(context: grpc.ServicerContext, rpc: str) -> Iterator[None]:
    """The store's and the machine's failures as status codes a client can act on."""
    try:
        yield
    except StoreUnavailable as e:
        errors.abort(context, grpc.StatusCode.UNAVAILABLE, str(e), errors.STORE_UNAVAILABLE)
    except StoreFull as e:
        errors.abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(e), errors.STORE_FULL)
    except Exception as e:
        if isinstance(e, grpc.RpcError) or context.code() is not None:
            raise  # the call was aborted or cancelled: its status is already set
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            log.error("disk full", extra={"fields": {"rpc": rpc, "error": str(e)}})
            errors.abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "the server's disk is full (temporary files); retry later", errors.DISK_FULL)
        ref = secrets.token_hex(4)
        log.exception("internal error", extra={"fields": {"rpc": rpc, "ref": ref}})
        errors.abort(context, grpc.StatusCode.INTERNAL, f"internal error (ref {ref}); the server log has the details", errors.INTERNAL, {"ref": ref})


def decode(message_type: type[Message], data: bytes, context: grpc.ServicerContext, field: str = "request", what: str = "") -> Message:
    try:
        return message_type.FromString(data)
    except DecodeError:
        bad_request(context, field, f"{what}is not an encoded {message_type.DESCRIPTOR.full_name}")
        raise AssertionError("unreachable") from None


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


def _non_finite(message: Message, path: str) -> str | None:
    """The path of a number with no JSON form (NaN, infinity) in a google.protobuf
    Value of `message`, the one thing a typed message can hold that JSON cannot."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Value":
        kind = message.WhichOneof("kind")
        if kind == "number_value":
            return None if math.isfinite(message.number_value) else path
        if kind in ("struct_value", "list_value"):
            return _non_finite(getattr(message, kind), path)
        return None
    if name == "google.protobuf.Struct":
        return next((p for key, value in message.fields.items() if (p := _non_finite(value, f"{path}.{key}"))), None)
    if name == "google.protobuf.ListValue":
        return next((p for i, value in enumerate(message.values) if (p := _non_finite(value, f"{path}[{i}]"))), None)
    for fd, value in message.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = [(f"{path}.{fd.name}[{key!r}]", v) for key, v in value.items() if isinstance(v, Message)]
        elif fd.is_repeated:
            items = [(f"{path}.{fd.name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(f"{path}.{fd.name}", value)]
        found = next((p for where, v in items if (p := _non_finite(v, where))), None)
        if found:
            return found
    return None


def _typed_json(typed: Message, context: grpc.ServicerContext, field: str) -> bytes:
    try:
        return orjson.dumps(json_format.MessageToDict(typed))
    except json_format.Error:
        where = _non_finite(typed, field) or field
        bad_request(context, where, "is NaN or infinite, which JSON cannot hold; send a finite number or raw document bytes")
        raise AssertionError("unreachable") from None


def document_bytes(document: admission_pb2.Document, context: grpc.ServicerContext, field: str) -> tuple[bytes, str | None]:
    """The bytes the core checks: raw bytes as sent, or the typed message's JSON form."""
    kind = KIND_NAMES.get(document.kind)
    which = document.WhichOneof("body")
    if which == "raw":
        return document.raw, kind
    if which == "jobspec":
        return _typed_json(document.jobspec, context, f"{field}.jobspec"), kind or "jobspec"
    if which == "spec_bundle":
        return _typed_json(document.spec_bundle, context, f"{field}.spec_bundle"), kind or "spec_bundle"
    bad_request(context, f"{field}.body", "a document needs raw bytes, a jobspec or a spec_bundle")
    raise AssertionError("unreachable")


def idempotency_key(document: admission_pb2.Document, context: grpc.ServicerContext, field: str) -> str:
    """The document's idempotency key ("" for none), or INVALID_ARGUMENT naming it when
    it is longer than a key may be."""
    key = document.idempotency_key
    size = len(key.encode())
    if size > MAX_IDEMPOTENCY_KEY_BYTES:
        bad_request(context, f"{field}.idempotency_key", f"is {size} bytes; an idempotency key is at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes")
    return key


def fingerprint(document: admission_pb2.Document) -> bytes:
    """BLAKE3 of what makes a retry the same request: the kind it names, the document
    (raw bytes as sent; a typed message in its deterministic encoding, whose map order
    is fixed) and the package. Each part is framed by its length, so no two requests
    share a fingerprint by shifting bytes from one part to the next."""
    form = document.WhichOneof("body") or ""
    if form == "raw":
        body = document.raw
    elif form:
        body = getattr(document, form).SerializeToString(deterministic=True)
    else:
        body = b""
    hasher = blake3.blake3()
    for part in (b"jobgate.v1.Document", form.encode(), str(document.kind).encode(), body, document.package):
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()


def key_reused(context: grpc.ServicerContext, error: KeyReused, field: str) -> NoReturn:
    """ALREADY_EXISTS for a key reused by another request, naming the job the key's
    first request opened."""
    errors.abort(context, grpc.StatusCode.ALREADY_EXISTS, f"{field}.idempotency_key: {error}", errors.IDEMPOTENCY_KEY_REUSED, {"field": f"{field}.idempotency_key", "job_id": error.job_id})


class AdmissionService:
    """jobgate.v1.AdmissionService. A real admission of a job_record or best_rec is
    INVALID_ARGUMENT naming the document (only jobspec and spec_bundle documents
    launch); its dry run returns its report."""

    def __init__(self, config: Config, gate: Gate, auth: Authenticator, metrics: Metrics | None = None) -> None:
        self.config, self.gate, self.auth = config, gate, auth
        self.denials = auth.denials
        self.metrics = metrics or Metrics()
        self.encoder = BatchEncoder()

    def _caller(self, context: grpc.ServicerContext, rpc: str) -> Caller:
        """The caller, once its roles allow `rpc` (dry runs included): else the call
        ends with UNAUTHENTICATED or PERMISSION_DENIED before a document is read."""
        caller = self.auth.caller(context, rpc)
        self.denials.require(context, caller, rpc)
        return caller

    def _admit(
        self, context: grpc.ServicerContext, rpc: str, field: str, data: bytes, kind: str | None, caller: Caller, *, dry_run: bool, package: bytes, facts=None, key: str = "", fingerprint: bytes = b""
    ) -> Admission:
        try:
            admission = self.gate.admit(data, kind, caller.name, dry_run=dry_run, package=package, facts=facts, grant=caller.grant, key=key, fingerprint=fingerprint)
        except NotLaunchable as e:
            bad_request(context, field, str(e))
        except Unstorable as e:
            bad_request(context, field, f"cannot be stored: {e}")
        except KeyReused as e:
            self._key_reused(context, rpc, caller, e, field)
        if admission.replayed:
            self._replayed(rpc, caller, key, admission.job_id)
        return admission

    def _admit_document(self, context: grpc.ServicerContext, rpc: str, field: str, document: admission_pb2.Document, caller: Caller, *, dry_run: bool) -> tuple[Admission, bytes, str | None]:
        """Admit and AdmitStream: one document, its key recalled first (a retry is
        answered without checking the document again). Returns the admission, and the
        bytes and kind checked."""
        data, kind = document_bytes(document, context, field)
        key = "" if dry_run else idempotency_key(document, context, field)
        if not key:
            return self._admit(context, rpc, field, data, kind, caller, dry_run=dry_run, package=document.package), data, kind
        digest = fingerprint(document)
        earlier = self.gate.recall(caller.name, [key]).get(key)
        if earlier is not None:
            return self._replay(context, rpc, field, caller, earlier, key, digest), data, kind
        return self._admit(context, rpc, field, data, kind, caller, dry_run=False, package=document.package, key=key, fingerprint=digest), data, kind

    def _replay(self, context: grpc.ServicerContext, rpc: str, field: str, caller: Caller, earlier: Remembered, key: str, digest: bytes) -> Admission:
        try:
            admission = self.gate.replay(earlier, key, digest)
        except KeyReused as e:
            self._key_reused(context, rpc, caller, e, field)
        self._replayed(rpc, caller, key, admission.job_id)
        return admission

    def _replayed(self, rpc: str, caller: Caller, key: str, job_id: str) -> None:
        self.metrics.retries.labels(rpc, "replayed").inc()
        log.info("admission replayed", extra={"fields": {"rpc": rpc, "account": caller.name, "idempotency_key": key, "job_id": job_id}})

    def _key_reused(self, context: grpc.ServicerContext, rpc: str, caller: Caller, error: KeyReused, field: str) -> None:
        self.metrics.retries.labels(rpc, "refused").inc()
        log.warning("idempotency key reused", extra={"fields": {"rpc": rpc, "account": caller.name, "idempotency_key": error.key, "job_id": error.job_id}})
        key_reused(context, error, field)

    def _refused_projects(self, rpc: str, caller: Caller, judged) -> None:
        """Records each document of `judged` ((report, data, kind) triples) refused for a
        project outside the caller's grant."""
        for report, data, kind in judged:
            if any(v.rule == FORBIDDEN for v in report.violations):
                project = self.gate.project_of(data, kind)
                self.denials.record(rpc, PROJECT, caller.name, f"project {project}", project=project)

    def Admit(self, request: admission_pb2.AdmitRequest, context):  # noqa: N802 - gRPC method names
        caller = self._caller(context, "Admit")
        result, data, kind = self._admit_document(context, "Admit", "document", request.document, caller, dry_run=request.dry_run)
        if not result.replayed:  # a replay was counted when it was first judged
            self.metrics.report("Admit", result.report)
            self._refused_projects("Admit", caller, [(result.report, data, kind)])
        return admission_pb2.AdmitResponse(report=report_message(result.report), job_id=result.job_id)

    def AdmitBatch(self, request: bytes, context):  # noqa: N802 - bytes in, bytes out (see add_admission_service)
        caller = self._caller(context, "AdmitBatch")
        account = caller.name
        limit = self.gate.config.limits.max_batch
        # The gateway case, a dry run of raw documents: decoded, checked and encoded by
        # the core in one call, with no Python object per document.
        fast = self.gate.check_batch_request(request, account, limit, caller.grant)  # one limit for the call, even across a reload
        if fast is not None:
            self._batch_size(fast.documents, limit, context)
            self.metrics.counts("AdmitBatch", fast.verdicts, fast.rules)
            forbidden = sum(n for (rule, _), n in fast.rules.items() if rule == FORBIDDEN)
            if forbidden:  # the core answered whole: the count, not each project
                self.denials.record("AdmitBatch", PROJECT, account, "project", documents=forbidden, count=forbidden)
            return fast.response
        message = decode(admission_pb2.AdmitBatchRequest, request, context)
        self._batch_size(len(message.documents), limit, context)
        items = [(*document_bytes(d, context, f"documents[{i}]"), d.package) for i, d in enumerate(message.documents)]
        kinds = {k for _, k, _ in items}
        if message.dry_run and len(kinds) <= 1 and not any(p for _, _, p in items):
            reports = self.gate.check_many([d for d, _, _ in items], next(iter(kinds), None), account, caller.grant)
            self.metrics.reports("AdmitBatch", reports)
            self._refused_projects("AdmitBatch", caller, ((r, d, k) for r, (d, k, _) in zip(reports, items, strict=True)))
            return self.encoder.response(reports)
        # A batch that cannot be admitted whole is refused before any item opens a record:
        # a key too long, given to two different items, or used before by another request.
        keys = [""] * len(items) if message.dry_run else [idempotency_key(d, context, f"documents[{i}]") for i, d in enumerate(message.documents)]
        prints = [fingerprint(d) if key else b"" for d, key in zip(message.documents, keys, strict=True)]
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            j = first.setdefault(key, i) if key else i
            if prints[j] != prints[i]:
                bad_request(context, f"documents[{i}].idempotency_key", f"repeats the key of documents[{j}] with another request; a key names one admission")
        recalled = self.gate.recall(account, list(first))
        for i, key in enumerate(keys):
            if key in recalled and recalled[key].fingerprint != prints[i]:
                self._key_reused(context, "AdmitBatch", caller, KeyReused(key, recalled[key].job_id), f"documents[{i}]")
        facts = [None] * len(items)
        if not message.dry_run:
            for i, (data, kind, _) in enumerate(items):
                if keys[i] in recalled:
                    continue  # replayed: it was launchable when first admitted
                try:
                    facts[i] = self.gate.launch_facts(data, kind, account)
                except NotLaunchable as e:
                    bad_request(context, f"documents[{i}]", str(e))
        # Item by item: quota is consumed in item order; a passed deadline stops the batch.
        results = []
        for i, (data, kind, package) in enumerate(items):
            if not context.is_active():
                errors.abort(context, grpc.StatusCode.DEADLINE_EXCEEDED, f"the deadline passed after {len(results)} of {len(items)} documents", errors.DEADLINE_PASSED, {"judged": str(len(results)), "documents": str(len(items))})
            field, key = f"documents[{i}]", keys[i]
            if key in recalled:
                results.append(self._replay(context, "AdmitBatch", field, caller, recalled[key], key, prints[i]))
                continue
            r = self._admit(context, "AdmitBatch", field, data, kind, caller, dry_run=message.dry_run, package=package, facts=facts[i], key=key, fingerprint=prints[i])
            if not r.replayed:
                self.metrics.report("AdmitBatch", r.report)
                self._refused_projects("AdmitBatch", caller, [(r.report, data, kind)])
            results.append(r)
        # The reports together fit the response: the largest are cut, verdicts kept.
        reports = jobgate.fit_reports([r.report for r in results], self.gate.response_budget())
        return b"".join(self.encoder.item(report, r.job_id) for report, r in zip(reports, results, strict=True))

    def _batch_size(self, documents: int, limit: int, context: grpc.ServicerContext) -> None:
        if documents > limit:
            errors.quota_exceeded(context, f"the batch holds {documents} documents; at most {limit} per call (limits.max_batch)", errors.BATCH_TOO_LARGE, "limits.max_batch", {"documents": str(documents), "max": str(limit)})
        self.metrics.batch_size.observe(documents)

    def AdmitStream(self, request_iterator: Iterator[admission_pb2.AdmitStreamRequest], context):  # noqa: N802
        self._caller(context, "AdmitStream")  # refused before the first message is read
        for request in request_iterator:
            # Each document under the grant in force when it arrives: a reload applies
            # to the next one, and a revoked token ends the stream.
            caller = self._caller(context, "AdmitStream")
            r, data, kind = self._admit_document(context, "AdmitStream", "document", request.document, caller, dry_run=request.dry_run)
            if not r.replayed:
                self.metrics.report("AdmitStream", r.report)
                self._refused_projects("AdmitStream", caller, [(r.report, data, kind)])
            yield admission_pb2.AdmitStreamResponse(request_id=request.request_id, report=report_message(r.report), job_id=r.job_id)

    def RecipeStatus(self, request: admission_pb2.RecipeStatusRequest, context):  # noqa: N802
        self._caller(context, "RecipeStatus")
        try:
            status, message, catalog = recipes.status(self.gate.config, request.lock, request.core_version)
        except recipes.LockUnreadable as e:
            bad_request(context, "lock", str(e))
        return admission_pb2.RecipeStatusResponse(status=status, message=message, **catalog)


def record_message(record: dict) -> job_pb2.JobRecord:
    clean = {k: v for k, v in record.items() if not k.startswith("_")}
    return json_format.ParseDict(clean, job_pb2.JobRecord())


def _size_as_field(payload: int) -> int:
    """Bytes a length-delimited field of `payload` bytes takes (tag, length, payload)."""
    return 1 + len(_varint(payload)) + payload


class JobService:
    """jobgate.v1.JobService. A caller reads and watches the jobs of its projects (every
    job for a backend or an admin); only a backend or an admin marks."""

    def __init__(self, store: JobStore, auth: Authenticator, watches: Watches, max_response_bytes: int) -> None:
        self.store, self.auth, self.watches = store, auth, watches
        self.denials = auth.denials
        # Room for the page token beside the records.
        self.page_bytes = min(PAGE_BYTES, max_response_bytes) - 32

    def _visible(self, context: grpc.ServicerContext, caller: Caller, rpc: str, job_id: str) -> str:
        """The job's project, when the caller may see the job; else NOT_FOUND, as for
        an id that does not exist."""
        try:
            project = self.store.project(job_id)
        except JobNotFound:
            errors.job_not_found(context, job_id)
        if not caller.sees(project):
            self.denials.hidden(context, caller, rpc, job_id, project)
        return project

    def GetJob(self, request: jobs_pb2.GetJobRequest, context):  # noqa: N802
        caller = self.auth.caller(context, "GetJob")
        self._visible(context, caller, "GetJob", request.job_id)
        try:
            return jobs_pb2.GetJobResponse(job=record_message(self.store.get(request.job_id)))
        except JobNotFound:
            errors.job_not_found(context, request.job_id)

    def ListJobs(self, request: jobs_pb2.ListJobsRequest, context):  # noqa: N802
        """A page holds at most page_size records and at most PAGE_BYTES encoded, all of
        projects the caller sees, whatever the filters ask."""
        caller = self.auth.caller(context, "ListJobs")
        size = request.page_size or 50
        if not 0 < size <= 1000:
            bad_request(context, "page_size", "must be between 1 and 1000")
        if request.page_token and not PAGE_TOKEN.fullmatch(request.page_token):
            bad_request(context, "page_token", "is not a token this server issued; pass next_page_token as it was received")
        visible = caller.visible
        if request.project and not caller.sees(request.project):
            # Answered as a project without jobs; the attempt is recorded.
            self.denials.record("ListJobs", NOT_VISIBLE, caller.name, f"project {request.project}", project=request.project)
        terminal = request.terminal if request.HasField("terminal") else None
        jobs: list[job_pb2.JobRecord] = []
        used, after = 0, request.page_token
        while True:
            want = min(size - len(jobs), PAGE_CHUNK)
            rows = self.store.list(state=request.state, project=request.project, owner=request.owner, terminal=terminal, limit=want + 1, after=after, projects=visible)
            for row in rows[:want]:
                job = record_message(row)
                cost = _size_as_field(job.ByteSize())
                if jobs and used + cost > self.page_bytes:
                    return jobs_pb2.ListJobsResponse(jobs=jobs, next_page_token=after)
                jobs.append(job)
                used += cost
                after = str(row["_seq"])
            if len(rows) <= want:
                return jobs_pb2.ListJobsResponse(jobs=jobs, next_page_token="")
            if len(jobs) == size:
                return jobs_pb2.ListJobsResponse(jobs=jobs, next_page_token=after)

    def MarkJob(self, request: jobs_pb2.MarkJobRequest, context):  # noqa: N802
        caller = self.auth.caller(context, "MarkJob")
        self.denials.require(context, caller, "MarkJob", job_id=request.job_id)
        if caller.visible is not None:  # no role that marks is scoped today; none may mark past what it sees
            self._visible(context, caller, "MarkJob", request.job_id)
        try:
            record = self.store.mark(request.job_id, request.state, request.message, request.source or "agent", request.backend_ref, request.err_class)
        except JobNotFound:
            errors.job_not_found(context, request.job_id)
        except TerminalState as e:
            errors.precondition_failed(context, str(e), errors.JOB_FINISHED, "STATE", f"jobs/{request.job_id}")
        except RecordFull as e:
            errors.quota_exceeded(context, str(e), errors.RECORD_FULL, "limits.max_transitions", {"job_id": request.job_id})
        except Unstorable as e:
            bad_request(context, e.field, e.reason)
        self.watches.notify(request.job_id, len(record["transitions"]))
        return jobs_pb2.MarkJobResponse(job=record_message(record))

    def WatchJob(self, request: jobs_pb2.WatchJobRequest, context) -> Iterator[job_pb2.Transition]:  # noqa: N802
        """The history, then each new transition as it is written, until a terminal one.
        Between transitions the stream sleeps on `Watches`; it costs no query."""
        caller = self.auth.caller(context, "WatchJob")
        watch = self.watches.watch(request.job_id, context)  # before the history: no mark is missed between the two
        try:
            project = self._visible(context, caller, "WatchJob", request.job_id)
            seen = 0
            while True:
                for n, t in self.store.transitions(request.job_id, after=seen):
                    seen = n
                    yield job_pb2.Transition(**t)
                    if t["state"] in TERMINAL:
                        return
                if not watch.wait_beyond(seen):
                    if self.watches.closed:
                        errors.abort(context, grpc.StatusCode.UNAVAILABLE, f"{SHUTTING_DOWN}; watching again resumes from the history", errors.SHUTTING_DOWN)
                    return  # the client went away
                # Only under the grant in force now: a token revoked, or a project taken
                # away, since the watch began ends it before anything more is sent.
                caller = self.auth.caller(context, "WatchJob")
                if not caller.sees(project):
                    self.denials.hidden(context, caller, "WatchJob", request.job_id, project)
        finally:
            watch.end()


def _handler(method, rpc: Callable, request_type: type[Message] | None, response_type: type[Message] | None) -> grpc.RpcMethodHandler:
    """A handler that takes the request as bytes, decodes it itself (a request that is
    not one is a BadRequest, never grpc's own INTERNAL) and maps failures."""
    name = method.name
    serialize = response_type.SerializeToString if response_type is not None else None

    def parsed(data, context):
        return data if request_type is None else decode(request_type, data, context)

    def parsed_stream(datas, context):
        for i, data in enumerate(datas):
            yield decode(request_type, data, context, what=f"stream message {i + 1} ") if request_type is not None else data

    if not method.client_streaming and not method.server_streaming:

        def unary(data, context):
            with failures_mapped(context, name):
                return rpc(parsed(data, context), context)

        return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=None, response_serializer=serialize)

    if not method.client_streaming:

        def unary_stream(data, context):
            with failures_mapped(context, name):
                yield from rpc(parsed(data, context), context)

        return grpc.unary_stream_rpc_method_handler(unary_stream, request_deserializer=None, response_serializer=serialize)

    if method.server_streaming:

        def stream_stream(datas, context):
            with failures_mapped(context, name):
                yield from rpc(parsed_stream(datas, context), context)

        return grpc.stream_stream_rpc_method_handler(stream_stream, request_deserializer=None, response_serializer=serialize)

    def stream_unary(datas, context):
        with failures_mapped(context, name):
            return rpc(parsed_stream(datas, context), context)

    return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer=None, response_serializer=serialize)


def add_service(servicer, service: ServiceDescriptor, server: grpc.Server, *, raw: tuple[str, ...] = ()) -> None:
    """Registers every RPC of `service` from its descriptor: a servicer without one of
    them fails here, at start, rather than leaving it unregistered. The RPCs named in
    `raw` take and answer encoded bytes (AdmitBatch: its dry-run path hands the
    request to the core whole, and its general path encodes the response item by item)."""
    handlers = {}
    for method in service.methods:
        rpc = getattr(servicer, method.name)
        bytes_only = method.name in raw
        request_type = None if bytes_only else message_factory.GetMessageClass(method.input_type)
        response_type = None if bytes_only else message_factory.GetMessageClass(method.output_type)
        handlers[method.name] = _handler(method, rpc, request_type, response_type)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


ADMISSION_SERVICE = admission_pb2.DESCRIPTOR.services_by_name["AdmissionService"]
JOB_SERVICE = jobs_pb2.DESCRIPTOR.services_by_name["JobService"]


def add_admission_service(service: AdmissionService, server: grpc.Server) -> None:
    add_service(service, ADMISSION_SERVICE, server, raw=("AdmitBatch",))


def add_job_service(service: JobService, server: grpc.Server) -> None:
    add_service(service, JOB_SERVICE, server)
