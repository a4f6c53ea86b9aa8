"""The command line against hostile paths, as subprocesses with a timeout (a command
that hangs fails the test rather than the run): FIFOs, sockets and devices named to
`check`, `revalidate` and `stage`; a job directory whose `inputs` or staging is a
symlink; a staged file edited after it was staged; destinations nested in others."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.files.helpers import bundle, sha, tar_package
from tests.helpers import EXAMPLES, require_shared

require_shared()

VALID = EXAMPLES / "spec_bundle.config_mode.dino_train.valid.json"
F = "/execution/supporting_files"


def jobgate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobgate.cli", *args], input=stdin.decode() if stdin else None, capture_output=True, text=True, timeout=60)


def violations(out: str) -> list[tuple[str, str]]:
    return [(v["rule"], v["field"]) for r in json.loads(out)["results"] for v in r["violations"]]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def test_check_a_fifo_is_exit_2_and_never_hangs(fifo):
    run = jobgate("check", str(fifo))
    assert run.returncode == 2 and run.stdout == ""
    assert f"{fifo}: is a FIFO, not a regular file" in run.stderr


def test_check_a_socket_or_a_device_is_exit_2(tmp_path):
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        run = jobgate("check", str(path))
    assert run.returncode == 2 and f"{path}: is a socket, not a regular file" in run.stderr
    run = jobgate("check", "/dev/zero")  # a device reads forever
    assert run.returncode == 2 and "/dev/zero: is a character device, not a regular file" in run.stderr


def test_check_stdin_is_still_a_pipe():
    run = jobgate("check", "-", "--format", "json", stdin=VALID.read_bytes())
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["results"][0]["source"] == "<stdin>"


def test_a_fifo_in_a_searched_directory_is_passed_over(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.json").write_bytes(VALID.read_bytes())
    os.mkfifo(tmp_path / "docs" / "b.json")
    for command in ("check", "revalidate"):
        run = jobgate(command, str(tmp_path / "docs"), "--format", "json")
        assert run.returncode == 0, run.stderr
        assert [r["source"] for r in json.loads(run.stdout)["results"]] == [str(tmp_path / "docs" / "a.json")]


def test_revalidate_a_fifo_is_exit_2_and_never_hangs(fifo, tmp_path):
    run = jobgate("revalidate", str(fifo))
    assert run.returncode == 2 and f"{fifo}: is a FIFO, not a regular file" in run.stderr
    package = tmp_path / "p.tar.gz"
    os.mkfifo(package)
    run = jobgate("revalidate", str(package))
    assert run.returncode == 2 and f"{package}: is a FIFO, not a regular file" in run.stderr


def test_options_naming_a_fifo_are_exit_2(fifo, tmp_path):
    job = tmp_path / "job"
    for args in (
        ["check", str(VALID), "--config", str(fifo)],
        ["check", "--package", str(fifo)],
        ["revalidate", str(VALID), "--config", str(fifo)],
        ["stage", str(fifo), "--root", str(tmp_path), "--job-dir", str(job)],
        ["stage", "--package", str(fifo), "--job-dir", str(job)],
    ):
        run = jobgate(*args)
        assert run.returncode == 2 and f"{fifo}: is a FIFO, not a regular file" in run.stderr, args
    assert not job.exists()


def test_the_python_api_refuses_a_fifo_configuration_without_hanging(fifo):
    code = "import jobgate, sys\ntry:\n    jobgate.load_config(sys.argv[1])\nexcept jobgate.ConfigError as e:\n    print(e)\n"
    run = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == f"{fifo}: cannot read the configuration: it is a FIFO, not a regular file"


def test_the_core_refuses_a_fifo_package_without_hanging(fifo):
    code = "import jobgate, sys; r = jobgate.Validator().check(None, package=sys.argv[1]); print(r.violations[0].rule, r.violations[0].message)"
    run = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == f"json.syntax the package {fifo} cannot be read: it is a FIFO, not a regular file"


# ---------------------------------------------------------------- stage


@pytest.fixture
def helpers(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "a.py").write_bytes(b"print(1)\n")
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle([("scripts/a.py", "a.py", sha(b"print(1)\n"))])))
    return root, path


def test_stage_through_a_symlinked_inputs_writes_nothing_outside(helpers, tmp_path):
    root, path = helpers
    outside = tmp_path / "outside"
    outside.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / "inputs").symlink_to(outside)
    run = jobgate("stage", str(path), "--root", str(root), "--job-dir", str(job), "--format", "json")
    assert run.returncode == 1 and violations(run.stdout) == [("tao.staging.conflict", F)]
    assert list(outside.iterdir()) == []


def test_stage_never_keeps_a_staging_reached_through_a_symlink(helpers, tmp_path):
    root, path = helpers
    elsewhere = tmp_path / "elsewhere"
    assert jobgate("stage", str(path), "--root", str(root), "--job-dir", str(elsewhere)).returncode == 0
    job = tmp_path / "job"
    (job / "inputs").mkdir(parents=True)
    (job / "inputs" / "action-helpers").symlink_to(elsewhere / "inputs" / "action-helpers")
    run = jobgate("stage", str(path), "--root", str(root), "--job-dir", str(job))
    assert run.returncode == 1 and "kept the identical staging" not in run.stdout
    assert "tao.staging.conflict" in run.stdout and "nothing was staged" in run.stderr


def test_stage_does_not_keep_an_edited_staging(helpers, tmp_path):
    root, path = helpers
    job = tmp_path / "job"
    assert jobgate("stage", str(path), "--root", str(root), "--job-dir", str(job)).returncode == 0
    staged = job / "inputs" / "action-helpers" / "a.py"
    staged.write_bytes(b"print(2)\n")
    run = jobgate("stage", str(path), "--root", str(root), "--job-dir", str(job), "--format", "json")
    assert run.returncode == 1 and violations(run.stdout) == [("tao.staging.conflict", F)]
    assert "a.py which hashes to " + sha(b"print(2)\n") in json.loads(run.stdout)["results"][0]["violations"][0]["message"]
    assert staged.read_bytes() == b"print(2)\n"  # left untouched


def test_check_refuses_a_destination_inside_another(tmp_path):
    doc = bundle([("scripts/x.py", "x", "a" * 64), ("scripts/y.py", "x/y", "b" * 64)])
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(doc))
    run = jobgate("check", str(path), "--format", "json")
    assert run.returncode == 1 and violations(run.stdout) == [("tao.supporting_file.duplicate_destination", f"{F}/1/destination")]
    message = json.loads(run.stdout)["results"][0]["violations"][0]["message"]
    assert message.startswith('"x/y" would stage inside "x", which another supporting file stages as a file')
    package = tar_package(tmp_path / "p.tar", {"bundle.json": json.dumps(doc).encode(), "scripts/x.py": b"", "scripts/y.py": b""})
    run = jobgate("stage", "--package", str(package), "--job-dir", str(tmp_path / "job"), "--format", "json")
    assert run.returncode == 1 and ("tao.supporting_file.duplicate_destination", f"{F}/1/destination") in violations(run.stdout)
    assert not (tmp_path / "job").exists()
