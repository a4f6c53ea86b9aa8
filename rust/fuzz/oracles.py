"""The consumers jobgate must agree with, as the fuzz targets ask them (src/python.rs).

Each function reads the bytes the way the platform's Python tools do and answers with
JSON text; it raises when the consumer refuses the input. No comparison is made here:
the targets compare, so a finding names jobgate's reading and the consumer's side by side.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import tarfile
import zipfile

import yaml


def typed(value):
    """A JSON-able form where equal means the same value to a JSON reader: True is not 1,
    1.0 is not 1, and whatever JSON cannot hold (dates, bytes, sets) is named."""
    if isinstance(value, dict):
        return {"map": [[typed(k), typed(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return {"seq": [typed(v) for v in value]}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"float": repr(value)}
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if value is None:
        return {"null": None}
    return {"other": f"{type(value).__name__}: {value!r}"}


def safe_load(text: bytes) -> str:
    """What `yaml.safe_load` builds from the bytes, typed."""
    return json.dumps(typed(yaml.safe_load(text)), sort_keys=True)


def token_spans(text: bytes) -> str:
    """Where PyYAML's scanner reads a token, as [start, end) character indices: what no
    comment may overlap. A block scalar's token starts at its indicator, and its header
    line may end in a comment: its span starts on the next line."""
    decoded = text.decode()
    spans = []
    for token in yaml.scan(decoded):
        start, end = token.start_mark.index, token.end_mark.index
        if isinstance(token, yaml.ScalarToken) and token.style in ("|", ">"):
            start = decoded.find("\n", start) + 1 or end
        spans.append([start, end])
    return json.dumps(spans)


def json_typed(text: bytes) -> str:
    """jobgate's reading (JSON text) in the same typed form, for comparison."""
    return json.dumps(typed(json.loads(text)), sort_keys=True)


def normalize(name: str) -> str:
    """A member name as extractors write it: `./a`, `a//b` and `a/./b` name `a/b`."""
    name = name[2:] if name.startswith("./") else name
    return "/".join(p for p in name.split("/") if p not in ("", "."))


def _zstd_inflated(data: bytes) -> bytes:
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
        return r.read()


def _zip_members(data: bytes) -> bool:
    """Whether a zip reader extracts something from the bytes (`zipfile.is_zipfile` only
    finds an end record's signature, which compressed data may hold by chance)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return bool(z.namelist())
    except Exception:
        return False


def _tar_members(data: bytes) -> bool:
    """Whether a tar reader extracts something from the bytes."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            return bool(t.getmembers())
    except Exception:
        return False


def archive(data: bytes) -> str:
    """What `zipfile` or `tarfile` (after `zstandard` for tar.zst) holds: regular files by
    normalized name with their SHA-256, directories, and every other member by kind; and
    whether a reader of the other format opens the bytes too."""
    files: dict[str, list[str]] = {}
    dirs: list[str] = []
    other: dict[str, str] = {}
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                name = normalize(info.filename)
                mode = info.external_attr >> 16
                if info.is_dir():
                    dirs.append(name)
                elif mode & 0o170000 == 0o120000:
                    other[name] = "symlink"
                else:
                    files.setdefault(name, []).append(hashlib.sha256(z.read(info)).hexdigest())
        opens_as_other = _tar_members(data)
    else:
        if data.startswith(b"\x28\xb5\x2f\xfd"):
            fileobj, mode = io.BytesIO(_zstd_inflated(data)), "r:"
        elif data.startswith(b"\x1f\x8b"):
            fileobj, mode = io.BytesIO(data), "r:gz"
        else:
            fileobj, mode = io.BytesIO(data), "r:"
        with tarfile.open(fileobj=fileobj, mode=mode) as t:
            for m in t.getmembers():
                name = normalize(m.name)
                if m.isfile():
                    f = t.extractfile(m)
                    files.setdefault(name, []).append(hashlib.sha256(f.read()).hexdigest())
                elif m.isdir():
                    dirs.append(name)
                else:
                    kind = "symlink" if m.issym() else "hardlink" if m.islnk() else "device" if (m.ischr() or m.isblk()) else "fifo" if m.isfifo() else f"type {m.type!r}"
                    other[name] = kind
        opens_as_other = _zip_members(data)
    return json.dumps({"files": files, "dirs": sorted(set(dirs)), "other": other, "opens_as_other": opens_as_other})


def sibling_imports(source: bytes) -> str:
    """The module paths beside a helper that its import statements can load, as Python's
    own parser reads them: `import a.b` loads `a` and `a/b`; `from a import b` loads `a`
    and, when it is a submodule, `a/b`; `from . import b` loads `b`; `from .. import b`
    reaches outside the helper's directory and names no sibling."""
    tree = ast.parse(source)
    found: list[str] = []

    def push(path: str) -> None:
        if path not in found:
            found.append(path)

    def prefixes(dotted: str) -> str:
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            push("/".join(parts[:i]))
        return "/".join(parts)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                prefixes(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                continue
            base = prefixes(node.module) + "/" if node.module else ""
            for alias in node.names:
                if alias.name != "*":
                    push(base + alias.name)
    return json.dumps(sorted(found))
