"""Reports as plain values, for reports that did not come straight from the core: a
report received over the wire, from another process, or rewritten (a package
received as bytes is named as such, not by its temporary file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ViolationView:
    rule: str
    field: str
    message: str
    severity: str
    # Where `field` is in the source (from 1), None when unknown: a Report's Violation alike.
    line: int | None = None
    column: int | None = None
    # The severity the rules gave, when the deployment's [rules] changed it.
    default_severity: str | None = None
    # How the finding was suppressed (`{"kind", "justification"}`, as in SARIF), when it
    # was: it is listed but counts for nothing (`jobgate.suppressions`).
    suppressed: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rule": self.rule, "field": self.field, "message": self.message, "severity": self.severity}
        if self.line and self.column:
            d["line"], d["column"] = self.line, self.column
        if self.default_severity:
            d["default_severity"] = self.default_severity
        if self.suppressed:
            d["suppressed"] = dict(self.suppressed)
        return d


class ReportView:
    """A report that arrived as data (over the wire, or from another process) rather
    than as a jobgate.Report, shaped like one for the formatters."""

    def __init__(self, kind: str, verdict: str, violations: list[ViolationView]) -> None:
        self.kind, self.verdict, self.violations = kind, verdict, violations
        self.ok = verdict == "pass"
        counted = [v for v in violations if not v.suppressed] if violations else []
        self.errors = sum(1 for v in counted if v.severity == "error")
        self.warnings = sum(1 for v in counted if v.severity == "warning")
        self.suppressed = len(violations) - len(counted) if violations else 0

    @classmethod
    def from_message(cls, message) -> ReportView:
        """From a jobgate.v1.Report message."""
        return cls(message.kind, message.verdict, [ViolationView(v.rule, v.field, v.message, v.severity, v.line or None, v.column or None, v.default_severity or None) for v in message.violations])

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReportView:
        """From `Report.to_dict()`."""
        violations = d["violations"]
        return cls(d["kind"], d["verdict"], [ViolationView(**v) for v in violations] if violations else [])

    def to_dict(self) -> dict:
        return {"kind": self.kind, "verdict": self.verdict, "violations": [v.to_dict() for v in self.violations]}


def unlocated(report) -> ReportView:
    """`report` without lines and columns: for a document that was not text (a typed
    message), whose sender has no lines to look at."""
    shown = report.to_dict()
    for v in shown["violations"]:
        v.pop("line", None)
        v.pop("column", None)
    return ReportView.from_dict(shown)


def renamed(report: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    """`report` (a `Report.to_dict()`) with `path` named `name` in its messages."""
    return {**report, "violations": [{**v, "message": v["message"].replace(path, name)} for v in report["violations"]]}
