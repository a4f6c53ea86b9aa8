"""Staging: atomic, reusable when identical, refusing anything else, and whole or
absent after a kill at any instant."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobgate
from tests.files.helpers import bundle, sha, tar_package
from tests.helpers import pairs

V = jobgate.Validator()
MANIFEST = ".jobgate-manifest.json"


@pytest.fixture
def producer(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "producer"
    (root / "scripts").mkdir(parents=True)
    files = {"scripts/run.py": b"print('run')\n", "scripts/cfg/base.yaml": b"a: 1\n"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    doc = bundle([("scripts/run.py", "run.py", sha(files["scripts/run.py"])), ("scripts/cfg/base.yaml", "cfg/base.yaml", sha(files["scripts/cfg/base.yaml"]))])
    return root, doc


def test_stage_writes_files_and_manifest(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    result = V.stage(doc, job, root=root)
    assert result.ok and not result.reused
    target = job / "inputs" / "action-helpers"
    assert result.directory == str(target)
    assert (target / "run.py").read_bytes() == b"print('run')\n"
    assert (target / "cfg" / "base.yaml").read_bytes() == b"a: 1\n"
    manifest = json.loads((target / MANIFEST).read_bytes())
    assert manifest["files"] == [
        {"source": "scripts/cfg/base.yaml", "destination": "cfg/base.yaml", "sha256": sha(b"a: 1\n"), "size": 5},
        {"source": "scripts/run.py", "destination": "run.py", "sha256": sha(b"print('run')\n"), "size": 13},
    ]
    assert sorted(p.name for p in (job / "inputs").iterdir()) == ["action-helpers"]  # no temporary left


def test_identical_staging_is_reused_without_rewriting(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    V.stage(doc, job, root=root)
    target = job / "inputs" / "action-helpers"
    before = {p: p.stat().st_mtime_ns for p in target.rglob("*")}
    time.sleep(0.01)
    again = V.stage(doc, job, root=root)
    assert again.ok and again.reused
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == before


def test_a_different_bundle_or_extra_files_conflict_and_change_nothing(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    V.stage(doc, job, root=root)
    target = job / "inputs" / "action-helpers"
    snapshot = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}

    (root / "scripts" / "run.py").write_bytes(b"print('v2')\n")
    other = bundle([("scripts/run.py", "run.py", sha(b"print('v2')\n"))])
    result = V.stage(other, job, root=root)
    assert not result.ok and result.directory is None
    assert pairs(result.report) == [("tao.staging.conflict", "/execution/supporting_files")]
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == snapshot

    (root / "scripts" / "run.py").write_bytes(b"print('run')\n")
    (target / "stray.sh").write_bytes(b"#!/bin/sh\n")
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == [("tao.staging.conflict", "/execution/supporting_files")]
    assert "stray.sh" in result.report.violations[0].message
    assert (target / "stray.sh").exists()


def test_a_failing_verification_stages_nothing(producer, tmp_path):
    root, doc = producer
    (root / "scripts" / "run.py").write_bytes(b"tampered\n")
    result = V.stage(doc, tmp_path / "job", root=root)
    assert pairs(result.report) == [("tao.supporting_file.sha256_mismatch", "/execution/supporting_files/0/sha256")]
    assert not (tmp_path / "job").exists()


def test_the_job_directory_is_created_but_never_its_parents(producer, tmp_path):
    """A missing job directory is made; one whose parent is missing is a mistyped path
    (or one that would build a tree up to /): refused, and nothing is created."""
    root, doc = producer
    deep = tmp_path / "jobs" / "2024" / "42"
    result = V.stage(doc, deep, root=root)
    assert not result.ok and pairs(result.report) == [("tao.staging.conflict", "/execution/supporting_files")]
    assert result.report.violations[0].message == f"the job directory {deep} cannot be created: {deep.parent} does not exist (the job directory is created, never its parents); nothing was staged"
    assert not (tmp_path / "jobs").exists()
    (tmp_path / "jobs" / "2024").mkdir(parents=True)
    assert V.stage(doc, deep, root=root).ok  # its parent there, the job directory is made
    assert (deep / "inputs" / "action-helpers" / "run.py").exists()


def test_stage_from_a_package(tmp_path):
    helper = b"print('checkpoint')\n"
    doc = bundle([("scripts/checkpoint_action.py", "helpers/checkpoint_action.py", sha(helper))])
    pkg = tar_package(tmp_path / "p.tar.gz", {"bundle.json": json.dumps(doc).encode(), "scripts/checkpoint_action.py": helper}, "gz")
    result = V.stage(None, tmp_path / "job", package=pkg)
    assert result.ok, result.report.violations
    assert (tmp_path / "job" / "inputs" / "action-helpers" / "helpers" / "checkpoint_action.py").read_bytes() == helper


STAGER = """
import json, sys, jobgate
doc = json.load(open(sys.argv[1]))
result = jobgate.Validator({"limits": {"max_document_bytes": 8 << 20}}).stage(doc, sys.argv[2], root=sys.argv[3])
sys.exit(0 if result.ok else 1)
"""


def test_killed_midway_then_rerun(tmp_path):
    root = tmp_path / "root"
    files = []
    for i in range(3000):
        data = os.urandom(512)
        (root / f"d{i % 30}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 30}" / f"f{i}.bin").write_bytes(data)
        files.append((f"d{i % 30}/f{i}.bin", f"out/d{i % 30}/f{i}.bin", sha(data)))
    doc_path = tmp_path / "bundle.json"
    doc_path.write_text(json.dumps(bundle(files)))
    rng = random.Random(7)
    for attempt in range(6):
        job = tmp_path / f"job{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", STAGER, str(doc_path), str(job), str(root)])
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        target = job / "inputs" / "action-helpers"
        if target.exists():  # whole, never partial
            manifest = json.loads((target / MANIFEST).read_bytes())
            assert len(manifest["files"]) == 3000
            assert all((target / f["destination"]).stat().st_size == 512 for f in manifest["files"])
        rerun = subprocess.run([sys.executable, "-c", STAGER, str(doc_path), str(job), str(root)])
        assert rerun.returncode == 0
        assert len(json.loads((target / MANIFEST).read_bytes())["files"]) == 3000
        assert [p.name for p in (job / "inputs").iterdir()] == ["action-helpers"]  # the stale temporary is gone


# ---------------------------------------------------------------- hostile job directories

F = "/execution/supporting_files"
CONFLICT = [("tao.staging.conflict", F)]


def tree(path: Path) -> dict[str, bytes | None]:
    """Everything under `path`, without following links: files with their bytes,
    directories and links as None (links by their target)."""
    out: dict[str, bytes | None] = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        out[rel] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
        if p.is_symlink():
            out[rel + " ->"] = os.readlink(p).encode()
    return out


def test_a_symlinked_inputs_directory_is_a_conflict_and_nothing_is_written_through_it(producer, tmp_path):
    root, doc = producer
    outside = tmp_path / "outside"
    outside.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / "inputs").symlink_to(outside)
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and not result.ok
    assert "inputs is a symbolic link, not a directory" in result.report.violations[0].message
    assert list(outside.iterdir()) == []  # nothing written outside the job directory
    assert (job / "inputs").is_symlink() and [p.name for p in job.iterdir()] == ["inputs"]


def test_an_identical_staging_reached_through_a_symlink_is_not_kept(producer, tmp_path):
    root, doc = producer
    elsewhere = tmp_path / "elsewhere"
    assert V.stage(doc, elsewhere, root=root).ok  # a real, identical staging outside the job
    before = tree(elsewhere)
    job = tmp_path / "job"
    (job / "inputs").mkdir(parents=True)
    (job / "inputs" / "action-helpers").symlink_to(elsewhere / "inputs" / "action-helpers")
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and not result.reused
    assert "action-helpers is a symbolic link, not a directory" in result.report.violations[0].message
    assert tree(elsewhere) == before
    assert [p.name for p in (job / "inputs").iterdir()] == ["action-helpers"]  # the link, alone


def test_a_symlink_inside_a_staging_is_a_conflict(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    V.stage(doc, job, root=root)
    target = job / "inputs" / "action-helpers"
    copy = tmp_path / "copy.py"
    copy.write_bytes((target / "run.py").read_bytes())  # the same bytes, through a link
    (target / "run.py").unlink()
    (target / "run.py").symlink_to(copy)
    before = tree(target)
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT
    assert "symbolic link at run.py" in result.report.violations[0].message
    assert tree(target) == before
    # A directory of the staging swapped for a link is refused the same way.
    (target / "run.py").unlink()
    (target / "run.py").write_bytes(copy.read_bytes())
    (tmp_path / "cfg-elsewhere").mkdir()
    (target / "cfg").rename(tmp_path / "cfg-elsewhere" / "cfg")
    (target / "cfg").symlink_to(tmp_path / "cfg-elsewhere" / "cfg")
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and "symbolic link at cfg" in result.report.violations[0].message


def test_a_kept_staging_is_hashed_again(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    V.stage(doc, job, root=root)
    target = job / "inputs" / "action-helpers"
    (target / "run.py").write_bytes(b"print('RUN')\n")  # the same size, other bytes
    before = tree(target)
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and not result.reused
    message = result.report.violations[0].message
    assert "holds run.py which hashes to " + sha(b"print('RUN')\n") in message and "left untouched" in message
    assert tree(target) == before
    (target / "cfg" / "base.yaml").write_bytes(b"a: 1\nb: 2\n")  # another size: refused from fstat
    (target / "run.py").write_bytes(b"print('run')\n")
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT
    assert "holds cfg/base.yaml which is 10 bytes where its manifest says 5" in result.report.violations[0].message
    (target / "cfg" / "base.yaml").write_bytes(b"a: 1\n")
    assert V.stage(doc, job, root=root).reused  # restored: kept again


def test_a_manifest_that_is_a_link_or_huge_is_not_read(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    V.stage(doc, job, root=root)
    target = job / "inputs" / "action-helpers"
    manifest = target / MANIFEST
    saved = tmp_path / "manifest.json"
    manifest.rename(saved)
    manifest.symlink_to(saved)
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and "manifest that is reached through a symbolic link" in result.report.violations[0].message
    manifest.unlink()
    with open(manifest, "wb") as f:
        f.truncate(8 << 30)  # sparse: a bound read would take a second, a whole read would not end
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and f"staging manifest of {8 << 30} bytes" in result.report.violations[0].message


def test_an_empty_directory_in_place_is_not_replaced(producer, tmp_path):
    root, doc = producer
    job = tmp_path / "job"
    (job / "inputs" / "action-helpers").mkdir(parents=True)
    result = V.stage(doc, job, root=root)
    assert pairs(result.report) == CONFLICT and "without a readable staging manifest" in result.report.violations[0].message
    assert [p.name for p in (job / "inputs").iterdir()] == ["action-helpers"]
    assert list((job / "inputs" / "action-helpers").iterdir()) == []


def test_concurrent_stagings_agree(tmp_path):
    """Stagers racing on one job directory: one renames its staging into place
    (RENAME_NOREPLACE), the others find it there, judge it and keep it."""
    root = tmp_path / "root"
    files = []
    for i in range(300):
        data = f"helper {i}\n".encode()
        (root / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 10}" / f"f{i}.py").write_bytes(data)
        files.append((f"d{i % 10}/f{i}.py", f"h/d{i % 10}/f{i}.py", sha(data)))
    doc_path = tmp_path / "bundle.json"
    doc_path.write_text(json.dumps(bundle(files)))
    job = tmp_path / "job"
    stagers = [subprocess.Popen([sys.executable, "-c", STAGER, str(doc_path), str(job), str(root)]) for _ in range(6)]
    assert [p.wait(timeout=120) for p in stagers] == [0] * 6
    assert [p.name for p in (job / "inputs").iterdir()] == ["action-helpers"]
    assert len(json.loads((job / "inputs" / "action-helpers" / MANIFEST).read_bytes())["files"]) == 300


FAILING_STAGER = """
import json, resource, signal, sys, jobgate
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)            # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # every staged file is larger
result = jobgate.Validator().stage(json.load(open(sys.argv[1])), sys.argv[2], root=sys.argv[3])
print(json.dumps([[v.rule, v.field, v.message] for v in result.report.violations]))
sys.exit(0 if result.ok else 1)
"""


def test_a_staging_that_fails_midway_leaves_nothing_behind(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    files = []
    for i in range(3):
        data = os.urandom(4096)
        (root / "sub" / f"f{i}.bin").write_bytes(data)
        files.append((f"sub/f{i}.bin", f"out/f{i}.bin", sha(data)))
    doc_path = tmp_path / "bundle.json"
    doc_path.write_text(json.dumps(bundle(files)))

    def stage(job: Path) -> list:
        run = subprocess.run([sys.executable, "-c", FAILING_STAGER, str(doc_path), str(job), str(root)], capture_output=True, timeout=60)
        assert run.returncode == 1, run.stderr
        return json.loads(run.stdout)

    fresh = tmp_path / "fresh"
    (rule, field, message), = stage(fresh)
    assert (rule, field) == ("tao.staging.conflict", F) and "File too large" in message
    assert not fresh.exists()  # the job directory and inputs it created are gone again

    existing = tmp_path / "existing"
    (existing / "inputs").mkdir(parents=True)
    (existing / "inputs" / "other.txt").write_bytes(b"mine\n")
    before = tree(existing)
    assert [(r, f) for r, f, _ in stage(existing)] == CONFLICT
    assert tree(existing) == before  # no temporary left, nothing that existed changed


def test_a_file_over_the_limit_is_refused_from_its_size_when_staging(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with open(root / "sparse.bin", "wb") as f:
        f.truncate(10 << 30)
    small = jobgate.Validator({"limits": {"max_package_bytes": 1 << 20}})
    result = small.stage(bundle([("sparse.bin", "sparse.bin", "0" * 64)]), tmp_path / "job", root=root)
    assert pairs(result.report) == [("tao.supporting_file.missing", f"{F}/0/source")]
    assert f"more than {1 << 20} bytes (it is {10 << 30} bytes)" in result.report.violations[0].message
    assert not (tmp_path / "job").exists()
