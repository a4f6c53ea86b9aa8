"""The stub, python/jobgate/_core.pyi, where the core's API is documented, against the
built module: every public name of jobgate._core is in the stub and every name of the
stub is in the module, each class's public members alike, and every function and
method takes the parameters the stub gives it (names, kinds, which have defaults)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import jobgate
from jobgate import _core

STUB = Path(jobgate.__file__).with_name("_core.pyi")
TREE = ast.parse(STUB.read_text(), str(STUB))


def public(name: str) -> bool:
    return not name.startswith("_")


def declared(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """What a module or class body of the stub declares, by name. A plain assignment
    at module level is a type alias of the stub's own (`Kind`, `Document`), not a
    name of the module."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


MODULE = declared(TREE.body)
CLASSES = {name: node for name, node in MODULE.items() if isinstance(node, ast.ClassDef)}


def test_the_stub_and_the_module_name_the_same_things():
    in_module = {n for n in dir(_core) if public(n)} | set(_core.__all__)
    in_stub = {n for n in MODULE if public(n) or n in _core.__all__}
    assert sorted(in_stub - in_module) == [], "in the stub, not in the module"
    assert sorted(in_module - in_stub) == [], "in the module, not in the stub"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_has_the_members_of_its_stub(name):
    in_module = {n for n in vars(getattr(_core, name)) if public(n)}
    in_stub = {n for n in declared(CLASSES[name].body) if public(n)}
    assert sorted(in_stub - in_module) == [], f"{name}: in the stub, not in the module"
    assert sorted(in_module - in_stub) == [], f"{name}: in the module, not in the stub"


def stub_parameters(node: ast.FunctionDef, *, method: bool) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) of each parameter, `self` left out of a method."""
    a = node.args
    positional = [(p, "POSITIONAL_ONLY") for p in a.posonlyargs] + [(p, "POSITIONAL_OR_KEYWORD") for p in a.args]
    defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
    out = [(p.arg, kind, d) for (p, kind), d in zip(positional, defaults, strict=True)]
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", False))
    out += [(p.arg, "KEYWORD_ONLY", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", False))
    return out[1:] if method else out


def module_parameters(obj) -> list[tuple[str, str, bool]]:
    return [(p.name, p.kind.name, p.default is not p.empty) for p in inspect.signature(obj).parameters.values()]


def is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def callables() -> list[tuple[str, ast.FunctionDef]]:
    found = [(name, node) for name, node in MODULE.items() if isinstance(node, ast.FunctionDef)]
    for cls, node in CLASSES.items():
        for name, member in declared(node.body).items():
            if isinstance(member, ast.FunctionDef) and not is_property(member) and (public(name) or name == "__init__"):
                found.append((f"{cls}.{name}", member))
    return sorted(found, key=lambda item: item[0])


@pytest.mark.parametrize(("name", "node"), callables(), ids=[name for name, _ in callables()])
def test_each_function_takes_the_parameters_of_its_stub(name, node):
    cls, _, attr = name.rpartition(".")
    if not cls:
        assert module_parameters(getattr(_core, attr)) == stub_parameters(node, method=False)
    elif attr == "__init__":  # the class's own signature: the constructor's, without self
        assert module_parameters(getattr(_core, cls)) == stub_parameters(node, method=True)
    else:
        found = module_parameters(getattr(getattr(_core, cls), attr))
        assert found[:1] == [("self", "POSITIONAL_ONLY", False)]
        assert found[1:] == stub_parameters(node, method=True)
