"""Supporting files and packages on disk, for the tests of every entry point that
verifies them (the core, the command line, the service, the store): a spec-bundle
declaring files, and tar or zip packages of it."""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import zstandard

from tests.helpers import example

HELPER = b"print('checkpoint')\n"


@functools.cache
def _base() -> dict:
    """The upstream bundle, read when a test first needs it (never at import)."""
    return example("spec_bundle.config_mode.with_execution_lifecycle.valid.json")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bundle(files: list[tuple[str, str, str]]) -> dict:
    """The upstream bundle declaring `files`, as (source, destination, sha256)."""
    doc = copy.deepcopy(_base())
    doc["execution"]["supporting_files"] = [{"source": s, "destination": d, "sha256": h} for s, d, h in files]
    return doc


def tar_package(path: Path, members: dict[str, bytes], mode: str = "w", links: dict[str, str] | None = None) -> Path:
    """A tar at `path` of `members` and symbolic `links`; `mode` "gz" or "zst" compresses it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    raw = buf.getvalue()
    if mode == "gz":
        raw = gzip.compress(raw)
    elif mode == "zst":
        raw = zstandard.ZstdCompressor().compress(raw)
    path.write_bytes(raw)
    return path


def zip_package(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def packaged(extra: dict[str, bytes] | None = None) -> tuple[dict, dict[str, bytes]]:
    """A bundle declaring one helper script, and the members of its honest package."""
    doc = bundle([("scripts/checkpoint_action.py", "checkpoint_action.py", sha(HELPER))])
    members = {"bundle.json": json.dumps(doc).encode(), "scripts/checkpoint_action.py": HELPER, **(extra or {})}
    return doc, members
