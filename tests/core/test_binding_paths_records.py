"""Where jobgate once stood stricter than the contract or said nothing of it: a spec_key
that indexes below a missing key (a warning naming the key), supporting-file paths that
name a directory (refused, as source and as destination, whatever their spelling), and
`terminal_state` judged against the last terminal transition. Exact rules, pointers and
severities, through the Python API and `jobgate check`."""

from __future__ import annotations

import json

import pytest

import jobgate
from tests.helpers import DELETE, SHARED, example, mutate, require_shared, run_cli

require_shared()

V = jobgate.Validator()
BUNDLE = example("spec_bundle.config_mode.dino_train.valid.json")
BUNDLE_EXEC = example("spec_bundle.config_mode.with_execution_lifecycle.valid.json")
RECORD = example("job_record.terminal_error_retry_chain.valid.json")
KEY = "/declared_inputs/0/spec_key"
PEER_FIXTURE = SHARED / "upstream" / "peer-cases" / "tao" / "spec_bundle" / "dotted_pointer_in_declared_input_valid.json"


def violations(report: jobgate.Report) -> list[tuple[str, str, str]]:
    return [(v.rule, v.field, v.severity) for v in report.violations]


def bound(spec: dict, key: str, optional: bool = False) -> jobgate.Report:
    """BUNDLE with `spec` and its first input declared at `key`."""
    return V.check(mutate(BUNDLE, {"/spec": spec, KEY: key, "/declared_inputs/0/optional": optional, "/gpu_spec_key": DELETE}))


# ---------------------------------------------------------------- spec keys


def test_the_producers_own_fixture_passes_with_a_warning_naming_the_missing_key(capsys):
    report = V.check(PEER_FIXTURE.read_bytes())
    assert report.verdict == "pass"
    assert violations(report) == [("tao.spec_key.unresolved", KEY, "warning")]
    assert "dataset.val_data_sources is missing" in report.violations[0].message
    code, out = run_cli(capsys, ["check", str(PEER_FIXTURE), "--format", "json"])
    (result,) = json.loads(out)["results"]
    assert code == 0 and result["verdict"] == "pass"
    assert [(v["rule"], v["field"], v["severity"]) for v in result["violations"]] == [("tao.spec_key.unresolved", KEY, "warning")]


@pytest.mark.parametrize(
    ("spec", "key", "missing"),
    [
        ({"a": {"x": 1}}, "a.b[0].c", "a.b"),
        ({"a": {}}, "a.b.c[3].d", "a.b"),
        ({"a": 1}, "z[0]", "z"),
    ],
)
def test_indexing_below_a_missing_key_is_a_warning_naming_it(spec, key, missing):
    report = bound(spec, key)
    assert report.verdict == "pass"
    assert violations(report) == [("tao.spec_key.unresolved", KEY, "warning")]
    assert f"{missing} is missing" in report.violations[0].message


@pytest.mark.parametrize(
    ("spec", "key", "why"),
    [
        ({"a": {"b": [1, 2]}}, "a.b[5]", "a.b has 2 items and index 5 is past its end"),
        ({"a": {"b": "text"}}, "a.b.c", "a.b is string"),
        ({"a": {"b": None}}, "a.b[0].c", "a.b is null"),
        ({"a": {"b": [{}]}}, "a.b.c", "a.b is an array"),
        ({"a": {"b": {}}}, "a.b[0]", "a.b is an object"),
    ],
)
def test_what_exists_and_cannot_hold_the_pointer_is_an_error_and_optional_warns(spec, key, why):
    report = bound(spec, key)
    assert report.verdict == "fail"
    assert violations(report) == [("tao.spec_key.unresolved", KEY, "error")]
    assert why in report.violations[0].message
    optional = bound(spec, key, optional=True)
    assert optional.verdict == "pass"
    assert violations(optional) == [("tao.spec_key.unresolved", KEY, "warning")]


def test_an_optional_input_below_a_missing_key_warns_too():
    assert violations(bound({"a": {}}, "a.b[0].c", optional=True)) == [("tao.spec_key.unresolved", KEY, "warning")]


@pytest.mark.parametrize("key", ["a.b", "a.b.c", "a.x", "results_dir"])
def test_a_missing_key_not_indexed_below_binds_and_results_dir_always_does(key):
    assert violations(bound({"a": {"x": 1}}, key)) == []


# ---------------------------------------------------------------- supporting-file paths

DIRECTORIES = [".", "./", "./.", "a/.", "a/", "a//", "scripts/"]
FILES = ["a/b", "./a", "a/./b", "a//b", ".hidden", "a/.b"]


def supporting(source: str, destination: str) -> dict:
    f = BUNDLE_EXEC["execution"]["supporting_files"][0]
    return mutate(BUNDLE_EXEC, {"/execution/supporting_files/0": {**f, "source": source, "destination": destination}})


@pytest.mark.parametrize("end", ["source", "destination"])
@pytest.mark.parametrize("path", DIRECTORIES)
def test_a_path_that_names_a_directory_is_refused(path, end):
    f = BUNDLE_EXEC["execution"]["supporting_files"][0]
    report = V.check(supporting(path, f["destination"]) if end == "source" else supporting(f["source"], path))
    assert report.verdict == "fail"
    assert violations(report) == [("tao.supporting_file.path", f"/execution/supporting_files/0/{end}", "error")]
    assert "names a directory, not a file" in report.violations[0].message


@pytest.mark.parametrize("end", ["source", "destination"])
@pytest.mark.parametrize("path", FILES)
def test_a_path_that_names_a_file_passes(path, end):
    f = BUNDLE_EXEC["execution"]["supporting_files"][0]
    report = V.check(supporting(path, f["destination"]) if end == "source" else supporting(f["source"], path))
    assert violations(report) == []


# ---------------------------------------------------------------- job records


def record(states: list[str], terminal_state: str | None) -> dict:
    t = RECORD["transitions"][0]
    transitions = [{**t, "ts": f"2026-07-09T1{i}:00:00+00:00", "state": s} for i, s in enumerate(states)]
    return {**RECORD, "transitions": transitions, "terminal_state": terminal_state}


def test_terminal_state_is_the_last_terminal_transition(capsys, tmp_path):
    report = V.check(record(["PENDING", "COMPLETE", "ERROR"], "ERROR"))
    assert violations(report) == [("tao.record.after_terminal", "/transitions/2/state", "error")]
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record(["COMPLETE", "ERROR"], "ERROR")))
    code, out = run_cli(capsys, ["check", str(path), "--format", "json"])
    (result,) = json.loads(out)["results"]
    assert code == 1
    assert [(v["rule"], v["field"]) for v in result["violations"]] == [
        ("tao.record.first_state", "/transitions/0/state"),
        ("tao.record.after_terminal", "/transitions/1/state"),
    ]


def test_terminal_state_naming_an_earlier_terminal_transition_mismatches():
    report = V.check(record(["PENDING", "COMPLETE", "ERROR"], "COMPLETE"))
    assert violations(report) == [
        ("tao.record.terminal_mismatch", "/terminal_state", "error"),
        ("tao.record.after_terminal", "/transitions/2/state", "error"),
    ]
    assert "the last terminal transition is ERROR" in report.violations[0].message
    # A non-terminal transition after the terminal one leaves that one the last terminal.
    assert violations(V.check(record(["PENDING", "CANCELED", "RUNNING"], "CANCELED"))) == [
        ("tao.record.after_terminal", "/transitions/2/state", "error"),
    ]
