"""The sdist builds, and the wheel built from it is abi3 and installs: into a fresh
virtualenv, with its dependencies from the index, and there it is the light install:
check, stage and revalidate run, and every other command names the extra it needs.
The protos, py.typed and the license ride inside; the metadata carries a PEP 639
license. A source build without cargo stops and says what to install. (`scripts/dev
release` builds the manylinux2014 wheel with zig and shows its platform with auditwheel.)"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from jobgate import samples

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_sdist_builds_an_abi3_wheel_that_installs_and_runs(tmp_path):
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "maturin", "sdist", "--out", str(dist), cwd=ROOT)
    (sdist,) = dist.glob("jobgate-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "pyproject.toml", "build_backend/jobgate_build.py", "rust/Cargo.toml", "rust/src/lib.rs", "proto/jobgate/v1/admission.proto", "python/jobgate/py.typed", "python/jobgate/v1/admission.proto"):
        assert needed in names, f"the sdist lacks {needed}"

    # Built from the sdist alone; the core's dependencies come from the shared target dir.
    env = {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "rust" / "target")}
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(sdist), env=env)
    (wheel,) = dist.glob("jobgate-*.whl")
    assert "-cp311-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as z:
        members = set(z.namelist())
    assert {"jobgate/py.typed", "jobgate/v1/admission.proto", "jobgate/v1/jobspec.proto", "jobgate-0.1.0.dist-info/licenses/LICENSE"} <= members
    assert any(m.startswith("jobgate/_core.abi3") for m in members), sorted(m for m in members if "_core" in m)

    with zipfile.ZipFile(wheel) as z:
        metadata = email.message_from_bytes(z.read("jobgate-0.1.0.dist-info/METADATA"))
    assert metadata["Metadata-Version"] == "2.4" and metadata["License-Expression"] == "Apache-2.0" and metadata["License"] is None
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert "Typing :: Typed" in metadata.get_all("Classifier") and "Programming Language :: Rust" in metadata.get_all("Classifier")
    unconditional = sorted(r.split(">")[0].split("=")[0].strip().lower() for r in metadata.get_all("Requires-Dist") if "extra ==" not in r)
    assert unconditional == ["blake3", "orjson", "pydantic", "shtab", "tqdm"]
    assert {"server", "postgres", "ray", "bench", "plot", "test"} <= set(metadata.get_all("Provides-Extra"))
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls), urls
    # One home: the one the protos' go_package names, and documents that exist in it.
    home = urls["Homepage"]
    for proto in (ROOT / "proto" / "jobgate" / "v1").glob("*.proto"):
        assert f'option go_package = "{home.removeprefix("https://")}/gen/go/' in proto.read_text(), proto.name
    for name, url in urls.items():
        assert url.startswith(home), (name, url)
        if "/blob/main/" in url:
            assert (ROOT / url.split("/blob/main/", 1)[1]).is_file(), (name, url)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    distributions = lambda: set(run(str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(*(d.metadata['Name'].lower() for d in m.distributions()))").stdout.split())  # noqa: E731
    bare = distributions()  # pip, and setuptools before Python 3.12
    run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel))
    installed = distributions() - bare
    for heavy in ("grpcio", "protobuf", "prometheus-client", "psycopg", "psycopg-binary", "ray", "hdrhistogram", "pbr", "setuptools", "pyyaml"):
        assert heavy not in installed, f"the light install pulled {heavy}: {sorted(installed)}"

    def jobgate(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "jobgate"), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120)

    ok = jobgate("check", str(samples.path("jobspec.valid.json")))
    assert ok.returncode == 0, ok.stderr
    refused = jobgate("check", str(samples.path("jobspec.rejected.json")), "--format", "json")
    assert refused.returncode == 1 and '"verdict": "fail"' in refused.stdout
    # SARIF links every rule to its entry on the rules page at the project's home.
    sarif = jobgate("check", str(samples.path("jobspec.rejected.json")), "--format", "sarif")
    described = json.loads(sarif.stdout)["runs"][0]["tool"]["driver"]["rules"]
    assert described and all(r["helpUri"] == f"{urls['Rules']}#{r['id']}" for r in described), described[:2]
    revalidated = jobgate("revalidate", str(samples.path("jobspec.valid.json")), str(samples.path("spec_bundle.valid.yaml")))
    assert revalidated.returncode == 0 and "2 passed" in revalidated.stdout, revalidated.stderr
    completion = jobgate("completion", "bash")
    assert completion.returncode == 0 and "complete -o bashdefault -F _shtab_jobgate jobgate" in completion.stdout, completion.stderr
    staged = jobgate("stage", str(samples.path("spec_bundle.valid.yaml")), "--root", str(tmp_path), "--job-dir", str(tmp_path / "job"))
    assert staged.returncode == 0 and (tmp_path / "job" / "inputs" / "action-helpers").is_dir(), staged.stderr

    # Every other command says which extra brings what it lacks, without a traceback.
    postgres = tmp_path / "postgres.toml"
    postgres.write_text('[store]\nurl = "postgresql://jobgate@127.0.0.1:1/jobs"\n')
    needs = {
        ("serve",): "server",
        ("demo",): "server",
        ("submit", str(samples.path("jobspec.valid.json"))): "server",
        ("jobs", "list", "--server", "127.0.0.1:1"): "server",
        ("token", "new", "ci"): "server",
        ("bench", "--server", "127.0.0.1:1"): "bench",
        ("jobs", "list", "--config", str(postgres)): "postgres",
        ("revalidate", "--engine", "ray", str(samples.path("jobspec.valid.json"))): "ray",
    }
    for command, extra in needs.items():
        done = jobgate(*command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"pip install 'jobgate[{extra}]'" in done.stderr and "Traceback" not in done.stderr, (command, done.stderr)


def test_the_test_extra_holds_every_extra_a_command_needs():
    """`scripts/dev setup test` (and CI) install the `test` extra alone: every command
    runs in the tests, so it holds what every command's extra brings."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in ("server", "postgres", "ray", "bench", "plot"):
        missing = set(extras[name]) - set(extras["test"])
        assert not missing, f"the test extra lacks what [{name}] brings: {sorted(missing)}"


def test_a_source_build_without_cargo_says_what_to_install_and_fetches_nothing(tmp_path):
    """maturin's backend would download a Rust toolchain where cargo is missing; the
    project's backend stops first, naming what to install and the prebuilt way."""
    path = os.pathsep.join([str(Path(sys.executable).parent), *(d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "cargo").exists())])
    env = {**os.environ, "PATH": path, "CARGO_HOME": str(tmp_path / "cargo"), "RUSTUP_HOME": str(tmp_path / "rustup"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("MATURIN_NO_INSTALL_RUST", None)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, check=False, env=env, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "cargo is not on PATH" in out and "https://rustup.rs" in out and "jobgate-check-installed" in out, out
    assert "installing into a temporary directory" not in out  # maturin's download never started
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*rust*")), sorted((tmp_path / "cache").rglob("*"))
    assert not list((tmp_path / "dist").glob("*.whl")) if (tmp_path / "dist").exists() else True
