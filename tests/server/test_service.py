"""The service on a real server: every RPC, auth, malformed and oversized requests,
quota atomicity under parallel clients, health, reflection, graceful shutdown."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import jsonschema
import pytest
import yaml
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

import jobgate
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobspec_pb2, tao_pb2
from tests.files.helpers import packaged, tar_package
from tests.helpers import EXAMPLES, UPSTREAM, error_detail, example, mutate, pairs, require_shared, sample, schema
from tests.server.helpers import Running, config_for, raw, reads_whole_answers

require_shared()

JOBSPEC = sample("jobspec.valid.json")
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")


def test_admit_opens_a_record_with_the_stamped_owner(running):
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=raw({**JOBSPEC, "metadata": {**JOBSPEC["metadata"], "owner": "mallory"}})), metadata=running.auth)
    assert r.report.verdict == "pass"
    assert pairs(r.report) == [("forge.owner_overridden", "/metadata/owner")]
    assert r.job_id.startswith("grpo-my-grpo-")
    record = json_format.MessageToDict(running.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=r.job_id), metadata=running.auth).job)
    jsonschema.validate(record, schema("job_record"))
    assert jobgate.Validator().check(record, kind="job_record").verdict == "pass"
    assert record["results_dir"] == f"{running.config.jobs.results_root}/{r.job_id}"
    assert [t["state"] for t in record["transitions"]] == ["PENDING"]
    stored = json.loads(running.store.document(r.job_id))
    assert stored["metadata"]["owner"] == "alice"


def test_a_refused_document_is_a_normal_response_and_leaves_no_record(running):
    bad = mutate(JOBSPEC, {"/metadata/name": "../x"})
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=raw(bad)), metadata=running.auth)
    assert r.report.verdict == "fail" and r.job_id == ""
    assert pairs(r.report) == [("forge.name", "/metadata/name")]
    assert running.store.list() == []


def test_dry_run_opens_nothing(running):
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True), metadata=running.auth)
    assert r.report.verdict == "pass" and r.job_id == ""
    assert running.store.list() == []


def test_every_entry_point_gives_the_same_report(running):
    docs = [JOBSPEC, BUNDLE, mutate(BUNDLE, {"/spec/a.b": 1, "/command": "x"}), mutate(JOBSPEC, {"/spec/source/entrypoint": "x.py"})]
    local = jobgate.Validator(running.config)
    expected = [local.check(json.dumps(d).encode(), owner="alice").to_dict() for d in docs]
    def as_dict(report):
        # The message's form of a report dict: empty default_severity is "not changed";
        # the enum twins, equal to their strings, are the message's alone.
        shown = json_format.MessageToDict(report, always_print_fields_with_no_presence=True)
        assert (shown.pop("verdictCode"), shown.pop("kindCode")) == (f"VERDICT_{shown['verdict'].upper()}", f"KIND_{shown['kind'].upper()}")
        for v in shown["violations"]:
            assert v.pop("defaultSeverity") == ""  # no [rules] here
            assert (v.pop("severityCode"), v.pop("defaultSeverityCode")) == (f"SEVERITY_{v['severity'].upper()}", "SEVERITY_UNSPECIFIED")
        return shown
    single = [as_dict(running.admission.Admit(admission_pb2.AdmitRequest(document=raw(d), dry_run=True), metadata=running.auth).report) for d in docs]
    batch = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(d) for d in docs], dry_run=True), metadata=running.auth)
    stream = list(running.admission.AdmitStream(iter(admission_pb2.AdmitStreamRequest(request_id=f"r{i}", document=raw(d), dry_run=True) for i, d in enumerate(docs)), metadata=running.auth))
    assert single == expected
    assert [as_dict(x.report) for x in batch.results] == expected
    assert [x.request_id for x in stream] == ["r0", "r1", "r2", "r3"]
    assert [as_dict(x.report) for x in stream] == expected


def test_the_typed_path_matches_the_bytes_path(running):
    typed_js = json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec())
    typed_sb = json_format.ParseDict(BUNDLE, tao_pb2.SpecBundle())
    for typed, doc in ((admission_pb2.Document(jobspec=typed_js), JOBSPEC), (admission_pb2.Document(spec_bundle=typed_sb), BUNDLE)):
        a = running.admission.Admit(admission_pb2.AdmitRequest(document=typed, dry_run=True), metadata=running.auth)
        b = running.admission.Admit(admission_pb2.AdmitRequest(document=raw(doc), dry_run=True), metadata=running.auth)
        assert a.report == b.report and a.report.verdict == "pass"


def test_a_bundle_with_its_package(running, tmp_path):
    doc, members = packaged()
    whole = tar_package(tmp_path / "whole.tar.gz", members, "gz").read_bytes()
    changed = tar_package(tmp_path / "changed.tar", {**members, "scripts/checkpoint_action.py": b"print('other')\n"}).read_bytes()

    def document(package: bytes) -> admission_pb2.Document:
        return admission_pb2.Document(raw=json.dumps(doc).encode(), package=package)

    def admit(package: bytes, dry_run: bool = True):
        return running.admission.Admit(admission_pb2.AdmitRequest(document=document(package), dry_run=dry_run), metadata=running.auth)

    assert admit(whole).report.verdict == "pass"
    refused = admit(changed, dry_run=False)
    assert pairs(refused.report) == [("tao.supporting_file.sha256_mismatch", "/execution/supporting_files/0/sha256")] and refused.job_id == ""
    torn = admit(b"not an archive").report.violations
    assert [(v.rule, v.message) for v in torn] == [("json.syntax", "<package> is not a tar, tar.gz, tar.zst or zip archive")]
    admitted = admit(whole, dry_run=False)
    assert admitted.report.verdict == "pass" and admitted.job_id
    assert [r["id"] for r in running.store.list()] == [admitted.job_id]
    # the same reports through AdmitBatch (item by item: packages never take the core's batch path) and AdmitStream
    packages = [whole, changed, b"not an archive"]
    singles = [admit(p).report for p in packages]
    batch = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[document(p) for p in packages], dry_run=True), metadata=running.auth)
    stream = running.admission.AdmitStream(iter(admission_pb2.AdmitStreamRequest(request_id=str(i), document=document(p), dry_run=True) for i, p in enumerate(packages)), metadata=running.auth)
    assert [x.report for x in batch.results] == singles == [x.report for x in stream]


def test_auth_failures(tmp_path):
    r = Running(config_for(tmp_path))
    try:
        request = admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True)
        for metadata in ([], [("authorization", "Bearer wrong")], [("authorization", "Basic abc")]):
            with pytest.raises(grpc.RpcError) as e:
                r.admission.Admit(request, metadata=metadata)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as e:
            r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id="x"))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        r.close()


def test_anonymous_when_allowed(tmp_path):
    r = Running(config_for(tmp_path, allow_anonymous=True))
    try:
        resp = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)))
        assert resp.job_id
        assert json.loads(r.store.document(resp.job_id))["metadata"]["owner"] == "anonymous"
    finally:
        r.close()


def test_malformed_request_is_invalid_argument_with_details(running):
    with pytest.raises(grpc.RpcError) as e:
        running.admission.Admit(admission_pb2.AdmitRequest(), metadata=running.auth)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = error_detail(e.value, error_details_pb2.BadRequest)
    assert detail.field_violations[0].field == "document.body"
    info = error_detail(e.value, error_details_pb2.ErrorInfo)
    assert (info.reason, info.domain, dict(info.metadata)) == ("INVALID_FIELD", "jobgate", {"field": "document.body"})


def test_oversized_batch_and_message(tmp_path):
    cfg = config_for(tmp_path)
    cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"max_batch": 3}), "server": cfg.server.model_copy(update={"max_message_bytes": 64 * 1024})})
    r = Running(cfg)
    try:
        for dry_run in (True, False):  # the core's dry-run path and the general path
            with pytest.raises(grpc.RpcError) as e:
                r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC)] * 4, dry_run=dry_run), metadata=r.auth)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 3" in e.value.details()
        assert r.store.list() == []
        with pytest.raises(grpc.RpcError) as e:
            r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=b"x" * 100_000)), metadata=r.auth)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        r.close()


def running_with_quota(tmp_path, gpus: int) -> Running:
    """A server whose project my-lab may hold `gpus` GPUs in unfinished jobs."""
    cfg = config_for(tmp_path)
    return Running(cfg.model_copy(update={"quota": cfg.quota.model_copy(update={"projects": {"my-lab": gpus}})}))


def test_project_quota_is_atomic_under_parallel_clients(tmp_path):
    r = running_with_quota(tmp_path, 20)
    try:
        def admit(_):
            return r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=r.auth)

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(admit, range(24)))
        admitted = [x for x in results if x.job_id]
        assert len(admitted) == 2  # 8 GPUs each against a quota of 20
        refused = [x for x in results if not x.job_id]
        assert all(pairs(x.report) == [("forge.quota.project", "/spec/resources")] for x in refused)
        assert r.store.gpus_in_use("my-lab") == 16
    finally:
        r.close()


def test_quota_is_consumed_in_batch_order(tmp_path):
    r = running_with_quota(tmp_path, 16)
    try:
        batch = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC)] * 3), metadata=r.auth)
        assert [bool(x.job_id) for x in batch.results] == [True, True, False]
    finally:
        r.close()


def test_a_dry_run_batch_consumes_quota_in_item_order_from_one_snapshot_of_usage(tmp_path):
    r = running_with_quota(tmp_path, 16)
    try:
        assert r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=r.auth).job_id
        other = mutate(JOBSPEC, {"/metadata/project": "other-lab"})
        request = admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC), raw(JOBSPEC), raw(other)], dry_run=True)
        batch = r.admission.AdmitBatch(request, metadata=r.auth)
        # 8 of my-lab's 16 GPUs are held: the first 8-GPU document fits, the second does
        # not once the first is counted (as the real batch would answer), and other-lab
        # falls under the default quota.
        assert [x.report.verdict for x in batch.results] == ["pass", "fail", "pass"]
        assert r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=r.auth).job_id
        batch = r.admission.AdmitBatch(request, metadata=r.auth)
        assert [pairs(x.report) for x in batch.results] == [[("forge.quota.project", "/spec/resources")]] * 2 + [[]]
        single = r.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC), dry_run=True), metadata=r.auth)
        assert single.report == batch.results[0].report
    finally:
        r.close()


def test_the_core_encodes_a_batch_response_as_the_protobuf_runtime_does(running):
    from jobgate.server.wire import report_message

    docs = [JOBSPEC, BUNDLE, mutate(BUNDLE, {"/spec/a.b": 1, "/command": "x"}), {**JOBSPEC, "kind": "Nöpe ✓"}, "{", "[]", ""]
    encoded = [d.encode() if isinstance(d, str) else json.dumps(d, ensure_ascii=False).encode() for d in docs]
    request = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=e) for e in encoded], dry_run=True).SerializeToString()
    answer = running.gate.check_batch_request(request, "alice", 100)
    reports = [running.gate.validator.check(e, owner="alice") for e in encoded]
    expected = admission_pb2.AdmitBatchResponse(results=[admission_pb2.AdmitResponse(report=report_message(x)) for x in reports])
    assert answer.documents == len(docs)
    assert answer.response == expected.SerializeToString()
    assert answer.verdicts == {"pass": 2, "fail": 5}
    assert answer.rules[("forge.kind", "error")] == 1 and answer.rules[("json.syntax", "error")] == 3


def test_a_clean_reports_response_is_encoded_once_as_the_protobuf_runtime_does(running):
    from jobgate.server.wire import ResponseEncoder, report_message

    encoder = ResponseEncoder()
    clean = [running.gate.validator.check(json.dumps(d).encode(), owner="alice") for d in (JOBSPEC, BUNDLE)]
    failing = running.gate.validator.check(b"{", owner="alice")
    assert [r.verdict for r in clean] == ["pass", "pass"] and not any(r.violations for r in clean)
    for report in clean:
        for job_id in ("", "grpo-my-grpo-000042", "é" * 40):
            expected = admission_pb2.AdmitResponse(report=report_message(report), job_id=job_id).SerializeToString()
            answer = encoder.admit(report, job_id)
            assert (answer.data, answer.verdict, answer.rules, answer.job_id) == (expected, "pass", [], job_id)
            assert encoder.item(report, job_id) == admission_pb2.AdmitBatchResponse(results=[admission_pb2.AdmitResponse.FromString(expected)]).SerializeToString()
    assert encoder.admit(failing, "") is None
    expected = admission_pb2.AdmitResponse(report=report_message(failing)).SerializeToString()
    assert encoder.item(failing) == admission_pb2.AdmitBatchResponse(results=[admission_pb2.AdmitResponse.FromString(expected)]).SerializeToString()


def test_usage_is_read_only_when_the_core_answers_the_batch(running):
    v, calls = running.gate.validator, []

    def usage():
        calls.append(1)
        return {"my-lab": 1}

    real = admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC)]).SerializeToString()
    assert v.check_batch_request(real, quota_default=8, gpus_in_use=usage) is None and calls == []
    dry = admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC)], dry_run=True).SerializeToString()
    answer = v.check_batch_request(dry, quota_default=8, gpus_in_use=usage)
    assert calls == [1]
    (result,) = admission_pb2.AdmitBatchResponse.FromString(answer.response).results
    assert pairs(result.report) == [("forge.quota.project", "/spec/resources")]  # 1 held + 8 asked > 8


def test_a_batch_of_typed_and_raw_documents_matches_the_raw_batch(running):
    typed = admission_pb2.Document(jobspec=json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec()))
    bad = mutate(BUNDLE, {"/command": "x"})
    mixed = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[typed, raw(bad), raw(JOBSPEC)], dry_run=True), metadata=running.auth)
    plain = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(JOBSPEC), raw(bad), raw(JOBSPEC)], dry_run=True), metadata=running.auth)
    assert list(mixed.results) == list(plain.results)
    assert [x.report.verdict for x in plain.results] == ["pass", "fail", "pass"]


def test_a_batch_that_is_not_a_request_is_invalid_argument(running):
    call = running.channel.unary_unary("/jobgate.v1.AdmissionService/AdmitBatch", request_serializer=bytes, response_deserializer=admission_pb2.AdmitBatchResponse.FromString)
    with pytest.raises(grpc.RpcError) as e:
        call(b"\xff\xff\xff\xff", metadata=running.auth)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_detail(e.value, error_details_pb2.BadRequest).field_violations[0].field == "request"


def test_mark_get_list_and_watch(running):
    job_id = running.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=running.auth).job_id
    watched = []
    watcher = threading.Thread(target=lambda: watched.extend(running.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=running.auth, timeout=20)))
    watcher.start()
    mark = running.jobs.MarkJob  # as the backend: only a backend records what happened to a launch
    mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", message="ImagePullBackOff cleared; token=abc123", source="poller"), metadata=running.backend)
    done = mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="ERROR", message="NODE_FAIL", source="backend-hook"), metadata=running.backend).job
    again = mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="ERROR", message="", source="agent", err_class="ERR_INFRA", backend_ref="4211337"), metadata=running.backend).job
    watcher.join(20)
    assert [t.state for t in watched] == ["PENDING", "RUNNING", "ERROR"]
    assert json_format.MessageToDict(done)["terminal_state"] == "ERROR"
    exported = json_format.MessageToDict(again)
    assert exported["err_class"] == "ERR_INFRA" and exported["backend_ref"] == "4211337" and len(exported["transitions"]) == 3
    assert "abc123" not in exported["transitions"][1]["message"]
    assert jobgate.Validator().check(exported, kind="job_record").verdict == "pass"
    with pytest.raises(grpc.RpcError) as e:
        mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="RUNNING", source="agent"), metadata=running.backend)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        mark(jobs_pb2.MarkJobRequest(job_id="nope", state="RUNNING", source="agent"), metadata=running.backend)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        mark(jobs_pb2.MarkJobRequest(job_id=job_id, state="QUEUED", source="agent"), metadata=running.backend)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    listed = running.jobs.ListJobs(jobs_pb2.ListJobsRequest(terminal=True), metadata=running.auth)
    assert [j.id for j in listed.jobs] == [job_id]
    assert running.jobs.ListJobs(jobs_pb2.ListJobsRequest(terminal=False), metadata=running.auth).jobs == []


def test_list_pages(running):
    ids = [running.admission.Admit(admission_pb2.AdmitRequest(document=raw(JOBSPEC)), metadata=running.auth).job_id for _ in range(5)]
    seen, token = [], ""
    while True:
        page = running.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=2, page_token=token), metadata=running.auth)
        seen += [j.id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids


def test_recipe_status(running):
    def status(lock: bytes, core: str = "") -> str:
        return running.admission.RecipeStatus(admission_pb2.RecipeStatusRequest(lock=lock, core_version=core), metadata=running.auth).status

    lock = json.loads((UPSTREAM / "starforge" / "recipe.lock.v3.nemo-rl-grpo.json").read_bytes())
    assert status(json.dumps(lock).encode()) == "current"
    assert status(json.dumps(mutate(lock, {"/recipe/version": "0.6.0"})).encode()) == "upgrade_advised"
    assert status(json.dumps(mutate(lock, {"/recipe/digest": "sha256:00"})).encode()) == "compatible"
    assert status(json.dumps(mutate(lock, {"/recipe/version": "0.9.0"})).encode()) == "incompatible"
    assert status(json.dumps(lock).encode(), core="2.0.0") == "sdk_incompatible"
    assert status(json.dumps(mutate(lock, {"/recipe/name": "verl/ppo"})).encode()) == "runtime_removed"
    assert status(b"{not json") == "malformed"


def test_health_and_reflection(running):
    health = health_pb2_grpc.HealthStub(running.channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="jobgate.v1.AdmissionService")).status == health_pb2.HealthCheckResponse.SERVING
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    services = set(ProtoReflectionDescriptorDatabase(running.channel).get_services())
    assert {"jobgate.v1.AdmissionService", "jobgate.v1.JobService", "grpc.health.v1.Health"} <= services

    # grpc.reflection.v1, which current clients (grpcurl) ask for, answers alike
    from grpc_reflection.v1alpha import reflection_pb2

    v1 = running.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [reflection_pb2.ServerReflectionRequest(list_services=""), reflection_pb2.ServerReflectionRequest(file_containing_symbol="jobgate.v1.AdmissionService")]
    listed, described = list(v1(iter(requests), metadata=running.auth, timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {"jobgate.v1.AdmissionService", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto


def test_graceful_shutdown_finishes_calls_in_flight(tmp_path):
    r = Running(config_for(tmp_path))
    docs = [raw(JOBSPEC)] * 2000
    outcome = {}
    channel = reads_whole_answers(r.port)

    def call():
        try:
            outcome["response"] = admission_pb2_grpc.AdmissionServiceStub(channel).AdmitBatch(admission_pb2.AdmitBatchRequest(documents=docs), metadata=r.auth, timeout=60)
        except grpc.RpcError as e:
            outcome["error"] = f"{e.code()}: {e.details()}"

    t = threading.Thread(target=call)
    t.start()
    # Stop once the batch is being handled (a loaded machine may take a while to send it).
    in_flight = r.metrics.in_flight.labels("AdmitBatch")
    deadline = time.monotonic() + 30
    while in_flight._value.get() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert in_flight._value.get() == 1
    r.server.stop(30).wait()
    t.join(60)
    assert "error" not in outcome, outcome["error"]
    assert len(outcome["response"].results) == 2000
    channel.close()
    r.channel.close()


def test_a_draining_server_answers_every_call_accepted_ends_health_watches_and_is_down_at_once(tmp_path):
    """A graceful stop answers every call accepted, those still waiting for a thread
    too, tells each health watch NOT_SERVING and then ends it, and the server is down
    as soon as the last call has answered, long before the grace period."""
    r = Running(config_for(tmp_path, threads=1))
    held = sqlite3.connect(r.store.path, isolation_level=None)
    try:
        watch = health_pb2_grpc.HealthStub(r.channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        # The store held: the first admission waits in its commit on the one servicer
        # thread, and the next two wait for that thread.
        held.execute("BEGIN IMMEDIATE")
        request = admission_pb2.AdmitRequest(document=raw(JOBSPEC))
        calls = [r.admission.Admit.future(request, metadata=r.auth, timeout=60) for _ in range(3)]
        in_flight = r.metrics.in_flight.labels("Admit")
        deadline = time.monotonic() + 30
        while in_flight._value.get() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert in_flight._value.get() == 1 and not any(c.done() for c in calls)
        began = time.monotonic()
        done = r.server.stop(60)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert list(watch) == [] and watch.code() == grpc.StatusCode.OK  # ended, not cancelled
        assert not done.is_set()  # three calls still to answer
        held.execute("COMMIT")
        assert [bool(c.result(60).job_id) for c in calls] == [True] * 3
        assert done.wait(30) and time.monotonic() - began < 30
    finally:
        held.close()
        r.close()


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("spec_bundle.*valid.json")))
def test_typed_messages_round_trip_upstream_bundles(name):
    doc = example(name)
    back = json_format.MessageToDict(json_format.ParseDict(doc, tao_pb2.SpecBundle()))
    assert back == doc


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("job_record.*valid.json")))
def test_typed_messages_round_trip_upstream_records(name):
    from jobgate.v1 import job_pb2

    doc = example(name)
    assert json_format.MessageToDict(json_format.ParseDict(doc, job_pb2.JobRecord())) == doc


def test_typed_messages_round_trip_jobspecs():
    for doc in (JOBSPEC, sample("jobspec.rejected.json")):
        back = json_format.MessageToDict(json_format.ParseDict(doc, jobspec_pb2.JobSpec()))
        # proto3 cannot tell an empty map from an absent one: {} labels/roles are equal to none.
        expected = json.loads(json.dumps(doc))
        if not expected["metadata"].get("labels"):
            expected["metadata"].pop("labels", None)
        assert back == expected


def test_generated_code_matches_the_protos():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(root / "scripts" / "protos.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_service_honours_no_suppression_a_document_or_the_configuration_names(tmp_path):
    """Suppressions are for `check` and `revalidate` in a repository: a document sent to
    the gate cannot silence its own findings with a comment, nor does a
    [rules.paths] table reach admission (it names paths, and a request has none)."""
    config = config_for(tmp_path)
    config = config.model_copy(update={"rules": {**config.rules, "paths": {"**": {"ignore": ["forge.name"]}}}})
    r = Running(config)
    try:
        bad = mutate(JOBSPEC, {"/metadata/name": "../x"})
        text = yaml.safe_dump(bad, sort_keys=False).replace("name: ../x", "name: ../x  # jobgate: ignore[forge.name]")
        assert "# jobgate: ignore[forge.name]" in text
        yaml_text = "# jobgate: ignore[forge.name]\n" + text
        got = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=yaml_text.encode())), metadata=r.auth)
        assert got.report.verdict == "fail" and got.job_id == ""
        assert pairs(got.report) == [("forge.name", "/metadata/name")]
        assert r.store.list() == []
    finally:
        r.close()
