"""Prometheus metrics on an HTTP port. One registry per server, so several servers in
one process (tests) never collide. Every metric is listed in the README.

- calls, by the conventional gRPC server names (`calls.CallObserver` counts them):
  `grpc_server_started_total`, `grpc_server_handled_total` (by `grpc_code`),
  `grpc_server_handling_seconds`, `grpc_server_msg_received_total`,
  `grpc_server_msg_sent_total`, and `jobgate_rpcs_in_flight` (open streams included);
- admissions: documents by verdict, violations by rule, batch sizes, denials by
  reason, retries answered by idempotency key;
- the job store: time per operation (`jobgate_store_seconds`), and the operations
  that failed (`jobgate_store_failures_total`: unreachable or busy, or full);
- shadow admission: judged, disagreements by rule, dropped (`jobgate_shadow_*`);
- the request log: lines dropped rather than make a call wait (`jobgate_log_lines_dropped_total`);
- what runs: `jobgate_build_info` (jobgate's version, the core's, the rustc that
  built it, Python's);
- the process: `process_*` (CPU, memory, file descriptors) and `python_*`. With
  `serve --workers N` the supervising process serves them for each worker, labelled
  `worker`, beside the summed call and admission metrics, with the RPCs each worker
  completed (`jobgate_worker_rpcs_total`).

The HTTP endpoint (`MetricsEndpoint`) is one thread running an event loop, with
deadlines on every connection: idle or slow clients cost a socket each, never a
thread, and cannot keep a scrape out.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import InfoMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from jobgate.store.base import StoreFull, StoreUnavailable

LATENCY_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
CALL = ["grpc_type", "grpc_service", "grpc_method"]

log = logging.getLogger("jobgate.server")


class Metrics:
    def __init__(self, process: bool = True) -> None:
        self.registry = r = CollectorRegistry()
        self.started = Counter("grpc_server_started_total", "RPCs started on the server", CALL, registry=r)
        self.handled = Counter("grpc_server_handled_total", "RPCs completed on the server, whatever their status", [*CALL, "grpc_code"], registry=r)
        self.handling = Histogram("grpc_server_handling_seconds", "Time from the start of an RPC to its status (a stream: until it ends)", CALL, buckets=LATENCY_BUCKETS, registry=r)
        self.received = Counter("grpc_server_msg_received_total", "Request messages received", CALL, registry=r)
        self.sent = Counter("grpc_server_msg_sent_total", "Response messages sent", CALL, registry=r)
        self.in_flight = Gauge("jobgate_rpcs_in_flight", "RPCs being handled; a stream for as long as it is open", ["rpc"], registry=r, multiprocess_mode="livesum")
        self.admissions = Counter("jobgate_admissions_total", "Documents judged, by RPC and verdict", ["rpc", "verdict"], registry=r)
        self.violations = Counter("jobgate_violations_total", "Violations reported, by rule and severity", ["rule", "severity"], registry=r)
        self.batch_size = Histogram("jobgate_batch_documents", "Documents per AdmitBatch call", buckets=BATCH_BUCKETS, registry=r)
        # reason: unauthenticated, role (PERMISSION_DENIED), project (forge.project.forbidden),
        # not_visible (NOT_FOUND for a job outside the caller's projects). Accounts are in
        # the log line, not in a label: their number is the operator's, not bounded here.
        self.denials = Counter("jobgate_denials_total", "Calls and documents refused for the caller's identity or grant, by RPC and reason", ["rpc", "reason"], registry=r)
        # outcome: replayed (a retry answered with its key's first admission), refused (a
        # key reused by another request, ALREADY_EXISTS).
        self.retries = Counter("jobgate_idempotent_retries_total", "Admissions sent again with an idempotency key, by RPC and outcome", ["rpc", "outcome"], registry=r)
        self.shadow_judged = Counter("jobgate_shadow_judged_total", "Admissions judged again under the shadow configuration", registry=r)
        self.shadow_disagreements = Counter("jobgate_shadow_disagreements_total", "Shadow judgments that differ from the served one, by rule (each rule a judgment adds or drops)", ["rule"], registry=r)
        self.shadow_dropped = Counter("jobgate_shadow_dropped_total", "Admissions not judged in shadow: the shadow queue was full", registry=r)
        self.store = Histogram("jobgate_store_seconds", "Time the job store took, by operation", ["operation"], buckets=LATENCY_BUCKETS, registry=r)
        self.log_lines_dropped = Counter("jobgate_log_lines_dropped_total", "Request log lines not written: the log's writer had too many waiting, or stderr refused them", registry=r)
        # reason: unavailable (unreachable or busy: worth retrying), full (disk full, or
        # every job id given out). The operation is the store method's name.
        self.store_failures = Counter("jobgate_store_failures_total", "Job store operations that failed, by operation and reason", ["operation", "reason"], registry=r)
        r.register(BuildInfo())
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        self.http = None
        self._children: dict[tuple, Any] = {}

    def report(self, rpc: str, report) -> None:
        self._child(self.admissions, rpc, report.verdict).inc()
        for v in report.violations:
            self._child(self.violations, v.rule, v.severity).inc()

    def _child(self, metric, *labels: str):
        """`metric`'s series for `labels`, looked up once: rules, verdicts and RPCs are
        few and fixed, and a series is never removed."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def reports(self, rpc: str, reports) -> None:
        """Counts a batch with one increment per label set, not one per document."""
        verdicts: dict[str, int] = {}
        rules: dict[tuple[str, str], int] = {}
        for r in reports:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            for v in r.violations if r.errors or r.warnings else ():
                rules[(v.rule, v.severity)] = rules.get((v.rule, v.severity), 0) + 1
        self.counts(rpc, verdicts, rules)

    def counts(self, rpc: str, verdicts: dict[str, int], rules: dict[tuple[str, str], int]) -> None:
        """Counts reports per verdict and violations per (rule, severity)."""
        for verdict, n in verdicts.items():
            self._child(self.admissions, rpc, verdict).inc(n)
        for (rule, severity), n in rules.items():
            self._child(self.violations, rule, severity).inc(n)

    def serve_http(self, listen: str) -> int:
        """Starts the /metrics endpoint; returns its port. Raises EndpointUnavailable
        when it cannot listen on `listen`."""
        self.http = MetricsEndpoint(self.registry, listen)
        return self.http.port

    def close(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http = None


class EndpointUnavailable(Exception):
    """The /metrics endpoint cannot listen where `server.metrics_listen` says; the
    message names the address and why."""


# The /metrics endpoint's bounds: connections open at once, the time a client has to
# send its request head (and its size), and the time it has to take the answer.
MAX_CONNECTIONS = 64
REQUEST_SECONDS = 5.0
MAX_REQUEST_HEAD = 8192
RESPONSE_SECONDS = 10.0


class MetricsEndpoint:
    """Prometheus's exposition (prometheus-client's WSGI app: content negotiation,
    gzip, `name[]` filters) over HTTP, on one thread running an event loop. Each
    connection gets one answer and is closed. A client has REQUEST_SECONDS to send
    its request head and RESPONSE_SECONDS to read the answer, else it is dropped; at
    most MAX_CONNECTIONS are open, and a new one past that closes the oldest still
    waiting for its request, so that idle connections cannot keep a scrape out."""

    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        if not port.isdigit():
            raise EndpointUnavailable(f"server.metrics_listen: {listen!r} is not HOST:PORT")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, int(port)), family=family, backlog=128)
        except (OSError, OverflowError) as e:
            code = getattr(e, "errno", None) or 0
            # create_server words the address into strerror; the error's own words, and a
            # hint where the port is taken, as for `listen`
            why = os.strerror(code) if code > 0 else "no such address" if code < 0 else str(e)
            hint = " (is another service running there?)" if code == errno.EADDRINUSE else ""
            raise EndpointUnavailable(f"server.metrics_listen: cannot listen on {listen}: {why}{hint}") from None
        self.port: int = sock.getsockname()[1]
        self._app = make_wsgi_app(registry)
        # Every open connection, and those still reading their request (oldest first).
        self._open: set[asyncio.StreamWriter] = set()
        self._waiting: dict[asyncio.StreamWriter, None] = {}
        self._loop = asyncio.new_event_loop()
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(self._connection, sock=sock, limit=MAX_REQUEST_HEAD))
        except BaseException:
            sock.close()
            self._loop.close()
            raise
        self._thread = threading.Thread(target=self._loop.run_forever, name="jobgate-metrics", daemon=True)
        self._thread.start()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= MAX_CONNECTIONS:
            if not self._waiting:  # every one is being answered: this one is refused, to retry
                _drop(writer)
                return
            _drop(next(iter(self._waiting)))  # its read ends, and it leaves
        self._open.add(writer)
        self._waiting[writer] = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_SECONDS)
            finally:
                self._waiting.pop(writer, None)
            writer.write(self._answer(head))
            await asyncio.wait_for(writer.drain(), RESPONSE_SECONDS)
            writer.close()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            _drop(writer)
        finally:
            self._open.discard(writer)

    def _answer(self, head: bytes) -> bytes:
        """The whole HTTP response to a request head."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return response("400 Bad Request", [], b"")
        method, target, _version = parts
        url = urlsplit(target)
        environ = {"REQUEST_METHOD": "GET" if method == "HEAD" else method, "PATH_INFO": unquote(url.path), "QUERY_STRING": url.query}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
        started: list = []
        try:
            body = b"".join(self._app(environ, lambda status, headers: started.extend((status, headers))))
        except Exception:  # noqa: BLE001 - a collector that fails is the server's fault, not the scraper's
            log.exception("metrics exposition failed")
            return response("500 Internal Server Error", [], b"")
        status, headers = started
        return response(status, headers, body, head_only=method == "HEAD")

    def shutdown(self) -> None:
        """Stops listening, drops every open connection and ends the thread."""
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _stop(self) -> None:
        self._server.close()
        for writer in list(self._open):
            _drop(writer)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await self._server.wait_closed()


def _drop(writer: asyncio.StreamWriter) -> None:
    """Closes a connection at once, whatever it has not sent (an HTTP socket, not a call)."""
    writer.transport.abort()


def response(status: str, headers: list[tuple[str, str]], body: bytes, *, head_only: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)


class BuildInfo:
    """`jobgate_build_info`: what this process runs, as labels of a constant 1 (the
    Prometheus convention for versions): jobgate's version, its core's, the rustc that
    compiled the core and the Python it runs on. A collector, so that the one
    endpoint of `serve --workers N` shows it too."""

    def __init__(self) -> None:
        from importlib import metadata

        from jobgate import _core

        try:
            version = metadata.version("jobgate")
        except metadata.PackageNotFoundError:  # run from a source tree
            version = _core.__version__
        self.labels = {
            "version": version,
            "core_version": _core.__version__,
            "rustc_version": _core.RUSTC_VERSION,
            "python_version": platform.python_version(),
            "python_implementation": platform.python_implementation(),
        }

    def collect(self):
        family = InfoMetricFamily("jobgate_build", "jobgate's version, its core's, the rustc that built the core, and Python's")
        family.add_metric([], self.labels)
        yield family


# The store's errors a failure is counted for, by the reason it is counted under; the
# others (an unknown id, a terminal state, a full record) are the caller's.
STORE_FAILURES = ((StoreUnavailable, "unavailable"), (StoreFull, "full"))


def _count_failure(failures: Counter | None, name: str, error: Exception) -> None:
    reason = next((reason for kind, reason in STORE_FAILURES if isinstance(error, kind)), None)
    if reason is not None and failures is not None:
        failures.labels(name, reason).inc()


class _TimedPending:
    """A record being opened (`open_later`), timed from the hand-over to its commit,
    and its failure counted, as the operation it completes."""

    __slots__ = ("_pending", "_started", "_observed", "_failures")

    def __init__(self, pending: Any, started: float, observed: Any, failures: Counter | None) -> None:
        self._pending, self._started, self._observed, self._failures = pending, started, observed, failures

    def wait(self) -> None:
        try:
            self._pending.wait()
        except Exception as e:
            _count_failure(self._failures, "open_later", e)
            raise
        finally:
            self._observed.observe(time.perf_counter() - self._started)


class TimedStore:
    """A job store whose every public method is timed into `jobgate_store_seconds`
    under its name, and its failures counted into `jobgate_store_failures_total`
    (`open_later` until its record is committed); anything else passes through
    untouched."""

    def __init__(self, store: Any, histogram: Histogram, failures: Counter | None = None) -> None:
        self._store, self._histogram, self._failures = store, histogram, failures

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        observed = self._histogram.labels(name)
        failures = self._failures

        if name == "open_later":  # its work ends with the commit the caller waits for

            @functools.wraps(attribute)
            def handed(*args, **kwargs):
                started = time.perf_counter()
                try:
                    job_id, pending = attribute(*args, **kwargs)
                except Exception as e:
                    _count_failure(failures, name, e)
                    observed.observe(time.perf_counter() - started)
                    raise
                return job_id, _TimedPending(pending, started, observed, failures)

            setattr(self, name, handed)
            return handed

        @functools.wraps(attribute)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            except Exception as e:
                _count_failure(failures, name, e)
                raise
            finally:
                observed.observe(time.perf_counter() - started)

        setattr(self, name, timed)  # built once per method, then found without __getattr__
        return timed


class WorkerProcesses:
    """The `process_*` metrics of each worker of `serve --workers N`, read from /proc
    by the supervising process, and the RPCs each one completed
    (`jobgate_worker_rpcs_total`), read from its own file in `metrics_dir`; labelled
    `worker` (0..N-1). prometheus-client's multiprocess mode sums counters and
    histograms over the workers and has no process metrics; the kernel shares
    connections, not calls, among the workers, and the sums would hide how."""

    def __init__(self, pids: Callable[[], list[int]], metrics_dir: str) -> None:
        self._pids, self._metrics_dir = pids, metrics_dir

    def collect(self):
        families: dict[str, Metric] = {}
        rpcs = Metric("jobgate_worker_rpcs", "RPCs completed by each worker of serve --workers N", "counter")
        for n, pid in enumerate(self._pids()):
            for family in ProcessCollector(pid=lambda pid=pid: pid, registry=None).collect():
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, "worker": str(n)}, sample.value)
            rpcs.add_sample("jobgate_worker_rpcs_total", {"worker": str(n)}, self._handled(pid))
        return [*families.values(), rpcs]

    def _handled(self, pid: int) -> float:
        """`grpc_server_handled_total` of one worker, every method and code summed."""
        from prometheus_client.multiprocess import MultiProcessCollector

        path = os.path.join(self._metrics_dir, f"counter_{pid}.db")
        if not os.path.exists(path):  # no counter touched yet
            return 0.0
        return sum(sample.value for family in MultiProcessCollector.merge([path]) if family.name == "grpc_server_handled" for sample in family.samples if sample.name == "grpc_server_handled_total")
