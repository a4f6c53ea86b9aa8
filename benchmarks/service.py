"""The service over loopback: AdmitBatch dry-run throughput (256 documents per call)
against a bare grpcio echo server answering the same bytes (the transport floor), and Admit latency percentiles against an empty RPC
(the standard health Check) on the same server; with --workers 1 and 2."""

from __future__ import annotations

import functools
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
ROUND = 4  # AdmitBatch calls per measured round
INFLIGHT = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int) -> grpc.Channel:
    return wait_serving(f"127.0.0.1:{port}")


def start(workers: int, tmp: Path, limits: str = "", name: str = "", extra: str = "") -> tuple[subprocess.Popen, int]:
    """A server on a free port with an anonymous admin caller; `limits` is the body of
    its [limits] table, `extra` more tables (without [server], [store], [jobs], [limits])."""
    cfg = tmp / f"jobgate-{name or workers}.toml"
    extra = "\n".join(line for line in extra.splitlines() if not line.startswith("[limits]") and not line.startswith("max_document_bytes") and not line.startswith("max_depth"))
    cfg.write_text(f'{extra}\n[server]\nallow_anonymous = true\n[store]\npath = "{tmp / ("store" + name)}"\n[jobs]\nresults_root = "{tmp / "results"}"\n[limits]\n{limits}\n')
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", str(workers)], stderr=subprocess.DEVNULL)
    wait_ready(port).close()
    return proc, port


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def calls_in_flight(calls: list, request: bytes, total: int, inflight: int) -> None:
    """`total` calls with up to `inflight` of them outstanding at any time, spread over
    the connections of `calls` (SO_REUSEPORT shares connections among workers, not calls)."""
    pending = []
    for i in range(total):
        pending.append(calls[i % len(calls)].future(request))
        if len(pending) >= inflight:
            pending.pop(0).result()
    for future in pending:
        future.result()


def start_echo(tmp: Path, workers: int) -> tuple[list[subprocess.Popen], int]:
    """`workers` bare grpcio echo servers (benchmarks/echo_server.py) sharing one port
    (SO_REUSEPORT, as `serve --workers` does), answering every call with the response
    AdmitBatch gives the benchmark's request: the transport floor, what the gRPC
    runtime alone costs for the same bytes in and out."""
    request = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=documents.jobspec())] * BATCH, dry_run=True).SerializeToString()
    response = tmp / "echo-response.bin"
    response.write_bytes(jobgate.Validator().check_batch_request(request).response)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.echo_server", str(port), str(response)], stderr=subprocess.DEVNULL) for _ in range(workers)]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        echo = channel.unary_unary("/echo.Echo/Echo", request_serializer=bytes)
        deadline = time.monotonic() + 30
        while True:
            try:
                echo(request, timeout=1)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return procs, port


def unary_calls(port: int, method: str) -> tuple[list[grpc.Channel], list]:
    """One connection per call in flight, as several gateway replicas would open; the
    response is decoded as a client would."""
    connections = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(INFLIGHT)]
    calls = [c.unary_unary(method, request_serializer=bytes, response_deserializer=admission_pb2.AdmitBatchResponse.FromString) for c in connections]
    return connections, calls


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(quick: bool) -> dict:
    rows, targets = [], []
    doc = documents.jobspec()
    batch = [doc] * BATCH
    v = jobgate.Validator()
    calls = 8 if quick else 25
    latency_calls = 2000 if quick else 10000
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            echo_procs, echo_port = start_echo(Path(tmp), workers)
            proc, port = start(workers, Path(tmp))
            try:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    stub = admission_pb2_grpc.AdmissionServiceStub(channel)
                    health = health_pb2_grpc.HealthStub(channel)
                    # A gateway forwards what it received: the request is encoded once, as bytes.
                    request = admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=doc)] * BATCH, dry_run=True).SerializeToString()
                    admit_batch = channel.unary_unary("/jobgate.v1.AdmissionService/AdmitBatch", request_serializer=bytes, response_deserializer=admission_pb2.AdmitBatchResponse.FromString)
                    assert len(admit_batch(request).results) == BATCH
                    connections, batch_calls = unary_calls(port, "/jobgate.v1.AdmissionService/AdmitBatch")
                    echo_connections, echo_calls = unary_calls(echo_port, "/echo.Echo/Echo")
                    # Rounds alternate the echo servers (the transport floor: the same bytes
                    # in and out, nothing checked), the service and in-process check_many
                    # (the core's full capacity, for reference), so all see the same noise;
                    # a ratio is the median over rounds. Calls go one at a time and with
                    # INFLIGHT in flight, as a busy gateway keeps the service.
                    bench = f"AdmitBatch dry run, {BATCH} JobSpecs per call, --workers {workers}"
                    for inflight in (1, INFLIGHT):
                        local_t, remote_t, echo_t = [], [], []
                        for _ in range(calls):
                            echo_t.append(timed(functools.partial(calls_in_flight, echo_calls[:inflight], request, ROUND, inflight)))
                            remote_t.append(timed(functools.partial(calls_in_flight, batch_calls[:inflight], request, ROUND, inflight)))
                            local_t.append(timed(lambda: [v.check_many(batch) for _ in range(ROUND)]))
                        ratio = statistics.median(e / rem for e, rem in zip(echo_t, remote_t, strict=True))
                        if inflight == 1:
                            rows.append({"bench": bench, "impl": "in-process check_many (reference)", "value": ROUND * BATCH / statistics.median(local_t), "unit": "docs/s"})
                        rows.append({"bench": bench, "impl": f"echo server (transport floor), {inflight} in flight", "value": ROUND * BATCH / statistics.median(echo_t), "unit": "docs/s"})
                        rows.append({"bench": bench, "impl": f"gRPC AdmitBatch, {inflight} call(s) in flight", "value": ROUND * BATCH / statistics.median(remote_t), "unit": "docs/s"})
                        targets.append({"target": f"AdmitBatch >= 0.9 x echo server (--workers {workers}, {inflight} in flight)", "ratio": ratio, "goal": 0.9, "ok": ratio >= 0.9, "how": "per round: echo time / AdmitBatch time"})
                    for c in connections + echo_connections:
                        c.close()
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
                for echo_proc in echo_procs:
                    echo_proc.terminate()
                    echo_proc.wait(30)
    return {"rows": rows, "targets": targets, "cores": os.cpu_count()}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        extra = f"   p99 {r['p99']:9.1f} µs" if "p99" in r else ""
        return f"  {r['impl']:<50} {r['value']:12.1f} {r['unit']}{extra}"

    print_grouped(result["rows"], line)
