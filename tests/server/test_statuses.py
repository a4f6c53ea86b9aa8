"""Clear statuses, no internals: every request that cannot be handled is refused with
the status that says why, an INVALID_ARGUMENT names its field in a
google.rpc.BadRequest, and no reply carries a traceback, an address or SQL."""

from __future__ import annotations

import errno
import json

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

from jobgate.v1 import admission_pb2, jobs_pb2, jobspec_pb2, tao_pb2
from tests.helpers import error_detail, example, mutate, require_shared, sample
from tests.server.helpers import Running, config_for, raw

require_shared()

JOBSPEC = sample("jobspec.valid.json")
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")
RECORD = example("job_record.at_open.valid.json")
BEST_REC = example("best_rec.valid.json")
INTERNALS = ("Traceback", "Exception", "Error(", "sqlite", "psycopg", "SELECT", "INSERT", 'File "', "line ")


def bad_request(call, *args, **kwargs) -> tuple[str, str]:
    """(field, description) of the INVALID_ARGUMENT the call ends with."""
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return invalid_argument(e.value)


def invalid_argument(error: grpc.RpcError) -> tuple[str, str]:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert not any(word in error.details() for word in INTERNALS), error.details()
    detail = error_detail(error, error_details_pb2.BadRequest)
    (violation,) = detail.field_violations
    return violation.field, violation.description


@pytest.mark.parametrize("token", ["²", "9" * 5000, str(2**63), "-1", "1e3", " 1", "0x10", "١٢"])
def test_a_page_token_the_server_did_not_issue(running, token):
    field, description = bad_request(running.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_token=token), metadata=running.auth)
    assert field == "page_token" and "not a token this server issued" in description


def test_a_lock_deeper_than_any_document_is_invalid_argument(running):
    request = admission_pb2.RecipeStatusRequest(lock=b"[" * 100_000)
    field, description = bad_request(running.admission.RecipeStatus, request, metadata=running.auth)
    assert field == "lock" and "deeper than 64 levels" in description
    # an ordinary malformed lock is still a status, as `sf recipe status` expects
    assert running.admission.RecipeStatus(admission_pb2.RecipeStatusRequest(lock=b"[1]"), metadata=running.auth).status == "malformed"


def nan_jobspec() -> jobspec_pb2.JobSpec:
    typed = json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec())
    typed.spec.hyperparams["lr"] = float("nan")
    return typed


def test_nan_in_a_typed_struct_names_the_field_through_every_entry_point(running):
    document = admission_pb2.Document(jobspec=nan_jobspec())
    field, description = bad_request(running.admission.Admit, admission_pb2.AdmitRequest(document=document, dry_run=True), metadata=running.auth)
    assert field == "document.jobspec.spec.hyperparams.lr" and "NaN or infinite" in description
    batch = admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC), document], dry_run=True)
    assert bad_request(running.admission.AdmitBatch, batch, metadata=running.auth)[0] == "documents[1].jobspec.spec.hyperparams.lr"
    stream = running.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="a", document=document, dry_run=True)]), metadata=running.auth)
    assert bad_request(list, stream)[0] == "document.jobspec.spec.hyperparams.lr"
    typed = json_format.ParseDict(BUNDLE, tao_pb2.SpecBundle())
    typed.spec["train"]["optim"]["lr"] = float("inf")
    bundle = admission_pb2.AdmitRequest(document=admission_pb2.Document(spec_bundle=typed), dry_run=True)
    assert bad_request(running.admission.Admit, bundle, metadata=running.auth)[0] == "document.spec_bundle.spec.train.optim.lr"
    assert running.store.list() == []


GARBAGE = b"\xff\xff\xff\xff\x0f"
CALLS = {
    "Admit": ("/jobgate.v1.AdmissionService/Admit", "unary_unary"),
    "AdmitBatch": ("/jobgate.v1.AdmissionService/AdmitBatch", "unary_unary"),
    "RecipeStatus": ("/jobgate.v1.AdmissionService/RecipeStatus", "unary_unary"),
    "GetJob": ("/jobgate.v1.JobService/GetJob", "unary_unary"),
    "ListJobs": ("/jobgate.v1.JobService/ListJobs", "unary_unary"),
    "MarkJob": ("/jobgate.v1.JobService/MarkJob", "unary_unary"),
    "WatchJob": ("/jobgate.v1.JobService/WatchJob", "unary_stream"),
    "AdmitStream": ("/jobgate.v1.AdmissionService/AdmitStream", "stream_stream"),
}


@pytest.mark.parametrize("rpc", sorted(CALLS))
def test_bytes_that_are_not_a_request_are_invalid_argument(running, rpc):
    path, shape = CALLS[rpc]
    call = getattr(running.channel, shape)(path, request_serializer=bytes, response_deserializer=bytes)
    if shape == "unary_unary":
        field, description = bad_request(call, GARBAGE, metadata=running.auth)
    elif shape == "unary_stream":
        field, description = bad_request(list, call(GARBAGE, metadata=running.auth))
    else:
        good = admission_pb2.AdmitStreamRequest(request_id="a", document=raw(JOBSPEC), dry_run=True).SerializeToString()
        responses = call(iter([good, GARBAGE]), metadata=running.auth)
        assert admission_pb2.AdmitStreamResponse.FromString(next(responses)).request_id == "a"
        field, description = bad_request(next, responses)
        assert "stream message 2" in description
    assert field == "request" and "is not an encoded jobgate.v1." in description


NOT_LAUNCHABLE = {"job_record": RECORD, "best_rec": BEST_REC}


@pytest.mark.parametrize("kind", sorted(NOT_LAUNCHABLE))
def test_a_record_or_recommendation_is_checked_but_never_admitted(running, kind):
    doc = NOT_LAUNCHABLE[kind]
    expected = f"a {kind} document can be checked (dry_run) but not admitted: only jobspec and spec_bundle documents launch jobs"
    # a dry run returns the report
    dry = running.admission.Admit(admission_pb2.AdmitRequest(document=raw(doc), dry_run=True), metadata=running.auth)
    assert (dry.report.kind, dry.report.verdict, dry.job_id) == (kind, "pass", "")
    # a real admission is refused, naming the document, through every entry point
    assert bad_request(running.admission.Admit, admission_pb2.AdmitRequest(document=raw(doc)), metadata=running.auth) == ("document", expected)
    batch = admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC), raw(doc)])
    assert bad_request(running.admission.AdmitBatch, batch, metadata=running.auth) == ("documents[1]", expected)
    stream = running.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="r", document=raw(doc))]), metadata=running.auth)
    assert bad_request(list, stream) == ("document", expected)
    # ... and opens nothing, not even the JobSpec before it in the batch
    assert running.store.list() == []
    dry_batch = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC), raw(doc)], dry_run=True), metadata=running.auth)
    assert [x.report.verdict for x in dry_batch.results] == ["pass", "pass"]


def test_a_failing_record_is_refused_alike(running):
    """The refusal is by kind: a record that breaks its rules is refused the same way
    (its dry run tells what is wrong with it)."""
    bad = mutate(RECORD, {"/transitions/0/state": "RUNNING"})
    assert running.admission.Admit(admission_pb2.AdmitRequest(document=raw(bad), dry_run=True), metadata=running.auth).report.verdict == "fail"
    assert bad_request(running.admission.Admit, admission_pb2.AdmitRequest(document=raw(bad)), metadata=running.auth)[0] == "document"


def test_a_full_disk_for_temporary_files_is_resource_exhausted(running, monkeypatch):
    """A package is spooled to a temporary file; a disk without room for it is named."""
    from jobgate import sources

    def no_space(_package):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/jobgate-package")

    monkeypatch.setattr(sources, "spooled", no_space)
    document = admission_pb2.Document(raw=json.dumps(BUNDLE).encode(), package=b"archive bytes")
    with pytest.raises(grpc.RpcError) as e:
        running.admission.Admit(admission_pb2.AdmitRequest(document=document, dry_run=True), metadata=running.auth)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "disk is full" in e.value.details() and "/tmp" not in e.value.details()


def test_an_unforeseen_failure_is_internal_with_a_reference_to_the_log(running, monkeypatch, caplog):
    def broken(*_args, **_kwargs):
        raise KeyError("secret internal detail")

    monkeypatch.setattr(running.store, "project", broken)  # the first read of GetJob
    with pytest.raises(grpc.RpcError) as e:
        running.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="x"), metadata=running.auth)
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "secret internal detail" not in e.value.details() and "KeyError" not in e.value.details()
    ref = e.value.details().split("(ref ")[1].split(")")[0]
    logged = [r for r in caplog.records if r.getMessage() == "internal error"]
    assert logged and logged[-1].fields == {"rpc": "GetJob", "ref": ref} and "secret internal detail" in str(logged[-1].exc_info[1])


def test_a_server_that_cannot_open_its_store_does_not_start(tmp_path):
    from jobgate.server.app import StartupError

    config = config_for(tmp_path)
    config = config.model_copy(update={"store": config.store.model_copy(update={"url": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=5"})})
    with pytest.raises(StartupError) as e:
        Running(config)
    assert str(e.value) == "the job store cannot be opened: the job store is unavailable; retry shortly"
