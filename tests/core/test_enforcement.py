"""Enforcement per rule (`[rules]`, `[rules.projects.NAME]`): a relaxed violation still
appears, with its effective severity and the one the rules gave; rules that protect
the gate itself cannot be relaxed; every entry point agrees."""

from __future__ import annotations

import json

import pytest

import jobgate
from jobgate.cli import main
from jobgate.config import ConfigError, from_mapping
from jobgate.v1 import admission_pb2
from tests.helpers import DEMO_CONFIG, run_cli, sample
from tests.server.helpers import Running, config_for

# A JobSpec of my-lab that sets an entrypoint (forge.source.entrypoint, an error).
ENTRYPOINT = {**sample("jobspec.valid.json"), "spec": {**sample("jobspec.valid.json")["spec"], "source": {**sample("jobspec.valid.json")["spec"]["source"], "entrypoint": "train.py"}}}


def levels(report) -> list[tuple[str, str, str | None]]:
    return [(v.rule, v.severity, v.default_severity) for v in report.violations]


def with_project(doc: dict, project: str) -> dict:
    return {**doc, "metadata": {**doc["metadata"], "project": project}}


def test_a_deployment_relaxes_a_rule_and_the_report_says_so():
    data = json.dumps(ENTRYPOINT).encode()
    assert levels(jobgate.Validator().check(data)) == [("forge.source.entrypoint", "error", None)]
    relaxed = jobgate.Validator({"rules": {"forge.source.entrypoint": "warning"}}).check(data)
    assert levels(relaxed) == [("forge.source.entrypoint", "warning", "error")]
    assert (relaxed.verdict, relaxed.errors, relaxed.warnings) == ("pass", 0, 1)
    shown = relaxed.to_dict()["violations"][0]
    assert (shown["severity"], shown["default_severity"]) == ("warning", "error")
    off = jobgate.Validator({"rules": {"forge.source.entrypoint": "off"}}).check(data)
    assert levels(off) == [("forge.source.entrypoint", "off", "error")]  # still listed, never counted
    assert (off.verdict, off.errors, off.warnings) == ("pass", 0, 0)
    # and a warning made an error blocks
    warned = {**sample("jobspec.valid.json"), "unknown_field": 1}
    strict = jobgate.Validator({"rules": {"schema.additionalProperties": "error"}}).check(json.dumps(warned).encode())
    assert levels(strict) == [("schema.additionalProperties", "error", "warning")] and strict.verdict == "fail"


def test_a_project_sets_its_own_level_before_the_deployment():
    settings = {"rules": {"forge.source.entrypoint": "warning", "projects": {"vision": {"forge.source.entrypoint": "off"}, "strict": {"forge.source.entrypoint": "error"}}}}
    v = jobgate.Validator(settings)
    by_project = {p: levels(v.check(json.dumps(with_project(ENTRYPOINT, p)).encode())) for p in ("my-lab", "vision", "strict")}
    assert by_project == {
        "my-lab": [("forge.source.entrypoint", "warning", "error")],
        "vision": [("forge.source.entrypoint", "off", "error")],
        "strict": [("forge.source.entrypoint", "error", None)],
    }
    many = v.check_many([json.dumps(with_project(ENTRYPOINT, p)).encode() for p in ("my-lab", "vision")])
    assert [levels(r) for r in many] == [by_project["my-lab"], by_project["vision"]]


@pytest.mark.parametrize(
    "rule",
    ["json.syntax", "json.duplicate_key", "limits.size", "kind.unknown", "tao.supporting_file.sha256_mismatch", "tao.staging.conflict", "forge.quota.project", "forge.quota.job", "forge.project.forbidden", "tao.execution.secret", "tao.record.secret"],
)
def test_rules_that_protect_the_gate_cannot_be_relaxed(rule):
    for table in ({"rules": {rule: "warning"}}, {"rules": {"projects": {"vision": {rule: "off"}}}}):
        with pytest.raises(ConfigError) as e:
            from_mapping(table, "jobgate.toml")
        assert rule in str(e.value) and "cannot be changed" in str(e.value) and str(e.value).startswith("jobgate.toml: rules")
    assert {r["rule"]: r["relaxable"] for r in jobgate.rules()}[rule] is False


def test_unknown_rules_and_levels_are_refused_at_load():
    with pytest.raises(ConfigError) as e:
        from_mapping({"rules": {"forge.source.entrypont": "off"}})
    assert "did you mean 'forge.source.entrypoint'?" in str(e.value)
    with pytest.raises(ConfigError) as e:
        from_mapping({"rules": {"forge.source.entrypoint": "loud"}})
    assert 'the level is error, warning or off' in str(e.value)
    with pytest.raises(ConfigError):
        from_mapping({"rules": {"forge.source.entrypoint": 1}})


def test_the_cli_and_the_service_apply_the_same_levels(tmp_path, capsys):
    config = tmp_path / "jobgate.toml"
    config.write_text(DEMO_CONFIG.read_text() + '\n[rules]\n"forge.source.entrypoint" = "warning"\n')
    job = tmp_path / "job.json"
    job.write_text(json.dumps(ENTRYPOINT, indent=1))
    code, out = run_cli(capsys, ["check", str(job), "--config", str(config), "--format", "json"])
    assert code == 0
    (shown,) = json.loads(out)["results"][0]["violations"]
    assert (shown["rule"], shown["severity"], shown["default_severity"]) == ("forge.source.entrypoint", "warning", "error")
    assert main(["check", str(job), "--config", str(config), "--fail-on", "warning"]) == 1
    base = config_for(tmp_path)
    r = Running(base.model_copy(update={"rules": {"forge.source.entrypoint": "warning"}}))
    try:
        response = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=job.read_bytes())), metadata=r.auth)
        assert response.job_id and [(v.rule, v.severity, v.default_severity) for v in response.report.violations] == [("forge.source.entrypoint", "warning", "error")]
    finally:
        r.close()
