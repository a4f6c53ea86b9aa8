"""docs/rules.md is generated from the core's rule catalogue and rulebook.toml, one
entry per rule with an anchor, what the rule protects and a failing and a passing
example; SARIF's `helpUri` of each rule is that entry. It must not drift, and every
example must do what the page says it does."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import jobgate
from jobgate.rulebook import examples, reference
from tests.helpers import ROOT, run_cli, sample

PAGE = ROOT / "docs" / "rules.md"


def test_the_rules_page_matches_the_catalogue():
    assert PAGE.read_text() == reference(), "docs/rules.md is out of date with the rule catalogue: run scripts/dev docs"


def test_every_rule_has_its_entry_with_severity_and_whether_it_can_be_relaxed():
    text = PAGE.read_text()
    anchors = re.findall(r'<a id="([^"]+)"></a>', text)
    catalogue = jobgate.rules()
    assert sorted(anchors) == sorted(r["rule"] for r in catalogue) and len(set(anchors)) == len(anchors)
    for r in catalogue:
        entry = text.split(f'<a id="{r["rule"]}"></a>', 1)[1].split("<a id=", 1)[0]
        assert f"### `{r['rule']}`" in entry and f"- finds: {r['summary']}" in entry
        assert f"- default severity: {r['severity']}" in entry
        assert ("can be relaxed: yes" in entry) == r["relaxable"] and ("can be relaxed: no" in entry) == (not r["relaxable"])
    assert "can be relaxed: no" in text and "can be relaxed: yes" in text  # both kinds exist


def test_sarif_rules_point_at_their_entry_on_the_rules_page(tmp_path, capsys):
    (tmp_path / "bad.json").write_text(json.dumps({**sample("jobspec.valid.json"), "kind": "Other"}))
    code, out = run_cli(capsys, ["check", str(tmp_path / "bad.json"), "--format", "sarif"])
    assert code == 1
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', PAGE.read_text()))
    assert [r["id"] for r in rules] == [r["rule"] for r in jobgate.rules()]
    for rule in rules:
        uri = urlsplit(rule["helpUri"])
        assert (uri.scheme, uri.path, uri.fragment) == ("file", str(PAGE), rule["id"])
        assert uri.fragment in anchors
    relaxable = {r["rule"]: r["relaxable"] for r in jobgate.rules()}
    for rule in rules:
        assert ("cannot be relaxed" in rule["help"]["text"]) == (not relaxable[rule["id"]])


# Every rule's examples on the page, run through the core: the failing document reports
# its rule at the field the page names (and nothing else but the rules it lists beside
# it), the passing one passes without a finding, through the Python API and `jobgate`.

BOOK = examples()


def test_every_catalogued_rule_has_what_it_protects_and_examples():
    assert sorted(BOOK) == sorted(r["rule"] for r in jobgate.rules())
    for rule, entry in BOOK.items():
        assert entry["protects"].strip() and entry["fail"].strip() and entry["pass"].strip(), rule
        assert set(entry) <= {"protects", "context", "field", "also", "config", "admission", "root", "package", "staged", "fail", "pass"}, rule
        # the page shows the service's context in words only: they must name what the test passes
        for value in entry.get("admission", {}).values():
            assert all(f"{v}" in entry["context"] for v in (value if isinstance(value, list) else [value])), rule
    text = PAGE.read_text()
    for rule, entry in BOOK.items():
        section = text.split(f'<a id="{rule}"></a>', 1)[1].split("<a id=", 1)[0]
        assert f"- protects: {entry['protects']}" in section and entry["fail"].rstrip("\n") in section
        assert entry["pass"] == entry["fail"] or entry["pass"].rstrip("\n") in section


def _tree(base: Path, files: dict[str, str]) -> Path:
    """`files` under `base`: a path ending in / is a directory, `-> TARGET` a symlink."""
    base.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = base / name.rstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            path.mkdir()
        elif text.startswith("-> "):
            path.symlink_to(text[3:])
        else:
            path.write_text(text)
    return base


def _run(rule: str, side: str, tmp_path: Path, capsys) -> list[tuple[str, str, str]]:
    """The (rule, field, severity) findings of one side of a rule's example, after
    checking that the Python API and the command line report the same."""
    entry = BOOK[rule]
    document = entry[side]
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(document)
    config: list[str] = []
    if "config" in entry:
        (tmp_path / "jobgate.toml").write_text(entry["config"])
        config = ["--config", str(tmp_path / "jobgate.toml")]
    validator = jobgate.Validator(str(tmp_path / "jobgate.toml") if config else None)
    root = _tree(tmp_path / "root", entry["root"][side]) if "root" in entry else None
    if "staged" in entry:
        job = _tree(tmp_path / "job", entry["staged"][side])
        report = validator.stage(document.encode(), job, root=root).report
        args = ["stage", str(bundle), "--root", str(root), "--job-dir", str(tmp_path / "job2")]
        _tree(tmp_path / "job2", entry["staged"][side])
        code, out = run_cli(capsys, [*args, *config])
        assert code == (0 if report.ok else 1)
        assert all(rule_id in out for rule_id in {v.rule for v in report.violations})
        return [(v.rule, v.field, v.severity) for v in report.violations]
    if entry.get("package"):
        package = tmp_path / "bundle.tar"
        with tarfile.open(package, "w") as tar:
            tar.add(bundle, "bundle.yaml")
            for name in entry["root"][side]:
                tar.add(root / name, name)
        report = validator.check(None, package=package)
        args = ["check", "--package", str(package)]
    else:
        report = validator.check(document.encode(), root=root, **entry.get("admission", {}))
        args = ["check", str(bundle), *(["--root", str(root)] if root else [])]
    if "admission" not in entry:  # the command line has no account: the service's rules are the API's alone
        code, out = run_cli(capsys, [*args, *config, "--format", "json"])
        (result,) = json.loads(out)["results"]
        assert [(v["rule"], v["field"], v["severity"]) for v in result["violations"]] == [(v.rule, v.field, v.severity) for v in report.violations]
        assert code == (0 if report.ok else 1)
    return [(v.rule, v.field, v.severity) for v in report.violations]


@pytest.mark.parametrize("rule", sorted(BOOK))
def test_the_failing_example_reports_its_rule_at_its_field(rule, tmp_path, capsys):
    entry = BOOK[rule]
    found = _run(rule, "fail", tmp_path, capsys)
    severity = {r["rule"]: r["severity"] for r in jobgate.rules()}[rule]
    assert (rule, entry["field"], severity) in found, found
    assert {r for r, _, _ in found} == {rule, *entry.get("also", [])}, found


@pytest.mark.parametrize("rule", sorted(BOOK))
def test_the_passing_example_passes_without_a_finding(rule, tmp_path, capsys):
    assert _run(rule, "pass", tmp_path, capsys) == []
