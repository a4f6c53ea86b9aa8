"""`jobgate check --root/--package` and `jobgate stage`: exit codes and output."""

from __future__ import annotations

import json

from jobgate.cli import main
from tests.files.helpers import bundle, sha, tar_package
from tests.helpers import run_cli


def make(tmp_path):
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "a.py").write_bytes(b"print(1)\n")
    doc = bundle([("scripts/a.py", "a.py", sha(b"print(1)\n"))])
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(doc))
    return root, doc, path


def test_check_with_root(tmp_path, capsys):
    root, _, path = make(tmp_path)
    assert run_cli(capsys, ["check", str(path), "--root", str(root)])[0] == 0
    (root / "scripts" / "a.py").write_bytes(b"print(2)\n")
    code, out = run_cli(capsys, ["check", str(path), "--root", str(root), "--format", "json"])
    assert code == 1
    assert [v["rule"] for v in json.loads(out)["results"][0]["violations"]] == ["tao.supporting_file.sha256_mismatch"]


def test_check_with_package_alone(tmp_path, capsys):
    _, doc, _ = make(tmp_path)
    pkg = tar_package(tmp_path / "p.tar", {"bundle.json": json.dumps(doc).encode(), "scripts/a.py": b"print(1)\n", "x.sh": b""})
    code, out = run_cli(capsys, ["check", "--package", str(pkg)])
    assert code == 1 and "tao.supporting_file.undeclared" in out


def test_missing_root_is_exit_2(tmp_path, capsys):
    _, _, path = make(tmp_path)
    capsys.readouterr()
    assert main(["check", str(path), "--root", str(tmp_path / "nope")]) == 2
    assert "producer root" in capsys.readouterr().err


def test_stage_and_restage(tmp_path, capsys):
    root, _, path = make(tmp_path)
    job = tmp_path / "job"
    code, out = run_cli(capsys, ["stage", str(path), "--root", str(root), "--job-dir", str(job)])
    assert code == 0 and "staged 1 file(s) to" in out
    code, out = run_cli(capsys, ["stage", str(path), "--root", str(root), "--job-dir", str(job), "--format", "json"])
    data = json.loads(out)
    assert code == 0 and data["staging"]["reused"] is True
    assert data["staging"]["files"] == [{"source": "scripts/a.py", "destination": "a.py", "sha256": sha(b"print(1)\n"), "size": 9}]
    (job / "inputs" / "action-helpers" / "extra").write_bytes(b"")
    code, out = run_cli(capsys, ["stage", str(path), "--root", str(root), "--job-dir", str(job)])
    assert code == 1 and "tao.staging.conflict" in out


def test_stage_refuses_a_job_dir_whose_parent_is_missing(tmp_path, capsys):
    """`--job-dir` makes the job directory only: a missing parent is a usage error
    (exit 2) naming it, and nothing is created on the way."""
    root, _, path = make(tmp_path)
    job = tmp_path / "no" / "such" / "job"
    capsys.readouterr()
    assert main(["stage", str(path), "--root", str(root), "--job-dir", str(job)]) == 2
    assert capsys.readouterr().err.strip() == f"jobgate: --job-dir {job}: {job.parent} does not exist; the job directory is created if missing, never its parents"
    assert not (tmp_path / "no").exists()


def test_stage_needs_a_source(tmp_path, capsys):
    _, _, path = make(tmp_path)
    import pytest

    with pytest.raises(SystemExit) as e:
        main(["stage", str(path), "--job-dir", str(tmp_path / "job")])
    assert e.value.code == 2
