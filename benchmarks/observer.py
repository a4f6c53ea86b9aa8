"""What jobgate runs in Python around grpcio for one call, in process: the method's
handler as registered (the call observer, the stream guard's count, the request
decoded, the servicer; and any server interceptor, of which there is none) and the request log's writer thread, for a health
`Check` and an `Admit` dry run of the 2 KB JobSpec, with the request log on (as
deployed) and off. The handlers are the ones `create_server` registers, called as
grpcio's own thread would call them, with a stand-in for grpcio's context; the
transport itself is not in it (`python -m benchmarks service` measures the whole
call against a bare grpcio server). CPU time of the whole process per call, the
writer's included, the least of several repeats: on a shared machine the least is
what the code costs, the rest is its neighbours.

    python -m benchmarks.observer [--quick]
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from benchmarks import documents, print_grouped, run_alone
from jobgate.config import load_config
from jobgate.server.app import create_server
from jobgate.v1 import admission_pb2


class Context:
    """What the handlers ask of grpcio's ServicerContext on a call that succeeds."""

    def __init__(self) -> None:
        self._trailing, self._code = None, None

    def invocation_metadata(self):
        return (("user-agent", "h2load nghttp2/1.52.0"),)

    def code(self):
        return self._code

    def trailing_metadata(self):
        return self._trailing

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = metadata

    def auth_context(self) -> dict:
        return {"transport_security_type": [b"insecure"]}

    def add_callback(self, _callback) -> bool:
        return True

    def is_active(self) -> bool:
        return True

    def time_remaining(self):
        return None


class Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method, self.invocation_metadata = method, ()


class Discarded(io.RawIOBase):
    def write(self, data) -> int:
        return len(data)


def per_call(started, method: str, body: bytes, n: int, repeats: int) -> float:
    """Least CPU µs per call over `repeats` runs of `n` calls, the log written."""
    state = started.server._server._state
    pipeline, registered = state.interceptor_pipeline, state.registered_method_handlers[method]
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        for _ in range(n):
            handler = pipeline.execute(lambda _details: registered, Details(method)) if pipeline is not None else registered
            request = handler.request_deserializer(body) if handler.request_deserializer else body
            response = handler.unary_unary(request, Context())
            if handler.response_serializer:
                handler.response_serializer(response)
        if started.request_log is not None:
            while started.request_log.pending():
                time.sleep(0.001)
            time.sleep(0.02)  # the last batch written
        best = min(best, (time.process_time() - began) / n * 1e6)
    return best


def run(quick: bool) -> dict:
    n, repeats = (2000, 5) if quick else (5000, 9)
    calls = {
        "health Check": ("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest().SerializeToString()),
        "Admit dry run, 2 KB JobSpec": ("/jobgate.v1.AdmissionService/Admit", admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=documents.jobspec()), dry_run=True).SerializeToString()),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="jobgate-observer-") as t:
        tmp = Path(t)
        for log in ("info", "off"):
            config = tmp / f"{log}.toml"
            config.write_text(f'[server]\nallow_anonymous = true\nrequest_log = "{log}"\n[store]\npath = "{tmp / ("store-" + log)}"\n[jobs]\nresults_root = "{tmp / "results"}"\n')
            started = create_server(load_config(str(config)), "127.0.0.1:0", log_stream=Discarded())
            try:
                for name, (method, body) in calls.items():
                    rows.append({"bench": f"Python around grpcio per call, in process (CPU, least of {repeats} runs of {n:,} calls)", "impl": f"{name}, request log {log}", "value": per_call(started, method, body, n, repeats), "unit": "µs/call"})
            finally:
                started.server.stop(0).wait()
                started.close()
    return {"rows": rows, "targets": []}


def print_table(result: dict) -> None:
    print_grouped(result["rows"], lambda r, _first: f"  {r['impl']:<52} {r['value']:7.1f} {r['unit']}")


if __name__ == "__main__":
    run_alone(run, print_table, sys.argv)
