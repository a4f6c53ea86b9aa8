"""Suppressions in `jobgate check` and `jobgate revalidate`: `# jobgate: ignore[RULE]`
comments in YAML (as the YAML reader sees comments), `[rules.paths."GLOB"]` in the
configuration, `--ignore RULE`; suppressed findings listed as such in every format,
and the rules that protect the gate never suppressed."""

from __future__ import annotations

import io
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from jobgate import _core
from jobgate.cli import main
from jobgate.suppressions import glob_pattern

# A JobSpec that passes, in YAML, with `{name}` and `{before}` to vary: the name, and a
# line right above it.
JOBSPEC = """\
apiVersion: forge/v2
kind: TrainingJob
metadata:
  project: my-lab
{before}
  name: {name}
spec:
  recipe: {{name: nemo-rl/grpo, version: 0.7.0, digest: "sha256:6527a24d50352ea67588604d4df476781a3b0f93cd1f0f2e9120c26d8f7ef509"}}
  source:
    exp: experiments/my-grpo
  framework:
    kind: nemo-rl
    version: 0.7.0
    runtime_id: nemo-rl-0.7.0
  resources:
    pools:
    - {{name: train, series: h200, nodes: 1, gpus_per_node: 8}}
provenance:
  core_version: 0.3.2
"""
NAME_LINE = 6  # the line of `name:` in JOBSPEC


def jobspec(name: str = "grpo-gsm8k-zh", before: str = "  labels: {team: rl}") -> str:
    return JOBSPEC.format(name=name, before=before)


def check(capsys, args: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report_of(capsys, path: Path, *more: str) -> tuple[int, dict, str]:
    code, out, err = check(capsys, [str(path), "--format", "json", *more])
    return code, json.loads(out), err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def findings(report: dict) -> list[tuple[str, str, int | None, dict | None]]:
    """(rule, field, line, suppressed) of each violation of the run's one document."""
    [result] = report["results"]
    return [(v["rule"], v["field"], v.get("line"), v.get("suppressed")) for v in result["violations"]]


def test_the_base_document_passes(capsys, tmp_path):
    code, report, _ = report_of(capsys, write(tmp_path, "job.yaml", jobspec()))
    assert code == 0 and findings(report) == []
    code, report, _ = report_of(capsys, write(tmp_path, "bad.yaml", jobspec(name="bad name")))
    assert code == 1 and findings(report) == [("forge.name", "/metadata/name", NAME_LINE, None)]


def test_a_comment_on_the_line_suppresses_and_the_verdict_passes(capsys, tmp_path):
    path = write(tmp_path, "job.yaml", jobspec(name="bad name  # jobgate: ignore[forge.name]"))
    code, report, err = report_of(capsys, path)
    assert code == 0 and err == ""
    by = f"# jobgate: ignore[forge.name] at line {NAME_LINE}"
    assert findings(report) == [("forge.name", "/metadata/name", NAME_LINE, {"kind": "inSource", "justification": by})]
    assert report["results"][0]["verdict"] == "pass"
    # errors and warnings count what is left; `suppressed` what is not
    assert report["summary"] == {"total": 1, "passed": 1, "failed": 0, "errors": 0, "warnings": 0, "suppressed": 1}


def test_a_comment_alone_on_the_line_above_suppresses(capsys, tmp_path):
    path = write(tmp_path, "job.yaml", jobspec(name="bad name", before="  # legacy name, renamed in Q3: jobgate: ignore[forge.name]"))
    code, report, _ = report_of(capsys, path)
    assert code == 0
    assert findings(report) == [("forge.name", "/metadata/name", NAME_LINE, {"kind": "inSource", "justification": f"# jobgate: ignore[forge.name] at line {NAME_LINE - 1}"})]


@pytest.mark.parametrize(
    ("name", "before"),
    [
        # a comment after a value covers its own line only, not the next
        ("bad name", "  labels: {team: rl}  # jobgate: ignore[forge.name]"),
        # two lines above is not the line above
        ("bad name", "  # jobgate: ignore[forge.name]\n  labels: {team: rl}"),
        # in a quoted string, `#` is data (and the name, holding it, is still bad)
        ('"bad # jobgate: ignore[forge.name]"', "  labels: {team: rl}"),
        ("'bad # jobgate: ignore[forge.name]'", "  labels: {team: rl}"),
        # a block scalar's content line right above is text, not a comment
        ("bad name", "  labels:\n    note: |\n      # jobgate: ignore[forge.name]"),
        # another rule named
        ("bad name  # jobgate: ignore[forge.project]", "  labels: {team: rl}"),
    ],
)
def test_what_does_not_suppress(capsys, tmp_path, name, before):
    code, report, _ = report_of(capsys, write(tmp_path, "job.yaml", jobspec(name=name, before=before)))
    assert code == 1
    assert [(rule, suppressed) for rule, _, _, suppressed in findings(report)] == [("forge.name", None)]


def test_several_rules_in_one_comment(capsys, tmp_path):
    text = jobspec(name="bad name  # jobgate: ignore[schema.type, forge.name]").replace("  project: my-lab", "  project: a/b")
    code, report, _ = report_of(capsys, write(tmp_path, "job.yaml", text))
    assert code == 1  # forge.project, on its own line, is not covered
    assert [(rule, bool(s)) for rule, _, _, s in findings(report)] == [("forge.name", True), ("forge.project", False)]


def test_flow_mappings(capsys, tmp_path):
    base = jobspec().replace("  project: my-lab\n  labels: {team: rl}\n  name: grpo-gsm8k-zh\n", "")
    assert "metadata:\n" in base
    suppressed = base.replace("metadata:\n", "metadata: {name: bad name, project: my-lab}  # jobgate: ignore[forge.name]\n")
    code, report, _ = report_of(capsys, write(tmp_path, "flow.yaml", suppressed))
    assert code == 0 and findings(report) == [("forge.name", "/metadata/name", 3, {"kind": "inSource", "justification": "# jobgate: ignore[forge.name] at line 3"})]
    quoted = base.replace("metadata:\n", 'metadata: {name: "bad # jobgate: ignore[forge.name]", project: my-lab}\n')
    code, report, _ = report_of(capsys, write(tmp_path, "quoted.yaml", quoted))
    assert code == 1 and findings(report) == [("forge.name", "/metadata/name", 3, None)]


def test_anchors_a_finding_in_an_alias_sits_at_the_alias(capsys, tmp_path):
    pools = "    - {name: train, series: h200, nodes: 1, gpus_per_node: 8}\n"
    at_anchor = jobspec().replace(pools, "    - &pool {name: train, series: h200, nodes: 1, gpus_per_node: 8}  # jobgate: ignore[forge.resources.pool_duplicate]\n    - *pool\n")
    code, report, _ = report_of(capsys, write(tmp_path, "anchor.yaml", at_anchor))
    assert code == 1 and findings(report) == [("forge.resources.pool_duplicate", "/spec/resources/pools/1/name", 18, None)]
    at_alias = jobspec().replace(pools, "    - &pool {name: train, series: h200, nodes: 1, gpus_per_node: 8}\n    - *pool  # jobgate: ignore[forge.resources.pool_duplicate]\n")
    code, report, _ = report_of(capsys, write(tmp_path, "alias.yaml", at_alias))
    assert code == 0 and [(r, s["kind"]) for r, _, _, s in findings(report)] == [("forge.resources.pool_duplicate", "inSource")]


def test_a_rule_that_protects_the_gate_stays_with_a_note(capsys, tmp_path):
    text = jobspec(name="bad name  # jobgate: ignore[json.duplicate_key, forge.name]", before="  project: my-lab")
    path = write(tmp_path, "dup.yaml", text)
    code, report, err = report_of(capsys, path)
    assert code == 1
    assert [(rule, bool(s)) for rule, _, _, s in findings(report)] == [("forge.name", True), ("json.duplicate_key", False)]
    assert err == f"{path}:{NAME_LINE}:19: note: ignore[json.duplicate_key] suppresses nothing: json.duplicate_key protects the gate itself and cannot be suppressed (nor relaxed in [rules]); the finding stays\n"


def test_unknown_rules_and_bare_ignores_in_comments_are_noted(capsys, tmp_path):
    # noted even in a document that passes
    path = write(tmp_path, "job.yaml", jobspec(before="  # jobgate: ignore[forge.nme]\n  labels: {team: rl}  # jobgate: ignore"))
    code, _, err = report_of(capsys, path)
    assert code == 0
    assert err.splitlines() == [
        f"{path}:5:3: note: ignore[forge.nme] suppresses nothing: forge.nme is not a jobgate rule; did you mean forge.name?",
        f"{path}:6:23: note: `jobgate: ignore` names no rule and suppresses nothing; write ignore[RULE] (several separated by commas)",
    ]


def test_ignore_on_the_command_line(capsys, tmp_path):
    path = write(tmp_path, "job.json", json.dumps({"apiVersion": "forge/v2"}))
    code, report, _ = report_of(capsys, path, "--ignore", "schema.required", "--ignore", "forge.kind")
    assert code == 0
    justification = {"kind": "external", "justification": "--ignore schema.required on the command line"}
    assert findings(report) == [
        ("forge.kind", "/kind", 1, {"kind": "external", "justification": "--ignore forge.kind on the command line"}),
        ("schema.required", "/metadata", 1, justification),
        ("schema.required", "/provenance", 1, justification),
        ("schema.required", "/spec", 1, justification),
    ]


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("json.syntax", "json.syntax protects the gate itself and cannot be suppressed (nor relaxed in [rules])"),
        ("forge.quota.job", "forge.quota.job protects the gate itself and cannot be suppressed (nor relaxed in [rules])"),
        ("forge.nam", "forge.nam is not a jobgate rule; did you mean forge.name?"),
    ],
)
def test_ignore_refuses_locked_and_unknown_rules(capsys, tmp_path, rule, why):
    path = write(tmp_path, "job.json", "{")
    code, out, err = check(capsys, [str(path), "--ignore", rule])
    assert code == 2 and out == ""
    assert err == f"jobgate: --ignore {rule}: {why}\n"


def test_a_locked_finding_is_never_suppressed_by_a_comment_nor_the_command_line(capsys, tmp_path):
    path = write(tmp_path, "broken.yaml", "# jobgate: ignore[json.syntax]\na: [1\n")
    code, report, _ = report_of(capsys, path, "--ignore", "schema.type")
    assert code == 1 and findings(report) == [("json.syntax", "", 2, None)]


def config(tmp_path: Path, table: str) -> Path:
    return write(tmp_path, "jobgate.toml", table)


def test_path_tables_suppress_in_matching_json_documents(capsys, tmp_path, monkeypatch):
    cfg = config(tmp_path, '[rules.paths."experiments/**"]\nignore = ["schema.additionalProperties"]\n')
    bad = json.loads(Path(__file__).parents[2].joinpath("python/jobgate/samples/jobspec.valid.json").read_text())
    bad["extra"] = 1
    inside = write(tmp_path, "experiments/a/job.json", json.dumps(bad))
    outside = write(tmp_path, "prod/job.json", json.dumps(bad))
    # Globs start at the configuration's directory, wherever the command runs.
    monkeypatch.chdir(inside.parent)
    code, out, _ = check(capsys, [str(inside), str(outside), "--config", str(cfg), "--format", "json", "--fail-on", "warning"])
    results = json.loads(out)["results"]
    assert code == 1  # the warning left outside
    assert [(r["verdict"], [(v["rule"], v["field"], v.get("suppressed")) for v in r["violations"]]) for r in results] == [
        ("pass", [("schema.additionalProperties", "/extra", {"kind": "external", "justification": '[rules.paths."experiments/**"] in the configuration'})]),
        ("pass", [("schema.additionalProperties", "/extra", None)]),
    ]


@pytest.mark.parametrize(
    ("glob", "matches", "misses"),
    [
        ("experiments/**", ["experiments/a.json", "experiments/x/y/a.json"], ["experiment/a.json", "x/experiments/a.json"]),
        ("experiments/*.json", ["experiments/a.json"], ["experiments/x/a.json", "experiments/a.yaml"]),
        ("**/legacy/*", ["legacy/a.json", "x/y/legacy/b.yaml"], ["legacy/x/a.json"]),
        ("job?.json", ["job1.json", "deep/dir/job2.json"], ["job10.json", "job/.json"]),
        ("a/**/b.json", ["a/b.json", "a/x/y/b.json"], ["b.json", "a/xb.json"]),
    ],
)
def test_glob_semantics(glob, matches, misses):
    pattern = glob_pattern(glob)
    assert [p for p in matches if pattern.fullmatch(p)] == matches
    assert [p for p in misses if pattern.fullmatch(p)] == []


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[rules.paths."x/**"]\nignore = ["limits.depth"]\n', 'rules.paths."x/**".ignore: limits.depth protects the gate itself and cannot be suppressed (nor relaxed in [rules])'),
        ('[rules.paths."x/**"]\nignore = ["schema.requird"]\n', 'rules.paths."x/**".ignore: schema.requird is not a jobgate rule; did you mean schema.required?'),
        ('[rules.paths."x/**"]\nignor = ["schema.required"]\n', 'rules.paths."x/**": one key, ignore = ["rule.id", ...]'),
        ('[rules.paths."x/**"]\nignore = "schema.required"\n', 'rules.paths."x/**".ignore: a list of rule ids, ["rule.id", ...]'),
        ('[rules]\npaths = "x/**"\n', 'rules.paths: one table per path glob, [rules.paths."GLOB"] with ignore = ["rule.id", ...]'),
    ],
)
def test_bad_path_tables_are_configuration_errors(capsys, tmp_path, table, message):
    cfg = config(tmp_path, table)
    code, out, err = check(capsys, [str(write(tmp_path, "a.json", "{}")), "--config", str(cfg)])
    assert code == 2 and out == ""
    assert message in err and str(cfg) in err


def test_path_tables_leave_the_core_rules_alone(tmp_path):
    from jobgate import load_config

    cfg = load_config(config(tmp_path, '[rules]\n"schema.type" = "warning"\n[rules.paths."x/**"]\nignore = ["forge.name"]\n'))
    assert cfg.enforcement() == ({"schema.type": "warning"}, {})
    assert [(p.glob, p.ignore) for p in cfg.path_rules()] == [("x/**", ("forge.name",))]


def test_formats_show_suppressed_findings_as_such(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "quiet.yaml", jobspec(name="bad name  # jobgate: ignore[forge.name]"))
    write(tmp_path, "loud.yaml", jobspec(name="bad name"))
    files = ["quiet.yaml", "loud.yaml"]

    code, out, _ = check(capsys, files)
    assert code == 1
    assert out.splitlines() == [
        "quiet.yaml: pass (jobspec) — 1 suppressed",
        f"quiet.yaml:{NAME_LINE}:9: suppressed error forge.name {_message()} (at /metadata/name; by # jobgate: ignore[forge.name] at line {NAME_LINE})",
        "loud.yaml: fail (jobspec) — 1 error",
        f"loud.yaml:{NAME_LINE}:9: error forge.name {_message()} (at /metadata/name)",
        "2 documents: 1 passed, 1 failed (1 errors, 0 warnings, 1 suppressed)",
    ]

    _, out, _ = check(capsys, [*files, "--format", "sarif"])
    results = json.loads(out)["runs"][0]["results"]
    assert [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r.get("suppressions")) for r in results] == [
        ("forge.name", "quiet.yaml", [{"kind": "inSource", "status": "accepted", "justification": f"# jobgate: ignore[forge.name] at line {NAME_LINE}"}]),
        ("forge.name", "loud.yaml", None),
    ]

    _, out, _ = check(capsys, [*files, "--format", "junit"])
    suite = ET.fromstring(out).find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    quiet, loud = suite.findall("testcase")
    assert quiet.find("failure") is None
    assert quiet.find("system-out").text == f"quiet.yaml:{NAME_LINE}:9: forge.name: {_message()} (suppressed: # jobgate: ignore[forge.name] at line {NAME_LINE})"
    assert quiet.get("line") is None and loud.get("line") == str(NAME_LINE)
    assert loud.find("failure").get("type") == "forge.name"

    _, out, _ = check(capsys, [*files, "--format", "github"])
    assert [line.split(" ", 1)[0] for line in out.splitlines()[:-1]] == ["::group::loud.yaml", "::error", "::endgroup::"]
    assert out.splitlines()[-1] == "2 documents: 1 passed, 1 failed (1 errors, 0 warnings, 1 suppressed)"


def _message() -> str:
    return "\"bad name\" is not a safe name: it must start with a letter or digit and hold only letters, digits, '.', '_' and '-'"


def test_a_suppressed_finding_does_not_fail_on_warning(capsys, tmp_path):
    path = write(tmp_path, "job.yaml", jobspec(name="bad name"))
    assert check(capsys, [str(path), "--fail-on", "warning", "--ignore", "forge.name"])[0] == 0
    assert check(capsys, [str(path), "--fail-on", "warning"])[0] == 1


def test_revalidate_reads_the_same_suppressions(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "docs/quiet.yaml", jobspec(name="bad name  # jobgate: ignore[forge.name]"))
    write(tmp_path, "docs/loud.json", json.dumps({"apiVersion": "forge/v2"}))
    capsys.readouterr()
    code = main(["revalidate", "docs", "--format", "json", "--ignore", "schema.required", "--ignore", "forge.kind"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(r["source"], r["verdict"], sorted({(v["rule"], (v.get("suppressed") or {}).get("kind")) for v in r["violations"]})) for r in data["results"]] == [
        ("docs/loud.json", "pass", [("forge.kind", "external"), ("schema.required", "external")]),
        ("docs/quiet.yaml", "pass", [("forge.name", "inSource")]),
    ]


def test_revalidate_refuses_ignore_with_against(capsys, tmp_path):
    cfg = config(tmp_path, "")
    capsys.readouterr()
    assert main(["revalidate", str(tmp_path), "--against", str(cfg), "--ignore", "forge.name"]) == 2
    assert "--ignore is not for --against" in capsys.readouterr().err


def test_comments_are_read_by_the_core_yaml_reader():
    assert _core.yaml_comments('a: "x # no"  # yes\nb: |\n  # no\n# yes too\n') == [(1, 14, False, " yes"), (4, 1, True, " yes too")]
    assert _core.yaml_comments("a: [1\n# unread\n") == []


def test_stdin_has_comments_but_no_path(capsys, tmp_path, monkeypatch):
    cfg = config(tmp_path, '[rules.paths."*"]\nignore = ["forge.project"]\n')
    text = jobspec(name="bad name  # jobgate: ignore[forge.name]").replace("project: my-lab", "project: a/b")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, report, _ = report_of(capsys, Path("-"), "--config", str(cfg))
    assert code == 1
    assert [(rule, (s or {}).get("kind")) for rule, _, _, s in findings(report)] == [("forge.name", "inSource"), ("forge.project", None)]
