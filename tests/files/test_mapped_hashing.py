"""Large supporting files are hashed from a mapping (rust/src/files/mapped.rs): a
producer truncating one while it is verified never crashes the process, and a bus
error anywhere else still reaches the handler that was there before jobgate's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jobgate
from tests.files.helpers import bundle, sha
from tests.helpers import pairs, require_shared

require_shared()

F = "/execution/supporting_files"
V = jobgate.Validator({"limits": {"max_package_bytes": 1 << 30}})


def content(size: int) -> bytes:
    block = os.urandom(1 << 20)
    return (block * (size // len(block) + 1))[:size]


def test_a_large_file_passes_and_is_checked_as_read(tmp_path):
    data = content((5 << 20) + 17)
    (tmp_path / "big.bin").write_bytes(data)
    doc = bundle([("big.bin", "big.bin", sha(data))])
    assert V.check(doc, root=tmp_path).ok
    # The read path, every file read (JOBGATE_MAPPED_HASHING=0), agrees.
    check = "import jobgate, json, sys; print(jobgate.Validator().check(json.loads(sys.argv[1]), root=sys.argv[2]).ok)"
    off = subprocess.run(
        [sys.executable, "-c", check, json.dumps(doc), str(tmp_path)],
        env={**os.environ, "JOBGATE_MAPPED_HASHING": "0"}, capture_output=True, text=True, check=True,
    )
    assert off.stdout.strip() == "True"
    (tmp_path / "big.bin").write_bytes(data[:-1] + b"!")
    assert pairs(V.check(doc, root=tmp_path)) == [("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]


def test_a_file_truncated_while_verified_is_reported_as_read(tmp_path):
    """Truncated once, at instants from before the hash to after it: the file passes
    (truncated after its hash) or is the mismatch of exactly what a read finds."""
    size, cut = 48 << 20, 5 << 20
    data = content(size)
    path = tmp_path / "big.bin"
    doc = bundle([("big.bin", "big.bin", sha(data))])
    outcomes = set()
    for delay in [0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.5] * 2:
        path.write_bytes(data)
        timer = threading.Timer(delay, os.truncate, (path, cut))
        timer.start()
        report = V.check(doc, root=tmp_path)
        timer.join()
        if report.ok:
            outcomes.add("after")
            continue
        assert pairs(report) == [("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]
        assert report.violations[0].message == f"big.bin hashes to {sha(data[:cut])} but the bundle declares {sha(data)}; re-declare it or restore the file"
        outcomes.add("truncated")
    assert "truncated" in outcomes


TRUNCATE = """
import os, sys, time
path, size, until = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
i = 0
while time.monotonic() < until:
    i += 1
    os.truncate(path, i * 65537 % (size // 2))
    os.truncate(path, size)
"""


def test_a_file_truncated_repeatedly_by_another_process_never_crashes(tmp_path):
    size = 32 << 20
    data = content(size)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    doc = bundle([("big.bin", "big.bin", sha(data))])
    producer = subprocess.Popen([sys.executable, "-c", TRUNCATE, str(path), str(size), "4"])
    try:
        checked, until = 0, time.monotonic() + 3
        while time.monotonic() < until or checked < 10:
            report = V.check(doc, root=tmp_path)
            assert report.ok or pairs(report) == [("tao.supporting_file.sha256_mismatch", f"{F}/0/sha256")]
            checked += 1
    finally:
        producer.wait()
    assert producer.returncode == 0


# Installs jobgate's handler (a mapped hash), optionally enables faulthandler after it,
# hashes again, then faults outside any range being hashed: a file of its own, mapped
# and read past its new end.
FOREIGN_FAULT = """
import faulthandler, hashlib, json, mmap, os, sys
import jobgate
root, after = sys.argv[1], sys.argv[2] == "after"
data = os.urandom(3 << 20)
open(os.path.join(root, "big.bin"), "wb").write(data)
files = [{"source": "big.bin", "destination": "big.bin", "sha256": hashlib.sha256(data).hexdigest()}]
doc = json.loads(sys.argv[3])
doc["execution"]["supporting_files"] = files
assert jobgate.Validator().check(doc, root=root).ok
if after:
    faulthandler.enable()
    assert jobgate.Validator().check(doc, root=root).ok
with open(os.path.join(root, "other.bin"), "w+b") as f:
    f.write(b"x" * (1 << 20))
    f.flush()
    m = mmap.mmap(f.fileno(), 1 << 20, access=mmap.ACCESS_READ)
    f.truncate(0)
    print("reading", flush=True)
    m[1 << 19]
print("survived", flush=True)
"""


def foreign_fault(tmp_path: Path, *flags: str, after: bool = False) -> subprocess.CompletedProcess[str]:
    doc = json.dumps(bundle([]))
    return subprocess.run(
        [sys.executable, *flags, "-c", FOREIGN_FAULT, str(tmp_path), "after" if after else "before", doc],
        capture_output=True, text=True, timeout=60,
    )


def test_a_bus_error_elsewhere_reaches_faulthandler_installed_before(tmp_path):
    run = foreign_fault(tmp_path, "-X", "faulthandler")
    assert run.returncode == -signal.SIGBUS, run
    assert "reading" in run.stdout and "survived" not in run.stdout
    assert run.stderr.count("Fatal Python error: Bus error") == 1, run.stderr


def test_a_bus_error_elsewhere_kills_as_the_default_does(tmp_path):
    run = foreign_fault(tmp_path)
    assert run.returncode == -signal.SIGBUS, run
    assert "reading" in run.stdout and "survived" not in run.stdout
    assert "Fatal Python error" not in run.stderr


def test_faulthandler_enabled_after_jobgate_is_not_looped_with(tmp_path):
    """faulthandler chains back to jobgate's handler: jobgate does not install itself
    over it again (files are read instead), so a fault is reported once, not forever."""
    run = foreign_fault(tmp_path, after=True)
    assert run.returncode == -signal.SIGBUS, run
    assert "reading" in run.stdout and "survived" not in run.stdout
    assert run.stderr.count("Fatal Python error: Bus error") == 1, run.stderr
