"""Credential shapes (SPEC §2, the `tao.execution.secret` row): every shape of the table
is refused in a spec-bundle's commands, `args` and environment, at the string that holds
it, through check, check_many and `jobgate check`; `jobgate.redact` hides exactly its
secret part; `tao.record.secret` holds job records to the token prefixes, URL userinfo
and assignments, and passes what the store keeps. Reproduces the attack where
`Authorization: Bearer …`, `--password hunter2` and a Slack `xoxb-…` token passed both
the rule and redaction."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

import jobgate
from tests.helpers import example, mutate, run_cli

BUNDLE_EXEC = example("spec_bundle.config_mode.with_execution_lifecycle.valid.json")
BUNDLE_ARGS = example("spec_bundle.args_mode.data_services_gap_analysis.valid.json")
RECORD = example("job_record.terminal_error_retry_chain.valid.json")
V = jobgate.Validator()


@dataclass
class Shape:
    name: str
    text: str  # a command line holding the credential
    redacted: str  # what the store keeps of it
    in_records: bool  # whether tao.record.secret looks for it


S = Shape
SHAPES = [
    S("hf_", "huggingface-cli download --quiet hf_AbCdEf1234567890xyz", "huggingface-cli download --quiet hf_***", True),
    S("nvapi-", "ngc config set nvapi-Abc123XYZ456def789", "ngc config set nvapi-***", True),
    S("ghp_", "echo ghp_16C7e42F292c6912E7710c838347Ae178B4a | gh auth login --with-token", "echo ghp_*** | gh auth login --with-token", True),
    S("github_pat_", "GH_AUTH=github_pat_11ABCDEFG0abcdefghij_KLMNOPqrstuvwxyz0123456789 gh repo clone x", "GH_AUTH=github_pat_*** gh repo clone x", True),
    S("glpat-", "glab auth login --stdin <<< glpat-xY9zAb3CdEfGh1JkL2m", "glab auth login --stdin <<< glpat-***", True),
    S("xoxb-", "notify -d channel=ml xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "notify -d channel=ml xoxb-***", True),
    S("xoxp-", "notify xoxp-123456789012-123456789012-abcdef0123456789", "notify xoxp-***", True),
    S("sk-", "OPENAI=sk-proj-Ab12Cd34Ef56Gh78Ij90 python eval.py", "OPENAI=sk-*** python eval.py", True),
    S("sk_live_", "stripe charges list sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe charges list sk_live_***", True),
    S("pypi-", "twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJGE0ZDRiYjQw dist/x.whl", "twine upload -u __token__ -p pypi-*** dist/x.whl", True),
    S("npm_", "npm config set //registry.npmjs.org/:_authToken npm_aBcDeF0123456789aBcDeF0123456789aBcD", "npm config set //registry.npmjs.org/:_authToken npm_***", True),
    S("AKIA", "aws configure set aws_access_key_id AKIAIOSFODNN7EXAMPLE", "aws configure set aws_access_key_id AKIA***", True),
    S("url userinfo", "git clone https://bob:hunter2@git.example.com/x.git", "git clone https://bob:***@git.example.com/x.git", True),
    S("Authorization: Bearer", "curl -H 'Authorization: Bearer abc123def456' https://api.example.com", "curl -H 'Authorization: Bearer ***' https://api.example.com", False),
    S("Authorization: Basic", 'curl -H "Authorization: Basic dXNlcjpodW50ZXIy" https://x.example.com', 'curl -H "Authorization: Basic ***" https://x.example.com', False),
    S("--password value", "mysql --password hunter2 -e 'select 1'", "mysql --password *** -e 'select 1'", False),
    S("--password=value", "mysql --password=hunter2 -e 'select 1'", "mysql --password=*** -e 'select 1'", True),
    S("--token value", "tool sync --token abc123", "tool sync --token ***", False),
    S("--secret value", "tool sync --secret 's3cr3t value'", "tool sync --secret '***'", False),
    S("--api-key value", "tool sync --api-key k-123 --verbose", "tool sync --api-key *** --verbose", False),
    S("NAME=value", "export WANDB_API_KEY=0123abcd && train", "export WANDB_API_KEY=*** && train", True),
]

# Words real bundles hold that share a shape's letters, and references to a credential
# held elsewhere: none is a credential.
NOT_CREDENTIALS = [
    "pip install hf_transfer sk-learn-intelex",
    "npm_config_cache=/tmp/npm npm run build",
    "pip install --index-url https://pypi-mirror.internal/simple pypi-simple",
    "huggingface-cli login --token-file /run/secrets/hf",
    "docker login --password-stdin nvcr.io",
    "python generate.py --max-new-tokens 512 --tokenizer t5",
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com',
    'curl -H "Authorization: Bearer ${HF_TOKEN}" https://api.example.com',
    'mysql --password "$(cat /run/secrets/pw)" -e x',
    "mysql --password $PASSWORD -e x",
    "tool sync --token {job_id}",
    "tool sync --token --verbose",
    "export HF_TOKEN=${HF_TOKEN} && train",
]


def ids(shape: Shape) -> str:
    return shape.name


def rules_at(report: jobgate.Report) -> list[tuple[str, str]]:
    return [(v.rule, v.field) for v in report.violations]


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_each_shape_is_refused_in_a_command_through_every_entry_point(shape: Shape, capsys, tmp_path):
    data = json.dumps(mutate(BUNDLE_EXEC, {"/execution/pre_commands/0": shape.text})).encode()
    report = V.check(data)
    assert rules_at(report) == [("tao.execution.secret", "/execution/pre_commands/0")]
    (violation,) = report.violations
    assert violation.severity == "error" and report.verdict == "fail"
    assert "looks like a credential" in violation.message and "credentials never enter a spec-bundle" in violation.message
    assert V.check_many([data, data], threads=2) == [report, report]
    path = tmp_path / "bundle.json"
    path.write_bytes(data)
    code, out = run_cli(capsys, ["check", str(path), "--format", "json"])
    assert code == 1 and json.loads(out)["results"][0] == {"source": str(path), **report.to_dict()}


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_redaction_hides_the_secret_part_of_each_shape(shape: Shape):
    assert jobgate.redact(shape.text) == shape.redacted
    # what the store keeps passes the rule the credential failed
    kept = V.check(json.dumps(mutate(BUNDLE_EXEC, {"/execution/pre_commands/0": shape.redacted})).encode())
    assert kept.verdict == "pass", rules_at(kept)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_records_are_held_to_tokens_urls_and_assignments(shape: Shape):
    """tao.record.secret looks for the shapes SPEC's job-record paragraph names; the
    header and flag shapes, which the TAO writer's own redactor leaves alone, pass."""
    report = V.check(mutate(RECORD, {"/transitions/1/message": shape.text}))
    assert rules_at(report) == ([("tao.record.secret", "/transitions/1/message")] if shape.in_records else [])
    assert V.check(mutate(RECORD, {"/transitions/1/message": shape.redacted})).verdict == "pass"


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_names_and_references_are_not_credentials(text: str):
    report = V.check(json.dumps(mutate(BUNDLE_EXEC, {"/execution/pre_commands/0": text})).encode())
    assert report.verdict == "pass", rules_at(report)
    assert jobgate.redact(text) == text


@pytest.mark.parametrize(
    ("base", "changes", "expected"),
    [
        (BUNDLE_ARGS, {"/command": "gap_analysis vcn_aoi --password hunter2"}, [("tao.execution.secret", "/command")]),
        # a flag and its value are two elements of args: the value is the credential
        (BUNDLE_ARGS, {"/args": ["--results-parquet", "/data/r.parquet", "--password", "hunter2"]}, [("tao.execution.secret", "/args/3")]),
        (BUNDLE_ARGS, {"/args": ["--api-key", "k-123", "--top-k", "200"]}, [("tao.execution.secret", "/args/1")]),
        (BUNDLE_ARGS, {"/args": ["--token=abc123", "--top-k", "200"]}, [("tao.execution.secret", "/args/0")]),
        (BUNDLE_ARGS, {"/args": ["--token", "xoxb-123456789012-AbCdEfGh"]}, [("tao.execution.secret", "/args/1")]),
        (BUNDLE_ARGS, {"/args": ["--password", "${PASSWORD}", "--token-file", "/run/secrets/t", "--secret", "--top-k", "200"]}, []),
        (BUNDLE_EXEC, {"/execution/environment/CURL_HEADER": "Authorization: Bearer abc123def456"}, [("tao.execution.secret", "/execution/environment/CURL_HEADER")]),
        (BUNDLE_EXEC, {"/execution/environment/SLACK_WEBHOOK": "xoxb-123456789012-AbCdEfGh"}, [("tao.execution.secret", "/execution/environment/SLACK_WEBHOOK")]),
        (BUNDLE_EXEC, {"/execution/post_commands/0": "report --secret s3cr3t"}, [("tao.execution.secret", "/execution/post_commands/0")]),
    ],
    ids=["command", "args-pair", "args-pair-api-key", "args-assignment", "args-token", "args-references", "environment-header", "environment-slack", "post-command-flag"],
)
def test_the_violation_points_at_the_string_that_holds_the_credential(base, changes, expected):
    report = V.check(json.dumps(mutate(base, changes)).encode())
    assert rules_at(report) == expected
    assert report.verdict == ("fail" if expected else "pass")
    assert {v.severity for v in report.violations} <= {"error"}


def test_an_args_value_is_named_as_the_flag_s_value():
    report = V.check(json.dumps(mutate(BUNDLE_ARGS, {"/args": ["--password", "hunter2"]})).encode())
    (violation,) = report.violations
    assert violation.message == '"hunter2" looks like a credential: it is the literal value of --password, the argument before it; credentials never enter a spec-bundle'
