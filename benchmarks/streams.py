"""Health checks and admissions while many streams are open: latency p50/p99 of the
standard health Check and of a dry-run Admit, sent on a connection of their own,
while N WatchJob streams (or N idle AdmitStreams) from one client hold the server.
Streams beyond the limits are refused; what matters is that nothing else waits.

    python -m benchmarks streams [--quick]          # within `python -m benchmarks`
    python -m benchmarks.streams --streams 1000     # this section alone

With `--server-path DIR`, the server runs the jobgate package found in DIR (another
checkout's `python/`, with its built core) and only the settings it knows are
passed: the same measurement, before and after a change.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks import documents, print_grouped
from benchmarks.service import free_port, percentile, wait_ready
from jobgate.v1 import admission_pb2, admission_pb2_grpc, jobs_pb2, jobs_pb2_grpc

STREAMS = 1000
CHANNELS = 10  # the streams are spread over a few connections, as one busy client would
DEADLINE = 2.0  # seconds a measured call may take before it counts as timed out


def start(tmp: Path, name: str, server: dict, server_path: str | None) -> tuple[subprocess.Popen, int]:
    cfg = tmp / f"{name}.toml"
    lines = ["[server]", "allow_anonymous = true", *(f"{k} = {v}" for k, v in server.items())]
    lines += ["[store]", f'path = "{tmp / name / "store"}"', "[jobs]", f'results_root = "{tmp / name / "results"}"']
    cfg.write_text("\n".join(lines) + "\n")
    port = free_port()
    env = dict(os.environ)
    if server_path:
        env["PYTHONPATH"] = server_path
    proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL, env=env)
    wait_ready(port).close()
    return proc, port


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class Idle:
    """An AdmitStream's requests: none until the stream is released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __iter__(self):
        self.release.wait()
        yield from ()


def open_streams(port: int, kind: str, n: int, job_id: str) -> tuple[list, list, list]:
    """N streams of `kind` over CHANNELS connections; (channels, calls, idle requests)."""
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(CHANNELS)]
    calls, idle = [], []
    for i in range(n):
        channel = channels[i % CHANNELS]
        if kind == "WatchJob":
            calls.append(jobs_pb2_grpc.JobServiceStub(channel).WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id)))
        else:
            requests = Idle()
            idle.append(requests)
            calls.append(admission_pb2_grpc.AdmissionServiceStub(channel).AdmitStream(iter(requests)))
    return channels, calls, idle


def settle(calls: list, refusals: int, wait: float) -> int:
    """Waits until `refusals` calls have ended (the server refused them) or `wait`
    seconds went by; returns how many ended."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        ended = sum(call.done() for call in calls)
        if ended >= refusals:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the open ones are served their history and sit idle
    return sum(call.done() for call in calls)


def measure(port: int, rounds: int) -> dict:
    """Health Check and dry-run Admit, interleaved, on a fresh connection."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        check = health_pb2.HealthCheckRequest()
        admit = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=documents.jobspec()), dry_run=True)
        samples: dict[str, list[float]] = {"health": [], "admit": []}
        timeouts = {"health": 0, "admit": 0}
        for _ in range(rounds):
            for name, call, request in (("health", health.Check, check), ("admit", stub.Admit, admit)):
                t = time.perf_counter()
                try:
                    call(request, timeout=DEADLINE)
                    samples[name].append(time.perf_counter() - t)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise
                    timeouts[name] += 1
                if timeouts[name] >= 5:  # starved: a few more would only take time
                    return {"samples": samples, "timeouts": timeouts, "rounds": rounds}
    return {"samples": samples, "timeouts": timeouts, "rounds": rounds}


def scenario(tmp: Path, name: str, server: dict, kind: str, n: int, rounds: int, server_path: str | None, expect_open: int) -> dict:
    proc, port = start(tmp, name, server, server_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            job_id = admission_pb2_grpc.AdmissionServiceStub(channel).Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=documents.jobspec())), timeout=30).job_id
        channels, calls, idle = open_streams(port, kind, n, job_id)
        try:
            ended = settle(calls, n - expect_open, wait=60)
            measured = measure(port, rounds)
            measured.update(open=n - ended, refused=ended, rss_mib=rss_mib(proc.pid), threads=threads(proc.pid))
        finally:
            for requests in idle:
                requests.release.set()
            for call in calls:
                call.cancel()
            for c in channels:
                c.close()
        return measured
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rows_of(bench: str, measured: dict) -> list[dict]:
    out = []
    for name, label in (("health", "health Check"), ("admit", "Admit (2 KB JobSpec, dry run)")):
        samples = measured["samples"][name]
        timed_out = measured["timeouts"][name]
        out.append(
            {
                "bench": bench,
                "impl": label,
                "p50_us": percentile(samples, 50) * 1e6 if samples else None,
                "p99_us": percentile(samples, 99) * 1e6 if samples else None,
                "timeouts": timed_out,
                "calls": len(samples) + timed_out,
                "open": measured.get("open", 0),
                "refused": measured.get("refused", 0),
                "rss_mib": measured.get("rss_mib", 0.0),
                "threads": measured.get("threads", 0),
            }
        )
    return out


def run(quick: bool, streams: int = STREAMS, server_path: str | None = None) -> dict:
    rounds = 200 if quick else 1000
    before = server_path is not None  # a server that knows no stream settings
    defaults = {"max_streams": 256, "max_streams_per_account": 64}
    raised = {} if before else {"max_streams": streams, "max_streams_per_account": streams}
    limits = "the server's own settings" if before else "default limits"
    scenarios = [
        ("no streams open", "none", {}, "WatchJob", 0, 0),
        (f"{streams} WatchJob streams, {limits}", "watch-default", {}, "WatchJob", streams, min(streams, defaults["max_streams_per_account"])),
        (f"{streams} idle AdmitStreams, {limits}", "admit-default", {}, "AdmitStream", streams, min(streams, defaults["max_streams_per_account"])),
    ]
    if not before:
        scenarios.append((f"{streams} WatchJob streams, limits raised to {streams}: all open", "watch-raised", raised, "WatchJob", streams, streams))
    rows, targets = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for title, name, server, kind, n, expect_open in scenarios:
            measured = scenario(Path(tmp), name, server, kind, n, rounds, server_path, n if before else expect_open)
            rows += rows_of(f"latency while {title}", measured)
            if n:
                timed_out = sum(measured["timeouts"].values())
                made = timed_out + sum(len(v) for v in measured["samples"].values())
                targets.append({"target": f"nothing times out: {title}", "ratio": timed_out, "goal": 0, "ok": timed_out == 0, "how": f"calls over {DEADLINE:.0f} s, of {made}"})
    baseline = {r["impl"]: r["p99_us"] for r in rows if r["bench"].endswith("no streams open")}
    for r in rows:
        if "WatchJob" in r["bench"] and r["p99_us"] and baseline.get(r["impl"]):
            ratio = r["p99_us"] / baseline[r["impl"]]
            targets.append({"target": f"{r['impl']} p99, {r['bench'].removeprefix('latency while ')}", "ratio": ratio, "goal": 2.0, "ok": ratio <= 2.0, "how": "p99 / p99 with no streams open"})
    return {"rows": rows, "targets": targets, "cores": os.cpu_count()}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        if r["p50_us"] is None:
            latency = f"{'every call timed out':>32}"
        else:
            latency = f"p50 {r['p50_us']:9.1f} µs  p99 {r['p99_us']:9.1f} µs"
        streams = f"   streams open {r['open']:5d}, refused {r['refused']:5d}; server {r['threads']:5d} threads, {r['rss_mib']:6.1f} MiB" if r["impl"] == "health Check" else ""
        return f"  {r['impl']:<32} {latency}   timeouts {r['timeouts']:4d} of {r['calls']:5d}{streams}"

    print_grouped(result["rows"], line)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--server-path", metavar="DIR", help="run the server from this python/ directory (another checkout)")
    args = parser.parse_args()
    result = run(args.quick, args.streams, args.server_path)
    print_table(result)
    for t in result["targets"]:
        print(f"  [{'met ' if t['ok'] else 'MISS'}] {t['target']:<72} measured {t['ratio']:8.2f} (goal {t['goal']}; {t['how']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
