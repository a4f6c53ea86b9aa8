"""Admission with records opened beside dry-run admission, on the same server, for
the SQLite store and for PostgreSQL (started by scripts/postgres), and with an
idempotency key on every admission. Several client threads send single Admit calls,
as gateways do. Then each store alone, in this process: commit groups of 1, 8 and 32
admissions of the same JobSpec (no quota, no key: one statement a group), and per
record the time, this process's CPU and the CPU of PostgreSQL's own processes (what
a deployment sizes its database server by). For reading only: the records path's
targets are measured against the transport floor in `python -m benchmarks service`,
not against jobgate's own dry run, which pays every overhead the records path pays."""

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
from benchmarks.service import cluster_cpu, drop_database, postgres_database, start, wait_ready
from jobgate.store import open_store
from jobgate.store.base import NewJob
from jobgate.v1 import admission_pb2, admission_pb2_grpc

GROUPS = (1, 8, 32)


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


def store_alone(store, doc: bytes, group: int, records: int, postgres_cpu) -> dict[str, float]:
    """Per record of `records` opened in commit groups of `group`: the time, this
    process's CPU and PostgreSQL's (0 without one), all in µs."""
    job = NewJob(
        id_prefix="job-run",
        project="bench",
        owner="bench",
        gpus=8,
        image="nvcr.io/bench/train:1",
        network_arch="bench",
        action="train",
        platform="local",
        storage_tier="standard",
        results_root="/results",
        document=doc,
        reads_usage=False,  # no quota: the group reads nothing first
    )
    items = [(job, lambda _used: True)] * group
    store.admit_many(items)  # warm: connections, prepared statements
    count = max(1, records // group)
    beside = postgres_cpu() if postgres_cpu else 0.0
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        store.admit_many(items)
    n = count * group
    return {
        "time": (time.perf_counter() - began) / n * 1e6,
        "cpu": (time.process_time() - cpu) / n * 1e6,
        "postgres": (postgres_cpu() - beside) / n * 1e6 if postgres_cpu else 0.0,
    }


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
        # The stores alone, each on a fresh database: rounds interleaved by group size.
        records = 1000 if quick else 4000
        with tempfile.TemporaryDirectory() as tmp:
            alone = [("SQLite", open_store(path=tmp), None)]
            if url:
                drop_database(url)
                url = postgres_database()
            if url:
                alone.append(("PostgreSQL", open_store(tmp, url=url), cluster_cpu(url)))
            for name, store, postgres_cpu in alone:
                measured: dict[int, list[dict[str, float]]] = {group: [] for group in GROUPS}
                try:
                    for _ in range(rounds):
                        for group in GROUPS:
                            measured[group].append(store_alone(store, doc, group, records, postgres_cpu))
                finally:
                    store.close()
                for group, runs in measured.items():
                    figure = {k: statistics.median(r[k] for r in runs) for k in ("time", "cpu", "postgres")}
                    beside = f", PostgreSQL's processes {figure['postgres']:,.0f} µs" if postgres_cpu else ""
                    rows.append(
                        {
                            "bench": f"the {name} store alone: commit groups of the 2 KB JobSpec, one statement each (median of {rounds} x {records:,} records)",
                            "impl": f"groups of {group}",
                            "value": figure["time"],
                            "unit": "µs/record",
                            "note": f"CPU: this process {figure['cpu']:,.0f} µs{beside}",
                        }
                    )
    finally:
        if url:
            drop_database(url)
    if not url:
        print("  records: PostgreSQL could not be started (scripts/postgres): its rows are left out", file=sys.stderr)
    return {"rows": rows, "targets": []}


def print_table(result: dict) -> None:
    def line(r: dict, _first: dict) -> str:
        if r.get("unit") == "µs/record":
            return f"  {r['impl']:<50} {r['value']:10.0f} µs/record   {r['note']}"
        return f"  {r['impl']:<50} {r['value']:10.0f} admissions/s"

    print_grouped(result["rows"], line)
