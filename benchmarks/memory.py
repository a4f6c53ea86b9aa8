"""Memory across a long stream of admissions (SPEC §8: flat within 10%): resident
memory sampled every 100,000 dry-run admissions through the gate the service uses,
after a warm-up of the same length."""

from __future__ import annotations

import resource
import tempfile

from benchmarks import documents, print_grouped
from jobgate.config import Config
from jobgate.server.gate import Gate
from jobgate.store import SqliteStore


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def run(quick: bool) -> dict:
    total = 200_000 if quick else 1_000_000
    step = total // 10
    doc = documents.jobspec()
    bad = doc.replace(b'"TrainingJob"', b'"Nope"')
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.model_validate({"store": {"path": f"{tmp}/store"}, "jobs": {"results_root": f"{tmp}/results"}})
        gate = Gate(config, SqliteStore(config.store.path))
        for i in range(step):  # warm-up: caches, thread-local buffers, allocator arenas
            gate.admit(doc if i % 2 else bad, None, "bench", dry_run=True)
        samples = [rss_mb()]
        for i in range(total):
            gate.admit(doc if i % 2 else bad, None, "bench", dry_run=True)
            if (i + 1) % step == 0:
                samples.append(rss_mb())
        gate.committer.close()
    growth = samples[-1] / samples[0]
    rows = [{"bench": f"{total:,} dry-run admissions (half refused)", "impl": f"resident memory after {i * step:,}", "value": mb} for i, mb in enumerate(samples)]
    targets = [{"target": f"memory flat within 10% over {total:,} admissions", "ratio": growth, "goal": 1.1, "ok": growth <= 1.1, "how": "RSS at the end / RSS after warm-up"}]
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, _: f"  {r['impl']:<50} {r['value']:8.1f} MB")
