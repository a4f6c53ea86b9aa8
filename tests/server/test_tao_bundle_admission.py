"""Through the service: the producer's own bundle whose input indexes below a missing
key is admitted with a warning, and a supporting file staged to a path that names a
directory is refused, with the core's rules and pointers."""

from __future__ import annotations

import json

from jobgate.v1 import admission_pb2
from tests.files.helpers import HELPER, packaged, sha, tar_package
from tests.helpers import SHARED, pairs, require_shared

require_shared()

PEER_FIXTURE = SHARED / "upstream" / "peer-cases" / "tao" / "spec_bundle" / "dotted_pointer_in_declared_input_valid.json"


def test_indexing_below_a_missing_key_is_admitted_with_a_warning(running):
    document = admission_pb2.Document(raw=PEER_FIXTURE.read_bytes())
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=document), metadata=running.auth)
    assert r.report.verdict == "pass" and r.job_id
    assert [(v.rule, v.field, v.severity) for v in r.report.violations] == [("tao.spec_key.unresolved", "/declared_inputs/0/spec_key", "warning")]
    assert "dataset.val_data_sources is missing" in r.report.violations[0].message


def test_a_destination_that_names_a_directory_is_refused(running, tmp_path):
    doc, members = packaged()
    doc["execution"]["supporting_files"] = [{"source": "scripts/checkpoint_action.py", "destination": "helpers/", "sha256": sha(HELPER)}]
    package = tar_package(tmp_path / "p.tar", {**members, "bundle.json": json.dumps(doc).encode()}).read_bytes()
    document = admission_pb2.Document(raw=json.dumps(doc).encode(), package=package)
    r = running.admission.Admit(admission_pb2.AdmitRequest(document=document), metadata=running.auth)
    assert r.report.verdict == "fail" and r.job_id == ""
    # The entry is ill-formed, so the file it names is not declared either.
    assert pairs(r.report) == [
        ("tao.supporting_file.undeclared", "/execution/supporting_files"),
        ("tao.supporting_file.path", "/execution/supporting_files/0/destination"),
    ]
    assert running.store.list() == []
