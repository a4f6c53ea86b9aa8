"""Where documents and packages come from: the files, directories or `-` (stdin) a
command is pointed at, read with the size limit applied before a document is read
whole; and package bytes received from elsewhere, spooled to a private file.

A path given by name must be a regular file: a FIFO, socket or device is refused
(`NotRegular`) without blocking, since opening a FIFO for reading waits for a writer
and a device can be read forever. Only `-` reads a pipe. Directories yield their
regular files and pass over anything else."""

from __future__ import annotations

import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jobgate import _core

DOCUMENT_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class Source:
    name: str
    data: bytes


class NotRegular(OSError):
    """A path named to be read that is a FIFO, socket, device or other non-regular file."""

    def __init__(self, name: str, what: str) -> None:
        self.why = f"is {what}, not a regular file"
        super().__init__(f"{name}: {self.why}")


def _what(mode: int) -> str | None:
    """What a file of `mode` is, in a message's words, unless it is a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "of an unknown type"


def ensure_regular(name: str) -> None:
    """Raises NotRegular when `name` exists and is not a regular file (by stat, which
    never blocks); a missing path is left to whoever opens it."""
    try:
        what = _what(os.stat(name).st_mode)
    except OSError:
        return
    if what is not None:
        raise NotRegular(name, what)


def open_regular(name: str) -> io.BufferedReader:
    """`name` opened for reading if it is a regular file. The open is non-blocking, so
    a FIFO without a writer cannot hang it, and blocking again once fstat has said what
    the file is. Raises NotRegular, or OSError as `open` does."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        ensure_regular(name)  # a socket cannot be opened at all (ENXIO): say what it is
        raise
    try:
        what = _what(os.fstat(fd).st_mode)
        if what is not None:
            raise NotRegular(name, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def expand(paths: list[str]) -> list[str]:
    """Files as given; directories become their JSON/YAML regular files, sorted (a
    FIFO or socket in them is passed over). Raises FileNotFoundError, PermissionError,
    or NotRegular for a named path that is not a regular file, naming the path."""
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
            ensure_regular(raw)
            out.append(raw)
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return out


class TooLarge(Exception):
    """A document over the size limit, refused before it is read whole: a file of many
    gigabytes costs a stat, not the memory to hold it. The message and the report are
    the core's (`limits.size`)."""

    def __init__(self, name: str, size: int | None, limit: int) -> None:
        self.name = name
        self.size = size
        self.limit = limit
        super().__init__(_core.refused_too_large(size, limit).violations[0].message)

    def report(self, kind: str | None) -> dict:
        """The report the core gives such a document (`Report.to_dict()` shape)."""
        return _core.refused_too_large(self.size, self.limit, kind=kind).to_dict()


def read(name: str, max_bytes: int | None = None) -> Source:
    """The document's bytes. With `max_bytes`, a larger document raises TooLarge after
    reading at most `max_bytes + 1` bytes (a pipe's size is only known by reading).
    A named path must be a regular file (NotRegular otherwise); `-` is stdin."""
    cap = -1 if max_bytes is None else max_bytes + 1
    if name == "-":
        data = sys.stdin.buffer.read(cap)
        name = "<stdin>"
    else:
        try:
            with open_regular(name) as f:
                size = os.fstat(f.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    raise TooLarge(name, size, max_bytes)
                data = f.read(cap)
        except NotRegular:
            raise
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
