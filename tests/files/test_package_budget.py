"""Reading a package is bounded in work as in memory: compression bombs under
`limits.max_package_bytes` (a few KiB that inflate to hundreds of MiB) are refused with
`limits.size` naming `limits.max_package_ratio`, before they inflate past the budget,
through the Python API and `jobgate check --package`; a caller's timeout stops reading
with no verdict. The service's side is tests/server/test_package_budget.py."""

from __future__ import annotations

import gzip
import json
import math
import time

import pytest

import jobgate
from tests.files.archives import MiB, bomb, bundle, gz, packaged, tar_bytes, write, zip_bytes, zst
from tests.files.helpers import HELPER
from tests.helpers import run_cli

# Each under limits.max_package_bytes (1 GiB), and at least 4 times the 16 MiB that any
# package may inflate to: (shape, size, how it is refused).
BOMBS = {
    "tar.zst, one member of 256 MiB zeros": ("tar.zst", 256 * MiB, "declares"),
    "tar.gz, one member of 64 MiB zeros": ("tar.gz", 64 * MiB, "declares"),
    "zip, one deflated member of 64 MiB zeros": ("zip", 64 * MiB, "declares"),
    "tar.zst, 64 empty members behind 1 MiB pax records": ("pax", 64 * MiB, "inflates"),
    "tar.gz, 64 MiB of zeros after the end marker": ("trailer", 64 * MiB, "inflates"),
    "tar.zst, 8,000 empty skippable frames": ("frames", 64_000, "inflates"),
}
SUFFIX = {"tar.zst": ".tar.zst", "tar.gz": ".tar.gz", "zip": ".zip", "pax": ".tar.zst", "trailer": ".tar.gz", "frames": ".tar.zst"}


def bomb_file(tmp_path, name: str):
    shape, size, _ = BOMBS[name]
    return write(tmp_path, "bomb" + SUFFIX[shape], bomb(shape, size))


def refused_for_its_ratio(message: str, how: str, package_bytes: int) -> bool:
    said = "declares" if how == "declares" else "inflates past"
    return said in message and f"more than limits.max_package_ratio = 100 times its {package_bytes} bytes allows" in message and "refused before inflating" in message


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_compression_bomb_is_refused_naming_the_setting(tmp_path, name):
    path = bomb_file(tmp_path, name)
    started = time.thread_time()
    report = jobgate.Validator().check(None, package=path)
    spent = time.thread_time() - started
    assert report.verdict == "fail"
    assert [(v.rule, v.field) for v in report.violations] == [("limits.size", "")]
    message = report.violations[0].message
    assert message.startswith(f"the package {path} ")
    assert refused_for_its_ratio(message, BOMBS[name][2], path.stat().st_size), message
    # At most the 16 MiB floor (or 100 times the package) was inflated: milliseconds.
    assert spent < 1.0


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_compression_bomb_is_refused_by_check_package(tmp_path, capsys, name):
    path = bomb_file(tmp_path, name)
    code, out = run_cli(capsys, ["check", "--package", str(path)])
    assert code == 1
    assert "limits.size" in out and "limits.max_package_ratio = 100" in out
    code, out = run_cli(capsys, ["check", "--package", str(path), "--format", "json"])
    assert code == 1
    (violation,) = json.loads(out)["results"][0]["violations"]
    assert violation["rule"] == "limits.size"
    assert refused_for_its_ratio(violation["message"], BOMBS[name][2], path.stat().st_size)


def test_the_ratio_is_a_setting(tmp_path, capsys):
    path = bomb_file(tmp_path, "tar.zst, one member of 256 MiB zeros")
    raised = jobgate.Validator({"limits": {"max_package_ratio": 1_000_000}})
    report = raised.check(None, package=path)
    # read whole: the member is judged as any other
    assert [v.rule for v in report.violations] == ["tao.supporting_file.undeclared"]
    config = tmp_path / "jobgate.toml"
    config.write_text("[limits]\nmax_package_ratio = 1000000\n")
    code, out = run_cli(capsys, ["check", "--package", str(path), "--config", str(config), "--format", "json"])
    assert code == 1
    assert [v["rule"] for v in json.loads(out)["results"][0]["violations"]] == ["tao.supporting_file.undeclared"]
    with pytest.raises(jobgate.ConfigError, match="max_package_ratio"):
        jobgate.Validator({"limits": {"max_package_ratio": 0}})


def test_packages_that_compress_well_pass(tmp_path):
    # Not a bomb: 17 MiB of training metrics as JSON lines, past the 16 MiB floor and
    # compressing about as well as JSON does, passes as tar.zst, tar.gz and zip.
    lines = (f'{{"step": {i}, "loss": {1 / (1 + i % 977):.6f}, "lr": 0.0001, "tags": ["train", "shard-{i % 64}"]}}\n' for i in range(250_000))
    data = "".join(lines).encode()[: 17 * MiB]
    files = {"scripts/helper.py": HELPER, "data/metrics.jsonl": data}
    doc = bundle(files)
    members = [("file", "bundle.json", json.dumps(doc).encode()), *(("file", name, content) for name, content in files.items())]
    raw = tar_bytes(members)
    for name, package in [("p.tar.zst", zst(raw)), ("p.tar.gz", gzip.compress(raw, compresslevel=1, mtime=0)), ("p.zip", zip_bytes(members))]:
        path = write(tmp_path, name, package)
        assert 5 < len(raw) / path.stat().st_size < 100, name
        report = jobgate.Validator().check(None, package=path)
        assert report.verdict == "pass", report.violations


def test_an_archive_inside_a_package_is_hashed_never_inflated(tmp_path):
    inner = bomb("tar.zst", 256 * MiB)
    files = {"scripts/helper.py": HELPER, "nested/bomb.tar.zst": inner}
    doc = bundle(files)
    members = [("file", "bundle.json", json.dumps(doc).encode()), *(("file", name, content) for name, content in files.items())]
    for name, package in [("p.tar.gz", gz(tar_bytes(members))), ("p.zip", zip_bytes(members))]:
        path = write(tmp_path, name, package)
        started = time.thread_time()
        report = jobgate.Validator().check(None, package=path)
        assert report.verdict == "pass", report.violations
        assert time.thread_time() - started < 0.5


def checked_on_cpu(package) -> tuple[jobgate.Report, float]:
    """The report of `package` alone, and the CPU seconds this thread spent on it."""
    started = time.thread_time()
    report = jobgate.Validator().check(None, package=package)
    return report, time.thread_time() - started


def test_a_pax_header_of_many_records_is_read_in_linear_time(tmp_path):
    # 1 MiB of distinct pax records in a plain tar: each is checked against the others
    # for a repeat, which must not cost a comparison per pair.
    report, spent = checked_on_cpu(write(tmp_path, "records.tar", bomb("records", 1 * MiB)))
    assert [v.rule for v in report.violations] == ["tao.supporting_file.undeclared"]
    assert "holds empty, which is neither the bundle nor a declared source" in report.violations[0].message
    assert spent < 1.0, f"{spent:.2f} s of CPU for a 1 MiB tar"


def test_a_member_named_deep_costs_its_length(tmp_path):
    # 32,768 levels: every directory above the member, held whole, would be 1 GiB. The
    # name is past PATH_MAX, refused as no extractor can create it, and read no further.
    report, spent = checked_on_cpu(write(tmp_path, "deep.tar", bomb("deep", 64 * 1024)))
    assert [v.rule for v in report.violations] == ["tao.supporting_file.path"]
    assert "longer than the 4096 bytes (PATH_MAX)" in report.violations[0].message
    assert spent < 0.5, f"{spent:.2f} s of CPU for a 64 KiB tar"


def test_a_timeout_stops_reading_with_no_verdict(tmp_path):
    # With the ratio raised, 1000 MiB of a Python helper takes seconds to inflate, hash
    # and scan for imports; a timeout stops it within a small part of that.
    path = write(tmp_path, "slow.tar.zst", bomb("tar.zst", 1000 * MiB, "slow.py"))
    raised = jobgate.Validator({"limits": {"max_package_ratio": 1_000_000}})
    started = time.thread_time()
    with pytest.raises(TimeoutError, match="was not read before the deadline"):
        raised.check(None, package=path, timeout=0.05)
    assert time.thread_time() - started < 1.0
    with pytest.raises(TimeoutError):
        raised.check(None, package=path, timeout=-1)  # already passed: nothing is read
    with pytest.raises(ValueError, match="NaN"):
        raised.check(None, package=path, timeout=math.nan)
    # a timeout is about reading a package; without one nothing waits on it
    doc, entries = packaged()
    honest = write(tmp_path, "honest.tar", tar_bytes(entries))
    assert raised.check(doc, package=honest, timeout=60).verdict == "pass"
    assert raised.check(doc, timeout=0).verdict == "pass"
