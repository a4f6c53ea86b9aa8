"""Every rule has one home, the core: hand-written Python under python/jobgate names no
rule id (nor a family of them, such as "limits.") as a string literal. Rule ids reach
Python in the reports the core makes and through what it exports (`jobgate.rules()`,
`jobgate._core.PROJECT_FORBIDDEN`). Left out: the CLI, which formats reports for
people, and the generated protobuf code in python/jobgate/v1/."""

from __future__ import annotations

import ast
from pathlib import Path

import jobgate

PACKAGE = Path(jobgate.__file__).resolve().parent
LEFT_OUT = (PACKAGE / "cli", PACKAGE / "v1")


def rule_names() -> set[str]:
    ids = {r["rule"] for r in jobgate.rules()}
    families = {i.split(".")[0] + "." for i in ids} | {i.rsplit(".", 1)[0] + "." for i in ids}
    return ids | families


def literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_rule_id_is_written_in_python():
    names = rule_names()
    sources = [p for p in sorted(PACKAGE.rglob("*.py")) if not any(p.is_relative_to(d) for d in LEFT_OUT)]
    assert len(sources) > 20, sources
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}: {text!r}" for p in sources for line, text in literals(p) if text in names]
    assert not found, "rule ids belong to the core (rust/src/rules.rs); Python names them only through what it exports:\n" + "\n".join(found)


def test_the_check_sees_a_literal(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('RULE = "forge.project.forbidden"\nFAMILY = "limits."\nSAID = f"not {RULE}"\n', encoding="utf-8")
    names = rule_names()
    assert [text for _, text in literals(module) if text in names] == ["forge.project.forbidden", "limits."]


def test_what_the_core_exports_names_catalogued_rules():
    ids = {r["rule"] for r in jobgate.rules()}
    assert jobgate._core.PROJECT_FORBIDDEN in ids
    # The kinds are the core's table's (tests/core/test_kind_table.py), SPEC §1's among them.
    assert {"jobspec", "spec_bundle", "job_record", "best_rec"} <= set(jobgate.KINDS)
