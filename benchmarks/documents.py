"""The documents every benchmark measures: a ~2 KB forge/v2 JobSpec and a ~2 KB TAO
spec-bundle with an execution lifecycle, both valid (the admission hot path), and the
same documents grown to a given size, so a gain is not one size's alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jobgate import samples

SHARED = Path(os.environ.get("JOBGATE_SHARED", Path(__file__).resolve().parents[2] / "shared"))  # as the tests find it
EXAMPLES = SHARED / "upstream" / "tao-artifacts" / "examples"


def jobspec(target_bytes: int = 2048) -> bytes:
    doc = json.loads(samples.path("jobspec.valid.json").read_bytes())
    i = 0
    while len(json.dumps(doc)) < target_bytes:
        doc["spec"]["hyperparams"][f"policy.generation.param_{i}"] = 0.5 + i
        i += 1
    return json.dumps(doc).encode()


def spec_bundle(target_bytes: int = 0) -> bytes:
    """The upstream example as it is, or grown to about `target_bytes` with nested
    training settings under `spec` (which the schema leaves open)."""
    doc = json.loads((EXAMPLES / "spec_bundle.config_mode.with_execution_lifecycle.valid.json").read_bytes())
    extra: dict[str, dict[str, object]] = {}
    i = 0
    while len(json.dumps(doc)) < target_bytes:
        if i % 32 == 0:
            extra = doc["spec"].setdefault(f"stage_{i // 32}", {})
        extra[f"param_{i}"] = [0.5 + i, f"value {i}", i % 2 == 0]
        i += 1
    return json.dumps(doc).encode()


def bundle_schema() -> dict:
    return json.loads((SHARED / "upstream" / "tao-artifacts" / "spec_bundle.schema.json").read_bytes())


def write(directory: Path) -> list[Path]:
    """The benchmark documents as files, for `rust/examples/profile.rs`."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for size in (2048, 20_000, 200_000):
        for name, data in (("jobspec", jobspec(size)), ("spec_bundle", spec_bundle(0 if size == 2048 else size))):
            path = directory / f"{name}.{size}.json"
            path.write_bytes(data)
            out.append(path)
    return out


if __name__ == "__main__":
    import sys

    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/documents")):
        print(p)
