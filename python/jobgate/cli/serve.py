"""`jobgate serve`: the admission service. Without --config it runs the embedded demo
deployment on 127.0.0.1:50051 with anonymous access (an admin, on loopback only) and
a SQLite store in ./.jobgate. SIGHUP reloads --config, through every check a start runs."""

from __future__ import annotations

import argparse

from jobgate import load_config, samples
from jobgate.config import Config, Server


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gRPC admission service", description=__doc__)
    p.add_argument("--config", metavar="FILE", help="jobgate.toml (default: the embedded demo deployment)")
    p.add_argument("--listen", metavar="HOST:PORT", help="override server.listen")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="N processes sharing the port (SO_REUSEPORT) for multi-core throughput")
    p.set_defaults(run=run)


def embedded_default() -> Config:
    demo = load_config(samples.path(samples.DEMO_CONFIG))
    return demo.model_copy(update={"server": Server(listen="127.0.0.1:50051", allow_anonymous=True)})


def run(args: argparse.Namespace) -> int:
    from jobgate.cli import UsageError
    from jobgate.server import serve
    from jobgate.server.app import StartupError, check_startable

    config = load_config(args.config) if args.config else embedded_default()
    listen = args.listen or config.server.listen
    try:
        check_startable(config, listen)  # before any worker starts
    except StartupError as e:
        raise UsageError(str(e)) from None
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.workers > 1:
        return run_workers(args, listen)
    try:
        return serve(config, listen, config_path=args.config)
    except StartupError as e:
        raise UsageError(str(e)) from None


def run_workers(args: argparse.Namespace, listen: str) -> int:
    """N copies of `jobgate serve` on one port; signals are passed on to each."""
    import signal
    import subprocess
    import sys

    from jobgate.cli import UsageError

    if listen.endswith(":0"):
        raise UsageError("--workers needs a fixed port to share")
    command = [sys.executable, "-m", "jobgate.cli", "serve", "--listen", listen]
    if args.config:
        command += ["--config", args.config]
    children = [subprocess.Popen(command) for _ in range(args.workers)]

    def forward(signum, _frame) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    codes = [child.wait() for child in children]
    return max(codes)
