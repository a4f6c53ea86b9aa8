"""Every upstream example gets the verdict its name says, and each invalid one
fires the rule its name describes, at the field it names."""

from __future__ import annotations

import pytest

from tests.helpers import EXAMPLES, require_shared

require_shared()

EXPECTED = {
    "job_record.invalid.bad_storage_tier.json": [("schema.enum", "/storage_tier")],
    "job_record.invalid.empty_results_dir.json": [("schema.minLength", "/results_dir")],
    "job_record.invalid.empty_transitions.json": [("schema.minItems", "/transitions")],
    "job_record.invalid.noncanonical_platform.json": [("schema.pattern", "/platform")],
    "job_record.invalid.unknown_state.json": [("schema.enum", "/transitions/0/state")],
    "job_record.invalid.unredacted.json": [("schema.const", "/redacted")],
    "spec_bundle.invalid.args_mode_with_spec.json": [("tao.mode.args_forbids_spec", "/spec")],
    "spec_bundle.invalid.config_command_without_config_path.json": [("tao.mode.config_path_placeholder", "/command")],
    "spec_bundle.invalid.config_mode_missing_config_format.json": [("tao.mode.config_requires_config_format", "/config_format")],
    "spec_bundle.invalid.config_mode_with_args.json": [("tao.mode.config_forbids_args", "/args")],
    "spec_bundle.invalid.dotted_key_in_array_object.json": [("tao.dotted_key", "/spec/dataset/train_data_sources/0/image.dir")],
    "spec_bundle.invalid.dotted_nested_key.json": [("tao.dotted_key", "/spec/train/optim.lr")],
    "spec_bundle.invalid.dotted_top_level_key.json": [("tao.dotted_key", "/spec/train.num_epochs")],
    "spec_bundle.invalid.empty_declared_outputs.json": [("schema.minItems", "/declared_outputs")],
    "spec_bundle.invalid.execution_env_bad_name.json": [("schema.propertyNames", "/execution/environment/bad-name")],
    "spec_bundle.invalid.missing_mode.json": [("schema.required", "/mode")],
    "spec_bundle.invalid.supporting_file_missing_sha256.json": [("schema.required", "/execution/supporting_files/0/sha256")],
    "spec_bundle.invalid.supporting_file_parent_traversal.json": [("tao.supporting_file.path", "/execution/supporting_files/0/source")],
    "spec_bundle.invalid.unresolved_image_key.json": [("schema.pattern", "/image")],
    "spec_bundle.invalid.zero_nodes.json": [("schema.minimum", "/compute_shape/nodes")],
}

ALL = sorted(p.name for p in EXAMPLES.glob("*.json"))


def test_every_invalid_example_has_an_expectation():
    assert sorted(n for n in ALL if ".invalid." in n) == sorted(EXPECTED)


@pytest.mark.parametrize("name", ALL)
def test_verdict_and_rule(name, validator):
    report = validator.check((EXAMPLES / name).read_bytes())
    assert report.kind == name.split(".")[0]
    if ".invalid." in name:
        assert report.verdict == "fail"
        assert [(v.rule, v.field) for v in report.violations] == EXPECTED[name]
    else:
        assert report.verdict == "pass", report.violations
        assert report.violations == []


def test_examples_through_the_cli(capsys):
    import json

    from tests.helpers import run_cli

    code, out = run_cli(capsys, ["check", str(EXAMPLES), "--format", "json"])
    data = json.loads(out)
    assert code == 1
    assert data["summary"] == {"total": len(ALL), "passed": len(ALL) - len(EXPECTED), "failed": len(EXPECTED), "errors": len(EXPECTED), "warnings": 0}
    for result in data["results"]:
        name = result["source"].rsplit("/", 1)[-1]
        assert result["verdict"] == ("fail" if ".invalid." in name else "pass")
