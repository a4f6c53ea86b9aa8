"""One case per rule id: the rule fires at the right field with the right severity,
and stays silent on the valid neighbour the case was made from. Each case is run
through every entry point that must agree (check, check_many, the CLI)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import jobgate
from tests.helpers import DELETE, DEMO_CONFIG, example, mutate, run_cli, sample

JOBSPEC = sample("jobspec.valid.json")
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")
BUNDLE_EXEC = example("spec_bundle.config_mode.with_execution_lifecycle.valid.json")
BUNDLE_ARGS = example("spec_bundle.args_mode.data_services_gap_analysis.valid.json")
RECORD = example("job_record.terminal_error_retry_chain.valid.json")
BEST = example("best_rec.valid.json")

TRL = {
    "/spec/recipe": {"name": "trl/grpo", "version": "1.0.0", "digest": "sha256:ebc7cd1e5733f39992ae1d5465219654c86deb7d3bc89690f3e94439cd8258f8"},
    "/spec/framework": {"kind": "trl", "version": "1.10.0", "runtime_id": "trl-1.10.0"},
}
PLUGIN = JOBSPEC["spec"]["plugins"][0]


@dataclass
class Case:
    rule: str
    base: dict[str, Any]
    changes: dict[str, Any]
    expected: list[tuple[str, str]]
    config: str | dict | None = None
    admission: dict[str, Any] = field(default_factory=dict)
    severity: str = "error"
    raw: bytes | None = None  # bytes to check instead of the mutated document


C = Case
CASES = [
    # generic
    C("json.syntax", JOBSPEC, {}, [("json.syntax", "")], raw=b'{"apiVersion": "forge/v2",'),
    C("json.duplicate_key", JOBSPEC, {}, [("json.duplicate_key", "/kind")],
      raw=json.dumps(JOBSPEC).replace('"kind": "TrainingJob"', '"kind": "TrainingJob", "kind": "TrainingJob"', 1).encode()),
    C("limits.size", JOBSPEC, {}, [("limits.size", "")], config={"limits": {"max_document_bytes": 200}}),
    C("limits.depth", JOBSPEC, {}, [("limits.depth", "")], config={"limits": {"max_depth": 3}}),
    C("limits.violations", JOBSPEC, {}, [("limits.violations", ""), ("json.duplicate_key", "/kind")], config={"limits": {"max_violations": 1}},
      raw=json.dumps(JOBSPEC).replace('"kind": "TrainingJob"', '"kind": "TrainingJob", "kind": "TrainingJob", "kind": "TrainingJob"', 1).encode()),
    C("kind.unknown", BUNDLE, {}, [("kind.unknown", "")], raw=b'{"name": "x", "spec": {}}'),
    C("schema.type", BUNDLE, {"/compute_shape/gpus": "8"}, [("schema.type", "/compute_shape/gpus")]),
    C("schema.required", BUNDLE, {"/action": DELETE}, [("schema.required", "/action")]),
    C("schema.additionalProperties", BUNDLE, {"/priority": 1}, [("schema.additionalProperties", "/priority")]),
    C("schema.additionalProperties", JOBSPEC, {"/spec/priority": 1}, [("schema.additionalProperties", "/spec/priority")], severity="warning"),
    C("schema.enum", BUNDLE, {"/mode": "script"}, [("schema.enum", "/mode")]),
    C("schema.const", RECORD, {"/schema_version": 2}, [("schema.const", "/schema_version")]),
    C("schema.pattern", RECORD, {"/platform": "Docker"}, [("schema.pattern", "/platform")]),
    C("schema.minLength", RECORD, {"/results_dir": ""}, [("schema.minLength", "/results_dir")]),
    C("schema.minItems", BUNDLE, {"/declared_outputs": []}, [("schema.minItems", "/declared_outputs")]),
    C("schema.minimum", BUNDLE, {"/compute_shape/nodes": 0}, [("schema.minimum", "/compute_shape/nodes")]),
    C("schema.maximum", JOBSPEC, {"/spec/data/quality": {"max_duplicate_ratio": 1.5}}, [("schema.maximum", "/spec/data/quality/max_duplicate_ratio")]),
    # counts beyond 2^31 - 1 never reach the store
    C("schema.maximum", JOBSPEC, {"/spec/resources/pools/0/nodes": 2**31}, [("schema.maximum", "/spec/resources/pools/0/nodes")]),
    C("schema.maximum", BUNDLE, {"/compute_shape/gpus": 2**62, "/spec/train/num_gpus": 2**62}, [("schema.maximum", "/compute_shape/gpus")]),
    C("schema.uniqueItems", BUNDLE_EXEC, {"/execution/completion/success_states": ["SUCCESS", "SUCCESS"]}, [("schema.uniqueItems", "/execution/completion/success_states")]),
    C("schema.propertyNames", BUNDLE_EXEC, {"/execution/environment/bad-name": "1"}, [("schema.propertyNames", "/execution/environment/bad-name")]),
    C("schema.dependentRequired", JOBSPEC, {"/spec/data/quality": {"max_overlap_ratio": 0.1}}, [("schema.dependentRequired", "/spec/data/quality/overlap_with")]),
    # forge/v2 JobSpec
    C("forge.api_version", JOBSPEC, {"/apiVersion": "forge/v1"}, [("forge.api_version", "/apiVersion")]),
    C("forge.kind", JOBSPEC, {"/kind": "InferenceJob"}, [("forge.kind", "/kind")]),
    C("forge.name", JOBSPEC, {"/metadata/name": "../escape"}, [("forge.name", "/metadata/name")]),
    C("forge.project", JOBSPEC, {"/metadata/project": "my lab"}, [("forge.project", "/metadata/project")]),
    C("forge.owner_overridden", JOBSPEC, {"/metadata/owner": "mallory"}, [("forge.owner_overridden", "/metadata/owner")], admission={"owner": "alice"}, severity="warning"),
    C("forge.recipe.name", JOBSPEC, {"/spec/recipe/name": "grpo"}, [("forge.recipe.name", "/spec/recipe/name")]),
    C("forge.source.exp", JOBSPEC, {"/spec/source/exp": "/home/me/exp"}, [("forge.source.exp", "/spec/source/exp")]),
    C("forge.source.entrypoint", JOBSPEC, {"/spec/source/entrypoint": "train.py"}, [("forge.source.entrypoint", "/spec/source/entrypoint")]),
    C("forge.framework.image_required", JOBSPEC, {"/spec/recipe/name": "custom/custom"}, [("forge.framework.image_required", "/spec/framework/image")]),
    C("forge.framework.image_registry", JOBSPEC, {"/spec/framework/image": "docker.io/library/ubuntu:22.04"}, [("forge.framework.image_registry", "/spec/framework/image")], config=DEMO_CONFIG),
    C("forge.framework.observability_url_required", JOBSPEC, TRL, [("forge.framework.observability_url_required", "/spec/framework/observability_url")], config=DEMO_CONFIG),
    C("forge.framework.observability_url_forbidden", JOBSPEC, {"/spec/framework/observability_url": "https://wandb.ai/lab/run"}, [("forge.framework.observability_url_forbidden", "/spec/framework/observability_url")], config=DEMO_CONFIG),
    C("forge.resources.pools_empty", JOBSPEC, {"/spec/resources/pools": [], "/spec/resources/roles": {}}, [("forge.resources.pools_empty", "/spec/resources/pools")]),
    C("forge.resources.pool_duplicate", JOBSPEC, {"/spec/resources/pools/-": {"name": "train", "nodes": 1, "gpus_per_node": 1}}, [("forge.resources.pool_duplicate", "/spec/resources/pools/1/name")]),
    C("forge.resources.role_pool", JOBSPEC, {"/spec/resources/roles/trainer": "rollout"}, [("forge.resources.role_pool", "/spec/resources/roles/trainer")]),
    C("forge.resources.series", JOBSPEC, {"/spec/resources/pools/0/series": "a100"}, [("forge.resources.series", "/spec/resources/pools/0/series")], config=DEMO_CONFIG),
    C("forge.model.init_from", JOBSPEC, {"/spec/model/init_from": "checkpoint-5"}, [("forge.model.init_from", "/spec/model/init_from")]),
    C("forge.data.ref", JOBSPEC, {"/spec/data/corpus": "handbook"}, [("forge.data.ref", "/spec/data/corpus")]),
    C("forge.data.host_path", JOBSPEC, {"/spec/data/train/dataset": "/data/gsm8k"}, [("forge.data.host_path", "/spec/data/train/dataset")]),
    C("forge.plugins.id", JOBSPEC, {"/spec/plugins/0/id": "opsd-patch"}, [("forge.plugins.id", "/spec/plugins/0/id")]),
    C("forge.plugins.digest", JOBSPEC, {"/spec/plugins/0/digest": "md5:abc"}, [("forge.plugins.digest", "/spec/plugins/0/digest")]),
    C("forge.plugins.duplicate", JOBSPEC, {"/spec/plugins/-": PLUGIN}, [("forge.plugins.duplicate", "/spec/plugins/1/id")]),
    C("forge.plugins.leaf_collision", JOBSPEC, {"/spec/plugins/-": {**PLUGIN, "id": "bob/opsd-patch"}}, [("forge.plugins.leaf_collision", "/spec/plugins/1/id")]),
    C("forge.evaluation.gate", JOBSPEC, {"/spec/evaluation": {"suites": ["gsm8k"], "gates": [{"metric": "gsm8k/exact_match"}]}}, [("forge.evaluation.gate", "/spec/evaluation/gates/0")]),
    C("forge.provenance.core_version", JOBSPEC, {"/provenance/core_version": ""}, [("forge.provenance.core_version", "/provenance/core_version")]),
    C("forge.handshake.recipe_unknown", JOBSPEC, {"/spec/recipe/name": "verl/ppo"}, [("forge.handshake.recipe_unknown", "/spec/recipe/name")], config=DEMO_CONFIG),
    C("forge.handshake.version", JOBSPEC, {"/spec/recipe/version": "0.6.0"}, [("forge.handshake.version", "/spec/recipe/version")], config=DEMO_CONFIG),
    C("forge.handshake.digest", JOBSPEC, {"/spec/recipe/digest": "sha256:00ff"}, [("forge.handshake.digest", "/spec/recipe/digest")], config=DEMO_CONFIG),
    C("forge.handshake.runtime_id", JOBSPEC, {"/spec/framework/runtime_id": "nemo-rl-0.6.0"}, [("forge.handshake.runtime_id", "/spec/framework/runtime_id")], config=DEMO_CONFIG),
    C("forge.core_version.unsupported", JOBSPEC, {"/provenance/core_version": "1.2.0"}, [("forge.core_version.unsupported", "/provenance/core_version")], config=DEMO_CONFIG),
    C("forge.quota.job", JOBSPEC, {"/spec/resources/pools/0/nodes": 2}, [("forge.quota.job", "/spec/resources")], config=DEMO_CONFIG),
    C("forge.quota.job", JOBSPEC, {"/spec/resources/pools/0/nodes": 65536, "/spec/resources/pools/0/gpus_per_node": 65536}, [("forge.quota.job", "/spec/resources")]),
    C("forge.quota.job", BUNDLE, {"/compute_shape/gpus": 8, "/compute_shape/nodes": 2}, [("forge.quota.job", "/compute_shape")], config=DEMO_CONFIG),
    C("forge.quota.project", JOBSPEC, {}, [("forge.quota.project", "/spec/resources")], admission={"project_quota": 10, "project_gpus_in_use": 4}),
    C("forge.project.forbidden", JOBSPEC, {}, [("forge.project.forbidden", "/metadata/project")], admission={"projects": ["vision", "speech"]}),
    # TAO spec-bundle
    C("tao.dotted_key", BUNDLE, {"/spec/train/optim.lr": 0.1}, [("tao.dotted_key", "/spec/train/optim.lr")]),
    C("tao.dotted_key", BUNDLE, {"/spec/dataset/train_data_sources/0/": 1}, [("tao.dotted_key", "/spec/dataset/train_data_sources/0/")]),
    C("tao.dotted_key", BEST, {"/best/specs/train/optim/lr.decay": 0.1}, [("tao.dotted_key", "/best/specs/train/optim/lr.decay")]),
    C("tao.mode.config_requires_spec", BUNDLE, {"/spec": DELETE}, [("tao.mode.config_requires_spec", "/spec")]),
    C("tao.mode.config_requires_config_format", BUNDLE, {"/config_format": DELETE}, [("tao.mode.config_requires_config_format", "/config_format")]),
    C("tao.mode.config_path_placeholder", BUNDLE, {"/command": "dino train"}, [("tao.mode.config_path_placeholder", "/command")]),
    C("tao.mode.config_forbids_args", BUNDLE, {"/args": ["--foo"]}, [("tao.mode.config_forbids_args", "/args")]),
    C("tao.mode.args_requires_args", BUNDLE_ARGS, {"/args": DELETE}, [("tao.mode.args_requires_args", "/args")]),
    C("tao.mode.args_forbids_spec", BUNDLE_ARGS, {"/spec": {"a": 1}}, [("tao.mode.args_forbids_spec", "/spec")]),
    C("tao.mode.args_forbids_config_format", BUNDLE_ARGS, {"/config_format": "yaml"}, [("tao.mode.args_forbids_config_format", "/config_format")]),
    C("tao.placeholder.unknown", BUNDLE, {"/command": "dino train -e {config_path} --out {output_dir}"}, [("tao.placeholder.unknown", "/command")], severity="warning"),
    C("tao.placeholder.unknown", BUNDLE, {"/spec/train/out": "{results_dir}/{run_name}"}, [("tao.placeholder.unknown", "/spec/train/out")], severity="warning"),
    C("tao.spec_key.syntax", BUNDLE, {"/declared_inputs/0/spec_key": "dataset..image_dir"}, [("tao.spec_key.syntax", "/declared_inputs/0/spec_key")]),
    C("tao.spec_key.unresolved", BUNDLE, {"/declared_inputs/0/spec_key": "dataset.train_data_sources[3].image_dir"}, [("tao.spec_key.unresolved", "/declared_inputs/0/spec_key")]),
    C("tao.spec_key.unresolved", BUNDLE, {"/declared_inputs/1/spec_key": "train.num_epochs.path"}, [("tao.spec_key.unresolved", "/declared_inputs/1/spec_key")], severity="warning"),
    # indexing below a missing key: whether the platform creates the array is its business
    C("tao.spec_key.unresolved", BUNDLE, {"/declared_inputs/0/spec_key": "dataset.val_data_sources[0].image_dir"}, [("tao.spec_key.unresolved", "/declared_inputs/0/spec_key")], severity="warning"),
    C("tao.gpu_spec_key.mismatch", BUNDLE, {"/spec/train/num_gpus": 4}, [("tao.gpu_spec_key.mismatch", "/gpu_spec_key")], severity="warning"),
    C("tao.execution.secret", BUNDLE_EXEC, {"/execution/pre_commands/0": "huggingface-cli login --token hf_AbCdEf1234567890xyz"}, [("tao.execution.secret", "/execution/pre_commands/0")]),
    C("tao.execution.secret", BUNDLE_EXEC, {"/execution/environment/WANDB_API_KEY": "0123456789abcdef"}, [("tao.execution.secret", "/execution/environment/WANDB_API_KEY")]),
    C("tao.execution.processes_per_node", BUNDLE_EXEC, {"/execution/distributed/processes_per_node": 4}, [("tao.execution.processes_per_node", "/execution/distributed/processes_per_node")], severity="warning"),
    C("tao.supporting_file.path", BUNDLE_EXEC, {"/execution/supporting_files/0/destination": "/opt/helper.py"}, [("tao.supporting_file.path", "/execution/supporting_files/0/destination")]),
    C("tao.supporting_file.path", BUNDLE_EXEC, {"/execution/supporting_files/0/destination": "./"}, [("tao.supporting_file.path", "/execution/supporting_files/0/destination")]),
    C("tao.supporting_file.duplicate_destination", BUNDLE_EXEC, {"/execution/supporting_files/-": {"source": "scripts/other.py", "destination": "checkpoint_action.py", "sha256": "b" * 64}}, [("tao.supporting_file.duplicate_destination", "/execution/supporting_files/1/destination")]),
    # TAO job-record
    C("tao.record.first_state", RECORD, {"/transitions/0/state": "RUNNING"}, [("tao.record.first_state", "/transitions/0/state")]),
    C("tao.record.after_terminal", RECORD, {"/transitions/-": {"ts": "2026-07-09T20:00:00+00:00", "state": "RUNNING", "message": "restarted", "source": "agent"}}, [("tao.record.after_terminal", "/transitions/2/state")]),
    C("tao.record.terminal_mismatch", RECORD, {"/terminal_state": "COMPLETE"}, [("tao.record.terminal_mismatch", "/terminal_state")]),
    C("tao.record.ts_order", RECORD, {"/transitions/1/ts": "2026-07-09T17:00:00+00:00"}, [("tao.record.ts_order", "/transitions/1/ts")], severity="warning"),
    C("tao.record.secret", RECORD, {"/transitions/1/message": "pull failed: https://bob:hunter2@registry.example.com/x"}, [("tao.record.secret", "/transitions/1/message")]),
    # TAO best_rec
    C("tao.best_rec.not_best", BEST, {"/best/score": 0.004}, [("tao.best_rec.not_best", "/best/score")]),
    C("tao.best_rec.not_best", BEST, {"/best/rec_id": "rec_001"}, [("tao.best_rec.not_best", "/best/score")]),
    # The winner listed with a null score is listed with another score.
    C("tao.best_rec.not_best", BEST, {"/all_recs/2/score": None}, [("tao.best_rec.not_best", "/best/score")]),
]

# Rules that need files on disk or a package: their cases are in tests/files/.
FILE_RULES = {
    "tao.supporting_file.missing", "tao.supporting_file.not_regular", "tao.supporting_file.escape",
    "tao.supporting_file.sha256_mismatch", "tao.supporting_file.undeclared",
    "tao.supporting_file.undeclared_import", "tao.staging.conflict",
}


def test_every_catalogued_rule_has_a_case():
    from pathlib import Path

    catalogue = {r["rule"] for r in jobgate.rules()}
    assert catalogue - FILE_RULES == {c.rule for c in CASES}
    file_tests = "".join(p.read_text() for p in (Path(__file__).parents[1] / "files").glob("test_*.py"))
    assert {r for r in FILE_RULES if f'"{r}"' not in file_tests} == set()


_validators: dict[str, jobgate.Validator] = {}


def validator_for(config: Any) -> jobgate.Validator:
    key = json.dumps(config, default=str)
    if key not in _validators:
        _validators[key] = jobgate.Validator(config)
    return _validators[key]


def document(case: Case) -> bytes:
    return case.raw if case.raw is not None else json.dumps(mutate(case.base, case.changes)).encode()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule}:{c.expected[0][1]}")
def test_rule_fires_at_field(case: Case):
    v = validator_for(case.config)
    report = v.check(document(case), **case.admission)
    assert [(x.rule, x.field) for x in report.violations] == case.expected
    assert {x.severity for x in report.violations} == {case.severity}
    assert report.verdict == ("fail" if case.severity == "error" else "pass")
    assert all(x.message for x in report.violations)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule}:{c.expected[0][1]}")
def test_valid_neighbour_is_silent(case: Case):
    v = validator_for(None if case.rule.startswith("limits.") else case.config)
    report = v.check(json.dumps(case.base).encode(), **case.admission if case.rule not in ("forge.quota.project", "forge.project.forbidden") else {})
    assert report.verdict == "pass", report.violations
    assert case.rule not in {x.rule for x in report.violations}


@pytest.mark.parametrize("case", [c for c in CASES if not c.admission], ids=lambda c: f"{c.rule}:{c.expected[0][1]}")
def test_every_entry_point_agrees(case: Case, capsys, tmp_path):
    """check, check_many and `jobgate check --format json` give the same report."""
    v = validator_for(case.config)
    data = document(case)
    single = v.check(data)
    assert v.check_many([data, data], threads=2) == [single, single]
    path = tmp_path / "doc.json"
    path.write_bytes(data)
    args = ["check", str(path), "--format", "json"]
    if isinstance(case.config, dict):  # the limits cases: the same limits as a jobgate.toml
        cfg = tmp_path / "jobgate.toml"
        cfg.write_text("".join(f"[limits]\n{k} = {val}\n" for k, val in case.config["limits"].items()))
        args += ["--config", str(cfg)]
    elif case.config is not None:
        args += ["--config", str(case.config)]
    code, out = run_cli(capsys, args)
    result = json.loads(out)["results"][0]
    assert result == {"source": str(path), **single.to_dict()}
    assert code == (0 if single.ok else 1)
