"""The jobgate-check pre-commit hook, run by pre-commit itself (`try-repo`) on a
scratch git repository: it installs jobgate from this repository, picks the files by
name, passes the good ones and stops the commit on a bad one, naming the rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, sample


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_hook_passes_good_files_and_stops_a_bad_one(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is missing")
    pre_commit = Path(sys.executable).parent / "pre-commit"
    repo = tmp_path / "training"
    (repo / "jobs").mkdir(parents=True)
    good = sample("jobspec.valid.json")
    (repo / "jobs" / "grpo.jobspec.json").write_text(json.dumps(good, indent=2))
    (repo / "jobs" / "broken.jobspec.json").write_text(json.dumps({**good, "kind": "Other"}, indent=2))
    (repo / "notes.json").write_text("{not a jobspec, and not picked}")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "CARGO_TARGET_DIR": str(ROOT / "rust" / "target"), "SKIP": ""}

    def hook(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(pre_commit), "try-repo", str(ROOT), "jobgate-check", "--files", *files], cwd=repo, env=env, capture_output=True, text=True, timeout=1200, check=False)

    passed = hook("jobs/grpo.jobspec.json", "notes.json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "jobgate check" in passed.stdout and "Passed" in passed.stdout
    stopped = hook("jobs/grpo.jobspec.json", "jobs/broken.jobspec.json", "notes.json")
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "Failed" in stopped.stdout and "forge.kind" in stopped.stdout and "jobs/broken.jobspec.json" in stopped.stdout
    assert "notes.json" not in stopped.stdout  # not a file the hook picks
