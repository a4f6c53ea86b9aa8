"""Rendering reports: text for people (`file:line:col: severity rule message`, which
editors and terminals jump to), JSON (SPEC §6), and for CI: JUnit XML, SARIF 2.1.0
(code scanning) and GitHub workflow commands (annotations on the diff).

Text a terminal or a CI log shows never holds a control character from a document, a
file name or a server: every one is written as `\\uNNNN` (`printable`), as JSON and the
core's messages write it, so a key cannot move the cursor, recolour the screen or split
a line, and reads the same in the message and in the field that name it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

import orjson

from jobgate import Report, __version__, rulebook, rules
from jobgate.reports import ReportView

FORMATS = ("text", "json", "junit", "sarif", "github")


def add_fail_on(p) -> None:
    p.add_argument("--fail-on", choices=("error", "warning"), default="error", help="exit 1 when a document has an error (default), or any violation at all")


def failing(results: Sequence[tuple[str, Report]], fail_on: str) -> bool:
    """Whether the run exits 1: a failed document, or with `warning`, any violation
    left unsuppressed."""
    if fail_on == "warning":
        return any(len(r.violations) > suppressed_count(r) for _, r in results)
    return not all(r.ok for _, r in results)


def summary(results: Sequence[tuple[str, Report]]) -> dict[str, int]:
    """The totals; `errors` and `warnings` count the findings left unsuppressed, and
    `suppressed` (present when there are any) the others."""
    passed = sum(1 for _, r in results if r.ok)
    out = {
        "total": len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "errors": sum(r.errors for _, r in results),
        "warnings": sum(r.warnings for _, r in results),
    }
    quiet = sum(suppressed_count(r) for _, r in results)
    if quiet:
        out["suppressed"] = quiet
    return out


def suppressed_count(report: Report) -> int:
    """How many of a report's findings are suppressed (`jobgate.suppressions`); a
    report straight from the core has none."""
    return getattr(report, "suppressed", 0)


def suppression(v) -> dict[str, str] | None:
    """How a violation was suppressed, or None."""
    return getattr(v, "suppressed", None)


def as_json(results: Sequence[tuple[str, Report]]) -> dict[str, Any]:
    return {
        "results": [{"source": source, **report.to_dict()} for source, report in results],
        "summary": summary(results),
    }


def _color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _painter():
    color = _color()

    def paint(s: str, code: str) -> str:
        return f"\033[{code}m{s}\033[0m" if color else s

    return paint


# What a terminal acts on rather than shows: C0 and C1 controls, DEL, the line and
# paragraph separators, bidirectional overrides; and lone surrogates (names that are not
# UTF-8), which cannot be written as text at all.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    return f"\\u{ord(m.group()):04x}"


def printable(text: str, keep: str = "") -> str:
    """`text` with every character a terminal would act on written as \\uNNNN (ESC as
    `\\u001b`, NUL as `\\u0000`), but those of `keep`."""
    if not keep:
        return _UNPRINTABLE.sub(_escape, text)
    return _UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def _report_lines(source: str, report: Report, paint) -> list[str]:
    source = printable(source)
    verdict = paint("pass", "32") if report.ok else paint("fail", "31;1")
    counts = []
    if report.errors:
        counts.append(f"{report.errors} error{'s' * (report.errors != 1)}")
    if report.warnings:
        counts.append(f"{report.warnings} warning{'s' * (report.warnings != 1)}")
    if suppressed_count(report):
        counts.append(f"{suppressed_count(report)} suppressed")
    tail = f" — {', '.join(counts)}" if counts else ""
    lines = [f"{source}: {verdict} ({printable(report.kind)}){tail}"]
    for v in report.violations:
        quiet = suppression(v)
        if quiet:
            # Listed, so that what is silenced stays in sight, but apart and uncoloured.
            lines.append(f"{place(source, v)}: suppressed {printable(v.severity)} {printable(v.rule)} {printable(v.message)} (at {printable(shown_field(v.field))}; by {printable(quiet['justification'])})")
            continue
        sev = paint(printable(v.severity), "31" if v.severity == "error" else "33")
        lines.append(f"{place(source, v)}: {sev} {printable(v.rule)} {printable(v.message)} (at {printable(shown_field(v.field))})")
    return lines


def shown_field(field: str) -> str:
    """A violation's field for people: its JSON Pointer, or `the whole document` for
    `""` (the pointer `/` would name the key `""`)."""
    return field or "the whole document"


def place(source: str, v) -> str:
    """`source:line:col` where the violation is known to sit, else `source`."""
    return f"{source}:{v.line}:{v.column}" if v.line and v.column else source


def _summary_line(s: dict[str, int]) -> str:
    unjudged = f", {s['no_verdict']} without a verdict" if s.get("no_verdict") else ""
    quiet = f", {s['suppressed']} suppressed" if s.get("suppressed") else ""
    return f"{s['total']} document{'s' * (s['total'] != 1)}: {s['passed']} passed, {s['failed']} failed{unjudged} ({s['errors']} errors, {s['warnings']} warnings{quiet})"


def text(results: Sequence[tuple[str, Report]]) -> str:
    paint = _painter()
    lines = [line for source, report in results for line in _report_lines(source, report, paint)]
    lines.append(_summary_line(summary(results)))
    return "\n".join(lines)


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _xml_safe(text: str) -> str:
    """Characters XML 1.0 forbids (control characters, lone surrogates) written out as
    \\uNNNN, as in text output."""
    return _NOT_XML.sub(_escape, text)


def xml_text(text: str) -> str:
    return escape(_xml_safe(text))


def xml_attr(text: str) -> str:
    return quoteattr(_xml_safe(text))


def junit_line(source: str, v) -> str:
    """A violation as a line of a test case's body: `file:line:col: rule: message`
    (`file: rule: message` where its place in the file is not known), a suppressed one
    followed by `(suppressed: how)`."""
    quiet = suppression(v)
    return f"{place(source, v)}: {v.rule}: {v.message}" + (f" (suppressed: {quiet['justification']})" if quiet else "")


def junit_cases(source: str, report: Report) -> list[str]:
    """A document's test case, the only one: CI dashboards count documents. It fails
    when the document fails, with every violation in the failure's body; a passing
    document's warnings are its system-out. `file` and `line` (the first violation's
    line, where known) are what GitLab and Jenkins link to."""
    attrs = f"name={xml_attr(source)} classname={xml_attr(report.kind)} file={xml_attr(source)}"
    counted = [v for v in report.violations if not suppression(v)]
    first = next((v for v in counted if v.severity == "error" and v.line), None) or next((v for v in counted if v.line), None)
    if first is not None:
        attrs += f' line="{first.line}"'
    out = [f"    <testcase {attrs}>"]
    body = "\n".join(junit_line(source, v) for v in report.violations)
    if not report.ok:
        errors = [v for v in counted if v.severity == "error"]
        kind = errors[0].rule if errors else "jobgate"
        out.append(f"      <failure message={xml_attr(f'{len(errors)} error(s)')} type={xml_attr(kind)}>{xml_text(body)}</failure>")
    elif body:
        out.append(f"      <system-out>{xml_text(body)}</system-out>")
    out.append("    </testcase>")
    return out


def junit_head(cases: int, failures: int, suite: str) -> list[str]:
    return [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="jobgate" tests="{cases}" failures="{failures}">',
        f'  <testsuite name={xml_attr(suite)} tests="{cases}" failures="{failures}" errors="0">',
    ]


JUNIT_TAIL = ["  </testsuite>", "</testsuites>"]
CHECK_SUITE = "jobgate check"


def junit(results: Sequence[tuple[str, Report]], suite: str = CHECK_SUITE) -> str:
    """A testcase per document (`junit_cases`) under the totals: tests are documents,
    failures failed documents. `suite` names the command that judged them."""
    s = summary(results)
    out = junit_head(s["total"], s["failed"], suite)
    for source, report in results:
        out += junit_cases(source, report)
    out += JUNIT_TAIL
    return "\n".join(out)


def artifact_uri(source: str) -> str:
    """A source as a SARIF artifact URI: relative to the working directory when it lies
    below it (resolved against %SRCROOT%), percent-encoded so that any name is a valid
    URI reference (`my dir/bad job.json` → `my%20dir/bad%20job.json`, `<stdin>` →
    `%3Cstdin%3E`)."""
    path = Path(source)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_uri()
    # A name that is not UTF-8 (surrogate escapes) is percent-encoded as the bytes it is.
    return quote(path.as_posix(), safe="/-._~", errors="surrogateescape")


def fingerprint(source: str, v) -> str:
    """Stable across runs and line moves: the file, the rule and the field."""
    return hashlib.sha256(f"{source}\0{v.rule}\0{v.field}".encode(errors="surrogateescape")).hexdigest()[:32]


def sarif_results(source: str, report: Report, index: dict[str, int]) -> list[dict[str, Any]]:
    """A document's SARIF results, one per violation; `index` gives a rule's place in
    the catalogue (`ruleIndex`). A suppressed finding carries SARIF's `suppressions`
    (`inSource` for a comment in the document, `external` for the configuration or the
    command line), which code scanning shows as dismissed."""
    uri = artifact_uri(source)
    out = []
    for v in report.violations:
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri, **({} if uri.startswith("file:") else {"uriBaseId": "%SRCROOT%"})}}
        physical["region"] = {"startLine": v.line or 1, "startColumn": v.column or 1}
        out.append(
            {
                "ruleId": v.rule,
                "ruleIndex": index.get(v.rule, -1),
                "level": {"error": "error", "warning": "warning"}.get(v.severity, "none"),
                "message": {"text": v.message},
                "locations": [
                    {
                        "physicalLocation": physical,
                        "logicalLocations": [{"fullyQualifiedName": v.field or "/", "kind": "member"}],
                    }
                ],
                "partialFingerprints": {"jobgateFinding/v1": fingerprint(uri, v)},
            }
        )
        quiet = suppression(v)
        if quiet:
            out[-1]["suppressions"] = [{"kind": quiet["kind"], "status": "accepted", "justification": quiet["justification"]}]
    return out


def rule_index() -> dict[str, int]:
    return {r["rule"]: i for i, r in enumerate(rules())}


def sarif_rule(r: dict[str, Any]) -> dict[str, Any]:
    """A rule of the catalogue as a SARIF reporting descriptor; `helpUri` is its entry
    on the rules page (`jobgate.rulebook`) where that page is at hand."""
    relax = "a deployment may change its severity in [rules]" if r["relaxable"] else "it protects the gate itself and cannot be relaxed"
    text = f"{r['rule']}: {r['summary']}. Default severity: {r['severity']}; {relax}. The message of each finding says what to change; every rule: docs/rules.md."
    out: dict[str, Any] = {
        "id": r["rule"],
        "name": r["rule"],
        "shortDescription": {"text": r["summary"]},
        "fullDescription": {"text": r["summary"]},
        "help": {"text": text},
        "defaultConfiguration": {"level": r["severity"]},
    }
    uri = rulebook.help_uri(r["rule"])
    if uri:
        out["helpUri"] = uri
    return out


def sarif_log(results: list[Any]) -> dict[str, Any]:
    """The SARIF log of one run whose `results` are these (`sarif_results`)."""
    catalogue = rules()
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "jobgate",
                        "version": __version__,
                        "rules": [sarif_rule(r) for r in catalogue],
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "invocations": [{"executionSuccessful": True, "commandLine": " ".join(["jobgate", *sys.argv[1:]]), "workingDirectory": {"uri": Path.cwd().as_uri() + "/"}}],
                "results": results,
            }
        ],
    }


def sarif(results: Sequence[tuple[str, Report]]) -> dict[str, Any]:
    index = rule_index()
    return sarif_log([r for source, report in results for r in sarif_results(source, report, index)])


def _github_value(text: str, prop: bool = False) -> str:
    """Escaped as GitHub's workflow commands want: %, CR and LF always; in a property,
    also ':' and ','. Other control characters are written out (`printable`)."""
    text = printable(text, keep="\r\n").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_lines(source: str, report: Report) -> list[str]:
    """A document's annotations: a workflow command per violation, at its line and
    column, in a group named by the file (the log folds each file's findings; a
    document without any has no group). Suppressed findings are left out: an
    annotation on the diff is a call to act."""
    shown = [v for v in report.violations if not suppression(v)]
    if not shown:
        return []
    lines = [f"::group::{_github_value(source)}"]
    for v in shown:
        props = [f"file={_github_value(source, True)}"]
        if v.line and v.column:
            props += [f"line={v.line}", f"col={v.column}"]
        props.append(f"title={_github_value(v.rule, True)}")
        level = {"error": "error", "warning": "warning"}.get(v.severity, "notice")
        lines.append(f"::{level} {','.join(props)}::{_github_value(f'{v.message} (at {shown_field(v.field)})')}")
    lines.append("::endgroup::")
    return lines


def github(results: Sequence[tuple[str, Report]]) -> str:
    """GitHub Actions workflow commands: an annotation per violation, at its line and
    column, grouped per file (`github_lines`), then the summary line."""
    lines = [line for source, report in results for line in github_lines(source, report)]
    lines.append(_summary_line(summary(results)))
    return "\n".join(lines)


def admissions(fmt: str, results: Sequence[tuple[str, Report]], job_ids: Sequence[str]) -> str:
    """Reports from the service, with the job id each admitted document was given."""
    if fmt == "json":
        out = as_json(results)
        for result, job_id in zip(out["results"], job_ids, strict=True):
            result["job_id"] = job_id
        return dumps(out)
    lines = text(results).splitlines()
    for (source, _), job_id in zip(results, job_ids, strict=True):
        if job_id:
            lines.insert(len(lines) - 1, f"{printable(source)}: admitted as job {printable(job_id)}")
    return "\n".join(lines)


def submissions(fmt: str, items: Sequence[Any]) -> str:
    """`jobgate submit`'s outcome, every document in the order sent: its report and the
    job id it was given, or why it got no verdict. `items` have `source`, `report`
    (None without a verdict), `job_id`, `idempotency_key`, `code` and `error`
    (`jobgate.cli.submit.Submission`)."""
    judged = [(item.source, item.report) for item in items if item.report is not None]
    totals = summary(judged) | {"total": len(items), "no_verdict": len(items) - len(judged)}
    if fmt == "json":
        results = []
        for item in items:
            shown = {"source": item.source, **item.report.to_dict()} if item.report is not None else {"source": item.source, "kind": None, "verdict": None, "violations": []}
            shown |= {"job_id": item.job_id, "idempotency_key": item.idempotency_key, "error": {"code": item.code, "message": item.error} if item.code else None}
            results.append(shown)
        return dumps({"results": results, "summary": totals})
    paint = _painter()
    lines = []
    for item in items:
        if item.report is None:
            unsent = item.code == "NOT_SENT"
            why = item.error if unsent else f"{item.code}: {item.error}"
            lines.append(f"{printable(item.source)}: {paint('not sent' if unsent else 'no verdict', '31;1')} — {printable(why)}")
            continue
        lines += _report_lines(item.source, item.report, paint)
        if item.job_id:
            lines.append(f"{printable(item.source)}: admitted as job {printable(item.job_id)}")
    lines.append(_summary_line(totals))
    return "\n".join(lines)


def change_lines(c: Any, paint) -> list[str]:
    """An item the candidate judges otherwise (`jobgate.rollout.Change`), for people:
    the verdicts, then the violations added (+) and removed (-)."""
    was, now = c.current["verdict"], c.candidate["verdict"]
    shift = paint(f"{was} -> {now}", "31;1" if c.breaks else "32" if c.mends else "33") if was != now else f"{now}, violations differ"
    lines = [f"{printable(c.source)}: {shift}" + (f" (project {printable(c.project)})" if c.project else "")]
    lines += [f"  + {v['severity']:<7} {printable(v['rule'])}  {printable(v['field'] or '(document)')}  {printable(v['message'])}" for v in c.added]
    lines += [f"  - {v['severity']:<7} {printable(v['rule'])}  {printable(v['field'] or '(document)')}  {printable(v['message'])}" for v in c.removed]
    return lines


def impact_lines(impact: dict[str, Any]) -> list[str]:
    lines = [f"{impact['changed']} of {impact['items']} items judged otherwise: {impact['newly_failing']} newly failing, {impact['newly_passing']} newly passing"]
    for rule, n in impact["by_rule"].items():
        lines.append(f"  rule {printable(rule)}: +{n['added']} -{n['removed']}")
    for project, n in impact["by_project"].items():
        lines.append(f"  project {printable(project)}: {n['changed']} changed, {n['newly_failing']} newly failing, {n['newly_passing']} newly passing")
    return lines


def changes(fmt: str, changed: Sequence[Any], impact: dict[str, Any], suite: str = CHECK_SUITE) -> str:
    """`revalidate --against`: the items the candidate judges otherwise
    (`jobgate.rollout.Change`) and the counts. JUnit and SARIF show the candidate's
    reports of those items."""
    if fmt == "json":
        return dumps({"changes": [c.to_dict() for c in changed], "impact": impact})
    if fmt in ("junit", "sarif", "github"):
        return render(fmt, [(c.source, ReportView.from_dict(c.candidate)) for c in changed], suite)
    paint = _painter()
    lines = [line for c in changed for line in change_lines(c, paint)]
    return "\n".join(lines + impact_lines(impact))


def dumps(value: Any) -> str:
    """JSON as `json.dumps(indent=2, ensure_ascii=False)` writes it, at orjson's speed
    (a report of an archive of 20,000 items is written in milliseconds)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:  # a file name that is not UTF-8 (surrogate escapes): the slow path
        return json.dumps(value, indent=2, ensure_ascii=False)


def dumps_line(value: Any) -> str:
    """One JSON Lines record: compact JSON and a newline."""
    try:
        return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE).decode()
    except TypeError:  # a file name that is not UTF-8 (surrogate escapes): the slow path
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def jsonl(results: Sequence[tuple[str, Report]]) -> str:
    """JSON Lines: one `{"source", "kind", "verdict", "violations"}` per document, the
    source on every line, no summary (every line is a document)."""
    return "".join(dumps_line({"source": source, **report.to_dict()}) for source, report in results)


def render(fmt: str, results: Sequence[tuple[str, Report]], suite: str = CHECK_SUITE) -> str:
    """`results` in `fmt`; `suite` names the JUnit test suite (the command)."""
    if fmt == "json":
        return dumps(as_json(results))
    if fmt == "junit":
        return junit(results, suite)
    if fmt == "sarif":
        return dumps(sarif(results))
    if fmt == "github":
        return github(results)
    return text(results)


def document(fmt: str, results: Sequence[tuple[str, Report]], suite: str = CHECK_SUITE) -> str:
    """Everything a report of `results` in `fmt` writes, built whole: what `ReportStream`
    writes piece by piece."""
    return jsonl(results) if fmt == "jsonl" else render(fmt, results, suite) + "\n"


def changes_document(fmt: str, changed: Sequence[Any], impact: dict[str, Any], suite: str = CHECK_SUITE) -> str:
    """Everything a report of a candidate's changes writes, built whole: what
    `ChangesStream` writes piece by piece."""
    if fmt == "jsonl":
        return "".join(dumps_line(c.to_dict()) for c in changed)
    return changes(fmt, changed, impact, suite) + "\n"
