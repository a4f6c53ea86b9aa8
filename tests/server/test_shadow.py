"""Shadow admission on a real server: every admission judged under a candidate
configuration as well, each disagreement counted by rule and logged, and no
response ever different from a server without a shadow."""

from __future__ import annotations

import json
import logging
import threading

from jobgate.config import Shadow as ShadowSettings
from jobgate.v1 import admission_pb2
from tests.helpers import DEMO_CONFIG, example, sample
from tests.server.helpers import Running, config_for

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()  # pinned to nemo-rl/grpo 0.7.0
OTHER = json.dumps({**sample("jobspec.valid.json"), "spec": {**sample("jobspec.valid.json")["spec"], "recipe": {**sample("jobspec.valid.json")["spec"]["recipe"], "name": "trl/grpo"}}}).encode()


def candidate(tmp_path):
    path = tmp_path / "candidate.toml"
    path.write_text(DEMO_CONFIG.read_text().replace('name = "nemo-rl/grpo", version = "0.7.0"', 'name = "nemo-rl/grpo", version = "0.8.0"'))
    return path


def shadowed(tmp_path, **settings):
    config = config_for(tmp_path)
    return config.model_copy(update={"shadow": ShadowSettings(config=str(candidate(tmp_path)), **settings)})


def sample_value(r, name: str, **labels) -> float:
    value = r.metrics.registry.get_sample_value(name, labels or None)
    return value or 0.0


def calls(r):
    doc = lambda raw: admission_pb2.Document(raw=raw)  # noqa: E731
    return [
        r.admission.Admit(admission_pb2.AdmitRequest(document=doc(JOBSPEC), dry_run=True), metadata=r.auth),
        r.admission.Admit(admission_pb2.AdmitRequest(document=doc(JOBSPEC)), metadata=r.auth),
        r.admission.Admit(admission_pb2.AdmitRequest(document=doc(OTHER), dry_run=True), metadata=r.auth),
        r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[doc(JOBSPEC), doc(OTHER), doc(JOBSPEC)], dry_run=True), metadata=r.auth),
        list(r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="1", document=doc(JOBSPEC), dry_run=True)]), metadata=r.auth)),
    ]


def shown(responses) -> list:
    """The responses as a client sees them, job ids aside (each server makes its own)."""
    out = []
    for response in responses:
        items = response if isinstance(response, list) else [response]
        for item in items:
            copy = type(item)()
            copy.CopyFrom(item)
            if hasattr(copy, "job_id"):
                copy.job_id = "x" if copy.job_id else ""
            out.append(copy.SerializeToString(deterministic=True))
    return out


def test_disagreements_are_counted_by_rule_and_responses_never_change(tmp_path, caplog):
    plain = Running(config_for(tmp_path / "plain"))
    try:
        expected = shown(calls(plain))
    finally:
        plain.close()
    r = Running(shadowed(tmp_path))
    try:
        with caplog.at_level(logging.INFO, logger="jobgate.shadow"):
            assert shown(calls(r)) == expected
            assert r.gate.shadow.drain()
        # judged: 2 Admit dry runs, 1 real Admit, 3 batch items, 1 stream message; the
        # nemo-rl JobSpecs (5 of 7) disagree, the trl one agrees.
        assert sample_value(r, "jobgate_shadow_judged_total") == 7
        assert sample_value(r, "jobgate_shadow_disagreements_total", rule="forge.handshake.version") == 5
        assert sample_value(r, "jobgate_shadow_dropped_total") == 0
        lines = [rec for rec in caplog.records if rec.getMessage() == "shadow disagreement"]
        assert len(lines) == 5
        fields = lines[0].fields
        assert (fields["account"], fields["verdict"], fields["candidate_verdict"]) == ("alice", "pass", "fail")
        assert fields["added"] == ["forge.handshake.version /spec/recipe/version"] and fields["removed"] == []
        assert len(r.store.list()) == 1  # the shadow opened nothing
    finally:
        r.close()


def test_a_full_shadow_queue_drops_and_counts_without_slowing_admission(tmp_path):
    r = Running(shadowed(tmp_path, queue=1))
    try:
        shadow = r.gate.shadow
        held, release = threading.Event(), threading.Event()
        judge = shadow._judge_document

        def slow(item):  # the shadow thread stuck on its first judgment
            held.set()
            release.wait(30)
            judge(item)

        shadow._judge_document = slow
        doc = admission_pb2.Document(raw=JOBSPEC)
        r.admission.Admit(admission_pb2.AdmitRequest(document=doc, dry_run=True), metadata=r.auth)
        assert held.wait(10)
        for _ in range(5):  # one fits the queue, four are dropped; every response comes back
            assert r.admission.Admit(admission_pb2.AdmitRequest(document=doc, dry_run=True), metadata=r.auth, timeout=10).report.verdict == "pass"
        assert sample_value(r, "jobgate_shadow_dropped_total") == 4
        release.set()
        assert shadow.drain()
        assert sample_value(r, "jobgate_shadow_judged_total") == 2
    finally:
        release.set()
        r.close()


def test_a_candidate_that_cannot_be_loaded_is_refused_at_start(tmp_path):
    from jobgate.server.app import StartupError

    config = config_for(tmp_path).model_copy(update={"shadow": ShadowSettings(config=str(tmp_path / "missing.toml"))})
    try:
        Running(config)
    except StartupError as e:
        assert str(e).startswith("shadow.config: ") and "missing.toml" in str(e)
    else:
        raise AssertionError("started with a shadow configuration that does not load")


def test_the_candidate_charges_spec_bundles_where_the_service_does(tmp_path):
    # Both sides give my-lab (alice's first project, where her spec-bundles go) 8 GPUs:
    # the second bundle of 8 is refused by both, on every path, with no disagreement.
    path = tmp_path / "candidate.toml"
    path.write_text(DEMO_CONFIG.read_text().replace("default = 64", "default = 64\nprojects = { my-lab = 8 }"))
    config = config_for(tmp_path)
    config = config.model_copy(update={"quota": config.quota.model_copy(update={"projects": {"my-lab": 8}}), "shadow": ShadowSettings(config=str(path))})
    bundle = admission_pb2.Document(raw=json.dumps(example("spec_bundle.config_mode.dino_train.valid.json")).encode())
    r = Running(config)
    try:
        first = r.admission.Admit(admission_pb2.AdmitRequest(document=bundle), metadata=r.auth)
        second = r.admission.Admit(admission_pb2.AdmitRequest(document=bundle), metadata=r.auth)
        dry = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[bundle], dry_run=True), metadata=r.auth).results[0]
        assert first.job_id and r.store.gpus_in_use("my-lab") == 8
        for refused in (second, dry):
            assert (refused.job_id, [(v.rule, v.field) for v in refused.report.violations]) == ("", [("forge.quota.project", "/compute_shape")])
        assert r.gate.shadow.drain()
        assert sample_value(r, "jobgate_shadow_judged_total") == 3
        assert sample_value(r, "jobgate_shadow_disagreements_total", rule="forge.quota.project") == 0
    finally:
        r.close()
