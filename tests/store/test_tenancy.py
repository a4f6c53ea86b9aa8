"""Two teams on one server, over each store: no one reads, lists, watches or marks
outside their grant, and no attempt on another team's quota changes what the store
holds (records, transitions, each project's GPUs)."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, job_pb2, jobs_pb2
from tests.helpers import mutate, sample
from tests.server.helpers import Running, bearer, raw
from tests.store.helpers import config_on

VISION = sample("jobspec.valid.json") | {"metadata": {**sample("jobspec.valid.json")["metadata"], "project": "vision"}}
SPEECH = mutate(VISION, {"/metadata/project": "speech"})
FORBIDDEN = [("forge.project.forbidden", "/metadata/project")]
TEAMS = {
    "alice": {"token": token_hash("alice-token"), "projects": ["vision"], "roles": ["submitter"]},
    "bob": {"token": token_hash("bob-token"), "projects": ["speech"], "roles": ["submitter"]},
    "auditor": {"token": token_hash("auditor-token"), "projects": ["vision", "speech"], "roles": ["reader"]},
    "slurm-poller": {"token": token_hash("poller-token"), "roles": ["backend"]},
}
ALICE, BOB, AUDITOR, POLLER = (bearer(f"{n}-token") for n in ("alice", "bob", "auditor", "poller"))


@pytest.fixture
def teams(backend, tmp_path):
    r = Running(config_on(backend, tmp_path, TEAMS))
    yield r
    r.close()


def admit(r: Running, doc, md) -> admission_pb2.AdmitResponse:
    return r.admission.Admit(admission_pb2.AdmitRequest(document=raw(doc)), metadata=md, timeout=30)


def code(call, *args, **kwargs) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return e.value.code()


def held(r: Running) -> tuple:
    store = r.store
    return {rec["id"]: rec for rec in store.list(limit=100)}, {p: store.gpus_in_use(p) for p in ("vision", "speech")}


def listed(r: Running, md, **filters) -> list[str]:
    ids, token = [], ""
    while True:  # one record a page: every page is scoped, not only the first
        page = r.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1, page_token=token, **filters), metadata=md, timeout=30)
        ids += [j.id for j in page.jobs]
        token = page.next_page_token
        if not token:
            return ids


def test_reads_across_teams_are_not_found_and_lists_are_scoped(teams):
    r = teams
    a1, b1, a2 = (admit(r, doc, md).job_id for doc, md in ((VISION, ALICE), (SPEECH, BOB), (VISION, ALICE)))
    assert all((a1, b1, a2))
    assert code(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=a1), metadata=BOB) == grpc.StatusCode.NOT_FOUND
    assert code(list, r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=a1), metadata=BOB, timeout=10)) == grpc.StatusCode.NOT_FOUND
    assert code(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=b1), metadata=ALICE) == grpc.StatusCode.NOT_FOUND
    # whatever the filters ask
    assert listed(r, BOB) == [b1]
    assert listed(r, BOB, project="vision") == []
    assert listed(r, BOB, owner="alice") == []
    assert listed(r, BOB, state="PENDING") == [b1]
    assert listed(r, ALICE) == [a1, a2]
    assert listed(r, AUDITOR) == listed(r, POLLER) == [a1, b1, a2]
    assert listed(r, AUDITOR, project="speech") == [b1]
    # what a team reads is the record as stored
    record = r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=a1), metadata=ALICE, timeout=30).job
    assert record == json_format.ParseDict(r.store.get(a1), job_pb2.JobRecord())
    assert (record.id, [t.state for t in record.transitions], record.results_dir) == (a1, ["PENDING"], f"{r.config.jobs.results_root}/{a1}")
    assert json.loads(r.store.document(a1))["metadata"] == {**VISION["metadata"], "owner": "alice"}


def test_quota_theft_fails_and_leaves_the_store_unchanged(teams):
    r = teams
    vision_job = admit(r, VISION, ALICE).job_id
    speech_job = admit(r, SPEECH, BOB).job_id
    before = held(r)
    assert before[1] == {"vision": 8, "speech": 8}
    # bob admits into alice's project: a failing report on every path, nothing opened
    single = admit(r, VISION, BOB)
    batch = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(VISION), raw(SPEECH), raw(VISION)]), metadata=BOB, timeout=30).results
    stream = list(r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="s", document=raw(VISION))]), metadata=BOB, timeout=30))
    for response in (single, batch[0], batch[2], stream[0]):
        assert (response.job_id, [(v.rule, v.field) for v in response.report.violations]) == ("", FORBIDDEN)
    # the batch's items stay independent: bob's own document is admitted
    assert batch[1].job_id and r.store.project(batch[1].job_id) == "speech"
    after = held(r)
    assert {k: v for k, v in after[0].items() if k != batch[1].job_id} == before[0]
    assert after[1] == {"vision": 8, "speech": 16}
    # no submitter records an outcome: not on another team's job, not on its own
    for job_id, md in ((vision_job, BOB), (vision_job, ALICE), (speech_job, BOB)):
        request = jobs_pb2.MarkJobRequest(job_id=job_id, state="COMPLETE", source="agent")
        assert code(r.jobs.MarkJob, request, metadata=md) == grpc.StatusCode.PERMISSION_DENIED
    assert held(r) == after
    assert [t["state"] for t in r.store.get(vision_job)["transitions"]] == ["PENDING"]
