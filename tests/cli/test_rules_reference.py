"""docs/rules.md is generated from the core's rule catalogue, one entry per rule with
an anchor; SARIF's `helpUri` of each rule is that entry. It must not drift."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import jobgate
from jobgate.rulebook import reference
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
