"""Every report jobgate gives the shared upstream material, as one JSON document: each
example, schema fixture and peer case under ../shared/upstream (JSON and YAML),
checked with no configuration and with the embedded demo deployment, through
`Validator.check` and through `check_many`. A refactoring that must not change
behaviour keeps this output byte-identical:

    python scripts/reports_snapshot.py > before.json
    ... change ...
    python scripts/reports_snapshot.py > after.json && cmp before.json after.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jobgate
from jobgate import samples

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = Path(os.environ.get("JOBGATE_SHARED", ROOT.parent / "shared")) / "upstream"


def main() -> int:
    if not UPSTREAM.is_dir():
        print(f"the shared upstream material is missing: expected {UPSTREAM}", file=sys.stderr)
        return 2
    paths = sorted(p for p in UPSTREAM.rglob("*") if p.suffix in (".json", ".yaml", ".yml") and p.name != "expected.json")
    documents = [p.read_bytes() for p in paths]
    out: dict[str, dict[str, object]] = {}
    for name, config in (("bare", None), ("demo", samples.path(samples.DEMO_CONFIG))):
        v = jobgate.Validator(config)
        many = v.check_many(documents)
        for path, data, batched in zip(paths, documents, many, strict=True):
            single = v.check(data).to_dict()
            assert single == batched.to_dict(), f"{path}: check and check_many disagree"
            out.setdefault(str(path.relative_to(UPSTREAM)), {})[name] = single
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
