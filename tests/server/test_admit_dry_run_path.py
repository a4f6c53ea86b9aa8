"""Admit's dry-run path: a dry run of one raw document is decoded, checked and
encoded by the core from the request's bytes (`Gate.check_admit_request`). Every
other request takes the general path; the two must answer the same bytes, count the
same metrics and log the same line, which the tests below hold them to, on a real
server, for the peers' own documents and hostile ones. A real admission with a clean
report is answered from bytes encoded once (`ResponseEncoder`), its log line intact."""

from __future__ import annotations

import json
import logging

import grpc
import pytest
from google.protobuf import json_format

import jobgate
from jobgate.config import Shadow
from jobgate.server.grants import Caller
from jobgate.v1 import admission_pb2, jobspec_pb2, report_pb2, tao_pb2
from tests.helpers import DEMO_CONFIG, SHARED, example, mutate, require_shared, sample
from tests.server.helpers import Collected, Running, config_for

require_shared()

ADMIT = "/jobgate.v1.AdmissionService/Admit"
JOBSPEC = sample("jobspec.valid.json")
PEERS = SHARED / "upstream" / "peer-cases"


def unlimited(tmp_path):
    """The demo deployment without its quotas: a dry run reads no usage."""
    config = config_for(tmp_path)
    return config.model_copy(update={"quota": config.quota.model_copy(update={"default": None, "projects": {}})})


@pytest.fixture
def running(tmp_path):
    r = Running(unlimited(tmp_path))
    yield r
    r.close()


def documents() -> list[tuple[bytes, int]]:
    """Every peer case as its bytes (its kind left to the core, and named), and
    documents a gateway should not send: broken, empty, not UTF-8, deep, a project
    outside the grant."""
    found = [(path.read_bytes(), kind) for path in sorted(PEERS.rglob("*")) if path.suffix in (".json", ".yaml") for kind in (0, 1)]
    assert len(found) >= 2 * 149
    outside = json.dumps({**JOBSPEC, "metadata": {**JOBSPEC["metadata"], "project": "not-mine"}}).encode()
    hostile = [b"{", b"", b"\xff\xfe{}", b"[" * 5000 + b"]" * 5000, json.dumps(JOBSPEC).encode(), outside]
    return found + [(d, kind) for d in hostile for kind in (0, 1, 2)]


def request(raw: bytes, kind: int, *, twice: bool = False) -> bytes:
    """An encoded dry-run AdmitRequest of `raw`; with `twice`, its document given in two
    parts, which protobuf merges into the same document (the general path's)."""
    whole = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw, kind=kind), dry_run=True).SerializeToString()
    if not twice:
        return whole
    return admission_pb2.AdmitRequest(document=admission_pb2.Document(kind=kind)).SerializeToString() + whole


def test_the_core_answers_a_dry_run_of_one_raw_document_and_nothing_else(running, tmp_path):
    gate, alice = running.gate, Caller("alice", frozenset({"submitter"}), ("my-lab",), "my-lab")
    raw = json.dumps(JOBSPEC).encode()
    answered = gate.check_admit_request(request(raw, 0), "alice", alice.grant)
    assert answered is not None and answered.documents == 1
    assert admission_pb2.AdmitResponse.FromString(answered.response).report.verdict == "pass"
    # Merged by protobuf, a real admission, typed, packaged, no document, not a request at all.
    others = [
        request(raw, 0, twice=True),
        admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw)).SerializeToString(),
        admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw, package=b"PK"), dry_run=True).SerializeToString(),
        admission_pb2.AdmitRequest(dry_run=True).SerializeToString(),
        b"\xff\xff\xff",
    ]
    for other in others:
        assert gate.check_admit_request(other, "alice", alice.grant) is None
    with_quota = Running(config_for(tmp_path / "quota"))
    try:
        assert with_quota.config.quota.default is not None
        assert with_quota.gate.check_admit_request(request(raw, 0), "alice", alice.grant) is not None
    finally:
        with_quota.close()


def test_under_a_quota_the_core_reads_the_usage_of_the_charged_project_alone():
    v, read = jobgate.Validator(), []

    def usage(project: str) -> int:
        read.append(project)
        return 60

    bundle = example("spec_bundle.config_mode.dino_train.valid.json")
    for document, charged in ((json.dumps(JOBSPEC).encode(), "my-lab"), (json.dumps(bundle).encode(), "home-lab"), (b"{", None)):
        read.clear()
        answer = v.check_batch_request(request(document, 0), single=True, home="home-lab", quota_default=64, gpus_in_use=usage)
        assert read == ([charged] if charged else [])
        report = admission_pb2.AdmitResponse.FromString(answer.response).report
        # 60 held and 8 asked for do not fit under 64.
        assert ("forge.quota.project" in [x.rule for x in report.violations]) == (charged is not None)
    read.clear()
    assert v.check_batch_request(request(b"{}", 0, twice=True), single=True, quota_default=64, gpus_in_use=usage) is None and read == []


@pytest.mark.parametrize("quota", [False, True], ids=["no-quota", "quota-used-up"])
def test_both_paths_answer_the_same_bytes_count_the_same_metrics_and_log_the_same_line(tmp_path, quota):
    stream = Collected()
    r = Running(config_for(tmp_path) if quota else unlimited(tmp_path), log_stream=stream)
    try:
        if quota:  # my-lab's 64 GPUs taken: every launch charged to it is refused
            for _ in range(8):
                assert r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())), metadata=r.auth, timeout=30).job_id
        call = r.channel.unary_unary(ADMIT)  # bytes both ways: the response as sent
        registry = r.metrics.registry

        def counted() -> dict:
            return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() if m.name in ("jobgate_admissions", "jobgate_violations") for s in m.samples if s.name.endswith("_total")}

        verdicts, rules, sent = set(), set(), documents()
        for i, (raw, kind) in enumerate(sent):
            answers, counts = [], []
            for path, twice in (("core", False), ("general", True)):
                before = counted()
                answers.append(call(request(raw, kind, twice=twice), metadata=[*r.auth, ("x-request-id", f"{path}-{i}")], timeout=30))
                after = counted()
                counts.append({k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)})
            assert answers[0] == answers[1], raw[:80]
            assert counts[0] == counts[1], raw[:80]
            report = admission_pb2.AdmitResponse.FromString(answers[0]).report
            verdicts.add(report.verdict)
            rules.update(v.rule for v in report.violations)
        assert verdicts == {"pass", "fail"}
        assert ("forge.quota.project" in rules) == quota
    finally:
        r.close()
    logged = {e["request_id"]: e for e in stream.lines()}
    for i in range(len(sent)):
        core, general = logged[f"core-{i}"], logged[f"general-{i}"]
        for line in (core, general):
            del line["ts"], line["request_id"], line["latency_ms"]
        assert core == general and core["status"] == "OK"


def test_a_project_outside_the_grant_is_recorded_with_its_project(running, caplog):
    outside = json.dumps({**JOBSPEC, "metadata": {**JOBSPEC["metadata"], "project": "not-mine"}}).encode()
    with caplog.at_level(logging.WARNING, logger="jobgate.server"):
        response = running.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=outside), dry_run=True), metadata=running.auth, timeout=10)
    assert [v.rule for v in response.report.violations] == ["forge.project.forbidden"]
    assert running.metrics.registry.get_sample_value("jobgate_denials_total", {"rpc": "Admit", "reason": "project"}) == 1
    (denied,) = [rec.fields for rec in caplog.records if rec.getMessage() == "denied"]
    assert (denied["project"], denied["account"], denied["rpc"]) == ("not-mine", "alice", "Admit")


def test_an_admit_that_is_not_a_request_is_refused_naming_it(running):
    call = running.channel.unary_unary(ADMIT)
    try:
        call(b"\xff\xff\xff", metadata=running.auth, timeout=10)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "jobgate.v1.AdmitRequest" in e.details()
    else:
        raise AssertionError("a request that is not an AdmitRequest was answered")


def shadowed_by_itself(tmp_path):
    """The demo deployment with itself as the shadowed candidate: every dry run on the
    general path, which offers the document to the shadow as it was judged."""
    candidate = tmp_path / "candidate.toml"
    candidate.parent.mkdir(parents=True, exist_ok=True)
    candidate.write_text(DEMO_CONFIG.read_text())
    return config_for(tmp_path).model_copy(update={"shadow": Shadow(config=str(candidate))})


def test_a_typed_dry_run_is_answered_as_the_general_path_answers_it(tmp_path):
    """A typed message's JSON form is answered by the core as the raw document it stands
    for, without lines and columns: the same bytes as the general path gives."""
    fast = Running(config_for(tmp_path / "fast"))
    general = Running(shadowed_by_itself(tmp_path / "general"))
    try:
        assert fast.gate.core_answers_dry_runs() and not general.gate.core_answers_dry_runs()
        bundle = example("spec_bundle.config_mode.dino_train.valid.json")
        typed = [
            admission_pb2.Document(jobspec=json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec())),
            admission_pb2.Document(jobspec=json_format.ParseDict(mutate(JOBSPEC, {"/metadata/name": "../x"}), jobspec_pb2.JobSpec())),
            admission_pb2.Document(jobspec=json_format.ParseDict(JOBSPEC, jobspec_pb2.JobSpec()), kind=report_pb2.KIND_SPEC_BUNDLE),
            admission_pb2.Document(spec_bundle=json_format.ParseDict(bundle, tao_pb2.SpecBundle())),
            admission_pb2.Document(spec_bundle=json_format.ParseDict(mutate(bundle, {"/command": "x"}), tao_pb2.SpecBundle())),
        ]
        answers = {}
        for name, r in (("fast", fast), ("general", general)):
            call = r.channel.unary_unary(ADMIT)
            answers[name] = [call(admission_pb2.AdmitRequest(document=d, dry_run=True).SerializeToString(), metadata=r.auth, timeout=30) for d in typed]
        assert answers["fast"] == answers["general"]
        reports = [admission_pb2.AdmitResponse.FromString(a).report for a in answers["fast"]]
        assert [r.verdict for r in reports] == ["pass", "fail", "fail", "pass", "fail"]
        assert all(v.line == 0 and v.column == 0 for r in reports for v in r.violations)
        assert any(r.violations for r in reports)
    finally:
        fast.close()
        general.close()


@pytest.mark.parametrize("quota", [False, True], ids=["no-quota", "quota"])
def test_an_admissions_log_line_names_its_job_id_and_a_refusals_its_rules(tmp_path, quota):
    """A real admission's clean report is answered from bytes encoded once
    (`ResponseEncoder`): its line still names the job opened, and a refused one's its
    rules, whether the record is written beside the call or in a commit group."""
    stream = Collected()
    r = Running(config_for(tmp_path) if quota else unlimited(tmp_path), log_stream=stream)
    try:
        opened = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(JOBSPEC).encode())), metadata=[*r.auth, ("x-request-id", "opened")], timeout=30)
        refused = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=b"{")), metadata=[*r.auth, ("x-request-id", "refused")], timeout=30)
        assert opened.job_id and opened.report.verdict == "pass" and not refused.job_id
        assert json.loads(r.store.document(opened.job_id))["metadata"]["owner"] == "alice"
    finally:
        r.close()
    logged = {e["request_id"]: e for e in stream.lines()}
    assert {k: logged["opened"][k] for k in ("verdict", "rules", "job_id")} == {"verdict": "pass", "rules": [], "job_id": opened.job_id}
    assert (logged["refused"]["verdict"], logged["refused"]["rules"], "job_id" in logged["refused"]) == ("fail", ["json.syntax"], False)
