"""`jobgate revalidate --cache`: the second run over an unchanged archive of 20,000
items (job packages and JobSpecs) against the first (which checks every item and fills the cache). Both runs read
every item's bytes; the second checks nothing again. Goal: at least 5x faster.

    python -m benchmarks revalidation [--quick]
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from benchmarks import documents, print_grouped, run_alone

ITEMS = 20_000


def archive(root: Path, n: int) -> None:
    """`n` items as an archive of old jobs holds them: half job packages (a tar.gz of a
    spec-bundle and its two helpers, 64 KiB in all), half JobSpecs; a few failing."""
    js = json.loads(documents.jobspec())
    helpers = {"scripts/prepare.py": b"import os\n" + os.urandom(16 << 10).hex().encode(), "scripts/model.bin": os.urandom(32 << 10)}
    sb = json.loads(documents.spec_bundle())
    sb.setdefault("execution", {})["supporting_files"] = [{"source": s, "destination": s.split("/")[-1], "sha256": hashlib.sha256(d).hexdigest()} for s, d in helpers.items()]
    for i in range(n):
        folder = root / f"{i // 1000:03d}"
        folder.mkdir(exist_ok=True)
        if i % 2:
            doc = {**js, "metadata": {**js["metadata"], "name": f"job-{i}"}}
            if i % 97 == 1:
                doc["kind_of"] = "unknown field"  # a warning here and there
            (folder / f"{i:06d}.json").write_text(json.dumps(doc))
            continue
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for name, data in (("bundle.json", json.dumps({**sb, "action": f"train{i}"}).encode()), *helpers.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (folder / f"{i:06d}.tar.gz").write_bytes(buf.getvalue())


def timed(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobgate.cli", "revalidate", *args, "--format", "json"], check=False, stdout=subprocess.DEVNULL, env={"CI": "1", "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t


def run(quick: bool) -> dict:
    n = 4_000 if quick else ITEMS
    rounds = 2 if quick else 3
    firsts, seconds = [], []
    with tempfile.TemporaryDirectory(prefix="jobgate-revalidate-") as tmp:
        root = Path(tmp) / "archive"
        root.mkdir()
        archive(root, n)
        for r in range(rounds):
            cache = str(Path(tmp) / f"cache-{r}.sqlite")
            firsts.append(timed([str(root), "--cache", cache]))
            seconds.append(timed([str(root), "--cache", cache]))
    ratio = statistics.median(a / b for a, b in zip(firsts, seconds, strict=True))
    bench = f"revalidate {n:,} items with --cache (median of {rounds} pairs of runs)"
    rows = [
        {"bench": bench, "impl": "first run (checks every item, fills the cache)", "seconds": statistics.median(firsts)},
        {"bench": bench, "impl": "second run (reads every item, checks none)", "seconds": statistics.median(seconds)},
    ]
    targets = [{"target": "revalidate --cache: second run >= 5x faster", "ratio": ratio, "goal": 5, "ok": ratio >= 5, "how": "median per-pair first-run time / second-run time, whole commands"}]
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, first: f"  {r['impl']:<50} {r['seconds']:8.2f} s   {first['seconds'] / r['seconds']:6.2f}x faster than the first", str)


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
