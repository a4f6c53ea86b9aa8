"""Reading the documents a command was pointed at: files, directories, `-` for stdin."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

DOCUMENT_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class Source:
    name: str
    data: bytes


def expand(paths: list[str]) -> list[str]:
    """Files as given; directories become their JSON/YAML files, sorted. Raises
    FileNotFoundError or PermissionError naming the path."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        p = Path(raw)
        if p.is_dir():
            found = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix.lower() in DOCUMENT_SUFFIXES)
            if not found:
                raise FileNotFoundError(f"{raw}: the directory holds no .json, .yaml or .yml files")
            out.extend(found)
        elif p.exists():
            out.append(raw)
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return out


def read(name: str) -> Source:
    if name == "-":
        return Source("<stdin>", sys.stdin.buffer.read())
    try:
        return Source(name, Path(name).read_bytes())
    except OSError as e:
        raise OSError(f"{name}: cannot read: {e.strerror or e}") from None
