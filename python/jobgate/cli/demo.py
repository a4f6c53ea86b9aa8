"""`jobgate demo`: the service at work. Starts the embedded demo deployment on a free
loopback port, admits the sample documents through gRPC, and prints each verdict,
its violations and the job ids; the records go to a temporary store."""

from __future__ import annotations

import argparse
import tempfile

from jobgate import samples
from jobgate.cli import formats
from jobgate.cli.serve import embedded_default
from jobgate.reports import ReportView


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="admit the embedded samples through a local service")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the service comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    import grpc

    from jobgate.server import create_server
    from jobgate.v1 import admission_pb2, admission_pb2_grpc

    with tempfile.TemporaryDirectory(prefix="jobgate-demo-") as tmp:
        base = embedded_default()
        config = base.model_copy(
            update={
                "store": base.store.model_copy(update={"path": f"{tmp}/store"}),
                "jobs": base.jobs.model_copy(update={"results_root": f"{tmp}/results"}),
            }
        )
        started = create_server(config, "127.0.0.1:0")
        port = started.port
        results, ids = [], []
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = admission_pb2_grpc.AdmissionServiceStub(channel)
                for name in samples.DOCUMENTS:
                    data = samples.path(name).read_bytes()
                    response = stub.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=data)), timeout=30)
                    results.append((f"samples/{name}", ReportView.from_message(response.report)))
                    ids.append(response.job_id)
        finally:
            started.server.stop(None).wait()
            started.close()
    if args.format == "text":
        print(f"jobgate demo: admitting the samples through a local service on 127.0.0.1:{port} (demo catalog, anonymous)\n")
    print(formats.admissions(args.format, results, ids))
    if args.format == "json":
        return 0
    print("\nRun the service yourself with `jobgate serve`, then `jobgate submit FILE` (or `jobgate check FILE` offline).")
    return 0
