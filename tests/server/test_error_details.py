"""Error details per AIP-193 on a real server: every error carries a
google.rpc.ErrorInfo with a stable reason in the jobgate domain; limits carry a
QuotaFailure naming the configuration key, refused transitions a PreconditionFailure,
malformed requests a BadRequest."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

import jobgate.server
from jobgate.server import errors
from jobgate.v1 import admission_pb2, jobs_pb2
from tests.helpers import error_detail, sample
from tests.server.helpers import Running, bearer, config_for

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()


def failure(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return e.value


def info(error: grpc.RpcError) -> tuple[str, str, str, dict[str, str]]:
    detail = error_detail(error, error_details_pb2.ErrorInfo)
    return error.code().name, detail.reason, detail.domain, dict(detail.metadata)


def document(raw: bytes = JOBSPEC) -> admission_pb2.Document:
    return admission_pb2.Document(raw=raw)


def test_each_error_carries_its_reason_and_details(tmp_path):
    config = config_for(tmp_path, max_streams_per_account=1)
    config = config.model_copy(update={"limits": config.limits.model_copy(update={"max_batch": 2, "max_transitions": 3})})
    r = Running(config)
    try:
        e = failure(r.admission.Admit, admission_pb2.AdmitRequest(document=document(), dry_run=True), metadata=bearer("wrong"))
        assert info(e) == ("UNAUTHENTICATED", "CREDENTIALS_REFUSED", "jobgate", {"rpc": "Admit"})

        e = failure(r.jobs.MarkJob, jobs_pb2.MarkJobRequest(job_id="j", state="RUNNING"), metadata=r.auth)
        assert info(e)[:3] == ("PERMISSION_DENIED", "ROLE_MISSING", "jobgate")

        e = failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id="no-such-job"), metadata=r.auth)
        assert info(e) == ("NOT_FOUND", "JOB_NOT_FOUND", "jobgate", {"job_id": "no-such-job"})

        e = failure(r.admission.Admit, admission_pb2.AdmitRequest(), metadata=r.auth)
        assert info(e) == ("INVALID_ARGUMENT", "INVALID_FIELD", "jobgate", {"field": "document.body"})
        assert error_detail(e, error_details_pb2.BadRequest).field_violations[0].field == "document.body"

        e = failure(r.admission.AdmitBatch, admission_pb2.AdmitBatchRequest(documents=[document()] * 3, dry_run=True), metadata=r.auth)
        assert info(e) == ("RESOURCE_EXHAUSTED", "BATCH_TOO_LARGE", "jobgate", {"limit": "limits.max_batch", "documents": "3", "max": "2"})
        (violation,) = error_detail(e, error_details_pb2.QuotaFailure).violations
        assert violation.subject == "limits.max_batch" and "at most 2 per call" in violation.description

        job_id = r.admission.Admit(admission_pb2.AdmitRequest(document=document()), metadata=r.auth).job_id
        mark = r.jobs.MarkJob
        mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", message="one", source="agent"), metadata=r.backend)
        mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", message="two", source="agent"), metadata=r.backend)
        e = failure(mark, jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", message="three", source="agent"), metadata=r.backend)
        assert info(e) == ("RESOURCE_EXHAUSTED", "RECORD_FULL", "jobgate", {"limit": "limits.max_transitions", "job_id": job_id})
        assert error_detail(e, error_details_pb2.QuotaFailure).violations[0].subject == "limits.max_transitions"
        mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="COMPLETE", message="done", source="agent"), metadata=r.backend)
        e = failure(mark, jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", source="agent"), metadata=r.backend)
        assert info(e) == ("FAILED_PRECONDITION", "JOB_FINISHED", "jobgate", {"subject": f"jobs/{job_id}"})
        (violation,) = error_detail(e, error_details_pb2.PreconditionFailure).violations
        assert (violation.type, violation.subject) == ("STATE", f"jobs/{job_id}")

        # alice's one stream: a watch on an unfinished job, past its history
        other = r.admission.Admit(admission_pb2.AdmitRequest(document=document()), metadata=r.auth).job_id
        held = r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=other), metadata=r.auth)
        try:
            assert next(held).state == "PENDING"
            e = failure(next, r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=other), metadata=r.auth, timeout=10))
            assert info(e) == ("RESOURCE_EXHAUSTED", "TOO_MANY_STREAMS", "jobgate", {"limit": "server.max_streams_per_account", "account": "alice"})
            assert error_detail(e, error_details_pb2.QuotaFailure).violations[0].subject == "server.max_streams_per_account"
        finally:
            held.cancel()
    finally:
        r.close()


def test_no_servicer_ends_a_call_but_through_errors():
    """Every status the service sets goes through jobgate.server.errors, so none can
    leave without its ErrorInfo: no context.abort, abort_with_status or set_code
    elsewhere in the server package (an asyncio `transport.abort` drops an HTTP
    connection of the metrics endpoint, not a call)."""
    root = Path(jobgate.server.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("abort", "abort_with_status", "set_code") and not (isinstance(node.value, ast.Name) and node.value.id == "errors"):
                if node.attr == "abort" and isinstance(node.value, ast.Attribute) and node.value.attr == "transport":
                    continue
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_reasons_are_upper_snake_case_and_unique():
    assert len(set(errors.REASONS)) == len(errors.REASONS)
    assert all(r.replace("_", "").isalpha() and r.isupper() and len(r) <= 63 for r in errors.REASONS)
