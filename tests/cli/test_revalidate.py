"""`jobgate revalidate`: an archive of documents and packages, revalidated against the
current catalog, locally and on a real Ray cluster, with the same reports as `check`."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import secrets
import shutil
import struct
import subprocess
import sys
import termios
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from jobgate.cli import main
from tests.files.helpers import packaged, tar_package, zip_package
from tests.helpers import DEMO_CONFIG, EXAMPLES, ROOT, free_port, require_shared, run_cli, sample

require_shared()

JOBSPEC = sample("jobspec.valid.json")


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """Old bundles as archived: the upstream examples, a JobSpec, and packages
    (one whole, one with a helper changed after it was declared, one not an archive)."""
    root = tmp_path_factory.mktemp("archive")
    shutil.copytree(EXAMPLES, root / "bundles")
    (root / "jobs").mkdir()
    (root / "jobs" / "grpo.json").write_text(json.dumps(JOBSPEC))
    (root / "packages").mkdir()
    _, members = packaged()
    tar_package(root / "packages" / "whole.tar.gz", members)
    zip_package(root / "packages" / "changed.zip", {**members, "scripts/checkpoint_action.py": b"print('other')\n"})
    (root / "packages" / "torn.tar").write_bytes(b"not an archive")
    for name, extra in (("unpacked-whole", {}), ("unpacked-extra", {"notes/extra.json": b"{}"})):
        for member, data in {**members, **extra}.items():
            (root / "packages" / name / member).parent.mkdir(parents=True, exist_ok=True)
            (root / "packages" / name / member).write_bytes(data)
    (root / "yaml").mkdir()  # YAML documents beside the JSON ones and the packages
    samples = ROOT / "python" / "jobgate" / "samples"
    shutil.copy(samples / "spec_bundle.valid.yaml", root / "yaml" / "valid.yaml")
    shutil.copy(samples / "spec_bundle.rejected.yaml", root / "yaml" / "rejected.yml")
    (root / "notes.txt").write_text("not a document: ignored")
    return root


def newer_catalog(tmp_path: Path) -> Path:
    """The demo deployment after nemo-rl/grpo moved to 0.8.0."""
    text = DEMO_CONFIG.read_text().replace('name = "nemo-rl/grpo", version = "0.7.0"', 'name = "nemo-rl/grpo", version = "0.8.0"')
    assert "0.8.0" in text
    path = tmp_path / "jobgate.toml"
    path.write_text(text)
    return path


def revalidate(capsys, *args: str) -> tuple[int, dict]:
    code, out = run_cli(capsys, ["revalidate", *args, "--format", "json"])
    return code, json.loads(out)


def test_every_item_gets_the_report_check_gives_it(archive, tmp_path, capsys):
    code, report = revalidate(capsys, str(archive))
    assert code == 1
    sources = [r["source"] for r in report["results"]]
    assert sources == [str(p) for p in sorted(map(Path, sources))] and len(sources) == len(list(EXAMPLES.iterdir())) + 8
    by_source = {r["source"]: r for r in report["results"]}
    for source, result in by_source.items():
        if Path(source).is_dir():  # an unpacked package: the report its archive gets
            packed = tar_package(tmp_path / "packed.tar", {p.relative_to(source).as_posix(): p.read_bytes() for p in Path(source).rglob("*") if p.is_file()})
            _, expected = run_cli(capsys, ["check", "--package", str(packed), "--format", "json"])
            expected = json.loads(expected)["results"][0] | {"source": source}
        elif source.endswith((".tar", ".tar.gz", ".zip")):
            _, expected = run_cli(capsys, ["check", "--package", source, "--format", "json"])
            expected = json.loads(expected)["results"][0]
        else:
            _, expected = run_cli(capsys, ["check", source, "--format", "json"])
            expected = json.loads(expected)["results"][0]
        assert result == expected, source
    assert by_source[str(archive / "packages" / "whole.tar.gz")]["verdict"] == "pass"
    assert [v["rule"] for v in by_source[str(archive / "packages" / "changed.zip")]["violations"]] == ["tao.supporting_file.sha256_mismatch"]
    assert [v["rule"] for v in by_source[str(archive / "packages" / "torn.tar")]["violations"]] == ["json.syntax"]
    assert by_source[str(archive / "packages" / "unpacked-whole")]["verdict"] == "pass"
    assert by_source[str(archive / "yaml" / "valid.yaml")]["verdict"] == "pass"
    assert by_source[str(archive / "yaml" / "rejected.yml")]["verdict"] == "fail" and by_source[str(archive / "yaml" / "rejected.yml")]["violations"][0]["line"]
    extra = by_source[str(archive / "packages" / "unpacked-extra")]["violations"]
    assert [v["rule"] for v in extra] == ["tao.supporting_file.undeclared"] and "notes/extra.json" in extra[0]["message"]
    assert not any("unpacked" in s and s.endswith((".json", ".py")) for s in sources)  # its members are not documents
    s = report["summary"]
    assert s["total"] == len(sources)
    assert s["passed"] == sum(r["verdict"] == "pass" for r in report["results"]) and s["passed"] + s["failed"] == s["total"]


def test_against_the_current_catalog(archive, tmp_path, capsys):
    jobs = str(archive / "jobs")
    assert revalidate(capsys, jobs, "--config", str(DEMO_CONFIG)) [0] == 0
    code, report = revalidate(capsys, jobs, "--config", str(newer_catalog(tmp_path)))
    assert code == 1
    violations = report["results"][0]["violations"]
    assert [(v["rule"], v["field"]) for v in violations] == [("forge.handshake.version", "/spec/recipe/version")]
    assert "0.7.0" in violations[0]["message"] and "0.8.0" in violations[0]["message"]


def test_all_passing_is_exit_0_and_text_output(archive, capsys):
    code, out = run_cli(capsys, ["revalidate", str(archive / "packages" / "whole.tar.gz"), str(archive / "jobs"), "--threads", "1"])
    assert code == 0
    assert out.splitlines()[-1] == "2 documents: 2 passed, 0 failed (0 errors, 0 warnings)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "nope: no such file or directory"),
        (["EMPTY"], "holds no documents"),
        (["ARCHIVE", "--address", "127.0.0.1:1"], "--address is for --engine ray"),
        (["ARCHIVE", "--reads", "workers"], "--reads is for --engine ray"),
        (["ARCHIVE", "--threads", "0"], "--threads takes a number of at least 1"),
        (["ARCHIVE", "--config", "missing.toml"], "missing.toml"),
        (["ARCHIVE", "--engine", "ray", "--address", "127.0.0.1:PORT"], "cannot reach the Ray cluster at 127.0.0.1:"),
        (["ARCHIVE", "--engine", "ray", "--address", "nonsense"], "is not host:port"),
    ],
)
def test_commands_that_cannot_run_exit_2(archive, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    port = free_port()
    args = [a.replace("EMPTY", str(tmp_path / "empty")).replace("ARCHIVE", str(archive / "jobs")).replace("PORT", str(port)) for a in args]
    capsys.readouterr()
    assert main(["revalidate", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def run_on_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Runs jobgate with stderr on a pseudo-terminal; returns the exit code and what
    reached the terminal."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", *args], stdout=subprocess.DEVNULL, stderr=secondary, env=env, cwd=ROOT)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    return proc.wait(60), seen.decode(errors="replace")


def test_progress_on_a_terminal_only_and_never_under_ci(archive, capsys):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    summary = revalidate(capsys, str(archive))[1]["summary"]
    code, terminal = run_on_terminal(["revalidate", str(archive)], env)
    assert code == 1 and "revalidating" in terminal and "item/s" in terminal, terminal
    # The bar's last state: every item done, with the failures counted as they came.
    final = terminal.replace("\r", "\n").strip().splitlines()[-1]
    assert f"{summary['total']}/{summary['total']}" in final and f"failed={summary['failed']}" in final, final
    code, terminal = run_on_terminal(["revalidate", str(archive)], {**env, "CI": "1"})
    assert code == 1 and terminal == ""


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A real Ray cluster on this machine, started as an operator would
    (`jobgate.ray_head`: `ray start --block`, stopped by terminating that process)."""
    from jobgate.ray_head import ray_head

    assert shutil.which("ray", path=str(Path(sys.executable).parent)), "Ray is a test dependency (pip install -e '.[test]')"

    # Token authentication, as a shared cluster runs it; Ray's own clients (the
    # driver jobgate starts among them) read the token from the environment.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    with ray_head(tmp_path_factory.mktemp("ray"), num_cpus=2, env=env) as head:
        yield head.address, env


@pytest.mark.parametrize("reads", ["workers", "driver"])
def test_the_ray_engine_gives_the_same_reports(archive, tmp_path, ray_cluster, reads):
    """Whether the workers read the items at their paths or the driver ships their
    bytes, every report is the local engine's; the archive named by a relative path,
    which the workers resolve from the driver's working directory."""
    config = str(newer_catalog(tmp_path))
    command = [sys.executable, "-m", "jobgate.cli", "revalidate", archive.name, "--config", config, "--format", "json"]
    address, env = ray_cluster
    local = subprocess.run(command, capture_output=True, timeout=300, cwd=archive.parent, env=env)
    remote = subprocess.run([*command, "--engine", "ray", "--address", address, "--reads", reads], capture_output=True, timeout=300, cwd=archive.parent, env=env)
    assert (local.returncode, remote.returncode) == (1, 1), remote.stderr.decode()[-2000:]
    assert remote.stdout == local.stdout
    results = json.loads(remote.stdout)["results"]
    assert any(v["rule"] == "forge.handshake.version" for r in results for v in r["violations"])
    assert {r["source"]: r["verdict"] for r in results}[str(Path(archive.name) / "packages" / "whole.tar.gz")] == "pass"
    assert {r["source"]: r["verdict"] for r in results}[str(Path(archive.name) / "packages" / "torn.tar")] == "fail"


def test_packages_over_the_size_limit_are_refused_unread(archive, tmp_path, capsys):
    config = tmp_path / "small.toml"
    config.write_text("[limits]\nmax_package_bytes = 16\n")
    packages = [str(archive / "packages" / "unpacked-whole"), str(archive / "packages" / "whole.tar.gz")]
    code, report = revalidate(capsys, *packages, "--config", str(config))
    assert code == 1
    assert [[v["rule"] for v in r["violations"]] for r in report["results"]] == [["limits.size"], ["limits.size"]]


def test_an_oversized_document_is_refused_unread(tmp_path, capsys):
    with open(tmp_path / "huge.yaml", "wb") as f:  # 20 GiB on paper, no disk
        f.truncate(20 << 30)
    (tmp_path / "grpo.json").write_text(json.dumps(JOBSPEC))
    code, report = revalidate(capsys, str(tmp_path))
    assert code == 1
    assert [(r["source"], r["verdict"]) for r in report["results"]] == [(str(tmp_path / "grpo.json"), "pass"), (str(tmp_path / "huge.yaml"), "fail")]
    assert report["results"][1]["violations"] == [{"rule": "limits.size", "field": "", "message": f"the document is {20 << 30} bytes, over the limit of 1048576 bytes", "severity": "error"}]


@pytest.fixture
def checked(monkeypatch) -> list[int]:
    """How many items each chunk judged on this machine had checked (not taken from a
    cache); cleared by `run_counting`."""
    from jobgate import revalidation

    calls: list[int] = []
    real = revalidation.check_chunk

    def counting(judge, items):
        calls.append(len(items))
        return real(judge, items)

    monkeypatch.setattr(revalidation, "check_chunk", counting)
    return calls


def run_counting(capsys, checked: list[int], args: list[str]) -> tuple[tuple[int, str], int]:
    """A run's exit code and output, and how many items it checked."""
    checked.clear()
    result = run_cli(capsys, args)
    return result, sum(checked)


def test_a_cached_rerun_checks_nothing_and_reports_byte_for_byte_the_same(archive, tmp_path, capsys, checked):
    cache = str(tmp_path / "reports.sqlite")
    for fmt in ("json", "text", "sarif", "junit", "jsonl"):
        plain, total = run_counting(capsys, checked, ["revalidate", str(archive), "--format", fmt])
        first, first_checked = run_counting(capsys, checked, ["revalidate", str(archive), "--format", fmt, "--cache", cache])
        second, second_checked = run_counting(capsys, checked, ["revalidate", str(archive), "--format", fmt, "--cache", cache])
        assert plain == first == second
        # Only runs without the cache, and the first run with it, check anything.
        assert total > 20 and first_checked == (total if fmt == "json" else 0) and second_checked == 0


def test_junit_of_revalidate_counts_items_under_its_own_suite(archive, capsys):
    code, out = run_cli(capsys, ["revalidate", str(archive), "--format", "json"])
    summary = json.loads(out)["summary"]
    code, out = run_cli(capsys, ["revalidate", str(archive), "--format", "junit"])
    root = ET.fromstring(out)
    suite = root.find("testsuite")
    assert code == 1 and suite.get("name") == "jobgate revalidate"
    assert (suite.get("tests"), suite.get("failures")) == (str(summary["total"]), str(summary["failed"]))
    assert (root.get("tests"), root.get("failures")) == (str(summary["total"]), str(summary["failed"]))
    cases = suite.findall("testcase")
    assert len(cases) == summary["total"] and sum(c.find("failure") is not None for c in cases) == summary["failed"]
    assert all(c.get("file") == c.get("name") for c in cases)


def test_a_changed_item_or_configuration_is_checked_afresh(archive, tmp_path, capsys, checked):
    copy = tmp_path / "archive"
    shutil.copytree(archive, copy)
    cache = str(tmp_path / "reports.sqlite")
    _, total = run_counting(capsys, checked, ["revalidate", str(copy), "--cache", cache])
    (copy / "jobs" / "grpo.json").write_text(json.dumps({**JOBSPEC, "kind": "Other"}))
    (code, out), rechecked = run_counting(capsys, checked, ["revalidate", str(copy), "--cache", cache, "--format", "json"])
    assert rechecked == 1  # only the changed item
    changed = next(r for r in json.loads(out)["results"] if r["source"].endswith("grpo.json"))
    assert [v["rule"] for v in changed["violations"]] == ["forge.kind"]
    newer = newer_catalog(tmp_path)
    _, everything = run_counting(capsys, checked, ["revalidate", str(copy), "--cache", cache, "--config", str(newer)])
    assert everything == total  # a new configuration: everything again


def test_a_cache_that_cannot_be_used_is_exit_2(archive, tmp_path, capsys):
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not SQLite" * 100)
    capsys.readouterr()
    code = main(["revalidate", str(archive), "--cache", str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}: cannot" in err and "revalidation cache" in err and "Traceback" not in err


def test_against_a_candidate_reports_exactly_what_it_changes(archive, tmp_path, capsys):
    """A candidate that moves nemo-rl/grpo to 0.8.0 breaks exactly the JobSpec pinned
    to 0.7.0; nothing else in the archive is judged otherwise."""
    current, candidate = str(DEMO_CONFIG), str(newer_catalog(tmp_path))
    code, out = run_cli(capsys, ["revalidate", str(archive), "--config", current, "--against", candidate, "--format", "json"])
    assert code == 1
    result = json.loads(out)
    (change,) = result["changes"]
    assert change["source"] == str(archive / "jobs" / "grpo.json") and change["project"] == "my-lab" and change["kind"] == "jobspec"
    assert change["verdict"] == {"current": "pass", "candidate": "fail"} and change["removed"] == []
    assert [(v["rule"], v["field"], v["severity"]) for v in change["added"]] == [("forge.handshake.version", "/spec/recipe/version", "error")]
    items = result["impact"]["items"]
    assert result["impact"] == {
        "items": items,
        "changed": 1,
        "newly_failing": 1,
        "newly_passing": 0,
        "by_rule": {"forge.handshake.version": {"added": 1, "removed": 0}},
        "by_project": {"my-lab": {"changed": 1, "newly_failing": 1, "newly_passing": 0}},
    }
    assert items > 10
    # the other way round: it mends, exit 0
    code, out = run_cli(capsys, ["revalidate", str(archive), "--config", candidate, "--against", current, "--format", "json"])
    assert code == 0 and json.loads(out)["impact"]["newly_passing"] == 1
    code, text = run_cli(capsys, ["revalidate", str(archive), "--config", current, "--against", candidate])
    assert code == 1 and f"1 of {items} items judged otherwise: 1 newly failing, 0 newly passing" in text
    assert "pass -> fail (project my-lab)" in text and "rule forge.handshake.version: +1 -0" in text
    code, sarif = run_cli(capsys, ["revalidate", str(archive), "--config", current, "--against", candidate, "--format", "sarif"])
    assert [r["ruleId"] for r in json.loads(sarif)["runs"][0]["results"]] == ["forge.handshake.version"]
    code, junit = run_cli(capsys, ["revalidate", str(archive), "--config", current, "--against", candidate, "--format", "junit"])
    suite = ET.fromstring(junit).find("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("jobgate revalidate", "1", "1")  # the document
    assert suite.find("testcase/failure").text.count(": forge.handshake.version: ") == 1
    # nothing changes against itself
    code, out = run_cli(capsys, ["revalidate", str(archive), "--config", current, "--against", current, "--format", "json"])
    assert code == 0 and json.loads(out)["changes"] == []


def test_against_a_candidate_on_ray_gives_the_same_answer(archive, tmp_path, ray_cluster):
    command = [sys.executable, "-m", "jobgate.cli", "revalidate", str(archive), "--config", str(DEMO_CONFIG), "--against", str(newer_catalog(tmp_path)), "--format", "json"]
    address, env = ray_cluster
    local = subprocess.run(command, capture_output=True, timeout=300, cwd=ROOT)
    remote = subprocess.run([*command, "--engine", "ray", "--address", address], capture_output=True, timeout=300, cwd=ROOT, env=env)
    assert (local.returncode, remote.returncode) == (1, 1), remote.stderr.decode()[-2000:]
    assert remote.stdout == local.stdout and len(json.loads(remote.stdout)["changes"]) == 1


def test_the_ray_engine_streams_every_format_and_the_cache_as_the_local_one(archive, tmp_path, ray_cluster):
    address, env = ray_cluster
    command = [sys.executable, "-m", "jobgate.cli", "revalidate", str(archive), "--config", str(DEMO_CONFIG)]
    for fmt in ("jsonl", "junit"):
        local = subprocess.run([*command, "--format", fmt], capture_output=True, timeout=300, cwd=ROOT)
        remote = subprocess.run([*command, "--format", fmt, "--engine", "ray", "--address", address], capture_output=True, timeout=300, cwd=ROOT, env=env)
        assert (local.returncode, remote.returncode) == (1, 1), remote.stderr.decode()[-2000:]
        assert remote.stdout == local.stdout
    plain = subprocess.run([*command, "--format", "json"], capture_output=True, timeout=300, cwd=ROOT)
    cache = str(tmp_path / "reports.sqlite")
    for _ in range(2):  # the first run fills the cache, the second is answered from it
        cached = subprocess.run([*command, "--format", "json", "--engine", "ray", "--address", address, "--cache", cache], capture_output=True, timeout=300, cwd=ROOT, env=env)
        assert cached.returncode == 1 and cached.stdout == plain.stdout, cached.stderr.decode()[-2000:]


@pytest.mark.parametrize("reads", ["auto", "driver"])
def test_the_ray_engine_keeps_a_bounded_number_of_tasks_in_flight(archive, ray_cluster, reads):
    """Chunks of 2 items on a cluster of 2 CPUs: at most 4 tasks (twice the CPUs) are
    in flight, and no more than that many chunks are taken from the walk ahead of what
    was handed back (counted by `tests/cli/ray_window.py`, a driver of its own). The
    cluster is this machine alone, run by this user: `auto` has the workers read."""
    from jobgate import revalidation

    address, env = ray_cluster
    run = subprocess.run([sys.executable, "-m", "tests.cli.ray_window", str(archive), address, reads], capture_output=True, timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    seen = json.loads(run.stdout)
    assert seen["workers_see_our_files"] is True
    judge = revalidation.Judge(None, None)
    local = [r.to_dict() for judged in revalidation.run_local(revalidation.discover([str(archive)]), [judge]) for r in judged.reports[0]]
    assert seen["reports"] == local and seen["handed"] == seen["taken"] == len(local) > 20
    assert seen["started"] == (len(local) + 1) // 2 and seen["in_flight"] == 0
    assert 2 <= seen["peak"] <= 4 and seen["peak_ahead"] <= (4 + 1) * 2
