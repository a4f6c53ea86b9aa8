"""The pre-commit hooks, run by pre-commit itself (`try-repo`) on a scratch git
repository: jobgate-check installs jobgate from this repository, jobgate-check-installed
runs the jobgate on PATH; each picks the files by name, passes the good ones and stops
the commit on a bad one, naming the rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, sample

PRE_COMMIT = Path(sys.executable).parent / "pre-commit"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def training_repo(tmp_path: Path) -> Path:
    """A git repository with a good JobSpec, a broken one and a JSON file no hook picks."""
    if shutil.which("git") is None:
        pytest.skip("git is missing")
    repo = tmp_path / "training"
    (repo / "jobs").mkdir(parents=True)
    good = sample("jobspec.valid.json")
    (repo / "jobs" / "grpo.jobspec.json").write_text(json.dumps(good, indent=2))
    (repo / "jobs" / "broken.jobspec.json").write_text(json.dumps({**good, "kind": "Other"}, indent=2))
    (repo / "notes.json").write_text("{not a jobspec, and not picked}")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    return repo


def passes_good_files_and_stops_a_bad_one(hook) -> None:
    passed = hook("jobs/grpo.jobspec.json", "notes.json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "jobgate check" in passed.stdout and "Passed" in passed.stdout
    stopped = hook("jobs/grpo.jobspec.json", "jobs/broken.jobspec.json", "notes.json")
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "Failed" in stopped.stdout and "forge.kind" in stopped.stdout and "jobs/broken.jobspec.json" in stopped.stdout
    assert "notes.json" not in stopped.stdout  # not a file the hook picks


def test_the_hook_passes_good_files_and_stops_a_bad_one(tmp_path):
    repo = training_repo(tmp_path)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "CARGO_TARGET_DIR": str(ROOT / "rust" / "target"), "SKIP": ""}

    def hook(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(PRE_COMMIT), "try-repo", str(ROOT), "jobgate-check", "--files", *files], cwd=repo, env=env, capture_output=True, text=True, timeout=1200, check=False)

    passes_good_files_and_stops_a_bad_one(hook)


def test_the_installed_hook_runs_the_jobgate_on_path_and_builds_nothing(tmp_path):
    """jobgate-check-installed takes the jobgate of PATH (here the test's own): no
    environment is made for it, and without a jobgate on PATH it says so."""
    repo = training_repo(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "SKIP": "", "PATH": os.pathsep.join([bin_dir, os.environ["PATH"]])}

    def hook(*files: str, env: dict[str, str] = env) -> subprocess.CompletedProcess:
        return subprocess.run([str(PRE_COMMIT), "try-repo", str(ROOT), "jobgate-check-installed", "--files", *files], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False)

    passes_good_files_and_stops_a_bad_one(hook)
    # pre-commit made no environment for it: no virtualenv under its cache
    assert not list((tmp_path / "cache").rglob("pyvenv.cfg")), sorted(str(p) for p in (tmp_path / "cache").rglob("pyvenv.cfg"))

    # Without jobgate on PATH the hook fails, naming the executable it could not find.
    without = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if d and not (Path(d) / "jobgate").exists())
    missing = hook("jobs/grpo.jobspec.json", env={**env, "PATH": without})
    assert missing.returncode == 1 and "jobgate" in missing.stdout and "not found" in missing.stdout, missing.stdout + missing.stderr
