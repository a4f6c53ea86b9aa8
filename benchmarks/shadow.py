"""Shadow admission's cost on the request path: Admit (dry run, 2 KB JobSpec) p50 and
p99 against a server that judges every admission again under a candidate
configuration (`[shadow] config`), and one without; both servers up at once, calls
alternating between them so both see the same noise. Goal: p99 with the shadow at
most 1.1x without.

    python -m benchmarks shadow [--quick]
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

import grpc

from benchmarks import documents, print_grouped, run_alone
from benchmarks.service import percentile, start
from jobgate import samples
from jobgate.v1 import admission_pb2


def run(quick: bool) -> dict:
    calls = 3000 if quick else 20000
    with tempfile.TemporaryDirectory(prefix="jobgate-shadow-") as tmp:
        candidate = Path(tmp) / "candidate.toml"
        candidate.write_text(samples.path(samples.DEMO_CONFIG).read_text().replace('version = "0.7.0"', 'version = "0.8.0"', 1))
        # The embedded demo catalog, with and without a shadow that disagrees on every call.
        demo = samples.path(samples.DEMO_CONFIG).read_text()
        same = Path(tmp) / "same.toml"
        same.write_text(demo)
        servers = {
            "shadow off": start(1, Path(tmp), name="plain", extra=demo),
            "shadow on, agreeing": start(1, Path(tmp), name="agreeing", extra=demo + f'\n[shadow]\nconfig = "{same}"\n'),
            "shadow on, disagreeing on every call": start(1, Path(tmp), name="disagreeing", extra=demo + f'\n[shadow]\nconfig = "{candidate}"\n'),
        }
        try:
            request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=documents.jobspec()), dry_run=True).SerializeToString()
            channels = {name: grpc.insecure_channel(f"127.0.0.1:{port}") for name, (_, port) in servers.items()}
            admit = {name: c.unary_unary("/jobgate.v1.AdmissionService/Admit", request_serializer=None, response_deserializer=None) for name, c in channels.items()}
            for call in admit.values():
                for _ in range(200):
                    call(request)
            times: dict[str, list[float]] = {name: [] for name in admit}
            for _ in range(calls):
                for name, call in admit.items():
                    t = time.perf_counter()
                    call(request)
                    times[name].append(time.perf_counter() - t)
            for c in channels.values():
                c.close()
        finally:
            for proc, _ in servers.values():
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    bench = f"Admit dry run, 2 KB JobSpec, one call at a time ({calls:,} calls each, alternating)"
    rows = [{"bench": bench, "impl": name, "value": percentile(t, 50) * 1e6, "p99": percentile(t, 99) * 1e6, "unit": "µs p50"} for name, t in times.items()]
    off, agreeing, disagreeing = (percentile(t, 99) for t in times.values())
    targets = [
        {"target": "Admit p99 with shadow on (agreeing) <= 1.1 x off", "ratio": agreeing / off, "goal": 1.1, "ok": agreeing / off <= 1.1, "how": "p99 with the shadow / p99 without, same run"},
        {"target": "Admit p99 with shadow on (disagreeing on every call) <= 1.1 x off", "ratio": disagreeing / off, "goal": 1.1, "ok": disagreeing / off <= 1.1, "how": "p99 with the shadow / p99 without, same run; every call logged"},
    ]
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, first: f"  {r['impl']:<40} p50 {r['value']:8.1f} µs   p99 {r['p99']:8.1f} µs")


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
