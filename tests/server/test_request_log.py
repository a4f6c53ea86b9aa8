"""The request log and the call metrics at almost no cost to a call: the log's writer
thread, its bounded queue and the lines it drops rather than make a call wait, the
lines written when the server stops, the request id where the README says it is, and
each method's wrapper (its metric series labelled) built once, not per call."""

from __future__ import annotations

import gc
import io
import json
import threading
import time

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from jobgate.server import logs
from jobgate.server.calls import CallObserver
from jobgate.server.handlers import Registrar
from jobgate.server.logs import ROOMY, LineWriter, bounded, encode
from jobgate.server.metrics import Metrics
from jobgate.v1 import admission_pb2
from tests.helpers import sample
from tests.server.helpers import Collected, Running, bearer, config_for

JOBSPEC = json.dumps(sample("jobspec.valid.json")).encode()
CHECK = health_pb2.HealthCheckRequest()


class Held(Collected):
    """stderr that a collector stopped reading: every write waits for `released`."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.released = threading.Event(), threading.Event()

    def write(self, data) -> int:
        self.entered.set()
        assert self.released.wait(60)
        return super().write(data)


def check(r: Running, request_id: str) -> int:
    return health_pb2_grpc.HealthStub(r.channel).Check(CHECK, metadata=[("x-request-id", request_id)], timeout=10).status


def sample_value(r: Running, name: str, **labels) -> float:
    return r.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_log_that_cannot_write_drops_lines_counted_and_no_call_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "QUEUED_LINES", 4)
    stream = Held()
    r = Running(config_for(tmp_path), log_stream=stream)
    try:
        assert check(r, "call-0") == health_pb2.HealthCheckResponse.SERVING
        assert stream.entered.wait(10)  # the writer holds call-0's line, its write waiting
        # Each call answers (no deadline passes) while nothing is written: four lines
        # wait in the queue, the other fifteen are dropped and counted.
        assert [check(r, f"call-{i}") for i in range(1, 20)] == [health_pb2.HealthCheckResponse.SERVING] * 19
        assert sample_value(r, "jobgate_log_lines_dropped_total") == 15
        assert sample_value(r, "grpc_server_handled_total", grpc_type="unary", grpc_service="grpc.health.v1.Health", grpc_method="Check", grpc_code="OK") == 20
    finally:
        stream.released.set()
        r.close()
    assert [(e["request_id"], e["rpc"], e["status"]) for e in stream.lines()] == [(f"call-{i}", "Check", "OK") for i in range(5)]


def test_every_line_queued_is_written_before_the_server_has_stopped(tmp_path):
    stream = Held()
    r = Running(config_for(tmp_path), log_stream=stream)
    stopping = threading.Thread(target=r.close)
    try:
        for i in range(30):
            check(r, f"call-{i}")
        assert stream.entered.wait(10) and stream.getvalue() == b""  # nothing written yet
        stopping.start()
        stopping.join(0.3)
        assert stopping.is_alive()  # the stop waits for the log
    finally:
        stream.released.set()
        if stopping.ident is None:
            r.close()
        else:
            stopping.join(30)
    assert not stopping.is_alive()
    assert [e["request_id"] for e in stream.lines()] == [f"call-{i}" for i in range(30)]


def test_the_request_id_is_returned_in_trailing_metadata_and_a_stream_sends_it_as_it_opens(tmp_path):
    stream = Collected()
    r = Running(config_for(tmp_path), log_stream=stream)
    try:
        _, call = r.admission.Admit.with_call(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True), metadata=[*r.auth, ("x-request-id", "gw-7")], timeout=10)
        assert ("x-request-id", "gw-7") in call.trailing_metadata()
        assert "x-request-id" not in dict(call.initial_metadata())  # no frame of its own ahead of the response
        # A refused call: the id made for it travels beside the status details, both whole.
        with pytest.raises(grpc.RpcError) as refused:
            r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC)), metadata=bearer("stolen"), timeout=10)
        made = dict(refused.value.trailing_metadata())["x-request-id"]
        assert len(made) == 16 and int(made, 16) >= 0
        info = error_details_pb2.ErrorInfo()
        assert rpc_status.from_call(refused.value).details[0].Unpack(info) and info.reason == "CREDENTIALS_REFUSED"
        # A stream: its id at once, in its initial metadata, and again with its status.
        requests = [admission_pb2.AdmitStreamRequest(request_id="d1", document=admission_pb2.Document(raw=JOBSPEC), dry_run=True)]
        streamed = r.admission.AdmitStream(iter(requests), metadata=[*r.auth, ("x-request-id", "gw-stream")], timeout=10)
        assert ("x-request-id", "gw-stream") in streamed.initial_metadata()
        assert [x.request_id for x in streamed] == ["d1"]
        assert ("x-request-id", "gw-stream") in streamed.trailing_metadata()
    finally:
        r.close()
    logged = {e["request_id"]: e for e in stream.lines()}
    assert (logged["gw-7"]["rpc"], logged["gw-7"]["status"], logged["gw-7"]["verdict"]) == ("Admit", "OK", "pass")
    assert (logged[made]["status"], logged[made]["account"]) == ("UNAUTHENTICATED", None)
    assert (logged["gw-stream"]["rpc"], logged["gw-stream"]["responses"]) == ("AdmitStream", 1)


def test_without_a_request_log_no_id_is_made_or_returned(tmp_path):
    r = Running(config_for(tmp_path))
    try:
        _, call = r.admission.Admit.with_call(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True), metadata=r.auth, timeout=10)
        assert "x-request-id" not in dict(call.trailing_metadata()) and "x-request-id" not in dict(call.initial_metadata())
        assert r.started.request_log is None
    finally:
        r.close()


def test_no_call_labels_a_metric_series_once_its_method_has_been_called(tmp_path, monkeypatch):
    r = Running(config_for(tmp_path), log_stream=Collected())
    admit = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True)
    try:
        check(r, "first")
        r.admission.Admit(admit, metadata=r.auth, timeout=10)
        resolved: list[tuple] = []
        m = r.metrics
        for metric in (m.started, m.handled, m.handling, m.received, m.sent, m.in_flight):
            monkeypatch.setattr(metric, "labels", lambda *labels, _labels=metric.labels: resolved.append(labels) or _labels(*labels))
        for i in range(10):
            check(r, f"again-{i}")
            r.admission.Admit(admit, metadata=r.auth, timeout=10)
        assert resolved == []
        for rpc, service in (("Check", "grpc.health.v1.Health"), ("Admit", "jobgate.v1.AdmissionService")):
            labels = {"grpc_type": "unary", "grpc_service": service, "grpc_method": rpc}
            assert [sample_value(r, name, **labels) for name in ("grpc_server_started_total", "grpc_server_msg_received_total", "grpc_server_msg_sent_total", "grpc_server_handling_seconds_count")] == [11] * 4
            assert sample_value(r, "grpc_server_handled_total", **labels, grpc_code="OK") == 11
        assert sample_value(r, "jobgate_rpcs_in_flight", rpc="Admit") == 0
    finally:
        r.close()


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, _method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        self.calls += 1
        return handler


class Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method, self.invocation_metadata = method, ()


class Served:
    """A server as the registrar sees it: what was registered on it."""

    def __init__(self) -> None:
        self.registered: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
        self.generics: list = []

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.registered[service] = handlers

    def add_generic_rpc_handlers(self, generics) -> None:
        self.generics += generics


def test_a_method_is_wrapped_once_with_the_interceptors_within_and_reused_by_every_call():
    inner = Counting()
    observer = CallObserver(lambda _context: None, Metrics(process=False), None)
    served = Served()
    registrar = Registrar(served, (observer.wrap, inner.wrap))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    other = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    # Registered by name: wrapped once, as it is registered.
    registrar.add_registered_method_handlers("x.Y", {"Z": handler})
    assert served.registered["x.Y"]["Z"] is not handler
    assert inner.calls == 1
    # Found by a generic handler: wrapped at the method's first call, then reused.
    registrar.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("x.Y", {"Z": handler, "W": other}),))
    (generic,) = served.generics
    found = [generic.service(Details("/x.Y/Z")) for _ in range(5)]
    assert all(s is found[0] for s in found) and found[0] is not handler
    assert inner.calls == 2
    # Another method is wrapped on its own; a method no one serves is not kept.
    assert generic.service(Details("/x.Y/W")) is not found[0]
    assert generic.service(Details("/x.Y/None")) is None
    assert inner.calls == 3


class Refusing(io.RawIOBase):
    def write(self, data) -> int:
        raise BrokenPipeError(32, "Broken pipe")


class Count:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


def test_lines_stderr_refuses_are_counted_and_the_writer_goes_on():
    dropped = Count()
    writer = LineWriter(Refusing(), "jobgate.requests", dropped)
    for i in range(3):
        writer.write(time.time(), "call", {"request_id": str(i)})
    time.sleep(0.2)
    writer.write(time.time(), "call", {"request_id": "3"})
    writer.close()
    assert dropped.value == 4


@pytest.mark.parametrize("target", ["file", "buffer"])
def test_the_core_writes_each_line_byte_for_byte_as_encode_would(tmp_path, target):
    """The core's writer stamps and joins a plain line exactly as `encode` writes the
    whole entry (the timestamp as `logs.timestamp`), to a file it writes itself and to
    a buffer through its write(); a line that needs bounding is bounded alike."""
    created = [1764641859.3204, 1764641859.9999996, 1764641859.0005, 1764641860.0, 1764641860.001, *(1764641860 + i * 0.000337 for i in range(400))]
    lines = [
        {"request_id": f"{i:016x}", "account": None if i % 3 else "alice", "rpc": "Admit", "status": "OK", "latency_ms": i / 7, "verdict": "pass", "rules": ["forge.kind"] * (i % 4), "job_id": f"grpo-{i}"}
        for i in range(len(created))
    ]
    lines[7] = {"rpc": "Admit", "account": "a" * 5000}  # past ROOMY.chars: bounded whole
    lines[8] = {"rpc": "Admit", "rules": [f"rule.{i}" for i in range(40)]}  # a long list: bounded whole
    lines[9] = {"surrogate": "\udcff"}  # not UTF-8: escaped whole
    dropped = Count()
    path = tmp_path / "requests.log"
    with path.open("wb") as file:
        stream = file if target == "file" else Collected()
        writer = LineWriter(stream, "jobgate.requests", dropped)
        for at, fields in zip(created, lines, strict=True):
            writer.write(at, "call", fields)
        writer.close()
    written = path.read_bytes() if target == "file" else stream.getvalue()
    expected = [encode({"ts": logs.timestamp(at), "level": "info", "logger": "jobgate.requests", "message": "call", **fields}) for at, fields in zip(created, lines, strict=True)]
    assert written.split(b"\n") == [*expected, b""]
    assert dropped.value == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"request_id": "16956ee8653bf337", "account": None, "rpc": "Admit", "status": "OK", "latency_ms": 1.601, "verdict": "pass", "rules": [], "job_id": "grpo-1"},
        {"rpc": "Admit", "rules": [f"rule.{i}" for i in range(12)]},
        {"rpc": "Admit", "rules": ["forge.kind"], "account": "a" * 2000},
        {"project": {"nested": [1, 2, {"deep": ["x"] * 20}]}, "ids": {"a", "b"}, "big": 2**70, "t": (1, 2)},
        {"surrogate": "\udcff"},
    ],
)
def test_a_line_is_bounded_alike_whether_or_not_its_fields_needed_it(fields):
    entry = {"ts": "2026-12-01T02:17:39.320Z", "level": "info", "logger": "jobgate.requests", "message": "call", **fields}
    line = encode(entry)
    assert json.loads(line) == json.loads(json.dumps({k: bounded(v, ROOMY) for k, v in entry.items()}))
    assert len(line) <= logs.MAX_LINE
    if "surrogate" not in fields:
        assert line == orjson.dumps({k: bounded(v, ROOMY) for k, v in entry.items()})


def test_a_series_counted_past_prometheus_clients_checks_exposes_what_inc_and_observe_would():
    from jobgate.server.calls import adder, timing

    fast, checked = Metrics(process=False), Metrics(process=False)
    labels = ("unary", "x.Y", "Z")
    observe, start, flight = timing(fast.handling.labels(*labels)), adder(fast.started.labels(*labels)), adder(fast.in_flight.labels("Z"))
    for seconds in (0.0, 50e-6, 50.1e-6, 1e-3, 0.3, 10.0, 11.0):  # on a bound, past one, past the last
        observe(seconds)
        start(1)
        flight(1)
        checked.handling.labels(*labels).observe(seconds)
        checked.started.labels(*labels).inc()
        checked.in_flight.labels("Z").inc()
    flight(-1)
    checked.in_flight.labels("Z").dec()

    def samples(m: Metrics) -> list:
        return [(s.name, s.labels, s.value) for family in m.registry.collect() for s in family.samples if not s.name.endswith("_created") and family.name != "jobgate_build"]

    assert samples(fast) == samples(checked)
    assert fast.registry.get_sample_value("grpc_server_handling_seconds_bucket", {**dict(zip(("grpc_type", "grpc_service", "grpc_method"), labels, strict=True)), "le": "5e-05"}) == 2


def test_a_call_leaves_no_reference_cycle_behind(tmp_path):
    """Each call's state is freed as its call ends, by reference counting: a cycle
    through grpcio's call state keeps the call (and its C call) until the garbage
    collector runs, and that collector's pauses stall every call in flight (~8% of a
    busy server's time and 16 ms pauses before the request log's caller cache held
    its call weakly)."""
    r = Running(config_for(tmp_path), log_stream=Collected())
    admit = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC))
    dry = admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=JOBSPEC), dry_run=True)
    try:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept in gc.garbage
        try:
            for _ in range(3):
                r.admission.Admit(dry, metadata=r.auth, timeout=10)
                r.admission.Admit(admit, metadata=r.auth, timeout=10)
                r.admission.AdmitBatch(admission_pb2.AdmitBatchRequest(documents=[admit.document] * 2, dry_run=True), metadata=r.auth, timeout=10)
                health_pb2_grpc.HealthStub(r.channel).Check(CHECK, timeout=10)
                streamed = r.admission.AdmitStream(iter([admission_pb2.AdmitStreamRequest(request_id="d1", document=admit.document, dry_run=True)]), metadata=r.auth, timeout=10)
                assert [x.request_id for x in streamed] == ["d1"]
                with pytest.raises(grpc.RpcError) as refused:
                    r.admission.Admit(dry, metadata=bearer("stolen"), timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.RpcError) as malformed:
                    r.admission.Admit(admission_pb2.AdmitRequest(), metadata=r.auth, timeout=10)
                assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            time.sleep(0.2)  # the last calls' done-callbacks run after their answers
            gc.collect()
            cycles = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage if type(o).__module__.startswith(("grpc._server", "jobgate"))})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    finally:
        r.close()
    assert cycles == []
