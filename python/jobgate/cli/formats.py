"""Rendering reports: text for people, JSON (SPEC §6), JUnit XML and SARIF for CI."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import orjson

from jobgate import Report, __version__, rules

FORMATS = ("text", "json", "junit", "sarif")


def add_fail_on(p) -> None:
    p.add_argument("--fail-on", choices=("error", "warning"), default="error", help="exit 1 when a document has an error (default), or any violation at all")


def failing(results: Sequence[tuple[str, Report]], fail_on: str) -> bool:
    """Whether the run exits 1: a failed document, or with `warning`, any violation."""
    if fail_on == "warning":
        return any(r.violations for _, r in results)
    return not all(r.ok for _, r in results)


def summary(results: Sequence[tuple[str, Report]]) -> dict[str, int]:
    passed = sum(1 for _, r in results if r.ok)
    return {
        "total": len(results),
        "passed": passed,
        "failed": len(results) - passed,
        "errors": sum(r.errors for _, r in results),
        "warnings": sum(r.warnings for _, r in results),
    }


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


def _report_lines(source: str, report: Report, paint) -> list[str]:
    verdict = paint("pass", "32") if report.ok else paint("fail", "31;1")
    counts = []
    if report.errors:
        counts.append(f"{report.errors} error{'s' * (report.errors != 1)}")
    if report.warnings:
        counts.append(f"{report.warnings} warning{'s' * (report.warnings != 1)}")
    tail = f" — {', '.join(counts)}" if counts else ""
    lines = [f"{source}: {verdict} ({report.kind}){tail}"]
    for v in report.violations:
        sev = paint(f"{v.severity:<7}", "31" if v.severity == "error" else "33")
        lines.append(f"  {sev} {v.rule}  {v.field or '(document)'}  {v.message}")
    return lines


def _summary_line(s: dict[str, int]) -> str:
    unjudged = f", {s['no_verdict']} without a verdict" if s.get("no_verdict") else ""
    return f"{s['total']} document{'s' * (s['total'] != 1)}: {s['passed']} passed, {s['failed']} failed{unjudged} ({s['errors']} errors, {s['warnings']} warnings)"


def text(results: Sequence[tuple[str, Report]]) -> str:
    paint = _painter()
    lines = [line for source, report in results for line in _report_lines(source, report, paint)]
    lines.append(_summary_line(summary(results)))
    return "\n".join(lines)


def junit(results: Sequence[tuple[str, Report]]) -> str:
    s = summary(results)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="jobgate" tests="{s["total"]}" failures="{s["failed"]}">',
        f'  <testsuite name="jobgate check" tests="{s["total"]}" failures="{s["failed"]}" errors="0">',
    ]
    for source, report in results:
        out.append(f"    <testcase name={quoteattr(source)} classname={quoteattr(report.kind)}>")
        errors = [v for v in report.violations if v.severity == "error"]
        if errors:
            body = "\n".join(f"{v.rule} {v.field or '(document)'}: {v.message}" for v in errors)
            out.append(f"      <failure message={quoteattr(f'{len(errors)} error(s)')} type={quoteattr(errors[0].rule)}>{escape(body)}</failure>")
        warnings = [v for v in report.violations if v.severity == "warning"]
        if warnings:
            body = "\n".join(f"warning {v.rule} {v.field or '(document)'}: {v.message}" for v in warnings)
            out.append(f"      <system-out>{escape(body)}</system-out>")
        out.append("    </testcase>")
    out += ["  </testsuite>", "</testsuites>"]
    return "\n".join(out)


def sarif(results: Sequence[tuple[str, Report]]) -> dict[str, Any]:
    catalogue = rules()
    index = {r["rule"]: i for i, r in enumerate(catalogue)}
    sarif_results = []
    for source, report in results:
        for v in report.violations:
            sarif_results.append(
                {
                    "ruleId": v.rule,
                    "ruleIndex": index.get(v.rule, -1),
                    "level": "error" if v.severity == "error" else "warning",
                    "message": {"text": v.message},
                    "locations": [
                        {
                            "physicalLocation": {"artifactLocation": {"uri": source}},
                            "logicalLocations": [{"fullyQualifiedName": v.field or "/", "kind": "member"}],
                        }
                    ],
                }
            )
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "jobgate",
                        "version": __version__,
                        "rules": [
                            {
                                "id": r["rule"],
                                "shortDescription": {"text": r["summary"]},
                                "defaultConfiguration": {"level": r["severity"]},
                            }
                            for r in catalogue
                        ],
                    }
                },
                "results": sarif_results,
            }
        ],
    }


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
            lines.insert(len(lines) - 1, f"{source}: admitted as job {job_id}")
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
            lines.append(f"{item.source}: {paint('not sent' if unsent else 'no verdict', '31;1')} — {item.error if unsent else f'{item.code}: {item.error}'}")
            continue
        lines += _report_lines(item.source, item.report, paint)
        if item.job_id:
            lines.append(f"{item.source}: admitted as job {item.job_id}")
    lines.append(_summary_line(totals))
    return "\n".join(lines)


def changes(fmt: str, changed: Sequence[Any], impact: dict[str, Any]) -> str:
    """`revalidate --against`: the items the candidate judges otherwise
    (`jobgate.rollout.Change`) and the counts. JUnit and SARIF show the candidate's
    reports of those items."""
    if fmt == "json":
        return dumps({"changes": [c.to_dict() for c in changed], "impact": impact})
    if fmt in ("junit", "sarif"):
        from jobgate.reports import ReportView

        return render(fmt, [(c.source, ReportView.from_dict(c.candidate)) for c in changed])
    paint = _painter()
    lines = []
    for c in changed:
        was, now = c.current["verdict"], c.candidate["verdict"]
        shift = paint(f"{was} -> {now}", "31;1" if c.breaks else "32" if c.mends else "33") if was != now else f"{now}, violations differ"
        lines.append(f"{c.source}: {shift}" + (f" (project {c.project})" if c.project else ""))
        lines += [f"  + {v['severity']:<7} {v['rule']}  {v['field'] or '(document)'}  {v['message']}" for v in c.added]
        lines += [f"  - {v['severity']:<7} {v['rule']}  {v['field'] or '(document)'}  {v['message']}" for v in c.removed]
    lines.append(f"{impact['changed']} of {impact['items']} items judged otherwise: {impact['newly_failing']} newly failing, {impact['newly_passing']} newly passing")
    for rule, n in impact["by_rule"].items():
        lines.append(f"  rule {rule}: +{n['added']} -{n['removed']}")
    for project, n in impact["by_project"].items():
        lines.append(f"  project {project}: {n['changed']} changed, {n['newly_failing']} newly failing, {n['newly_passing']} newly passing")
    return "\n".join(lines)


def dumps(value: Any) -> str:
    """JSON as `json.dumps(indent=2, ensure_ascii=False)` writes it, at orjson's speed
    (a report of an archive of 20,000 items is written in milliseconds)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:  # a file name that is not UTF-8 (surrogate escapes): the slow path
        return json.dumps(value, indent=2, ensure_ascii=False)


def render(fmt: str, results: Sequence[tuple[str, Report]]) -> str:
    if fmt == "json":
        return dumps(as_json(results))
    if fmt == "junit":
        return junit(results)
    if fmt == "sarif":
        return dumps(sarif(results))
    return text(results)
