"""`jobgate bench`: admission latency and throughput of a running service, as ghz
measures them, with an open loop that does not hide queueing.

    jobgate bench --duration 30s --concurrency 8                  # closed loop
    jobgate bench --duration 30s --rps 800 --connections 4        # open loop: latency from the scheduled send
    jobgate bench --call admit-batch --batch 64 --procs 2 --format json > run.json
    jobgate bench compare before.json after.json                  # ratios, with bootstrap intervals
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from jobgate import samples
from jobgate.bench.plot import PlotUnavailable, draw, require
from jobgate.cli import connect
from jobgate.cli.usage import EXIT_FAIL, EXIT_PASS, UsageError

CALLS = ("admit", "admit-batch", "admit-stream", "empty")
# `serve --workers N` shares connections among its workers, not calls, each to a
# worker the kernel picks by a hash of the connection's addresses and ports: K
# connections leave a given one of N workers idle (1 - 1/N)**K of the time. More
# connections cost a single worker no measurable CPU per call (README, "Workers and
# connections").
DEFAULT_CONNECTIONS = 8
# Failures of the first call that every other call would share: the run is not started.
FATAL = ("UNAVAILABLE", "UNAUTHENTICATED", "PERMISSION_DENIED", "UNIMPLEMENTED")


def seconds(text: str) -> float:
    """`30`, `30s`, `500ms`, `2m`: seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix) and text[: -len(suffix)]:
            number, scale = text[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = text, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (30, 30s, 500ms, 2m)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (30, 30s, 500ms, 2m)")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure admission latency and throughput of a running service", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=int, metavar="N", help="measured calls (default: 2000 unless --duration)")
    amount.add_argument("--duration", type=seconds, metavar="D", help="measure for this long (30s, 2m)")
    p.add_argument("--warmup", type=seconds, default=1.0, metavar="D", help="load sent first and left out of the results (default: 1s)")
    p.add_argument("--concurrency", type=int, metavar="C", help="closed loop: calls in flight (default: 4); with --rps and --call admit-stream, the streams")
    p.add_argument("--rps", type=float, metavar="R", help="open loop: calls sent per second on a fixed schedule; latency from each call's scheduled send")
    p.add_argument(
        "--connections",
        type=int,
        default=DEFAULT_CONNECTIONS,
        metavar="K",
        help=f"TCP connections, each a channel of its own, taken in turn by the calls: `serve --workers N` gives each connection, and every call on it, to one worker (default: {DEFAULT_CONNECTIONS}, which reach both of 2 workers 127 times in 128)",
    )
    p.add_argument("--procs", type=int, default=1, metavar="P", help="client processes sharing the load (default: 1)")
    p.add_argument("--call", choices=CALLS, default="admit", help="admit (default), admit-batch, admit-stream, or empty: the health Check, the floor")
    p.add_argument("--batch", type=int, default=16, metavar="N", help="documents per AdmitBatch (default: 16)")
    p.add_argument("--document", action="append", metavar="FILE", help="a document to send (repeatable: cycled); default: the embedded sample JobSpec and spec-bundle")
    records = p.add_mutually_exclusive_group()
    records.add_argument("--dry-run", dest="open_records", action="store_false", help="check only, open nothing (the default)")
    records.add_argument("--open-records", dest="open_records", action="store_true", help="admit for real: open a job record per admitted document")
    connect.add_options(p)
    p.add_argument("--format", choices=("text", "json", "csv"), default="text")
    p.add_argument("--plot", metavar="FILE.png", help="draw the latency distribution and latency over time (needs matplotlib: pip install 'jobgate[plot]')")
    p.set_defaults(run=run, open_records=False)
    actions = p.add_subparsers(dest="action", metavar="compare", title="comparing saved runs")
    c = actions.add_parser("compare", help="ratios of every figure between two runs saved with --format json, with bootstrap intervals")
    c.add_argument("a", metavar="A.json")
    c.add_argument("b", metavar="B.json")
    c.add_argument("--format", dest="compare_format", choices=("text", "json"), default="text")
    c.set_defaults(run=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    # Imported here, not at the top: every command imports this module, and `statistics`
    # would add to the start of each.
    from jobgate.bench import compare

    try:
        rows = compare.compare(compare.load(args.a), compare.load(args.b))
    except compare.CompareError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(rows, indent=2) if args.compare_format == "json" else compare.text(rows, args.a, args.b))
    return 0


def read_documents(paths: list[str] | None) -> list[bytes]:
    paths = paths or [str(samples.path("jobspec.valid.json")), str(samples.path("spec_bundle.valid.yaml"))]
    out = []
    for path in paths:
        try:
            out.append(Path(path).read_bytes())
        except OSError as e:
            raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    return out


def encode_requests(call: str, documents: list[bytes], batch: int, open_records: bool) -> tuple[tuple[bytes, ...], int]:
    """The request messages of a call shape, encoded once, and the documents each carries."""
    # Imported here: grpc comes with the bench extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    from grpc_health.v1 import health_pb2

    from jobgate.v1 import admission_pb2

    dry = not open_records
    docs = [admission_pb2.Document(raw=d) for d in documents]
    if call == "empty":
        return (health_pb2.HealthCheckRequest().SerializeToString(),), 0
    if call == "admit":
        return tuple(admission_pb2.AdmitRequest(document=d, dry_run=dry).SerializeToString() for d in docs), 1
    if call == "admit-stream":
        return tuple(admission_pb2.AdmitStreamRequest(request_id=str(i), document=d, dry_run=dry).SerializeToString() for i, d in enumerate(docs)), 1
    # Batches that cycle the documents as a stream of them would.
    count = len(docs) // _gcd(len(docs), batch) if len(docs) > 1 else 1
    ring = [docs[i % len(docs)] for i in range(count * batch)]
    return tuple(admission_pb2.AdmitBatchRequest(documents=ring[i * batch : (i + 1) * batch], dry_run=dry).SerializeToString() for i in range(count)), batch


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def probe(args: argparse.Namespace, documents: list[bytes]) -> None:
    """One dry-run call before the run (it opens nothing, whatever the run does):
    fails fast (exit 2) on what every call would share."""
    # Imported here: grpc comes with the bench extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    import grpc

    from jobgate.bench.load import ADMIT, ADMIT_BATCH, HEALTH_CHECK

    method = {"admit": ADMIT, "admit-batch": ADMIT_BATCH, "empty": HEALTH_CHECK, "admit-stream": HEALTH_CHECK}[args.call]
    shape = "empty" if args.call == "admit-stream" else args.call
    request = encode_requests(shape, documents[:1], 1, open_records=False)[0][0]
    with connect.channel_for(args) as channel:
        try:
            channel.unary_unary(method, request_serializer=None, response_deserializer=None)(request, metadata=connect.metadata(args), timeout=args.timeout)
        except grpc.RpcError as e:
            if e.code().name in FATAL:
                raise UsageError(f"{args.server}: {e.code().name}: {e.details()}{connect.unavailable_hint(args, e.code().name)}") from None


def parameters(args: argparse.Namespace, documents: int, connections: int) -> dict:
    return {
        "server": args.server,
        "call": args.call,
        "batch": args.batch if args.call == "admit-batch" else 1,
        "documents": documents,
        "open_records": bool(args.open_records),
        "requests": args.requests,
        "duration": args.duration,
        "warmup": args.warmup,
        "concurrency": args.concurrency,
        "rps": args.rps,
        "connections": connections,  # opened: each process opens one at least
        "procs": args.procs,
        "timeout": args.timeout,
        "tls": bool(args.ca),
    }


def run(args: argparse.Namespace) -> int:
    # Imported here: hdrh (the latency histograms) comes with the bench extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    from jobgate.bench import load, results

    if args.plot:
        try:
            require()  # before any load is sent: a run is never thrown away for it
        except PlotUnavailable as e:
            raise UsageError(str(e)) from None
    if args.requests is None and args.duration is None:
        args.requests = 2000
    if args.rps is not None and args.concurrency is not None and args.call != "admit-stream":
        raise UsageError("--concurrency and --rps: an open loop sends unary calls as they fall due, whatever is in flight (--concurrency counts streams with --call admit-stream)")
    if args.concurrency is None:
        args.concurrency = max(4, args.procs)
    for name in ("requests", "concurrency", "connections", "procs", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be at least 1")
    if args.rps is not None and not args.rps > 0:
        raise UsageError("--rps must be more than 0")
    if args.duration == 0:
        raise UsageError("--duration must be more than 0")
    if args.procs > args.concurrency and args.rps is None:
        raise UsageError("--procs cannot exceed --concurrency: each process needs a call in flight")
    channel_check = connect.channel_for(args)  # the option checks and the plaintext warning, once
    channel_check.close()
    documents = read_documents(args.document)
    requests, per_call = encode_requests(args.call, documents, args.batch, args.open_records)
    probe(args, documents)
    read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
    plan = load.Plan(
        server=args.server,
        call=args.call,
        requests=requests,
        documents=per_call,
        concurrency=args.concurrency,
        rps=args.rps,
        total=args.requests,
        duration=args.duration,
        warmup=args.warmup,
        connections=args.connections,
        procs=args.procs,
        timeout=args.timeout,
        metadata=tuple(connect.metadata(args)),
        ca=read(args.ca),
        cert=read(args.cert),
        key=read(args.key),
    )
    if sys.stderr.isatty() and not os.environ.get("CI"):
        amount = f"{args.requests:,} calls" if args.requests else f"{args.duration:g} s"
        print(f"jobgate bench: {amount} after {args.warmup:g} s of warm-up …", file=sys.stderr)
    begun = time.monotonic()
    parts, measured_from, end = load.run(plan)
    opened = sum(share.connections for share in load.shares(plan))
    result = results.summary(parameters(args, len(documents), opened), results.merge(parts), end - measured_from)
    result["wall_seconds"] = round(time.monotonic() - begun, 3)
    if result["calls"] == 0:
        raise UsageError("no call was measured: lengthen --duration or lower --warmup")
    if args.format == "json":
        print(json.dumps(result, indent=2))
    elif args.format == "csv":
        print(results.csv_text(result))
    else:
        print(results.text(result))
    if args.plot:
        draw(result, args.plot)
        print(f"jobgate bench: plot written to {args.plot}", file=sys.stderr)
    return EXIT_PASS if result["statuses"].get("OK", 0) == result["calls"] else EXIT_FAIL
