"""Helpers every layer's tests share: the upstream data in ../shared, sample documents,
JSON Pointer edits, the command line run in-process, and the error details of an RPC."""

from __future__ import annotations

import copy
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

import jobgate
from jobgate import samples
from jobgate.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
# The shared contract data beside the project; JOBGATE_SHARED points elsewhere.
SHARED = Path(os.environ.get("JOBGATE_SHARED", ROOT.parent / "shared"))
UPSTREAM = SHARED / "upstream"
TAO = UPSTREAM / "tao-artifacts"
EXAMPLES = TAO / "examples"
DEMO_CONFIG = samples.path(samples.DEMO_CONFIG)


def require_shared() -> None:
    """Skips the calling test, or the whole module when called at import, if the
    shared upstream data is not checked out beside the project; in CI it must be there."""
    if EXAMPLES.is_dir():
        return
    missing = f"the shared upstream data (TAO schemas and examples) is missing: expected {EXAMPLES}; check out ../shared beside the project"
    if os.environ.get("CI"):
        raise RuntimeError(missing)
    pytest.skip(missing, allow_module_level=True)


def required_tool(name: str, package: str) -> str:
    """A checker binary: the host's, or the one scripts/dev test unpacks from Debian's
    `package` into the virtualenv. Skips without it, except in CI, where it must be there."""
    import shutil
    import sys

    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    missing = f"{name} is missing: scripts/dev test unpacks it from Debian's {package} package"
    if os.environ.get("CI"):
        raise RuntimeError(missing)
    pytest.skip(missing)


def promtool() -> str:
    """Prometheus's own checker (Debian's prometheus package)."""
    return required_tool("promtool", "prometheus")


def example(name: str) -> dict[str, Any]:
    require_shared()
    return json.loads((EXAMPLES / name).read_bytes())


def schema(kind: str) -> dict[str, Any]:
    require_shared()
    return json.loads((TAO / f"{kind}.schema.json").read_bytes())


def sample(name: str) -> dict[str, Any]:
    return json.loads(samples.path(name).read_bytes())


DELETE = object()


def mutate(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `doc` with JSON Pointer paths set (or removed with DELETE)."""
    out = copy.deepcopy(doc)
    for ptr, value in changes.items():
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]]
        node: Any = out
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        last = parts[-1]
        if isinstance(node, list):
            if value is DELETE:
                del node[int(last)]
            elif last == "-":
                node.append(value)
            else:
                node[int(last)] = value
        elif value is DELETE:
            del node[last]
        else:
            node[last] = value
    return out


def with_literal(doc: dict[str, Any], ptr: str, text: str) -> bytes:
    """`doc` as JSON bytes with the value at the JSON Pointer `ptr` written as the
    literal JSON `text` (`1e300`, `18446744073709551621`): numbers Python would not
    write that way."""
    marker = "@literal@"
    data = json.dumps(mutate(doc, {ptr: marker})).replace(f'"{marker}"', text)
    assert marker not in data
    return data.encode()


def deep_dotted_spec(levels: int = 60, dotted: int = 5000) -> dict[str, Any]:
    """A spec-bundle `spec` whose every violation has a long pointer: `levels` nested
    keys of 1,000 characters, then `dotted` dotted keys at the bottom."""
    deep: dict[str, Any] = {}
    node = deep
    for i in range(levels):
        child: dict[str, Any] = {}
        node[f"{i:04d}" + "k" * 996] = child
        node = child
    node.update({f"a.{i}": 1 for i in range(dotted)})
    return deep


def free_port() -> int:
    """A loopback port nobody listens on (yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pairs(report: jobgate.Report) -> list[tuple[str, str]]:
    return [(v.rule, v.field) for v in report.violations]


def run_cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(args)
    return code, capsys.readouterr().out


def error_detail(error, message_type):
    """The detail of `message_type` (a google.rpc.error_details_pb2 class) an RPC
    error carries; fails when it carries none. Every error carries an ErrorInfo."""
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)
    assert status is not None, f"{error.code()} carries no google.rpc.Status: {error.details()}"
    found = [d for d in status.details if d.Is(message_type.DESCRIPTOR)]
    assert found, f"{error.code()} carries no {message_type.DESCRIPTOR.full_name}: {[d.type_url for d in status.details]}"
    detail = message_type()
    found[0].Unpack(detail)
    return detail
