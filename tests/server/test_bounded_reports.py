"""A batch response always fits one message: each report is bounded by the core
(`limits.violations`), and a batch's reports together are cut to the server's budget
(`jobgate.fit_reports`) with every verdict kept. The case: documents whose reports
would each take about 1 MiB (deep pointers), sixteen to a batch, over the 16 MiB
message limit together."""

from __future__ import annotations

import json

import pytest

import jobgate
from jobgate.v1 import admission_pb2, jobs_pb2
from tests.helpers import deep_dotted_spec, example, require_shared

require_shared()

BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")


def deep_dotted() -> bytes:
    return json.dumps({**BUNDLE, "spec": deep_dotted_spec()}).encode()


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run (the core's path)", "admission (item by item)"])
def test_a_batch_of_huge_reports_fits_one_response(running, dry_run):
    data = deep_dotted()
    single = jobgate.Validator().check(data)
    assert single.verdict == "fail" and sum(len(v.field) + len(v.message) for v in single.violations) > 1_000_000
    request = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=data)] * 16, dry_run=dry_run)
    response = running.admission.AdmitBatch(request, metadata=running.auth)
    assert response.ByteSize() <= running.config.server.max_message_bytes
    assert len(response.results) == 16
    for result in response.results:
        assert result.report.verdict == "fail" and not result.job_id
        first = result.report.violations[0]
        assert (first.rule, first.severity) == ("limits.violations", "error")
        assert [v.rule for v in result.report.violations[1:]] == ["tao.dotted_key"] * (len(result.report.violations) - 1)
    assert list(running.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=running.auth).jobs) == []


def test_an_ordinary_batch_is_never_cut():
    ok = json.dumps(BUNDLE).encode()
    bad = json.dumps({**BUNDLE, "spec": {"a.b": 1}}).encode()
    validator = jobgate.Validator()
    plain = validator.check_many([ok, bad] * 50)
    assert validator.check_many([ok, bad] * 50, max_response_bytes=1 << 20) == plain
    assert jobgate.fit_reports(plain, 1 << 20) == plain
    # Under a tiny budget the failing reports are cut, the passing ones are not, and
    # no verdict changes.
    cut = jobgate.fit_reports(plain, 4096)
    assert [r.verdict for r in cut] == [r.verdict for r in plain]
    assert cut[0] == plain[0]
