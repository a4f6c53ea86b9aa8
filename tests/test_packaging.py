"""The sdist builds, and the wheel built from it is abi3 and installs: into a fresh
virtualenv, with its dependencies from the index, and `jobgate check` runs there.
The protos, py.typed and the license ride inside. (`scripts/dev release` builds the
manylinux2014 wheel with zig and shows its platform with auditwheel.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
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
    for needed in ("LICENSE", "pyproject.toml", "rust/Cargo.toml", "rust/src/lib.rs", "proto/jobgate/v1/admission.proto", "python/jobgate/py.typed", "python/jobgate/v1/admission.proto"):
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

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel))
    ok = subprocess.run([str(venv / "bin" / "jobgate"), "check", str(samples.path("jobspec.valid.json"))], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([str(venv / "bin" / "jobgate"), "check", str(samples.path("jobspec.rejected.json")), "--format", "json"], capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and '"verdict": "fail"' in refused.stdout
