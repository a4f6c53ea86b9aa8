"""Every RPC of the protos is served: each service has a servicer, each method a
servicer method, and a real server answers every one."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest

import jobgate.v1
from jobgate.server.handlers import SERVICERS


def proto_services() -> dict[str, object]:
    """Every service the generated code of jobgate.v1 declares, by full name."""
    found = {}
    for module in pkgutil.iter_modules(jobgate.v1.__path__):
        if module.name.endswith("_pb2"):
            descriptor = importlib.import_module(f"jobgate.v1.{module.name}").DESCRIPTOR
            found.update({s.full_name: s for s in descriptor.services_by_name.values()})
    return found


SERVICES = proto_services()
METHODS = sorted((name, m.name) for name, s in SERVICES.items() for m in s.methods)


def test_every_service_of_the_protos_has_a_servicer():
    assert sorted(SERVICES) == sorted(SERVICERS)


@pytest.mark.parametrize(("service", "method"), METHODS)
def test_every_rpc_has_a_servicer_method(service, method):
    servicer, _ = SERVICERS[service]
    assert callable(getattr(servicer, method, None)), f"{servicer.__name__} has no {method}"


def test_a_servicer_without_an_rpc_fails_at_start():
    from jobgate.server.handlers import register

    servicer, add_to_server = SERVICERS["jobgate.v1.JobService"]
    partial = type("Partial", (), {m: getattr(servicer, m) for m in ("GetJob", "ListJobs", "MarkJob")})
    with pytest.raises(AttributeError, match="WatchJob"):
        register(add_to_server, partial(), grpc.server(None))


def test_the_methods_taking_bytes_are_rpcs():
    for name, (servicer, _) in SERVICERS.items():
        assert set(getattr(servicer, "BYTES_IN", ())) <= {m.name for m in SERVICES[name].methods}


@pytest.mark.parametrize(("service", "method"), METHODS)
def test_a_real_server_answers_every_rpc(running, service, method):
    """An empty request without credentials: refused as unauthenticated, never unimplemented."""
    descriptor = SERVICES[service].methods_by_name[method]
    shape = ("stream" if descriptor.client_streaming else "unary") + "_" + ("stream" if descriptor.server_streaming else "unary")
    call = getattr(running.channel, shape)(f"/{service}/{method}", request_serializer=bytes, response_deserializer=bytes)
    request = iter([b""]) if descriptor.client_streaming else b""
    with pytest.raises(grpc.RpcError) as e:
        answer = call(request, timeout=10)
        if descriptor.server_streaming:
            list(answer)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, (e.value.code(), e.value.details())
