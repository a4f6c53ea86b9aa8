"""The kinds have one home, the core's table (`rust/src/kind.rs`): every other list of
them is read from it (`jobgate._core.kind_table()`) or checked against it here: the
wire's numbers, the `.pyi` literal, and no Python module listing kinds by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson

import jobgate
from jobgate.server.wire import KIND_NAMES
from jobgate.v1 import report_pb2

PACKAGE = Path(jobgate.__file__).resolve().parent
TABLE = jobgate._core.kind_table()
NAMES = tuple(k["name"] for k in TABLE)


def test_the_table_is_the_kinds():
    # Read from the table, not listed again here: a new kind's row is its only entry.
    assert NAMES == jobgate.KINDS
    assert len(set(NAMES)) == len(NAMES)
    for k in TABLE:
        assert k["charge"] in (None, "project", "home"), k
        assert k["launches"] == (k["charge"] is not None), k
    # The kinds SPEC §1 names are among them, with what they charge.
    charges = {k["name"]: k["charge"] for k in TABLE}
    assert {name: charges.get(name, "missing") for name in ("jobspec", "spec_bundle", "job_record", "best_rec")} == {
        "jobspec": "project",
        "spec_bundle": "home",
        "job_record": None,
        "best_rec": None,
    }


def test_the_proto_numbers_are_the_tables():
    numbers = {v.number: v.name for v in report_pb2.Kind.DESCRIPTOR.values if v.number != 0}
    assert numbers == {k["proto"]: "KIND_" + k["name"].upper() for k in TABLE}
    assert KIND_NAMES == {0: None} | {k["proto"]: k["name"] for k in TABLE}


def test_the_stub_literal_is_the_tables():
    stub = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    (literal,) = [n.value for n in stub.body if isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["Kind"]]
    assert tuple(e.value for e in literal.slice.elts) == NAMES


def test_detection_and_facts_follow_the_table():
    v = jobgate.Validator()
    for k in TABLE:
        for key in k["detect"]:
            facts = v.facts(orjson.dumps({key: 1}))
            assert (facts.kind, facts.launches, facts.charge) == (k["name"], k["launches"], k["charge"]), key
    # Where several kinds' keys meet, the lowest rank wins.
    every = {key: 1 for k in TABLE for key in k["detect"]}
    assert v.facts(orjson.dumps(every)).kind == min(TABLE, key=lambda k: k["rank"])["name"]
    message = v.check(b'{"other": 1}').violations[0].message
    for k in TABLE:
        assert f"({k['name']})" in message


def kind_lists(path: Path) -> list[int]:
    """Lines where a list, tuple, set or dict literal names two kinds or more."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, ast.List | ast.Tuple | ast.Set) else []
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES}
        if len(named) >= 2:
            found.append(node.lineno)
    return found


def test_no_python_module_lists_kinds_by_hand(tmp_path):
    sources = [p for p in sorted(PACKAGE.rglob("*.py")) if not p.is_relative_to(PACKAGE / "v1")]
    assert len(sources) > 20, sources
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sources for line in kind_lists(p)]
    assert not found, "kinds belong to the core's table (rust/src/kind.rs); read them from jobgate._core.kind_table():\n" + "\n".join(found)
    module = tmp_path / "m.py"
    module.write_text('LAUNCHING = ("jobspec", "spec_bundle")\nONE = ["jobspec"]\n', encoding="utf-8")
    assert kind_lists(module) == [1]
