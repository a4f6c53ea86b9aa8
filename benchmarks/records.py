"""Admission with records opened against dry-run admission, on the same server, for
the SQLite store and for PostgreSQL (started by scripts/postgres). Several client
threads send single Admit calls, as gateways do."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import documents, print_grouped
from benchmarks.service import free_port, wait_ready
from jobgate.v1 import admission_pb2, admission_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]


def postgres_database() -> str | None:
    try:
        base = subprocess.run([str(ROOT / "scripts" / "postgres"), "start"], capture_output=True, text=True, check=True).stdout.strip()
        import psycopg

        name = f"jobgate_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return base.rsplit("/", 1)[0] + f"/{name}"
    except (OSError, subprocess.CalledProcessError, ImportError):
        return None


def rate(stub, request, seconds: float, threads: int = 8, keyed: bool = False) -> float:
    """Admissions per second; with `keyed`, each a copy of `request` carrying an
    idempotency key of its own, as a gateway sends them (the store writes the key in
    the record's transaction)."""
    deadline = time.perf_counter() + seconds

    def loop(_):
        n = 0
        while time.perf_counter() < deadline:
            sent = request
            if keyed:
                sent = admission_pb2.AdmitRequest()
                sent.CopyFrom(request)
                sent.document.idempotency_key = uuid.uuid4().hex
            stub.Admit(sent, timeout=30)
            n += 1
        return n

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(loop, range(threads)))
    return total / (time.perf_counter() - start)


def run(quick: bool) -> dict:
    rows, targets = [], []
    seconds = 2.0 if quick else 5.0
    rounds = 3 if quick else 5
    doc = documents.jobspec()
    backends = [("SQLite", None)]
    url = postgres_database()
    if url:
        backends.append(("PostgreSQL", url))
    with tempfile.TemporaryDirectory() as tmp:
        for name, db_url in backends:
            cfg = Path(tmp) / f"{name}.toml"
            store = f'url = "{db_url}"' if db_url else f'path = "{Path(tmp) / "store"}"'
            cfg.write_text(f'[server]\nallow_anonymous = true\n[store]\n{store}\n[jobs]\nresults_root = "{Path(tmp) / "results"}"\n')
            port = free_port()
            proc = subprocess.Popen([sys.executable, "-m", "jobgate.cli", "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
            try:
                channel = wait_ready(port)
                stub = admission_pb2_grpc.AdmissionServiceStub(channel)
                dry = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=doc), dry_run=True)
                real = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=doc))
                dry_rates, real_rates, keyed_rates = [], [], []
                for _ in range(rounds):  # interleaved rounds, medians
                    dry_rates.append(rate(stub, dry, seconds))
                    real_rates.append(rate(stub, real, seconds))
                    keyed_rates.append(rate(stub, real, seconds, keyed=True))
                channel.close()
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            rows += [
                {"bench": f"Admit, {name} store, 8 client threads", "impl": "dry run", "value": statistics.median(dry_rates)},
                {"bench": f"Admit, {name} store, 8 client threads", "impl": "records opened", "value": statistics.median(real_rates)},
                {"bench": f"Admit, {name} store, 8 client threads", "impl": "records opened, each with an idempotency key", "value": statistics.median(keyed_rates)},
            ]
            ratio = statistics.median(a / b for a, b in zip(real_rates, dry_rates, strict=True))
            targets.append({"target": f"records opened >= 0.3 x dry run ({name})", "ratio": ratio, "goal": 0.3, "ok": ratio >= 0.3, "how": "median per-round admissions/s, opened / dry run"})
            ratio = statistics.median(a / b for a, b in zip(keyed_rates, dry_rates, strict=True))
            targets.append({"target": f"records opened with keys >= 0.3 x dry run ({name})", "ratio": ratio, "goal": 0.3, "ok": ratio >= 0.3, "how": "the same, every admission with an idempotency key"})
    if not url:
        targets.append({"target": "records opened >= 0.3 x dry run (PostgreSQL)", "ratio": float("nan"), "goal": 0.3, "ok": False, "how": "PostgreSQL could not be started (scripts/postgres)"})
    return {"rows": rows, "targets": targets}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, _: f"  {r['impl']:<50} {r['value']:10.0f} admissions/s")
