"""Builds the seed corpora of the fuzz targets from every example, sample, test fixture
and peer case the project has: rust/fuzz/corpus/<target>/, one file per seed, named by
its digest (run again, nothing is duplicated; the fuzzer's own finds stay beside them).

    python rust/fuzz/seeds.py [--shared PATH]

The shared contract data (TAO examples, peer cases, starforge files) is read from
PATH, $JOBGATE_SHARED or ../shared beside the project, when it is there. Needs PyYAML
and zstandard (the project's test dependencies). The structure-aware targets
(yaml_shapes, package_shapes, spec_keys) start from nothing: their inputs are not files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import yaml
import zstandard

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parents[1]


def documents(shared: Path) -> list[bytes]:
    """Every JSON and YAML document the project and its upstream hold."""
    roots = [ROOT / "python/jobgate/samples", FUZZ / "shapes", shared / "upstream"]
    found = []
    for root in roots:
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.suffix in (".json", ".yaml", ".yml") and p.stat().st_size <= 64 * 1024:
                found.append(p.read_bytes())
    return found


def as_yaml(doc: bytes) -> bytes | None:
    try:
        return yaml.safe_dump(json.loads(doc), sort_keys=False, allow_unicode=True).encode()
    except (ValueError, yaml.YAMLError):
        return None


def python_sources() -> list[bytes]:
    picks = [*sorted((ROOT / "tests/files").glob("*.py")), *sorted((ROOT / "python/jobgate").glob("*.py")), FUZZ / "oracles.py"]
    return [p.read_bytes()[:16 * 1024] for p in picks]


HELPER = b"import json\nfrom util import load\nfrom . import sibling\nfrom pkg.sub import (\n    a,\n    b,\n)\n\nif True: import lazy\n"


def bundle(files: dict[str, bytes]) -> bytes:
    supporting = [{"source": n, "destination": n, "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()]
    return json.dumps({
        "schema_version": 1, "mode": "args", "command": "python scripts/helper.py", "args": [],
        "network_arch": "x", "image": "nvcr.io/nvidia/tao:1", "execution": {"supporting_files": supporting},
    }).encode()


def tar_bytes(files: dict[str, bytes], fmt: int, long: bool) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        d = tarfile.TarInfo("scripts/")
        d.type = tarfile.DIRTYPE
        t.addfile(d)
        for name, data in files.items():
            info = tarfile.TarInfo(("n" * 120 + "/" + name) if long and name != "bundle.json" else name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def zip_bytes(files: dict[str, bytes], method: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as z:
        z.writestr("scripts/", b"")
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()


def packages() -> list[bytes]:
    helper = {"scripts/helper.py": HELPER, "scripts/util.py": b"def load():\n    return 1\n"}
    files = {"bundle.json": bundle(helper), **helper}
    out = []
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        for long in (False, True):
            if long and fmt == tarfile.USTAR_FORMAT:
                continue
            raw = tar_bytes(files, fmt, long)
            out += [raw, gzip.compress(raw, mtime=0), zstandard.ZstdCompressor().compress(raw)]
    out += [zip_bytes(files, zipfile.ZIP_STORED), zip_bytes(files, zipfile.ZIP_DEFLATED)]
    return out


def streams() -> list[bytes]:
    data = tar_bytes({"a.py": HELPER}, tarfile.PAX_FORMAT, False)
    z = zstandard.ZstdCompressor()
    skippable = b"\x50\x2a\x4d\x18\x03\x00\x00\x00abc"
    return [
        b"\x00" + gzip.compress(data, mtime=0),
        b"\x00" + gzip.compress(data[:700], mtime=0) + gzip.compress(data[700:], mtime=0),
        b"\x01" + z.compress(data),
        b"\x01" + z.compress(data[:700]) + skippable + z.compress(data[700:]),
    ]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def batch_requests(docs: list[bytes]) -> list[bytes]:
    """Encoded `jobgate.v1.AdmitBatchRequest`s (documents 1, dry_run 2; a Document's
    raw body 1, typed bodies 2 and 3, kind 4, package 5, idempotency key 6): dry runs
    of raw documents, the batch_wire target's subject, and their near misses."""
    dry_run = b"\x10\x01"
    raw = [field(1, d) + b"\x20" + varint(k) for d, k in zip(docs[:40], [0, 1, 2, 3] * 10, strict=False)]
    return [
        *(field(1, r) + dry_run for r in raw),
        b"".join(field(1, r) for r in raw[:8]) + dry_run,
        dry_run,
        field(1, raw[0]),  # not a dry run
        field(1, raw[0] + field(5, b"PK")) + dry_run,  # a package
        field(1, field(2, b"")) + dry_run,  # a typed body
        field(1, raw[1] + field(6, "clé".encode())) + dry_run,
    ]


def write(target: str, seeds: list[bytes]) -> int:
    folder = FUZZ / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        (folder / hashlib.sha1(s).hexdigest()).write_bytes(s)
    return len(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(os.environ.get("JOBGATE_SHARED", ROOT.parent / "shared")))
    args = parser.parse_args()
    docs = documents(args.shared)
    json_docs = [d for d in docs if d.lstrip().startswith(b"{")]
    yaml_docs = [d for d in docs if not d.lstrip().startswith(b"{")] + [y for y in map(as_yaml, json_docs) if y]
    counts = {
        "json": write("json", json_docs),
        "yaml": write("yaml", yaml_docs),
        "documents": write("documents", [bytes([k]) + d for d in docs for k in (0, 1, 2)]),
        "locate": write("locate", [b"\x01/spec/resources\x00" + d for d in docs[:80]]),
        "imports": write("imports", [b"\x07" + s for s in [HELPER, *python_sources()]]),
        "package": write("package", packages()),
        "streams": write("streams", streams()),
        "batch_wire": write("batch_wire", batch_requests(docs)),
    }
    print("seeds:", ", ".join(f"{t} {n}" for t, n in counts.items()))


if __name__ == "__main__":
    main()
