"""Method handlers: each RPC of the servicers registered with the server through the
generated `add_…Servicer_to_server` functions, the one list of each service's methods
(`add_servicers`, `register`), every handler built once, at start.

Each handler takes its request as bytes and decodes it itself (`bytes_in`): a request
that is not one is a BadRequest naming it, never grpc's own INTERNAL; the methods a
servicer names in `BYTES_IN` are handed the bytes and answer bytes, a message, or the
core's encoding of one (`wire.sent`). A store that is
down is UNAVAILABLE, a full disk RESOURCE_EXHAUSTED, and anything unforeseen INTERNAL
with a reference to the log (`failure_mapped`): no caller ever sees an address, SQL or
a Python traceback.

Every service is registered through one `Registrar`, which wraps each method's handler
once, as it is registered, with what watches and guards every call (`calls`, `grants`,
`streams`): nothing runs per call to decide how a call is served.

Must not serve a call itself (the servicers, `service`) nor watch one (`calls`).
"""

from __future__ import annotations

import errno
import logging
import secrets
from collections.abc import Callable
from concurrent import futures

import grpc
from google.protobuf import descriptor_pool, message_factory

from jobgate.server import errors
from jobgate.server.service import AdmissionService, JobService
from jobgate.server.shapes import behavior_of, shaped_as
from jobgate.server.wire import decode, sent
from jobgate.store import StoreFull, StoreUnavailable
from jobgate.v1 import admission_pb2_grpc, jobs_pb2_grpc

log = logging.getLogger("jobgate.server")


def failure_mapped(context: grpc.ServicerContext, rpc: str, error: Exception) -> None:
    """Ends the call with the status code a client can act on for `error`, a failure of
    the store or the machine; returns for an abort or a cancellation, which its caller
    re-raises as it is (raised here, the exception's traceback would hold this frame,
    which holds the exception: a reference cycle per refused call)."""
    if isinstance(error, StoreUnavailable):
        errors.abort(context, grpc.StatusCode.UNAVAILABLE, str(error), errors.STORE_UNAVAILABLE)
    if isinstance(error, StoreFull):
        errors.abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(error), errors.STORE_FULL)
    if isinstance(error, grpc.RpcError) or context.code() is not None:
        return  # the call was aborted or cancelled: its status is already set
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        log.error("disk full", extra={"fields": {"rpc": rpc, "error": str(error)}})
        errors.abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "the server's disk is full (temporary files); retry later", errors.DISK_FULL)
    ref = secrets.token_hex(4)
    log.exception("internal error", extra={"fields": {"rpc": rpc, "ref": ref}})
    errors.abort(context, grpc.StatusCode.INTERNAL, f"internal error (ref {ref}); the server log has the details", errors.INTERNAL, {"ref": ref})


class Captured:
    """Stands in for the server while a generated `add_…Servicer_to_server` runs, and
    keeps the method handlers it builds, by service."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.services[service] = handlers

    def add_generic_rpc_handlers(self, _generic) -> None:
        pass  # the same handlers, given by name to add_registered_method_handlers


Wrap = Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]


class Registrar:
    """Stands in for the server while every service registers on it (the generated
    `add_…Servicer_to_server`, health, reflection): each method handler is wrapped by
    `wraps` (outermost first, each given the method's full name and the handler the
    next one made) once, as it is registered, and the wrapped one is served. The
    server runs no interceptor: grpcio would run one for every call in its poller
    thread, which every call passes through.

    A stream whose handler holds its thread while open runs on `stream_threads`, unary
    calls on the server's own pool: each pool is sized for its calls.

    A handler only a generic handler finds (one registered without its methods' names)
    is wrapped at its method's first call, and that wrapper serves every later one."""

    def __init__(self, server: grpc.Server, wraps: tuple[Wrap, ...], stream_threads: futures.ThreadPoolExecutor | None = None) -> None:
        self._server, self._wraps, self._stream_threads = server, wraps, stream_threads

    def wrapped(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        for wrap in reversed(self._wraps):
            handler = wrap(method, handler)
        return handler if self._stream_threads is None else on_threads(handler, self._stream_threads)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._server.add_registered_method_handlers(service, {name: self.wrapped(f"/{service}/{name}", handler) for name, handler in handlers.items()})

    def add_generic_rpc_handlers(self, generics) -> None:
        self._server.add_generic_rpc_handlers(tuple(_WrappedGeneric(generic, self.wrapped) for generic in generics))


def on_threads(handler: grpc.RpcMethodHandler, pool: futures.ThreadPoolExecutor) -> grpc.RpcMethodHandler:
    """`handler`, when it is a stream's that holds its thread while open, run on `pool`
    (gRPC's per-method thread pool) rather than the server's."""
    if not (handler.request_streaming or handler.response_streaming):
        return handler
    behavior = behavior_of(handler)
    if getattr(behavior, "experimental_non_blocking", False):
        return handler  # holds no thread while open (the health service's Watch)

    def run(request, context):
        return behavior(request, context)

    run.experimental_thread_pool = pool
    return shaped_as(handler, run)


class _WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose every handler found is wrapped, once per method."""

    def __init__(self, generic: grpc.GenericRpcHandler, wrapped: Wrap) -> None:
        self._generic, self._wrapped = generic, wrapped
        # method -> (the handler the generic found for it, the one that serves it wrapped)
        self._methods: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._generic.service(handler_call_details)
        if handler is None:
            return None  # not its method: gRPC asks the next, or answers UNIMPLEMENTED
        method = handler_call_details.method
        known = self._methods.get(method)
        if known is None or known[0] is not handler:
            known = self._methods[method] = (handler, self._wrapped(method, handler))
        return known[1]


def bytes_in(service: str, method: str, handler: grpc.RpcMethodHandler, *, raw: bool) -> grpc.RpcMethodHandler:
    """`handler` taking its request as bytes and decoding it itself (a request that is
    not one is a BadRequest, never grpc's own INTERNAL), its failures mapped
    (`failure_mapped`). A `raw` method is handed the bytes and answers what
    `wire.sent` sends."""
    request_type = None if raw else message_factory.GetMessageClass(descriptor_pool.Default().FindMethodByName(f"{service}.{method}").input_type)
    serialize = sent if raw else handler.response_serializer

    def parsed_stream(datas, context):
        for i, data in enumerate(datas):
            yield data if request_type is None else decode(request_type, data, context, what=f"stream message {i + 1} ")

    if handler.unary_unary:
        rpc = handler.unary_unary
        if request_type is None:

            def unary_raw(data, context):
                try:
                    return rpc(data, context)
                except Exception as e:
                    failure_mapped(context, method, e)
                    raise

            return shaped_as(handler, unary_raw, request_deserializer=None, response_serializer=serialize)

        def unary(data, context):
            try:
                return rpc(decode(request_type, data, context), context)
            except Exception as e:
                failure_mapped(context, method, e)
                raise

        return shaped_as(handler, unary, request_deserializer=None, response_serializer=serialize)

    if handler.unary_stream:
        rpc = handler.unary_stream

        def unary_stream(data, context):
            try:
                yield from rpc(data if request_type is None else decode(request_type, data, context), context)
            except Exception as e:
                failure_mapped(context, method, e)
                raise

        return shaped_as(handler, unary_stream, request_deserializer=None, response_serializer=serialize)

    if handler.stream_stream:
        rpc = handler.stream_stream

        def stream_stream(datas, context):
            try:
                yield from rpc(parsed_stream(datas, context), context)
            except Exception as e:
                failure_mapped(context, method, e)
                raise

        return shaped_as(handler, stream_stream, request_deserializer=None, response_serializer=serialize)

    rpc = handler.stream_unary

    def stream_unary(datas, context):
        try:
            return rpc(parsed_stream(datas, context), context)
        except Exception as e:
            failure_mapped(context, method, e)
            raise

    return shaped_as(handler, stream_unary, request_deserializer=None, response_serializer=serialize)


def register(add_to_server: Callable[[object, grpc.Server], None], servicer, server: grpc.Server | Registrar) -> list[str]:
    """Registers `servicer` through `add_to_server`, the generated
    `add_…Servicer_to_server` of its service, so that the generated code is the one
    list of the service's methods: a servicer without one of them fails here, at
    start (AttributeError), rather than answering UNIMPLEMENTED. Each handler takes
    its request as bytes (`bytes_in`); the methods the servicer names in `BYTES_IN`
    are handed the bytes and answer what `wire.sent` sends. Returns the full names of the services
    registered."""
    captured = Captured()
    add_to_server(servicer, captured)
    if not captured.services:
        raise RuntimeError(f"{add_to_server.__qualname__} registered no method handlers")
    raw = getattr(servicer, "BYTES_IN", frozenset())
    for service, handlers in captured.services.items():
        wrapped = {method: bytes_in(service, method, handler, raw=method in raw) for method, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        server.add_registered_method_handlers(service, wrapped)
    return list(captured.services)


# The servicer of each service of the protos, and the generated function that registers it.
SERVICERS = {
    "jobgate.v1.AdmissionService": (AdmissionService, admission_pb2_grpc.add_AdmissionServiceServicer_to_server),
    "jobgate.v1.JobService": (JobService, jobs_pb2_grpc.add_JobServiceServicer_to_server),
}


def add_servicers(server: grpc.Server | Registrar, *servicers) -> list[str]:
    """Registers `servicers`, one for each service of SERVICERS (a service left
    without one fails here, at start). Returns the full names of the services."""
    given = {type(s): s for s in servicers}
    names = []
    for name, (kind, add_to_server) in SERVICERS.items():
        if kind not in given:
            raise ValueError(f"no servicer given for {name} ({kind.__name__})")
        names += register(add_to_server, given.pop(kind), server)
    if given:
        raise ValueError(f"servicers of no service: {', '.join(k.__name__ for k in given)}")
    return names
