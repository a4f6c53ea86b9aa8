"""What a typed client gets from the protos, on a real server: the package options of
every language, the enum twins of every string of a closed set (always equal to the
string in responses; either form in requests, never two that disagree), and every
artifact as a typed message checked exactly as its bytes are."""

from __future__ import annotations

import json
import threading

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

from jobgate.server import wire
from jobgate.store.base import SOURCES, STATES
from jobgate.v1 import admission_pb2, job_pb2, jobs_pb2, jobspec_pb2, report_pb2, tao_pb2
from tests.helpers import EXAMPLES, UPSTREAM, error_detail, example, mutate, require_shared, sample, schema
from tests.server import typed_client
from tests.server.helpers import raw

require_shared()

JOBSPEC = sample("jobspec.valid.json")
PEERS = UPSTREAM / "peer-cases" / "tao"
FILES = (admission_pb2, job_pb2, jobs_pb2, jobspec_pb2, report_pb2, tao_pb2)


def test_every_proto_names_its_package_in_every_language():
    for module in FILES:
        options = module.DESCRIPTOR.GetOptions()
        stem = module.DESCRIPTOR.name.removeprefix("jobgate/v1/").removesuffix(".proto")
        assert (options.go_package, options.java_package, options.java_multiple_files, options.csharp_namespace, options.php_namespace, options.ruby_package) == (
            "github.com/jobgate/jobgate/gen/go/jobgate/v1;jobgatev1",
            "io.github.jobgate.v1",
            True,
            "Jobgate.V1",
            "Jobgate\\V1",
            "Jobgate::V1",
        ), module.DESCRIPTOR.name
        # Its own outer class: report.proto's default one would clash with message Report.
        assert options.java_outer_classname == {"jobspec": "JobSpec", "tao": "Tao"}.get(stem, stem.capitalize()) + "Proto"


def test_every_enum_value_carries_its_enum_s_prefix_and_zero_is_unspecified():
    """Enum values share the package's scope: each is prefixed by its enum's name."""
    enums = [e for m in FILES for e in m.DESCRIPTOR.enum_types_by_name.values()]
    assert sorted(e.name for e in enums) == ["JobState", "Kind", "RecipeStatus", "Severity", "TransitionSource", "Verdict"]
    for enum in enums:
        prefix = "".join(f"_{c}" if c.isupper() else c.upper() for c in enum.name).lstrip("_") + "_"
        assert all(v.name.startswith(prefix) for v in enum.values), enum.name
        assert enum.values_by_number[0].name == prefix + "UNSPECIFIED"


def test_every_string_of_a_closed_set_has_its_twin_and_every_twin_its_string():
    cases = [
        (wire.VERDICTS, report_pb2.Verdict, ("pass", "fail")),
        (wire.SEVERITIES, report_pb2.Severity, ("error", "warning", "off")),
        (wire.JOB_STATES, job_pb2.JobState, STATES),
        (wire.TRANSITION_SOURCES, job_pb2.TransitionSource, SOURCES),
        (wire.KIND_CODES, report_pb2.Kind, ("jobspec", "spec_bundle", "job_record", "best_rec")),
        (wire.RECIPE_STATUSES, admission_pb2.RecipeStatus, ("current", "compatible", "upgrade_advised", "incompatible", "sdk_incompatible", "runtime_removed", "malformed")),
    ]
    for twins, enum, words in cases:
        assert sorted(twins) == sorted(words)
        assert sorted(twins.values()) == sorted(n for n in enum.values() if n)
    assert wire.TRANSITION_SOURCES["backend-hook"] == job_pb2.TRANSITION_SOURCE_BACKEND_HOOK
    assert wire.JOB_STATES["PENDING"] == job_pb2.JOB_STATE_PENDING


def test_reports_carry_their_enum_twins_on_every_rpc(running):
    refused = mutate(JOBSPEC, {"/metadata/name": "../x"})
    warned = {**JOBSPEC, "metadata": {**JOBSPEC["metadata"], "owner": "mallory"}}
    docs = [raw(refused), raw(warned), raw({"neither": 1})]
    expected = [
        ("fail", report_pb2.VERDICT_FAIL, "jobspec", report_pb2.KIND_JOBSPEC, [("forge.name", "error", report_pb2.SEVERITY_ERROR)]),
        ("pass", report_pb2.VERDICT_PASS, "jobspec", report_pb2.KIND_JOBSPEC, [("forge.owner_overridden", "warning", report_pb2.SEVERITY_WARNING)]),
        ("fail", report_pb2.VERDICT_FAIL, "unknown", report_pb2.KIND_UNSPECIFIED, [("kind.unknown", "error", report_pb2.SEVERITY_ERROR)]),
    ]

    def shown(report):
        return (report.verdict, report.verdict_code, report.kind, report.kind_code, [(v.rule, v.severity, v.severity_code) for v in report.violations])

    admitted = [running.admission.Admit(admission_pb2.AdmitRequest(document=d, dry_run=True), metadata=running.auth).report for d in docs]
    # The dry-run batch of raw documents is answered by the core (rust/src/batch_wire.rs).
    batch = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=docs, dry_run=True), metadata=running.auth).results
    streamed = running.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id=str(i), document=d, dry_run=True) for i, d in enumerate(docs)]), metadata=running.auth)
    assert [shown(r) for r in admitted] == expected
    assert [shown(r.report) for r in batch] == expected
    assert [shown(r.report) for r in streamed] == expected
    assert all(v.default_severity == "" and v.default_severity_code == report_pb2.SEVERITY_UNSPECIFIED for r in admitted for v in r.violations)


def test_a_relaxed_rule_carries_both_severities_as_twins(tmp_path):
    """A severity the deployment's [rules] changed: default_severity_code beside
    default_severity, on the general path and the core's batch path alike."""
    from tests.server.helpers import Running, config_for

    config = config_for(tmp_path)
    config = config.model_copy(update={"rules": {"forge.owner_overridden": "off"}})
    r = Running(config)
    try:
        doc = raw({**JOBSPEC, "metadata": {**JOBSPEC["metadata"], "owner": "mallory"}})
        one = r.admission.Admit(admission_pb2.AdmitRequest(document=doc, dry_run=True), metadata=r.auth).report
        (item,) = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[doc], dry_run=True), metadata=r.auth).results
        for report in (one, item.report):
            (v,) = report.violations
            assert (v.rule, v.severity, v.severity_code, v.default_severity, v.default_severity_code) == ("forge.owner_overridden", "off", report_pb2.SEVERITY_OFF, "warning", report_pb2.SEVERITY_WARNING)
    finally:
        r.close()


def test_jobs_are_marked_listed_and_watched_by_enum(running):
    job_id = typed_client.admit(running.channel, raw(JOBSPEC), tuple(running.auth))
    backend = tuple(running.backend)
    got = running.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=running.auth)
    assert got.state_code == job_pb2.JOB_STATE_PENDING
    assert typed_client.mark(running.channel, job_id, job_pb2.JOB_STATE_RUNNING, job_pb2.TRANSITION_SOURCE_BACKEND_HOOK, backend) == job_pb2.JOB_STATE_RUNNING
    assert typed_client.running(running.channel, tuple(running.auth)) == [job_id]
    assert running.jobs.ListJobs(jobs_pb2.ListJobsRequest(state="RUNNING"), metadata=running.auth).jobs[0].id == job_id
    assert running.jobs.ListJobs(jobs_pb2.ListJobsRequest(state_code=job_pb2.JOB_STATE_PENDING), metadata=running.auth).jobs == []
    # Both forms, agreeing; the record itself keeps the strings of the seed's JSON.
    done = running.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state="COMPLETE", state_code=job_pb2.JOB_STATE_COMPLETE, source="poller"), metadata=running.backend)
    assert done.state_code == job_pb2.JOB_STATE_COMPLETE
    record = json_format.MessageToDict(done.job)
    assert [(t["state"], t["source"]) for t in record["transitions"]] == [("PENDING", "agent"), ("RUNNING", "backend-hook"), ("COMPLETE", "poller")]
    assert record["terminal_state"] == "COMPLETE"
    assert typed_client.history(running.channel, job_id, tuple(running.auth)) == [
        (job_pb2.JOB_STATE_PENDING, job_pb2.TRANSITION_SOURCE_AGENT),
        (job_pb2.JOB_STATE_RUNNING, job_pb2.TRANSITION_SOURCE_BACKEND_HOOK),
        (job_pb2.JOB_STATE_COMPLETE, job_pb2.TRANSITION_SOURCE_POLLER),
    ]


def test_a_watch_reads_the_same_as_transitions(running):
    """WatchJobResponse keeps Transition's fields under their numbers: a client that
    reads the stream as Transitions reads what it always did."""
    job_id = typed_client.admit(running.channel, raw(JOBSPEC), tuple(running.auth))
    running.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, state="CANCELED", message="by the user", source="agent"), metadata=running.backend)
    watch = running.channel.unary_stream("/jobgate.v1.JobService/WatchJob", request_serializer=jobs_pb2.WatchJobRequest.SerializeToString, response_deserializer=job_pb2.Transition.FromString)
    transitions = list(watch(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=running.auth, timeout=20))
    for t in transitions:
        t.DiscardUnknownFields()  # the enum twins, which a Transition has no field for
    stored = [job_pb2.Transition(**t) for _, t in running.store.transitions(job_id, after=0)]
    assert transitions == stored
    assert [(t.state, t.message, t.source) for t in transitions] == [("PENDING", "record opened at admission", "agent"), ("CANCELED", "by the user", "agent")]


@pytest.mark.parametrize(
    ("request_fields", "named"),
    [
        ({"state": "RUNNING", "state_code": job_pb2.JOB_STATE_ERROR}, ["state", "state_code"]),
        ({"state_code": job_pb2.JOB_STATE_RUNNING, "source": "agent", "source_code": job_pb2.TRANSITION_SOURCE_POLLER}, ["source", "source_code"]),
        ({"state_code": 42}, ["state_code"]),
        ({"state": "RUNNING", "source_code": 9}, ["source_code"]),
    ],
)
def test_a_mark_whose_forms_disagree_is_invalid_argument_naming_them(running, request_fields, named):
    job_id = typed_client.admit(running.channel, raw(JOBSPEC), tuple(running.auth))
    with pytest.raises(grpc.RpcError) as e:
        running.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=job_id, **request_fields), metadata=running.backend)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [f.field for f in error_detail(e.value, error_details_pb2.BadRequest).field_violations] == named
    assert [t["state"] for _, t in running.store.transitions(job_id, after=0)] == ["PENDING"]  # nothing written


def test_the_messages_name_what_disagrees(running):
    with pytest.raises(grpc.RpcError) as e:
        running.jobs.ListJobs(jobs_pb2.ListJobsRequest(state="RUNNING", state_code=job_pb2.JOB_STATE_ERROR), metadata=running.auth)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "state, state_code: state is 'RUNNING' and state_code is 'ERROR': they disagree; give one, or both alike"
    with pytest.raises(grpc.RpcError) as e:
        running.jobs.ListJobs(jobs_pb2.ListJobsRequest(state_code=42), metadata=running.auth)
    assert e.value.details() == "state_code: 42 is not a value of jobgate.v1.JobState"


def test_recipe_status_carries_its_twin(running):
    lock = (UPSTREAM / "starforge" / "recipe.lock.v3.nemo-rl-grpo.json").read_bytes()
    for body, status, code in ((lock, "current", admission_pb2.RECIPE_STATUS_CURRENT), (b"{not json", "malformed", admission_pb2.RECIPE_STATUS_MALFORMED)):
        answer = running.admission.RecipeStatus(admission_pb2.RecipeStatusRequest(lock=body), metadata=running.auth)
        assert (answer.status, answer.status_code) == (status, code)


# ---- every artifact as a typed message

MESSAGES = {"job_record": job_pb2.JobRecord, "best_rec": tao_pb2.BestRec}


def documents(kind: str) -> list[tuple[str, dict]]:
    """The upstream examples and the peer cases of `kind`."""
    found = [(p.name, json.loads(p.read_bytes())) for p in sorted(EXAMPLES.glob(f"{kind}.*.json"))]
    return found + [(f"peer-cases/{p.name}", json.loads(p.read_bytes())) for p in sorted((PEERS / kind).glob("*.json"))]


def unlocated(report: report_pb2.Report) -> report_pb2.Report:
    """The report without lines and columns: a typed message has no text to point into."""
    copy = report_pb2.Report()
    copy.CopyFrom(report)
    for v in copy.violations:
        v.line = v.column = 0
    return copy


# The documents a typed message cannot hold: a property the schema refuses (the message
# has no field for it) or a value of another JSON type than its field's.
UNTYPED = {"job_record": set(), "best_rec": set()}
# Those it holds reshaped, with the same report: an empty upload_excludes, an optional
# list proto3 cannot tell from an absent one.
WRITTEN_WITHOUT_EXCLUDES = ("leading_underscore_arch", "open_explicit_results_dir", "open_weird_arch_name", "platform_normalized_Docker_space", "platform_normalized_My_Platform", "platform_normalized_SLURM", "platform_normalized_hyphens_kratos", "platform_normalized_my_2space_platform", "redacted_url_userinfo_results_dir", "results_dir_token_segment_legit")
RESHAPED = {"job_record": {f"peer-cases/writer_{name}.json" for name in WRITTEN_WITHOUT_EXCLUDES}, "best_rec": set()}


def as_json(message, kind: str) -> dict:
    """A typed message's JSON form as the server takes it: with the arrays the schema
    requires even when empty (proto3 cannot tell an empty list from an absent one)."""
    return {**{name: [] for name in wire.REQUIRED_LISTS[kind]}, **json_format.MessageToDict(message)}


def raw_of(doc: dict, kind: str) -> admission_pb2.Document:
    return admission_pb2.Document(raw=json.dumps(doc).encode(), kind=report_pb2.Kind.Value(f"KIND_{kind.upper()}"))


def test_every_typed_member_of_a_document_is_named_as_its_kind():
    members = {f.name for f in admission_pb2.Document.DESCRIPTOR.oneofs_by_name["body"].fields}
    assert members - {"raw"} == wire.TYPED == {"jobspec", "spec_bundle", "job_record", "best_rec"}
    # The numbers the core's batch decoder leaves to the general path (rust/src/batch_wire.rs).
    assert sorted(admission_pb2.Document.DESCRIPTOR.fields_by_name[m].number for m in wire.TYPED) == [2, 3, 7, 8]


def test_the_required_lists_are_the_published_schemas():
    assert wire.REQUIRED_LISTS["jobspec"] == ()  # no top-level array
    for kind in ("spec_bundle", "job_record", "best_rec"):
        lists = wire.REQUIRED_LISTS[kind]
        published = schema(kind)
        assert lists == tuple(p for p in published["required"] if published["properties"][p].get("type") == "array"), kind


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_a_typed_artifact_gets_the_report_of_its_bytes(running, kind):
    """Every upstream example and peer case of the kind that a typed message holds:
    its report is that of the document's bytes (without lines and columns)."""
    compared, untyped, reshaped = 0, set(), set()
    for name, doc in documents(kind):
        try:
            typed = json_format.ParseDict(doc, MESSAGES[kind]())
        except json_format.ParseError:
            untyped.add(name)
            continue
        if as_json(typed, kind) != doc:
            assert (doc["upload_excludes"], as_json(typed, kind)) == ([], {k: v for k, v in doc.items() if k != "upload_excludes"}), name
            reshaped.add(name)
        as_typed = typed_client.dry_run(running.channel, admission_pb2.Document(**{kind: typed}), tuple(running.auth))
        as_bytes = typed_client.dry_run(running.channel, raw_of(doc, kind), tuple(running.auth))
        assert as_typed == unlocated(as_bytes), name
        assert as_typed.kind == kind
        compared += 1
    assert (untyped, reshaped) == (UNTYPED[kind], RESHAPED[kind])
    assert compared == len(documents(kind)) - len(untyped)


def test_an_empty_required_list_is_sent_as_one(running):
    """A best_rec with no recommendations besides the best is valid, typed too."""
    doc = {**example("best_rec.valid.json"), "all_recs": []}
    typed = json_format.ParseDict(doc, tao_pb2.BestRec())
    report = typed_client.dry_run(running.channel, admission_pb2.Document(best_rec=typed), tuple(running.auth))
    assert (report.verdict, list(report.violations)) == ("pass", [])
    bundle = json_format.ParseDict({**example("spec_bundle.config_mode.dino_train.valid.json"), "declared_inputs": []}, tao_pb2.SpecBundle())
    as_typed = typed_client.dry_run(running.channel, admission_pb2.Document(spec_bundle=bundle), tuple(running.auth))
    as_bytes = typed_client.dry_run(running.channel, raw_of(as_json(bundle, "spec_bundle"), "spec_bundle"), tuple(running.auth))
    assert as_typed == unlocated(as_bytes)
    assert "schema.required" not in [v.rule for v in as_typed.violations]


def test_the_typed_best_rec_example_round_trips_and_passes(running):
    doc = example("best_rec.valid.json")
    typed = json_format.ParseDict(doc, tao_pb2.BestRec())
    assert json_format.MessageToDict(typed) == doc
    report = typed_client.dry_run(running.channel, admission_pb2.Document(best_rec=typed), tuple(running.auth))
    assert (report.verdict, report.verdict_code, report.kind, report.kind_code, list(report.violations)) == ("pass", report_pb2.VERDICT_PASS, "best_rec", report_pb2.KIND_BEST_REC, [])
    dotted = json_format.ParseDict(mutate(doc, {"/best/specs/train.lr": 1}), tao_pb2.BestRec())
    refused = typed_client.dry_run(running.channel, admission_pb2.Document(best_rec=dotted), tuple(running.auth))
    assert typed_client.refused(refused) and typed_client.errors(refused) == ["tao.dotted_key"]


def test_a_typed_job_record_or_best_rec_is_checked_not_admitted(running):
    for kind, name in (("job_record", "job_record.at_open.valid.json"), ("best_rec", "best_rec.valid.json")):
        typed = json_format.ParseDict(example(name), MESSAGES[kind]())
        with pytest.raises(grpc.RpcError) as e:
            running.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(**{kind: typed})), metadata=running.auth)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_detail(e.value, error_details_pb2.BadRequest).field_violations[0].field == "document"
    assert running.store.list() == []


def test_a_batch_of_typed_artifacts_matches_the_raw_batch(running):
    """Typed items leave the core's batch path for the general one: same answers."""
    docs = [("job_record", example("job_record.at_open.valid.json")), ("best_rec", example("best_rec.valid.json")), ("best_rec", mutate(example("best_rec.valid.json"), {"/direction": "up"}))]
    typed = [admission_pb2.Document(**{kind: json_format.ParseDict(doc, MESSAGES[kind]())}) for kind, doc in docs]
    plain = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[raw(doc) for _, doc in docs], dry_run=True), metadata=running.auth)
    mixed = running.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=typed, dry_run=True), metadata=running.auth)
    assert [r.report for r in mixed.results] == [unlocated(r.report) for r in plain.results]
    assert [r.report.verdict for r in mixed.results] == ["pass", "pass", "fail"]


def test_a_watch_ends_at_a_terminal_state_given_by_enum(running):
    job_id = typed_client.admit(running.channel, raw(JOBSPEC), tuple(running.auth))
    seen: list = []
    watcher = threading.Thread(target=lambda: seen.extend(typed_client.history(running.channel, job_id, tuple(running.auth))))
    watcher.start()
    typed_client.mark(running.channel, job_id, job_pb2.JOB_STATE_ERROR, job_pb2.TRANSITION_SOURCE_UNSPECIFIED, tuple(running.backend))
    watcher.join(20)
    assert seen == [(job_pb2.JOB_STATE_PENDING, job_pb2.TRANSITION_SOURCE_AGENT), (job_pb2.JOB_STATE_ERROR, job_pb2.TRANSITION_SOURCE_AGENT)]
