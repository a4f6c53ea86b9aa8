"""Reports stay linear in their document and bounded (SPEC §2 `limits.violations`):
at most `limits.max_violations` violations and a fixed byte budget, the rest counted
in one `limits.violations`; messages never embed unbounded lists. The cases are the
ones that made a report quadratic. Their cost is measured in benchmarks, not here."""

from __future__ import annotations

import json

import jobgate
from tests.helpers import deep_dotted_spec, sample

BUDGET = 1 << 20  # bytes of fields and messages per report


def report_bytes(report: jobgate.Report) -> int:
    return sum(len(v.field) + len(v.message) for v in report.violations)


def test_many_roles_naming_a_missing_pool_give_short_messages_and_a_bounded_report():
    doc = sample("jobspec.valid.json")
    doc["spec"]["resources"]["pools"] = [{"name": f"p{i}", "nodes": 1, "gpus_per_node": 1} for i in range(15_000)]
    doc["spec"]["resources"]["roles"] = {f"r{i}": "missing" for i in range(15_000)}
    data = json.dumps(doc, separators=(",", ":")).encode()
    assert len(data) < 1 << 20
    report = jobgate.Validator().check(data)
    assert report.verdict == "fail"
    assert len(report.violations) == 1001
    first = report.violations[0]
    assert (first.rule, first.field, first.severity) == ("limits.violations", "", "error")
    assert "14000 more violations" in first.message
    role = next(v for v in report.violations if v.rule == "forge.resources.role_pool")
    assert role.message.endswith('declared pools: "p0", "p1", "p2", "p3", "p4" and 14995 more')
    assert report_bytes(report) < BUDGET + 1000


def test_a_document_of_duplicate_keys_gets_a_report():
    body = ",".join('"k":1' for _ in range(174_000))
    data = ('{"apiVersion":"forge/v2",' + body + "}").encode()
    report = jobgate.Validator().check(data)
    # The first 1,000 found are kept (all the same repeat of "k", listed once); the rest
    # were never built, only counted.
    assert [(v.rule, v.field) for v in report.violations] == [("limits.violations", ""), ("json.duplicate_key", "/k")]
    assert report.violations[0].message.startswith("347003 more violations (173003 of them errors) are not listed")


def test_long_pointers_are_bounded_by_bytes():
    doc = {"mode": "config", "command": "x {config_path}", "config_format": "yaml", "spec": deep_dotted_spec()}
    report = jobgate.Validator().check(doc, kind="spec_bundle")
    dotted = [v for v in report.violations if v.rule == "tao.dotted_key"]
    assert 0 < len(dotted) < 5000
    assert report_bytes(report) <= BUDGET + 1000
    omitted = [v for v in report.violations if v.rule == "limits.violations"]
    assert len(omitted) == 1 and omitted[0].severity == "error"


def test_the_limit_is_configurable_and_a_warning_overflow_keeps_the_verdict():
    doc = sample("jobspec.valid.json")
    doc.update({f"extra{i}": 1 for i in range(10)})  # ten schema.additionalProperties warnings
    report = jobgate.Validator({"limits": {"max_violations": 3}}).check(doc)
    assert report.verdict == "pass"
    assert [(v.rule, v.severity) for v in report.violations][:1] == [("limits.violations", "warning")]
    assert len(report.violations) == 4
    assert "7 more violations (0 of them errors)" in report.violations[0].message
    # Under the limit, nothing is counted.
    assert "limits.violations" not in {v.rule for v in jobgate.Validator().check(doc).violations}
