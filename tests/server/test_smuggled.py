"""Nothing smuggled past the gate: each input whose meaning to its consumer differs
from what a reader could take it to mean is refused the same way by the service
(`Admit`, no job id, no record), `jobgate check`, `jobgate revalidate` and
`jobgate stage`. The generated differential tests live beside each reader
(tests/core/test_yaml_differential.py, tests/files/test_package_differential.py);
these are the named cases, end to end."""

from __future__ import annotations

import json

import pytest
import yaml

from jobgate.v1 import admission_pb2, jobs_pb2
from tests.files.helpers import packaged, tar_package
from tests.helpers import run_cli, sample

JOBSPEC = yaml.safe_dump(sample("jobspec.valid.json"), sort_keys=False)

YAML_CASES = {
    "tag on a sequence": JOBSPEC + 'x: !!python/object/apply:os.system ["touch /tmp/p"]\n',
    "local tag on a mapping": JOBSPEC + "x: !foo {a: 1}\n",
    "set": JOBSPEC + "x: !!set {a: null}\n",
    "merge key": JOBSPEC.replace("  framework:\n", "  framework:\n    <<: {image: evil.example.com/miner:latest}\n", 1),
    "boolean yes": JOBSPEC + "x: yes\n",
}


@pytest.mark.parametrize("name", sorted(YAML_CASES))
def test_a_yaml_document_is_refused_by_the_service_and_opens_nothing(running, name):
    text = YAML_CASES[name].encode()
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=text)), metadata=running.auth)
    assert r.report.verdict == "fail" and not r.job_id
    assert [(v.rule, v.field) for v in r.report.violations] == [("json.syntax", "")]
    listed = running.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=running.auth)
    assert list(listed.jobs) == []


@pytest.mark.parametrize("command", ["check", "revalidate"])
def test_a_yaml_document_is_refused_by_check_and_revalidate(tmp_path, capsys, command):
    for i, name in enumerate(sorted(YAML_CASES)):
        (tmp_path / f"{i}.yaml").write_text(YAML_CASES[name])
    code, out = run_cli(capsys, [command, str(tmp_path), "--format", "json"])
    assert code == 1
    results = json.loads(out)["results"]
    assert len(results) == len(YAML_CASES)
    for result in results:
        assert result["verdict"] == "fail"
        assert [(v["rule"], v["field"]) for v in result["violations"]] == [("json.syntax", "")]


def test_a_yaml_bundle_with_a_merge_key_is_not_staged(tmp_path, capsys):
    doc, members = packaged()
    package = tar_package(tmp_path / "p.tar", members)
    text = yaml.safe_dump(doc, sort_keys=False).replace("execution:\n", "execution:\n  <<: {environment: {A: b}}\n", 1)
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(text)
    code, out = run_cli(capsys, ["stage", str(bundle), "--package", str(package), "--job-dir", str(tmp_path / "job")])
    assert code == 1
    assert "json.syntax" in out and "merge keys" in out
    assert not (tmp_path / "job" / "inputs").exists()


def _packages() -> dict[str, tuple[dict, bytes]]:
    from tests.files import archives as pkg

    doc, entries = pkg.packaged()
    second = [("file", "scripts/helper.py", pkg.EVIL), ("file", "evil.sh", pkg.EVIL)]
    mismatched = bytearray(pkg.zip_bytes(entries))
    at = mismatched.index(b"scripts/helper.py", mismatched.index(b"PK\x03\x04", 4))
    mismatched[at : at + 17] = b"scripts/helper.sh"
    return {
        "two gzip members": (doc, pkg.gz(pkg.tar_bytes(entries, end=False)) + pkg.gz(pkg.tar_bytes(second))),
        "two zstd frames": (doc, pkg.zst(pkg.tar_bytes(entries, end=False)) + pkg.zst(pkg.tar_bytes(second))),
        "duplicate zip members, evil first": (doc, pkg.zip_bytes([entries[0], ("file", "scripts/helper.py", pkg.EVIL), entries[1]])),
        "local and central zip names differ": (doc, bytes(mismatched)),
        "a tar with a zip appended": (doc, pkg.tar_bytes(entries) + pkg.zip_bytes([("file", "evil.sh", pkg.EVIL)])),
        "a zip with a prefix": (doc, b"#!/bin/sh\nexec python -m helper\n" + pkg.zip_bytes(entries)),
        "two bundle documents": (doc, pkg.tar_bytes([*entries, ("file", "bundle.yaml", json.dumps(pkg.bundle({})).encode())])),
        "a package shipping another bundle": (doc, pkg.tar_bytes([("file", "bundle.json", json.dumps({**doc, "image": "evil.example.com/pwn:1"}).encode()), *entries[1:]])),
    }


PACKAGE_CASES = sorted(_packages())


def expected_pairs(doc: dict, package: bytes, tmp_path) -> list[tuple[str, str]]:
    import jobgate

    path = tmp_path / "expected.pkg"
    path.write_bytes(package)
    report = jobgate.Validator().check(doc, package=path)
    assert report.verdict == "fail"
    return [(v.rule, v.field) for v in report.violations]


@pytest.mark.parametrize("name", PACKAGE_CASES)
def test_a_package_is_refused_by_the_service_and_opens_nothing(running, tmp_path, name):
    doc, package = _packages()[name]
    want = expected_pairs(doc, package, tmp_path)
    document = admission_pb2.Document(raw=json.dumps(doc).encode(), package=package)
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=document), metadata=running.auth)
    assert r.report.verdict == "fail" and not r.job_id
    assert [(v.rule, v.field) for v in r.report.violations] == want
    assert str(tmp_path) not in " ".join(v.message for v in r.report.violations)  # named <package>
    assert list(running.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=running.auth).jobs) == []


@pytest.mark.parametrize("name", PACKAGE_CASES)
def test_a_package_is_refused_by_check_revalidate_and_stage(tmp_path, capsys, name):
    doc, package = _packages()[name]
    want = expected_pairs(doc, package, tmp_path)
    suffix = ".zip" if package.startswith((b"PK", b"#!")) else ".tar.gz" if package[:2] == b"\x1f\x8b" else ".tar.zst" if package[:4] == b"\x28\xb5\x2f\xfd" else ".tar"
    archive = tmp_path / "archive" / f"job{suffix}"
    archive.parent.mkdir()
    archive.write_bytes(package)
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(doc))

    code, out = run_cli(capsys, ["check", str(bundle), "--package", str(archive), "--format", "json"])
    assert code == 1
    assert [(v["rule"], v["field"]) for v in json.loads(out)["results"][0]["violations"]] == want

    # revalidate judges the package by its own bundle document, which is `doc` here
    # (except where the package ships another one, which is the whole point)
    if name != "a package shipping another bundle":
        code, out = run_cli(capsys, ["revalidate", str(archive.parent), "--format", "json"])
        assert code == 1
        (result,) = json.loads(out)["results"]
        assert result["verdict"] == "fail" and [(v["rule"], v["field"]) for v in result["violations"]] == want

    job = tmp_path / "job"
    code, out = run_cli(capsys, ["stage", str(bundle), "--package", str(archive), "--job-dir", str(job)])
    assert code == 1
    assert not (job / "inputs").exists()
