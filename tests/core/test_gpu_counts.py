"""The GPU count is read once, in the core, as the schema reads an integer: a count the
quota cannot charge (not a whole number, negative, past 2^31-1) is refused by the
locked forge.quota.job whatever `[rules]` says, and what the rules judged is what
admission charges (`Validator.facts`). Through the Python API and `jobgate check`.

Reproduces a deployment that relaxed schema.type, schema.maximum and schema.minimum:
JobSpecs asking for 1e300, 2^64+5, "abc" or 1.5 GPUs per node were admitted and
charged 0 GPUs, and 2^63 was charged 2,147,483,647 without forge.quota.job."""

from __future__ import annotations

import json

import pytest

import jobgate
from tests.helpers import example, run_cli, sample, with_literal

JOBSPEC = sample("jobspec.valid.json")  # project my-lab, 1 node of 8 GPUs
RELAXED = {"rules": {"schema.type": "off", "schema.maximum": "off", "schema.minimum": "off"}}
WARNED = {"rules": {"schema.type": "warning", "schema.maximum": "warning", "schema.minimum": "warning"}}
PER_NODE = "/spec/resources/pools/0/gpus_per_node"
# Counts the quota cannot charge, as JSON text, and the schema rule that reports each
# in a JobSpec (whose counts are integers as written: 1e300 and 2^64+5 are numbers).
UNCHARGEABLE = [
    ("1e300", "schema.type"),
    ("18446744073709551621", "schema.type"),  # 2^64 + 5
    ('"abc"', "schema.type"),
    ("1.5", "schema.type"),
    ("8.0", "schema.type"),
    ("null", "schema.type"),
    ("-1", "schema.minimum"),
    ("9223372036854775808", "schema.maximum"),  # 2^63
    ("2147483648", "schema.maximum"),  # 2^31
]


def jobspec_with(text: str, key: str = "gpus_per_node") -> bytes:
    return with_literal(JOBSPEC, f"/spec/resources/pools/0/{key}", text)


def shown(report) -> list[tuple[str, str, str]]:
    return [(v.rule, v.field, v.severity) for v in report.violations]


@pytest.mark.parametrize(("text", "schema_rule"), UNCHARGEABLE)
def test_a_jobspec_count_the_quota_cannot_charge_is_refused_whatever_the_rules_say(text, schema_rule):
    data = jobspec_with(text)
    # by default the schema rule alone refuses it: one violation of the field
    default = jobgate.Validator().check(data)
    assert (default.verdict, shown(default)) == ("fail", [(schema_rule, PER_NODE, "error")])
    for config, level in ((RELAXED, "off"), (WARNED, "warning")):
        report = jobgate.Validator(config).check(data)
        assert (report.verdict, shown(report)) == ("fail", [("forge.quota.job", PER_NODE, "error"), (schema_rule, PER_NODE, level)]), config
        assert f"{schema_rule} is relaxed here, this rule is not" in report.violations[0].message
    # never charged: such a document is not admitted
    assert jobgate.Validator(RELAXED).facts(data).gpus == 0


def test_every_unchargeable_count_is_named_and_a_project_relaxing_the_rule_is_held_too():
    data = jobspec_with('"abc"', "nodes").replace(b'"gpus_per_node": 8', b'"gpus_per_node": -3')
    report = jobgate.Validator(RELAXED).check(data)
    nodes = "/spec/resources/pools/0/nodes"
    assert shown(report) == [
        ("forge.quota.job", PER_NODE, "error"),
        ("schema.minimum", PER_NODE, "off"),
        ("forge.quota.job", nodes, "error"),
        ("schema.type", nodes, "off"),
    ]
    assert report.violations[0].message.startswith("gpus_per_node is -3, below 0, so the job's GPUs cannot be counted against its quota")
    assert report.violations[2].message.startswith('nodes is "abc", not a whole number, so the job\'s GPUs cannot be counted against its quota')
    # a project's own severities relax it for that project only: the locked rule holds there
    per_project = jobgate.Validator({"rules": {"projects": {"my-lab": {"schema.maximum": "off"}}}})
    big = jobspec_with("9223372036854775808")
    assert shown(per_project.check(big)) == [("forge.quota.job", PER_NODE, "error"), ("schema.maximum", PER_NODE, "off")]
    other = big.replace(b'"my-lab"', b'"vision"')
    assert shown(per_project.check(other)) == [("schema.maximum", PER_NODE, "error")]


def test_what_a_relaxed_deployment_admits_is_what_it_charges():
    validator = jobgate.Validator(RELAXED)
    # 0 GPUs per node is below the schema's minimum of 1, but a count: admitted, charged 0
    zero = jobspec_with("0")
    assert (validator.check(zero).verdict, validator.facts(zero).gpus) == ("pass", 0)
    # two pools of 2^31-1 GPUs each: more than any job may ask for, by default too
    two = json.loads(jobspec_with("2147483647"))
    two["spec"]["resources"]["pools"] = [{"name": "a", "gpus_per_node": 2147483647}, {"name": "b", "nodes": 2147483647}]
    two["spec"]["resources"]["roles"] = {}
    for config in (None, RELAXED):
        report = jobgate.Validator(config).check(json.dumps(two))
        assert shown(report) == [("forge.quota.job", "/spec/resources", "error")]
        assert report.violations[0].message == "the job asks for 4294967294 GPUs (nodes * gpus_per_node over all pools), more than the 2147483647 any job may ask for"
    # what passes is charged exactly what its pools ask for
    assert validator.facts(json.dumps(JOBSPEC)).gpus == 8


BUNDLE = "spec_bundle.config_mode.dino_train.valid.json"  # compute_shape {"gpus": 8, "nodes": 1}
# A spec-bundle's counts are integers in the JSON Schema sense (8.0 is 8): 1e300 is
# then past the maximum.
BUNDLE_UNCHARGEABLE = [
    ("1e300", "schema.maximum"),
    ("18446744073709551621", "schema.maximum"),
    ('"abc"', "schema.type"),
    ("1.5", "schema.type"),
    ("-1", "schema.minimum"),
    ("9223372036854775808", "schema.maximum"),
]


@pytest.mark.parametrize("key", ["gpus", "nodes"])
@pytest.mark.parametrize(("text", "schema_rule"), BUNDLE_UNCHARGEABLE)
def test_a_spec_bundle_count_the_quota_cannot_charge_is_refused_whatever_the_rules_say(text, schema_rule, key):
    data = with_literal(example(BUNDLE), f"/compute_shape/{key}", text)
    field = f"/compute_shape/{key}"
    # the gpu_spec_key warning follows compute_shape.gpus; only this field is looked at
    default = [v for v in shown(jobgate.Validator().check(data)) if v[1].startswith("/compute_shape")]
    assert default == [(schema_rule, field, "error")]
    report = jobgate.Validator(RELAXED).check(data)
    assert report.verdict == "fail"
    assert [v for v in shown(report) if v[1].startswith("/compute_shape")] == [("forge.quota.job", field, "error"), (schema_rule, field, "off")]
    assert jobgate.Validator(RELAXED).facts(data).gpus == 0


def test_a_spec_bundle_asking_for_more_than_any_job_may_is_refused():
    doc = example(BUNDLE)
    doc["compute_shape"] = {"gpus": 2147483647, "nodes": 2}
    report = jobgate.Validator().check(json.dumps(doc))
    assert [v for v in shown(report) if v[0] != "tao.gpu_spec_key.mismatch"] == [("forge.quota.job", "/compute_shape", "error")]
    assert report.violations[0].message == "the job asks for 4294967294 GPUs (compute_shape.nodes * gpus), more than the 2147483647 any job may ask for"
    doc["compute_shape"] = {"gpus": 8.0, "nodes": 2}
    assert jobgate.Validator().facts(json.dumps(doc)).gpus == 16


def test_jobgate_check_refuses_an_unchargeable_count_under_a_relaxed_configuration(capsys, tmp_path):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text('[rules]\n"schema.type" = "off"\n"schema.maximum" = "off"\n"schema.minimum" = "off"\n')
    docs = []
    for i, text in enumerate(["1e300", '"abc"', "9223372036854775808", "8"]):
        path = tmp_path / f"job{i}.json"
        path.write_bytes(jobspec_with(text))
        docs.append(str(path))
    code, out = run_cli(capsys, ["check", *docs, "--config", str(cfg), "--format", "json"])
    results = json.loads(out)["results"]
    assert code == 1
    assert [(r["verdict"], [(v["rule"], v["field"], v["severity"]) for v in r["violations"]]) for r in results] == [
        ("fail", [("forge.quota.job", PER_NODE, "error"), ("schema.type", PER_NODE, "off")]),
        ("fail", [("forge.quota.job", PER_NODE, "error"), ("schema.type", PER_NODE, "off")]),
        ("fail", [("forge.quota.job", PER_NODE, "error"), ("schema.maximum", PER_NODE, "off")]),
        ("pass", []),
    ]
