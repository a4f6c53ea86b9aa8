"""The servicers: each RPC of jobgate.v1.AdmissionService and jobgate.v1.JobService,
from its request (decoded by `wire`) to the gate, the store and `grants`, and their
failures to status codes.

Every call is made as its caller, within its grant (`grants`): the RPCs its roles do
not allow are PERMISSION_DENIED before any document is looked at, the jobs it may not
see are NOT_FOUND, and admission is handed its projects.

A real admission may carry an idempotency key (`Document.idempotency_key`): a retry is
answered with the first admission's response, and a key reused by another request is
ALREADY_EXISTS naming the first job (`gate.KeyReused`); both under the grant in force,
so a caller who lost the job's project gets forge.project.forbidden and no job id.
A batch is admitted by the gate (`Gate.admit_batch`: which keys conflict, what refuses
the batch before any record opens); the servicer reads its documents and answers where
it stopped with a status naming that document.

The servicers are registered, and their failures mapped to status codes, by
`handlers`. Must not judge a document (the core, through the gate) nor map messages
(`wire`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import grpc

import jobgate
from jobgate.reports import unlocated
from jobgate.server import errors, recipes
from jobgate.server.auth import Authenticator
from jobgate.server.errors import bad_request
from jobgate.server.gate import (
    Admission,
    BatchItem,
    BatchStopped,
    DeadlinePassed,
    Gate,
    KeyRepeated,
    KeyReused,
    NotLaunchable,
)
from jobgate.server.grants import ADMISSION, JOBS, NOT_VISIBLE, PROJECT, Caller
from jobgate.server.metrics import Metrics
from jobgate.server.streams import SHUTTING_DOWN, Watches
from jobgate.server.wire import (
    JOB_STATES,
    RECIPE_STATUSES,
    TRANSITION_SOURCES,
    TYPED,
    Encoded,
    ResponseEncoder,
    decode,
    document_bytes,
    either,
    fingerprint,
    idempotency_key,
    raw_dry_run,
    record_message,
    report_message,
    size_as_field,
    state_code,
)
from jobgate.store import (
    JobNotFound,
    JobStore,
    RecordFull,
    TerminalState,
    Unstorable,
)
from jobgate.store.base import TERMINAL
from jobgate.v1 import admission_pb2, job_pb2, jobs_pb2

log = logging.getLogger("jobgate.server")

# A ListJobs page, encoded, at most: gRPC's default receive limit, so that any client
# can read any page. A page always holds at least one record.
PAGE_BYTES = 4 << 20
# Records read from the store at a time while a page fills.
PAGE_CHUNK = 50
# A page token is the sequence number of the page's last record, in decimal.
PAGE_TOKEN = re.compile(r"[0-9]{1,18}")
# The report violation of a JobSpec outside its account's projects.
FORBIDDEN = jobgate._core.PROJECT_FORBIDDEN


def typed_as_typed(document: admission_pb2.Document, admission: Admission) -> Admission:
    """A typed message's admission without lines and columns: the core read the JSON it
    was written as, not text the sender wrote (SPEC §2)."""
    if document.WhichOneof("body") == "raw":
        return admission
    admission.report = unlocated(admission.report)
    return admission


def package_timeout(context: grpc.ServicerContext, package: bytes) -> float | None:
    """Only a package takes long to read: it is read within the call's deadline."""
    return context.time_remaining() if package else None


@contextmanager
def judging(context: grpc.ServicerContext, field: str) -> Iterator[None]:
    """A document's judgement failing as the caller can act on it: a package read past
    the deadline, a kind that launches nothing sent to be admitted."""
    try:
        yield
    except (TimeoutError, NotLaunchable) as e:
        judging_failed(context, field, e)


def judging_failed(context: grpc.ServicerContext, field: str, error: TimeoutError | NotLaunchable) -> NoReturn:
    if isinstance(error, TimeoutError):
        errors.abort(context, grpc.StatusCode.DEADLINE_EXCEEDED, f"{field}.package: the deadline passed while the package was read; reading it stopped", errors.DEADLINE_PASSED, {"field": f"{field}.package"})
    bad_request(context, field, str(error))


def key_reused(context: grpc.ServicerContext, error: KeyReused, field: str) -> NoReturn:
    """ALREADY_EXISTS for a key reused by another request, naming the job the key's
    first request opened."""
    named = {"job_id": error.job_id} if error.job_id else {}  # none for a job out of the caller's sight
    errors.abort(context, grpc.StatusCode.ALREADY_EXISTS, f"{field}.idempotency_key: {error}", errors.IDEMPOTENCY_KEY_REUSED, {"field": f"{field}.idempotency_key", **named})


class AdmissionService:
    """jobgate.v1.AdmissionService. A real admission of a job_record or best_rec is
    INVALID_ARGUMENT naming the document (only jobspec and spec_bundle documents
    launch); its dry run returns its report."""

    # Handed the request's bytes (`wire.sent` sends their answers): the dry-run paths of
    # Admit and AdmitBatch hand the request to the core whole, and AdmitBatch's general
    # path encodes the response item by item.
    BYTES_IN = frozenset({"Admit", "AdmitBatch"})

    def __init__(self, gate: Gate, auth: Authenticator, metrics: Metrics) -> None:
        self.gate, self.auth, self.metrics = gate, auth, metrics
        self.denials = auth.denials
        self.encoder = ResponseEncoder()

    def _caller(self, context: grpc.ServicerContext, rpc: str) -> Caller:
        """The caller, once its roles allow `rpc` (dry runs included): else the call
        ends with UNAUTHENTICATED or PERMISSION_DENIED before a document is read."""
        caller = self.auth.caller(context, rpc)
        self.denials.require(context, caller, f"{ADMISSION}/{rpc}")
        return caller

    def _admit(
        self,
        context: grpc.ServicerContext,
        rpc: str,
        field: str,
        data: bytes,
        kind: str | None,
        caller: Caller,
        *,
        dry_run: bool,
        package: bytes,
        key: str = "",
        fingerprint: bytes = b"",
        later: bool = False,
    ) -> Admission:
        try:
            admission = self.gate.admit(data, kind, caller.name, dry_run=dry_run, package=package, grant=caller.grant, key=key, fingerprint=fingerprint, timeout=package_timeout(context, package), later=later)
        except (TimeoutError, NotLaunchable) as e:
            judging_failed(context, field, e)
        except Unstorable as e:
            bad_request(context, field, f"cannot be stored: {e}")
        except KeyReused as e:
            self._key_reused(context, rpc, caller, e, field)
        if admission.replayed:
            self._replayed(rpc, caller, key, admission.job_id)
        return admission

    def _admit_document(self, context: grpc.ServicerContext, rpc: str, field: str, document: admission_pb2.Document, caller: Caller, *, dry_run: bool, later: bool = False) -> Admission:
        """Admit and AdmitStream: one document. Its key is recalled by the store in the
        transaction that would open its record (no round trip of its own): a retry gets
        the first admission's response, a key reused by another request is refused
        (`Gate.admit`). With `later`, its record may still be committing: the caller
        calls `durable` before it answers."""
        data, kind = document_bytes(document, context, field)
        key = "" if dry_run else idempotency_key(document, context, field)
        digest = fingerprint(document) if key else b""
        admission = self._admit(context, rpc, field, data, kind, caller, dry_run=dry_run, package=document.package, key=key, fingerprint=digest, later=later)
        return typed_as_typed(document, admission)

    def _replayed(self, rpc: str, caller: Caller, key: str, job_id: str) -> None:
        self.metrics.retries.labels(rpc, "replayed").inc()
        log.info("admission replayed", extra={"fields": {"rpc": rpc, "account": caller.name, "idempotency_key": key, "job_id": job_id}})

    def _key_reused(self, context: grpc.ServicerContext, rpc: str, caller: Caller, error: KeyReused, field: str) -> None:
        self.metrics.retries.labels(rpc, "refused").inc()
        log.warning("idempotency key reused", extra={"fields": {"rpc": rpc, "account": caller.name, "idempotency_key": error.key, "job_id": error.job_id}})
        key_reused(context, error, field)

    def _refused_project(self, rpc: str, caller: Caller, admission: Admission) -> None:
        """Records an admission refused for a project outside the caller's grant."""
        if any(v.rule == FORBIDDEN for v in admission.report.violations):
            self.denials.record(rpc, PROJECT, caller.name, f"project {admission.project}", project=admission.project)

    def Admit(self, request: bytes, context):  # noqa: N802 - gRPC method names; bytes in (BYTES_IN)
        caller = self._caller(context, "Admit")
        # The gateway case, a dry run of one raw document: decoded, checked and encoded
        # by the core in one call. A refusal for a project outside the grant is left to
        # the general path, which records it with its project.
        answered = self._answered(self.gate.check_admit_request(request, caller.name, caller.grant))
        if answered is not None:
            return answered
        message = decode(admission_pb2.AdmitRequest, request, context)
        document = message.document
        if message.dry_run and document.WhichOneof("body") in TYPED and not document.package and self.gate.core_answers_dry_runs():
            # A typed message: its JSON form answered as the raw document it stands for, unlocated.
            data, kind = document_bytes(document, context, "document")
            answered = self._answered(self.gate.check_admit_request(raw_dry_run(data, kind), caller.name, caller.grant, unlocated=True))
            if answered is not None:
                return answered
        result = self._admit_document(context, "Admit", "document", document, caller, dry_run=message.dry_run, later=True)
        # Built while the store commits the record; neither counted nor sent before it is in.
        response = self.encoder.admit(result.report, result.job_id) or admission_pb2.AdmitResponse(report=report_message(result.report), job_id=result.job_id)
        result.durable()
        if not result.replayed:  # a replay was counted when it was first judged
            self.metrics.report("Admit", result.report)
            self._refused_project("Admit", caller, result)
        return response

    def _answered(self, fast) -> Encoded | None:
        """Admit's response from the core's answer, counted; None when there is none, or
        when it refuses a project outside the grant: the general path records that
        refusal with its project."""
        if fast is None or any(rule == FORBIDDEN for rule, _ in fast.rules):
            return None
        self.metrics.counts("Admit", fast.verdicts, fast.rules)
        return Encoded(fast.response, next(iter(fast.verdicts)), sorted({rule for rule, _ in fast.rules}))

    def AdmitBatch(self, request: bytes, context):  # noqa: N802 - bytes in, bytes out (BYTES_IN)
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
        documents, dry_run = message.documents, message.dry_run
        self._batch_size(len(documents), limit, context)
        bodies = [document_bytes(d, context, f"documents[{i}]") for i, d in enumerate(documents)]
        keys = [""] * len(documents) if dry_run else [idempotency_key(d, context, f"documents[{i}]") for i, d in enumerate(documents)]
        items = [BatchItem(data, kind, d.package, key, fingerprint(d) if key else b"") for d, (data, kind), key in zip(documents, bodies, keys, strict=True)]
        try:
            results = self.gate.admit_batch(items, account, dry_run=dry_run, grant=caller.grant, active=context.is_active, time_left=context.time_remaining)
        except BatchStopped as stopped:
            self._batch_admitted(caller, items, stopped.admitted)
            self._batch_stopped(context, caller, stopped)
        self._batch_admitted(caller, items, results)
        results = [typed_as_typed(d, r) for d, r in zip(documents, results, strict=True)]
        # The reports together fit the response: the largest are cut, verdicts kept.
        reports = jobgate.fit_reports([r.report for r in results], self.gate.response_budget())
        return b"".join(self.encoder.item(report, r.job_id) for report, r in zip(reports, results, strict=True))

    def _batch_admitted(self, caller: Caller, items: list[BatchItem], admitted: list[Admission]) -> None:
        """Counts a batch's admissions (once per verdict and rule, not per item), logs
        its replays and records its refusals for a project outside the grant."""
        self.metrics.reports("AdmitBatch", [r.report for r in admitted if not r.replayed])
        for item, r in zip(items, admitted, strict=False):  # the items before a stop
            if r.replayed:
                self._replayed("AdmitBatch", caller, item.key, r.job_id)
            else:
                self._refused_project("AdmitBatch", caller, r)

    def _batch_stopped(self, context: grpc.ServicerContext, caller: Caller, stopped: BatchStopped) -> NoReturn:
        """The status of a batch the gate stopped at one of its items."""
        field, error = f"documents[{stopped.index}]", stopped.error
        if isinstance(error, KeyRepeated):
            bad_request(context, f"{field}.idempotency_key", f"repeats the key of documents[{error.first}] with another request; a key names one admission")
        if isinstance(error, KeyReused):
            self._key_reused(context, "AdmitBatch", caller, error, field)
        if isinstance(error, DeadlinePassed):
            errors.abort(context, grpc.StatusCode.DEADLINE_EXCEEDED, str(error), errors.DEADLINE_PASSED, {"judged": str(error.judged), "documents": str(error.documents)})
        if isinstance(error, Unstorable):
            bad_request(context, field, f"cannot be stored: {error}")
        with judging(context, field):  # a package read past the deadline, a kind that launches nothing
            raise error

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
            r = self._admit_document(context, "AdmitStream", "document", request.document, caller, dry_run=request.dry_run)
            if not r.replayed:
                self.metrics.report("AdmitStream", r.report)
                self._refused_project("AdmitStream", caller, r)
            yield admission_pb2.AdmitStreamResponse(request_id=request.request_id, report=report_message(r.report), job_id=r.job_id)

    def RecipeStatus(self, request: admission_pb2.RecipeStatusRequest, context):  # noqa: N802
        self._caller(context, "RecipeStatus")
        try:
            status, message, catalog = recipes.status(self.gate.config, request.lock, request.core_version)
        except recipes.LockUnreadable as e:
            bad_request(context, "lock", str(e))
        return admission_pb2.RecipeStatusResponse(status=status, message=message, status_code=RECIPE_STATUSES[status], **catalog)


class JobService:
    """jobgate.v1.JobService. A caller reads and watches the jobs of its projects (every
    job for a backend or an admin); only a backend or an admin marks."""

    def __init__(self, store: JobStore, auth: Authenticator, watches: Watches, max_response_bytes: int) -> None:
        self.store, self.auth, self.watches = store, auth, watches
        self.denials = auth.denials
        # Room for the page token beside the records.
        self.page_bytes = min(PAGE_BYTES, max_response_bytes) - 32

    def _caller(self, context: grpc.ServicerContext, rpc: str, **fields) -> Caller:
        """The caller, once its roles allow `rpc`; `fields` (the job) go to a denial's
        log line."""
        caller = self.auth.caller(context, rpc)
        self.denials.require(context, caller, f"{JOBS}/{rpc}", **fields)
        return caller

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
        caller = self._caller(context, "GetJob")
        self._visible(context, caller, "GetJob", request.job_id)
        try:
            record = self.store.get(request.job_id)
            return jobs_pb2.GetJobResponse(job=record_message(record), state_code=state_code(record))
        except JobNotFound:
            errors.job_not_found(context, request.job_id)

    def ListJobs(self, request: jobs_pb2.ListJobsRequest, context):  # noqa: N802
        """A page holds at most page_size records and at most PAGE_BYTES encoded, all of
        projects the caller sees, whatever the filters ask."""
        caller = self._caller(context, "ListJobs")
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
        state = either(context, request, "state", "state_code", JOB_STATES)
        jobs: list[job_pb2.JobRecord] = []
        used, after = 0, request.page_token
        while True:
            want = min(size - len(jobs), PAGE_CHUNK)
            rows = self.store.list(state=state, project=request.project, owner=request.owner, terminal=terminal, limit=want + 1, after=after, projects=visible)
            for row in rows[:want]:
                job = record_message(row)
                cost = size_as_field(job.ByteSize())
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
        caller = self._caller(context, "MarkJob", job_id=request.job_id)
        if caller.visible is not None:  # no role that marks is scoped today; none may mark past what it sees
            self._visible(context, caller, "MarkJob", request.job_id)
        state = either(context, request, "state", "state_code", JOB_STATES)
        source = either(context, request, "source", "source_code", TRANSITION_SOURCES, default="agent")
        try:
            record = self.store.mark(request.job_id, state, request.message, source, request.backend_ref, request.err_class)
        except JobNotFound:
            errors.job_not_found(context, request.job_id)
        except TerminalState as e:
            errors.precondition_failed(context, str(e), errors.JOB_FINISHED, "STATE", f"jobs/{request.job_id}")
        except RecordFull as e:
            errors.quota_exceeded(context, str(e), errors.RECORD_FULL, "limits.max_transitions", {"job_id": request.job_id})
        except Unstorable as e:
            bad_request(context, e.field, e.reason)
        self.watches.notify(request.job_id, len(record["transitions"]))
        return jobs_pb2.MarkJobResponse(job=record_message(record), state_code=state_code(record))

    def WatchJob(self, request: jobs_pb2.WatchJobRequest, context) -> Iterator[jobs_pb2.WatchJobResponse]:  # noqa: N802
        """The history, then each new transition as it is written, until a terminal one.
        Between transitions the stream sleeps on `Watches`; it costs no query."""
        caller = self._caller(context, "WatchJob")
        watch = self.watches.watch(request.job_id, context)  # before the history: no mark is missed between the two
        try:
            project = self._visible(context, caller, "WatchJob", request.job_id)
            seen = 0
            while True:
                for n, t in self.store.transitions(request.job_id, after=seen):
                    seen = n
                    yield jobs_pb2.WatchJobResponse(**t, state_code=JOB_STATES[t["state"]], source_code=TRANSITION_SOURCES[t["source"]])
                    if t["state"] in TERMINAL:
                        return
                if not watch.wait_beyond(seen):
                    if self.watches.closed:
                        errors.abort(context, grpc.StatusCode.UNAVAILABLE, f"{SHUTTING_DOWN}; watching again resumes from the history", errors.SHUTTING_DOWN)
                    return  # the client went away
                # Only under the grant in force now: a token revoked, or a project taken
                # away, since the watch began ends it before anything more is sent.
                caller = self._caller(context, "WatchJob")
                if not caller.sees(project):
                    self.denials.hidden(context, caller, "WatchJob", request.job_id, project)
        finally:
            watch.end()
