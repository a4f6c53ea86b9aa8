"""Packages are read exactly as their extractors read them.

Named regressions, one for each way an archive once showed jobgate one set of files
and an extractor another, then a differential property over generated archives: when
jobgate passes a package, Python's `tarfile`/`zipfile`, GNU tar and `unzip` extract
exactly the bundle document and the declared files with their declared digests, and
no reader of the other kind opens it. Every byte a consumer would extract is hashed
and declared, or the package is refused."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobgate
from tests.files.archives import EVIL, bundle, gz, packaged, skippable, tar_bytes, write, zip_bytes, zst
from tests.files.helpers import HELPER, sha
from tests.helpers import pairs

F = "/execution/supporting_files"
V = jobgate.Validator()
IN_CI = bool(os.environ.get("CI"))  # derandomized in CI, as in tests/core/test_differential.py
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=IN_CI)
GNU_TAR = shutil.which("tar")
UNZIP = shutil.which("unzip")


def refusal(report: jobgate.Report) -> str:
    assert pairs(report) == [("json.syntax", "")], report.violations
    return report.violations[0].message


# ------------------------------------------------------------ named regressions


@pytest.mark.parametrize("compress", [gz, zst], ids=["gzip", "zstd"])
def test_a_second_member_replacing_helper_py_and_adding_evil_sh(tmp_path, compress):
    doc, entries = packaged()
    # The first member stops where its tar's end marker would be: GNU tar and tarfile
    # read straight on into the second, which replaces helper.py and adds evil.sh.
    second = [("file", "scripts/helper.py", EVIL), ("file", "evil.sh", EVIL)]
    path = write(tmp_path, "p.tar", compress(tar_bytes(entries, end=False)) + compress(tar_bytes(second)))
    if compress is gz:
        assert "evil.sh" in tarfile.open(path).getnames()  # what the extractor sees
    report = V.check(doc, package=path)
    assert pairs(report) == [("tao.supporting_file.undeclared", F)] * 2
    text = " ".join(v.message for v in report.violations)
    assert "scripts/helper.py more than once" in text and "evil.sh" in text


@pytest.mark.parametrize("compress", [gz, zst], ids=["gzip", "zstd"])
def test_a_second_member_after_the_end_marker(tmp_path, compress):
    doc, entries = packaged()
    path = write(tmp_path, "p.tar", compress(tar_bytes(entries)) + compress(tar_bytes([("file", "evil.sh", EVIL)])))
    assert "after its tar end-of-archive marker" in refusal(V.check(doc, package=path))


def test_two_zstd_frames_and_a_skippable_frame_read_as_one_tar(tmp_path):
    doc, entries = packaged()
    raw = tar_bytes(entries)
    path = write(tmp_path, "p.tar.zst", zst(raw[:1000]) + skippable(b"producer notes") + zst(raw[1000:]))
    assert pairs(V.check(doc, package=path)) == []
    assert pairs(V.check(None, package=path)) == []


def test_trailing_garbage_after_the_last_gzip_member(tmp_path):
    doc, entries = packaged()
    path = write(tmp_path, "p.tar.gz", gz(tar_bytes(entries)) + b"\x00garbage")
    assert "after gzip member 1" in refusal(V.check(doc, package=path))


def test_duplicate_zip_members_evil_first(tmp_path):
    doc, entries = packaged()
    path = write(tmp_path, "p.zip", zip_bytes([entries[0], ("file", "scripts/helper.py", EVIL), entries[1]]))
    report = V.check(doc, package=path)
    # the first copy is the one hashed; the second is never silently preferred
    assert pairs(report) == [("tao.supporting_file.undeclared", F), ("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]
    assert "scripts/helper.py more than once" in report.violations[0].message


@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_duplicates_are_found_after_normalizing(tmp_path, fmt):
    doc, entries = packaged([("file", "./scripts//helper.py", EVIL)])
    path = write(tmp_path, f"p.{fmt}", zip_bytes(entries) if fmt == "zip" else tar_bytes(entries))
    report = V.check(doc, package=path)
    assert pairs(report) == [("tao.supporting_file.undeclared", F)]
    assert "more than once" in report.violations[0].message


def test_local_and_central_names_differ(tmp_path):
    doc, entries = packaged()
    raw = bytearray(zip_bytes(entries))
    at = raw.index(b"scripts/helper.py", raw.index(b"PK\x03\x04", 4))  # the second local header's name
    raw[at : at + 17] = b"scripts/helper.sh"
    path = write(tmp_path, "p.zip", bytes(raw))
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(path).read("scripts/helper.py")  # zipfile refuses it too, late
    assert "in its local header" in refusal(V.check(doc, package=path))


@pytest.mark.skipif(shutil.which("unzip") is None, reason="Info-ZIP's unzip is not installed")
@pytest.mark.parametrize("needed", [46, 47, 63])
def test_a_zip_version_unzip_cannot_extract_is_refused(tmp_path, needed):
    # Found by the differential property below: jobgate and zipfile took 4.7, UnZip 6.0 refuses it (exit 81).
    doc, entries = packaged()
    raw = bytearray(zip_bytes(entries))
    for at in range(len(raw)):
        if raw[at : at + 4] == b"PK\x01\x02":
            raw[at + 6 : at + 8] = needed.to_bytes(2, "little")
    path = write(tmp_path, "p.zip", bytes(raw))
    unzipped = subprocess.run(["unzip", "-qq", "-o", str(path), "-d", str(tmp_path / "out")], capture_output=True)
    report = V.check(doc, package=path)
    if needed <= 46:
        assert unzipped.returncode == 0 and report.ok, report.violations
    else:
        assert unzipped.returncode != 0
        assert f"needs zip version {needed // 10}.{needed % 10}" in refusal(report)


def test_a_tar_with_a_zip_appended(tmp_path):
    doc, entries = packaged()
    path = write(tmp_path, "p.tar", tar_bytes(entries) + zip_bytes([("file", "evil.sh", EVIL)]))
    assert zipfile.ZipFile(path).namelist() == ["evil.sh"]  # what a zip reader extracts
    assert "is also a zip archive" in refusal(V.check(doc, package=path))


@pytest.mark.parametrize("prefix", [b"#!/bin/sh\nexec python -m helper\n", b"PK\x03\x04"], ids=["script", "signature"])
def test_a_zip_with_a_prefix(tmp_path, prefix):
    doc, entries = packaged()
    path = write(tmp_path, "p.zip", prefix + zip_bytes(entries))
    assert sorted(zipfile.ZipFile(path).namelist()) == ["bundle.json", "scripts/helper.py"]  # zipfile forgives it
    message = refusal(V.check(doc, package=path))
    assert "prepended" in message or "does not account for" in message


def test_two_bundle_documents(tmp_path):
    doc, entries = packaged()
    other = bundle({})
    path = write(tmp_path, "p.tar", tar_bytes([*entries, ("file", "bundle.yaml", json.dumps(other).encode())]))
    report = V.check(None, package=path)  # the first one found is the one checked
    assert pairs(report) == [("tao.supporting_file.undeclared", F)]
    message = report.violations[0].message
    assert "bundle.json" in message and "bundle.yaml" in message and "exactly one bundle document" in message
    assert pairs(V.check(doc, package=path)) == [("tao.supporting_file.undeclared", F)]


def test_a_bundle_document_over_the_document_limit_is_refused_unread(tmp_path):
    doc, entries = packaged()
    entries[0] = ("file", "bundle.json", json.dumps(doc).encode() + b" " * (1 << 20))
    report = V.check(None, package=write(tmp_path, "p.tar", tar_bytes(entries)))
    assert pairs(report) == [("limits.size", "")]
    assert "bundle.json is 1" in report.violations[0].message and "limits.max_document_bytes" in report.violations[0].message


def test_a_helper_of_any_size_is_scanned_for_imports(tmp_path):
    big = b"#" * (5 << 20) + b"\nimport sibling\n"
    doc = bundle({"scripts/big.py": big})
    entries = [("file", "bundle.json", json.dumps(doc).encode()), ("file", "scripts/big.py", big), ("file", "scripts/sibling.py", HELPER)]
    report = V.check(doc, package=write(tmp_path, "p.tar.gz", gz(tar_bytes(entries))))
    assert ("tao.supporting_file.undeclared_import", f"{F}/0/source") in pairs(report)


def test_a_package_shipping_another_bundle_than_the_one_checked(tmp_path):
    doc, entries = packaged()
    evil = {**doc, "image": "evil.example.com/pwn:latest"}
    path = write(tmp_path, "p.tar", tar_bytes([("file", "bundle.json", json.dumps(evil).encode()), *entries[1:]]))
    report = V.check(doc, package=path)  # what `tar -x` gives is `evil`, never checked
    assert pairs(report) == [("tao.supporting_file.undeclared", F)]
    assert "not the bundle checked with it" in report.violations[0].message
    # The same bundle, however it is formatted, is the one shipped.
    same = write(tmp_path, "same.tar", tar_bytes([("file", "bundle.json", json.dumps(doc, indent=2, sort_keys=True).encode()), *entries[1:]]))
    assert V.check(doc, package=same).ok


def test_a_file_named_like_a_directory(tmp_path):
    doc, entries = packaged()
    path = write(tmp_path, "p.tar", tar_bytes([entries[0], ("file", "scripts/helper.py/.", HELPER)]))
    report = V.check(doc, package=path)
    assert ("tao.supporting_file.path", F) in pairs(report) and not report.ok


def test_zip64_unicode_path_and_cp437_names_are_refused(tmp_path):
    doc, entries = packaged()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for _, name, data in entries:
            with z.open(name, "w", force_zip64=True) as f:
                f.write(data)
    assert "ZIP64" in refusal(V.check(doc, package=write(tmp_path, "a.zip", buf.getvalue())))

    # unzip extracts helper.py under the name in the Info-ZIP Unicode Path field
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(entries[0][1], entries[0][2])
        info = zipfile.ZipInfo("scripts/helper.py")
        name = b"evil.sh"
        info.extra = struct.pack("<HHB", 0x7075, 5 + len(name), 1) + struct.pack("<I", zlib.crc32(b"scripts/helper.py")) + name
        z.writestr(info, HELPER)
    assert "Unicode Path" in refusal(V.check(doc, package=write(tmp_path, "b.zip", buf.getvalue())))

    raw = bytearray(zip_bytes([*entries, ("file", "scripts/x.py", b"")]))
    for at in [i for i in range(len(raw)) if raw.startswith(b"scripts/x.py", i)]:
        raw[at + 8] = 0x82  # é in cp437, no UTF-8 flag
    assert "no UTF-8 flag" in refusal(V.check(doc, package=write(tmp_path, "c.zip", bytes(raw))))


def test_links_directories_and_long_names_in_every_tar_format(tmp_path):
    long = "scripts/" + "n" * 120 + ".py"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        doc = bundle({"scripts/helper.py": HELPER, long: b"x = 1\n"})
        entries = [("file", "bundle.json", json.dumps(doc).encode()), ("dir", "scripts"), ("file", "scripts/helper.py", HELPER), ("file", long, b"x = 1\n")]
        path = write(tmp_path, f"{fmt}.tar", tar_bytes(entries, fmt))
        assert pairs(V.check(None, package=path)) == []
        path = write(tmp_path, f"{fmt}-link.tar", tar_bytes([*entries, ("symlink", "scripts/l.py", "helper.py")], fmt))
        assert pairs(V.check(None, package=path)) == [("tao.supporting_file.undeclared", F)]


# ------------------------------------------------------------ the differential property


def normalize(name: str) -> str:
    name = name[2:] if name.startswith("./") else name
    return "/".join(p for p in name.split("/") if p not in ("", "."))


SEGMENT = st.sampled_from(["scripts", "lib", "a", "./", "", "n" * 101])
LEAF = st.sampled_from(["helper.py", "util.py", "data.txt", "run.sh", "lib", "a", "x" * 130 + ".py"])
NAME = st.builds(lambda dirs, leaf: "/".join([*dirs, leaf]), st.lists(SEGMENT, max_size=3), LEAF)
DATA = st.one_of(st.just(b""), st.just(HELPER), st.binary(max_size=700))
ENTRY = st.one_of(
    st.tuples(st.just("file"), NAME, DATA),
    st.tuples(st.just("file"), NAME, DATA),
    st.tuples(st.just("dir"), NAME),
    st.tuples(st.sampled_from(["symlink", "hardlink"]), NAME, st.sampled_from(["helper.py", "/etc/passwd", "../x"])),
)
HOSTILE = [("file", "scripts/helper.py", EVIL), ("file", "evil.sh", EVIL), ("file", "bundle.yaml", b"mode: args\n")]

TAR_MUTATIONS = ["none", "none", "append_zeros", "strip_end_append", "append_tar", "append_zip", "append_junk", "prefix_junk", "header_field", "header_field", "extension", "extension", "flip"]
STREAM_MUTATIONS = ["none", "split", "second_member", "trailing_junk", "skippable"]
ZIP_MUTATIONS = ["none", "none", "zip_field", "zip_field", "append_junk", "append_zip", "prefix_junk", "prefix_tar", "local_name", "central_name", "comment_signature", "flip", "stored", "streamed"]
BENIGN = {"none", "append_zeros", "split", "skippable", "stored", "streamed"}

# (offset, length) of the tar header fields a mutation rewrites, and values worth trying
FIELDS = [(0, 100), (100, 8), (108, 8), (124, 12), (136, 12), (156, 1), (157, 100), (257, 8), (329, 8), (345, 155)]
VALUES = [b"", b"0000644\0", b" 644 \0", b"0o644\0", b"1_0\0", b"00 12\0", b"\x80" + b"\0" * 10 + b"\x05", b"\xff" * 12, b"ustar  \0", b"ustar\x0000", b"scripts", b"evil.sh\0", b"x/", b"0", b"\0", b"5", b"2", b"g", b"x", b"L", b"Z", b"7"]


def pax(*records: tuple[str, str]) -> bytes:
    out = b""
    for key, value in records:
        body = f" {key}={value}\n".encode()
        n = len(body) + 1
        while len(str(n).encode() + body) != n:
            n += 1
        out += str(n).encode() + body
    return out


# extension headers put before a member: (typeflag, data)
EXTENSIONS = [
    (b"x", pax(("path", "evil.sh"))),
    (b"x", pax(("path", "scripts/helper.py"))),
    (b"x", pax(("path", "a/"))),
    (b"x", pax(("size", "0"))),
    (b"x", pax(("size", "1_0"))),
    (b"x", pax(("path", "a"), ("path", "b"))),
    (b"x", pax(("GNU.sparse.name", "evil.sh"))),
    (b"x", pax(("hdrcharset", "BINARY"), ("mtime", "1.5"))),
    (b"x", pax(("linkpath", "x"), ("comment", "c"))),
    (b"x", b"30 path=evil.sh\n"),
    (b"X", pax(("path", "evil.sh"))),
    (b"g", pax(("path", "evil.sh"))),
    (b"g", pax(("comment", "3b18e512dba79e4c8300dd08aeb37f8e728b8dad"))),
    (b"L", b"evil.sh\0"),
    (b"L", b"evil.sh"),
    (b"L", b"helper.py\0evil"),
    (b"K", b"target\0"),
]


def extension_header(typeflag: bytes, data: bytes, magic: bytes, padding: bytes) -> bytes:
    block = bytearray(512)
    block[0:14] = b"././@LongLink\0"
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = b"%011o\0" % len(data)
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:265] = magic
    seal(block)
    pad = -len(data) % 512
    return bytes(block) + data + (padding * pad)[:pad]


def seal(block: bytearray) -> None:
    block[148:156] = b"        "
    block[148:156] = b"%06o\0 " % sum(block)


def headers(raw: bytes) -> list[int]:
    """Offsets of the header blocks of a tar (extension headers included)."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for m in tar.getmembers():
            out.extend(range(m.offset, m.offset_data, 512))
    return out


def without_end(raw: bytes) -> bytes:
    """A tar cut where its end-of-archive marker begins (unchanged if tarfile cannot read it)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            tar.getmembers()
            return raw[: tar.offset]
    except (tarfile.TarError, ValueError, OverflowError):  # a mutated header tarfile cannot read
        return raw


def mutate_tar(raw: bytes, how: str, data: st.DataObject, fmt: int) -> bytes:
    if how == "append_zeros":
        return raw + bytes(data.draw(st.integers(1, 4096)))
    if how == "strip_end_append":
        return without_end(raw) + tar_bytes(HOSTILE[:2], fmt)
    if how == "append_tar":
        return raw + tar_bytes(HOSTILE[:2], fmt)
    if how == "append_zip":
        return raw + zip_bytes(HOSTILE[:2])
    if how == "append_junk":
        return raw + data.draw(st.binary(min_size=1, max_size=64))
    if how == "prefix_junk":
        return data.draw(st.binary(min_size=1, max_size=600)) + raw
    if how == "header_field":
        blocks = headers(raw)
        at = data.draw(st.sampled_from(blocks))
        start, length = data.draw(st.sampled_from(FIELDS))
        value = data.draw(st.one_of(st.sampled_from(VALUES), st.binary(max_size=length)))[:length]
        block = bytearray(raw[at : at + 512])
        block[start : start + length] = value.ljust(length, b"\0")
        seal(block)
        return raw[:at] + bytes(block) + raw[at + 512 :]
    if how == "extension":
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            at = data.draw(st.sampled_from([m.offset for m in tar.getmembers()]))
        typeflag, records = data.draw(st.sampled_from(EXTENSIONS))
        magic = data.draw(st.sampled_from([b"ustar\x0000", b"ustar  \0", bytes(8)]))
        padding = data.draw(st.sampled_from([b"\0", b"\0", pax(("path", "evil.sh"))]))
        return raw[:at] + extension_header(typeflag, records, magic, padding) + raw[at:]
    if how == "flip":
        at = data.draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    return raw


def compress_stream(raw: bytes, compress: str, how: str, data: st.DataObject) -> bytes:
    one = gz if compress == "gz" else zst
    if how == "split":
        cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), min_size=1, max_size=3)))
        parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        return b"".join(one(p) for p in parts)
    if how == "second_member":
        return one(without_end(raw)) + one(tar_bytes(HOSTILE[:2]))
    if how == "trailing_junk":
        return one(raw) + data.draw(st.binary(min_size=1, max_size=64))
    if how == "skippable" and compress == "zst":
        cut = data.draw(st.integers(0, len(raw)))
        return zst(raw[:cut]) + skippable(data.draw(st.binary(max_size=64))) + zst(raw[cut:])
    return one(raw)


# (signature, [(offset, width)]) of the zip header fields a mutation rewrites
ZIP_FIELDS = [
    (b"PK\x03\x04", [(4, 2), (6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)]),
    (b"PK\x01\x02", [(4, 2), (6, 2), (8, 2), (16, 4), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2), (34, 2), (38, 4), (42, 4)]),
    (b"PK\x05\x06", [(4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]),
]


def mutate_zip(raw: bytes, how: str, data: st.DataObject) -> bytes:
    if how == "zip_field":
        signature, fields = data.draw(st.sampled_from(ZIP_FIELDS))
        starts = [i for i in range(len(raw) - 22) if raw.startswith(signature, i)]
        if not starts:
            return raw
        at = data.draw(st.sampled_from(starts))
        offset, width = data.draw(st.sampled_from(fields))
        old = int.from_bytes(raw[at + offset : at + offset + width], "little")
        top = (1 << (8 * width)) - 1
        value = data.draw(st.one_of(st.sampled_from([0, top, old + 1, max(old - 1, 0), old ^ 1, old ^ 8, old ^ 0x800, 0o120777 << 16, 0o40755 << 16]), st.integers(0, top))) & top
        return raw[: at + offset] + value.to_bytes(width, "little") + raw[at + offset + width :]
    if how == "append_junk":
        return raw + data.draw(st.binary(min_size=1, max_size=64))
    if how == "append_zip":
        return raw + zip_bytes(HOSTILE[:2])
    if how == "prefix_junk":
        return data.draw(st.binary(min_size=1, max_size=600)) + raw
    if how == "prefix_tar":
        return tar_bytes(HOSTILE[:2]) + raw
    if how in ("local_name", "central_name"):
        signature = b"PK\x03\x04" if how == "local_name" else b"PK\x01\x02"
        starts = [i for i in range(len(raw) - 46) if raw.startswith(signature, i)]
        at = data.draw(st.sampled_from(starts))
        name_at = at + (30 if how == "local_name" else 46)
        length = struct.unpack_from("<H", raw, at + (26 if how == "local_name" else 28))[0]
        if length == 0:
            return raw
        i = name_at + data.draw(st.integers(0, length - 1))
        return raw[:i] + data.draw(st.sampled_from([b"e", b"/", b".", b"\x82"])) + raw[i + 1 :]
    if how == "comment_signature":
        end = raw.rindex(b"PK\x05\x06")
        comment = b"PK\x05\x06" + bytes(18)
        return raw[: end + 20] + struct.pack("<H", len(comment)) + comment
    if how == "flip":
        at = data.draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    return raw


def extracted(root: Path) -> dict[str, str]:
    """Every file an extraction left: path -> sha256, or what else it is."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in [*dirnames, *filenames]:
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "a symlink"
            elif p.is_file():
                out[rel] = sha(p.read_bytes())
            elif not p.is_dir():
                out[rel] = "a special file"
    return out


def unzstd(path: Path) -> io.BytesIO:
    with zstandard.ZstdDecompressor().stream_reader(path.open("rb"), read_across_frames=True) as r:
        return io.BytesIO(r.read())


def consumers(path: Path, fmt: str, work: Path) -> dict[str, Path]:
    """Where each extractor of the package's kind extracted it."""
    out = {}
    if fmt == "zip":
        with zipfile.ZipFile(path) as z:
            z.extractall(work / "zipfile")
        out["zipfile"] = work / "zipfile"
        assert not tarfile.is_tarfile(path), "a tar reader opens the zip too"
        if UNZIP:
            done = subprocess.run([UNZIP, "-qq", "-o", str(path), "-d", str(work / "unzip")], capture_output=True)
            assert done.returncode == 0, done.stderr
            out["unzip"] = work / "unzip"
        return out
    assert not zipfile.is_zipfile(path), "a zip reader opens the tar too"
    fileobj = unzstd(path) if fmt == "zst" else None
    with tarfile.open(path if fileobj is None else None, fileobj=fileobj) as t:
        t.extractall(work / "tarfile", filter="data")
    out["tarfile"] = work / "tarfile"
    if GNU_TAR:
        (work / "gnu").mkdir()
        done = subprocess.run([GNU_TAR, "-xf", str(path), "-C", str(work / "gnu"), "--no-same-owner", "--no-same-permissions"], capture_output=True)
        assert done.returncode == 0, done.stderr
        out["GNU tar"] = work / "gnu"
    return out


@SETTINGS
@given(
    fmt=st.sampled_from(["tar", "gz", "zst", "zip"]),
    tar_format=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    entries=st.lists(ENTRY, max_size=6),
    hostile=st.lists(st.sampled_from(HOSTILE), max_size=1),
    data=st.data(),
)
def test_what_jobgate_passes_every_extractor_extracts(fmt, tar_format, entries, hostile, data):
    entries = entries + hostile
    files: dict[str, bytes] = {}
    for kind, name, *rest in entries:
        if kind == "file" and normalize(name) not in ("", "bundle.yaml"):
            files[normalize(name)] = rest[0]  # the last copy, as an extractor leaves it
    doc = bundle(files)
    document = json.dumps(doc).encode()
    entries.insert(data.draw(st.integers(0, len(entries))), ("file", "bundle.json", document))
    expected = {"bundle.json": sha(document), **{n: sha(d) for n, d in files.items()}}

    if fmt == "zip":
        how = data.draw(st.sampled_from(ZIP_MUTATIONS))
        raw = mutate_zip(zip_bytes(entries, deflate=how != "stored", streamed=how == "streamed"), how, data)
    else:
        how = data.draw(st.sampled_from(TAR_MUTATIONS))
        try:
            raw = tar_bytes(entries, tar_format)
        except ValueError:  # a name too long for ustar
            raw = tar_bytes(entries, tarfile.PAX_FORMAT)
        raw = mutate_tar(raw, how, data, tar_format)
        if fmt != "tar":
            stream = data.draw(st.sampled_from(STREAM_MUTATIONS))
            raw = compress_stream(raw, fmt, stream, data)
            how = how if stream in BENIGN else stream

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        path = work / f"package.{fmt}"
        path.write_bytes(raw)
        report = V.check(None, package=path)
        names = [normalize(e[1]) for e in entries if e[0] != "dir"]
        dirs = {normalize(e[1]) for e in entries if e[0] == "dir"}
        dirs |= {"/".join(n.split("/")[:i]) for n in [*names, *dirs] for i in range(1, n.count("/") + 1)}
        honest = (
            how in BENIGN
            and not hostile
            and all(e[0] in ("file", "dir") for e in entries)
            and len(names) == len(set(names))
            and not (set(names) & dirs)
            and "" not in names
            and not any(e[1].startswith("/") for e in entries)
        )
        if honest:  # the property must not hold by refusing everything
            assert report.ok, report.violations
        if not report.ok:
            return
        for reader, root in consumers(path, fmt, work).items():
            seen = extracted(root)
            if how in BENIGN:
                assert seen == expected, f"{reader} extracts other files than were packaged ({how})"
            # What the extractor holds is a bundle that passes, and exactly its declared files.
            document = (root / "bundle.json").read_bytes()
            assert V.check(document, package=path).ok, f"{reader} extracts another bundle document ({how})"
            declared = {f["source"]: f["sha256"] for f in json.loads(document)["execution"]["supporting_files"]}
            assert seen == {"bundle.json": sha(document), **declared}, f"{reader} extracts other files than jobgate verified ({how})"


# ------------------------------------------------------------ packages read once


def test_a_package_read_again_comes_from_the_cache_with_the_same_report(tmp_path):
    v = jobgate.Validator()
    doc, entries = packaged()
    good = write(tmp_path, "good.tar", tar_bytes(entries))
    copy = write(tmp_path, "copy.tar", good.read_bytes())  # the same bytes elsewhere
    bad = write(tmp_path, "bad.tar", tar_bytes([*entries, ("file", "evil.sh", EVIL)]))
    first = [v.check(doc, package=p) for p in (good, bad)]
    assert v.package_cache_stats() == {"hits": 0, "misses": 2, "entries": 2}
    again = [v.check(doc, package=p) for p in (copy, bad)]
    assert again == first
    assert v.package_cache_stats() == {"hits": 2, "misses": 2, "entries": 2}
    # Another document with the same package is judged afresh against it.
    other = bundle({"scripts/helper.py": EVIL})
    assert pairs(v.check(other, package=copy)) == [("tao.supporting_file.undeclared", F), ("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]
    # A changed package is another key; a refused one is never kept.
    torn = write(tmp_path, "torn.tar", good.read_bytes()[:700])
    for _ in range(2):
        assert pairs(v.check(doc, package=torn)) == [("json.syntax", "")]
    assert v.package_cache_stats()["entries"] == 2


def test_with_the_package_cache_off_nothing_is_kept_and_reports_are_the_same(tmp_path):
    doc, entries = packaged()
    good = write(tmp_path, "good.tar", tar_bytes(entries))
    bad = write(tmp_path, "bad.tar", tar_bytes([*entries, ("file", "evil.sh", EVIL)]))
    on, off = jobgate.Validator(), jobgate.Validator({"limits": {"package_cache_bytes": 0}})
    for _ in range(2):
        assert [off.check(doc, package=p) for p in (good, bad)] == [on.check(doc, package=p) for p in (good, bad)]
    assert off.package_cache_stats() == {"hits": 0, "misses": 0, "entries": 0}
    assert on.package_cache_stats() == {"hits": 2, "misses": 2, "entries": 2}


@pytest.mark.parametrize("shape", ["tar with a pax path", "zip"])
def test_a_member_name_longer_than_path_max_is_refused_and_never_quoted_whole(tmp_path, shape):
    # The attack: names were held whole up to the pax record limit (1 MiB each), so a
    # package of many such members held far more in names than it inflated to.
    doc, entries = packaged()
    long_name = "scripts/" + "a" * 5000 + ".py"
    at_limit = "scripts/" + "b" * (4096 - len("scripts/.py")) + ".py"
    members = [*entries, ("file", long_name, b"x"), ("file", at_limit, b"y")]
    data = zip_bytes(members) if shape == "zip" else tar_bytes(members)
    report = V.check(doc, package=write(tmp_path, "p.zip" if shape == "zip" else "p.tar", data))
    # the long name is refused as no extractor could create it; the one at PATH_MAX is
    # read (and undeclared), both quoted in a few hundred bytes
    assert pairs(report) == [("tao.supporting_file.path", F), ("tao.supporting_file.undeclared", F)]
    refused, undeclared = report.violations
    assert refused.message.startswith('the package member "scripts/aaaa') and refused.message.endswith(
        "... (5011 bytes) is a name of 5011 bytes, longer than the 4096 bytes (PATH_MAX) an extractor can create"
    )
    assert undeclared.message.endswith("... (4096 bytes), which is neither the bundle nor a declared source")
    assert all(len(v.message) < 400 for v in report.violations)
