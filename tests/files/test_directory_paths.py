"""A supporting-file path that names a directory (`a/`, `a/.`, `.`) is refused before
any file is touched: a producer root holding the file, a package holding it, and the
stager all agree, while a package's own directory members stay acceptable."""

from __future__ import annotations

import pytest

import jobgate
from tests.files.archives import tar_bytes
from tests.files.helpers import HELPER, bundle, sha
from tests.helpers import pairs, require_shared

require_shared()

V = jobgate.Validator()
F = "/execution/supporting_files"


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "producer"
    (r / "scripts").mkdir(parents=True)
    (r / "scripts" / "run.py").write_bytes(HELPER)
    return r


@pytest.mark.parametrize("source", ["scripts/run.py/", "scripts/run.py/."])
def test_a_source_named_like_a_directory_is_refused_though_the_file_exists(root, source):
    report = V.check(bundle([(source, "run.py", sha(HELPER))]), root=root)
    assert pairs(report) == [("tao.supporting_file.path", f"{F}/0/source")]


@pytest.mark.parametrize("destination", ["helpers/", "helpers/.", "./", "."])
def test_a_destination_named_like_a_directory_is_never_staged(root, tmp_path, destination):
    job = tmp_path / "job"
    result = V.stage(bundle([("scripts/run.py", destination, sha(HELPER))]), job, root=root)
    assert not result.ok and result.directory is None
    assert pairs(result.report) == [("tao.supporting_file.path", f"{F}/0/destination")]
    assert not (job / "inputs" / "action-helpers").exists()


def test_a_file_destination_is_staged_under_its_own_name(root, tmp_path):
    result = V.stage(bundle([("scripts/run.py", "./helpers//run.py", sha(HELPER))]), tmp_path / "job", root=root)
    assert result.ok, result.report.violations
    assert (tmp_path / "job" / "inputs" / "action-helpers" / "helpers" / "run.py").read_bytes() == HELPER


def test_a_package_keeps_its_directory_members_and_refuses_a_source_named_like_one(tmp_path):
    path = tmp_path / "bundle.tar"
    honest = bundle([("scripts/run.py", "run.py", sha(HELPER))])
    path.write_bytes(tar_bytes([("dir", "./"), ("dir", "scripts/"), ("file", "scripts/run.py", HELPER)]))
    assert V.check(honest, package=path).verdict == "pass"
    report = V.check(bundle([("scripts/run.py/", "run.py", sha(HELPER))]), package=path)
    assert ("tao.supporting_file.path", f"{F}/0/source") in pairs(report)
    assert report.verdict == "fail"
