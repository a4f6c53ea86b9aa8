"""Project quotas on a real server over each store: what is admitted is what is charged
(a count the quota cannot charge is refused whatever `[rules]` relaxes), every kind
that launches is charged (a spec-bundle by its compute_shape, in its account's
project), a refusal never tells another project's usage or quota, and a retry is
judged under the grant in force."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2

from jobgate.config import Account
from jobgate.server.auth import token_hash
from jobgate.v1 import admission_pb2, jobs_pb2, jobspec_pb2
from tests.helpers import error_detail, example, mutate, sample, with_literal
from tests.server.helpers import Running, bearer
from tests.store.helpers import config_on

VISION = mutate(sample("jobspec.valid.json"), {"/metadata/project": "vision"})  # 8 GPUs
SPEECH = mutate(VISION, {"/metadata/project": "speech"})
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")  # compute_shape: 8 GPUs on 1 node
TEAMS = {
    "alice": {"token": token_hash("alice-token"), "projects": ["vision"], "roles": ["submitter"]},
    "carol": {"token": token_hash("carol-token"), "projects": ["vision"], "roles": ["submitter"]},
    "bob": {"token": token_hash("bob-token"), "projects": ["speech"], "roles": ["submitter"]},
    "poller": {"token": token_hash("poller-token"), "roles": ["backend"]},
}
ALICE, CAROL, BOB, POLLER = (bearer(f"{n}-token") for n in ("alice", "carol", "bob", "poller"))
FORBIDDEN = [("forge.project.forbidden", "/metadata/project")]


def serve(backend, tmp_path, *, quotas: dict[str, int], rules: dict | None = None, accounts: dict = TEAMS) -> Running:
    config = config_on(backend, tmp_path, accounts)
    update = {"quota": config.quota.model_copy(update={"projects": quotas})}
    if rules:
        update["rules"] = rules
    return Running(config.model_copy(update=update))


@pytest.fixture
def started():
    """Closes the servers a test starts."""
    running: list[Running] = []
    yield lambda *args, **kwargs: running.append(serve(*args, **kwargs)) or running[-1]
    for r in running:
        r.close()


def document(doc, key: str = "") -> admission_pb2.Document:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return admission_pb2.Document(raw=data, idempotency_key=key)


def admit(r: Running, doc, md, key: str = "", dry_run: bool = False) -> admission_pb2.AdmitResponse:
    return r.admission.Admit(admission_pb2.AdmitRequest(document=document(doc, key), dry_run=dry_run), metadata=md, timeout=60)


def batch(r: Running, docs, md, keys=None, dry_run: bool = False, as_document=None) -> list:
    keys = keys or [""] * len(docs)
    documents = [as_document(d) if as_document else document(d, k) for d, k in zip(docs, keys, strict=True)]
    return list(r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=documents, dry_run=dry_run), metadata=md, timeout=60).results)


def stream(r: Running, docs, md, keys=None, dry_run: bool = False) -> list:
    keys = keys or [""] * len(docs)
    requests = [admission_pb2.AdmitStreamRequest(request_id=str(i), document=document(d, k), dry_run=dry_run) for i, (d, k) in enumerate(zip(docs, keys, strict=True))]
    return list(r.admission.AdmitStream(iter(requests), metadata=md, timeout=60))


def pairs(response) -> list[tuple[str, str]]:
    return [(v.rule, v.field) for v in response.report.violations]


def held(r: Running) -> tuple[list[str], dict[str, int]]:
    """Every record's id, and the GPUs each project holds."""
    return [rec["id"] for rec in r.store.list(limit=1000)], {p: r.store.gpus_in_use(p) for p in ("vision", "speech")}


def with_accounts(r: Running, **projects: list[str]) -> None:
    """Reloads the server with the accounts' projects changed."""
    accounts = {name: Account(**(table | ({"projects": projects[name]} if name in projects else {}))) for name, table in TEAMS.items()}
    r.server.reload(r.config.model_copy(update={"accounts": accounts}))


# ---- what is admitted is what is charged


RELAXED = {"schema.type": "off", "schema.maximum": "off", "schema.minimum": "off"}


def test_a_relaxed_deployment_refuses_a_count_it_cannot_charge_and_charges_what_it_admits(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"vision": 64}, rules=RELAXED)
    per_node, gpus = "/spec/resources/pools/0/gpus_per_node", "/compute_shape/gpus"
    cases = [
        (with_literal(VISION, per_node, "1e300"), [("forge.quota.job", per_node), ("schema.type", per_node)]),
        (with_literal(VISION, per_node, "18446744073709551621"), [("forge.quota.job", per_node), ("schema.type", per_node)]),
        (with_literal(VISION, per_node, '"abc"'), [("forge.quota.job", per_node), ("schema.type", per_node)]),
        (with_literal(VISION, per_node, "1.5"), [("forge.quota.job", per_node), ("schema.type", per_node)]),
        (with_literal(VISION, per_node, "9223372036854775808"), [("forge.quota.job", per_node), ("schema.maximum", per_node)]),
        (with_literal(VISION, per_node, "-1"), [("forge.quota.job", per_node), ("schema.minimum", per_node)]),
        (with_literal(BUNDLE, gpus, "1e300"), [("forge.quota.job", gpus), ("schema.maximum", gpus), ("tao.gpu_spec_key.mismatch", "/gpu_spec_key")]),
        (with_literal(BUNDLE, gpus, '"abc"'), [("forge.quota.job", gpus), ("schema.type", gpus)]),
    ]
    singles = [admit(r, data, ALICE) for data, _ in cases]
    batched = batch(r, [data for data, _ in cases], ALICE)
    streamed = stream(r, [data for data, _ in cases], ALICE)
    for responses in (singles, batched, streamed):
        assert [(x.report.verdict, x.job_id, pairs(x)) for x in responses] == [("fail", "", expected) for _, expected in cases]
        # the relaxed rules are listed as off; the locked one is an error
        assert [v.severity for v in responses[0].report.violations] == ["error", "off"]
    assert held(r) == ([], {"vision": 0, "speech": 0})
    # what passes is charged exactly what it asks for
    job = admit(r, VISION, ALICE).job_id
    bundle = admit(r, BUNDLE, ALICE).job_id
    assert held(r) == ([job, bundle], {"vision": 16, "speech": 0})


# ---- every kind that launches is charged


def test_spec_bundles_are_charged_to_their_accounts_project(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"vision": 64})
    # twenty bundles of 8 GPUs into a project of 64: eight are admitted
    results = batch(r, [BUNDLE] * 20, ALICE)
    admitted = [x.job_id for x in results if x.job_id]
    assert len(admitted) == 8 and [x.job_id for x in results[:8]] == admitted
    assert held(r) == (admitted, {"vision": 64, "speech": 0})
    over = [("forge.quota.project", "/compute_shape")]
    message = "a spec-bundle runs in the account's project \"vision\", which holds 64 GPUs in unfinished jobs; 8 more would exceed its quota of 64"
    for x in results[8:]:
        assert (x.report.verdict, pairs(x), x.report.violations[0].message) == ("fail", over, message)
    # on every path, dry runs included; and a teammate's JobSpec finds the quota spent
    responses = [
        admit(r, BUNDLE, ALICE),
        admit(r, BUNDLE, ALICE, dry_run=True),
        *batch(r, [BUNDLE], ALICE, dry_run=True),  # answered by the core whole
        *stream(r, [BUNDLE], ALICE),
        *stream(r, [BUNDLE], ALICE, dry_run=True),
    ]
    assert [(x.job_id, pairs(x)) for x in responses] == [("", over)] * len(responses)
    assert pairs(admit(r, VISION, CAROL)) == [("forge.quota.project", "/spec/resources")]
    assert held(r) == (admitted, {"vision": 64, "speech": 0})
    # a bundle that finishes gives its GPUs back
    r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=admitted[0], state="COMPLETE", source="poller"), metadata=POLLER, timeout=60)
    assert r.store.gpus_in_use("vision") == 56
    assert admit(r, VISION, CAROL).job_id


def test_a_batch_consumes_the_quota_in_item_order_across_kinds(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"vision": 16})
    results = batch(r, [BUNDLE, VISION, BUNDLE, VISION], ALICE)
    assert [(bool(x.job_id), pairs(x)) for x in results] == [
        (True, []),
        (True, []),
        (False, [("forge.quota.project", "/compute_shape")]),
        (False, [("forge.quota.project", "/spec/resources")]),
    ]
    assert held(r)[1] == {"vision": 16, "speech": 0}
    assert [r.store.project(x.job_id) for x in results[:2]] == ["vision", "vision"]


# ---- another project's usage and quota are not told


def typed(doc) -> admission_pb2.Document:
    return admission_pb2.Document(jobspec=json_format.ParseDict(doc, jobspec_pb2.JobSpec()))


def test_a_refusal_never_tells_another_projects_usage_or_quota(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"speech": 24})
    assert all(admit(r, SPEECH, BOB).job_id for _ in range(3))
    before = held(r)
    assert before[1] == {"vision": 0, "speech": 24}
    # alice, granted only vision, asks about speech every way there is
    responses = [
        admit(r, SPEECH, ALICE),
        admit(r, SPEECH, ALICE, dry_run=True),
        *batch(r, [SPEECH, VISION], ALICE),
        *batch(r, [SPEECH, SPEECH], ALICE, dry_run=True),  # answered by the core whole
        *batch(r, [SPEECH], ALICE, dry_run=True, as_document=typed),
        *stream(r, [SPEECH], ALICE),
        *stream(r, [SPEECH], ALICE, dry_run=True),
    ]
    refused = [x for x in responses if x.report.violations]
    assert len(refused) == 8
    for x in refused:
        assert (x.report.verdict, x.job_id, pairs(x)) == ("fail", "", FORBIDDEN)
        assert x.report.violations[0].message == 'this account may not submit to project "speech"; it may submit to "vision"'
    # her own document in the batch is admitted, and nothing of speech changed
    ids, usage = held(r)
    assert ids[: len(before[0])] == before[0] and usage == {"vision": 8, "speech": 24}


# ---- a retry is judged under the grant in force


def test_a_retry_after_losing_the_project_is_forbidden_and_names_no_job(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"vision": 64})
    job = admit(r, VISION, ALICE, key="first-job").job_id
    bundle = admit(r, BUNDLE, ALICE, key="first-bundle").job_id
    assert job and bundle and r.store.project(bundle) == "vision"
    before = held(r)
    with_accounts(r, alice=["speech"])  # alice moves to speech; her jobs stay in vision
    keys = ["first-job", "first-bundle"]
    responses = [
        admit(r, VISION, ALICE, key="first-job"),
        admit(r, BUNDLE, ALICE, key="first-bundle"),
        *batch(r, [VISION, BUNDLE], ALICE, keys=keys),  # keys recalled before any item
        *stream(r, [VISION, BUNDLE], ALICE, keys=keys),
    ]
    expected = [
        ("fail", "", [("forge.project.forbidden", "/metadata/project")], "jobspec"),
        ("fail", "", [("forge.project.forbidden", "")], "spec_bundle"),
    ] * 3
    assert [(x.report.verdict, x.job_id, pairs(x), x.report.kind) for x in responses] == expected
    for x in responses:
        assert x.report.violations[0].message == 'this account may not submit to project "vision"; it may submit to "speech"'
        assert job not in str(x) and bundle not in str(x)
    # the key sent with another request: refused, still without the job's id
    for call in (
        lambda: admit(r, SPEECH, ALICE, key="first-job"),
        lambda: batch(r, [SPEECH], ALICE, keys=["first-job"]),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
        info = error_detail(e.value, error_details_pb2.ErrorInfo)
        assert info.reason == "IDEMPOTENCY_KEY_REUSED" and "job_id" not in info.metadata
        assert job not in e.value.details()
    assert held(r) == before
    # granted vision again: the retry is the first admission's response
    with_accounts(r, alice=["vision"])
    assert admit(r, VISION, ALICE, key="first-job").job_id == job
    assert [x.job_id for x in batch(r, [VISION, BUNDLE], ALICE, keys=keys)] == [job, bundle]
    assert held(r) == before


# ---- one reading of metadata.project for the grant, the quota and the record

# Python's str.strip takes \x1c-\x1f as whitespace; Rust's str::trim keeps them.
SPELLINGS = ["vision\x1f", "\x1cvision", "\x1dvision\x1e", " \x1fvision\x1c ", "\x1evision"]


def test_a_project_spelled_with_control_characters_is_charged_as_the_project_it_passes_as(backend, tmp_path, started):
    # The attack: with forge.project a warning, "vision\x1f" passed alice's grant as
    # "vision" but was recorded (and charged) as "vision\x1f": no quota, hidden from her.
    r = started(backend, tmp_path, quotas={"vision": 8}, rules={"forge.project": "warning"})
    first = admit(r, VISION, ALICE).job_id
    assert first and held(r) == ([first], {"vision": 8, "speech": 0})
    spelled = [mutate(VISION, {"/metadata/project": s}) for s in SPELLINGS]
    over = [("forge.quota.project", "/spec/resources")]
    responses = [
        *(admit(r, d, ALICE) for d in spelled),
        *(admit(r, d, ALICE, dry_run=True) for d in spelled),
        *batch(r, spelled, ALICE),
        *batch(r, spelled, ALICE, dry_run=True),
        *stream(r, spelled, ALICE),
    ]
    for x in responses:
        errors = [(v.rule, v.field) for v in x.report.violations if v.severity == "error"]
        assert (x.report.verdict, x.job_id, errors) == ("fail", "", over)
        quota = next(v for v in x.report.violations if v.rule == "forge.quota.project")
        assert quota.message == 'project "vision" holds 8 GPUs in unfinished jobs; 8 more would exceed its quota of 8'
    assert held(r) == ([first], {"vision": 8, "speech": 0})
    # with room again, each spelling is admitted as vision, charged there and seen by alice
    r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=first, state="COMPLETE", source="poller"), metadata=POLLER, timeout=60)
    job = admit(r, spelled[0], ALICE).job_id
    assert job and r.store.project(job) == "vision" and r.store.gpus_in_use("vision") == 8
    assert r.jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job), metadata=ALICE, timeout=60).job.id == job
    assert [x.job_id for x in batch(r, spelled[1:], ALICE)] == [""] * (len(SPELLINGS) - 1)
    assert {r.store.project(i) for i in held(r)[0]} == {"vision"}


def test_a_launch_whose_project_the_grant_does_not_reach_is_never_admitted_uncharged(gate):
    from types import SimpleNamespace

    from jobgate.server.gate import Grant, Judged

    gate.config = gate.config.model_copy(update={"quota": gate.config.quota.model_copy(update={"projects": {"vision": 8}})})
    grant = Grant(("vision",), "vision")
    data = json.dumps(VISION).encode()
    real = gate.judge(data, None, "alice", dry_run=False, grant=grant)
    # facts read otherwise than the core's check did: the grant does not reach them
    fields = ("kind", "launches", "project", "gpus", "network_arch", "action", "image", "upload_excludes", "stamped", "charge")
    facts = SimpleNamespace(**{f: getattr(real.judgement.facts, f) for f in fields} | {"project": "vision\x1f"})
    forged = Judged(SimpleNamespace(report=real.judgement.report, facts=facts, with_usage=real.judgement.with_usage))
    admission = gate.admit(data, None, "alice", dry_run=False, judged=forged, grant=grant)
    assert (admission.report.ok, admission.job_id) == (False, "")
    assert [(v.rule, v.message) for v in admission.report.violations] == [
        ("forge.project.forbidden", 'this account may not submit to project "vision\\u001f"; it may submit to "vision"'),
    ]
    assert gate.store.list(limit=10) == []


# ---- a dry-run batch answers as the real batch would


def test_a_dry_run_batch_consumes_the_quota_in_item_order(backend, tmp_path, started):
    r = started(backend, tmp_path, quotas={"vision": 16})
    over = 'project "vision" holds 16 GPUs in unfinished jobs; 8 more would exceed its quota of 16'
    bundle_over = "a spec-bundle runs in the account's project \"vision\", which holds 16 GPUs in unfinished jobs; 8 more would exceed its quota of 16"

    def answers(results) -> list:
        return [(x.report.verdict, [(v.rule, v.field, v.message) for v in x.report.violations]) for x in results]

    expected = [("pass", []), ("pass", []), ("fail", [("forge.quota.project", "/spec/resources", over)])]
    assert answers(batch(r, [VISION] * 3, ALICE, dry_run=True)) == expected  # answered by the core whole
    assert answers(batch(r, [VISION] * 3, ALICE, dry_run=True, as_document=typed)) == expected
    bundles = [("pass", []), ("pass", []), ("fail", [("forge.quota.project", "/compute_shape", bundle_over)])]
    assert answers(batch(r, [BUNDLE] * 3, ALICE, dry_run=True)) == bundles
    # a refused item consumes nothing; across kinds the order holds too
    mixed = [SPEECH, BUNDLE, VISION, BUNDLE]
    dry = answers(batch(r, mixed, ALICE, dry_run=True))
    assert [v for v, _ in dry] == ["fail", "pass", "pass", "fail"]
    assert held(r) == ([], {"vision": 0, "speech": 0})
    # what the real batches answer, item for item, each from an empty project
    for docs, answered in (([VISION] * 3, expected), ([BUNDLE] * 3, bundles), (mixed, dry)):
        results = batch(r, docs, ALICE)
        assert answers(results) == answered
        for x in results:
            if x.job_id:
                r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=x.job_id, state="COMPLETE", source="poller"), metadata=POLLER, timeout=60)
        assert r.store.gpus_in_use("vision") == 0


def test_an_admission_reads_its_document_once_quota_and_record_included(gate):
    """One call into the core per document: the report, the facts, the stamped record
    and the project quota (judged in the commit group on the usage read there) all come
    from `Validator.judge`; nothing checks or reads the document again."""
    from collections import Counter

    import jobgate
    from jobgate.server.gate import Grant

    calls: Counter[str] = Counter()

    class Counting(jobgate.Validator):
        __slots__ = ()

        def judge(self, *args, **kwargs):
            calls["judge"] += 1
            return super().judge(*args, **kwargs)

        def check(self, *args, **kwargs):
            calls["check"] += 1
            return super().check(*args, **kwargs)

        def facts(self, *args, **kwargs):
            calls["facts"] += 1
            return super().facts(*args, **kwargs)

    gate.config = gate.config.model_copy(update={"quota": gate.config.quota.model_copy(update={"projects": {"vision": 20}})})
    gate.validator = Counting(gate.config)
    grant, data = Grant(("vision",), "vision"), json.dumps(VISION).encode()
    outcomes = [gate.admit(data, None, "alice", dry_run=dry, grant=grant) for dry in (True, False, False, False)]
    assert calls == {"judge": 4}
    assert [(a.report.ok, bool(a.job_id), a.gpus_in_use) for a in outcomes] == [(True, False, 0), (True, True, 0), (True, True, 8), (False, False, 16)]
    assert [(v.rule, v.field) for v in outcomes[-1].report.violations] == [("forge.quota.project", "/spec/resources")]
    assert outcomes[-1].report.violations[0].line == 1  # placed in the text, as check places it
    job = outcomes[1].job_id
    assert (gate.store.project(job), gate.store.gpus_in_use("vision")) == ("vision", 16)
    assert json.loads(gate.store.document(job))["metadata"]["owner"] == "alice"  # stamped in the same reading
