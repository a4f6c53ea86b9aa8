"""The peers' own material (`../shared/upstream/peer-cases/`): fixtures of
tao-skill-bank's schema tests, records written by its writer, best_recs from its AutoML
adapter, spec-bundles of its Cosmos workflow, and JobSpecs built by starforge-core's
`build_spec`. jobgate agrees with every verdict, and names the rule the peer names at
its field or below it, through the Python API and `jobgate check`. In CI a missing
case directory fails the run (see `require_shared`)."""

from __future__ import annotations

import json

import pytest

import jobgate
from tests.helpers import SHARED, require_shared, run_cli

require_shared()

PEERS = SHARED / "upstream" / "peer-cases"
EXPECTED: dict = json.loads((PEERS / "expected.json").read_text()) if (PEERS / "expected.json").is_file() else {}
V = jobgate.Validator()


def test_the_peer_cases_are_there():
    assert len(EXPECTED) >= 149, f"{PEERS / 'expected.json'} holds {len(EXPECTED)} cases"


def names_it(violations: list[tuple[str, str]], expected: dict) -> bool:
    rules, field = expected.get("rules"), expected.get("field")
    if not rules:
        return True
    return any(rule in rules and (field is None or at == field or at.startswith(field.rstrip("/") + "/")) for rule, at in violations)


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_jobgate_agrees_with_the_peer(path, capsys):
    expected = EXPECTED[path]
    report = V.check((PEERS / path).read_bytes())
    violations = [(v.rule, v.field) for v in report.violations]
    assert report.verdict == expected["verdict"], (expected.get("source"), report.violations)
    assert names_it(violations, expected), (expected, violations)
    code, out = run_cli(capsys, ["check", str(PEERS / path), "--format", "json"])
    (result,) = json.loads(out)["results"]
    assert (code, result["verdict"]) == ((0, "pass") if expected["verdict"] == "pass" else (1, "fail"))
    assert [(v["rule"], v["field"]) for v in result["violations"]] == violations


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


WRITER_RECORDS = sorted(p for p in EXPECTED if p.startswith("tao/job_record/writer_"))


@pytest.mark.parametrize("path", WRITER_RECORDS)
def test_what_the_tao_writer_stores_is_left_alone_by_the_one_detector(path):
    """The writer's records pass tao.record.secret, and redaction (what jobgate's store
    applies) changes none of their strings: detection and redaction are one detector."""
    record = json.loads((PEERS / path).read_text())
    for s in strings(record):
        assert jobgate.redact(s) == s, s
    assert "tao.record.secret" not in {v.rule for v in V.check(record).violations}


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("pip install hf_transfer sk-learn-intelex", "pip install hf_transfer sk-learn-intelex"),
        ("results in /lustre/exp/token=v1/keyframes/run", "results in /lustre/exp/token=v1/keyframes/run"),
        ("export HF_TOKEN=hf_AbCdEf123456789 && run", "export HF_TOKEN=*** && run"),
        ("pull https://bob:hunter2@registry.example.com/x", "pull https://bob:***@registry.example.com/x"),
        ("key AKIAIOSFODNN7EXAMPLE", "key AKIA***"),
    ],
)
def test_the_store_redacts_with_the_core_detector(text, stored):
    from jobgate.store.base import stored_message

    assert stored_message(text) == stored
    record = {**json.loads((PEERS / WRITER_RECORDS[0]).read_text())}
    record["transitions"] = [{**record["transitions"][0], "message": stored}]
    assert "tao.record.secret" not in {v.rule for v in V.check(record).violations}


def test_best_rec_specs_get_no_placeholder_warnings():
    best = json.loads((SHARED / "upstream" / "tao-artifacts" / "examples" / "best_rec.valid.json").read_text())
    best["best"]["specs"]["train"]["out"] = "{results_dir}/{run_name}"
    assert V.check(best).violations == []
