"""Every error the service returns, with details per Google's AIP-193: a
`google.rpc.ErrorInfo` on every one (a stable `reason` a client can branch on, the
`jobgate` domain, and metadata), plus `BadRequest`, `QuotaFailure` or
`PreconditionFailure` where they fit. The message stays the one a person reads.

Must not decide anything: the servicers say which error; this only shapes it.
"""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "jobgate"

# ErrorInfo.reason of each error, by what went wrong (UPPER_SNAKE_CASE, AIP-193).
CREDENTIALS_REFUSED = "CREDENTIALS_REFUSED"
ROLE_MISSING = "ROLE_MISSING"
JOB_NOT_FOUND = "JOB_NOT_FOUND"
INVALID_FIELD = "INVALID_FIELD"
IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
TOO_MANY_STREAMS = "TOO_MANY_STREAMS"
JOB_FINISHED = "JOB_FINISHED"
RECORD_FULL = "RECORD_FULL"
STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
STORE_FULL = "STORE_FULL"
DISK_FULL = "DISK_FULL"
DEADLINE_PASSED = "DEADLINE_PASSED"
SHUTTING_DOWN = "SHUTTING_DOWN"
INTERNAL = "INTERNAL"

REASONS = (
    CREDENTIALS_REFUSED,
    ROLE_MISSING,
    JOB_NOT_FOUND,
    INVALID_FIELD,
    IDEMPOTENCY_KEY_REUSED,
    BATCH_TOO_LARGE,
    TOO_MANY_STREAMS,
    JOB_FINISHED,
    RECORD_FULL,
    STORE_UNAVAILABLE,
    STORE_FULL,
    DISK_FULL,
    DEADLINE_PASSED,
    SHUTTING_DOWN,
    INTERNAL,
)


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str] | None = None, *details: Message) -> NoReturn:
    """Ends the call with `code` and `message`, an ErrorInfo for `reason` with
    `metadata`, and any further `details` (error_details_pb2 messages)."""
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata or {}))
    for detail in details:
        status.details.add().Pack(detail)
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("unreachable")  # abort_with_status raises


def bad_request(context: grpc.ServicerContext, field: str, description: str, *others: str) -> NoReturn:
    """INVALID_ARGUMENT naming the request field, with a BadRequest field violation; a
    fault of several fields together (`others`) names each, one violation apiece."""
    named = (field, *others)
    violations = [error_details_pb2.BadRequest.FieldViolation(field=f, description=description) for f in named]
    abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{', '.join(named)}: {description}", INVALID_FIELD, {"field": ", ".join(named)}, error_details_pb2.BadRequest(field_violations=violations))


def quota_exceeded(context: grpc.ServicerContext, message: str, reason: str, subject: str, metadata: dict[str, str] | None = None) -> NoReturn:
    """RESOURCE_EXHAUSTED with a QuotaFailure naming the limit (`subject`: the
    configuration key that sets it)."""
    failure = error_details_pb2.QuotaFailure(violations=[error_details_pb2.QuotaFailure.Violation(subject=subject, description=message)])
    abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, message, reason, {"limit": subject, **(metadata or {})}, failure)


def precondition_failed(context: grpc.ServicerContext, message: str, reason: str, kind: str, subject: str) -> NoReturn:
    """FAILED_PRECONDITION with a PreconditionFailure (`kind` names the kind of
    precondition, `subject` what it is about)."""
    failure = error_details_pb2.PreconditionFailure(violations=[error_details_pb2.PreconditionFailure.Violation(type=kind, subject=subject, description=message)])
    abort(context, grpc.StatusCode.FAILED_PRECONDITION, message, reason, {"subject": subject}, failure)


def job_not_found(context: grpc.ServicerContext, job_id: str) -> NoReturn:
    """NOT_FOUND for a job: the same answer for an unknown id and for one outside the
    caller's projects, so that no one learns which ids exist outside their grant."""
    abort(context, grpc.StatusCode.NOT_FOUND, f"no job {job_id!r}", JOB_NOT_FOUND, {"job_id": job_id})
