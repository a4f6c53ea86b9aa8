"""Suppressions: findings a user has looked at and chosen to silence, for the reports
of `jobgate check` and `jobgate revalidate`. Three sources, as linters have them:

- `# jobgate: ignore[RULE, ...]` in a YAML document, on the violation's line or alone
  on the line above it (comments as the YAML reader sees them: `_core.yaml_comments`);
- `[rules.paths."GLOB"] ignore = [...]` in the configuration, for the documents whose
  path matches (JSON has no comments);
- `--ignore RULE` on the command line.

A suppressed finding stays in the report, marked with how it was suppressed, and no
longer counts: an error that is suppressed does not fail its document. Rules that
protect the gate itself (those `[rules]` cannot relax) are never suppressed.

Owns reading suppressions and marking reports; must not change what the core found
(the rules live in the core) nor how a report is written (`jobgate.cli.formats`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from jobgate import _core
from jobgate.reports import ReportView, ViolationView

_CATALOGUE = {r["rule"]: r for r in _core.rules()}

# A suppression comment: `jobgate: ignore[a.b, c.d]` anywhere in a comment, so that a
# reason may come before or after it. `jobgate: ignore` without brackets is seen too,
# to say that it suppresses nothing.
_DIRECTIVE = re.compile(r"\bjobgate:\s*ignore\b(?:\[([^\]]*)\])?")

IN_SOURCE = "inSource"  # SARIF's kinds of suppression
EXTERNAL = "external"


def refusal(rule: str) -> str | None:
    """Why `rule` cannot be suppressed, or None when it can."""
    if rule not in _CATALOGUE:
        close = difflib.get_close_matches(rule, list(_CATALOGUE), n=1)
        return f"{rule} is not a jobgate rule" + (f"; did you mean {close[0]}?" if close else "")
    if not _CATALOGUE[rule]["relaxable"]:
        return f"{rule} protects the gate itself and cannot be suppressed (nor relaxed in [rules])"
    return None


@dataclass(frozen=True)
class Suppression:
    """How a finding was suppressed: SARIF's `kind` (`inSource` for a comment in the
    document, `external` for the configuration or the command line) and what did it."""

    kind: str
    justification: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "justification": self.justification}


@dataclass(frozen=True)
class PathRule:
    """`[rules.paths."GLOB"]`: the rules ignored in the documents whose path matches."""

    glob: str
    ignore: tuple[str, ...]
    pattern: re.Pattern[str]


def glob_pattern(glob: str) -> re.Pattern[str]:
    """A path glob as a regular expression over `/`-separated relative paths: `*`
    matches within one segment, `?` one character of a segment, `**` as a whole
    segment any number of segments (none included); a glob without `/` matches the
    file's name in any directory, as in .gitignore."""
    if "/" not in glob.strip("/"):
        glob = "**/" + glob.strip("/")
    parts = []
    segments = glob.strip("/").split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        body = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in segment)
        parts.append(body if last else body + "/")
    return re.compile("".join(parts))


def path_rules(table: dict[str, object]) -> list[PathRule]:
    """`[rules.paths]` read and checked: one table per glob, holding `ignore`, a list
    of rule ids that exist and can be suppressed. Raises ValueError naming the key."""
    out = []
    for glob, entry in table.items():
        where = f'rules.paths."{glob}"'
        if not glob.strip("/"):
            raise ValueError(f"{where}: an empty path glob")
        if not isinstance(entry, dict) or set(entry) != {"ignore"}:
            raise ValueError(f'{where}: one key, ignore = ["rule.id", ...]')
        ignore = entry["ignore"]
        if not isinstance(ignore, list) or not all(isinstance(r, str) for r in ignore):
            raise ValueError(f'{where}.ignore: a list of rule ids, ["rule.id", ...]')
        for rule in ignore:
            why = refusal(rule)
            if why:
                raise ValueError(f"{where}.ignore: {why}")
        out.append(PathRule(glob, tuple(ignore), glob_pattern(glob)))
    return out


class Suppressor:
    """What suppresses a run's findings: the command line's rules, the configuration's
    path tables (globs relative to `base`, the configuration file's directory) and the
    comments of each document."""

    def __init__(self, ignore: Sequence[str] = (), paths: Sequence[PathRule] = (), base: str | os.PathLike[str] | None = None) -> None:
        self.ignore = frozenset(ignore)
        self.paths = list(paths)
        self.base = Path(base or os.curdir).absolute()
        self.notes: list[str] = []  # what the comments named that suppresses nothing, for stderr

    def _path_rules(self, source: str) -> dict[str, str]:
        """Rule → the path table that ignores it in `source`."""
        if not self.paths or source == "<stdin>":  # stdin has no path to match
            return {}
        try:
            relative = PurePosixPath(Path(os.path.abspath(source)).relative_to(self.base).as_posix())
        except ValueError:  # outside the base: only name-only globs can match
            relative = PurePosixPath(Path(source).name)
        out: dict[str, str] = {}
        for table in self.paths:
            if table.pattern.fullmatch(str(relative)):
                for rule in table.ignore:
                    out.setdefault(rule, f'[rules.paths."{table.glob}"] in the configuration')
        return out

    def _comments(self, source: str, text: bytes) -> dict[int, dict[str, str]]:
        """Line → rule → the comment that suppresses it there: a comment covers its own
        line, and, alone on its line, the next one too. Notes what cannot suppress."""
        if b"jobgate:" not in text:
            return {}
        try:
            decoded = text.decode()
        except UnicodeDecodeError:
            return {}
        covered: dict[int, dict[str, str]] = {}
        for line, column, alone, body in _core.yaml_comments(decoded):
            for m in _DIRECTIVE.finditer(body):
                at = f"{source}:{line}:{column}"
                if m.group(1) is None:
                    self.notes.append(f"{at}: note: `jobgate: ignore` names no rule and suppresses nothing; write ignore[RULE] (several separated by commas)")
                    continue
                for rule in (r.strip() for r in m.group(1).split(",")):
                    if not rule:
                        continue
                    why = refusal(rule)
                    if why:
                        self.notes.append(f"{at}: note: ignore[{rule}] suppresses nothing: {why}" + ("; the finding stays" if rule in _CATALOGUE else ""))
                        continue
                    by = f"# jobgate: ignore[{rule}] at line {line}"
                    for target in (line, line + 1) if alone else (line,):
                        covered.setdefault(target, {}).setdefault(rule, by)
        return covered

    def apply(self, source: str, report, text: bytes | None = None):
        """`report` with the findings suppressed here marked (a ReportView), or
        `report` itself when none is. `text` is the document's source, for its
        comments (None for a document that has none to read)."""
        # Read first, even for a clean document: a comment that names no rule, or one
        # that cannot be suppressed, is noted wherever it is.
        comments = self._comments(source, text) if text else {}
        if not report.violations:
            return report
        external = self._path_rules(source)
        for rule in self.ignore:
            external.setdefault(rule, f"--ignore {rule} on the command line")
        marks: list[dict[str, str] | None] = []
        for v in report.violations:
            mark = None
            if refusal(v.rule) is None:
                by = comments.get(v.line, {}).get(v.rule) if v.line else None
                if by:
                    mark = Suppression(IN_SOURCE, by).to_dict()
                elif v.rule in external:
                    mark = Suppression(EXTERNAL, external[v.rule]).to_dict()
            marks.append(mark)
        if not any(marks):
            return report
        view = report if isinstance(report, ReportView) else ReportView.from_dict(report.to_dict())
        return suppressed(view, marks)


def suppressed(report: ReportView, marks: Iterable[dict[str, str] | None]) -> ReportView:
    """`report` with each violation given its mark; the verdict and counts are those
    of the findings left unsuppressed."""
    violations = [replace(v, suppressed=m) if m is not None else v for v, m in zip(report.violations, marks, strict=True)]
    return ReportView(report.kind, verdict(violations), violations)


def verdict(violations: Sequence[ViolationView]) -> str:
    return "fail" if any(v.severity == "error" and v.suppressed is None for v in violations) else "pass"
