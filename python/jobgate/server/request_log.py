"""The request log: one JSON line per call, for whoever runs the service.

Each line holds a request id (the caller's `x-request-id`, or one made here, and
returned to the caller in the response's initial metadata), the account, the RPC, the
gRPC status, and for admissions the verdict, job id and rule ids; and the latency.
Denials are logged where they are decided (`grants`), with their reason.

Must not judge documents or change any response: it only watches calls pass.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

import grpc

log = logging.getLogger("jobgate.requests")

REQUEST_ID = "x-request-id"
MAX_REQUEST_ID = 128  # a longer caller-given id is replaced, not logged whole


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


class RequestLog(grpc.ServerInterceptor):
    def __init__(self, identify: Callable[[grpc.ServicerContext], str | None]) -> None:
        self._identify = identify

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return handler
        rpc = handler_call_details.method.rsplit("/", 1)[-1]
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary, rpc), handler.request_deserializer, handler.response_serializer)
        behavior = handler.stream_stream or handler.unary_stream or handler.stream_unary
        if getattr(behavior, "experimental_non_blocking", False):
            return handler  # the health service's Watch: no thread of its own to log from
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(self._unary(behavior, rpc), handler.request_deserializer, handler.response_serializer)
        wrap = grpc.stream_stream_rpc_method_handler if handler.stream_stream else grpc.unary_stream_rpc_method_handler
        return wrap(self._streaming(behavior, rpc), handler.request_deserializer, handler.response_serializer)

    def _begin(self, context: grpc.ServicerContext) -> str | None:
        if not log.isEnabledFor(logging.INFO):
            return None  # the request log is off: a call costs nothing more
        rid = request_id(context)
        try:
            context.send_initial_metadata(((REQUEST_ID, rid),))
        except Exception:  # noqa: BLE001 - metadata already sent: the id still goes to the log
            pass
        return rid

    def _line(self, rid: str | None, rpc: str, context: grpc.ServicerContext, started: float, extra: dict, error: BaseException | None = None) -> None:
        if rid is None:
            return
        code = context.code() if error is None or context.code() is not None else grpc.StatusCode.UNKNOWN
        status = (code or grpc.StatusCode.OK).name
        fields = {"request_id": rid, "account": self._identify(context), "rpc": rpc, "status": status, "latency_ms": round((time.perf_counter() - started) * 1000, 3), **extra}
        log.info("call", extra={"fields": fields})

    def _unary(self, behavior, rpc: str):
        def run(request, context):
            started = time.perf_counter()
            rid = self._begin(context)
            try:
                response = behavior(request, context)
            except BaseException as e:
                self._line(rid, rpc, context, started, {}, e)
                raise
            self._line(rid, rpc, context, started, outcome(response))
            return response

        return run

    def _streaming(self, behavior, rpc: str):
        def run(request, context):
            started = time.perf_counter()
            rid = self._begin(context)
            sent = 0
            try:
                for response in behavior(request, context):
                    sent += 1
                    yield response
            except BaseException as e:
                self._line(rid, rpc, context, started, {"responses": sent}, e)
                raise
            self._line(rid, rpc, context, started, {"responses": sent})

        return run
