"""Building and running the server: `create_server` (tests bind port 0) is kept apart
from `serve` (signals, logs, the foreground process). `create_server` puts the parts
together (store, gate, identity, metrics, the servicers registered through the
generated code, health, reflection) and returns them as one `Started`. Owns what a
configuration must pass before it is served, at start and at every reload alike
(`check_startable`), and swapping a reloaded one in whole.

Must not handle a call itself: the servicers (`service`) do."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from jobgate.addresses import is_loopback
from jobgate.config import Config, ConfigError, Tls, account_problem, shared_token, shared_token_problem
from jobgate.server.auth import Authenticator
from jobgate.server.calls import REQUEST_LOG, CallObserver
from jobgate.server.gate import Gate
from jobgate.server.grants import Denials, FailClosed
from jobgate.server.handlers import Registrar, add_servicers
from jobgate.server.logs import JsonLogFormatter, LineWriter
from jobgate.server.metrics import EndpointUnavailable, Metrics, TimedStore
from jobgate.server.service import AdmissionService, JobService
from jobgate.server.shadow import Shadow, load_candidate
from jobgate.server.streams import StreamGuard, Watches
from jobgate.store import JobStore, StoreFull, StoreUnavailable, location, open_configured_store
from jobgate.store.committer import COMMITTER_CLOSE_WAIT_S

log = logging.getLogger("jobgate.server")


def wait_serving(address: str, timeout: float = 60) -> grpc.Channel:
    """A channel to `address` once the server there answers its health check; raises
    the last RPC error after `timeout` seconds."""
    channel = grpc.insecure_channel(address)
    health_stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if health_stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                return channel
        except grpc.RpcError:
            if time.monotonic() > deadline:
                channel.close()
                raise
        time.sleep(0.2)


class StartupError(Exception):
    """The server cannot start as configured; the message says why."""


def check_store_location(config: Config) -> None:
    if config.store.url:
        return  # a database server lives in no results tree
    store = Path(config.store.path).resolve()
    results = Path(config.jobs.results_root).resolve()
    if store == results or results in store.parents:
        raise StartupError(f"the store {store} lies inside results_root {results}; records must live outside every results tree (store.path)")


def plaintext_tokens(config: Config, listen: str) -> bool:
    """True when bearer tokens would arrive in plaintext off loopback."""
    return config.server.tls is None and not is_loopback(listen) and any(a.token for a in config.accounts.values())


def check_startable(config: Config, listen: str) -> None:
    """Every check a configuration must pass to be served on `listen`, at start and at
    each reload: a reload can never weaken what a start refuses. Raises StartupError.

    The account checks also run when a file is loaded; they run here again for
    configurations built in code."""
    if config.server.allow_anonymous and not is_loopback(listen):
        raise StartupError(f"server.allow_anonymous is for local demos: refusing to listen on {listen} without authentication")
    if plaintext_tokens(config, listen) and not config.server.allow_insecure:
        raise StartupError(
            f"refusing to accept bearer tokens in plaintext on {listen}: anyone on the network path could read them; "
            "configure [server.tls], listen on loopback, or set server.allow_insecure = true when TLS is terminated in front of the service"
        )
    for name, account in config.accounts.items():
        problem = account_problem(name, account, config.server)
        if problem:
            raise StartupError(f"accounts: {problem}")
    shared = shared_token(config.accounts)
    if shared:
        raise StartupError(f"accounts: {shared_token_problem(*shared)}")
    check_store_location(config)


class ServicerPools:
    """The servicer threads: `calls` for unary calls and health checks, `streams` for
    streams; each pool's threads are recorded as they start, so that a stopped server
    can tell which of its own are still inside a call."""

    def __init__(self, calls: int, streams: int) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.calls = futures.ThreadPoolExecutor(calls, thread_name_prefix="jobgate-rpc", initializer=self._started)
        self.streams = futures.ThreadPoolExecutor(streams, thread_name_prefix="jobgate-stream", initializer=self._started)

    def _started(self) -> None:
        with self._lock:
            self._threads.add(threading.current_thread())

    def still_running(self, wait: float) -> int:
        """Shuts both pools down (idle threads end) and returns how many of their
        threads are still alive `wait` seconds later: inside a call."""
        for pool in (self.calls, self.streams):
            pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            threads = list(self._threads)
        deadline = time.monotonic() + wait
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(thread.is_alive() for thread in threads)


class Server:
    """The running service. Stopping it ends its streams first: WatchJob streams and
    streams waiting on their client at once, the others after the message in hand;
    only then do unary calls in flight get the grace period to finish."""

    def __init__(
        self,
        server: grpc.Server,
        streams: StreamGuard,
        watches: Watches,
        health: Health,
        *,
        config: Config,
        listen: str,
        gate: Gate,
        auth: Authenticator,
        metrics: Metrics,
        pools: ServicerPools,
    ) -> None:
        self._server, self.streams, self.watches, self._health, self._pools = server, streams, watches, health, pools
        self.config, self.listen, self.gate, self.auth, self.metrics = config, listen, gate, auth, metrics
        self._reloading = threading.Lock()

    def reload(self, fresh: Config) -> None:
        """Serves `fresh` from the next call on, once it passes every check a start
        runs; else raises StartupError (or ConfigError, ValueError from the core) and
        the running configuration stays whole."""
        with self._reloading:
            # The socket keeps the address and the credentials it was opened with.
            check_startable(fresh, self.listen)
            if fresh.server.tls != self.config.server.tls:
                raise StartupError("server.tls cannot change while the server runs (its socket keeps the credentials it was opened with); restart it")
            # The store stays the one opened at start: it must lie outside the new results_root too.
            check_store_location(fresh.model_copy(update={"store": self.config.store}))
            candidate = load_candidate(fresh)  # the candidate file is read again: it may have changed
            self.gate.reload(fresh)  # builds the new validator before swapping: may raise, changing nothing
            self.auth.reload(fresh)
            old, self.gate.shadow = self.gate.shadow, Shadow(candidate, fresh.shadow, self.metrics, self.gate.store) if candidate is not None else None
            if old is not None:
                old.close()
            self.config = fresh

    def stop(self, grace: float | None) -> threading.Event:
        """Drains: health reports NOT_SERVING, streams end, no new call is taken, and
        the unary calls in flight get up to `grace` seconds to answer. Health watches,
        which never end by themselves, are ended too, so the server is down as soon as
        the last call has answered: grpcio's own graceful stop waits for exactly that,
        each call's answer sent, and nothing needs counting calls on their way."""
        self._health.enter_graceful_shutdown()
        self.streams.close()
        self.watches.close()
        done = self._server.stop(grace)  # no new call from here on
        self._health.end_watches()
        return done

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self._server.wait_for_termination(timeout)

    def still_running(self, wait: float) -> int:
        """Once stopped: how many servicer threads are still inside a call after `wait`
        seconds more. grpcio has cancelled their calls at the end of the grace period,
        but a thread waiting on a store that no longer answers (a PostgreSQL that hangs)
        stays there; the process must not wait for it to exit."""
        return self._pools.still_running(wait)


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


class Health(health.HealthServicer):
    """grpcio-health-checking's servicer, answering `List` too (every service this
    server reports, with its status), which the library leaves UNIMPLEMENTED, and
    ending its watches when the server stops (`end_watches`)."""

    def __init__(self, services: list[str]) -> None:
        super().__init__()
        self._services = ("", *services)
        for name in self._services:
            self.set(name, health_pb2.HealthCheckResponse.SERVING)

    def Watch(self, request, context, send_response_callback=None):  # noqa: N802 - gRPC method names
        # The library ends a watch by sending None, and does again as the call closes:
        # a watch this server ended first must not be ended twice.
        return super().Watch(request, context, _EndsOnce(send_response_callback) if send_response_callback is not None else None)

    def end_watches(self) -> None:
        """Ends every open watch (each has been told NOT_SERVING by
        `enter_graceful_shutdown`): a watch never ends by itself, and a server stopping
        gracefully waits for every call."""
        # The library keeps each watch's callback by service, under its lock, and has no
        # way to end them: read where it keeps them (grpcio-health-checking is pinned < 2).
        with self._lock:
            open_watches = [send for sends in self._send_response_callbacks.values() for send in sends]
        for send in open_watches:
            send(None)

    def List(self, request, context):  # noqa: N802 - gRPC method names
        statuses = {name: self.Check(health_pb2.HealthCheckRequest(service=name), context) for name in self._services}
        return health_pb2.HealthListResponse(statuses=statuses)


class _EndsOnce:
    """A watch's `send_response_callback` that sends nothing once it has ended it."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self._send, self._lock, self._ended = send, threading.Lock(), False

    def __call__(self, response) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = response is None
            self._send(response)


def enable_health(server: grpc.Server | Registrar, services: list[str]) -> Health:
    """The health service, reporting the server and each of `services` SERVING."""
    servicer = Health(services)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


def enable_reflection(server: grpc.Server | Registrar, services: list[str]) -> None:
    """Server reflection of `services` as `grpc.reflection.v1` (what grpcurl and
    current clients ask for) and `v1alpha` (older ones). grpcio-reflection serves only
    v1alpha; v1 is the same protocol, message for message and field for field, under
    another package, so one servicer answers both."""
    servicer = reflection.ReflectionServicer((*services, health.SERVICE_NAME, reflection.SERVICE_NAME, REFLECTION_V1))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": v1}),))
    server.add_registered_method_handlers(REFLECTION_V1, {"ServerReflectionInfo": v1})


@dataclass
class Started:
    """What `create_server` started: the server and the port it listens on, the gate,
    the job store (timed into the metrics), identity, the metrics and the port of
    their HTTP endpoint (None when this process serves none), and the request log's
    writer (None when there is no request log)."""

    server: Server
    port: int
    gate: Gate
    store: JobStore
    auth: Authenticator
    metrics: Metrics
    metrics_port: int | None = None
    # The store was opened by create_server (not handed to it): `close` closes it.
    owns_store: bool = False
    request_log: LineWriter | None = None

    def close(self, wait: float = COMMITTER_CLOSE_WAIT_S) -> None:
        """Once the server has stopped: writes the request log's last lines, stops the
        gate and its shadow (waiting at most `wait` seconds for each: a commit group under
        way, the candidate's judgements queued) and the metrics endpoint, and closes the
        store when create_server opened it (as long for the records handed to its writer)."""
        if self.request_log is not None:
            self.request_log.close()
        self.gate.close(wait)
        if self.gate.shadow is not None:
            self.gate.shadow.close(wait)
        self.metrics.close()
        if self.owns_store:
            self.store.close(wait)


# Servicer threads for unary calls when server.threads is unset. A call's Python holds
# the GIL: with fewer threads than calls in flight, a thread that finishes a call takes
# the next one queued, where each of many threads would be woken for its own call (a
# wake-up and a GIL hand-over a call). A commit to a database server is a round trip a
# thread waits through, and a commit group gathers only the calls that hold a thread.
# With SQLite, 2 threads served dry runs, health checks and records alike faster than 4
# (BENCHMARKS.md, "Two servicer threads"); a deployment whose calls wait long (large
# packages checked at once) sets server.threads higher.
LOCAL_STORE_THREADS, DATABASE_SERVER_THREADS = 2, 32
# How long a stopped server waits for its servicer threads to leave the calls grpcio
# cancelled at the end of the grace period, before the process exits without them.
CANCELLED_CALLS_WAIT_S = 2.0


def unary_threads(config: Config) -> int:
    """How many servicer threads serve unary calls and health checks."""
    if config.server.threads is not None:
        return config.server.threads
    return DATABASE_SERVER_THREADS if config.store.url else LOCAL_STORE_THREADS


def create_server(config: Config, address: str | None = None, *, store: JobStore | None = None, log_stream: BinaryIO | None = None) -> Started:
    """A configured, started server on `address` (port 0 picks a free port), on
    `store` or else the one the configuration names. The request log (when
    `server.request_log` is info) is written to `log_stream`; without one there is none."""
    listen = address or config.server.listen
    check_startable(config, listen)
    owns_store = store is None
    if store is None:
        try:
            store = open_configured_store(config)
        except (StoreUnavailable, StoreFull) as e:
            raise StartupError(f"the job store cannot be opened: {e}") from None
    with ExitStack() as undo:  # a start that fails stops again what it started
        if owns_store:
            undo.callback(store.close)
        metrics = Metrics()
        store = TimedStore(store, metrics.store, metrics.store_failures)
        try:
            candidate = load_candidate(config)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        shadow = Shadow(candidate, config.shadow, metrics, store) if candidate is not None else None
        if shadow is not None:
            undo.callback(shadow.close)
        gate = Gate(config, store, shadow)
        undo.callback(gate.close)
        auth = Authenticator(config, Denials(metrics))
        request_log = LineWriter(log_stream, REQUEST_LOG, metrics.log_lines_dropped) if log_stream is not None and config.server.request_log == "info" else None
        if request_log is not None:
            undo.callback(request_log.close)
        settings = config.server
        streams = StreamGuard(settings.max_streams, settings.max_streams_per_account, auth.identify)
        watches = Watches(store, settings.watch_poll_seconds)
        undo.callback(watches.close)
        limit = settings.max_message_bytes
        # Unary calls and health checks have `threads`, whatever the streams do. Every open
        # stream holds a thread of the streams' pool, which has `threads` more: a stream
        # beyond the limits finds one to be refused on at once.
        threads = unary_threads(config)
        pools = ServicerPools(threads, settings.max_streams + threads)
        server = grpc.server(
            pools.calls,
            # Only the workers of one `serve --workers N` share a port; anything else
            # already listening there makes this start fail.
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit), ("grpc.so_reuseport", int(bool(os.environ.get("JOBGATE_WORKER"))))],
        )
        # Every method handler wrapped once, as it is registered. The request log and
        # call metrics outermost: they see every call, those the grants table or the
        # stream limits refuse too.
        registrar = Registrar(server, (CallObserver(auth.identify, metrics, request_log).wrap, FailClosed(auth.denials, auth.identify).wrap, streams.wrap), pools.streams)
        services = add_servicers(registrar, AdmissionService(gate, auth, metrics), JobService(store, auth, watches, limit))
        health_servicer = enable_health(registrar, services)
        enable_reflection(registrar, services)
        port = listen_on(server, listen, config.server.tls)
        server.start()
        undo.callback(server.stop, None)
        metrics_port = None
        if config.server.metrics_listen and not os.environ.get("JOBGATE_WORKER"):  # a supervisor sums the workers'
            try:
                metrics_port = metrics.serve_http(config.server.metrics_listen)
            except EndpointUnavailable as e:
                raise StartupError(str(e)) from None
        undo.pop_all()  # started: from here on, closing is Started.close's
    running = Server(server, streams, watches, health_servicer, config=config, listen=listen, gate=gate, auth=auth, metrics=metrics, pools=pools)
    return Started(running, port, gate, store, auth, metrics, metrics_port, owns_store=owns_store, request_log=request_log)


def listen_on(server: grpc.Server, listen: str, tls: Tls | None) -> int:
    """Adds the port `listen` names (TLS when configured); returns its number."""
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        try:
            key, cert = Path(tls.key).read_bytes(), Path(tls.cert).read_bytes()
            client_ca = Path(tls.client_ca).read_bytes() if tls.client_ca else None
        except OSError as e:
            raise StartupError(f"server.tls: cannot read {e.filename}: {e.strerror}") from None
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None)
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise StartupError(f"cannot listen on {listen}")
    return port


def serve(config: Config, address: str | None = None, grace: float | None = None, config_path: str | None = None) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    started = create_server(config, address, log_stream=sys.stderr.buffer)
    server, port = started.server, started.port
    host = (address or config.server.listen).rsplit(":", 1)[0]
    serving = {"address": f"{host}:{port}", "store": location(config.store.path, config.store.url), "anonymous": config.server.allow_anonymous}
    if started.metrics_port is not None:
        serving["metrics"] = f"{config.server.metrics_listen.rpartition(':')[0] or '127.0.0.1'}:{started.metrics_port}"
    log.info("serving", extra={"fields": serving})
    if plaintext_tokens(config, address or config.server.listen):
        log.warning("bearer tokens are accepted in plaintext off loopback (server.allow_insecure): TLS must be terminated in front of the service", extra={"fields": {"address": f"{host}:{port}"}})
    grace = config.server.shutdown_grace_s if grace is None else grace
    # The stop signals received. A handler only notes one: the drain runs on the main
    # thread below, where a second signal (a worker's supervisor passing SIGTERM on, then
    # dying) cannot start a second drain inside the first and wait on it forever.
    signals: list[int] = []

    def stop(signum, _frame) -> None:
        signals.append(signum)

    def reload(_signum, _frame) -> None:
        if config_path is None:
            log.info("SIGHUP: no configuration file to reload (the embedded default is in use)")
            return
        from jobgate.config import ConfigError, load_config

        try:
            server.reload(load_config(config_path))
            log.info("configuration reloaded", extra={"fields": {"config": config_path, "accounts": len(server.config.accounts)}})
        except (ConfigError, StartupError, ValueError) as e:
            log.error("configuration reload failed; keeping the last good one", extra={"fields": {"config": config_path, "error": str(e)}})

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, reload)
    # Python runs signal handlers on the main thread, when it runs Python: a signal
    # delivered while it sleeps in an untimed wait could go unhandled until the next
    # one, so it wakes to look.
    while not signals:
        time.sleep(0.2)
    log.info("stopping: finishing in-flight calls", extra={"fields": {"signal": signal.Signals(signals[0]).name, "grace_s": grace}})
    server.stop(grace).wait()
    stuck = server.still_running(CANCELLED_CALLS_WAIT_S)
    if stuck:
        # Their callers were answered CANCELLED when the grace period ended. Waiting for
        # the threads would hold the process as long as they take (until a hung store
        # answers, perhaps never); a commit one of them sent may still land, as after
        # SIGKILL. Said before closing the rest, which waits for nothing now.
        log.error("stopped with calls still running after the grace period; exiting without them", extra={"fields": {"calls": stuck, "grace_s": grace}})
        started.close(wait=0.0)
        logging.shutdown()
        os._exit(1)
    started.close()
    log.info("stopped")
    return 0
