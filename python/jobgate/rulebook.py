"""`docs/rules.md`, the page per rule that SARIF's `helpUri` points at: every rule of
the core's catalogue (`jobgate.rules()`) with its default severity, whether a
deployment may relax it, and what it finds. Generated from the catalogue by
`scripts/dev docs`; a test fails when the page drifts from it.

Owns the page's text and its anchors (one per rule, the rule id itself); must not
describe a rule otherwise than the catalogue does.
"""

from __future__ import annotations

import functools
from pathlib import Path

from jobgate import rules

# The families of rule ids, in the order the page shows them, with what each reads.
FAMILIES = {
    "json": "Reading the document",
    "limits": "Bounds on what is read",
    "kind": "The kind of document",
    "schema": "The schema of the kind",
    "forge": "JobSpec (`forge/v2`)",
    "tao": "TAO spec-bundles and their supporting files",
}


def anchor(rule: str) -> str:
    """A rule's anchor on the page: its id (dots are valid in a URI fragment)."""
    return rule


def reference() -> str:
    """The text of `docs/rules.md`."""
    catalogue = rules()
    lines = [
        "# Rules",
        "",
        "Generated from the validator core's rule catalogue (`rust/src/rules.rs`) by",
        "`scripts/dev docs`; a test fails when this page and the catalogue disagree. Each",
        "rule has an anchor named by its id (`docs/rules.md#forge.kind`), the `helpUri` of",
        "the rule in SARIF output.",
        "",
        "A deployment changes a relaxable rule's severity in `[rules]` (project-wide or per",
        "project, [configuration](configuration.md)); the other rules protect the gate",
        "itself (reading, bounds, supporting files and staging, quotas, the account's",
        "projects, credentials) and keep their severity whatever the configuration says.",
        "A relaxable rule's findings can also be suppressed one by one (`# jobgate:",
        "ignore[RULE]` in YAML, `[rules.paths]`, `--ignore`: README, \"Suppressing a",
        "finding\"); the others cannot.",
        "",
        f"{len(catalogue)} rules:",
        "",
        "| rule | severity | relaxable | what it finds |",
        "|---|---|---|---|",
    ]
    lines += [f"| [`{r['rule']}`](#{anchor(r['rule'])}) | {r['severity']} | {'yes' if r['relaxable'] else 'no'} | {_cell(r['summary'])} |" for r in catalogue]
    families = list(FAMILIES) + sorted({r["rule"].split(".")[0] for r in catalogue} - set(FAMILIES))
    for family in families:
        members = [r for r in catalogue if r["rule"].split(".")[0] == family]
        if not members:
            continue
        lines += ["", f"## {FAMILIES.get(family, f'`{family}.*`')}"]
        for r in members:
            relax = "yes, with `[rules]`; its findings can be suppressed" if r["relaxable"] else "no: it protects the gate itself, and its findings cannot be suppressed"
            lines += [
                "",
                f'<a id="{anchor(r["rule"])}"></a>',
                "",
                f"### `{r['rule']}`",
                "",
                f"- finds: {r['summary']}",
                f"- default severity: {r['severity']}",
                f"- can be relaxed: {relax}",
            ]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


@functools.cache
def page() -> str | None:
    """The absolute URI of the rules page `helpUri` points at: `docs/rules.md` beside
    the source this jobgate runs from (a clone, an editable install), else none (an
    installed wheel has no docs; the SARIF `help` text names the page)."""
    path = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    return path.as_uri() if path.is_file() else None


def help_uri(rule: str) -> str | None:
    """The rule's entry on the rules page, or None where the page is not at hand."""
    base = page()
    return f"{base}#{anchor(rule)}" if base else None
