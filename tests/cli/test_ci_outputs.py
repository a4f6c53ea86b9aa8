"""Where findings show: every violation at its line and column (JSON and YAML, values
and keys), and the outputs CI tools read: text editors jump to, GitHub workflow
commands, SARIF read by a real consumer, well-formed JUnit; and --fail-on."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import jobgate
from jobgate.cli import main
from jobgate.v1 import admission_pb2
from tests.helpers import run_cli, sample
from tests.server.helpers import Running, config_for

JSON_DOC = """{
  "apiVersion": "forge/v2",
  "kind": "Other",
  "metadata": {"name": "ok", "project": "my-lab", "owner": ""},
  "unknown_field": 1
}
"""

YAML_BUNDLE = """network_arch: dino
action: train
image: nvcr.io/nvidia/tao/tao-toolkit:6.26.3-pyt
mode: config
command: dino train -e {config_path}
config_format: yaml
spec:
  train:
    num.epochs: 12
"""


def places(report) -> list[tuple[str, str, int | None, int | None]]:
    return [(v.rule, v.field, v.line, v.column) for v in report.violations]


def test_violations_carry_the_line_and_column_of_their_value_or_key():
    r = jobgate.Validator().check(JSON_DOC.encode())
    found = {(rule, field): (line, col) for rule, field, line, col in places(r)}
    assert found[("forge.kind", "/kind")] == (3, 11)  # the value
    assert found[("schema.additionalProperties", "/unknown_field")] == (5, 3)  # the key
    y = jobgate.Validator().check(YAML_BUNDLE.encode())
    assert ("tao.dotted_key", "/spec/train/num.epochs", 9, 5) in places(y)  # the key, in YAML
    # a clean report has nothing to place; a dict report carries the place
    assert jobgate.Validator().check(json.dumps(sample("jobspec.valid.json")).encode()).violations == []
    first = r.to_dict()["violations"][0]
    assert set(first) == {"rule", "field", "message", "severity", "line", "column"}


def test_text_output_reads_file_line_col(tmp_path, capsys):
    path = tmp_path / "job.json"
    path.write_text(JSON_DOC)
    code, out = run_cli(capsys, ["check", str(path)])
    assert code == 1
    assert f"{path}:3:11: error forge.kind " in out
    assert f"{path}:5:3: warning schema.additionalProperties " in out


def test_github_annotations(tmp_path, capsys):
    path = tmp_path / "a,b: c.json"  # a name that needs escaping in a property
    path.write_text(JSON_DOC)
    code, out = run_cli(capsys, ["check", str(path), "--format", "github"])
    assert code == 1
    shown = str(path).replace(",", "%2C").replace(":", "%3A")
    lines = out.splitlines()
    assert f"::error file={shown},line=3,col=11,title=forge.kind::" in "\n".join(lines)
    warning = next(line for line in lines if line.startswith("::warning "))
    assert warning.startswith(f"::warning file={shown},line=5,col=3,title=schema.additionalProperties::")
    assert lines[-1].startswith("1 document: 0 passed, 1 failed")
    assert lines[0] == f"::group::{path}" and lines[-2] == "::endgroup::"  # ':' and ',' need no escape in a message


def test_github_output_is_grouped_per_file(tmp_path, capsys):
    (tmp_path / "a.json").write_text(JSON_DOC)
    (tmp_path / "ok.json").write_text(json.dumps(sample("jobspec.valid.json")))
    (tmp_path / "b\nc%.json").write_text(JSON_DOC)
    paths = [tmp_path / "a.json", tmp_path / "ok.json", tmp_path / "b\nc%.json"]
    code, out = run_cli(capsys, ["check", *map(str, paths), "--format", "github"])
    assert code == 1
    lines = out.splitlines()
    report = jobgate.Validator().check(JSON_DOC.encode())
    n = len(report.violations)
    assert n >= 2
    second = str(paths[2]).replace("%", "%25").replace("\n", "%0A")
    assert [line for line in lines if line.startswith("::group::") or line == "::endgroup::"] == [f"::group::{paths[0]}", "::endgroup::", f"::group::{second}", "::endgroup::"]
    assert lines.index("::endgroup::") == n + 1  # the first file's annotations, all inside its group
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines[1 : n + 1])
    assert all(f"file={str(paths[0]).replace(':', '%3A')}," in line for line in lines[1 : n + 1])
    assert len(lines) == 2 * (n + 2) + 1 and lines[-1].startswith("3 documents: 1 passed, 2 failed")


def test_sarif_has_regions_fingerprints_encoded_uris_and_reads_in_a_consumer(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my dir").mkdir()
    (tmp_path / "my dir" / "bad job.json").write_text(JSON_DOC)
    code, out = run_cli(capsys, ["check", "my dir/bad job.json", "--format", "sarif"])
    assert code == 1
    sarif = json.loads(out)
    run = sarif["runs"][0]
    results = run["results"]
    located = {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"], r["locations"][0]["physicalLocation"]["region"]["startColumn"]) for r in results}
    assert {("forge.kind", 3, 11), ("schema.additionalProperties", 5, 3)} <= located
    for r in results:
        artifact = r["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact == {"uri": "my%20dir/bad%20job.json", "uriBaseId": "%SRCROOT%"}
        assert len(r["partialFingerprints"]["jobgateFinding/v1"]) == 32
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"
    assert run["invocations"][0]["executionSuccessful"] is True and run["columnKind"] == "unicodeCodePoints"
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "forge.kind")
    assert rule["help"]["text"].startswith("forge.kind: ") and rule["defaultConfiguration"]["level"] == "error"
    # the same findings, the same fingerprints, run after run
    again = json.loads(run_cli(capsys, ["check", "my dir/bad job.json", "--format", "sarif"])[1])
    assert [r["partialFingerprints"] for r in again["runs"][0]["results"]] == [r["partialFingerprints"] for r in results]
    # stdin gets a valid URI reference too
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(JSON_DOC.encode())))
    stdin = json.loads(run_cli(capsys, ["check", "-", "--format", "sarif"])[1])
    assert stdin["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "%3Cstdin%3E"
    # sarif-tools, a real consumer, reads every finding with its line
    (tmp_path / "out.sarif").write_text(out)
    sarif_cli = Path(sys.executable).parent / "sarif"
    done = subprocess.run([str(sarif_cli), "csv", "out.sarif", "-o", "out.csv"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = (tmp_path / "out.csv").read_text().splitlines()
    assert rows[0] == "Tool,Severity,Code,Description,Location,Line"
    assert any(row.startswith("jobgate,error,forge.kind,") and row.endswith(",my%20dir/bad%20job.json,3") for row in rows[1:])


def test_junit_has_a_testcase_per_document_with_every_violation_at_its_place(tmp_path, capsys):
    doc = {**sample("jobspec.valid.json"), "kind": "Other", "unknown_field": 1}
    bad = tmp_path / "job\x01\x1b.json"  # control characters XML 1.0 cannot hold, in a file name
    bad.write_text(json.dumps(doc))
    (tmp_path / "ok.json").write_text(json.dumps(sample("jobspec.valid.json")))
    warned = tmp_path / "warned.json"
    warned.write_text(json.dumps({**sample("jobspec.valid.json"), "unknown_field": 1}))
    code, out = run_cli(capsys, ["check", str(bad), str(tmp_path / "ok.json"), str(warned), "--format", "junit"])
    assert code == 1
    root = ET.fromstring(out)  # a real XML parser reads it
    suite = root.find("testsuite")
    assert suite.get("name") == "jobgate check"
    assert (root.get("tests"), root.get("failures")) == ("3", "1")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    cases = suite.findall("testcase")
    shown = str(bad).replace("\x01", "\\u0001").replace("\x1b", "\\u001b")
    assert [c.get("name") for c in cases] == [shown, str(tmp_path / "ok.json"), str(warned)]
    assert [c.get("file") for c in cases] == [shown, str(tmp_path / "ok.json"), str(warned)]
    assert [c.get("classname") for c in cases] == ["jobspec"] * 3
    text = json.dumps(doc)
    kind_at = text.index('"Other"') + 1
    unknown_at = text.index('"unknown_field"') + 1
    assert [c.get("line") for c in cases] == ["1", None, "1"]
    failure = cases[0].find("failure")
    assert (failure.get("type"), failure.get("message")) == ("forge.kind", "1 error(s)")
    report = jobgate.Validator().check(text.encode())
    assert {v.rule for v in report.violations} >= {"forge.kind"} and len(report.violations) >= 2
    expected = [f"{shown}:{v.line}:{v.column}: {v.rule}: {v.message}" for v in report.violations]
    assert failure.text.split("\n") == expected
    assert f"{shown}:1:{kind_at}: forge.kind: " in failure.text and f"{shown}:1:{unknown_at}: " in failure.text
    assert cases[1].find("failure") is None and cases[1].find("system-out") is None
    assert cases[2].find("failure") is None and cases[2].find("system-out").text.startswith(f"{warned}:1:")


def test_junit_line_is_the_first_error_line_of_a_pretty_document(tmp_path, capsys):
    doc = {**sample("jobspec.valid.json"), "kind": "Other"}
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(doc, indent=2))
    _, out = run_cli(capsys, ["check", str(path), "--format", "junit"])
    case = ET.fromstring(out).find("testsuite/testcase")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if '"Other"' in text)
    assert line > 1 and case.get("line") == str(line) and case.get("file") == str(path)


def test_fail_on_warning(tmp_path, capsys):
    doc = {**sample("jobspec.valid.json"), "unknown_field": 1}
    (tmp_path / "warned.json").write_text(json.dumps(doc))
    assert run_cli(capsys, ["check", str(tmp_path / "warned.json")])[0] == 0
    assert run_cli(capsys, ["check", str(tmp_path / "warned.json"), "--fail-on", "warning"])[0] == 1
    assert run_cli(capsys, ["revalidate", str(tmp_path), "--fail-on", "warning"])[0] == 1
    assert run_cli(capsys, ["revalidate", str(tmp_path)])[0] == 0
    with pytest.raises(SystemExit) as e:  # argparse's usage error
        main(["check", str(tmp_path / "warned.json"), "--fail-on", "nothing"])
    assert e.value.code == 2


def test_the_service_reports_lines_and_columns(tmp_path):
    r = Running(config_for(tmp_path))
    try:
        response = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JSON_DOC.encode()), dry_run=True), metadata=r.auth)
        placed = {(v.rule, v.line, v.column) for v in response.report.violations}
        assert ("forge.kind", 3, 11) in placed
        batch = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=JSON_DOC.encode())] * 2, dry_run=True), metadata=r.auth)
        assert all(("forge.kind", 3, 11) in {(v.rule, v.line, v.column) for v in item.report.violations} for item in batch.results)
    finally:
        r.close()


def test_documents_that_were_not_text_have_no_lines(tmp_path):
    """SPEC §2: line and column for documents read from JSON or YAML text, absent for
    typed messages (and for a parsed dict handed to the Python API)."""
    v = jobgate.Validator()
    as_dict = v.check(json.loads(JSON_DOC))
    assert [v.line for v in as_dict.violations] == [None] * len(as_dict.violations)
    assert "line" not in as_dict.to_dict()["violations"][0]
    many = v.check_many([JSON_DOC.encode(), json.loads(JSON_DOC)])
    assert many[0].violations[0].line is not None and many[1].violations[0].line is None
    from google.protobuf import json_format

    from jobgate.v1 import jobspec_pb2

    r = Running(config_for(tmp_path))
    try:
        typed = json_format.ParseDict({**sample("jobspec.valid.json"), "kind": "Other"}, jobspec_pb2.JobSpec())
        for dry_run in (True, False):
            response = r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(jobspec=typed), dry_run=dry_run), metadata=r.auth)
            assert [(v.rule, v.line, v.column) for v in response.report.violations] == [("forge.kind", 0, 0)]
        batch = r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(jobspec=typed), admission_pb2.Document(raw=JSON_DOC.encode())], dry_run=True), metadata=r.auth)
        assert [(v.line, v.column) for v in batch.results[0].report.violations] == [(0, 0)]
        assert ("forge.kind", 3, 11) in {(v.rule, v.line, v.column) for v in batch.results[1].report.violations}
    finally:
        r.close()
