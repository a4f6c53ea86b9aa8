"""The documents every benchmark measures: a ~2 KB forge/v2 JobSpec and a ~2 KB TAO
spec-bundle with an execution lifecycle, both valid (the admission hot path)."""

from __future__ import annotations

import json
from pathlib import Path

from jobgate import samples

SHARED = Path(__file__).resolve().parents[2] / "shared"
EXAMPLES = SHARED / "upstream" / "tao-artifacts" / "examples"


def jobspec(target_bytes: int = 2048) -> bytes:
    doc = json.loads(samples.path("jobspec.valid.json").read_bytes())
    i = 0
    while len(json.dumps(doc)) < target_bytes:
        doc["spec"]["hyperparams"][f"policy.generation.param_{i}"] = 0.5 + i
        i += 1
    return json.dumps(doc).encode()


def spec_bundle() -> bytes:
    doc = json.loads((EXAMPLES / "spec_bundle.config_mode.with_execution_lifecycle.valid.json").read_bytes())
    return json.dumps(doc).encode()


def bundle_schema() -> dict:
    return json.loads((SHARED / "upstream" / "tao-artifacts" / "spec_bundle.schema.json").read_bytes())
