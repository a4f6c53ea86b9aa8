"""Every call watched once, from outside the servicers: the request log line and the
per-call metrics.

The request log is one JSON line per call: a request id (the caller's `x-request-id`,
or one made here, returned to the caller in the call's trailing metadata, and for a
stream in its initial metadata too, as it opens), the account, the RPC, the gRPC status, and for admissions the verdict, job id and
rule ids; and the latency. Denials are logged where they are decided (`grants`), with
their reason and the call's request id (`current_request_id`).

The metrics are the conventional ones of gRPC servers (go-grpc-prometheus's names,
which Grafana's gRPC dashboards read): `grpc_server_started_total`,
`grpc_server_handled_total` by status code, `grpc_server_handling_seconds`, and the
messages each call received and sent; plus `jobgate_rpcs_in_flight`, where a stream
counts for as long as it is open. The health service's `Watch` runs without a thread
of its own and is passed through unwatched.

Watching costs a call little: the wrapper of each method, with its metric series
already labelled, is built once, as the method is registered (`wrap`), and no server
interceptor runs: grpcio runs interceptors for every call in its one poller thread,
the thread every call passes through, while a wrapper runs in the call's own thread;
a series is counted into through its value's own increment, past the checks of
prometheus-client's `inc` and `observe` that a known-good amount never fails
(`adder`, `timing`); the log line is handed to a writer thread
(`logs.LineWriter`), which encodes and writes it. `python -m benchmarks.observer`
measures what a call costs in Python around grpcio.

Must not judge documents or change any response: it only watches calls pass.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import grpc

from jobgate.server.logs import LineWriter
from jobgate.server.metrics import Metrics
from jobgate.server.shapes import behavior_of, shaped_as
from jobgate.server.wire import Encoded

REQUEST_LOG = "jobgate.requests"  # the logger its lines name
REQUEST_ID = "x-request-id"
MAX_REQUEST_ID = 128  # a longer caller-given id is replaced, not logged whole
# The id of the call being handled: gRPC runs each call in a context of its own, from
# its first message to its status, streams included.
_current: ContextVar[str | None] = ContextVar("jobgate_request_id", default=None)


def current_request_id() -> str | None:
    """The request id of the call being handled, for the other log lines it causes;
    None outside a call, or with the request log off (no id is made)."""
    return _current.get()


def request_id(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID and isinstance(value, str) and 0 < len(value) <= MAX_REQUEST_ID and value.isprintable():
            return value
    # An id correlates lines; it grants nothing, so it needs no system entropy (a
    # system call on every call). `random` is seeded anew in every forked worker.
    return f"{random.getrandbits(64):016x}"


def return_id(context: grpc.ServicerContext, rid: str) -> None:
    """Adds the request id to the call's trailing metadata, beside what is there (an
    error's status details): it rides with the status, in the frame that ends the call."""
    kept = context.trailing_metadata() or ()
    context.set_trailing_metadata((*kept, (REQUEST_ID, rid)))


def outcome(response) -> dict:
    """What an admission response says, for the log: verdict, job id, rule ids."""
    if type(response) is Encoded:  # the rules listed already
        fields = {"verdict": response.verdict, "rules": response.rules}
    else:
        report = getattr(response, "report", None)
        if report is None or not hasattr(report, "verdict"):
            return {}
        fields = {"verdict": report.verdict, "rules": sorted({v.rule for v in report.violations})}
    if getattr(response, "job_id", ""):
        fields["job_id"] = response.job_id
    return fields


def status_of(context: grpc.ServicerContext, error: BaseException | None) -> str:
    code = context.code()
    if code is None and error is not None:
        # A stream dropped by its client is closed (GeneratorExit) where it waited.
        code = grpc.StatusCode.CANCELLED if isinstance(error, GeneratorExit) else grpc.StatusCode.UNKNOWN
    return (code or grpc.StatusCode.OK).name


def adder(child) -> Callable[[float], None]:
    """What `child.inc` (a counter's or a gauge's series) does once its arguments are
    checked: its value's own increment, called with a known-good amount."""
    value = getattr(child, "_value", None)
    return value.inc if callable(getattr(value, "inc", None)) else child.inc


def timing(child) -> Callable[[float], None]:
    """A histogram series' `observe`, its bucket found by bisection: its sum and the
    one bucket the value falls in (the exposition accumulates them)."""
    try:
        bounds, buckets, add_sum = tuple(child._upper_bounds), tuple(b.inc for b in child._buckets), child._sum.inc
    except AttributeError:  # another prometheus-client: its own observe
        return child.observe

    def observe(seconds: float) -> None:
        add_sum(seconds)
        buckets[bisect_left(bounds, seconds)](1)

    return observe


class Watched:
    """One method's metric series, labelled once: every call of it counts into them."""

    __slots__ = ("labels", "rpc", "started", "in_flight", "handling", "received", "sent", "_handled", "_metrics")

    def __init__(self, metrics: Metrics, labels: tuple[str, str, str]) -> None:
        self.labels, self.rpc = labels, labels[2]
        self.started = adder(metrics.started.labels(*labels))
        self.in_flight = adder(metrics.in_flight.labels(self.rpc))
        self.handling = timing(metrics.handling.labels(*labels))
        self.received = adder(metrics.received.labels(*labels))
        self.sent = adder(metrics.sent.labels(*labels))
        self._handled: dict[str, Callable[[float], None]] = {}  # by status: the few a method ends with
        self._metrics = metrics

    def handled(self, status: str) -> Callable[[float], None]:
        add = self._handled.get(status)
        if add is None:
            add = self._handled[status] = adder(self._metrics.handled.labels(*self.labels, status))
        return add


class CallObserver:
    """Watches every call, outermost: `wrap` gives each method's handler, once, at
    registration (`handlers.Registrar`), watching the handlers the grants and the
    stream limits wrapped within it, so the calls they refuse are watched too. With
    `request_log` None there is no request log and no request id is made or returned."""

    def __init__(self, identify: Callable[[grpc.ServicerContext], str | None], metrics: Metrics, request_log: LineWriter | None) -> None:
        self._identify = identify
        self._metrics = metrics
        self._log = request_log

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` of `method` ("/package.Service/Method"), every call of it watched."""
        service, _, name = method.lstrip("/").rpartition("/")
        behavior = behavior_of(handler)
        if getattr(behavior, "experimental_non_blocking", False):
            return handler  # the health service's Watch: no thread of its own to watch from
        streamed_in, streamed_out = bool(handler.request_streaming), bool(handler.response_streaming)
        kind = {(False, False): "unary", (True, False): "client_stream", (False, True): "server_stream", (True, True): "bidi_stream"}[(streamed_in, streamed_out)]
        watched = Watched(self._metrics, (kind, service, name))
        run = self._streaming(behavior, watched, streamed_in=streamed_in) if streamed_out else self._unary(behavior, watched, streamed_in=streamed_in)
        return shaped_as(handler, run)

    # ---- around every call

    def _begin(self, context: grpc.ServicerContext, watched: Watched, *, stream: bool) -> str | None:
        """The call begins: its id made (a stream's sent at once), its start counted."""
        rid = None
        if self._log is not None:
            rid = request_id(context)
            _current.set(rid)
            if stream:
                # A stream may stay open for hours: its id goes ahead in its own frame. A
                # unary call's goes with its status (`return_id`), sparing that frame.
                try:
                    context.send_initial_metadata(((REQUEST_ID, rid),))
                except grpc.RpcError:  # cancelled already: the call still ends, and is logged, as such
                    pass
        watched.started(1)
        watched.in_flight(1)
        return rid

    def _end(self, watched: Watched, context: grpc.ServicerContext, rid: str | None, started: float, received: int, sent: int, extra: dict, error: BaseException | None = None) -> None:
        elapsed = time.perf_counter() - started
        status = status_of(context, error)
        watched.in_flight(-1)
        watched.handled(status)(1)
        watched.handling(elapsed)
        if received:
            watched.received(received)
        if sent:
            watched.sent(sent)
        if rid is not None:
            return_id(context, rid)
            fields = {"request_id": rid, "account": self._identify(context), "rpc": watched.rpc, "status": status, "latency_ms": round(elapsed * 1000, 3), **extra}
            self._log.write(time.time(), "call", fields)

    def _unary(self, behavior, watched: Watched, *, streamed_in: bool):
        if streamed_in:

            def run_streamed_in(requests, context):
                rid = self._begin(context, watched, stream=True)
                started = time.perf_counter()
                counted = _Counted(requests)
                try:
                    response = behavior(counted, context)
                except BaseException as e:
                    self._end(watched, context, rid, started, counted.n, 0, {}, e)
                    raise
                self._end(watched, context, rid, started, counted.n, 1, outcome(response))
                return response

            return run_streamed_in

        def run(request, context):
            rid = self._begin(context, watched, stream=False)
            started = time.perf_counter()
            try:
                response = behavior(request, context)
            except BaseException as e:
                self._end(watched, context, rid, started, 1, 0, {}, e)
                raise
            self._end(watched, context, rid, started, 1, 1, outcome(response))
            return response

        return run

    def _streaming(self, behavior, watched: Watched, *, streamed_in: bool):
        def run(request, context):
            rid = self._begin(context, watched, stream=True)
            started = time.perf_counter()
            counted = _Counted(request) if streamed_in else None
            sent = 0
            try:
                for response in behavior(counted if streamed_in else request, context):
                    sent += 1
                    yield response
            except BaseException as e:
                self._end(watched, context, rid, started, counted.n if streamed_in else 1, sent, {"responses": sent}, e)
                raise
            self._end(watched, context, rid, started, counted.n if streamed_in else 1, sent, {"responses": sent})

        return run


class _Counted:
    """A stream of requests, counted as the servicer reads them."""

    __slots__ = ("_requests", "n")

    def __init__(self, requests: Iterator) -> None:
        self._requests, self.n = requests, 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self):
        request = next(self._requests)
        self.n += 1
        return request
