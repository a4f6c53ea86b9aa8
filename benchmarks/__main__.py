"""`python -m benchmarks` (or `scripts/dev bench`): every benchmark, one table of
medians and ratios against the peers measured in the same run, plus the machine.

    python -m benchmarks [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jobgate
import orjson

from benchmarks import documents


def per_call(fn: Callable[[], object], *, repeats: int, min_batch_s: float = 0.02) -> float:
    """Median seconds per call over `repeats` batches, each long enough to time well."""
    fn()
    batch = 1
    while True:
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        if time.perf_counter() - t >= min_batch_s:
            break
        batch *= 2
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t) / batch)
    return statistics.median(samples)


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(), "jobgate": jobgate.__version__}


def fmt_time(s: float) -> str:
    return f"{s * 1e6:9.2f} µs" if s < 1e-3 else f"{s * 1e3:9.2f} ms"


def run(quick: bool) -> dict:
    repeats = 5 if quick else 15
    v = jobgate.Validator()
    rows: list[dict] = []
    targets: list[dict] = []

    # ---- JobSpec, one thread
    js = documents.jobspec()
    js_dict = orjson.loads(js)
    assert v.check(js).ok
    from starforge.contract.spec import JobSpec

    t_check = per_call(lambda: v.check(js), repeats=repeats)
    t_orjson = per_call(lambda: orjson.loads(js), repeats=repeats)
    t_sf = per_call(lambda: JobSpec.from_dict(js_dict), repeats=repeats)
    t_sf_bytes = per_call(lambda: JobSpec.from_dict(orjson.loads(js)), repeats=repeats)
    rows += [
        {"bench": f"jobspec {len(js)} B", "impl": "jobgate check (bytes, all rules)", "per_call_s": t_check},
        {"bench": f"jobspec {len(js)} B", "impl": "orjson.loads (parse only)", "per_call_s": t_orjson},
        {"bench": f"jobspec {len(js)} B", "impl": "starforge-core JobSpec.from_dict (dict)", "per_call_s": t_sf},
        {"bench": f"jobspec {len(js)} B", "impl": "orjson.loads + from_dict (bytes)", "per_call_s": t_sf_bytes},
    ]
    targets.append({"target": "check <= 0.5 x orjson.loads (2 KB JobSpec)", "ratio": t_check / t_orjson, "goal": 0.5, "ok": t_check / t_orjson <= 0.5, "how": "check time / orjson.loads time"})
    targets.append({"target": ">= 50x starforge-core from_dict", "ratio": t_sf / t_check, "goal": 50, "ok": t_sf / t_check >= 50, "how": "from_dict time / check time"})

    # ---- spec-bundle, one thread
    import fastjsonschema
    import jsonschema
    import jsonschema_rs

    from benchmarks.models import SpecBundle

    sb = documents.spec_bundle()
    sb_dict = orjson.loads(sb)
    schema = documents.bundle_schema()
    rs = jsonschema_rs.validator_for(schema)
    py = jsonschema.Draft202012Validator(schema)
    fast = fastjsonschema.compile(schema)
    assert v.check(sb).ok and rs.is_valid(sb_dict) and py.is_valid(sb_dict)
    SpecBundle.model_validate(sb_dict)
    t_sb = per_call(lambda: v.check(sb), repeats=repeats)
    t_rs = per_call(lambda: rs.is_valid(sb_dict), repeats=repeats)
    t_py = per_call(lambda: py.is_valid(sb_dict), repeats=max(3, repeats // 3))
    t_fast = per_call(lambda: fast(sb_dict), repeats=repeats)
    t_pyd = per_call(lambda: SpecBundle.model_validate(sb_dict), repeats=repeats)
    t_sb_orjson = per_call(lambda: orjson.loads(sb), repeats=repeats)
    b = f"spec_bundle {len(sb)} B"
    rows += [
        {"bench": b, "impl": "jobgate check (bytes, schema + semantic rules)", "per_call_s": t_sb},
        {"bench": b, "impl": "jsonschema-rs is_valid (pre-parsed dict)", "per_call_s": t_rs},
        {"bench": b, "impl": "fastjsonschema (pre-parsed dict)", "per_call_s": t_fast},
        {"bench": b, "impl": "pydantic model_validate (pre-parsed dict)", "per_call_s": t_pyd},
        {"bench": b, "impl": "jsonschema is_valid (pre-parsed dict)", "per_call_s": t_py},
        {"bench": b, "impl": "orjson.loads (parse only)", "per_call_s": t_sb_orjson},
    ]
    targets.append({"target": ">= 1.5x jsonschema-rs on spec-bundles", "ratio": t_rs / t_sb, "goal": 1.5, "ok": t_rs / t_sb >= 1.5, "how": "jsonschema-rs time / check time"})

    # ---- check_many scaling
    n = 20_000 if quick else 100_000
    batch = [js] * (n // 2) + [sb] * (n // 2)
    t1 = per_call(lambda: v.check_many(batch, threads=1), repeats=max(3, repeats // 3), min_batch_s=0)
    t2 = per_call(lambda: v.check_many(batch, threads=2), repeats=max(3, repeats // 3), min_batch_s=0)
    rows += [
        {"bench": f"check_many {n} docs", "impl": "threads=1", "per_call_s": t1 / n},
        {"bench": f"check_many {n} docs", "impl": "threads=2", "per_call_s": t2 / n},
    ]
    cores = os.cpu_count() or 1
    targets.append({"target": "check_many on 2 cores >= 1.8x one core", "ratio": t1 / t2, "goal": 1.8, "ok": t1 / t2 >= 1.8, "how": f"threads=1 time / threads=2 time ({cores} cores here)"})
    return {"machine": machine(), "rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, jobgate {m['jobgate']}")
    print()
    bench = None
    for r in result["rows"]:
        if r["bench"] != bench:
            bench = r["bench"]
            base = r["per_call_s"]
            print(f"{bench}  (median per document; x = relative to jobgate's first row)")
        print(f"  {r['impl']:<50} {fmt_time(r['per_call_s'])}   {r['per_call_s'] / base:7.2f}x")

def print_targets(result: dict) -> None:
    print()
    print("targets (SPEC §8):")
    for t in result["targets"]:
        mark = "met " if t["ok"] else "MISS"
        print(f"  [{mark}] {t['target']:<48} measured {t['ratio']:6.2f} (goal {t['goal']}; {t['how']})")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batches")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only-core", action="store_true", help="skip the supporting-file hashing benchmarks")
    args = parser.parse_args()
    result = run(args.quick)
    if not args.only_core:
        from benchmarks import hashing

        files = hashing.run(args.quick)
        result["files"] = files["rows"]
        result["targets"] += files["targets"]
    print_table(result)
    if "files" in result:
        print()
        from benchmarks import hashing

        hashing.print_table({"rows": result["files"]})
    print_targets(result)
    out = Path(args.json) if args.json else Path(__file__).parent / "results" / "latest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
