"""`jobgate submit` against a real server: verdicts, job ids, exit codes, packages."""

from __future__ import annotations

import json

from jobgate.cli import main
from tests.conftest import free_port, mutate, run_cli, sample
from tests.files.test_supporting_files import packaged, tar_package
from tests.server.conftest import TOKEN

JOBSPEC = sample("jobspec.valid.json")


def submit(capsys, running, *args: str) -> tuple[int, dict]:
    code, out = run_cli(capsys, ["submit", *args, "--server", f"127.0.0.1:{running.port}", "--token", TOKEN, "--format", "json"])
    return code, json.loads(out)


def test_submit_admits_refuses_and_dry_runs(running, tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(JOBSPEC))
    bad.write_text(json.dumps(mutate(JOBSPEC, {"/metadata/name": "../x"})))
    code, out = submit(capsys, running, str(good), str(bad))
    assert code == 1
    admitted, refused = out["results"]
    assert admitted["verdict"] == "pass" and admitted["job_id"].startswith("grpo-my-grpo-")
    assert refused["job_id"] == "" and [(v["rule"], v["field"]) for v in refused["violations"]] == [("forge.name", "/metadata/name")]
    assert [r["id"] for r in running.gate.store.list()] == [admitted["job_id"]]
    code, out = submit(capsys, running, str(good), "--dry-run")
    assert code == 0 and out["results"][0]["job_id"] == "" and len(running.gate.store.list()) == 1


def test_submit_with_a_package(running, tmp_path, capsys):
    doc, members = packaged()
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(doc))
    whole = tar_package(tmp_path / "whole.tar", members)
    changed = tar_package(tmp_path / "changed.tar", {**members, "scripts/checkpoint_action.py": b"print('other')\n"})
    assert submit(capsys, running, str(bundle), "--package", str(whole), "--dry-run")[0] == 0
    code, out = submit(capsys, running, str(bundle), "--package", str(changed), "--dry-run")
    assert code == 1 and [v["rule"] for v in out["results"][0]["violations"]] == ["tao.supporting_file.sha256_mismatch"]


def test_submit_that_cannot_run_is_exit_2(running, tmp_path, capsys):
    doc = tmp_path / "job.json"
    doc.write_text(json.dumps(JOBSPEC))
    capsys.readouterr()
    assert main(["submit", str(doc), "--server", f"127.0.0.1:{running.port}", "--token", "wrong"]) == 2
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert main(["submit", str(doc), "--server", f"127.0.0.1:{free_port()}", "--timeout", "5"]) == 2
    assert "UNAVAILABLE" in capsys.readouterr().err
    assert main(["submit", str(doc), "--package", str(tmp_path / "missing.tar"), "--server", f"127.0.0.1:{running.port}"]) == 2
    assert "missing.tar" in capsys.readouterr().err
