"""`jobgate submit PATH... --server ADDR`: send documents to a running service and
print each verdict, its violations and the job id."""

from __future__ import annotations

import argparse
import os

import grpc

from jobgate import sources
from jobgate.cli import formats
from jobgate.reports import ReportView


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="send documents to a running service", description=__doc__)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--server", metavar="ADDR", default="127.0.0.1:50051")
    p.add_argument("--dry-run", action="store_true", help="check only: open no record")
    p.add_argument("--package", metavar="FILE", help="a package (tar, tar.gz, tar.zst, zip) holding the bundle's supporting files, sent with each document")
    p.add_argument("--token", metavar="TOKEN", default=os.environ.get("JOBGATE_TOKEN"), help="bearer token (default: $JOBGATE_TOKEN)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    p.add_argument("--ca", metavar="FILE", help="TLS: the CA that signed the server's certificate")
    p.add_argument("--cert", metavar="FILE", help="mutual TLS: this client's certificate")
    p.add_argument("--key", metavar="FILE", help="mutual TLS: this client's private key")
    p.set_defaults(run=run)


def channel_for(args: argparse.Namespace) -> grpc.Channel:
    """A channel to --server: TLS when --ca is given, with a client certificate for mutual TLS."""
    from pathlib import Path

    from jobgate.cli import UsageError

    if not args.ca:
        return grpc.insecure_channel(args.server)
    try:
        read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
        credentials = grpc.ssl_channel_credentials(read(args.ca), read(args.key), read(args.cert))
    except OSError as e:
        raise UsageError(f"cannot read {e.filename}: {e.strerror}") from None
    return grpc.secure_channel(args.server, credentials)


def run(args: argparse.Namespace) -> int:
    from jobgate.cli import EXIT_FAIL, EXIT_PASS, UsageError
    from jobgate.v1 import admission_pb2, admission_pb2_grpc

    try:
        docs = [sources.read(n) for n in sources.expand(args.paths)]
        package = sources.read(args.package).data if args.package else b""
    except OSError as e:
        raise UsageError(str(e)) from None
    metadata = [("authorization", f"Bearer {args.token}")] if args.token else []
    results, ids = [], []
    with channel_for(args) as channel:
        stub = admission_pb2_grpc.AdmissionServiceStub(channel)
        for d in docs:
            try:
                response = stub.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=d.data, package=package), dry_run=args.dry_run), metadata=metadata, timeout=args.timeout)
            except grpc.RpcError as e:
                raise UsageError(f"{args.server}: {e.code().name}: {e.details()}") from None
            results.append((d.name, ReportView.from_message(response.report)))
            ids.append(response.job_id)
    print(formats.admissions(args.format, results, ids))
    return EXIT_PASS if all(r.ok for _, r in results) else EXIT_FAIL
