"""A bare grpcio server that answers every unary call with fixed bytes: the transport
floor of the service benchmark. The same request sent here, answered with the same
response bytes, costs what the gRPC runtime alone costs: the service's calls/s over
the echo's is how much of it the servicer keeps. Several of them may share a port
(grpcio sets SO_REUSEPORT), as `jobgate serve --workers N` does.

    python -m benchmarks.echo_server PORT RESPONSE_FILE [METHOD=RESPONSE_FILE ...]

`/echo.Echo/Echo` answers RESPONSE_FILE; each `/echo.Echo/METHOD` its own file, so one
process stands beside one `jobgate serve` for every call the benchmark compares.
"""

from __future__ import annotations

import sys
from concurrent import futures
from pathlib import Path

import grpc


def main() -> None:
    port = int(sys.argv[1])
    answers = {"Echo": Path(sys.argv[2]).read_bytes()}
    for arg in sys.argv[3:]:
        method, _, path = arg.partition("=")
        answers[method] = Path(path).read_bytes()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.max_receive_message_length", 64 << 20)])
    handlers = {method: grpc.unary_unary_rpc_method_handler(lambda _request, _context, answer=answer: answer) for method, answer in answers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("echo.Echo", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
