"""`jobgate serve`: the admission service, configured by --config and the
JOBGATE_SECTION__KEY variables over it (docs/configuration.md). Without --config it is
configured by those variables alone; without either it runs the embedded demo
deployment on 127.0.0.1:50051 with anonymous access (an admin, on loopback only) and
a SQLite store in ./.jobgate. SIGHUP reloads --config, through every check a start runs.

With --workers N, N processes share the port (SO_REUSEPORT, only among themselves: a
port another process holds is refused at start); a worker that dies takes the service
down with its exit code, and one /metrics endpoint sums the workers' metrics."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import tempfile
import time

from jobgate import load_config, samples
from jobgate.cli.usage import UsageError
from jobgate.config import Config, Server, environment_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gRPC admission service", description=__doc__)
    p.add_argument("--config", metavar="FILE", help="jobgate.toml (default: the JOBGATE_SECTION__KEY variables alone; without any, the embedded demo deployment)")
    p.add_argument("--listen", metavar="HOST:PORT", help="override server.listen")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="N processes sharing the port (SO_REUSEPORT) for multi-core throughput")
    p.set_defaults(run=run)


def embedded_default() -> Config:
    demo = load_config(samples.path(samples.DEMO_CONFIG), environ={})  # the demo as shipped
    return demo.model_copy(update={"server": Server(listen="127.0.0.1:50051", allow_anonymous=True)})


def run(args: argparse.Namespace) -> int:
    # Imported here: the service comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    from jobgate.server import serve
    from jobgate.server.app import StartupError, check_startable

    config = load_config(args.config) if args.config else environment_config() or embedded_default()
    listen = args.listen or config.server.listen
    try:
        check_startable(config, listen)  # before any worker starts
    except StartupError as e:
        raise UsageError(str(e)) from None
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if not os.environ.get(WORKER_ENV):  # a worker's port is its supervisor's to probe
        probe(listen)
    else:
        follow_supervisor(os.environ[WORKER_ENV])
    if args.workers > 1:
        return run_workers(args, listen, config)
    try:
        return serve(config, listen, config_path=args.config)
    except StartupError as e:
        raise UsageError(str(e)) from None


WORKER_ENV = "JOBGATE_WORKER"  # the supervisor's pid, set for the processes of `serve --workers N`


def follow_supervisor(supervisor: str) -> None:
    """A worker stops (SIGTERM, gracefully) when its supervisor dies, however it dies:
    a supervisor killed outright must not leave workers serving its port unwatched."""
    import ctypes  # only a worker of `serve --workers N` needs it


    PR_SET_PDEATHSIG = 1  # noqa: N806 - the name prctl(2) gives it
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):  # not Linux: the supervisor's own signals still reach it
        return
    if supervisor.isdigit() and os.getppid() != int(supervisor):  # it died before prctl took hold
        os.kill(os.getpid(), signal.SIGTERM)


def probe(listen: str) -> None:
    """Refuses an address another process already listens on: gRPC would otherwise
    share the port (SO_REUSEPORT) and split the traffic between two services."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    if not port.isdigit() or int(port) == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC itself binds
        try:
            s.bind((host, int(port)))
        except OSError as e:
            raise UsageError(f"cannot listen on {listen}: {e.strerror} (is another service running there?)") from None


def run_workers(args: argparse.Namespace, listen: str, config: Config) -> int:
    """N copies of `jobgate serve` on one port, supervised: signals are passed on to
    each; when one exits unasked, the others are stopped and its exit code is the
    service's. Their metrics are summed on the one /metrics endpoint served here."""
    # Imported here, not at the top: every command imports this module, and subprocess
    # would add to the start of each.
    import subprocess

    if listen.endswith(":0"):
        raise UsageError("--workers needs a fixed port to share")
    command = [sys.executable, "-m", "jobgate.cli", "serve", "--listen", listen]
    if args.config:
        command += ["--config", args.config]
    with tempfile.TemporaryDirectory(prefix="jobgate-metrics-") as metrics_dir:
        env = {**os.environ, WORKER_ENV: str(os.getpid()), "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
        children: list[subprocess.Popen] = []
        metrics = serve_summed_metrics(config.server.metrics_listen, metrics_dir, lambda: [c.pid for c in children if c.poll() is None]) if config.server.metrics_listen else None
        children += [subprocess.Popen(command, env=env) for _ in range(args.workers)]
        stopping = []

        def forward(signum, _frame) -> None:
            if signum != signal.SIGHUP:
                stopping.append(signum)
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, forward)
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.2)
            if not stopping:  # a worker died unasked: the service is down, and says so
                dead = next(c for c in children if c.poll() is not None)
                print(f"jobgate: worker {dead.pid} exited with code {dead.returncode}; stopping the other workers", file=sys.stderr)
                forward(signal.SIGTERM, None)
                for child in children:
                    child.wait()
                return dead.returncode if dead.returncode > 0 else 1
            return max(child.wait() for child in children)
        finally:
            if metrics is not None:
                metrics.shutdown()


def serve_summed_metrics(listen: str, metrics_dir: str, pids):
    """One /metrics endpoint for every worker: their call and admission metrics summed
    (prometheus-client's multiprocess mode), and each one's process metrics."""
    # Imported here: prometheus-client comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    from prometheus_client import CollectorRegistry, multiprocess

    from jobgate.server.metrics import BuildInfo, EndpointUnavailable, MetricsEndpoint, WorkerProcesses

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=metrics_dir)
    registry.register(WorkerProcesses(pids, metrics_dir))
    registry.register(BuildInfo())
    try:
        return MetricsEndpoint(registry, listen)
    except EndpointUnavailable as e:
        raise UsageError(str(e)) from None
