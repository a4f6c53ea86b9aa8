"""Every call watched once, from outside the servicers: the request log line and the
per-call metrics.

The request log is one JSON line per call: a request id (the caller's `x-request-id`,
or one made here, and returned to the caller in the response's initial metadata), the
account, the RPC, the gRPC status, and for admissions the verdict, job id and rule
ids; and the latency. Denials are logged where they are decided (`grants`), with
their reason and the call's request id (`current_request_id`).

The metrics are the conventional ones of gRPC servers (go-grpc-prometheus's names,
which Grafana's gRPC dashboards read): `grpc_server_started_total`,
`grpc_server_handled_total` by status code, `grpc_server_handling_seconds`, and the
messages each call received and sent; plus `jobgate_rpcs_in_flight`, where a stream
counts for as long as it is open. The health service's `Watch` runs without a thread
of its own and is passed through unwatched.

Must not judge documents or change any response: it only watches calls pass.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import grpc

from jobgate.server.metrics import Metrics

log = logging.getLogger("jobgate.requests")

REQUEST_ID = "x-request-id"
MAX_REQUEST_ID = 128  # a longer caller-given id is replaced, not logged whole
# The id of the call the current thread is handling: a call runs on one thread of the
# server's pool from its first message to its status, streams included.
_current: ContextVar[str | None] = ContextVar("jobgate_request_id", default=None)


def current_request_id() -> str | None:
    """The request id of the call being handled, for the other log lines it causes;
    None outside a call, or with the request log off (no id is made)."""
    return _current.get()


def request_id(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID and isinstance(value, str) and 0 < len(value) <= MAX_REQUEST_ID and value.isprintable():
            return value
    return secrets.token_hex(8)


def outcome(response) -> dict:
    """What an admission response says, for the log: verdict, job id, rule ids."""
    report = getattr(response, "report", None)
    if report is None or not hasattr(report, "verdict"):
        return {}
    fields = {"verdict": report.verdict, "rules": sorted({v.rule for v in report.violations})}
    if getattr(response, "job_id", ""):
        fields["job_id"] = response.job_id
    return fields


class _Call:
    """One call as it is watched: its labels, start and counts of messages."""

    __slots__ = ("labels", "rpc", "rid", "started", "received", "sent")

    def __init__(self, labels: tuple[str, str, str], rpc: str, rid: str | None) -> None:
        self.labels, self.rpc, self.rid = labels, rpc, rid
        self.started = time.perf_counter()
        self.received = self.sent = 0


class CallObserver(grpc.ServerInterceptor):
    def __init__(self, identify: Callable[[grpc.ServicerContext], str | None], metrics: Metrics) -> None:
        self._identify = identify
        self._metrics = metrics

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return handler
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        behavior = handler.unary_unary or handler.stream_stream or handler.unary_stream or handler.stream_unary
        if getattr(behavior, "experimental_non_blocking", False):
            return handler  # the health service's Watch: no thread of its own to watch from
        if handler.unary_unary:
            labels = ("unary", service, method)
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary, labels, method, streamed_in=False), handler.request_deserializer, handler.response_serializer)
        if handler.stream_unary:
            labels = ("client_stream", service, method)
            return grpc.stream_unary_rpc_method_handler(self._unary(behavior, labels, method, streamed_in=True), handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream:
            labels = ("bidi_stream", service, method)
            return grpc.stream_stream_rpc_method_handler(self._streaming(behavior, labels, method, streamed_in=True), handler.request_deserializer, handler.response_serializer)
        labels = ("server_stream", service, method)
        return grpc.unary_stream_rpc_method_handler(self._streaming(behavior, labels, method, streamed_in=False), handler.request_deserializer, handler.response_serializer)

    # ---- around every call

    def _begin(self, context: grpc.ServicerContext, labels: tuple[str, str, str], rpc: str, request, streamed_in: bool) -> tuple[_Call, object]:
        """The call begins: its id sent, its start counted; the request (a stream of
        them, counted as they are read) handed back for the servicer."""
        rid = None
        if log.isEnabledFor(logging.INFO):  # with the request log off, no id is made or sent
            rid = request_id(context)
            try:
                context.send_initial_metadata(((REQUEST_ID, rid),))
            except Exception:  # noqa: BLE001 - metadata already sent: the id still goes to the log
                pass
        _current.set(rid)
        self._metrics.started.labels(*labels).inc()
        self._metrics.in_flight.labels(rpc).inc()
        call = _Call(labels, rpc, rid)
        if streamed_in:
            return call, self._counted(request, call)
        call.received = 1
        return call, request

    def _end(self, call: _Call, context: grpc.ServicerContext, extra: dict, error: BaseException | None = None) -> None:
        _current.set(None)  # the pool's thread goes on to other calls
        code = context.code()
        if code is None and error is not None:
            # A stream dropped by its client is closed (GeneratorExit) where it waited.
            code = grpc.StatusCode.CANCELLED if isinstance(error, GeneratorExit) else grpc.StatusCode.UNKNOWN
        status = (code or grpc.StatusCode.OK).name
        elapsed = time.perf_counter() - call.started
        m = self._metrics
        m.in_flight.labels(call.rpc).dec()
        m.handled.labels(*call.labels, status).inc()
        m.handling.labels(*call.labels).observe(elapsed)
        m.received.labels(*call.labels).inc(call.received)
        m.sent.labels(*call.labels).inc(call.sent)
        if call.rid is not None:
            fields = {"request_id": call.rid, "account": self._identify(context), "rpc": call.rpc, "status": status, "latency_ms": round(elapsed * 1000, 3), **extra}
            log.info("call", extra={"fields": fields})

    def _counted(self, requests: Iterator, call: _Call) -> Iterator:
        for request in requests:
            call.received += 1
            yield request

    def _unary(self, behavior, labels: tuple[str, str, str], rpc: str, *, streamed_in: bool):
        def run(request, context):
            call, request = self._begin(context, labels, rpc, request, streamed_in)
            try:
                response = behavior(request, context)
            except BaseException as e:
                self._end(call, context, {}, e)
                raise
            call.sent = 1
            self._end(call, context, outcome(response))
            return response

        return run

    def _streaming(self, behavior, labels: tuple[str, str, str], rpc: str, *, streamed_in: bool):
        def run(request, context):
            call, request = self._begin(context, labels, rpc, request, streamed_in)
            try:
                for response in behavior(request, context):
                    call.sent += 1
                    yield response
            except BaseException as e:
                self._end(call, context, {"responses": call.sent}, e)
                raise
            self._end(call, context, {"responses": call.sent})

        return run
