"""A method handler's shape: whether its request and its response stream. Each layer
that wraps a method (`handlers`, `calls`, `grants`, `streams`) serves its own
behaviour in a handler of the shape of the one it wraps, made here.

Must not serve, watch or refuse a call itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

# (request streaming, response streaming) -> grpc's factory of a handler of that shape.
_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}
_SAME: Any = object()  # the wrapped handler's own (de)serializer


def behavior_of(handler: grpc.RpcMethodHandler) -> Callable:
    """The function that serves `handler`'s calls, whatever its shape."""
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def shaped_as(handler: grpc.RpcMethodHandler, behavior: Callable, *, request_deserializer: Any = _SAME, response_serializer: Any = _SAME) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s shape served by `behavior`, with `handler`'s request
    deserializer and response serializer unless others are given (None: bytes)."""
    return _FACTORIES[(bool(handler.request_streaming), bool(handler.response_streaming))](
        behavior,
        handler.request_deserializer if request_deserializer is _SAME else request_deserializer,
        handler.response_serializer if response_serializer is _SAME else response_serializer,
    )
