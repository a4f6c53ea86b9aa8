"""The cost of hostile documents: each case that once made a report grow faster than
its document, checked in a fresh process, beside a valid document of the same size.
Reported per case: the input size, the report's size, the peak resident memory the
check added, and the check's time as a multiple of the valid document's.

Goals (issue "Bounded cost per request"): the memory a check adds stays below 10x the
input plus a fixed base (64 MiB here), and no case is slower than 100x a valid
document of the same size.

    python -m benchmarks bounds [--quick]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import documents, print_grouped, run_alone

BASE_MB = 64  # what a check may add whatever its input: buffers, thread stacks, allocator slack

# Run in a child: import, read, one check to measure the peak it adds, then timed checks.
CHILD = r"""
import json, statistics, sys, time
import jobgate
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
kind = sys.argv[2] or None
data = open(sys.argv[1], "rb").read()
v = jobgate.Validator()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to what is resident now
before = status("VmRSS:")
report = v.check(data, kind=kind)
added = status("VmHWM:") - before
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    v.check(data, kind=kind)
    times.append(time.perf_counter() - t)
size = sum(len(x.field) + len(x.message) for x in report.violations)
print(json.dumps({"added_kb": added, "seconds": statistics.median(times), "violations": len(report.violations), "report_bytes": size, "verdict": report.verdict}))
"""


def padded(doc: dict, container: dict, entry, size: int) -> bytes:
    """`doc` with `container` filled by `entry(i)` pairs up to `size` bytes, never past it."""
    base = len(json.dumps(doc, separators=(",", ":")))
    i = 0
    while True:
        key, value = entry(i)
        grown = base + len(json.dumps({key: value}, separators=(",", ":"))) - 1  # one comma, no braces
        if grown > size:
            return json.dumps(doc, separators=(",", ":")).encode()
        container[key] = value
        base, i = grown, i + 1


def jobspec_of_size(size: int) -> bytes:
    """A valid JobSpec padded with labels to about `size` bytes."""
    doc = json.loads(documents.jobspec())
    doc["metadata"]["labels"] = {}
    return padded(doc, doc["metadata"]["labels"], lambda i: (f"l{i}", "v"), size)


def bundle_of_size(size: int) -> bytes:
    """A valid spec-bundle whose `spec` holds nested keys to about `size` bytes."""
    doc = json.loads(documents.spec_bundle())
    doc["spec"]["extra"] = {}
    return padded(doc, doc["spec"]["extra"], lambda i: (f"k{i}", {"v": i}), size)


def cases() -> list[tuple[str, str, bytes, bytes]]:
    """(name, kind, hostile document, valid document of about its size)."""
    out = []
    js = json.loads(documents.jobspec())
    js["spec"]["resources"]["pools"] = [{"name": f"p{i}", "nodes": 1, "gpus_per_node": 1} for i in range(15_000)]
    js["spec"]["resources"]["roles"] = {f"r{i}": "missing" for i in range(15_000)}
    data = json.dumps(js, separators=(",", ":")).encode()
    out.append(("15,000 roles naming a missing pool", "jobspec", data, jobspec_of_size(len(data))))

    js = json.loads(documents.jobspec())
    js["spec"]["evaluation"] = {"suites": [f"s{i}" for i in range(4000)], "gates": [{"metric": f"x{i}/acc", "min": 0.5} for i in range(4000)]}
    data = json.dumps(js, separators=(",", ":")).encode()
    out.append(("4,000 suites x 4,000 gates", "jobspec", data, jobspec_of_size(len(data))))

    deep: dict = {}
    node = deep
    for i in range(60):
        child: dict = {}
        node[f"{i:04d}" + "k" * 996] = child
        node = child
    node.update({f"a.{i}": 1 for i in range(5000)})
    sb = json.loads(documents.spec_bundle())
    sb["spec"] = deep
    data = json.dumps(sb, separators=(",", ":")).encode()
    out.append(("60 levels of 1,000-char keys, 5,000 dotted keys", "spec_bundle", data, bundle_of_size(len(data))))

    data = ('{"apiVersion":"forge/v2",' + ",".join('"k":1' for _ in range(174_000)) + "}").encode()
    out.append(("174,000 duplicate keys", "jobspec", data, jobspec_of_size(len(data))))
    return out


def measure(path: Path, kind: str, repeats: int) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, str(path), kind, str(repeats)], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def run(quick: bool) -> dict:
    repeats = 3 if quick else 9
    rows, targets = [], []
    with tempfile.TemporaryDirectory(prefix="jobgate-bounds-") as tmp:
        for name, kind, hostile, valid in cases():
            h, v = Path(tmp) / "hostile", Path(tmp) / "valid"
            h.write_bytes(hostile)
            v.write_bytes(valid)
            # Interleaved rounds: a noisy neighbour slows both alike.
            hs, vs = [], []
            for _ in range(3 if quick else 5):
                hs.append(measure(h, kind, repeats))
                vs.append(measure(v, kind, repeats))
            slower = statistics.median(a["seconds"] / b["seconds"] for a, b in zip(hs, vs, strict=True))
            added_mb = statistics.median(a["added_kb"] for a in hs) / 1024
            input_mb = len(hostile) / (1 << 20)
            rows.append({"bench": name, "input_bytes": len(hostile), "violations": hs[0]["violations"], "report_bytes": hs[0]["report_bytes"], "added_mb": added_mb, "seconds": statistics.median(a["seconds"] for a in hs), "valid_seconds": statistics.median(b["seconds"] for b in vs), "slower": slower})
            targets.append({"target": f"memory: {name}", "ratio": added_mb, "goal": round(10 * input_mb + BASE_MB, 1), "ok": added_mb <= 10 * input_mb + BASE_MB, "how": "MiB of peak RSS one check adds (median of fresh processes); goal 10x input + 64 MiB"})
            targets.append({"target": f"time: {name}", "ratio": slower, "goal": 100, "ok": slower <= 100, "how": "median check time / a valid document of the same size"})
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(
        result["rows"],
        lambda r, first: f"  {r['input_bytes']:>9,} B in -> {r['violations']:>5} violations, {r['report_bytes']:>9,} B of report; +{r['added_mb']:6.1f} MiB peak; {r['seconds'] * 1e3:8.2f} ms = {r['slower']:6.1f}x a valid document ({r['valid_seconds'] * 1e3:.2f} ms)",
        lambda bench: f"hostile document: {bench}",
    )


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
