"""`jobgate bench --server ADDR`: admission latency and throughput against a running
service: requests/s, p50/p90/p95/p99 and a histogram, as text or JSON, and optionally a
PNG plot (needs matplotlib)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time

from jobgate import samples
from jobgate.cli import connect


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure admission latency against a running service", description=__doc__)
    p.add_argument("--document", metavar="FILE", help="the document to admit (default: the embedded sample JobSpec)")
    p.add_argument("--requests", type=int, default=2000, metavar="N")
    p.add_argument("--concurrency", type=int, default=4, metavar="C", help="calls in flight")
    p.add_argument("--open-records", action="store_true", help="admit for real (default: dry runs, which open nothing)")
    connect.add_options(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the latency histogram")
    p.set_defaults(run=run)


def percentile(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def histogram(latencies: list[float]) -> list[dict]:
    """Power-of-two buckets in microseconds."""
    buckets: dict[int, int] = {}
    for s in latencies:
        edge = 1 << max(0, math.ceil(math.log2(max(s * 1e6, 1))))
        buckets[edge] = buckets.get(edge, 0) + 1
    return [{"le_us": edge, "count": buckets[edge]} for edge in sorted(buckets)]


def run(args: argparse.Namespace) -> int:
    import grpc

    from jobgate.cli import UsageError
    from jobgate.v1 import admission_pb2, admission_pb2_grpc

    if args.requests < 1 or args.concurrency < 1:
        raise UsageError("--requests and --concurrency must be at least 1")
    path = args.document or samples.path("jobspec.valid.json")
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    metadata = connect.metadata(args)
    request = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=data), dry_run=not args.open_records)
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    remaining = [args.requests]
    with connect.channel_for(args) as channel:
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        try:
            stub.Admit(request, metadata=metadata, timeout=10)  # warm up, and fail fast
        except grpc.RpcError as e:
            raise UsageError(f"{args.server}: {e.code().name}: {e.details()}") from None

        def worker() -> None:
            while True:
                with lock:
                    if remaining[0] == 0:
                        return
                    remaining[0] -= 1
                t = time.perf_counter()
                try:
                    stub.Admit(request, metadata=metadata, timeout=30)
                except grpc.RpcError as e:
                    with lock:
                        failures.append(e.code().name)
                    continue
                elapsed = time.perf_counter() - t
                with lock:
                    latencies.append(elapsed)

        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    ordered = sorted(latencies)
    if not ordered:
        raise UsageError(f"every request failed ({', '.join(sorted(set(failures)))})")
    result = {
        "server": args.server,
        "requests": len(ordered),
        "failures": len(failures),
        "concurrency": args.concurrency,
        "requests_per_s": len(ordered) / wall,
        "latency_us": {name: percentile(ordered, p) * 1e6 for name, p in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99))},
        "mean_us": statistics.mean(ordered) * 1e6,
        "histogram": histogram(ordered),
    }
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.hist([s * 1e6 for s in ordered], bins=60)
        ax.set_xlabel("Admit latency (µs)")
        ax.set_ylabel("requests")
        ax.set_title(f"{args.server}: {result['requests_per_s']:.0f} req/s, p99 {result['latency_us']['p99']:.0f} µs")
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        lat = result["latency_us"]
        print(f"{result['requests']} requests to {args.server} ({args.concurrency} in flight, {'records opened' if args.open_records else 'dry run'}): {result['requests_per_s']:.0f} requests/s, {result['failures']} failed")
        print("latency: " + "  ".join(f"{k} {v:.0f} µs" for k, v in lat.items()))
        peak = max(b["count"] for b in result["histogram"])
        for b in result["histogram"]:
            print(f"  <= {b['le_us']:>8} µs  {'#' * max(1, round(40 * b['count'] / peak)):<40} {b['count']}")
    return 0 if not failures else 1
