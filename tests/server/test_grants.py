"""Grants on a real server: every role against every RPC, quota theft attempts that
leave usage unchanged, reads across accounts that are NOT_FOUND, where spec-bundles
go, denials in the log and the metrics, reloads that change or try to weaken the
grants, and the CLI paths that go through the server."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

from jobgate.config import Account
from jobgate.server import create_server
from jobgate.server.app import StartupError
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobs_pb2_grpc, jobspec_pb2
from tests.helpers import error_detail, example, free_port, mutate, pairs, require_shared, sample
from tests.server.helpers import Running, bearer, config_for, raw

require_shared()

JOBSPEC = sample("jobspec.valid.json")  # project my-lab, 8 GPUs
FOREIGN = mutate(JOBSPEC, {"/metadata/project": "vision"})
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")
ROLES = ("submitter", "reader", "backend", "admin")
# One account per role; the submitter and the reader act in my-lab only.
MATRIX_ACCOUNTS = {
    "sub": {"token": token_hash("token-of-sub"), "projects": ["my-lab"], "roles": ["submitter"]},
    "rdr": {"token": token_hash("token-of-rdr"), "projects": ["my-lab"], "roles": ["reader"]},
    "bck": {"token": token_hash("token-of-bck"), "roles": ["backend"]},
    "adm": {"token": token_hash("token-of-adm"), "roles": ["admin"]},
}
HOLDER = {"submitter": "sub", "reader": "rdr", "backend": "bck", "admin": "adm"}
FORBIDDEN = [("forge.project.forbidden", "/metadata/project")]


def as_role(role: str) -> list[tuple[str, str]]:
    return bearer(f"token-of-{HOLDER[role]}")


def failure(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, **kwargs)
    return e.value


# ---- the role × RPC matrix


def verdict(response) -> str:
    """An admission as one word: admitted (a record opened), pass (a dry run),
    forbidden (forge.project.forbidden and nothing else), or the report's rules."""
    if response.job_id:
        return "admitted"
    if pairs(response.report) == FORBIDDEN:
        return "forbidden"
    return response.report.verdict if not response.report.violations else ",".join(r for r, _ in pairs(response.report))


def seeded(tmp_path) -> tuple[Running, dict[str, str]]:
    """A server with one account per role, and one job in my-lab ("own", the project
    of the submitter and the reader) and one in vision ("foreign"), opened by the admin."""
    r = Running(config_for(tmp_path, MATRIX_ACCOUNTS))
    admin = as_role("admin")
    jobs = {name: r.admission.Admit(admission_pb2.AdmitRequest(document=raw(doc)), metadata=admin).job_id for name, doc in (("own", JOBSPEC), ("foreign", FOREIGN))}
    assert all(jobs.values())
    return r, jobs


def listed(r: Running, jobs: dict[str, str], request: jobs_pb2.ListJobsRequest, md) -> str:
    names = {v: k for k, v in jobs.items()}
    return ",".join(names.get(j.id, "?") for j in r.jobs.ListJobs(request, metadata=md).jobs) or "none"


def watched(r: Running, job_id: str, md) -> str:
    call = r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=md, timeout=20)
    first = next(call)
    call.cancel()
    return "ok" if first.state == "PENDING" else first.state


def stream(r: Running, docs, md, dry_run: bool = False) -> str:
    requests = [admission_pb2.AdmitStreamRequest(request_id=str(i), document=raw(d), dry_run=dry_run) for i, d in enumerate(docs)]
    return " ".join(verdict(x) for x in r.admission.AdmitStream(iter(requests), metadata=md, timeout=20))


def typed(doc) -> admission_pb2.Document:
    return admission_pb2.Document(jobspec=json_format.ParseDict(doc, jobspec_pb2.JobSpec()))


def batch(r: Running, docs, md, dry_run: bool = False, as_document=raw) -> str:
    request = admission_pb2.AdmitBatchRequest(documents=[as_document(d) for d in docs], dry_run=dry_run)
    return " ".join(verdict(x) for x in r.admission.AdmitBatch(request, metadata=md).results)


CASES = {
    "Admit my-lab": lambda r, jobs, md: verdict(r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=md)),
    "Admit vision": lambda r, jobs, md: verdict(r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN)), metadata=md)),
    "Admit vision dry run": lambda r, jobs, md: verdict(r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN), dry_run=True), metadata=md)),
    "AdmitBatch": lambda r, jobs, md: batch(r, [JOBSPEC, FOREIGN], md),
    # raw documents in a dry run: the core's whole-batch path
    "AdmitBatch dry run": lambda r, jobs, md: batch(r, [JOBSPEC, FOREIGN], md, dry_run=True),
    # typed documents of one kind in a dry run: checked together (check_many)
    "AdmitBatch dry run typed": lambda r, jobs, md: batch(r, [JOBSPEC, FOREIGN], md, dry_run=True, as_document=typed),
    "AdmitStream": lambda r, jobs, md: stream(r, [JOBSPEC, FOREIGN], md),
    "AdmitStream dry run": lambda r, jobs, md: stream(r, [JOBSPEC, FOREIGN], md, dry_run=True),
    "RecipeStatus": lambda r, jobs, md: "ok" if r.admission.RecipeStatus(admission_pb2.RecipeStatusRequest(lock=b"{}"), metadata=md).status == "malformed" else "?",
    "GetJob own": lambda r, jobs, md: "ok" if r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=jobs["own"]), metadata=md).job.id == jobs["own"] else "?",
    "GetJob foreign": lambda r, jobs, md: "ok" if r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=jobs["foreign"]), metadata=md).job.id == jobs["foreign"] else "?",
    "WatchJob own": lambda r, jobs, md: watched(r, jobs["own"], md),
    "WatchJob foreign": lambda r, jobs, md: watched(r, jobs["foreign"], md),
    "ListJobs": lambda r, jobs, md: listed(r, jobs, jobs_pb2.ListJobsRequest(), md),
    "ListJobs project=vision": lambda r, jobs, md: listed(r, jobs, jobs_pb2.ListJobsRequest(project="vision"), md),
    "MarkJob own": lambda r, jobs, md: r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=jobs["own"], state="RUNNING", source="poller"), metadata=md).job.transitions[-1].state,
    "MarkJob foreign": lambda r, jobs, md: r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=jobs["foreign"], state="COMPLETE", source="poller"), metadata=md).job.transitions[-1].state,
}
PD, NF = "PERMISSION_DENIED", "NOT_FOUND"
# case: (submitter, reader, backend, admin)
EXPECTED = {
    "Admit my-lab": ("admitted", PD, PD, "admitted"),
    "Admit vision": ("forbidden", PD, PD, "admitted"),
    "Admit vision dry run": ("forbidden", PD, PD, "pass"),
    "AdmitBatch": ("admitted forbidden", PD, PD, "admitted admitted"),
    "AdmitBatch dry run": ("pass forbidden", PD, PD, "pass pass"),
    "AdmitBatch dry run typed": ("pass forbidden", PD, PD, "pass pass"),
    "AdmitStream": ("admitted forbidden", PD, PD, "admitted admitted"),
    "AdmitStream dry run": ("pass forbidden", PD, PD, "pass pass"),
    "RecipeStatus": ("ok", PD, PD, "ok"),
    "GetJob own": ("ok", "ok", "ok", "ok"),
    "GetJob foreign": (NF, NF, "ok", "ok"),
    "WatchJob own": ("ok", "ok", "ok", "ok"),
    "WatchJob foreign": (NF, NF, "ok", "ok"),
    "ListJobs": ("own", "own", "own,foreign", "own,foreign"),
    "ListJobs project=vision": ("none", "none", "foreign", "foreign"),
    "MarkJob own": (PD, PD, "RUNNING", "RUNNING"),
    "MarkJob foreign": (PD, PD, "COMPLETE", "COMPLETE"),
}


# The project of each document a case admits, in order.
ADMITS = {
    "Admit my-lab": ["my-lab"],
    "Admit vision": ["vision"],
    "AdmitBatch": ["my-lab", "vision"],
    "AdmitStream": ["my-lab", "vision"],
}


def snapshot(r: Running) -> tuple:
    """What a call may change: the records, their transitions, each project's GPUs."""
    store = r.store
    records = {rec["id"]: [t["state"] for t in rec["transitions"]] for rec in store.list(limit=100)}
    return records, {p: store.gpus_in_use(p) for p in ("my-lab", "vision")}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_role_by_rpc(tmp_path, case, role):
    r, jobs = seeded(tmp_path)
    try:
        before = snapshot(r)
        try:
            outcome = CASES[case](r, jobs, as_role(role))
        except grpc.RpcError as e:
            outcome = e.code().name
        expected = EXPECTED[case][ROLES.index(role)]
        assert outcome == expected
        records, usage = snapshot(r)
        if case.startswith("MarkJob") and outcome not in (PD, NF):
            which = jobs["own" if case.endswith("own") else "foreign"]
            assert records == {**before[0], which: ["PENDING", outcome]}
            # a terminal state gives the job's GPUs back
            assert usage == ({**before[1], "vision": 0} if outcome == "COMPLETE" else before[1])
        else:
            # a refusal or a read changes nothing; each admission opens its record and holds its GPUs
            opened = [project for project, word in zip(ADMITS.get(case, []), outcome.split(), strict=False) if word == "admitted"]
            assert len(records) == len(before[0]) + len(opened)
            assert {k: records[k] for k in before[0]} == before[0]
            assert usage == {p: before[1][p] + 8 * opened.count(p) for p in before[1]}
    finally:
        r.close()


def test_every_batch_path_applies_the_grant_without_quotas(tmp_path):
    """Without quotas a dry-run batch goes to the core whole (raw documents) or checked
    together (typed): both are handed the caller's projects."""
    from jobgate.config import Quota

    r = Running(config_for(tmp_path).model_copy(update={"quota": Quota()}))
    try:
        for as_document in (raw, typed):
            assert batch(r, [JOBSPEC, FOREIGN, JOBSPEC], r.auth, dry_run=True, as_document=as_document) == "pass forbidden pass"
        assert batch(r, [JOBSPEC, FOREIGN], r.auth) == "admitted forbidden"
    finally:
        r.close()


def test_permission_denied_names_the_missing_grant(tmp_path):
    r, jobs = seeded(tmp_path)
    try:
        e = failure(r.jobs.MarkJob, jobs_pb2.MarkJobRequest(job_id=jobs["own"], state="COMPLETE", source="agent"), metadata=as_role("submitter"))
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        assert e.details() == "MarkJob needs the role backend or admin; account 'sub' holds submitter"
        info = error_detail(e, error_details_pb2.ErrorInfo)
        assert (info.reason, info.domain, dict(info.metadata)) == ("ROLE_MISSING", "jobgate", {"account": "sub", "rpc": "MarkJob", "roles": "backend,admin"})
        e = failure(r.admission.Admit, admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True), metadata=as_role("backend"))
        assert (e.code(), e.details()) == (grpc.StatusCode.PERMISSION_DENIED, "Admit needs the role submitter or admin; account 'bck' holds backend")
        # refused before any document is looked at: a request without one is refused alike
        e = failure(r.admission.Admit, admission_pb2.AdmitRequest(), metadata=as_role("reader"))
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        r.close()


def test_a_job_out_of_sight_is_not_found_exactly_as_an_unknown_id(tmp_path):
    r, jobs = seeded(tmp_path)
    try:
        md = as_role("submitter")
        hidden = failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=jobs["foreign"]), metadata=md)
        unknown = failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id="grpo-my-grpo-000000abcdef"), metadata=md)
        assert (hidden.code(), unknown.code()) == (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.NOT_FOUND)
        assert hidden.details() == f"no job {jobs['foreign']!r}"
        assert unknown.details() == "no job 'grpo-my-grpo-000000abcdef'"
        watch = failure(list, r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=jobs["foreign"]), metadata=md, timeout=10))
        assert (watch.code(), watch.details()) == (grpc.StatusCode.NOT_FOUND, f"no job {jobs['foreign']!r}")
    finally:
        r.close()


# ---- quota theft


def test_a_submitter_cannot_spend_another_projects_quota(tmp_path):
    cfg = config_for(tmp_path)  # alice: my-lab and other-lab
    r = Running(cfg.model_copy(update={"quota": cfg.quota.model_copy(update={"projects": {"vision": 8}})}))
    try:
        responses = [
            r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN)), metadata=r.auth),
            *r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(FOREIGN), raw(FOREIGN)]), metadata=r.auth).results,
            *r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="x", document=raw(FOREIGN))]), metadata=r.auth),
        ]
        for response in responses:
            assert (response.report.verdict, response.job_id, pairs(response.report)) == ("fail", "", FORBIDDEN)
            assert response.report.violations[0].message == 'this account may not submit to project "vision"; it may submit to "my-lab", "other-lab"'
        assert r.store.list() == [] and r.store.gpus_in_use("vision") == 0
    finally:
        r.close()


def test_a_submitter_cannot_mark_its_own_job_complete_to_get_its_gpus_back(tmp_path):
    r = Running(config_for(tmp_path))
    try:
        job_id = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=r.auth).job_id
        assert r.store.gpus_in_use("my-lab") == 8
        for state in ("COMPLETE", "CANCELED", "ERROR", "RUNNING"):
            e = failure(r.jobs.MarkJob, jobs_pb2.MarkJobRequest(job_id=job_id, state=state, source="agent"), metadata=r.auth)
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED
        assert [t["state"] for t in r.store.get(job_id)["transitions"]] == ["PENDING"]
        assert r.store.gpus_in_use("my-lab") == 8
        # the backend records it: then the GPUs are given back
        r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state="COMPLETE", source="poller"), metadata=r.backend)
        assert r.store.gpus_in_use("my-lab") == 0
    finally:
        r.close()


# ---- spec-bundles, the owner, anonymous


def test_a_spec_bundle_goes_to_its_accounts_first_project(tmp_path):
    accounts = {
        **MATRIX_ACCOUNTS,
        "sub": {**MATRIX_ACCOUNTS["sub"], "projects": ["my-lab", "vision"]},
        "everywhere": {"token": token_hash("token-of-everywhere"), "projects": ["*"], "roles": ["submitter"]},
    }
    r = Running(config_for(tmp_path, accounts))
    try:
        homes = {}
        for who in ("sub", "everywhere", "adm"):
            response = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(BUNDLE)), metadata=bearer(f"token-of-{who}"))
            assert response.report.verdict == "pass" and response.job_id
            homes[who] = r.store.project(response.job_id)
        assert homes == {"sub": "my-lab", "everywhere": "default", "adm": "default"}  # [jobs] default_project
        gpus = BUNDLE["compute_shape"]["gpus"] * BUNDLE["compute_shape"].get("nodes", 1)
        assert (r.store.gpus_in_use("my-lab"), r.store.gpus_in_use("default")) == (gpus, 2 * gpus)
        # the reader of my-lab sees the submitter's bundle job, not the others
        seen = [j.id for j in r.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=as_role("reader")).jobs]
        assert [r.store.project(j) for j in seen] == ["my-lab"]
    finally:
        r.close()


def test_the_owner_is_the_caller_and_anonymous_is_an_admin_on_loopback(tmp_path):
    r = Running(config_for(tmp_path, allow_anonymous=True))
    try:
        response = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN)))  # no credentials
        assert response.job_id and pairs(response.report) == []
        assert json.loads(r.store.document(response.job_id))["metadata"]["owner"] == "anonymous"
        marked = r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=response.job_id, state="RUNNING", source="agent"))
        assert [t.state for t in marked.job.transitions] == ["PENDING", "RUNNING"]
        # a token still names its own account, with its own grant
        assert failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=response.job_id), metadata=r.auth).code() == grpc.StatusCode.NOT_FOUND
    finally:
        r.close()


# ---- every denial is visible


def test_denials_are_logged_and_counted(tmp_path, caplog):
    cfg = config_for(tmp_path, MATRIX_ACCOUNTS)
    r = Running(cfg.model_copy(update={"server": cfg.server.model_copy(update={"metrics_listen": "127.0.0.1:0"})}))
    try:
        admin, sub = as_role("admin"), as_role("submitter")
        foreign = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN)), metadata=admin).job_id
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jobgate.server"):
            failure(r.jobs.MarkJob, jobs_pb2.MarkJobRequest(job_id=foreign, state="COMPLETE", source="agent"), metadata=sub)
            failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=foreign), metadata=sub)
            r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN)), metadata=sub)
            r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(FOREIGN)] * 3, dry_run=True), metadata=sub)
            r.jobs.ListJobs(jobs_pb2.ListJobsRequest(project="vision"), metadata=sub)
            failure(r.admission.RecipeStatus, admission_pb2.RecipeStatusRequest(lock=b"{}"), metadata=as_role("reader"))
            failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=foreign), metadata=bearer("stolen"))
        denied = [rec.fields for rec in caplog.records if rec.getMessage() == "denied"]
        assert denied == [
            {"account": "sub", "rpc": "MarkJob", "reason": "role", "missing": "role backend or admin", "job_id": foreign},
            {"account": "sub", "rpc": "GetJob", "reason": "not_visible", "missing": "project vision", "job_id": foreign, "project": "vision"},
            {"account": "sub", "rpc": "Admit", "reason": "project", "missing": "project vision", "project": "vision"},
            {"account": "sub", "rpc": "AdmitBatch", "reason": "project", "missing": "project", "documents": 3},
            {"account": "sub", "rpc": "ListJobs", "reason": "not_visible", "missing": "project vision", "project": "vision"},
            {"account": "rdr", "rpc": "RecipeStatus", "reason": "role", "missing": "role submitter or admin"},
            {"account": None, "rpc": "GetJob", "reason": "unauthenticated", "missing": "credentials", "why": "the bearer token is not known to this server"},
        ]
        text = urllib.request.urlopen(f"http://127.0.0.1:{r.metrics_port}/metrics", timeout=10).read().decode()
        for line in (
            'jobgate_denials_total{reason="role",rpc="MarkJob"} 1.0',
            'jobgate_denials_total{reason="not_visible",rpc="GetJob"} 1.0',
            'jobgate_denials_total{reason="project",rpc="Admit"} 1.0',
            'jobgate_denials_total{reason="project",rpc="AdmitBatch"} 3.0',
            'jobgate_denials_total{reason="not_visible",rpc="ListJobs"} 1.0',
            'jobgate_denials_total{reason="role",rpc="RecipeStatus"} 1.0',
            'jobgate_denials_total{reason="unauthenticated",rpc="GetJob"} 1.0',
        ):
            assert line in text
    finally:
        r.close()


# ---- reloads


def with_accounts(config, accounts: dict, **server):
    return config.model_copy(
        update={"accounts": {n: Account(**a) for n, a in accounts.items()}, "server": config.server.model_copy(update=server)},
    )


def test_a_reload_applies_to_the_next_call_and_a_revoked_token_fails_at_once(tmp_path):
    r, jobs = seeded(tmp_path)
    try:
        sub, rdr = as_role("submitter"), as_role("reader")
        # an open watch of the reader's, and an open stream of the submitter's
        watch = r.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=jobs["own"]), metadata=rdr, timeout=30)
        assert next(watch).state == "PENDING"
        assert verdict(r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN), dry_run=True), metadata=sub)) == "forbidden"
        grown = {**MATRIX_ACCOUNTS, "sub": {**MATRIX_ACCOUNTS["sub"], "projects": ["my-lab", "vision"]}}
        del grown["rdr"]
        r.server.reload(with_accounts(r.config, grown))
        # the grant grown: the next call may submit to vision and read its job
        assert verdict(r.admission.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN), dry_run=True), metadata=sub)) == "pass"
        assert r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=jobs["foreign"]), metadata=sub).job.id == jobs["foreign"]
        # the token revoked: refused at once, and the open watch ends at its next transition
        e = failure(r.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=jobs["own"]), metadata=rdr)
        assert (e.code(), e.details()) == (grpc.StatusCode.UNAUTHENTICATED, "the bearer token is not known to this server")
        r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=jobs["own"], state="RUNNING", source="poller"), metadata=as_role("backend"))
        e = failure(next, watch)
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        r.close()


def test_an_admit_stream_runs_each_document_under_the_grant_in_force(tmp_path):
    import queue

    r, _ = seeded(tmp_path)
    try:
        requests: queue.Queue = queue.Queue()
        call = r.admission.AdmitStream(iter(requests.get, None), metadata=as_role("submitter"), timeout=30)
        requests.put(admission_pb2.AdmitStreamRequest(request_id="1", document=raw(FOREIGN), dry_run=True))
        assert verdict(next(call)) == "forbidden"
        r.server.reload(with_accounts(r.config, {**MATRIX_ACCOUNTS, "sub": {**MATRIX_ACCOUNTS["sub"], "projects": ["vision"]}}))
        requests.put(admission_pb2.AdmitStreamRequest(request_id="2", document=raw(FOREIGN), dry_run=True))
        assert verdict(next(call)) == "pass"
        r.server.reload(with_accounts(r.config, {**MATRIX_ACCOUNTS, "sub": {**MATRIX_ACCOUNTS["sub"], "roles": ["reader"]}}))
        requests.put(admission_pb2.AdmitStreamRequest(request_id="3", document=raw(JOBSPEC), dry_run=True))
        e = failure(next, call)
        assert (e.code(), e.details()) == (grpc.StatusCode.PERMISSION_DENIED, "AdmitStream needs the role submitter or admin; account 'sub' holds reader")
        requests.put(None)
    finally:
        r.close()


def test_a_reload_runs_every_check_a_start_runs_and_keeps_the_last_good_configuration(tmp_path):
    from jobgate.config import Store, Tls

    cfg = config_for(tmp_path, MATRIX_ACCOUNTS, allow_insecure=True)  # off loopback, without TLS
    started = create_server(cfg, "0.0.0.0:0")
    server = started.server
    channel = grpc.insecure_channel(f"127.0.0.1:{started.port}")
    jobs = admission_pb2_grpc.AdmissionServiceStub(channel)
    try:
        shared = {**MATRIX_ACCOUNTS, "twin": {**MATRIX_ACCOUNTS["adm"], "roles": ["reader"], "projects": ["my-lab"]}}
        attempts = {
            "anonymous off loopback": (
                with_accounts(cfg, MATRIX_ACCOUNTS, allow_anonymous=True),
                "server.allow_anonymous is for local demos: refusing to listen on 0.0.0.0:0 without authentication",
            ),
            "tokens in plaintext off loopback": (
                with_accounts(cfg, MATRIX_ACCOUNTS, allow_insecure=False),
                "refusing to accept bearer tokens in plaintext on 0.0.0.0:0: anyone on the network path could read them; "
                "configure [server.tls], listen on loopback, or set server.allow_insecure = true when TLS is terminated in front of the service",
            ),
            "store inside results_root": (
                cfg.model_copy(update={"jobs": cfg.jobs.model_copy(update={"results_root": str(tmp_path)})}),
                f"the store {tmp_path / 'store'} lies inside results_root {tmp_path}; records must live outside every results tree (store.path)",
            ),
            "a token hash shared": (with_accounts(cfg, shared), "accounts: [accounts.adm] and [accounts.twin] hold the same token hash; each account needs a token of its own"),
            "an account without a credential": (
                with_accounts(cfg, {**MATRIX_ACCOUNTS, "ci": {"roles": ["submitter"], "projects": ["my-lab"]}}),
                "accounts: [accounts.ci] has no token, and without server.tls.client_ca no client certificate can name it: it could never call",
            ),
            "a submitter without projects": (
                with_accounts(cfg, {**MATRIX_ACCOUNTS, "sub": {**MATRIX_ACCOUNTS["sub"], "projects": []}}),
                'accounts: [accounts.sub] is a submitter without projects: list the projects it acts in, or ["*"] for every one',
            ),
            "an account named anonymous": (
                with_accounts(cfg, {"anonymous": MATRIX_ACCOUNTS["adm"]}),
                "accounts: [accounts.anonymous]: 'anonymous' is the account of callers without credentials (server.allow_anonymous); choose another name",
            ),
            "tls": (
                with_accounts(cfg, MATRIX_ACCOUNTS, tls=Tls(cert="c.pem", key="k.pem")),
                "server.tls cannot change while the server runs (its socket keeps the credentials it was opened with); restart it",
            ),
        }
        for name, (fresh, message) in attempts.items():
            with pytest.raises(StartupError) as e:
                server.reload(fresh)
            assert str(e.value) == message, name
            assert server.config is cfg
        # the store in use, not the one a reload names (opened at the next start), must stay outside results_root
        moved = cfg.model_copy(update={"store": Store(path=str(tmp_path.parent / f"{tmp_path.name}-store")), "jobs": cfg.jobs.model_copy(update={"results_root": str(tmp_path)})})
        with pytest.raises(StartupError) as e:
            server.reload(moved)
        assert str(e.value).startswith(f"the store {tmp_path / 'store'} lies inside results_root {tmp_path}")
        # still the last good configuration: no anonymous caller, the same grants
        e = failure(jobs.Admit, admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True))
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED
        assert verdict(jobs.Admit(admission_pb2.AdmitRequest(document=raw(FOREIGN), dry_run=True), metadata=as_role("submitter"))) == "forbidden"
    finally:
        channel.close()
        server.stop(None).wait()
        started.close()


INSECURE = ("allow_insecure = true",)  # a server listening off loopback without TLS


def test_sighup_refuses_anonymous_off_loopback_and_revokes_a_token(tmp_path):
    from tests.server.helpers import write_config

    cfg = tmp_path / "jobgate.toml"
    alice = f'[accounts.alice]\ntoken = "{token_hash("alice-token")}"\nprojects = ["my-lab"]\nroles = ["submitter"]'
    bob = f'[accounts.bob]\ntoken = "{token_hash("bob-token")}"\nprojects = ["my-lab"]\nroles = ["reader"]'
    write_config(cfg, tmp_path, catalog=True, server=INSECURE, accounts=f"{alice}\n{bob}")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"0.0.0.0:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        from jobgate.server.app import wait_serving

        channel = wait_serving(f"127.0.0.1:{port}")
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        jobs_stub = jobs_pb2_grpc.JobServiceStub(channel)
        dry = admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True)
        assert stub.Admit(dry, metadata=bearer("alice-token"), timeout=10).report.verdict == "pass"
        # anonymous on 0.0.0.0: refused as at start; the last good configuration stays
        write_config(cfg, tmp_path, catalog=True, server=("allow_anonymous = true", *INSECURE), accounts=f"{alice}\n{bob}")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert failure(stub.Admit, dry, timeout=10).code() == grpc.StatusCode.UNAUTHENTICATED
        # bob's token revoked: his next call fails
        assert list(jobs_stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=bearer("bob-token"), timeout=10).jobs) == []
        write_config(cfg, tmp_path, catalog=True, server=INSECURE, accounts=alice)
        proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                jobs_stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=bearer("bob-token"), timeout=10)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAUTHENTICATED
                break
            time.sleep(0.1)
        else:
            pytest.fail("bob's token still works after the reload")
        assert stub.Admit(dry, metadata=bearer("alice-token"), timeout=10).report.verdict == "pass"
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
        failed = [e for e in logs if e["message"] == "configuration reload failed; keeping the last good one"]
        assert [e["error"] for e in failed] == [f"server.allow_anonymous is for local demos: refusing to listen on 0.0.0.0:{port} without authentication"]
        assert [e["accounts"] for e in logs if e["message"] == "configuration reloaded"] == [1]
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- the CLI through the server


def test_cli_paths_surface_denials_as_exit_2(tmp_path, capsys):
    r, jobs = seeded(tmp_path)
    try:
        from jobgate.cli import main

        server = ["--server", f"127.0.0.1:{r.port}"]
        capsys.readouterr()
        assert main(["jobs", "mark", jobs["own"], "COMPLETE", *server, "--token", "token-of-sub"]) == 2
        assert capsys.readouterr().err == f"jobgate: 127.0.0.1:{r.port}: PERMISSION_DENIED: MarkJob needs the role backend or admin; account 'sub' holds submitter\n"
        assert main(["jobs", "show", jobs["foreign"], *server, "--token", "token-of-sub"]) == 2
        assert capsys.readouterr().err == f"jobgate: 127.0.0.1:{r.port}: NOT_FOUND: no job {jobs['foreign']!r}\n"
        assert main(["jobs", "list", "--format", "json", *server, "--token", "token-of-rdr"]) == 0
        assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [jobs["own"]]
        doc = tmp_path / "vision.json"
        doc.write_text(json.dumps(FOREIGN))
        assert main(["submit", str(doc), *server, "--token", "token-of-rdr"]) == 2
        assert capsys.readouterr().err == f"jobgate: {doc}: 127.0.0.1:{r.port}: PERMISSION_DENIED: Admit needs the role submitter or admin; account 'rdr' holds reader\n"
        assert main(["submit", str(doc), *server, "--token", "token-of-sub", "--format", "json"]) == 1
        (result,) = json.loads(capsys.readouterr().out)["results"]
        assert (result["job_id"], [(v["rule"], v["field"]) for v in result["violations"]]) == ("", FORBIDDEN)
        assert [t["state"] for t in r.store.get(jobs["own"])["transitions"]] == ["PENDING"]
    finally:
        r.close()
