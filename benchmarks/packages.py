"""A gateway that attaches the same helper package to every submission: `Admit`
(dry run) of a spec-bundle with its package, through a real server, with the
package cache (`limits.package_cache_bytes`, the default) against a server with it
off. Both servers run at once and rounds alternate between them, so both see the
same noise. Goal: at least 3x the throughput with the cache.

    python -m benchmarks packages [--quick]
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import grpc

from benchmarks import documents, print_grouped, run_alone
from benchmarks.service import calls_in_flight, start
from jobgate.v1 import admission_pb2

INFLIGHT = 4
PER_ROUND = 64


def package() -> tuple[bytes, bytes]:
    """A spec-bundle and its package: a tar.gz of the bundle and 24 helper files (Python
    scripts and small binaries, 1.5 MiB in all), as a producer skill ships them."""
    helpers = {}
    for i in range(24):
        if i % 3:
            helpers[f"scripts/step_{i}.py"] = b"".join(b"import os\nvalue_%d = %d\n" % (j, j) for j in range(2000))
        else:
            helpers[f"assets/table_{i}.bin"] = os.urandom(64 << 10)
    bundle = json.loads(documents.spec_bundle())
    bundle.setdefault("execution", {})["supporting_files"] = [{"source": s, "destination": s.split("/", 1)[1], "sha256": hashlib.sha256(d).hexdigest()} for s, d in helpers.items()]
    raw = json.dumps(bundle).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("bundle.json", raw), *helpers.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw, buf.getvalue()


def run(quick: bool) -> dict:
    rounds = 5 if quick else 15
    raw, pkg = package()
    request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw, package=pkg), dry_run=True).SerializeToString()
    with tempfile.TemporaryDirectory(prefix="jobgate-packages-") as tmp:
        servers = {"cache on (default)": start(1, Path(tmp), name="cached"), "cache off (package_cache_bytes = 0)": start(1, Path(tmp), "package_cache_bytes = 0", name="uncached")}
        try:
            calls, channels = {}, []
            for label, (_, port) in servers.items():
                conns = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", 16 << 20)]) for _ in range(INFLIGHT)]
                channels += conns
                calls[label] = [c.unary_unary("/jobgate.v1.AdmissionService/Admit", request_serializer=bytes, response_deserializer=admission_pb2.AdmitResponse.FromString) for c in conns]
                reply = calls[label][0](request)
                assert reply.report.verdict == "pass", reply.report
            times: dict[str, list[float]] = {label: [] for label in calls}
            for _ in range(rounds):
                for label, c in calls.items():
                    t = time.perf_counter()
                    calls_in_flight(c, request, PER_ROUND, INFLIGHT)
                    times[label].append(time.perf_counter() - t)
            for c in channels:
                c.close()
        finally:
            for proc, _ in servers.values():
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    on, off = times
    ratio = statistics.median(b / a for a, b in zip(times[on], times[off], strict=True))
    bench = f"Admit dry run, one spec-bundle with the same {len(pkg) >> 10} KiB package (tar.gz, 25 members), {INFLIGHT} calls in flight"
    rows = [{"bench": bench, "impl": label, "value": PER_ROUND / statistics.median(t), "unit": "Admit/s"} for label, t in times.items()]
    targets = [{"target": "repeated-package Admit throughput, cache on >= 3x off", "ratio": ratio, "goal": 3, "ok": ratio >= 3, "how": "per round: time with the cache off / time with it on (a hit still receives, spools and BLAKE3-hashes the package)"}]
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, first: f"  {r['impl']:<40} {r['value']:10.1f} {r['unit']}   {r['value'] / first['value']:5.2f}x")


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
