"""`serve --workers N` and the client's connections: how calls spread over the
workers and what they give. Admit dry run, 8 calls in flight on 1, 2, 4 or 8
connections, against `--workers 1` and `--workers 2`, rounds interleaved, from two
clients: `jobgate bench` (one Python process, which costs about as much CPU per call
as the server) and `h2load` (Debian's nghttp2-client, sending the same gRPC frames
from C, so that the server is what limits). Each worker's calls come from the
supervisor's /metrics (`jobgate_worker_rpcs_total{worker}`), the servers' CPU from
/proc.

The kernel hands each new connection to one of the workers sharing the port
(SO_REUSEPORT, by a hash of the connection's addresses and ports), and every call of
that connection is served there: the rounds where one worker served every call say
how often K connections left a worker idle.

    python -m benchmarks workers [--quick]
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks import documents, print_grouped, run_alone
from benchmarks.service import free_port, wait_ready
from jobgate.v1 import admission_pb2

INFLIGHT = 8
CONNECTIONS = (1, 2, 4, 8)  # each divides INFLIGHT: h2load keeps as many calls in flight on each


def start(workers: int, tmp: Path) -> tuple[subprocess.Popen, int, int]:
    """`jobgate serve --workers N` with an anonymous admin caller and its metrics
    endpoint; returns the process, its port and the metrics port."""
    port, metrics_port = free_port(), free_port()
    cfg = tmp / f"jobgate-{workers}.toml"
    cfg.write_text(f'[server]\nallow_anonymous = true\nmetrics_listen = "127.0.0.1:{metrics_port}"\n[store]\npath = "{tmp / f"store{workers}"}"\n[jobs]\nresults_root = "{tmp / "results"}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", str(workers)], stderr=subprocess.DEVNULL)
    wait_ready(port).close()
    return proc, port, metrics_port


def server_pids(proc: subprocess.Popen, workers: int) -> list[int]:
    """The processes that serve calls: the workers, or the one server."""
    if workers == 1:
        return [proc.pid]
    deadline = time.monotonic() + 30
    while True:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            pids = [int(pid) for pid in f.read().split()]
        if len(pids) == workers or time.monotonic() > deadline:
            return pids
        time.sleep(0.1)


def cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / 100  # USER_HZ


def worker_calls(metrics_port: int) -> list[float]:
    """The RPCs each worker completed; one server's, when it has no workers."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    workers, handled = {}, 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.startswith("jobgate_worker_rpcs_total{"):
            workers[series] = float(value)
        elif series.startswith("grpc_server_handled_total{"):
            handled += float(value)
    return [workers[k] for k in sorted(workers)] or [handled]


def jobgate_bench(port: int, doc: Path, n: int, connections: int) -> float:
    command = [sys.executable, "-m", "jobgate.cli", "bench", "--server", f"127.0.0.1:{port}", "--requests", str(n), "--concurrency", str(INFLIGHT), "--connections", str(connections), "--document", str(doc), "--warmup", "0.3", "--format", "json"]
    result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert result["statuses"] == {"OK": n}, result["statuses"]
    assert result["parameters"]["connections"] == connections, result["parameters"]
    return result["calls_per_s"]


def h2load(port: int, body: Path, n: int, connections: int) -> float:
    command = ["h2load", "-n", str(n), "-c", str(connections), "-m", str(INFLIGHT // connections), "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers", f"http://127.0.0.1:{port}/jobgate.v1.AdmissionService/Admit"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if f"{n} succeeded, 0 failed" not in out:
        raise RuntimeError(f"h2load had failures:\n{out}")
    return float(re.search(r"finished in [0-9.]+m?s, ([0-9.]+) req/s", out).group(1))


def run(quick: bool) -> dict:
    rounds, n = (3, 2000) if quick else (7, 4000)
    raw = documents.jobspec()
    clients = {"jobgate bench (one Python process)": jobgate_bench}
    if shutil.which("h2load"):
        clients["h2load (C)"] = h2load
    else:
        print("  workers: h2load is missing (apt-get install nghttp2-client): measured with jobgate bench alone", file=sys.stderr)
    runs = [(client, workers, k) for client in clients for k in CONNECTIONS for workers in (1, 2)]
    rates: dict[tuple, list[float]] = {r: [] for r in runs}
    cpu: dict[tuple, list[float]] = {r: [] for r in runs}
    busiest: dict[tuple, list[float]] = {r: [] for r in runs}
    idle: dict[tuple, int] = dict.fromkeys(runs, 0)
    with tempfile.TemporaryDirectory(prefix="jobgate-workers-") as tmp:
        doc, body = Path(tmp) / "job.json", Path(tmp) / "body.bin"
        doc.write_bytes(raw)
        request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw), dry_run=True).SerializeToString()
        body.write_bytes(b"\x00" + len(request).to_bytes(4, "big") + request)  # one gRPC length-prefixed message
        servers = {workers: start(workers, Path(tmp)) for workers in (1, 2)}
        try:
            pids = {workers: server_pids(proc, workers) for workers, (proc, _, _) in servers.items()}
            for _, port, _ in servers.values():
                jobgate_bench(port, doc, 1000, 1)  # warm the servers
            for _ in range(rounds):
                for client, workers, k in runs:
                    _, port, metrics_port = servers[workers]
                    calls_before, cpu_before = worker_calls(metrics_port), cpu_seconds(pids[workers])
                    rates[client, workers, k].append(clients[client](port, doc if client.startswith("jobgate") else body, n, k))
                    served = [b - a for a, b in zip(calls_before, worker_calls(metrics_port), strict=True)]
                    total = sum(served)
                    cpu[client, workers, k].append((cpu_seconds(pids[workers]) - cpu_before) / total)
                    busiest[client, workers, k].append(max(served) / total)
                    idle[client, workers, k] += min(served) <= 1  # bench's first call may land on the other worker
        finally:
            for proc, _, _ in servers.values():
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    rows = []
    for client, workers, k in runs:
        base = rates[client, 1, 1]
        rows.append(
            {
                "bench": f"Admit dry run, {INFLIGHT} in flight, from {client} (median of {rounds} rounds of {n:,} calls)",
                "impl": f"--workers {workers}, {k} connection{'s' if k > 1 else ''}",
                "value": statistics.median(rates[client, workers, k]),
                "unit": "calls/s",
                "ratio": statistics.median(r / b for r, b in zip(rates[client, workers, k], base, strict=True)),
                "server_cpu_us": statistics.median(cpu[client, workers, k]) * 1e6,
                "busiest_share": statistics.median(busiest[client, workers, k]),
                "idle_rounds": idle[client, workers, k] if workers > 1 else None,
                "rounds": rounds,
            }
        )
    return {"rows": rows, "targets": []}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        idle = f", a worker idle in {r['idle_rounds']} of {r['rounds']} rounds" if r["idle_rounds"] is not None else ""
        return f"  {r['impl']:<28} {r['value']:8.1f} {r['unit']} {r['ratio']:5.2f}x   server CPU {r['server_cpu_us']:4.0f} µs/call   busiest worker {r['busiest_share']:4.0%} of calls{idle}"

    print_grouped(result["rows"], line, lambda bench: f"{bench}  (x = per-round calls/s over --workers 1 on 1 connection)")


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
