"""Where documents and packages come from: the files, directories or `-` (stdin) a
command is pointed at, read with the size limit applied before a document is read
whole; and package bytes received from elsewhere, spooled to a private file."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


class TooLarge(Exception):
    """A document over the size limit, refused before it is read whole: a file of many
    gigabytes costs a stat, not the memory to hold it. The message is the core's
    `limits.size` message."""

    def __init__(self, name: str, size: int | None, limit: int) -> None:
        self.name = name
        size_text = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        super().__init__(f"the document is {size_text}, over the limit of {limit} bytes")

    def report(self, kind: str | None) -> dict:
        """The report the core gives such a document (`Report.to_dict()` shape)."""
        return {"kind": kind or "unknown", "verdict": "fail", "violations": [{"rule": "limits.size", "field": "", "message": str(self), "severity": "error"}]}


def read(name: str, max_bytes: int | None = None) -> Source:
    """The document's bytes. With `max_bytes`, a larger document raises TooLarge after
    reading at most `max_bytes + 1` bytes (a pipe's size is only known by reading)."""
    cap = -1 if max_bytes is None else max_bytes + 1
    if name == "-":
        data = sys.stdin.buffer.read(cap)
        name = "<stdin>"
    else:
        try:
            with open(name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    raise TooLarge(name, size, max_bytes)
                data = f.read(cap)
        except OSError as e:
            raise OSError(f"{name}: cannot read: {e.strerror or e}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(name, None, max_bytes)
    return Source(name, data)


def read_all(names: list[str], max_bytes: int) -> list[Source | TooLarge]:
    """Each document's bytes, or the TooLarge that refuses it; OSError as `read`."""
    out: list[Source | TooLarge] = []
    for name in names:
        try:
            out.append(read(name, max_bytes))
        except TooLarge as e:
            out.append(e)
    return out


@contextmanager
def spooled(data: bytes) -> Iterator[str]:
    """Bytes received from elsewhere (a package sent to the service, or shipped to a
    Ray worker) as the private temporary file the core verifies packages from;
    removed afterwards. Name it in reports with `jobgate.reports.renamed`."""
    with tempfile.NamedTemporaryFile(prefix="jobgate-package-") as f:
        f.write(data)
        f.flush()
        yield f.name
