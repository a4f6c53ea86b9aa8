"""Rolling out a new configuration: what it would change. Every item is judged under
the current configuration and the candidate (by the core, as always); here the two
reports are compared, and only the items whose verdict or violations differ are kept,
with counts by rule and by project.

Must not judge documents: it compares reports the core made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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


def compare(sources: list[str], current: list[dict[str, Any]], candidate: list[dict[str, Any]], project_of: Callable[[int], str]) -> list[Change]:
    """The items whose verdict or violations differ, in the items' order;
    `project_of(i)` names item i's project, asked only of the items that changed."""
    out = []
    for i, (source, before, after) in enumerate(zip(sources, current, candidate, strict=True)):
        old, new = Counter(_keys(before)), Counter(_keys(after))
        if before["verdict"] == after["verdict"] and old == new:
            continue
        change = Change(source, project_of(i), before, after)
        change.added = [v for v in after["violations"] if _take(old, v)]
        new_left = Counter(_keys(after))
        change.removed = [v for v in before["violations"] if _take(new_left, v)]
        out.append(change)
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


def impact(changes: list[Change], total: int) -> dict[str, Any]:
    """Counts: items changed, newly failing and newly passing; violations added and
    removed by rule; items changed, broken and mended by project."""
    by_rule: dict[str, dict[str, int]] = {}
    by_project: dict[str, dict[str, int]] = {}
    for c in changes:
        for side, vs in (("added", c.added), ("removed", c.removed)):
            for v in vs:
                by_rule.setdefault(v["rule"], {"added": 0, "removed": 0})[side] += 1
        p = by_project.setdefault(c.project or "(none)", {"changed": 0, "newly_failing": 0, "newly_passing": 0})
        p["changed"] += 1
        p["newly_failing"] += c.breaks
        p["newly_passing"] += c.mends
    return {
        "items": total,
        "changed": len(changes),
        "newly_failing": sum(c.breaks for c in changes),
        "newly_passing": sum(c.mends for c in changes),
        "by_rule": dict(sorted(by_rule.items())),
        "by_project": dict(sorted(by_project.items())),
    }
