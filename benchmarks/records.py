"""Admission with records opened beside dry-run admission, on the same server, for
the SQLite store and for PostgreSQL (started by scripts/postgres), and with an
idempotency key on every admission. Several client threads send single Admit calls,
as gateways do. For reading only: the records path's targets are measured against
the transport floor in `python -m benchmarks service`, not against jobgate's own dry
run, which pays every overhead the records path pays."""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import documents, print_grouped
from benchmarks.service import drop_database, postgres_database, start, wait_ready
from jobgate.v1 import admission_pb2, admission_pb2_grpc


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

    began = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(loop, range(threads)))
    return total / (time.perf_counter() - began)


def run(quick: bool) -> dict:
    rows = []
    seconds = 2.0 if quick else 5.0
    rounds = 3 if quick else 5
    doc = documents.jobspec()
    backends = [("SQLite", "")]
    url = postgres_database()
    if url:
        backends.append(("PostgreSQL", f'url = "{url}"'))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, store in backends:
                proc, port = start(1, Path(tmp), name=name, store=store)
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
    finally:
        if url:
            drop_database(url)
    if not url:
        print("  records: PostgreSQL could not be started (scripts/postgres): its rows are left out", file=sys.stderr)
    return {"rows": rows, "targets": []}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, _: f"  {r['impl']:<50} {r['value']:10.0f} admissions/s")
