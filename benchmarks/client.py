"""`jobgate bench` as a load generator against `h2load` (Debian's nghttp2-client),
which sends the same gRPC frames from C: the same server, the same Admit dry run,
8 calls in flight on one connection, rounds alternating between the two. A client
that gets in the way of the server it measures shows here. Goal: at least 0.9x
h2load's throughput.

Beside calls/s, the CPU each client spent per call (h2load's from the kernel's
account of the finished child, `jobgate bench`'s as it reports it) and the CPU the
server spent per call under each (from /proc, over every call it answered, warm-up
included): on a machine shared with other work, calls/s moves with the neighbours,
and the CPU a client takes from the server it measures is what the ratio depends on.

    python -m benchmarks client [--quick]
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import documents, print_grouped, run_alone
from benchmarks.service import start
from jobgate.v1 import admission_pb2

INFLIGHT = 8


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_cpu(pid: int) -> float:
    """CPU seconds the server process has spent (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def h2load_rate(port: int, body: Path, n: int) -> tuple[float, float, int]:
    """calls/s, CPU µs per call, and the calls the server answered."""
    before = _children_cpu()
    done = subprocess.run(
        ["h2load", "-n", str(n), "-c", "1", "-m", str(INFLIGHT), "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers", f"http://127.0.0.1:{port}/jobgate.v1.AdmissionService/Admit"],
        capture_output=True,
        text=True,
        check=True,
    )
    if not re.search(rf"{n} succeeded, 0 failed", done.stdout):
        raise RuntimeError(f"h2load had failures:\n{done.stdout}")
    cpu = (_children_cpu() - before) / n * 1e6
    return float(re.search(r"finished in [0-9.]+m?s, ([0-9.]+) req/s", done.stdout).group(1)), cpu, n


def jobgate_rate(port: int, doc: Path, n: int, procs: int) -> tuple[float, float, int]:
    """calls/s, CPU µs per call, and the calls the server answered (the probe and the
    warm-up included)."""
    command = [sys.executable, "-m", "jobgate.cli", "bench", "--server", f"127.0.0.1:{port}", "--requests", str(n), "--concurrency", str(INFLIGHT), "--connections", "1", "--procs", str(procs), "--document", str(doc), "--warmup", "0.5", "--format", "json"]
    result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert result["statuses"] == {"OK": n}, result["statuses"]
    return result["calls_per_s"], result["client_cpu_us_per_call"], result["calls_sent"] + 1


def run(quick: bool) -> dict:
    if shutil.which("h2load") is None:
        print("  client: h2load is missing (apt-get install nghttp2-client): the comparison is skipped", file=sys.stderr)
        return {"rows": [], "targets": []}
    rounds, n = (3, 4000) if quick else (7, 10000)
    raw = documents.jobspec()
    request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=raw), dry_run=True).SerializeToString()
    rates: dict[str, list[float]] = {"h2load": [], "jobgate bench, 1 process": [], "jobgate bench, 2 processes": []}
    cpu: dict[str, list[float]] = {name: [] for name in rates}
    served: dict[str, list[float]] = {name: [] for name in rates}  # the server's CPU µs per call
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="jobgate-client-") as tmp:
        body, doc = Path(tmp) / "body.bin", Path(tmp) / "job.json"
        body.write_bytes(b"\x00" + len(request).to_bytes(4, "big") + request)  # one gRPC length-prefixed message
        doc.write_bytes(raw)
        proc, port = start(1, Path(tmp))
        try:
            h2load_rate(port, body, 1000)  # warm the server
            for _ in range(rounds):
                for name, measure in (("h2load", lambda: h2load_rate(port, body, n)), ("jobgate bench, 1 process", lambda: jobgate_rate(port, doc, n, 1)), ("jobgate bench, 2 processes", lambda: jobgate_rate(port, doc, n, 2))):
                    spent = server_cpu(proc.pid)
                    rate, per_call, answered = measure()
                    rates[name].append(rate)
                    cpu[name].append(per_call)
                    served[name].append((server_cpu(proc.pid) - spent) / answered * 1e6)
                load.append(os.getloadavg()[0])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    bench = f"Admit dry run, {INFLIGHT} in flight on one connection, one server process (median of {rounds} rounds of {n:,} calls; load average {min(load):.1f} to {max(load):.1f})"
    rows = [{"bench": bench, "impl": name, "value": statistics.median(r), "unit": "calls/s", "cpu_us_per_call": statistics.median(cpu[name]), "server_cpu_us_per_call": statistics.median(served[name])} for name, r in rates.items()]
    targets = []
    for name in ("jobgate bench, 1 process", "jobgate bench, 2 processes"):
        ratio = statistics.median(j / h for j, h in zip(rates[name], rates["h2load"], strict=True))
        targets.append({"target": f"{name} >= 0.9 x h2load throughput", "ratio": ratio, "goal": 0.9, "ok": ratio >= 0.9, "how": "per round: jobgate bench calls/s / h2load req/s, same server and load"})
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, first: f"  {r['impl']:<32} {r['value']:10.1f} {r['unit']}   {r['value'] / first['value']:5.2f}x h2load   client CPU {r['cpu_us_per_call']:6.1f} µs/call   server CPU {r['server_cpu_us_per_call']:6.1f} µs/call")


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
