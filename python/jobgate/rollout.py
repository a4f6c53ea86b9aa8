"""Rolling out a new configuration: what it would change. Every item is judged under
the current configuration and the candidate (by the core, as always); here the two
reports are compared, and only the items whose verdict or violations differ are kept,
with counts by rule and by project.

Must not judge documents: it compares reports the core made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str, str, str]  # rule, field, severity, message


def _keys(report: dict[str, Any]) -> list[Key]:
    return [(v["rule"], v["field"], v["severity"], v["message"]) for v in report["violations"]]


@dataclass
class Change:
    """One item the candidate judges otherwise: its reports under both, and the
    violations only one of them has."""

    source: str
    project: str
    current: dict[str, Any]
    candidate: dict[str, Any]
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def breaks(self) -> bool:
        return self.current["verdict"] == "pass" and self.candidate["verdict"] == "fail"

    @property
    def mends(self) -> bool:
        return self.current["verdict"] == "fail" and self.candidate["verdict"] == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.candidate["kind"],
            "project": self.project,
            "verdict": {"current": self.current["verdict"], "candidate": self.candidate["verdict"]},
            "added": self.added,
            "removed": self.removed,
        }


def differs(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether the verdict or the violations (rule, field, severity, message; not
    where they sit) of two reports of one item differ."""
    return before["verdict"] != after["verdict"] or Counter(_keys(before)) != Counter(_keys(after))


def change(source: str, project: str, before: dict[str, Any], after: dict[str, Any]) -> Change:
    """The change between two reports that differ: the violations only one has."""
    c = Change(source, project, before, after)
    old = Counter(_keys(before))
    c.added = [v for v in after["violations"] if _take(old, v)]
    new_left = Counter(_keys(after))
    c.removed = [v for v in before["violations"] if _take(new_left, v)]
    return c


def compare(sources: list[str], current: list[dict[str, Any]], candidate: list[dict[str, Any]], project_of: Callable[[int], str]) -> list[Change]:
    """The items whose verdict or violations differ, in the items' order;
    `project_of(i)` names item i's project, asked only of the items that changed."""
    return [change(source, project_of(i), before, after) for i, (source, before, after) in enumerate(zip(sources, current, candidate, strict=True)) if differs(before, after)]


def compare_reports(sources: Sequence[str], current: Sequence[Any], candidate: Sequence[Any], project_of: Callable[[int], str]) -> list[Change]:
    """As `compare`, for reports as objects (`jobgate.Report`, or shaped like one):
    made into dicts only where they may differ. The core hands out one shared report
    per kind for every clean document, so a pair that is one object is one report."""
    out = []
    for i, (source, before, after) in enumerate(zip(sources, current, candidate, strict=True)):
        if before is after:
            continue
        b, a = before.to_dict(), after.to_dict()
        if differs(b, a):
            out.append(change(source, project_of(i), b, a))
    return out


def _take(counter: Counter, v: dict[str, Any]) -> bool:
    """True when `v` is not (or no more) in `counter`; consumes one match otherwise."""
    key = (v["rule"], v["field"], v["severity"], v["message"])
    if counter[key] > 0:
        counter[key] -= 1
        return False
    return True


def fails(changes: list[Change], fail_on: str) -> bool:
    """Whether a rollout check exits 1: an item would newly fail, or with `warning`,
    any violation is added."""
    if fail_on == "warning":
        return any(c.added for c in changes)
    return any(c.breaks for c in changes)


class Impact:
    """The counts of a rollout check, kept as the changes go by (an archive's changes
    are never held together): items changed, newly failing and newly passing;
    violations added and removed by rule; items changed, broken and mended by project."""

    def __init__(self) -> None:
        self.items = self.changed = self.newly_failing = self.newly_passing = 0
        self.any_added = False
        self.by_rule: dict[str, dict[str, int]] = {}
        self.by_project: dict[str, dict[str, int]] = {}

    def add(self, c: Change) -> None:
        self.changed += 1
        self.newly_failing += c.breaks
        self.newly_passing += c.mends
        self.any_added = self.any_added or bool(c.added)
        for side, vs in (("added", c.added), ("removed", c.removed)):
            for v in vs:
                self.by_rule.setdefault(v["rule"], {"added": 0, "removed": 0})[side] += 1
        p = self.by_project.setdefault(c.project or "(none)", {"changed": 0, "newly_failing": 0, "newly_passing": 0})
        p["changed"] += 1
        p["newly_failing"] += c.breaks
        p["newly_passing"] += c.mends

    def fails(self, fail_on: str) -> bool:
        """As `fails`, from the counts."""
        return self.any_added if fail_on == "warning" else self.newly_failing > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "changed": self.changed,
            "newly_failing": self.newly_failing,
            "newly_passing": self.newly_passing,
            "by_rule": dict(sorted(self.by_rule.items())),
            "by_project": dict(sorted(self.by_project.items())),
        }


def impact(changes: list[Change], total: int) -> dict[str, Any]:
    """The counts of `changes` among `total` items (`Impact`)."""
    counts = Impact()
    counts.items = total
    for c in changes:
        counts.add(c)
    return counts.to_dict()
