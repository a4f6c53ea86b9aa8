"""The service over loopback: AdmitBatch dry-run throughput (256 documents per call)
against in-process check_many, and Admit latency percentiles against an empty RPC
(the standard health Check) on the same server; with --workers 1 and 2."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import jobgate
from benchmarks import documents, print_grouped
from jobgate.server.app import wait_serving
from jobgate.v1 import admission_pb2, admission_pb2_grpc

BATCH = 256


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int) -> grpc.Channel:
    return wait_serving(f"127.0.0.1:{port}")


def start(workers: int, tmp: Path) -> tuple[subprocess.Popen, int]:
    cfg = tmp / f"jobgate-{workers}.toml"
    cfg.write_text(f'[server]\nallow_anonymous = true\n[store]\npath = "{tmp / "store"}"\n[jobs]\nresults_root = "{tmp / "results"}"\n')
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", str(workers)], stderr=subprocess.DEVNULL)
    wait_ready(port).close()
    return proc, port


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(quick: bool) -> dict:
    rows, targets = [], []
    doc = documents.jobspec()
    batch = [doc] * BATCH
    v = jobgate.Validator()
    calls = 20 if quick else 60
    latency_calls = 2000 if quick else 10000
    # in-process baseline, same documents
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        v.check_many(batch)
        times.append(time.perf_counter() - t)
    local_rate = BATCH / statistics.median(times)
    rows.append({"bench": f"AdmitBatch dry run, {BATCH} JobSpecs per call", "impl": "in-process check_many", "value": local_rate, "unit": "docs/s"})
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            proc, port = start(workers, Path(tmp))
            try:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
                    health = health_pb2_grpc.HealthStub(channel)
                    # A gateway forwards what it received: the request is encoded once, as bytes.
                    request = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=doc)] * BATCH, dry_run=True).SerializeToString()
                    admit_batch = channel.unary_unary("/jobgate.v1.AdmissionService/AdmitBatch", request_serializer=bytes, response_deserializer=admission_pb2.AdmitBatchResponse.FromString)
                    assert len(admit_batch(request).results) == BATCH
                    times = []
                    for _ in range(calls):
                        t = time.perf_counter()
                        admit_batch(request)
                        times.append(time.perf_counter() - t)
                    rate = BATCH / statistics.median(times)
                    rows.append({"bench": f"AdmitBatch dry run, {BATCH} JobSpecs per call", "impl": f"gRPC, --workers {workers}", "value": rate, "unit": "docs/s"})
                    targets.append({"target": f"AdmitBatch >= 0.5 x check_many (--workers {workers})", "ratio": rate / local_rate, "goal": 0.5, "ok": rate / local_rate >= 0.5, "how": "gRPC docs/s / in-process docs/s"})
                    one = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=doc), dry_run=True)
                    empty = health_pb2.HealthCheckRequest()
                    admit_t, empty_t = [], []
                    for _ in range(latency_calls):  # interleaved, so both see the same noise
                        t = time.perf_counter()
                        stub.Admit(one)
                        admit_t.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        health.Check(empty)
                        empty_t.append(time.perf_counter() - t)
                    for name, samples in (("Admit (2 KB JobSpec, dry run)", admit_t), ("empty RPC (health Check)", empty_t)):
                        rows.append({"bench": f"latency, --workers {workers}", "impl": name, "value": percentile(samples, 50) * 1e6, "unit": "µs p50", "p99": percentile(samples, 99) * 1e6})
                    from google.protobuf import json_format

                    from jobgate.v1 import jobspec_pb2

                    typed = admission_pb2.AdmitRequest(document=admission_pb2.Document(jobspec=json_format.Parse(doc, jobspec_pb2.JobSpec())), dry_run=True)
                    typed_t = []
                    for _ in range(latency_calls // 4):
                        t = time.perf_counter()
                        stub.Admit(typed)
                        typed_t.append(time.perf_counter() - t)
                    rows.append({"bench": f"latency, --workers {workers}", "impl": "Admit, typed JobSpec message", "value": percentile(typed_t, 50) * 1e6, "unit": "µs p50", "p99": percentile(typed_t, 99) * 1e6})
                    ratio_typed = percentile(typed_t, 50) / percentile(admit_t, 50)
                    targets.append({"target": f"typed path <= 2 x bytes path (--workers {workers})", "ratio": ratio_typed, "goal": 2.0, "ok": ratio_typed <= 2.0, "how": "Admit p50, typed / bytes"})
                    ratio = percentile(admit_t, 99) / percentile(empty_t, 99)
                    targets.append({"target": f"Admit p99 <= 1.5 x empty RPC p99 (--workers {workers})", "ratio": ratio, "goal": 1.5, "ok": ratio <= 1.5, "how": "Admit p99 / health Check p99"})
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    return {"rows": rows, "targets": targets, "cores": os.cpu_count()}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        extra = f"   p99 {r['p99']:9.1f} µs" if "p99" in r else ""
        return f"  {r['impl']:<50} {r['value']:12.1f} {r['unit']}{extra}"

    print_grouped(result["rows"], line)
