"""Reports written as they come: the documents of `formats` (text, JSON, JSON Lines,
SARIF, JUnit, GitHub workflow commands) written piece by piece, so that a run over an
archive of any size holds one chunk of reports at a time, never the whole report.

What a stream writes is byte for byte what `formats.document` (or
`formats.changes_document`) builds whole from the same items in the same order; the
totals a document ends with (the summary, the impact of a candidate) are counters.
JSON and SARIF are written as arrays whose elements come one at a time; JUnit names
its totals in its first lines, so its test cases wait in a temporary file (on disk,
not in memory) until the totals are known.

Owns the incremental shape of each format; must not decide a format's content, which
is `formats`'s (each element is rendered there).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from jobgate.cli import formats
from jobgate.reports import ReportView

FORMATS = (*formats.FORMATS, "jsonl")


class Totals:
    """What a summary counts, kept as numbers as the reports go by."""

    __slots__ = ("errors", "passed", "suppressed", "total", "violations", "warnings")

    def __init__(self) -> None:
        self.total = self.passed = self.errors = self.warnings = self.violations = self.suppressed = 0

    def add(self, report: Any) -> None:
        self.total += 1
        self.passed += report.ok
        self.errors += report.errors
        self.warnings += report.warnings
        quiet = formats.suppressed_count(report)
        self.suppressed += quiet
        self.violations += len(report.violations) - quiet

    def summary(self) -> dict[str, int]:
        out = {"total": self.total, "passed": self.passed, "failed": self.total - self.passed, "errors": self.errors, "warnings": self.warnings}
        if self.suppressed:
            out["suppressed"] = self.suppressed
        return out

    def failing(self, fail_on: str) -> bool:
        """As `formats.failing`: a failed document, or with `warning`, any violation
    left unsuppressed."""
        return self.violations > 0 if fail_on == "warning" else self.passed < self.total


class JsonArray:
    """A JSON document, written as `formats.dumps` writes it, whose one array (where
    `envelope` puts the list it is given) is written an element at a time. The text
    before the array is written when the stream opens; the text after it, from the
    envelope as it stands at the end (a summary is known only then)."""

    _HOLE = "\x01streamed\x01"

    def __init__(self, out: TextIO, envelope: Callable[[list[Any]], Any]) -> None:
        self.out = out
        head, self.indent, _ = self._split(envelope)
        self.first = True
        out.write(head)

    @classmethod
    def _split(cls, envelope: Callable[[list[Any]], Any]) -> tuple[str, str, str]:
        """The envelope's text around an array of one placeholder: what comes up to the
        array's `[`, the indent of its elements, and what follows the placeholder
        (a newline, the closing `]` at its own indent, and the rest)."""
        text = formats.dumps(envelope([cls._HOLE]))
        marker = formats.dumps(cls._HOLE)
        at = text.index(marker)
        line = text.rindex("\n", 0, at) + 1
        return text[: line - 1], text[line:at], text[at + len(marker) :]

    def add(self, elements: Iterable[Any]) -> None:
        indent = self.indent
        parts = []
        for element in elements:
            parts.append((",\n" if parts or not self.first else "\n") + indent + formats.dumps(element).replace("\n", "\n" + indent))
        if parts:
            self.first = False
            self.out.write("".join(parts))

    def close(self, envelope: Callable[[list[Any]], Any]) -> None:
        _, _, tail = self._split(envelope)
        # An empty array is `[]`, on the line that opened it.
        self.out.write((tail[tail.index("]") :] if self.first else tail) + "\n")


class ReportStream:
    """Reports of documents, `(source, report)` in order, written in `fmt` as they
    come. A report is a `jobgate.Report` or anything shaped like one
    (`jobgate.reports.ReportView`). `suite` names JUnit's test suite (the command)."""

    def __init__(self, fmt: str, out: TextIO, suite: str = formats.CHECK_SUITE) -> None:
        self.fmt, self.out, self.suite = fmt, out, suite
        self.totals = Totals()
        self._paint = formats._painter()  # noqa: SLF001 - the text format's colours
        self._array: JsonArray | None = None
        self._spool: Any = None
        if fmt == "json":
            self._array = JsonArray(out, lambda results: {"results": results, "summary": {}})
        elif fmt == "sarif":
            self._index = formats.rule_index()
            self._array = JsonArray(out, formats.sarif_log)
        elif fmt == "junit":
            # The totals open the document: the cases wait on disk until they are known.
            self._spool = tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogatepass", newline="", prefix="jobgate-junit-")

    def write(self, results: Iterable[tuple[str, Any]]) -> None:
        fmt, totals = self.fmt, self.totals
        lines: list[str] = []
        if fmt == "json":
            elements = []
            for source, report in results:
                totals.add(report)
                elements.append({"source": source, **report.to_dict()})
            self._array.add(elements)  # type: ignore[union-attr]
            return
        if fmt == "sarif":
            found = []
            for source, report in results:
                totals.add(report)
                if report.violations:
                    found += formats.sarif_results(source, report, self._index)
            self._array.add(found)  # type: ignore[union-attr]
            return
        if fmt == "jsonl":
            for source, report in results:
                totals.add(report)
                lines.append(formats.dumps_line({"source": source, **report.to_dict()}))
            self.out.write("".join(lines))
            return
        for source, report in results:
            totals.add(report)
            if fmt == "junit":
                lines += formats.junit_cases(source, report)
            elif fmt == "github":
                lines += formats.github_lines(source, report)
            else:
                lines += formats._report_lines(source, report, self._paint)  # noqa: SLF001
        if lines:
            (self._spool or self.out).write("\n".join(lines) + "\n")

    def close(self) -> None:
        """Ends the document: the summary, the closing brackets, JUnit's cases under
        their totals."""
        fmt, totals = self.fmt, self.totals
        if fmt == "json":
            self._array.close(lambda results: {"results": results, "summary": totals.summary()})  # type: ignore[union-attr]
        elif fmt == "sarif":
            self._array.close(formats.sarif_log)  # type: ignore[union-attr]
        elif fmt == "junit":
            self.out.write("\n".join(formats.junit_head(totals.total, totals.total - totals.passed, self.suite)) + "\n")
            self._spool.seek(0)
            shutil.copyfileobj(self._spool, self.out, 1 << 20)
            self._spool.close()
            self.out.write("\n".join(formats.JUNIT_TAIL) + "\n")
        elif fmt in ("text", "github"):
            self.out.write(formats._summary_line(totals.summary()) + "\n")  # noqa: SLF001
        self.out.flush()


class ChangesStream:
    """The items a candidate configuration judges otherwise (`jobgate.rollout.Change`,
    in order), written in `fmt` as they come; `close` ends with the counts. JUnit,
    SARIF and GitHub show the candidate's reports of the changed items."""

    def __init__(self, fmt: str, out: TextIO, suite: str = formats.CHECK_SUITE) -> None:
        self.fmt, self.out = fmt, out
        self._paint = formats._painter()  # noqa: SLF001
        self._array = JsonArray(out, lambda changes: {"changes": changes, "impact": {}}) if fmt == "json" else None
        self._reports = ReportStream(fmt, out, suite) if fmt in ("junit", "sarif", "github") else None

    def write(self, changes: Iterable[Any]) -> None:
        if self._reports is not None:
            self._reports.write((c.source, ReportView.from_dict(c.candidate)) for c in changes)
        elif self._array is not None:
            self._array.add(c.to_dict() for c in changes)
        elif self.fmt == "jsonl":
            self.out.write("".join(formats.dumps_line(c.to_dict()) for c in changes))
        else:
            lines = [line for c in changes for line in formats.change_lines(c, self._paint)]
            if lines:
                self.out.write("\n".join(lines) + "\n")

    def close(self, impact: dict[str, Any]) -> None:
        if self._reports is not None:
            self._reports.close()
            return
        if self._array is not None:
            self._array.close(lambda changes: {"changes": changes, "impact": impact})
        elif self.fmt != "jsonl":
            self.out.write("\n".join(formats.impact_lines(impact)) + "\n")
        self.out.flush()
