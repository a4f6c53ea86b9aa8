"""`jobgate check` and `jobgate demo`: formats, exit codes, and clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import jobgate
from jobgate.cli import main
from tests.helpers import EXAMPLES, require_shared, run_cli

require_shared()

VALID = EXAMPLES / "spec_bundle.config_mode.dino_train.valid.json"
INVALID = EXAMPLES / "spec_bundle.invalid.dotted_nested_key.json"


def test_exit_codes(capsys):
    assert run_cli(capsys, ["check", str(VALID)])[0] == 0
    assert run_cli(capsys, ["check", str(VALID), str(INVALID)])[0] == 1


def test_missing_file_is_named_on_stderr(capsys):
    code = main(["check", str(VALID), "/no/such/file.json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "/no/such/file.json: no such file or directory" in captured.err


def test_text_output_is_for_people(capsys):
    code, out = run_cli(capsys, ["check", str(INVALID)])
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{INVALID}: fail (spec_bundle) — 1 error"
    # file:line:col: severity rule message (at field), which editors jump to
    assert lines[1].startswith(f"{INVALID}:24:7: error tao.dotted_key ") and lines[1].endswith("(at /spec/train/optim.lr)")
    assert lines[-1] == "1 document: 0 passed, 1 failed (1 errors, 0 warnings)"


def test_a_whole_document_violation_is_named_so_in_text(capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_bytes(b'{"a": 1}{"b": 2}')
    code, out = run_cli(capsys, ["check", str(broken)])
    assert code == 1
    # Placed at the document's first value; `/` would be the pointer of the key "".
    assert out.splitlines()[1].startswith(f"{broken}:1:1: error json.syntax not valid JSON: trailing characters at line 1 column 9")
    assert out.splitlines()[1].endswith("(at the whole document)")


def test_json_output_shape(capsys):
    _, out = run_cli(capsys, ["check", str(VALID), str(INVALID), "--format", "json"])
    data = json.loads(out)
    assert set(data) == {"results", "summary"}
    assert data["summary"] == {"total": 2, "passed": 1, "failed": 1, "errors": 1, "warnings": 0}
    bad = data["results"][1]
    assert bad == {
        "source": str(INVALID),
        "kind": "spec_bundle",
        "verdict": "fail",
        "violations": [{"rule": "tao.dotted_key", "field": "/spec/train/optim.lr", "message": bad["violations"][0]["message"], "severity": "error", "line": 24, "column": 7}],
    }


def test_junit_and_sarif(capsys):
    _, out = run_cli(capsys, ["check", str(VALID), str(INVALID), "--format", "junit"])
    suite = ET.fromstring(out).find("testsuite")
    violations = jobgate.Validator().check(INVALID.read_bytes()).violations
    assert suite.get("tests") == "2" and suite.get("failures") == "1"  # documents, not violations
    failure = suite.findall("testcase")[1].find("failure")
    assert failure.get("type") == "tao.dotted_key"
    assert failure.text.split("\n") == [f"{INVALID}:{v.line}:{v.column}: {v.rule}: {v.message}" for v in violations]
    _, out = run_cli(capsys, ["check", str(INVALID), "--format", "sarif"])
    sarif = json.loads(out)
    result = sarif["runs"][0]["results"][0]
    assert sarif["version"] == "2.1.0"
    assert result["ruleId"] == "tao.dotted_key" and result["level"] == "error"
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "/spec/train/optim.lr"


def test_kind_option_and_stdin(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(VALID.read_bytes())))
    code, out = run_cli(capsys, ["check", "-", "--kind", "job_record", "--format", "json"])
    result = json.loads(out)["results"][0]
    assert code == 1 and result["source"] == "<stdin>" and result["kind"] == "job_record"


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[limits]\nmax_depth = 0\n", "limits.max_depth"),
        ("[gpus]\nmax_per_job = 'many'\n", "gpus.max_per_job"),
        ("[[catalog]]\nrecipe = {name = 'a/b', version = '1', digest = 'sha256:6527a24d50352ea67588604d4df476781a3b0f93cd1f0f2e9120c26d8f7ef509'}\nframework = {runtime_id = 'r'}\nrequires = {core = '>>1'}\n", "catalog.0.requires.core"),
        ("[registy]\nallow = []\n", "registy"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_configuration_names_file_and_key(capsys, tmp_path, toml, message):
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(toml)
    capsys.readouterr()
    code = main(["check", str(VALID), "--config", str(cfg)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert str(cfg) in err and message in err


def test_catalog_from_a_lock_file(tmp_path):
    import jobgate

    lock = EXAMPLES.parent.parent / "starforge" / "recipe.lock.v3.nemo-rl-grpo.json"
    cfg = tmp_path / "jobgate.toml"
    cfg.write_text(f"[[catalog]]\nlock = '{lock}'\nobservability = 'platform'\n")
    v = jobgate.Validator(cfg)
    from tests.helpers import sample

    assert v.check(sample("jobspec.valid.json")).verdict == "pass"


def test_demo_runs_and_shows_both_verdicts():
    out = subprocess.run([sys.executable, "-m", "jobgate.cli", "demo"], capture_output=True, text=True, check=True).stdout
    assert "samples/jobspec.valid.json: pass (jobspec)" in out
    assert "samples/spec_bundle.rejected.yaml: fail (spec_bundle)" in out
    assert "tao.dotted_key" in out and "forge.handshake.version" in out


def test_no_subcommand_and_bad_option_exit_2(capsys):
    assert run_cli(capsys, [])[0] == 2
    with pytest.raises(SystemExit) as e:
        run_cli(capsys, ["check", str(VALID), "--format", "xml"])
    assert e.value.code == 2


def test_an_oversized_document_is_refused_before_it_is_read(capsys, tmp_path, monkeypatch):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # 20 GiB on paper, no disk: reading it whole would exhaust memory
        f.truncate(20 << 30)
    code, out = run_cli(capsys, ["check", str(huge), str(VALID), "--format", "json"])
    results = json.loads(out)["results"]
    assert code == 1 and [r["verdict"] for r in results] == ["fail", "pass"]
    assert results[0]["violations"] == [{"rule": "limits.size", "field": "", "message": f"the document is {20 << 30} bytes, over the limit of 1048576 bytes", "severity": "error"}]
    # the same message the core gives a document over the limit it was handed whole
    big = b'{"a": "' + b"x" * (1 << 20) + b'"}'
    (tmp_path / "big.json").write_bytes(big)
    core = jobgate.Validator().check(big).violations[0]
    _, out = run_cli(capsys, ["check", str(tmp_path / "big.json"), "--format", "json"])
    assert json.loads(out)["results"][0]["violations"][0] == {"rule": core.rule, "field": core.field, "message": core.message, "severity": core.severity}
    # stdin has no size to stat: at most one byte past the limit is read
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(big)))
    code, out = run_cli(capsys, ["check", "-", "--format", "json"])
    assert code == 1 and json.loads(out)["results"][0]["violations"][0]["message"] == "the document is more than 1048576 bytes, over the limit of 1048576 bytes"


def test_the_command_line_says_what_happened(tmp_path, capsys):
    """Usage errors show the subcommand's usage; unreadable inputs and typos are exit 2
    with one clear line; reading never creates a store."""
    doc = tmp_path / "doc.json"
    doc.write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(["jobs", "list", "--bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: jobgate jobs list") and "unrecognized arguments: --bogus" in err

    assert main(["check", str(doc), "--package", str(tmp_path / "missing.tar")]) == 2
    assert f"{tmp_path / 'missing.tar'}: no such file" in capsys.readouterr().err

    assert main(["jobs", "list", "--store", str(tmp_path / "typo")]) == 2
    assert "no job store at" in capsys.readouterr().err and not (tmp_path / "typo").exists()

    typo = tmp_path / "typo.toml"
    typo.write_text("[limits]\nmax_depht = 3\n")
    assert main(["check", str(doc), "--config", str(typo)]) == 2
    assert capsys.readouterr().err.strip() == f"jobgate: {typo}: limits.max_depht: not a known key; did you mean 'max_depth'?"

    digest = tmp_path / "digest.toml"
    digest.write_text("[[catalog]]\nrecipe = { name = 'a/b', version = '1', digest = 'sha256:…' }\nframework = { runtime_id = 'r' }\n")
    assert main(["check", str(doc), "--config", str(digest)]) == 2
    assert "catalog.0.recipe.digest: 'sha256:…' is not a digest" in capsys.readouterr().err


def test_offline_commands_do_not_load_grpc(tmp_path):
    """check, stage and revalidate start without the gRPC runtime: it is imported by
    the commands that talk to a server, when they run."""
    (tmp_path / "a.json").write_bytes(VALID.read_bytes())
    script = "import sys; from jobgate.cli import main; code = main(sys.argv[1:]); assert 'grpc' not in sys.modules, 'grpc loaded'; sys.exit(code)"
    for args in (["check", str(VALID)], ["revalidate", str(tmp_path), "--cache", str(tmp_path / "c.sqlite")]):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
