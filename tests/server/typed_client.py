"""A typed client of the service, as a user writes one against the generated stubs:
`scripts/dev lint` runs mypy (strict) over this module and python/jobgate/v1, so a stub
whose calls are `Any` (no `_grpc.pyi`), or an enum or field that is not what a client
is told, fails the lint; tests/server/test_typed_clients.py runs it against a server.

Imports only grpc and jobgate.v1: what a client of the service has."""

from __future__ import annotations

from typing import assert_type

import grpc

from jobgate.v1 import (
    admission_pb2,
    admission_pb2_grpc,
    job_pb2,
    jobs_pb2,
    jobs_pb2_grpc,
    report_pb2,
)

# Call metadata as grpc's stubs type it.
Metadata = tuple[tuple[str, str | bytes], ...]


def dry_run(channel: grpc.Channel, document: admission_pb2.Document, metadata: Metadata) -> report_pb2.Report:
    """The report on `document`, opening nothing."""
    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
    response = stub.Admit(admission_pb2.AdmitRequest(document=document, dry_run=True), metadata=metadata)
    assert_type(response, admission_pb2.AdmitResponse)
    return response.report


def refused(report: report_pb2.Report) -> bool:
    """Whether the document was refused, read from the enum."""
    return report.verdict_code == report_pb2.VERDICT_FAIL


def errors(report: report_pb2.Report) -> list[str]:
    """The rule ids of the violations that block admission."""
    return [v.rule for v in report.violations if v.severity_code == report_pb2.SEVERITY_ERROR]


def admit(channel: grpc.Channel, document: admission_pb2.Document, metadata: Metadata) -> str:
    """The job id of an admitted document ("" when refused)."""
    return admission_pb2_grpc.AdmissionServiceStub(channel).Admit(admission_pb2.AdmitRequest(document=document), metadata=metadata).job_id


def mark(channel: grpc.Channel, job_id: str, state: job_pb2.JobState.ValueType, source: job_pb2.TransitionSource.ValueType, metadata: Metadata) -> job_pb2.JobState.ValueType:
    """Appends a transition given by enums; the job's state after it."""
    stub = jobs_pb2_grpc.JobServiceStub(channel)
    response = stub.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state_code=state, source_code=source), metadata=metadata)
    assert_type(response, jobs_pb2.MarkJobResponse)
    return response.state_code


def running(channel: grpc.Channel, metadata: Metadata) -> list[str]:
    """The ids of the running jobs, filtered by the enum."""
    stub = jobs_pb2_grpc.JobServiceStub(channel)
    page = stub.ListJobs(jobs_pb2.ListJobsRequest(state_code=job_pb2.JOB_STATE_RUNNING), metadata=metadata)
    return [job.id for job in page.jobs]


def history(channel: grpc.Channel, job_id: str, metadata: Metadata) -> list[tuple[job_pb2.JobState.ValueType, job_pb2.TransitionSource.ValueType]]:
    """A finished job's transitions, as enums."""
    stub = jobs_pb2_grpc.JobServiceStub(channel)
    return [(t.state_code, t.source_code) for t in stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=metadata, timeout=20)]
