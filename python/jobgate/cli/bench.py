"""`jobgate bench`: admission latency and throughput of a running service, as ghz
measures them, with an open loop that does not hide queueing.

    jobgate bench --duration 30s --concurrency 8                  # closed loop
    jobgate bench --duration 30s --rps 800 --connections 4        # open loop: latency from the scheduled send
    jobgate bench --rps 200 --load-step 200 --load-end 1000 --load-step-duration 10s   # a ramp, reported per step
    jobgate bench -H 'x-request-id: bench-1' -d '{"document": {"jobspec": {...}}}'      # metadata, a request as proto JSON
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
from jobgate.bench import calls, compare
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
    amount.add_argument("-n", "--requests", type=int, metavar="N", help="measured calls (default: 2000 unless --duration, or a ramp with an end)")
    amount.add_argument("-z", "--duration", type=seconds, metavar="D", help="measure for this long (30s, 2m)")
    p.add_argument("--warmup", type=seconds, default=1.0, metavar="D", help="load sent first and left out of the results (default: 1s)")
    p.add_argument("-c", "--concurrency", type=int, metavar="C", help="closed loop: calls in flight (default: 4); with --rps and --call admit-stream, the streams")
    p.add_argument("-r", "--rps", type=float, metavar="R", help="open loop: calls sent per second on a fixed schedule; latency from each call's scheduled send. With --load-step: the rate a ramp starts at")
    ramp = p.add_argument_group("ramps (ghz's step load schedule)", "an open loop from --rps (or --load-start) calls/s, --load-step more every --load-step-duration of the measured run, held at --load-end once reached (the default length: every step once); each step is reported")
    ramp.add_argument("--load-schedule", choices=("const", "step"), help="const: --rps throughout (the default); step: a ramp (implied by --load-step)")
    ramp.add_argument("--load-start", type=float, metavar="R", help="the rate a ramp starts at (the same as --rps)")
    ramp.add_argument("--load-step", type=float, metavar="S", help="calls/s added at every step (negative: removed)")
    ramp.add_argument("--load-end", type=float, metavar="R", help="the rate a ramp stops changing at")
    ramp.add_argument("--load-step-duration", type=seconds, metavar="D", help="how long each step runs (10s)")
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
    data = p.add_mutually_exclusive_group()
    data.add_argument("-d", "--data", metavar="JSON", help="the request as proto JSON (the call's request message; an array of them is cycled), instead of --document")
    data.add_argument("-D", "--data-file", metavar="FILE", help="--data read from FILE (- for stdin)")
    p.add_argument("-H", "--header", dest="headers", action="append", default=[], metavar="'KEY: VALUE'", help="call metadata (repeatable); a -bin key takes base64")
    p.add_argument("-m", "--metadata", metavar="JSON", help='call metadata as a JSON object, as ghz takes it: {"key": "value"} (an array of values sends the key more than once)')
    p.add_argument("-M", "--metadata-file", metavar="FILE", help="--metadata read from FILE")
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
    c.add_argument("--allow-different", action="store_true", help="compare runs that measured different calls (method, request, metadata, load), with a warning; refused otherwise (exit 2)")
    c.set_defaults(run=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    try:
        a, b = compare.load(args.a), compare.load(args.b)
    except compare.CompareError as e:
        raise UsageError(str(e)) from None
    differences = compare.differences(a, b)
    if differences:
        said = f"{args.a} and {args.b} measured different calls:\n" + "\n".join(f"  {d}" for d in differences)
        if not args.allow_different:
            raise UsageError(f"{said}\nthe ratios would compare the calls, not the service: run both alike, or give --allow-different")
        print(f"jobgate: warning: {said}", file=sys.stderr)
    rows = compare.compare(a, b)
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


def _text_of(path: str, option: str) -> str:

    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{option} {path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def request_messages(args: argparse.Namespace) -> tuple[list, str, int | None]:
    """The run's request messages, where they came from ("documents" or "data") and,
    from documents, how many were given."""
    if args.data is None and args.data_file is None:
        documents = read_documents(args.document)
        return calls.from_documents(args.call, documents, args.batch, args.open_records), "documents", len(documents)
    if args.document:
        raise UsageError("--document and --data: the request is one or the other")
    text, origin = (args.data, "--data") if args.data is not None else (_text_of(args.data_file, "--data-file"), args.data_file)
    try:
        return calls.from_json(args.call, text, origin, args.open_records), "data", None
    except calls.CallError as e:
        raise UsageError(str(e)) from None


def call_metadata(args: argparse.Namespace) -> tuple[tuple[str, str | bytes], ...]:
    """The token's metadata and what -H, --metadata and --metadata-file add."""
    try:
        pairs = []
        if args.metadata_file is not None:
            pairs += calls.metadata_json(_text_of(args.metadata_file, "--metadata-file"), args.metadata_file)
        if args.metadata is not None:
            pairs += calls.metadata_json(args.metadata, "--metadata")
        pairs += [calls.header(h) for h in args.headers]
        return calls.merged(connect.metadata(args), calls.checked(pairs))
    except calls.CallError as e:
        raise UsageError(str(e)) from None


def ramp_of(args: argparse.Namespace):
    """The ramp the options ask for, or None for a constant load; checked."""
    from jobgate.bench.load import Ramp  # the bench extra's, as in `run`

    given = [name for name in ("load_start", "load_step", "load_end", "load_step_duration") if getattr(args, name) is not None]
    if args.load_schedule != "step" and args.load_step is None:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} shapes a ramp: give --load-step (and --load-step-duration)")
        return None
    if args.load_start is not None and args.rps is not None and args.load_start != args.rps:
        raise UsageError("--rps and --load-start both name the rate a ramp starts at: give one")
    start = args.load_start if args.load_start is not None else args.rps
    if start is None or args.load_step is None or args.load_step_duration is None:
        raise UsageError("a ramp needs its start (--rps or --load-start), --load-step and --load-step-duration")
    if not start > 0:
        raise UsageError("a ramp starts above 0 calls/s")
    if args.load_step == 0:
        raise UsageError("--load-step 0 is a constant load: give --rps alone")
    if not args.load_step_duration > 0:
        raise UsageError("--load-step-duration must be more than 0")
    end = args.load_end
    if end is not None and (end - start) * args.load_step < 0:
        raise UsageError(f"--load-end {end:g} is not reached from {start:g} by steps of {args.load_step:+g}")
    if end is not None and not end > 0:
        raise UsageError("--load-end must be more than 0")
    if end is None and args.load_step < 0:
        raise UsageError("a falling ramp needs --load-end (above 0): it would reach 0 calls/s")
    return Ramp(start=start, step=args.load_step, every=args.load_step_duration, end=end)


def probe(args: argparse.Namespace, message, metadata) -> None:
    """One dry-run call before the run (it opens nothing, whatever the run does):
    fails fast (exit 2) on what every call would share. An AdmitStream run probes
    with the health Check."""
    import grpc

    if args.call == "admit-stream":
        method, request = calls.METHODS["empty"], calls.request_class("empty")().SerializeToString()
    else:
        probe_message = type(message)()
        probe_message.CopyFrom(message)
        if hasattr(probe_message, "dry_run"):
            probe_message.dry_run = True
        if args.call == "admit-batch":
            del probe_message.documents[1:]
        method, request = calls.METHODS[args.call], probe_message.SerializeToString()
    with connect.channel_for(args) as channel:
        try:
            channel.unary_unary(method, request_serializer=None, response_deserializer=None)(request, metadata=metadata, timeout=args.timeout)
        except grpc.RpcError as e:
            if e.code().name in FATAL:
                raise UsageError(f"{args.server}: {e.code().name}: {e.details()}{connect.unavailable_hint(args, e.code().name)}") from None


def parameters(args: argparse.Namespace, request: dict, metadata, documents: int | None, connections: int, ramp) -> dict:
    return {
        "server": args.server,
        "call": args.call,
        "method": calls.METHODS[args.call],
        "request": request,
        "metadata": calls.shown(metadata),
        "batch": args.batch if args.call == "admit-batch" else 1,
        "documents": documents,
        "open_records": bool(args.open_records),
        "requests": args.requests,
        "duration": args.duration,
        "warmup": args.warmup,
        "concurrency": args.concurrency,
        "rps": args.rps,
        "ramp": None if ramp is None else {"start": ramp.start, "step": ramp.step, "end": ramp.end, "step_duration": ramp.every},
        "connections": connections,  # opened: each process opens one at least
        "procs": args.procs,
        "timeout": args.timeout,
        "tls": bool(args.ca),
    }


def run(args: argparse.Namespace) -> int:
    from jobgate.bench import load, results  # the bench extra's HdrHistogram

    if args.plot:
        try:
            require()  # before any load is sent: a run is never thrown away for it
        except PlotUnavailable as e:
            raise UsageError(str(e)) from None
    ramp = ramp_of(args)
    if ramp is not None:
        args.rps = ramp.start  # a ramp is an open loop
        if args.requests is None and args.duration is None and ramp.end is not None:
            args.duration = ramp.steps() * ramp.every  # every step once
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
    messages, source, documents = request_messages(args)
    metadata = call_metadata(args)
    encoded = tuple(m.SerializeToString() for m in messages)
    per_call = tuple(calls.documents_in(m) for m in messages)
    probe(args, messages[0], metadata)
    read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
    plan = load.Plan(
        server=args.server,
        call=args.call,
        requests=encoded,
        documents=per_call,
        concurrency=args.concurrency,
        rps=args.rps,
        total=args.requests,
        duration=args.duration,
        warmup=args.warmup,
        connections=args.connections,
        procs=args.procs,
        timeout=args.timeout,
        metadata=metadata,
        ramp=ramp,
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
    request = {"from": source, "messages": len(encoded), "sha256": calls.fingerprint(encoded)}
    result = results.summary(parameters(args, request, metadata, documents, opened, ramp), results.merge(parts), end - measured_from, ramp)
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
