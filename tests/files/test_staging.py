"""Staging: atomic, reusable when identical, refusing anything else, and whole or
absent after a kill at any instant."""

from __future__ import annotations

import hashlib
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
from tests.files.test_supporting_files import bundle, pairs, tar_package

V = jobgate.Validator()
MANIFEST = ".jobgate-manifest.json"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
