"""The service against the transport floor: `jobgate serve` beside a bare grpcio
server (benchmarks/echo_server.py) that answers, byte for byte, what jobgate answers
the same request. Both are driven by h2load (Debian's nghttp2-client, sending the
same gRPC frames from C, so the client weighs on both sides alike and little) over
one connection. Every target is a ratio of jobgate to the echo measured in the same
rounds; rounds are interleaved (within a round the order flips every other round)
and a ratio is the median of the per-round ratios, so a neighbour that slows one
round slows both sides of it.

- `Admit` dry run of a 2 KB JobSpec (the request encoded once, as a gateway forwards
  it), 8 calls in flight: calls/s at least 0.6x the echo's.
- The health `Check`: at least 0.8x the echo answering the health response: what
  watching a call costs when the call itself does nothing.
- `Admit` with records opened, on SQLite and on PostgreSQL (`scripts/postgres`, a
  database of its own, dropped afterwards): at least 0.45x the echo answering a real
  admission's response (job ids are all one length, so every answer is that size).
  The requests carry no idempotency key, so each of the same bytes is an admission
  of its own and opens a record. Rounds are bounded in calls, so the stores stay
  small. Beside them in each round, one-row commits on the same PostgreSQL, one at
  a time in autocommit: a commit group is at least one durable commit, so 8 calls in
  flight open at most 8 records per commit; that ceiling, against the same round's
  echo, is printed with the target (what the disk's flush leaves to reach).
- `Admit` p99 at most 1.5x the echo's p99 at the same offered rate: h2load `--rps`
  of LOAD times the echo's `Admit` calls/s in the same round (half the throughput
  goal: a service that meets it is half busy there; the same rate for both sides),
  each call's time from h2load's `--log-file`. An offered rate and not a fixed concurrency: with 8
  calls always in flight a call takes 8 / throughput (Little's law), and the p99
  ratio would only repeat the throughput target; one call at a time is no load. Not
  a Python client either: it could not hold thousands of calls a second steadily on
  two shared cores, and its own cost per call would blur both sides. h2load sends
  the calls due every 10 ms together, at most 8 in flight, and times a call from
  when it sends it: a server that falls behind the rate makes h2load hold calls back
  untimed, so the target also needs the calls sent at SUSTAINED of the offered rate
  or more (first call to last).
- `AdmitBatch` of 256 JobSpecs (dry run), one call at a time: its time per call at
  most 1.1x the echo's for the same request and response plus in-process
  `Validator.check_many` of the same 256 documents: the service adds at most 10% to
  transport plus core. The echo is sent the same request bytes and answers jobgate's
  own response bytes, so both carry the same bytes each way. The three sides are
  measured BATCH_TURNS times a round, the order flipping each time.
- The typed path: `Admit` of the same JobSpec as a typed message, reported beside the
  bytes path against the same echo, with the two paths' ratio, but not judged: a
  ratio of two jobgate calls is jobgate against itself, and it grows whenever the
  bytes path gets faster.

The servers run as deployed: the request log on (one JSON line per call, stderr to a
file, as to a collector) and the metrics endpoint on. At the end every call must
have been answered OK (h2load sees only the HTTP status, gRPC's is in the trailers),
and the last group of the table counts the log lines written against the calls
handled; the group before it, the machine during the run: the share of its CPU time
the host gave to other guests (steal, from /proc/stat), which no ratio removes, and
the load average. Beside each rate: the server's CPU time and context switches per call (the
thread hand-offs a call costs it).

    python -m benchmarks service [--quick]
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

import jobgate
from benchmarks import documents, print_grouped, run_alone
from jobgate.server.app import wait_serving
from jobgate.v1 import admission_pb2, jobspec_pb2

ROOT = Path(__file__).resolve().parents[1]
BATCH = 256
# AdmitBatch sides are measured this many times a round, the order flipping each time:
# its ratio adds two times, each a few hundred ms, so it needs more pairs than the rest.
BATCH_TURNS = 3
INFLIGHT = 8
LOAD = 0.3  # the offered rate of the p99 target, as a fraction of the echo's Admit calls/s
SUSTAINED = 0.95  # achieved/offered below this: the server fell behind the rate
ADMIT = "/jobgate.v1.AdmissionService/Admit"
ADMIT_BATCH = "/jobgate.v1.AdmissionService/AdmitBatch"
CHECK = "/grpc.health.v1.Health/Check"
H2LOAD_MISSING = "h2load is missing: apt-get install nghttp2-client (scripts/dev bench installs it)"
GOALS = {  # target -> (goal, at least)
    "Admit dry run >= 0.6 x bare grpcio calls/s": (0.6, True),
    "health Check >= 0.8 x bare grpcio calls/s": (0.8, True),
    "Admit, records opened >= 0.45 x bare grpcio (SQLite)": (0.45, True),
    "Admit, records opened >= 0.45 x bare grpcio (PostgreSQL)": (0.45, True),
    "Admit p99 <= 1.5 x bare grpcio p99, same offered rate": (1.5, False),
    "AdmitBatch time <= 1.1 x (echo + check_many)": (1.1, False),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int) -> grpc.Channel:
    return wait_serving(f"127.0.0.1:{port}")


def log_path(tmp: Path, name: str) -> Path:
    """Where `start` sends a server's stderr: its request log and every other line."""
    return tmp / f"serve-{name}.log"


def start(workers: int, tmp: Path, limits: str = "", name: str = "", extra: str = "", server: str = "", store: str = "") -> tuple[subprocess.Popen, int]:
    """A server on a free port with an anonymous admin caller; `limits` is the body of
    its [limits] table, `server` more lines of its [server] table, `store` the body of
    its [store] table (default: SQLite in `tmp`), `extra` more tables (without
    [server], [store], [jobs], [limits]). Its stderr goes to `log_path(tmp, name)`, as
    a deployed server's goes to a collector."""
    name = name or str(workers)
    cfg = tmp / f"jobgate-{name}.toml"
    extra = "\n".join(line for line in extra.splitlines() if not line.startswith("[limits]") and not line.startswith("max_document_bytes") and not line.startswith("max_depth"))
    store = store or f'path = "{tmp / ("store" + name)}"'
    cfg.write_text(f'{extra}\n[server]\nallow_anonymous = true\n{server}\n[store]\n{store}\n[jobs]\nresults_root = "{tmp / "results"}"\n[limits]\n{limits}\n')
    port = free_port()
    with log_path(tmp, name).open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--workers", str(workers)], stderr=log)
    try:
        wait_ready(port).close()
    except BaseException:
        proc.kill()  # never left serving behind a benchmark that stopped
        proc.wait()
        raise
    return proc, port


def unary_requests(doc: bytes) -> tuple[bytes, bytes, bytes]:
    """The encoded requests of the unary rows: `Admit` of `doc` as a dry run and as an
    admission that opens a record, and the health `Check`."""
    return (
        admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=doc), dry_run=True).SerializeToString(),
        admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=doc)).SerializeToString(),
        health_pb2.HealthCheckRequest().SerializeToString(),
    )


def batch_request(doc: bytes) -> bytes:
    """The encoded AdmitBatch of the AdmitBatch rows: a dry run of `doc`, BATCH times."""
    return admission_pb2.AdmitBatchRequest(documents=[admission_pb2.Document(raw=doc)] * BATCH, dry_run=True).SerializeToString()


def stop_all(procs: Iterable[subprocess.Popen], wait: float) -> None:
    """SIGTERM to every server at once, then each given `wait` seconds to drain before
    it is killed: a benchmark never leaves one serving."""
    procs = list(procs)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()


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


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def postgres_database() -> str | None:
    """A database of its own on the PostgreSQL of `scripts/postgres`; None without one."""
    try:
        base = subprocess.run([str(ROOT / "scripts" / "postgres"), "start"], capture_output=True, text=True, check=True).stdout.strip()
        import psycopg

        name = f"jobgate_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return base.rsplit("/", 1)[0] + f"/{name}"
    except (OSError, subprocess.CalledProcessError, ImportError):
        return None


class DurableCommits:
    """One-row commits on the PostgreSQL the records are opened on, one at a time in
    autocommit (synchronous_commit as the server has it): what making one commit
    durable takes there, round trip and WAL flush. A commit group is at least one
    such commit, so with INFLIGHT calls in flight the service admits at most INFLIGHT
    per durable commit, whatever it does around it."""

    def __init__(self, url: str, commits: int) -> None:
        import psycopg

        self.commits = commits
        self.db = psycopg.connect(url, autocommit=True)
        self.db.execute("CREATE TABLE durable_commits (n bigint)")

    def __call__(self) -> Run:
        began, seconds = time.process_time(), []
        for n in range(self.commits):
            started = time.perf_counter()
            self.db.execute("INSERT INTO durable_commits VALUES (%s)", (n,))
            seconds.append(time.perf_counter() - started)
        return Run(1 / statistics.median(seconds), (time.process_time() - began) / self.commits * 1e6)

    def close(self) -> None:
        self.db.close()


def drop_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message, as h2load sends it as the request body."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


@dataclass
class Run:
    rate: float  # calls/s, as h2load counts them (the whole run, connection included)
    cpu_us: float  # the server's CPU time per call
    latencies_us: list[int] = field(default_factory=list)  # with a log file: each call's time
    sent_over_s: float = 0.0  # with a log file: from the first call sent to the last
    offered: int = 0  # with a rate: calls/s offered
    switches: float = 0.0  # the server's context switches per call (`context_switches`)
    peer_cpu_us: float | None = None  # the CPU time per call of a process beside the server (its PostgreSQL)


def machine_ticks() -> tuple[int, int] | None:
    """(steal, all) clock ticks of the machine's CPUs so far, from /proc/stat: the time
    the host gave to others while this guest had work is noise no ratio removes."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7], sum(fields[:8])) if len(fields) >= 8 else None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_cpu(url: str) -> Callable[[], float] | None:
    """The CPU seconds so far of the PostgreSQL cluster behind `url`, when it runs on
    this machine (None otherwise): its postmaster's, with what its ended children used
    (reaped into the postmaster's own count), and each live child's. It shares the
    cores with the servers and h2load, so what it spends per record is part of what a
    record costs here."""
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as db:
            backend = db.execute("SELECT pg_backend_pid()").fetchone()[0]
            # Read while the connection is open: its backend ends with it.
            postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
        Path(f"/proc/{postmaster}/stat").read_text()
    except (OSError, psycopg.Error):
        return None
    ticks = os.sysconf("SC_CLK_TCK")

    def seconds() -> float:
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile: reaped into the postmaster's count
                continue
            if proc.name == str(postmaster):
                total += sum(int(f) for f in fields[11:15])
            elif fields[1] == str(postmaster):
                total += int(fields[11]) + int(fields[12])
        return total / ticks

    return seconds


def context_switches(pid: int) -> int:
    """Context switches of `pid`'s threads so far, voluntary or not: each time one of
    its threads hands the GIL or a call to another and waits to be woken, the kernel
    counts one or two. A thread that ended takes its count with it (the servers' pool
    threads live as long as they do)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in status.splitlines() if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))
    return total


def h2load(port: int, path: str, body: Path, n: int, pid: int, inflight: int = INFLIGHT, rps: int | None = None, log: Path | None = None, peer: Callable[[], float] | None = None) -> Run:
    """`n` calls of `path` with `body` over one connection, `inflight` at a time; with
    `rps`, offered at that rate, with `log`, each call's time kept, and with `peer`
    (CPU seconds so far), what it spent per call beside the server."""
    command = ["h2load", "-n", str(n), "-c", "1", "-m", str(inflight), "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers"]
    if rps:
        command += ["--rps", str(rps)]
    if log:
        log.unlink(missing_ok=True)  # h2load appends
        command += ["--log-file", str(log)]
    before, switched, beside = cpu_seconds(pid), context_switches(pid), peer() if peer else 0.0
    done = subprocess.run([*command, f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True)
    cpu, switches = cpu_seconds(pid) - before, (context_switches(pid) - switched) / n
    peer_cpu_us = (peer() - beside) / n * 1e6 if peer else None
    if not re.search(rf"\b{n} succeeded, 0 failed", done.stdout):
        raise RuntimeError(f"h2load had failures on {path}:\n{done.stdout}")
    rate = float(re.search(r"finished in [0-9.]+m?s, ([0-9.]+) req/s", done.stdout).group(1))
    if not log:
        return Run(rate, cpu / n * 1e6, switches=switches, peer_cpu_us=peer_cpu_us)
    calls = [line.split("\t") for line in log.read_text().splitlines()]
    sent = [int(c[0]) for c in calls]
    return Run(rate, cpu / n * 1e6, [int(c[2]) for c in calls], (max(sent) - min(sent)) / 1e6, rps or 0, switches)


def answer(port: int, path: str, request: bytes) -> bytes:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return channel.unary_unary(path, request_serializer=None, response_deserializer=None)(request, timeout=30)


def start_echo(tmp: Path, answers: dict[str, bytes]) -> tuple[subprocess.Popen, int]:
    """The echo server, `/echo.Echo/NAME` answering `answers[NAME]`, once it answers."""
    files = []
    for method, response in answers.items():
        (tmp / f"echo-{method}.bin").write_bytes(response)
        files.append(f"{method}={tmp / f'echo-{method}.bin'}")
    port = free_port()
    with (tmp / "echo.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.echo_server", str(port), files[0].split("=", 1)[1], *files], stderr=log)
    deadline = time.monotonic() + 30
    while True:
        try:
            answer(port, "/echo.Echo/Echo", b"")
            return proc, port
        except grpc.RpcError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.1)


def scrape(metrics_port: int) -> dict[str, float]:
    """Calls handled, those not OK, and request log lines dropped, from /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = {"handled": 0.0, "not_ok": 0.0, "dropped": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "grpc_server_handled_total":
                out["handled"] += sample.value
                if sample.labels.get("grpc_code") != "OK":
                    out["not_ok"] += sample.value
            elif sample.name == "jobgate_log_lines_dropped_total":
                out["dropped"] += sample.value
    return out


def request_log_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if b'"logger":"jobgate.requests"' in line)


def per_round(num: list[float], den: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def unmeasured(reason: str, names=GOALS) -> list[dict]:
    return [{"target": name, "ratio": float("nan"), "goal": GOALS[name][0], "ok": False, "how": reason} for name in names]


def target(name: str, ratio: float, how: str, also: bool = True) -> dict:
    goal, at_least = GOALS[name]
    return {"target": name, "ratio": ratio, "goal": goal, "ok": also and (ratio >= goal if at_least else ratio <= goal), "how": how}


def run(quick: bool) -> dict:
    if shutil.which("h2load") is None:
        print(f"  service: {H2LOAD_MISSING}; its targets are not measured", file=sys.stderr)
        return {"rows": [], "targets": unmeasured(H2LOAD_MISSING)}
    # Many short rounds rather than a few long ones: the two sides of a ratio are
    # measured within a second or two of each other, under the same neighbours.
    rounds = 5 if quick else 11
    n = 1500 if quick else 3000  # calls per throughput measurement
    n_records = 1000 if quick else 2000  # bounded: every one opens a record
    n_latency = 1500 if quick else 3000  # its p99 is about the 15th (30th) slowest call, not one stall
    n_batch = 100 if quick else 200  # a few hundred ms a side: the CPU clock ticks every 10 ms
    n_commits = 100  # durable one-row commits per round, beside the records
    doc = documents.jobspec()
    dry, real, health = unary_requests(doc)
    typed = admission_pb2.AdmitRequest(document=admission_pb2.Document(jobspec=json_format.Parse(doc, jobspec_pb2.JobSpec())), dry_run=True).SerializeToString()
    batch = batch_request(doc)
    validator = jobgate.Validator()
    batch_docs = [doc] * BATCH
    rows: list[dict] = []
    targets: list[dict] = []
    load, ticks = os.getloadavg()[0], machine_ticks()
    with tempfile.TemporaryDirectory(prefix="jobgate-service-") as t:
        tmp = Path(t)
        bodies = {}
        for what, message in (("dry", dry), ("typed", typed), ("real", real), ("batch", batch), ("health", health)):
            bodies[what] = tmp / f"{what}.body"
            bodies[what].write_bytes(frame(message))
        procs: dict[str, subprocess.Popen] = {}
        ports: dict[str, int] = {}
        metrics_ports: dict[str, int] = {}
        url = postgres_database()
        commits = None
        try:
            for name, store in (("SQLite", ""), ("PostgreSQL", f'url = "{url}"')):
                if name == "PostgreSQL" and not url:
                    continue
                metrics_ports[name] = free_port()
                procs[name], ports[name] = start(1, tmp, name=name, store=store, server=f'request_log = "info"\nmetrics_listen = "127.0.0.1:{metrics_ports[name]}"')
            sqlite = ports["SQLite"]
            # The echo answers what jobgate answers: the bytes of its responses.
            dry_answer = answer(sqlite, ADMIT, dry)
            assert answer(sqlite, ADMIT, dry) == dry_answer, "a dry run answers the same bytes every time"
            answers = {"Admit": dry_answer, "Check": answer(sqlite, CHECK, health), "AdmitRecord": answer(sqlite, ADMIT, real), "AdmitBatch": answer(sqlite, ADMIT_BATCH, batch)}
            assert admission_pb2.AdmitResponse.FromString(answers["AdmitRecord"]).job_id, "an admission opens a record"
            assert len(answer(sqlite, ADMIT, real)) == len(answers["AdmitRecord"]), "every admission of the same bytes answers the same size"
            assert len(admission_pb2.AdmitBatchResponse.FromString(answers["AdmitBatch"]).results) == BATCH
            procs["echo"], echo = start_echo(tmp, answers)
            for method, response in answers.items():
                assert answer(echo, f"/echo.Echo/{method}", b"") == response
            pid = {name: proc.pid for name, proc in procs.items()}

            def measure(port: int, path: str, body: str, count: int, server: str, **kw) -> Callable[[], Run]:
                return lambda: h2load(port, path, bodies[body], count, pid[server], **kw)

            echo_admit = measure(echo, "/echo.Echo/Admit", "dry", n, "echo")
            for _ in range(2):  # warm every path
                for fn in (echo_admit, measure(sqlite, ADMIT, "dry", 1000, "SQLite"), measure(sqlite, ADMIT, "typed", 1000, "SQLite"), measure(echo, "/echo.Echo/Check", "health", 1000, "echo"), measure(sqlite, CHECK, "health", 1000, "SQLite")):
                    fn()
            for name in ("SQLite", "PostgreSQL"):
                if name in ports:
                    measure(ports[name], ADMIT, "real", 200, name)()
            postgres_cpu = cluster_cpu(url) if url else None
            if url:
                commits = DurableCommits(url, n_commits)
            measure(echo, "/echo.Echo/AdmitBatch", "batch", 5, "echo", inflight=1)()
            measure(sqlite, ADMIT_BATCH, "batch", 5, "SQLite", inflight=1)()
            latency_log = tmp / "h2load-latency.log"

            def at_offered_rate(port: int, path: str, server: str) -> Callable[[], Run]:
                # The rate follows the echo's Admit calls/s of the round, measured just before.
                return lambda: h2load(port, path, bodies["dry"], n_latency, pid[server], rps=max(1, round(LOAD * runs["Admit"]["echo"][-1].rate)), log=latency_log)

            def core() -> Run:
                began, cpu = time.perf_counter(), time.process_time()
                for _ in range(n_batch):
                    validator.check_many(batch_docs)
                return Run(n_batch / (time.perf_counter() - began), (time.process_time() - cpu) / n_batch * 1e6)

            # Each group is measured side by side in every round: the echo and what jobgate
            # does for the same calls.
            groups: dict[str, dict[str, Callable[[], Run]]] = {
                "Admit": {"echo": echo_admit, "bytes": measure(sqlite, ADMIT, "dry", n, "SQLite"), "typed": measure(sqlite, ADMIT, "typed", n, "SQLite")},
                "Check": {"echo": measure(echo, "/echo.Echo/Check", "health", n, "echo"), "jobgate": measure(sqlite, CHECK, "health", n, "SQLite")},
                "records": {
                    "echo": measure(echo, "/echo.Echo/AdmitRecord", "real", n_records, "echo"),
                    **{name: measure(ports[name], ADMIT, "real", n_records, name, peer=postgres_cpu if name == "PostgreSQL" else None) for name in ("SQLite", "PostgreSQL") if name in ports},
                },
                **({"commits": {"commit": commits}} if commits is not None else {}),
                "latency": {"echo": at_offered_rate(echo, "/echo.Echo/Admit", "echo"), "jobgate": at_offered_rate(sqlite, ADMIT, "SQLite")},
                "AdmitBatch": {"echo": measure(echo, "/echo.Echo/AdmitBatch", "batch", n_batch, "echo", inflight=1), "jobgate": measure(sqlite, ADMIT_BATCH, "batch", n_batch, "SQLite", inflight=1), "core": core},
            }
            runs: dict[str, dict[str, list[Run]]] = {g: {k: [] for k in fns} for g, fns in groups.items()}
            for r in range(rounds):
                for g, fns in groups.items():
                    for turn in range(BATCH_TURNS if g == "AdmitBatch" else 1):
                        for k in list(fns)[:: 1 if (r + turn) % 2 == 0 else -1]:
                            runs[g][k].append(fns[k]())
            deployed = {name: scrape(metrics_ports[name]) for name in metrics_ports}
        finally:
            stop_all(procs.values(), 60)
            if commits is not None:
                commits.close()
            if url:
                drop_database(url)
        lines = {name: request_log_lines(log_path(tmp, name)) for name in deployed}
    for name, seen in deployed.items():
        if seen["not_ok"]:
            raise RuntimeError(f"{seen['not_ok']:.0f} of the calls to the {name} server were not answered OK: its figures are not those of admissions")

    def rates(g: str, k: str) -> list[float]:
        return [run.rate for run in runs[g][k]]

    def throughput_rows(bench: str, g: str, labels: dict[str, str], notes: dict[str, str] | None = None) -> None:
        for k, label in labels.items():
            row = {"bench": bench, "impl": label, "value": statistics.median(rates(g, k)), "unit": "calls/s", "x": per_round(rates(g, k), rates(g, "echo")), "cpu_us": statistics.median(run.cpu_us for run in runs[g][k]), "switches": statistics.median(run.switches for run in runs[g][k]), "rounds": rates(g, k)}
            beside = [run.peer_cpu_us for run in runs[g][k] if run.peer_cpu_us is not None]
            if beside:
                row["note"] = f"PostgreSQL's own processes {statistics.median(beside):,.0f} µs/call beside it, on the same cores"
            if notes and k in notes:
                row["note"] = notes[k]
            rows.append(row)

    how = f"h2load 1 connection, {INFLIGHT} in flight; median per-round jobgate / echo calls/s"
    setting = f"h2load, 1 connection, {INFLIGHT} in flight, median of {rounds} rounds"
    echo_label = "bare grpcio echo (the transport floor)"
    typed_note = f"{per_round(rates('Admit', 'bytes'), rates('Admit', 'typed')):.2f} x the bytes Admit's time a call (reported, not a target)"
    throughput_rows(f"Admit dry run, 2 KB JobSpec as bytes ({setting} of {n:,} calls)", "Admit", {"echo": echo_label, "bytes": "jobgate Admit", "typed": "jobgate Admit, the JobSpec as a typed message"}, {"typed": typed_note})
    targets.append(target("Admit dry run >= 0.6 x bare grpcio calls/s", per_round(rates("Admit", "bytes"), rates("Admit", "echo")), how))
    throughput_rows(f"health Check ({setting} of {n:,} calls)", "Check", {"echo": echo_label, "jobgate": "jobgate health Check"})
    targets.append(target("health Check >= 0.8 x bare grpcio calls/s", per_round(rates("Check", "jobgate"), rates("Check", "echo")), how))
    stores = [name for name in ("SQLite", "PostgreSQL") if name in ports]
    throughput_rows(f"Admit, records opened ({setting} of {n_records:,} calls)", "records", {"echo": "bare grpcio echo, a record's response", **{name: f"jobgate Admit, {name} store" for name in stores}})
    bound = ""
    if "commits" in runs:
        # A round's commits are measured within the same round as its records.
        most = [INFLIGHT * run.rate for run in runs["commits"]["commit"]]
        ceiling = per_round(most, rates("records", "echo"))
        latency = statistics.median(1e6 / run.rate for run in runs["commits"]["commit"])
        bench = f"PostgreSQL, one durable commit at a time (a one-row insert in autocommit, median of {n_commits} per round, {rounds} rounds)"
        rows.append({"bench": bench, "impl": "durable commits", "value": statistics.median(run.rate for run in runs["commits"]["commit"]), "unit": "commits/s", "note": f"median {latency:,.0f} µs a commit"})
        rows.append({"bench": bench, "impl": f"the most {INFLIGHT} calls in flight can open", "value": statistics.median(most), "unit": "calls/s", "x": ceiling, "note": f"{INFLIGHT} per durable commit; x against the echo's record response"})
        bound = f"; {INFLIGHT} in flight open at most {ceiling:.2f} x here ({INFLIGHT} per durable commit, median {latency:,.0f} µs)"
    for name in stores:
        note = bound if name == "PostgreSQL" else ""
        targets.append(target(f"Admit, records opened >= 0.45 x bare grpcio ({name})", per_round(rates("records", name), rates("records", "echo")), how + "; each call opens a record" + note))
    if "PostgreSQL" not in stores:
        targets += unmeasured("PostgreSQL could not be started (scripts/postgres)", ["Admit, records opened >= 0.45 x bare grpcio (PostgreSQL)"])

    p99 = {k: [percentile(run.latencies_us, 99) for run in runs["latency"][k]] for k in ("echo", "jobgate")}
    # A server that keeps pace lets h2load send the n calls over (n - 1) / rate seconds;
    # one that falls behind holds calls back in h2load, where their wait is not timed.
    def pace(k: str) -> float:
        return statistics.median(min(1.0, (n_latency - 1) / run.offered / run.sent_over_s) for run in runs["latency"][k])

    sustained = pace("jobgate")
    offered = statistics.median(run.offered for run in runs["latency"]["jobgate"])
    bench = f"Admit dry run at {LOAD} x the echo's calls/s offered, median {offered:,.0f} (h2load --rps, 1 connection, up to {INFLIGHT} in flight, median of {rounds} rounds of {n_latency:,} calls)"
    for k, label in (("echo", echo_label), ("jobgate", "jobgate Admit")):
        p50 = statistics.median(percentile(run.latencies_us, 50) for run in runs["latency"][k])
        rows.append({"bench": bench, "impl": label, "value": statistics.median(p99[k]), "unit": "µs p99", "x": per_round(p99[k], p99["echo"]), "rounds": p99[k], "note": f"p50 {p50:6.0f} µs; sent at {pace(k):.2f} x the offered rate"})
    note = "" if sustained >= SUSTAINED else f"; NOT SUSTAINED: jobgate kept only {sustained:.2f} x the rate"
    targets.append(target("Admit p99 <= 1.5 x bare grpcio p99, same offered rate", per_round(p99["jobgate"], p99["echo"]), f"h2load --rps {LOAD} x the round's echo calls/s; median per-round jobgate / echo p99{note}", sustained >= SUSTAINED))

    batch_time = {k: [1 / rate for rate in rates("AdmitBatch", k)] for k in ("echo", "jobgate", "core")}
    floor = [e + c for e, c in zip(batch_time["echo"], batch_time["core"], strict=True)]
    sizes = f"request {len(batch) / 1000:,.0f} KB, response {len(answers['AdmitBatch']) / 1000:,.1f} KB to both servers"
    bench = f"AdmitBatch dry run, {BATCH} JobSpecs, one call at a time ({sizes}; h2load -m 1; median of {rounds} x {BATCH_TURNS} turns of {n_batch} calls)"
    batch_cpu = {k: statistics.median(run.cpu_us for run in runs["AdmitBatch"][k]) for k in ("echo", "jobgate", "core")}
    for label, times, cpu in (
        ("echo + check_many (transport plus core)", floor, batch_cpu["echo"] + batch_cpu["core"]),
        (echo_label, batch_time["echo"], batch_cpu["echo"]),
        ("in-process Validator.check_many (the core)", batch_time["core"], batch_cpu["core"]),
        ("jobgate AdmitBatch", batch_time["jobgate"], batch_cpu["jobgate"]),
    ):
        rows.append({"bench": bench, "impl": label, "value": statistics.median(times) * 1e3, "unit": "ms/call", "x": per_round(times, floor), "cpu_us": cpu, "rounds": [t * 1e3 for t in times]})
    targets.append(target("AdmitBatch time <= 1.1 x (echo + check_many)", per_round(batch_time["jobgate"], floor), f"median per-turn AdmitBatch time / (echo time + check_many time), {rounds} x {BATCH_TURNS} turns"))

    after = machine_ticks()
    if ticks and after and after[1] > ticks[1]:
        stolen = 100 * (after[0] - ticks[0]) / (after[1] - ticks[1])
        rows.append({"bench": "the machine during the run", "impl": "CPU time the host gave to others (steal)", "value": stolen, "unit": "%", "note": f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"})
    for name, seen in deployed.items():
        rows.append({"bench": "the servers as deployed: request log to a file, metrics on", "impl": f"jobgate ({name} store): request log lines", "value": lines[name], "unit": "lines", "note": f"for {seen['handled']:,.0f} calls handled, all OK; {seen['dropped']:,.0f} lines dropped (counted)"})
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        out = f"  {r['impl']:<46} {r['value']:10.{2 if r['unit'] in ('ms/call', '%') else 0}f} {r['unit']:<8}"
        if "x" in r:
            out += f" {r['x']:6.2f}x"
        if r.get("cpu_us"):
            out += f"   CPU {r['cpu_us']:5.0f} µs/call"
        if r.get("switches"):
            out += f", {r['switches']:4.1f} switches/call"
        if "note" in r:
            out += f"   {r['note']}"
        return out

    print_grouped(result["rows"], line, lambda bench: f"{bench}  (x = against the first row, median of per-round ratios)" if not bench.startswith(("the servers", "the machine")) else bench)


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
