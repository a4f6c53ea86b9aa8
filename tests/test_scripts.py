"""The scripts a developer runs from the README fail with a sentence, never a
traceback, when the environment lacks what they need."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT


def test_protos_without_grpcio_tools_says_what_to_install(tmp_path):
    """After `scripts/dev setup` (no test dependencies) grpcio-tools and mypy-protobuf
    are missing: scripts/protos says so and how to get them, and exits 2."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(ROOT / "scripts" / "protos"), "--check"], env={**os.environ, "VENV": str(venv)}, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr == "scripts/protos needs grpcio-tools and mypy-protobuf, test dependencies: run scripts/dev setup test first (scripts/dev protos does both)\n"
    assert done.stdout == ""
